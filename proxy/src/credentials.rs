//! Credentials: the real secrets (from the entrypoint's hand-off), where they go, and
//! where they must never be seen.
//!
//! Pure: loading and matching the hand-off, the header rewrite of one request, and the
//! needle sets that `scan` searches. The effects (bodies, answers, audit) are in
//! `intercept`.
//!
//! Rules, for a request the proxy can read (intercepted TLS, base-URL mode, plain HTTP):
//! - On a host a credential is bound to, the bound header is **always** removed (the
//!   agent's value never travels) and, when the credential applies to the request, the real
//!   value is set (`Template` rendered, or git-basic:
//!   `Basic base64("x-access-token:" + token)`). A git-basic credential applies on the
//!   agent's ports only to git reads (`git-upload-pack`, `info/refs?service=git-upload-pack`)
//!   of repositories listed in `[git] repositories`; on the git service port to every
//!   smart-HTTP request of those repositories. Credentials are only ever injected over TLS
//!   to the upstream (plain HTTP forwarding never injects).
//! - Every other header, the path and query (raw and percent-decoded) and, when nothing
//!   was injected, the body are searched for every placeholder, the git placeholder, every
//!   real value and the injected encodings; one found is a `credential-leak`.
//!   The git placeholder is allowed in exactly one place: as the basic-auth password of a
//!   git read of an authorized repository, in `authorization` (where it is replaced).
//! - Responses to a request that received a credential are scrubbed: every real value and
//!   injected encoding in a header or the body is overwritten with `*`, in every form an
//!   upstream could echo it in ([`scrub_forms`]: percent- and JSON-escaped, hex, inside
//!   base64 and base32, reversed, in either case); a compressed body is decoded first
//!   (`decode`).
//!
//! A credential the operator did not configure (the hand-off's `missing`) is bound all the
//! same (its header removed on its hosts, its placeholder a leak needle) but has no value:
//! a request it would have authenticated is refused `credential-missing`, naming it and the
//! operator's fix ([`Credentials::missing_for`]). The git credential spares reads the
//! upstream may answer anonymously (a git fetch, a `GET` of the GitHub API): a public
//! repository needs no token.
//!
//! Tunnelled (not intercepted) TLS cannot be read: a placeholder sent through a tunnel is
//! not seen. It is worthless there (only this proxy can turn it into the secret).

use std::io;
use std::path::{Path, PathBuf};

use airlock_handoff::{HANDOFF_VERSION, Handoff, WorkspaceSecret};
use airlock_policy::github_api;
use airlock_policy::{CredentialFormat, Host, HostRule, Policy};
use base64::Engine as _;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::scan::{Form, Needles, Tag};

/// Loading the hand-off failed: the proxy refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file exists but cannot be read.
    #[error("cannot read the credential hand-off {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// Not the hand-off JSON.
    #[error("the credential hand-off {path} is malformed: {detail}")]
    Parse { path: PathBuf, detail: String },
    /// It does not match the policy (a credential missing, unknown, or a value that cannot
    /// be a header).
    #[error("the credential hand-off {path} does not match the policy: {detail}")]
    Mismatch { path: PathBuf, detail: String },
}

/// One credential, ready to inject.
#[derive(Debug)]
pub struct Bound {
    /// The policy's name (audit `credential`).
    pub name: String,
    hosts: Vec<HostRule>,
    header: HeaderName,
    /// `None`: not configured at start (see `fix`).
    value: Option<HeaderValue>,
    git_basic: bool,
    /// A git credential bound to github.com: it is bound to the REST API host too.
    github_api: bool,
    /// For a git credential bound to github.com: `Bearer <token>`, its form on the REST
    /// API host, injected only where [`GitScope::Api`] says so.
    api: Option<HeaderValue>,
    /// For a credential not configured at start: how the operator provides it.
    fix: Option<String>,
    /// The requests on its hosts it is injected into (`methods`, `paths`).
    scope: airlock_policy::CredentialScope,
}

/// A credential not configured at start that a request would have needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing<'a> {
    /// The policy's name.
    pub name: &'a str,
    /// How the operator provides it (the entrypoint's words).
    pub fix: &'a str,
    /// Whether it is a git credential (its refusal of a push speaks git).
    pub git: bool,
}

impl Bound {
    /// Whether this credential is bound to `host` (the GitHub API host of a git credential
    /// for github.com included: the agent's own value of its header is never sent there).
    #[must_use]
    pub fn bound_to(&self, host: &Host) -> bool {
        self.hosts.iter().any(|r| r.matches_host(host)) || self.on_api(host)
    }

    fn on_api(&self, host: &Host) -> bool {
        self.github_api && host.as_str() == github_api::API_HOST
    }

    /// Whether this credential authenticates a request of scope `git` to `host` (which
    /// it is bound to).
    fn applies(&self, host: &Host, git: GitScope) -> bool {
        if self.on_api(host) {
            return git == GitScope::Api;
        }
        !self.git_basic || matches!(git, GitScope::Read | GitScope::Service)
    }

    /// The value injected on `host` for a request of scope `git`, if any.
    fn value_for(&self, host: &Host, git: GitScope) -> Option<&HeaderValue> {
        if !self.applies(host, git) {
            return None;
        }
        if self.on_api(host) {
            self.api.as_ref()
        } else {
            self.value.as_ref()
        }
    }
}

/// Which requests a git-basic credential applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitScope {
    /// Not a git request of an authorized repository.
    None,
    /// A git read (upload-pack) of an authorized repository, on the agent's ports.
    Read,
    /// A smart-HTTP request of an authorized repository on the git service port.
    Service,
    /// A GitHub REST request the token is lent for (`airlock_policy::github_api`): a read
    /// or a pull-request write of an authorized repository.
    Api,
}

/// Why a request was refused as a leak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// Name of the credential whose placeholder or value was seen (`git` for the git
    /// placeholder).
    pub credential: String,
    /// Where: `header <name>`, `url`, `body`.
    pub place: String,
}

/// The loaded credentials.
#[derive(Debug, Default)]
pub struct Credentials {
    bound: Vec<Bound>,
    git_placeholder: Option<String>,
    leak: Option<Needles>,
    /// `leak_except[i]`: every leak needle but credential `i`'s (the body of a request that
    /// received credential `i` may hold that one's own values, never another's).
    leak_except: Vec<Option<Needles>>,
    scrub: Option<Needles>,
    /// The workspace's secret values (the detectors' exact needles, `detect`).
    workspace: Vec<WorkspaceSecret>,
    /// The git service port's key and the sandbox's start branch (`None`: no git).
    git_service: Option<ServicePass>,
}

/// What the git service port is judged with (from the hand-off's `git_service`): the key
/// the git API's tickets are sealed with, and the branch the sandbox started on.
#[derive(Debug, Clone)]
pub struct ServicePass {
    /// This start's service key.
    pub key: airlock_ticket::ServiceKey,
    /// The branch the sandbox started on: pushable like `git.push_branches`.
    pub start_branch: Option<String>,
}

/// What [`Credentials::apply`] injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// Names, comma-separated (audit `credential`).
    pub names: String,
    /// The credential's index when exactly one was injected.
    pub only: Option<usize>,
}

const GIT_INDEX: usize = usize::MAX;

/// Headers that carry authentication for some provider. On a host a credential is bound
/// to, the agent's values of all of them are removed: only the injected credential speaks
/// for the request.
/// (`HeaderName`s, not strings: a `&str` key is parsed again on every lookup, nine times
/// per request.)
pub const AUTH_HEADERS: [HeaderName; 9] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("api-key"),
    HeaderName::from_static("x-goog-api-key"),
    HeaderName::from_static("x-auth-token"),
    HeaderName::from_static("private-token"),
    HeaderName::from_static("x-amz-security-token"),
];

impl Credentials {
    /// No credentials (no hand-off file).
    #[must_use]
    pub fn none() -> Self {
        Self::default()
    }

    /// Reads `<state dir>/credentials.json`. An absent file means no credentials.
    ///
    /// # Errors
    /// An unreadable or malformed file, or one that does not match the policy.
    pub fn load(path: &Path, policy: &Policy) -> Result<Self, CredentialsError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !policy.credentials.is_empty() {
                    tracing::warn!(
                        "no credential hand-off at {}: bound headers are removed, nothing is injected",
                        path.display()
                    );
                }
                return Ok(Self::none());
            }
            Err(source) => {
                return Err(CredentialsError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let handoff: Handoff =
            serde_json::from_slice(&text).map_err(|e| CredentialsError::Parse {
                path: path.to_owned(),
                detail: e.to_string(),
            })?;
        Self::from_handoff(handoff, policy).map_err(|detail| CredentialsError::Mismatch {
            path: path.to_owned(),
            detail,
        })
    }

    /// Matches the hand-off with the policy's `[[credentials]]` (every one must be there,
    /// nothing else may).
    ///
    /// # Errors
    /// A one-line reason.
    pub fn from_handoff(h: Handoff, policy: &Policy) -> Result<Self, String> {
        if h.version != HANDOFF_VERSION {
            return Err(format!(
                "version {} (this proxy reads {HANDOFF_VERSION})",
                h.version
            ));
        }
        let mut bound = Vec::new();
        let mut needles = Vec::new();
        let mut scrub = Vec::new();
        let names = h
            .credentials
            .iter()
            .map(|c| &c.name)
            .chain(h.missing.iter().map(|m| &m.name));
        for (k, name) in names.clone().enumerate() {
            if !policy.credentials.iter().any(|p| &p.name == name) {
                return Err(format!("credential {name:?} is not in the policy"));
            }
            if names.clone().skip(k + 1).any(|n| n == name) {
                return Err(format!("credential {name:?} is handed over twice"));
            }
        }
        for (i, pc) in policy.credentials.iter().enumerate() {
            let resolved = h.credentials.iter().find(|c| c.name == pc.name);
            let missing = h.missing.iter().find(|m| m.name == pc.name);
            let (secret, placeholder, fix) = match (resolved, missing) {
                (Some(c), _) => (Some(c.value.expose()), &c.placeholder, None),
                (None, Some(m)) => (None, &m.placeholder, Some(m.fix.clone())),
                (None, None) => return Err(format!("credential {:?} is missing", pc.name)),
            };
            if secret.is_some_and(str::is_empty) || placeholder.is_empty() {
                return Err(format!("credential {:?} is empty", pc.name));
            }
            let git_basic = matches!(pc.format, CredentialFormat::GitBasic);
            let header_value = |rendered: String| {
                let mut v = HeaderValue::from_str(&rendered).map_err(|_| {
                    format!(
                        "credential {:?}: the value cannot be sent in a header",
                        pc.name
                    )
                })?;
                v.set_sensitive(true);
                Ok::<_, String>(v)
            };
            let value = match secret {
                Some(secret) if git_basic => Some(header_value(self::git_basic(secret))?),
                Some(secret) => Some(header_value(
                    pc.format.render_template(secret).unwrap_or_default(),
                )?),
                None => None,
            };
            let header = HeaderName::from_bytes(pc.header.as_bytes())
                .map_err(|_| format!("credential {:?}: bad header name", pc.name))?;
            let tag = |form| Tag {
                credential: i,
                form,
            };
            needles.push((placeholder.as_bytes().to_vec(), tag(Form::Placeholder)));
            if let Some(secret) = secret {
                needles.push((secret.as_bytes().to_vec(), tag(Form::Real)));
                scrub.extend(
                    scrub_forms(secret)
                        .into_iter()
                        .map(|f| (f, tag(Form::Real))),
                );
                if git_basic {
                    let b64 = git_basic_b64(secret);
                    needles.push((b64.as_bytes().to_vec(), tag(Form::Injected)));
                    scrub.push((b64.into_bytes(), tag(Form::Injected)));
                }
            }
            let github = Host::parse(github_api::GITHUB_HOST).ok();
            let github_api = git_basic && github.is_some_and(|gh| pc.applies_to(&gh));
            let api = match secret {
                Some(secret) if github_api => Some(header_value(format!("Bearer {secret}"))?),
                _ => None,
            };
            bound.push(Bound {
                name: pc.name.clone(),
                hosts: pc.hosts.clone(),
                header,
                value,
                git_basic,
                github_api,
                api,
                fix,
                scope: pc.scope.clone(),
            });
        }
        if let Some(g) = &h.git_placeholder {
            if g.is_empty() {
                return Err("the git placeholder is empty".into());
            }
            needles.push((
                g.as_bytes().to_vec(),
                Tag {
                    credential: GIT_INDEX,
                    form: Form::Placeholder,
                },
            ));
        }
        let leak_except = (0..bound.len())
            .map(|i| {
                Needles::new(
                    needles
                        .iter()
                        .filter(|(_, t)| t.credential != i)
                        .cloned()
                        .collect(),
                )
            })
            .collect();
        let git_service = match h.git_service {
            Some(g) => Some(ServicePass {
                key: airlock_ticket::ServiceKey::from_hex(g.key.expose(), "the hand-off")
                    .map_err(|e| e.to_string())?,
                start_branch: g.start_branch,
            }),
            None => None,
        };
        Ok(Self {
            bound,
            git_placeholder: h.git_placeholder,
            leak: Needles::new(needles),
            leak_except,
            scrub: Needles::ignoring_case(scrub),
            workspace: h.workspace_secrets,
            git_service,
        })
    }

    /// The git service port's key and start branch, when this start has git.
    #[must_use]
    pub const fn git_service(&self) -> Option<&ServicePass> {
        self.git_service.as_ref()
    }

    /// The values found in the workspace's secret files at start.
    #[must_use]
    pub fn workspace_secrets(&self) -> &[WorkspaceSecret] {
        &self.workspace
    }

    /// Whether there is anything to look for at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.leak.is_none()
    }

    /// The needles whose presence in a request is a leak.
    #[must_use]
    pub fn leak_needles(&self) -> Option<&Needles> {
        self.leak.as_ref()
    }

    /// The needles searched in the body of a request that received `injected`: every
    /// other credential's. `None` when there is nothing to search (or several credentials
    /// were injected into one request, whose bodies are then not searched).
    #[must_use]
    pub fn body_needles(&self, injected: Option<&Injected>) -> Option<&Needles> {
        match injected {
            None => self.leak.as_ref(),
            Some(Injected { only: Some(i), .. }) => self.leak_needles_except(*i),
            Some(Injected { only: None, .. }) => None,
        }
    }

    /// Every leak needle but credential `i`'s.
    #[must_use]
    pub fn leak_needles_except(&self, i: usize) -> Option<&Needles> {
        self.leak_except.get(i)?.as_ref()
    }

    /// The needles scrubbed from responses.
    #[must_use]
    pub fn scrub_needles(&self) -> Option<&Needles> {
        self.scrub.as_ref()
    }

    /// Whether any credential is bound to `host`.
    #[must_use]
    pub fn any_bound_to(&self, host: &Host) -> bool {
        self.bound.iter().any(|b| b.bound_to(host))
    }

    /// The credentials not configured at start among `names` (comma-separated, as
    /// [`missing_for`](Self::missing_for) gives them).
    #[must_use]
    pub fn missing_named(&self, names: &str) -> Vec<Missing<'_>> {
        names
            .split(',')
            .filter_map(|name| {
                self.bound
                    .iter()
                    .find(|b| b.value.is_none() && b.name == name)
            })
            .map(|b| Missing {
                name: &b.name,
                fix: b.fix.as_deref().unwrap_or_default(),
                git: b.git_basic,
            })
            .collect()
    }

    /// The credentials not configured at start that a request of scope `git` to `host`
    /// (with `method` and raw `path`: a credential is only needed in its binding's scope)
    /// needs, their names comma-separated, if it needs one: no configured credential of
    /// the host authenticates it (several credentials of one host are alternatives, e.g. an
    /// API key and a subscription token). `anonymous_read`: the request is a read its
    /// upstream may answer without a credential (a git fetch, a `GET` or `HEAD` of the
    /// GitHub API), which the git credential lets through unauthenticated; any other
    /// credential is never optional (an LLM API answers nothing without its key).
    #[must_use]
    pub fn missing_for(
        &self,
        host: &Host,
        git: GitScope,
        (method, path): (&str, &str),
        anonymous_read: bool,
    ) -> Option<String> {
        if self.bound.iter().all(|b| b.value.is_some()) {
            return None;
        }
        let applying = self
            .bound
            .iter()
            .filter(|b| b.bound_to(host) && b.applies(host, git) && b.scope.allows(method, path));
        if applying.clone().any(|b| b.value.is_some()) {
            return None;
        }
        let names: Vec<&str> = applying
            .filter(|b| !(b.git_basic && anonymous_read))
            .map(|b| b.name.as_str())
            .collect();
        (!names.is_empty()).then(|| names.join(","))
    }

    /// The name a needle belongs to.
    #[must_use]
    pub fn name_of(&self, tag: Tag) -> &str {
        if tag.credential == GIT_INDEX {
            return "git";
        }
        self.bound
            .get(tag.credential)
            .map_or("?", |b| b.name.as_str())
    }

    fn leak(&self, tag: Tag, place: impl Into<String>) -> Leak {
        Leak {
            credential: self.name_of(tag).to_owned(),
            place: place.into(),
        }
    }

    /// Rewrites the headers of one request to `host` (see the module docs): removes every
    /// bound header, injects the credentials that apply, then searches every other header
    /// for a secret. `inject` is false for plain HTTP upstreams. Returns the names injected
    /// (comma-separated, for the audit line), or the leak.
    ///
    /// # Errors
    /// [`Leak`] when a placeholder or secret is in a header where it must not be.
    pub fn apply(
        &self,
        host: &Host,
        headers: &mut HeaderMap,
        git: GitScope,
        inject: bool,
    ) -> Result<Option<Injected>, Leak> {
        self.apply_to(host, headers, git, inject, None)
    }

    /// [`apply`](Self::apply) for a request with `method` and raw `path` (`request`): a
    /// credential whose scope (`methods`, `paths`) excludes it is not injected, so the
    /// request goes unauthenticated (the agent's own authentication is removed all the
    /// same).
    ///
    /// # Errors
    /// [`Leak`] when a placeholder or secret is in a header where it must not be.
    pub fn apply_to(
        &self,
        host: &Host,
        headers: &mut HeaderMap,
        git: GitScope,
        inject: bool,
        request: Option<(&str, &str)>,
    ) -> Result<Option<Injected>, Leak> {
        let Some(needles) = &self.leak else {
            return Ok(None);
        };
        // The git placeholder as the basic-auth password of an authorized git read: it is
        // where git-credential-airlock puts it; it is replaced (or dropped), never sent.
        if git != GitScope::None
            && let Some(g) = &self.git_placeholder
            && headers
                .get_all(header::AUTHORIZATION)
                .iter()
                .any(|v| basic_password(v).is_some_and(|p| p == g.as_bytes()))
        {
            headers.remove(header::AUTHORIZATION);
        }
        let mut injected: Vec<(usize, &Bound, &HeaderValue)> = Vec::new();
        for (i, b) in self
            .bound
            .iter()
            .enumerate()
            .filter(|(_, b)| b.bound_to(host))
        {
            // The agent's own value of a bound header is dropped, whatever it is, except
            // that the git placeholder there on anything but an authorized git read is a
            // leak (it is only ever handed to git).
            if let Some(g) = &self.git_placeholder
                && git == GitScope::None
                && headers.get_all(&b.header).iter().any(|v| {
                    contains(v.as_bytes(), g.as_bytes())
                        || basic_password(v).is_some_and(|p| p == g.as_bytes())
                })
            {
                return Err(Leak {
                    credential: "git".into(),
                    place: format!("header {}", b.header),
                });
            }
            headers.remove(&b.header);
            let in_scope = request.is_none_or(|(method, path)| b.scope.allows(method, path));
            if inject
                && in_scope
                && let Some(value) = b.value_for(host, git)
            {
                injected.push((i, b, value));
            }
        }
        for (name, value) in headers.iter() {
            if let Some(tag) = needles.find(value.as_bytes()) {
                return Err(self.leak(tag, format!("header {name}")));
            }
            if let Some(tag) = basic_decoded(value).and_then(|d| needles.find(&d)) {
                return Err(self.leak(tag, format!("header {name}")));
            }
        }
        // One identity per credential host: whatever else the agent sends to authenticate
        // (its own token, a session cookie) would decide which account the request acts for.
        if self.any_bound_to(host) {
            for name in &AUTH_HEADERS {
                if headers.contains_key(name) {
                    headers.remove(name);
                }
            }
        }
        for (_, b, value) in &injected {
            headers.insert(b.header.clone(), (*value).clone());
        }
        if injected.is_empty() {
            return Ok(None);
        }
        let names: Vec<&str> = injected.iter().map(|(_, b, _)| b.name.as_str()).collect();
        Ok(Some(Injected {
            names: names.join(","),
            only: match injected.as_slice() {
                [(i, _, _)] => Some(*i),
                _ => None,
            },
        }))
    }

    /// Searches a request target (path and query, raw and percent-decoded).
    ///
    /// # Errors
    /// [`Leak`] with place `url`.
    pub fn check_url(&self, path_and_query: &str) -> Result<(), Leak> {
        let Some(needles) = &self.leak else {
            return Ok(());
        };
        let raw = path_and_query.as_bytes();
        let found = needles
            .find(raw)
            .or_else(|| percent_decode(raw).iter().find_map(|r| needles.find(r)));
        match found {
            Some(tag) => Err(self.leak(tag, "url")),
            None => Ok(()),
        }
    }

    /// Overwrites every real value and injected encoding in response headers.
    pub fn scrub_headers(&self, headers: &mut HeaderMap) {
        let Some(needles) = &self.scrub else {
            return;
        };
        for value in headers.values_mut() {
            if needles.find(value.as_bytes()).is_some() {
                let mut bytes = value.as_bytes().to_vec();
                needles.overwrite(&mut bytes);
                if let Ok(v) = HeaderValue::from_bytes(&bytes) {
                    *value = v;
                }
            }
        }
    }
}

/// The forms of a real value scrubbed from responses: as is, the forms the detectors search
/// for a workspace value (`detect::forms`), and its hex (the scrubber does not decode).
fn scrub_forms(secret: &str) -> Vec<Vec<u8>> {
    use std::fmt::Write as _;
    let hex = secret.bytes().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    let mut out = vec![secret.as_bytes().to_vec(), hex.into_bytes()];
    out.extend(crate::detect::forms(secret.as_bytes()));
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// `base64("x-access-token:" + token)`.
fn git_basic_b64(token: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
}

/// The git-basic header value.
#[must_use]
pub fn git_basic(token: &str) -> String {
    format!("Basic {}", git_basic_b64(token))
}

/// The decoded `user:password` of a `Basic` credential, if the value is one.
fn basic_decoded(v: &HeaderValue) -> Option<Vec<u8>> {
    let s = v.to_str().ok()?.trim();
    let (scheme, rest) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()
}

/// The password of a `Basic` credential.
fn basic_password(v: &HeaderValue) -> Option<Vec<u8>> {
    let d = basic_decoded(v)?;
    let i = d.iter().position(|b| *b == b':')?;
    Some(d[i + 1..].to_vec())
}

/// `s` after each round of percent-decoding a request path takes
/// ([`airlock_policy::path::decode_rounds`], the one decoder: invalid escapes kept as they
/// are, `+` left alone), so a leak is looked for in every reading an upstream may decode.
#[must_use]
pub fn percent_decode(s: &[u8]) -> Vec<Vec<u8>> {
    airlock_policy::path::decode_rounds(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_handoff::{ResolvedCredential, Secret};

    const POLICY: &str = r#"
[sandbox]
name = "t"
[network]
allow = ["api.example.com", "github.com", "other.example"]
[[credentials]]
name = "anthropic"
source = { env = "K" }
hosts = ["api.example.com"]
header = "x-api-key"
format = "{}"
[[credentials]]
name = "github"
source = { env = "G" }
hosts = ["github.com"]
header = "authorization"
format = "git-basic"
[git]
repositories = ["github.com/o/r"]
"#;

    fn creds() -> Credentials {
        creds_with(&Policy::parse(POLICY, Path::new("p.toml")).unwrap())
    }

    fn creds_with(policy: &Policy) -> Credentials {
        let h = Handoff {
            version: HANDOFF_VERSION,
            session: "s".into(),
            credentials: vec![
                ResolvedCredential {
                    name: "anthropic".into(),
                    value: Secret::new("sk-REAL-anthropic".into()),
                    placeholder: "airlock-placeholder-anthropic-01".into(),
                },
                ResolvedCredential {
                    name: "github".into(),
                    value: Secret::new("ghp_REALgithub".into()),
                    placeholder: "airlock-placeholder-github-01".into(),
                },
            ],
            git_placeholder: Some("airlock-git.s.01".into()),
            workspace_secrets: Vec::new(),
            missing: vec![],
            git_service: None,
        };
        Credentials::from_handoff(h, policy).unwrap()
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn basic(user: &str, pass: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
    }

    /// The agent uses the key its binding names for the Messages API on an admin route of
    /// the same host: the key stays home, however the path is spelled, and the agent's own
    /// value of the header is removed all the same.
    #[test]
    fn attack_a_scoped_credential_is_injected_only_in_its_scope() {
        let text = POLICY.replace(
            "header = \"x-api-key\"\nformat = \"{}\"",
            "header = \"x-api-key\"\nformat = \"{}\"\nmethods = [\"POST\", \"GET\"]\npaths = [\"/v1/**\"]",
        );
        let policy = Policy::parse(&text, Path::new("p.toml")).unwrap();
        assert_eq!(policy.credentials[0].scope.paths.len(), 1);
        let c = creds_with(&policy);
        let api = host("api.example.com");
        let send = |method: &str, path: &str| {
            let mut h = hm(&[("x-api-key", "airlock-placeholder-anthropic-01")]);
            let injected = c
                .apply_to(&api, &mut h, GitScope::None, true, Some((method, path)))
                .unwrap();
            (injected.map(|i| i.names), h.get("x-api-key").cloned())
        };
        let (names, value) = send("POST", "/v1/messages");
        assert_eq!(names.as_deref(), Some("anthropic"));
        assert_eq!(value.unwrap(), "sk-REAL-anthropic");
        for (method, path) in [
            ("POST", "/admin/keys"),
            ("POST", "/v1/../admin/keys"),
            ("POST", "/v1/%2e%2e/admin"),
            ("POST", "/v1%2F..%2Fadmin"),
            ("DELETE", "/v1/messages"),
            ("PUT", "/v1/files/1"),
        ] {
            let (names, value) = send(method, path);
            assert_eq!(names, None, "{method} {path}");
            assert_eq!(
                value, None,
                "{method} {path}: the agent's value is removed too"
            );
        }
    }

    #[test]
    fn the_bound_header_is_replaced_on_the_bound_host() {
        let c = creds();
        let mut h = hm(&[
            ("x-api-key", "airlock-placeholder-anthropic-01"),
            ("x-api-key", "second value"),
            ("accept", "*/*"),
        ]);
        let names = c
            .apply(&host("api.example.com"), &mut h, GitScope::None, true)
            .unwrap()
            .unwrap();
        assert_eq!(names.names, "anthropic");
        // Its body may carry its own values, never another credential's.
        let body = c.body_needles(Some(&names)).unwrap();
        assert!(body.find(b"airlock-placeholder-anthropic-01").is_none());
        assert!(body.find(b"x airlock-placeholder-github-01").is_some());
        assert!(body.find(b"airlock-git.s.01").is_some());
        let all: Vec<_> = h.get_all("x-api-key").iter().collect();
        assert_eq!(
            all,
            vec!["sk-REAL-anthropic"],
            "the agent's values are gone"
        );
        assert!(h["x-api-key"].is_sensitive());
        // Plain HTTP: stripped, never injected.
        let mut h = hm(&[("x-api-key", "airlock-placeholder-anthropic-01")]);
        assert_eq!(
            c.apply(&host("api.example.com"), &mut h, GitScope::None, false),
            Ok(None)
        );
        assert!(h.get("x-api-key").is_none());
    }

    /// The agent sends its own identity beside the placeholder (an attacker's bearer token,
    /// a session cookie, another API-key header) to a credential's host, hoping the provider
    /// acts for that account: only the injected credential travels. On a host no credential
    /// is bound to, the same headers are the agent's business and pass.
    #[test]
    fn only_the_injected_credential_speaks_on_its_host() {
        let c = creds();
        let attacker = [
            ("x-api-key", "airlock-placeholder-anthropic-01"),
            ("authorization", "Bearer attacker-token"),
            ("cookie", "user_session=attacker"),
            ("x-goog-api-key", "attacker"),
            ("api-key", "attacker"),
            ("x-auth-token", "attacker"),
            ("private-token", "attacker"),
            ("accept", "*/*"),
        ];
        for inject in [true, false] {
            let mut h = hm(&attacker);
            c.apply(&host("api.example.com"), &mut h, GitScope::None, inject)
                .unwrap();
            let mut left: Vec<_> = h.keys().map(HeaderName::as_str).collect();
            left.sort_unstable();
            if inject {
                assert_eq!(left, ["accept", "x-api-key"], "inject={inject}");
                assert_eq!(h["x-api-key"], "sk-REAL-anthropic");
            } else {
                assert_eq!(left, ["accept"], "inject={inject}");
            }
        }
        // github.com: the git credential's host; a web request with the agent's cookie.
        let mut h = hm(&[("cookie", "user_session=attacker"), ("accept", "*/*")]);
        c.apply(&host("github.com"), &mut h, GitScope::None, true)
            .unwrap();
        assert!(h.get("cookie").is_none());
        // Elsewhere: not ours to judge.
        let mut h = hm(&[("cookie", "a=b"), ("authorization", "Bearer own")]);
        c.apply(&host("other.example"), &mut h, GitScope::None, true)
            .unwrap();
        assert_eq!(h["cookie"], "a=b");
        assert_eq!(h["authorization"], "Bearer own");
    }

    /// The git credential on the GitHub API host: its REST form (`Bearer`) where the policy
    /// lends it (a pull request of an authorized repository), nothing elsewhere, and the
    /// agent's own `authorization` (its placeholder, or an attacker's token) never.
    #[test]
    fn the_git_token_reaches_the_api_only_where_it_is_lent() {
        let c = creds();
        let api = host("api.github.com");
        let mut h = hm(&[("authorization", "token airlock-placeholder-github-01")]);
        let names = c.apply(&api, &mut h, GitScope::Api, true).unwrap().unwrap();
        assert_eq!(names.names, "github");
        assert_eq!(h["authorization"], "Bearer ghp_REALgithub");
        for scope in [GitScope::None, GitScope::Read] {
            let mut h = hm(&[("authorization", "Bearer attacker-token")]);
            assert_eq!(c.apply(&api, &mut h, scope, true), Ok(None), "{scope:?}");
            assert!(h.get("authorization").is_none(), "{scope:?}");
        }
        // Plain HTTP never carries it.
        let mut h = hm(&[]);
        assert_eq!(c.apply(&api, &mut h, GitScope::Api, false), Ok(None));
        assert!(c.any_bound_to(&api));
    }

    #[test]
    fn a_placeholder_anywhere_else_is_a_leak() {
        let c = creds();
        for (hst, pairs) in [
            // Another host.
            (
                "other.example",
                vec![("x-api-key", "airlock-placeholder-anthropic-01")],
            ),
            // Another header on the bound host.
            (
                "api.example.com",
                vec![("x-other", "Bearer airlock-placeholder-anthropic-01")],
            ),
            // Another credential's placeholder on the bound host.
            (
                "api.example.com",
                vec![("authorization", "airlock-placeholder-github-01")],
            ),
            // The real value, the git placeholder, inside a basic credential.
            ("other.example", vec![("cookie", "a=sk-REAL-anthropic")]),
            (
                "other.example",
                vec![("authorization", &basic("x", "airlock-git.s.01"))],
            ),
        ] {
            let mut h = hm(&pairs);
            let err = c.apply(&host(hst), &mut h, GitScope::None, true);
            assert!(err.is_err(), "{hst} {pairs:?}");
        }
        assert_eq!(
            c.check_url("/v1?key=airlock-placeholder-anthropic-01"),
            Err(Leak {
                credential: "anthropic".into(),
                place: "url".into()
            })
        );
        assert!(
            c.check_url("/v1?key=airlock%2dplaceholder%2Danthropic-01")
                .is_err()
        );
        // Decoded as many rounds as a judged path (issue 20): twice-encoded is seen.
        assert!(
            c.check_url("/v1?key=airlock%252dplaceholder%252Danthropic-01")
                .is_err()
        );
        assert!(
            c.check_url("/v1/airlock%25252dplaceholder-anthropic-01")
                .is_err()
        );
        assert!(c.check_url("/v1/messages?stream=true").is_ok());
    }

    #[test]
    fn the_git_placeholder_is_swapped_only_on_authorized_git_reads() {
        let c = creds();
        let auth = basic("x-access-token", "airlock-git.s.01");
        // An authorized read: the real git-basic credential.
        let mut h = hm(&[("authorization", &auth)]);
        let names = c
            .apply(&host("github.com"), &mut h, GitScope::Read, true)
            .unwrap()
            .unwrap();
        assert_eq!(names.names, "github");
        assert_eq!(h["authorization"], git_basic("ghp_REALgithub"));
        // Anything else on that host: the placeholder there is a leak...
        let mut h = hm(&[("authorization", &auth)]);
        assert!(
            c.apply(&host("github.com"), &mut h, GitScope::None, true)
                .is_err()
        );
        // ...and a git-basic credential is not injected outside git reads.
        let mut h = hm(&[("authorization", "token mine")]);
        assert_eq!(
            c.apply(&host("github.com"), &mut h, GitScope::None, true),
            Ok(None)
        );
        assert!(h.get("authorization").is_none(), "still stripped");
    }

    #[test]
    fn response_headers_are_scrubbed() {
        let c = creds();
        let mut h = hm(&[
            ("x-echo", "key=sk-REAL-anthropic;"),
            ("x-auth", &git_basic("ghp_REALgithub")),
            ("x-fine", "ok"),
        ]);
        c.scrub_headers(&mut h);
        assert_eq!(h["x-echo"], "key=*****************;");
        assert!(
            !h["x-auth"]
                .to_str()
                .unwrap()
                .contains(&git_basic_b64("ghp_REALgithub"))
        );
        assert_eq!(h["x-fine"], "ok");
    }

    /// An upstream that echoes the injected value hex-encoded (either case), inside base64,
    /// upper-cased or reversed: every spelling is overwritten, lengths kept.
    #[test]
    fn every_form_of_a_real_value_is_scrubbed() {
        use base64::Engine as _;
        let c = creds();
        let real = "sk-REAL-anthropic";
        let hex: String = real.bytes().map(|b| format!("{b:02x}")).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("k={real};"));
        let reversed: String = real.chars().rev().collect();
        for echo in [
            hex.clone(),
            hex.to_uppercase(),
            b64,
            real.to_uppercase(),
            reversed,
        ] {
            let mut h = hm(&[("x-echo", &echo)]);
            c.scrub_headers(&mut h);
            let out = h["x-echo"].to_str().unwrap().to_owned();
            assert_eq!(out.len(), echo.len());
            assert!(out.contains("*****"), "{echo} -> {out}");
        }
    }

    #[test]
    fn a_handoff_that_does_not_match_the_policy_is_refused() {
        let policy = Policy::parse(POLICY, Path::new("p.toml")).unwrap();
        let h = Handoff {
            version: HANDOFF_VERSION,
            session: "s".into(),
            credentials: vec![],
            git_placeholder: None,
            workspace_secrets: Vec::new(),
            missing: vec![],
            git_service: None,
        };
        assert!(Credentials::from_handoff(h, &policy).is_err());
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("credentials.json");
        assert!(Credentials::load(&missing, &policy).unwrap().is_empty());
        std::fs::write(&missing, "{").unwrap();
        assert!(matches!(
            Credentials::load(&missing, &policy),
            Err(CredentialsError::Parse { .. })
        ));
    }

    fn creds_missing() -> Credentials {
        let policy = Policy::parse(POLICY, Path::new("p.toml")).unwrap();
        let h = Handoff {
            version: HANDOFF_VERSION,
            session: "s".into(),
            missing: vec![
                airlock_handoff::MissingCredential {
                    name: "anthropic".into(),
                    placeholder: "airlock-placeholder-anthropic-02".into(),
                    fix: "set A on the host".into(),
                },
                airlock_handoff::MissingCredential {
                    name: "github".into(),
                    placeholder: "airlock-placeholder-github-02".into(),
                    fix: "set GITHUB_TOKEN_FILE".into(),
                },
            ],
            ..Handoff::default()
        };
        Credentials::from_handoff(h, &policy).unwrap()
    }

    #[test]
    fn a_missing_credential_refuses_what_it_would_authenticate() {
        let c = creds_missing();
        let api = Host::parse("api.example.com").unwrap();
        let gh = Host::parse("github.com").unwrap();
        let gh_api = Host::parse("api.github.com").unwrap();
        let names = c
            .missing_for(&api, GitScope::None, ("POST", "/v1/x"), false)
            .unwrap();
        assert_eq!(names, "anthropic");
        let m = c.missing_named(&names);
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].name, m[0].fix, m[0].git),
            ("anthropic", "set A on the host", false)
        );
        // An LLM key is never optional, whatever the request looks like.
        assert!(
            c.missing_for(&api, GitScope::None, ("POST", "/v1/x"), true)
                .is_some()
        );
        // The git credential: a push (service port, not a read) and an API write are
        // refused; fetches and API reads go anonymously; github.com's web pages never
        // carried it.
        let m = c.missing_named(
            &c.missing_for(&gh, GitScope::Service, ("POST", "/v1/x"), false)
                .unwrap(),
        );
        assert_eq!((m[0].name, m[0].git), ("github", true));
        assert!(
            c.missing_for(&gh, GitScope::Service, ("POST", "/v1/x"), true)
                .is_none()
        );
        assert!(
            c.missing_for(&gh, GitScope::Read, ("POST", "/v1/x"), true)
                .is_none()
        );
        assert!(
            c.missing_for(&gh, GitScope::None, ("POST", "/v1/x"), false)
                .is_none()
        );
        assert!(
            c.missing_for(&gh_api, GitScope::Api, ("POST", "/v1/x"), false)
                .is_some()
        );
        assert!(
            c.missing_for(&gh_api, GitScope::Api, ("POST", "/v1/x"), true)
                .is_none()
        );
        assert!(
            c.missing_for(&gh_api, GitScope::None, ("POST", "/v1/x"), false)
                .is_none()
        );
        assert!(
            c.missing_for(
                &Host::parse("example.com").unwrap(),
                GitScope::None,
                ("POST", "/v1/x"),
                false
            )
            .is_none()
        );
        // Nothing is injected; the agent's own value of the header still never travels,
        // and its placeholder elsewhere is still a leak.
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("sk-ant-agents-own"));
        assert_eq!(c.apply(&api, &mut h, GitScope::None, true).unwrap(), None);
        assert!(h.get("x-api-key").is_none());
        let mut h = HeaderMap::new();
        h.insert(
            "x-leak",
            HeaderValue::from_static("airlock-placeholder-anthropic-02"),
        );
        let leak = c.apply(&gh, &mut h, GitScope::None, true).unwrap_err();
        assert_eq!(leak.credential, "anthropic");
        // A configured credential is never missing.
        assert!(
            creds()
                .missing_for(&api, GitScope::None, ("POST", "/v1/x"), false)
                .is_none()
        );
    }

    /// Two credentials of one host are alternatives (an API key, a subscription token):
    /// the one not configured never stops what the configured one authenticates; with
    /// neither, the refusal names both.
    #[test]
    fn a_missing_alternative_never_blocks_the_configured_one() {
        let policy_text = format!(
            "{POLICY}[[credentials]]\nname = \"oauth\"\nsource = {{ env = \"O\" }}\nhosts = [\"api.example.com\"]\nheader = \"authorization\"\nformat = \"Bearer {{}}\"\n"
        )
        .replace("[git]\nrepositories = [\"github.com/o/r\"]\n", "");
        let policy = Policy::parse(&policy_text, Path::new("p.toml")).unwrap();
        let missing = |name: &str| airlock_handoff::MissingCredential {
            name: name.into(),
            placeholder: format!("airlock-placeholder-{name}-04"),
            fix: format!("set {name}"),
        };
        let resolved = |name: &str| ResolvedCredential {
            name: name.into(),
            value: Secret::new(format!("REAL-{name}")),
            placeholder: format!("airlock-placeholder-{name}-04"),
        };
        let api = Host::parse("api.example.com").unwrap();
        let key_only = Handoff {
            version: HANDOFF_VERSION,
            credentials: vec![resolved("anthropic"), resolved("github")],
            missing: vec![missing("oauth")],
            ..Handoff::default()
        };
        let c = Credentials::from_handoff(key_only, &policy).unwrap();
        assert_eq!(
            c.missing_for(&api, GitScope::None, ("POST", "/v1/x"), false),
            None
        );
        let mut h = HeaderMap::new();
        let injected = c
            .apply(&api, &mut h, GitScope::None, true)
            .unwrap()
            .unwrap();
        assert_eq!(injected.names, "anthropic");
        assert_eq!(h["x-api-key"], "REAL-anthropic");
        let neither = Handoff {
            version: HANDOFF_VERSION,
            credentials: vec![resolved("github")],
            missing: vec![missing("anthropic"), missing("oauth")],
            ..Handoff::default()
        };
        let c = Credentials::from_handoff(neither, &policy).unwrap();
        let names = c
            .missing_for(&api, GitScope::None, ("POST", "/v1/x"), false)
            .unwrap();
        assert_eq!(names, "anthropic,oauth");
        let fixes: Vec<&str> = c.missing_named(&names).iter().map(|m| m.fix).collect();
        assert_eq!(fixes, ["set anthropic", "set oauth"]);
    }

    /// A credential is only missing where it would have been injected: outside its
    /// binding's methods and paths the request goes on without it, as it would with it.
    #[test]
    fn a_missing_credential_is_only_needed_in_its_scope() {
        let text = POLICY.replace(
            "header = \"x-api-key\"\nformat = \"{}\"",
            "header = \"x-api-key\"\nformat = \"{}\"\nmethods = [\"POST\"]\npaths = [\"/v1/**\"]",
        );
        let policy = Policy::parse(&text, Path::new("p.toml")).unwrap();
        let h = Handoff {
            version: HANDOFF_VERSION,
            credentials: vec![ResolvedCredential {
                name: "github".into(),
                value: Secret::new("ghp_x".into()),
                placeholder: "airlock-placeholder-github-05".into(),
            }],
            missing: vec![airlock_handoff::MissingCredential {
                name: "anthropic".into(),
                placeholder: "airlock-placeholder-anthropic-05".into(),
                fix: "f".into(),
            }],
            ..Handoff::default()
        };
        let c = Credentials::from_handoff(h, &policy).unwrap();
        let api = Host::parse("api.example.com").unwrap();
        let need = |method, path| c.missing_for(&api, GitScope::None, (method, path), false);
        assert_eq!(need("POST", "/v1/messages").as_deref(), Some("anthropic"));
        assert_eq!(need("GET", "/v1/models"), None);
        assert_eq!(need("POST", "/admin"), None);
        assert_eq!(need("POST", "/v1/../admin"), None);
    }

    #[test]
    fn each_credential_is_handed_over_exactly_once() {
        let policy = Policy::parse(POLICY, Path::new("p.toml")).unwrap();
        let missing = |name: &str| airlock_handoff::MissingCredential {
            name: name.into(),
            placeholder: format!("airlock-placeholder-{name}-03"),
            fix: "f".into(),
        };
        let resolved = |name: &str| ResolvedCredential {
            name: name.into(),
            value: Secret::new("v".into()),
            placeholder: format!("airlock-placeholder-{name}-03"),
        };
        let h = |credentials, missing| Handoff {
            version: HANDOFF_VERSION,
            credentials,
            missing,
            ..Handoff::default()
        };
        let ok = h(vec![resolved("anthropic")], vec![missing("github")]);
        assert!(Credentials::from_handoff(ok, &policy).is_ok());
        let twice = h(
            vec![resolved("anthropic"), resolved("github")],
            vec![missing("github")],
        );
        let err = Credentials::from_handoff(twice, &policy).unwrap_err();
        assert!(err.contains("twice"), "{err}");
        let unknown = h(
            vec![resolved("anthropic")],
            vec![missing("github"), missing("x")],
        );
        let err = Credentials::from_handoff(unknown, &policy).unwrap_err();
        assert!(err.contains("not in the policy"), "{err}");
        let absent = h(vec![resolved("anthropic")], vec![]);
        let err = Credentials::from_handoff(absent, &policy).unwrap_err();
        assert!(err.contains("\"github\" is missing"), "{err}");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode(b"a%2Db%2dc%zz%4"), [b"a-b-c%zz%4".to_vec()]);
        assert_eq!(
            percent_decode(b"a%252D"),
            [b"a%2D".to_vec(), b"a-".to_vec()]
        );
    }
}
