//! The airlock policy: the file format, its validation, host normalisation and the network
//! decision.
//!
//! This crate's one job is to turn a policy file into a validated [`Policy`] and answer
//! "may the agent reach this host on this port, and if not, why?" ([`Policy::decide`]),
//! "must the proxy look inside connections to this host?" ([`Policy::intercepts`]) and
//! "may this intercepted request go through?" ([`Policy::judge`], [`Policy::body_needed`],
//! [`Policy::judge_body`]).
//! It is pure: no network, no DNS, no async, no logging. It does not resolve names, apply
//! the mode, inject credentials, read secrets, read request bodies or enforce git rules:
//! the proxy, the entrypoint and the git API do, using the types defined here.
//!
//! Modules: [`host`] (normalisation), [`rule`] (host rules), [`address`] (hard-deny
//! ranges), [`reason`] (denial codes), [`l7`] (request rules and the verdict), [`path`]
//! (the readings of a request path), [`glob`] (path globs), [`github`] (the GitHub
//! preset), [`graphql`] (mutations of a GraphQL document), [`json`] (strict JSON bodies),
//! [`repo`] (`host/owner/repo`, read one way by the policy, the git API and the proxy),
//! [`detect`] (the secret detectors) and [`secrets`] (the policy's changes to them).
//!
//! # The policy file
//!
//! TOML, by default at `/etc/airlock/policy.toml` (see `examples/policy.toml` for a
//! commented example). **Unknown keys anywhere are errors**, so a typo can never silently
//! weaken the policy. A refused file yields one line,
//! `<path>:<line>:<col>: <reason>`, e.g.
//! `/etc/airlock/policy.toml:7:10: network.allow[2]: "*.": empty label in host pattern`
//! (list indices count from 0).
//!
//! ## `[sandbox]` (required)
//!
//! | key | value |
//! |---|---|
//! | `name` | required; 1-40 characters of `[a-z0-9-]`, not starting or ending with `-`. Names the sandbox in the audit log and in git branch patterns (`{sandbox}`). |
//! | `mode` | `"enforce"` (default): denials block. `"report"`: every decision is made and logged as in enforce mode, but policy denials are let through, for writing a policy. Hard denies (private and metadata addresses) and malformed requests block in both modes. |
//!
//! ## `[network]` (optional; absent means nothing is reachable)
//!
//! | key | value |
//! |---|---|
//! | `allow` | host rules the agent may reach. |
//! | `deny` | host rules that win over `allow`. |
//! | `passthrough` | host rules **without ports** that the proxy never intercepts: their TLS is tunnelled untouched even when a credential or an L7 rule names them (so no credential is injected there, no placeholder leak is seen there, no L7 rule applies). Not an allow: `allow` still decides whether the host is reachable. A credential whose hosts are all passthrough, a `[[rules]]` entry whose host is, and a preset whose rules are for a passthrough host are errors. Every other allowed host is intercepted (TLS-terminated with the appliance CA), so its methods can be enforced. For hosts that pin certificates, or speak neither TLS nor HTTP (a raw stream to a host that is not passthrough is refused, `not-inspectable`). |
//! | `writable` | host rules **without ports** that accept any method. Every other host is **read-only**: `GET`, `HEAD`, `OPTIONS` without a body (one with a body is refused `body-on-read`) and, on a host that serves git (`git_hosts`), git smart-HTTP fetches (`POST …/git-upload-pack` whose body the proxy reads as a fetch request) pass, any other method (or a `_method` override naming one) is refused with `read-only-host`, unless an `allow` rule of `[[rules]]` matches the request (it names that write) or the `github` preset is on and the host is `api.github.com` (the preset's rules judge its writes). Deny rules still apply to writable hosts. The git API's pushes do not go through this check (they are judged by `[git]`). |
//! | `git_hosts` | host rules **without ports** that serve git smart-HTTP fetches, besides the hosts of `[git] repositories` and the public forges of [`GIT_FORGES`] (`github.com`, `gitlab.com`, `bitbucket.org`, `codeberg.org`, `git.sr.ht`, `gitee.com`). Allows nothing by itself. |
//! | `strip_headers` | request headers the proxy removes from every request it reads, besides its built-in list of identity and routing headers (`x-forwarded-*`, `forwarded`, `via`, `x-real-ip`, `x-sandbox-id`, ...: docs/security.md, "Headers only a proxy may set"): names (any case) or prefixes ending in `*` (`"x-corp-*"`, at least two characters before it); never a header that frames the message (`host`, `content-length`, ...) or one a credential is injected into. |
//!
//! A **host rule** is one of:
//! - `host`: exactly that host (`api.anthropic.com`);
//! - `*.suffix`: strict subdomains of `suffix` only: `*.example.com` matches
//!   `a.example.com` and `a.b.example.com`, never `example.com` (list it too if wanted) and
//!   never `evilexample.com`;
//! - an IP literal, exact only: `203.0.113.7`, `[2001:db8::1]` (IPv6 in brackets);
//!
//! each with an optional `:port` (1-65535). In `allow`, a rule without a port allows ports
//! 80 and 443 only; in `deny`, a rule without a port denies every port. No `*` alone, no
//! `*` other than a leading `*.` label, no empty labels, no scheme, no path. The host of a
//! rule is normalised exactly like a request's host (see [`host`]): case, a trailing dot,
//! Unicode (IDNA/punycode) and the legacy IPv4 spellings (`0x7f.1`, `2130706433`) never
//! matter.
//!
//! A request is decided in this order, first match wins:
//! 1. an IP-literal host in a hard-deny range ([`address::hard_deny`]: loopback, private,
//!    link-local, CGNAT, multicast, reserved, NAT64 and other IPv4-embedding forms, cloud
//!    metadata) → denied, **whatever the rules say** (an allow rule for `127.0.0.1` or
//!    `10.0.0.1` parses but never matches); the proxy applies the same check to every
//!    address a name resolves to;
//! 2. a `deny` rule matches → `denied-by-rule`;
//! 3. an `allow` rule matches host and port → allowed;
//! 4. an `allow` rule matches the host on another port → `blocked-port`;
//! 5. otherwise `blocked-ip-literal` for an IP-literal host, `blocked-by-policy` for a name.
//!
//! The documentation ranges (`192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`,
//! `2001:db8::/32`) are ordinary public addresses here.
//!
//! ## `[[credentials]]` (optional, repeatable)
//!
//! One real secret, held only in the proxy's memory and written into one header of
//! requests to its hosts; the agent only ever sees a placeholder.
//!
//! | key | value |
//! |---|---|
//! | `preset` | optional: `"anthropic"`, `"openai"` or `"github"`; fills `name`, `hosts`, `header` and `format` where they are not written (see below). |
//! | `name` | required (unless `preset`: defaults to the preset's name), unique; 1-64 characters of `[a-z0-9_-]`. Appears in the audit log. |
//! | `source` | required, even with a preset; exactly one of `{ env = "VAR" }` (an environment variable of the container, scrubbed before the agent starts) or `{ file = "/abs/path" }` (e.g. a Docker secret). |
//! | `hosts` | required (unless `preset`), at least one host rule, same syntax as `network.allow` but **without ports**. |
//! | `header` | required (unless `preset`); an HTTP header name, lowercased on parse (e.g. `"x-api-key"`, `"authorization"`). Not a header that frames the message (`host`, `content-length`, `transfer-encoding`, `connection`, ...). |
//! | `format` | required (unless `preset`); the header value with exactly one `{}` where the secret goes (`"{}"`, `"Bearer {}"`), or the literal `"git-basic"`: HTTP basic auth as GitHub expects for a token, `Basic base64("x-access-token:" + token)`, accepted by git smart HTTP and by the REST API (`header` must then be `"authorization"`). |
//! | `methods` | optional; a method or a list (`"POST"`, `["GET", "POST"]`): the credential is injected only into requests with one of them. Default every method (`TRACE`, `TRACK` and `CONNECT` never carry a credential anyway). Not for `git-basic`. |
//! | `paths` | optional; path globs as in `[[rules]]` (`["/v1/**"]`): the credential is injected only when **every** reading of the request's path matches one (`/v1/../admin` does not). The `anthropic` and `openai` presets set `["/v1/**"]`. Any other request to the host goes without it, and without any authentication the agent added. Not for `git-basic` (its scope is `[git] repositories` and the GitHub API routes). |
//!
//! | preset | hosts | header | format |
//! |---|---|---|---|
//! | `anthropic` | `api.anthropic.com` | `x-api-key` | `"{}"` |
//! | `openai` | `api.openai.com` | `authorization` | `"Bearer {}"` |
//! | `github` | `github.com`, `api.github.com` | `authorization` | `"git-basic"` |
//!
//! ## `[git]` (optional; every key optional)
//!
//! | key | default | value |
//! |---|---|---|
//! | `repositories` | `[]` | repositories the git API may push to and fetch with the token, as `host/owner/repo` (no scheme, no `.git`); compared case-insensitively. |
//! | `push_branches` | `["sandbox/{sandbox}/*"]` | branch globs the agent may push to; `{sandbox}` becomes `sandbox.name`. The branch checked out at start is added at runtime. |
//! | `protected_branches` | `["main", "master", "release/*"]` | branch globs never pushed to, whatever `push_branches` says. |
//! | `restricted_paths` | `[".github/workflows/**"]` | path globs, relative to the repository root, that no pushed commit may touch. A pushed symbolic link is judged by its own path, as a directory (a glob that matches anything below it refuses it), and by where it points. |
//! | `restricted_paths_case_insensitive` | `true` | whether `restricted_paths` match names as a case-insensitive checkout (macOS, Windows) reads them: `.VSCode/`, `.vſcode/`, `.vscode./` and `.vs<U+200C>code/` are all `.vscode/` there (Unicode lowercase, the letters that fold to ASCII ones, the code points HFS+ ignores and NTFS's trailing dots and spaces dropped). `false` matches names exactly as written (case-sensitive). |
//! | `allow_tags` | `false` | whether tags may be pushed. |
//!
//! Setting a key replaces its default (it does not add to it).
//!
//! ## `[[rules]]` (optional, repeatable): L7 request rules
//!
//! Checked by the proxy on every request of an **intercepted** connection; a host named
//! by a rule is intercepted (so the agent must trust the appliance CA for it, or use the
//! base-URL mode). Rules never make a host reachable: `[network]` decides that first.
//!
//! | key | value |
//! |---|---|
//! | `host` | required; a host rule **without port** (`"api.github.com"`, `"*.example.com"`). |
//! | `method` | optional, default `"*"` (any); a method or a list of methods (`"DELETE"`, `["PUT", "PATCH"]`), compared case-insensitively. |
//! | `path` | optional, default `"/**"`; a path glob (see [`glob`]): `*` matches within one segment, a `**` segment any number of segments (zero included), the rest literally and case-insensitively. Written decoded, starting with `/`, without query, `.`/`..` or empty segments. |
//! | `action` | optional: `"deny"` (default) or `"allow"`. |
//! | `name` | optional, 1-100 characters: the rule's name in the audit log and in the agent's 403 (otherwise `"<host> <methods> <path>"`). |
//!
//! For a request on host H: **deny wins** (any matching deny rule, of `[[rules]]` or of a
//! preset, denies with `request-denied-by-rule` and the rule's name); then, if H has
//! `allow` rules, the request must match one of them or it is denied with rule
//! `"H: no allow rule matches"`; otherwise it passes. Queries are not matched.
//!
//! Paths cannot be spelled around a rule ([`path`] has the details): the path is judged
//! in every reading an upstream might use: each segment percent-decoded (`%2F` kept
//! inside its segment), and fully decoded (repeatedly: `%252F` is `/`; `\` is `/`); in
//! each, `//`, a trailing `/` and `.` vanish and `..` removes a segment; for deny rules,
//! each segment fully decoded with `%2F` kept inside it, and variants with `;params` and
//! a last-segment `.ext` stripped are added. A deny rule matching **any**
//! reading denies; an allow rule must match **every** decoded reading (so
//! `/v1/x%2F..%2F..%2Fadmin` is not under `allow /v1/*`). A path decoding to a control
//! character (`%00`) or invalid UTF-8 (`%C0%AF`), encoded more than 4 times, longer than
//! 8 KiB or not origin-form is denied on a host with rules. A `_method=` query parameter
//! counts as a second method of the request; the proxy strips method-override headers
//! ([`l7::METHOD_OVERRIDE_HEADERS`]).
//!
//! ## `[l7]` (optional)
//!
//! | key | default | value |
//! |---|---|---|
//! | `presets` | `[]` | named rule sets added after `[[rules]]` (deny rules only, so they cannot be re-allowed). Known: `"github"`. |
//!
//! `"github"` ([`github`] has the full table) intercepts `api.github.com` and denies what
//! a sandbox must never do with a lent token: merging (REST and GraphQL, auto-merge and
//! merge queue included), approving or dismissing reviews, any REST ref update (git
//! changes go through the git API only), writing contents except to a branch of
//! `git.push_branches` that is not in `git.protected_branches` and outside
//! `git.restricted_paths`, deleting/changing/transferring repositories, secrets (even
//! reading), branch protection and rulesets, Actions writes (dispatch, re-run, approve,
//! permissions, runners, variables), environments, deployments, releases, commit statuses
//! and checks, deploy keys, collaborators, webhooks, organization, team, user and gist
//! writes. GraphQL requests are read in full (at most 256 KiB; anything unparseable is
//! denied) and denied if a mutation operation runs a denied mutation, however aliased or
//! spread through fragments. Requests whose body is judged must be JSON and carry no
//! query string (Rails-style parameter merging would let `?branch=main` override the body).
//!
//! ## `[[detectors]]` and `[secrets]` (optional): secret detectors
//!
//! The proxy refuses a secret of a well-known format on its way to a host that is not its
//! provider's (`foreign-secret`, the detector named in the audit line and the 403; redacted
//! in a body to an LLM API host instead). [`detector`] holds the built-in, versioned set
//! (`github-token`, `github-fine-grained-token`, `aws-access-key`, `aws-secret-key`,
//! `private-key`, `gcp-service-account`, `slack-token`, `stripe-live-key`, `openai-key`,
//! `anthropic-key`, `npm-token`, `pypi-token`), each with its provider's hosts, and `jwt`,
//! which has no provider host and is logged (`action = "log"`) rather than refused; [`detect`]
//! compiles it as the policy changes it. A
//! `[[detectors]]` entry **with** `pattern` adds a detector; one **without** changes the
//! built-in detector of that name ([`secrets`] has the details and an example):
//!
//! | key | value |
//! |---|---|
//! | `name` | required; 1-64 characters of `[a-z0-9_-]`, unique. With `pattern`: not a built-in's name. Without: a built-in's (an unknown name is an error that lists them), and the entry must set `action` or `hosts`. |
//! | `pattern` | a new detector's regex, `regex` crate syntax, matched on bytes with ASCII classes (`(?-u)`), in linear time: look-around and backreferences are errors. It must compile within 128 KiB, and its shortest match must be 8 to 512 bytes (an empty-matching pattern is an error). |
//! | `hosts` | host rules without ports, **added** to the detector's provider hosts: where its secret may go (`hosts = ["hooks.example.com"]` on `slack-token`). A new detector without `hosts` may go nowhere. |
//! | `action` | what happens on the way to any other host. `"deny"` (default): refused, `foreign-secret`; in a body to an LLM API host redacted instead. `"redact"`: in a body or WebSocket frame overwritten with `*` (same length) on every host, `event: secret-redacted`, the request goes on; in the URL or a header refused. `"log"`: let through, its line says `decision: report`, `reason: foreign-secret` and the detector in `rule`. `"off"`: the detector is not run. |
//!
//! At most 64 entries. The entrypoint classifies the workspace's secret files with the same
//! set, so a workspace value a detector recognises may go where that detector's may and has
//! its action.
//!
//! `[secrets] allow = ["...", ...]`: documented example values (each at least 16 bytes),
//! never secrets: a detector's hit that contains one is none, nor is a workspace value.
//! Added to the built-in ones (AWS's `AKIAIOSFODNN7EXAMPLE`).

pub mod address;
mod decide;
pub mod detect;
pub mod detector;
pub mod effective;
mod error;
mod git;
pub mod github;
pub mod github_api;
pub mod glob;
pub mod graphql;
pub mod host;
pub mod json;
pub mod judge;
pub mod l7;
mod layered;
pub mod limits;
pub mod listing;
mod load;
mod model;
pub mod overlay;
pub mod path;
mod provenance;
pub mod reason;
pub mod registries;
pub mod repo;
pub mod rule;
pub mod secrets;
pub mod signals;

pub use error::PolicyError;
pub use host::{Host, HostError, split_host_port};
pub use l7::{
    Action, BodyJudge, BodyRule, L7Rule, L7Rules, L7Verdict, Methods, Preset, RequestView,
};
pub use load::{MAX_CREDENTIAL_NAME_LEN, MAX_RULE_NAME_LEN, MAX_SANDBOX_NAME_LEN};
pub use model::{
    Credential, CredentialFormat, CredentialScope, CredentialSource, DEFAULT_DNS_NAME_BUDGET,
    DEFAULT_PROTECTED_BRANCHES, DEFAULT_PUSH_BRANCHES, DEFAULT_RESTRICTED_PATHS, GIT_FORGES,
    GitPolicy, HostDecision, Mode, Network, Policy, SANDBOX_PLACEHOLDER, Sandbox, Unlisted,
};
pub use reason::Reason;
pub use rule::{HostPattern, HostRule, RuleError};
