//! The validated policy: what the rest of airlock reads. Built only by `Policy::parse`.

use std::path::PathBuf;

use crate::glob::PathGlob;
use crate::glob::{GitGlobError, GitGlobs, GitRules, NameCase};
use crate::host::Host;
use crate::l7::{L7Rules, Methods};
use crate::path::PathForms;
use crate::reason::Reason;
use crate::rule::HostRule;

/// A loaded, validated policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `[sandbox]`.
    pub sandbox: Sandbox,
    /// `[network]`.
    pub network: Network,
    /// `[[credentials]]`, in file order; names are unique.
    pub credentials: Vec<Credential>,
    /// `[git]`, with defaults filled in and `{sandbox}` expanded.
    pub git: GitPolicy,
    /// `[[rules]]` and `[l7] presets`, compiled.
    pub l7: L7Rules,
    /// `git`'s globs, compiled once ([`Policy::git_rules`]).
    pub(crate) git_rules: GitRules,
    /// `[signals]`, defaults filled in.
    pub signals: crate::signals::Signals,
    /// `[limits]`, defaults filled in.
    pub limits: crate::limits::Limits,
    /// `[[detectors]]` and `[secrets]`: the policy's changes to the built-in secret
    /// detectors (compiled with them by [`crate::detect::Formats::with_policy`]).
    pub secrets: crate::secrets::Secrets,
    /// Where the lists' rules came from ([`Policy::listing`]); decides nothing.
    pub(crate) provenance: crate::provenance::Provenance,
}

impl Policy {
    /// The `[git]` globs as compiled at load, or compiled now when `git` was changed since
    /// (the fields are public): the globs judged are always the ones in `git`.
    ///
    /// # Errors
    /// [`GitGlobError`] when a changed glob does not compile.
    pub fn git_rules(&self) -> Result<std::borrow::Cow<'_, GitRules>, GitGlobError> {
        if self.git.compiled_as(&self.git_rules) {
            Ok(std::borrow::Cow::Borrowed(&self.git_rules))
        } else {
            self.git.compile().map(std::borrow::Cow::Owned)
        }
    }
}

/// `[sandbox]`: who this appliance is and how it enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// 1-40 characters of `[a-z0-9-]`, not starting or ending with `-`.
    pub name: String,
    /// Enforce (default) or report.
    pub mode: Mode,
}

/// Whether policy denials are enforced.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Denials block (the default).
    #[default]
    Enforce,
    /// Decide and log as in enforce mode, but let policy denials through (for writing a
    /// policy). Hard denies ([`Reason::is_hard_deny`]) and malformed input still block.
    Report,
}

/// `[network]`: which hosts the agent may reach.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Network {
    /// Allowed hosts; a rule without a port allows ports 80 and 443.
    pub allow: Vec<HostRule>,
    /// Denied hosts; win over `allow`. A rule without a port denies every port.
    pub deny: Vec<HostRule>,
    /// Hosts never intercepted (rules without ports): tunnelled untouched even when a
    /// credential or an L7 rule would otherwise apply. Not an allow: `allow` still decides.
    pub passthrough: Vec<HostRule>,
    /// Hosts that accept any method (rules without ports). Every other host is read-only:
    /// `GET`, `HEAD`, `OPTIONS` and git smart-HTTP fetches, unless an `allow` rule of
    /// `[[rules]]` matches the request or a preset makes the host writable
    /// ([`crate::Policy::is_writable`]).
    pub writable: Vec<HostRule>,
    /// Hosts that accept a WebSocket upgrade although a credential is bound to them or L7
    /// rules apply (rules without ports). The upgrade request is judged and injected like any
    /// other request; after the `101` the proxy reads the frames: the agent's payloads are
    /// searched for the credentials' secrets and for secrets of known formats, the
    /// upstream's are scrubbed. Every other such host refuses the upgrade (`upgrade-denied`).
    pub websocket: Vec<HostRule>,
    /// Bytes of distinct query names the agent may resolve below one wildcard-allowed zone
    /// per session (`dns_name_budget`); `None`: [`DEFAULT_DNS_NAME_BUDGET`].
    pub dns_name_budget: Option<u32>,
    /// Request headers removed from every request the proxy reads, besides its built-in
    /// list of identity and routing headers (`strip_headers`): lowercase names, or
    /// prefixes written with a trailing `*` (`x-corp-*`).
    pub strip_headers: Vec<String>,
    /// Hosts that serve git smart-HTTP fetches besides the hosts of `[git] repositories`
    /// and [`GIT_FORGES`] (`git_hosts`, rules without ports): on a read-only host, a
    /// `POST …/git-upload-pack` whose body is a git fetch request passes only there.
    pub git_hosts: Vec<HostRule>,
    /// What a host no rule lists gets (`unlisted`): refused, or asked of the operator.
    pub unlisted: Unlisted,
}

/// What a host that no `allow` or `deny` rule lists gets (`[network] unlisted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unlisted {
    /// Refused, `blocked-by-policy` (the default).
    #[default]
    Deny,
    /// Refused `approval-required` at once, and filed for the operator to approve or deny
    /// out of band (never for a listed deny, an IP literal, a port or a hard deny).
    Ask,
}

/// Public git forges known to serve git smart-HTTP fetches (a read-only host among them
/// takes a `POST …/git-upload-pack` that is a real fetch request). Only an allowed host is
/// ever reached: this list allows nothing.
pub const GIT_FORGES: [&str; 6] = [
    "github.com",
    "gitlab.com",
    "bitbucket.org",
    "codeberg.org",
    "git.sr.ht",
    "gitee.com",
];

/// The default `network.dns_name_budget`: 16 KiB of distinct names below each `*.` zone.
pub const DEFAULT_DNS_NAME_BUDGET: u32 = 16 * 1024;
/// The largest `network.dns_name_budget` a policy may set (1 MiB).
pub const MAX_DNS_NAME_BUDGET: u32 = 1 << 20;

impl Network {
    /// Whether `network.websocket` names `host` (see [`Network::websocket`]).
    #[must_use]
    pub fn websocket_allowed(&self, host: &Host) -> bool {
        self.websocket.iter().any(|r| r.matches_host(host))
    }

    /// The DNS name budget in force.
    #[must_use]
    pub fn dns_name_budget(&self) -> usize {
        self.dns_name_budget.unwrap_or(DEFAULT_DNS_NAME_BUDGET) as usize
    }

    /// Whether `network.strip_headers` names the (lowercase) header `name`, exactly or by
    /// a `prefix*` entry.
    #[must_use]
    pub fn strips_header(&self, name: &str) -> bool {
        self.strip_headers
            .iter()
            .any(|s| match s.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == s,
            })
    }
}

/// `[[credentials]]`: one real secret, bound to hosts and one header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// Unique name (`[a-z0-9_-]`), used in the audit log.
    pub name: String,
    /// Where the proxy reads the real secret at start-up.
    pub source: CredentialSource,
    /// Hosts it may be sent to (rules without ports).
    pub hosts: Vec<HostRule>,
    /// The header it goes in, lowercase.
    pub header: String,
    /// How the header value is built from the secret.
    pub format: CredentialFormat,
    /// Which requests on its hosts it is injected into.
    pub scope: CredentialScope,
}

impl Credential {
    /// Whether this credential is bound to `host`.
    #[must_use]
    pub fn applies_to(&self, host: &Host) -> bool {
        self.hosts.iter().any(|r| r.matches_host(host))
    }
}

/// `methods` and `paths` of a credential: the requests on its hosts it is injected into
/// (the presets name their API's paths). Any other request to the host goes without it
/// (and without any authentication the agent added: one identity per credential host).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CredentialScope {
    /// The methods (`Methods::Any` when not written).
    pub methods: Methods,
    /// Path globs; empty: every path.
    pub paths: Vec<PathGlob>,
}

impl CredentialScope {
    /// Whether a request with `method` and raw `path` (without the query) is in scope:
    /// its method is listed and **every** strict reading of its path ([`PathForms`])
    /// matches one of the globs, so no spelling (`/v1/../admin`, `%2F`) widens it.
    #[must_use]
    pub fn allows(&self, method: &str, path: &str) -> bool {
        if !self.methods.matches(&method.to_ascii_uppercase()) {
            return false;
        }
        if self.paths.is_empty() {
            return true;
        }
        PathForms::analyse(path).is_ok_and(|forms| {
            forms
                .strict()
                .iter()
                .all(|f| self.paths.iter().any(|g| g.matches(f)))
        })
    }
}

/// Where a credential's real value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// An environment variable of the entrypoint (scrubbed before the agent starts).
    Env(String),
    /// A file, e.g. a Docker secret (absolute path).
    File(PathBuf),
    /// The environment variable when it is set (not empty), else the file: an agent profile
    /// names both so one policy serves `docker run -e KEY` and the host CLI's secret files
    /// (`airlock secret set NAME`, `--secret NAME` → `/run/secrets/NAME`). The agent gets
    /// the placeholder under the variable's name either way.
    EnvOrFile {
        /// The variable, read first.
        env: String,
        /// The file, read when the variable is unset or empty.
        file: PathBuf,
    },
}

impl CredentialSource {
    /// The environment variable the credential reads (and the agent's placeholder is set
    /// under), if any.
    pub fn env(&self) -> Option<&str> {
        match self {
            CredentialSource::Env(var) | CredentialSource::EnvOrFile { env: var, .. } => Some(var),
            CredentialSource::File(_) => None,
        }
    }

    /// The secret file the credential reads, if any.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            CredentialSource::File(path) | CredentialSource::EnvOrFile { file: path, .. } => {
                Some(path)
            }
            CredentialSource::Env(_) => None,
        }
    }
}

/// How a credential's header value is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialFormat {
    /// A template with exactly one `{}`, replaced by the secret (e.g. `Bearer {}`).
    Template(String),
    /// HTTP basic auth as GitHub expects for a token over git smart HTTP
    /// (`Basic base64("x-access-token:" + token)`).
    GitBasic,
}

impl CredentialFormat {
    /// The header value for a template; `None` for [`CredentialFormat::GitBasic`], which
    /// needs base64 and is built by the proxy.
    #[must_use]
    pub fn render_template(&self, secret: &str) -> Option<String> {
        match self {
            CredentialFormat::Template(t) => Some(t.replacen("{}", secret, 1)),
            CredentialFormat::GitBasic => None,
        }
    }
}

/// Default for `git.push_branches` (before `{sandbox}` expansion).
pub const DEFAULT_PUSH_BRANCHES: [&str; 1] = ["sandbox/{sandbox}/*"];
/// Default for `git.protected_branches`.
pub const DEFAULT_PROTECTED_BRANCHES: [&str; 3] = ["main", "master", "release/*"];
/// Default for `git.restricted_paths`.
pub const DEFAULT_RESTRICTED_PATHS: [&str; 1] = [".github/workflows/**"];
/// The placeholder in `git.push_branches` replaced by `sandbox.name`.
pub const SANDBOX_PLACEHOLDER: &str = "{sandbox}";

/// `[git]`: what the git API may do upstream. Enforcement lives in the git API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPolicy {
    /// Authorized repositories as `host/owner/repo`, lowercase (hosts, owners and
    /// repository names are compared case-insensitively).
    pub repositories: Vec<String>,
    /// Branch globs the agent may push to, `{sandbox}` already replaced by the sandbox
    /// name. The start branch is added at runtime by the git API.
    pub push_branches: Vec<String>,
    /// Branch globs never pushed to, whatever `push_branches` says.
    pub protected_branches: Vec<String>,
    /// Path globs (relative to the repository root) no pushed commit may touch.
    pub restricted_paths: Vec<String>,
    /// Whether `restricted_paths` match names as a case-insensitive checkout (macOS,
    /// Windows) reads them (`.VSCode/`, `.vscode./` are `.vscode/` there): true by default;
    /// false matches the names exactly as written.
    pub restricted_paths_case_insensitive: bool,
    /// Whether tags may be pushed.
    pub allow_tags: bool,
}

impl GitPolicy {
    /// Compile the globs of this `[git]` section.
    ///
    /// # Errors
    /// [`GitGlobError`] naming the first glob that does not compile.
    pub fn compile(&self) -> Result<GitRules, GitGlobError> {
        Ok(GitRules {
            push_branches: GitGlobs::new(&self.push_branches)?,
            protected_branches: GitGlobs::new(&self.protected_branches)?,
            restricted_paths: GitGlobs::with_case(
                &self.restricted_paths,
                self.restricted_paths_case(),
            )?,
        })
    }

    /// Whether `rules` were compiled from exactly these globs.
    #[must_use]
    pub fn compiled_as(&self, rules: &GitRules) -> bool {
        rules.push_branches.written() == self.push_branches
            && rules.protected_branches.written() == self.protected_branches
            && rules.restricted_paths.written() == self.restricted_paths
            && rules.restricted_paths.case() == self.restricted_paths_case()
    }

    /// How `restricted_paths` compare names.
    #[must_use]
    pub fn restricted_paths_case(&self) -> NameCase {
        if self.restricted_paths_case_insensitive {
            NameCase::Folded
        } else {
            NameCase::Exact
        }
    }
}

impl GitPolicy {
    /// The defaults for a sandbox named `sandbox_name` (no repositories).
    #[must_use]
    pub fn defaults_for(sandbox_name: &str) -> GitPolicy {
        GitPolicy {
            repositories: Vec::new(),
            push_branches: DEFAULT_PUSH_BRANCHES
                .iter()
                .map(|p| p.replace(SANDBOX_PLACEHOLDER, sandbox_name))
                .collect(),
            protected_branches: DEFAULT_PROTECTED_BRANCHES.map(String::from).to_vec(),
            restricted_paths: DEFAULT_RESTRICTED_PATHS.map(String::from).to_vec(),
            restricted_paths_case_insensitive: true,
            allow_tags: false,
        }
    }
}

/// The network decision for one host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostDecision {
    /// Allowed by the allow rule `rule` (as written).
    Allow {
        /// The matching allow rule, as written in the file.
        rule: String,
    },
    /// Denied, with the rule responsible when there is one.
    Deny {
        /// Why.
        reason: Reason,
        /// The deny rule that matched, or the allow rule whose port did not; `None` when
        /// no rule is responsible (hard deny, nothing matched).
        rule: Option<String>,
    },
}

impl HostDecision {
    /// True for [`HostDecision::Allow`].
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        matches!(self, HostDecision::Allow { .. })
    }

    /// The denial reason, if denied.
    #[must_use]
    pub fn reason(&self) -> Option<Reason> {
        match self {
            HostDecision::Allow { .. } => None,
            HostDecision::Deny { reason, .. } => Some(*reason),
        }
    }

    /// The rule responsible, if any.
    #[must_use]
    pub fn rule(&self) -> Option<&str> {
        match self {
            HostDecision::Allow { rule } => Some(rule),
            HostDecision::Deny { rule, .. } => rule.as_deref(),
        }
    }
}
