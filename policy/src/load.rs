//! Reading the policy file: TOML → raw spanned values → validated [`Policy`].
//!
//! The raw structs mirror the file with `deny_unknown_fields` everywhere and keep the byte
//! span of every string that is validated later, so that a semantic error points at the
//! line and column of the offending value, just like a TOML syntax error does.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{PolicyError, Source};
use crate::git;
use crate::github;
use crate::glob::PathGlob;
use crate::l7::{Action, L7Rule, L7Rules, Methods, Preset};
use crate::model::{
    Credential, CredentialFormat, CredentialScope, CredentialSource, GitPolicy, Mode, Network,
    Policy, SANDBOX_PLACEHOLDER, Sandbox, Unlisted,
};
use crate::rule::{HostPattern, HostRule, RuleError};

/// Longest sandbox name.
pub const MAX_SANDBOX_NAME_LEN: usize = 40;
/// Longest credential name.
pub const MAX_CREDENTIAL_NAME_LEN: usize = 64;
/// Longest `[[rules]]` name.
pub const MAX_RULE_NAME_LEN: usize = 100;

/// Literal `format` value for GitHub basic auth.
const GIT_BASIC: &str = "git-basic";

/// Headers a credential may not be injected into: they frame the message or the
/// connection, and the proxy owns them.
const RESERVED_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    sandbox: RawSandbox,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    credentials: Vec<Spanned<RawCredential>>,
    #[serde(default)]
    git: RawGit,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
    #[serde(default)]
    l7: RawL7,
    #[serde(default)]
    signals: crate::signals::RawSignals,
    #[serde(default)]
    limits: crate::limits::RawLimits,
    #[serde(default)]
    detectors: Vec<Spanned<crate::secrets::RawDetector>>,
    #[serde(default)]
    secrets: crate::secrets::RawSecrets,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    name: Spanned<String>,
    #[serde(default)]
    mode: Mode,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    #[serde(default)]
    passthrough: Vec<Spanned<String>>,
    #[serde(default)]
    writable: Vec<Spanned<String>>,
    #[serde(default)]
    websocket: Vec<Spanned<String>>,
    #[serde(default)]
    registries: Vec<Spanned<String>>,
    dns_name_budget: Option<Spanned<i64>>,
    #[serde(default)]
    strip_headers: Vec<Spanned<String>>,
    #[serde(default)]
    git_hosts: Vec<Spanned<String>>,
    unlisted: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    preset: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    source: Spanned<RawSource>,
    hosts: Option<Spanned<Vec<Spanned<String>>>>,
    header: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
    methods: Option<Spanned<toml::Value>>,
    paths: Option<Spanned<Vec<Spanned<String>>>>,
}

/// What a credential preset fills in for whatever its `[[credentials]]` table leaves out.
struct CredentialPreset {
    /// Its name in the policy (`preset = "..."`), and the credential's default name.
    name: &'static str,
    hosts: &'static [&'static str],
    header: &'static str,
    format: &'static str,
    /// Path globs the credential is injected on (`paths`); empty: every path.
    paths: &'static [&'static str],
}

/// Where a `[[credentials]]` table is, for its errors.
struct CredAt {
    i: usize,
    table: std::ops::Range<usize>,
}

impl CredAt {
    fn key(&self, field: &str) -> String {
        format!("credentials[{}].{field}", self.i)
    }
}

const CREDENTIAL_PRESETS: [CredentialPreset; 3] = [
    CredentialPreset {
        name: "anthropic",
        hosts: &["api.anthropic.com"],
        header: "x-api-key",
        format: "{}",
        paths: &["/v1/**"],
    },
    CredentialPreset {
        name: "openai",
        hosts: &["api.openai.com"],
        header: "authorization",
        format: "Bearer {}",
        paths: &["/v1/**"],
    },
    // A git credential: its scope is `[git] repositories` and the token's API routes.
    CredentialPreset {
        name: "github",
        hosts: &["github.com", "api.github.com"],
        header: "authorization",
        format: GIT_BASIC,
        paths: &[],
    },
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<Spanned<String>>,
    host: Spanned<String>,
    method: Option<Spanned<toml::Value>>,
    path: Option<Spanned<String>>,
    #[serde(default)]
    action: Action,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawL7 {
    #[serde(default)]
    presets: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGit {
    repositories: Option<Vec<Spanned<String>>>,
    push_branches: Option<Vec<Spanned<String>>>,
    protected_branches: Option<Vec<Spanned<String>>>,
    restricted_paths: Option<Vec<Spanned<String>>>,
    restricted_paths_case_insensitive: Option<bool>,
    allow_tags: Option<bool>,
}

impl Policy {
    /// Read, parse and validate the policy file at `path`.
    ///
    /// # Errors
    /// [`PolicyError::Read`] if the file cannot be read, otherwise as [`Policy::parse`].
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::parse(&text, path)
    }

    /// Parse and validate policy text; `origin` names the file in errors.
    ///
    /// # Errors
    /// [`PolicyError::Parse`] for TOML syntax and shape errors (unknown keys, wrong types,
    /// missing keys), [`PolicyError::Validate`] for invalid values; both point at the
    /// offending line and column.
    pub fn parse(text: &str, origin: &Path) -> Result<Policy, PolicyError> {
        let src = Source { text, path: origin };
        let raw: RawPolicy =
            toml::from_str(text).map_err(|e| src.parse_error(e.span(), e.message()))?;
        let v = Validator { src };
        // Where each list's rules come from (`crate::listing`), read before the validation
        // takes the raw lists.
        let provenance = crate::provenance::Provenance {
            file_allow: raw.network.allow.len(),
            registries: raw
                .network
                .registries
                .iter()
                .map(|n| {
                    let name = n.get_ref().clone();
                    let count = crate::registries::hosts(&name).map_or(0, <[_]>::len);
                    (name, count)
                })
                .collect(),
            presets: raw.l7.presets.iter().map(|p| p.get_ref().clone()).collect(),
            credentials: raw
                .credentials
                .iter()
                .map(|c| {
                    let c = c.get_ref();
                    (
                        c.preset.as_ref().map(|p| p.get_ref().clone()),
                        c.hosts.is_some(),
                    )
                })
                .collect(),
            overlay: Vec::new(),
        };
        let sandbox = v.sandbox(raw.sandbox)?;
        let mut allow = v.rules(&raw.network.allow, "network.allow", true)?;
        allow.extend(v.registries(&raw.network.registries)?);
        let deny = v.rules(&raw.network.deny, "network.deny", true)?;
        let passthrough = v.rules(&raw.network.passthrough, "network.passthrough", false)?;
        let network = Network {
            allow,
            deny,
            writable: v.rules(&raw.network.writable, "network.writable", false)?,
            websocket: v.websocket(&raw.network.websocket, &passthrough)?,
            passthrough,
            dns_name_budget: v.dns_name_budget(raw.network.dns_name_budget.as_ref())?,
            strip_headers: Vec::new(),
            git_hosts: v.rules(&raw.network.git_hosts, "network.git_hosts", false)?,
            unlisted: v.unlisted(raw.network.unlisted.as_ref())?,
        };
        let credentials = v.credentials(raw.credentials, &network.passthrough)?;
        let network = Network {
            strip_headers: v.strip_headers(&raw.network.strip_headers, &credentials)?,
            ..network
        };
        let git = v.git(raw.git, &sandbox.name)?;
        // Each glob was checked above; a set that still fails to build names its glob.
        let git_rules = git
            .compile()
            .map_err(|e| v.fail(0..0, "git", &e.to_string()))?;
        let mut l7 = L7Rules {
            rules: v.l7_rules(raw.rules, &network.passthrough)?,
            ..L7Rules::default()
        };
        v.presets(&raw.l7.presets, &network.passthrough, &mut l7)?;
        let signals = raw
            .signals
            .check()
            .map_err(|e| v.fail(e.span, e.key, &e.reason))?;
        let limits = raw
            .limits
            .check()
            .map_err(|e| v.fail(e.span, e.key, &e.reason))?;
        let secrets = crate::secrets::check(raw.detectors, raw.secrets, &|at| src.line_of(at))
            .map_err(|e| v.fail(e.span, &e.key, &e.reason))?;
        Ok(Policy {
            sandbox,
            network,
            credentials,
            git,
            git_rules,
            l7,
            signals,
            limits,
            secrets,
            provenance,
        })
    }
}

struct Validator<'a> {
    src: Source<'a>,
}

impl Validator<'_> {
    /// `network.unlisted`: `"deny"` (the default) or `"ask"`.
    fn unlisted(&self, raw: Option<&Spanned<String>>) -> Result<Unlisted, PolicyError> {
        match raw.map(|v| (v.get_ref().as_str(), v.span())) {
            None | Some(("deny", _)) => Ok(Unlisted::Deny),
            Some(("ask", _)) => Ok(Unlisted::Ask),
            Some((other, span)) => Err(self.fail(
                span,
                "network.unlisted",
                &format!("{other:?} is not \"deny\" or \"ask\""),
            )),
        }
    }

    /// `network.dns_name_budget`: bytes, 0 to [`MAX_DNS_NAME_BUDGET`].
    fn dns_name_budget(&self, raw: Option<&Spanned<i64>>) -> Result<Option<u32>, PolicyError> {
        let Some(v) = raw else {
            return Ok(None);
        };
        u32::try_from(*v.get_ref())
            .ok()
            .filter(|b| *b <= crate::model::MAX_DNS_NAME_BUDGET)
            .map(Some)
            .ok_or_else(|| {
                self.fail(
                    v.span(),
                    "network.dns_name_budget",
                    &format!(
                        "{} is not a byte count from 0 to {}",
                        v.get_ref(),
                        crate::model::MAX_DNS_NAME_BUDGET
                    ),
                )
            })
    }

    /// `network.strip_headers`: header names (RFC 9110 tokens, any case, kept lowercase)
    /// or prefixes with a trailing `*` of at least two characters; never a header that
    /// frames the message or the connection, nor one a credential is injected into.
    fn strip_headers(
        &self,
        raw: &[Spanned<String>],
        credentials: &[Credential],
    ) -> Result<Vec<String>, PolicyError> {
        let mut out = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            let key = format!("network.strip_headers[{i}]");
            let lower = text.get_ref().to_ascii_lowercase();
            let (name, prefix) = match lower.strip_suffix('*') {
                Some(p) => (p, true),
                None => (lower.as_str(), false),
            };
            if prefix && name.len() < 2 {
                return Err(self.bad(
                    text,
                    &key,
                    "a prefix needs at least two characters before its '*'",
                ));
            }
            if name.contains('*') {
                return Err(self.bad(text, &key, "'*' may only end a prefix"));
            }
            check_header(name).map_err(|e| self.bad(text, &key, e))?;
            let hits = |h: &str| {
                if prefix {
                    h.starts_with(name)
                } else {
                    h == name
                }
            };
            if let Some(c) = credentials.iter().find(|c| hits(&c.header)) {
                return Err(self.bad(
                    text,
                    &key,
                    &format!(
                        "would remove {:?}, the header credential {:?} is injected into",
                        c.header, c.name
                    ),
                ));
            }
            out.push(lower);
        }
        Ok(out)
    }

    fn fail(&self, span: Range<usize>, key: &str, reason: &str) -> PolicyError {
        self.src.validate_error(span, &format!("{key}: {reason}"))
    }

    /// An error about one string value: `key: "value": reason`.
    fn bad(&self, value: &Spanned<String>, key: &str, reason: &str) -> PolicyError {
        self.fail(
            value.span(),
            key,
            &format!("{:?}: {reason}", value.get_ref()),
        )
    }

    fn sandbox(&self, raw: RawSandbox) -> Result<Sandbox, PolicyError> {
        let name = raw.name.get_ref();
        let ok = (1..=MAX_SANDBOX_NAME_LEN).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if !ok {
            return Err(self.bad(
                &raw.name,
                "sandbox.name",
                "must be 1-40 characters of [a-z0-9-], not starting or ending with '-'",
            ));
        }
        Ok(Sandbox {
            name: raw.name.into_inner(),
            mode: raw.mode,
        })
    }

    fn rules(
        &self,
        raw: &[Spanned<String>],
        key: &str,
        ports: bool,
    ) -> Result<Vec<HostRule>, PolicyError> {
        raw.iter()
            .enumerate()
            .map(|(i, text)| {
                let key = format!("{key}[{i}]");
                let rule = HostRule::parse(text.get_ref())
                    .map_err(|e| self.bad(text, &key, &e.to_string()))?;
                if !ports && rule.port.is_some() {
                    return Err(self.bad(text, &key, &RuleError::PortNotAllowed.to_string()));
                }
                Ok(rule)
            })
            .collect()
    }

    /// `network.registries`: the hosts of each named registry, as allow rules (read-only
    /// like every allowed host).
    fn registries(&self, raw: &[Spanned<String>]) -> Result<Vec<HostRule>, PolicyError> {
        let mut out = Vec::new();
        for (i, name) in raw.iter().enumerate() {
            let Some(hosts) = crate::registries::hosts(name.get_ref()) else {
                return Err(self.bad(
                    name,
                    &format!("network.registries[{i}]"),
                    &format!(
                        "is not a registry this version knows ({}); list its hosts in network.allow",
                        crate::registries::names()
                    ),
                ));
            };
            for h in hosts {
                out.push(HostRule::parse(h).map_err(|e| {
                    self.bad(name, &format!("network.registries[{i}]"), &e.to_string())
                })?);
            }
        }
        Ok(out)
    }

    /// `network.websocket`: host rules without ports, none of them a host that
    /// `network.passthrough` never intercepts (its frames could never be read).
    fn websocket(
        &self,
        raw: &[Spanned<String>],
        passthrough: &[HostRule],
    ) -> Result<Vec<HostRule>, PolicyError> {
        let rules = self.rules(raw, "network.websocket", false)?;
        for (i, (rule, text)) in rules.iter().zip(raw).enumerate() {
            if let Some(p) = covering(passthrough, &rule.pattern) {
                return Err(self.bad(
                    text,
                    &format!("network.websocket[{i}]"),
                    &format!(
                        "is in network.passthrough ({:?}), which is never intercepted: its frames could never be read",
                        p.text
                    ),
                ));
            }
        }
        Ok(rules)
    }

    fn credentials(
        &self,
        raw: Vec<Spanned<RawCredential>>,
        passthrough: &[HostRule],
    ) -> Result<Vec<Credential>, PolicyError> {
        let mut first_seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, c) in raw.into_iter().enumerate() {
            let table = c.span();
            let c = c.into_inner();
            let at = CredAt { i, table };
            let preset = self.credential_preset(&c, &at)?;
            let name = self.credential_name(&c, preset, &at, &mut first_seen)?;
            let source = self.credential_source(&c.source, &at.key("source"))?;
            let hosts = self.credential_hosts(&c, preset, &at, passthrough)?;
            let (header, format) = self.credential_header_format(&c, preset, &at)?;
            let scope = self.credential_scope(&c, preset, &at, &format)?;
            out.push(Credential {
                name,
                source,
                hosts,
                header,
                format,
                scope,
            });
        }
        Ok(out)
    }

    /// The `missing field` error of credential `at`.
    fn cred_missing(&self, at: &CredAt, field: &str) -> PolicyError {
        self.fail(
            at.table.clone(),
            &format!("credentials[{}]", at.i),
            &format!("missing field `{field}` (or set `preset`)"),
        )
    }

    fn credential_preset(
        &self,
        c: &RawCredential,
        at: &CredAt,
    ) -> Result<Option<&'static CredentialPreset>, PolicyError> {
        let Some(p) = &c.preset else {
            return Ok(None);
        };
        CREDENTIAL_PRESETS
            .iter()
            .find(|preset| preset.name == p.get_ref())
            .map(Some)
            .ok_or_else(|| {
                self.bad(
                    p,
                    &at.key("preset"),
                    "unknown credential preset (known: anthropic, openai, github)",
                )
            })
    }

    /// The name: as written, else the preset's; `[a-z0-9_-]`, unique.
    fn credential_name(
        &self,
        c: &RawCredential,
        preset: Option<&CredentialPreset>,
        at: &CredAt,
        first_seen: &mut HashMap<String, usize>,
    ) -> Result<String, PolicyError> {
        let (name, name_at) = match (&c.name, preset) {
            (Some(n), _) => (n.get_ref().clone(), n.clone()),
            (None, Some(p)) => {
                let name_at = c
                    .preset
                    .clone()
                    .ok_or_else(|| self.cred_missing(at, "name"))?;
                (p.name.to_owned(), name_at)
            }
            (None, None) => return Err(self.cred_missing(at, "name")),
        };
        let name_ok = (1..=MAX_CREDENTIAL_NAME_LEN).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(self.bad(
                &name_at,
                &at.key("name"),
                "must be 1-64 characters of [a-z0-9_-]",
            ));
        }
        if let Some(first) = first_seen.get(&name) {
            let line = self.src.line_of(*first);
            return Err(self.fail(
                name_at.span(),
                &at.key("name"),
                &format!("{name:?}: duplicate credential name (first defined on line {line})"),
            ));
        }
        first_seen.insert(name.clone(), name_at.span().start);
        Ok(name)
    }

    /// The hosts: as written (at least one), else the preset's; not all passthrough.
    fn credential_hosts(
        &self,
        c: &RawCredential,
        preset: Option<&CredentialPreset>,
        at: &CredAt,
        passthrough: &[HostRule],
    ) -> Result<Vec<HostRule>, PolicyError> {
        let hosts = match (&c.hosts, preset) {
            (Some(hosts), _) => {
                if hosts.get_ref().is_empty() {
                    return Err(self.fail(
                        hosts.span(),
                        &at.key("hosts"),
                        "needs at least one host pattern",
                    ));
                }
                self.rules(hosts.get_ref(), &at.key("hosts"), false)?
            }
            (None, Some(p)) => p
                .hosts
                .iter()
                .map(|h| HostRule::parse(h))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.cred_missing(at, &format!("hosts` ({e})")))?,
            (None, None) => return Err(self.cred_missing(at, "hosts")),
        };
        if hosts
            .iter()
            .all(|h| covering(passthrough, &h.pattern).is_some())
        {
            let span = c
                .hosts
                .as_ref()
                .map(Spanned::span)
                .or_else(|| c.preset.as_ref().map(Spanned::span))
                .unwrap_or(at.table.clone());
            return Err(self.fail(
                span,
                &at.key("hosts"),
                "every host is in network.passthrough (never intercepted), so this credential could never be injected",
            ));
        }
        Ok(hosts)
    }

    /// The header (a valid name, lowercased) and the format (`git-basic` only in
    /// `authorization`, else a template with one `{}`), as written or the preset's.
    fn credential_header_format(
        &self,
        c: &RawCredential,
        preset: Option<&CredentialPreset>,
        at: &CredAt,
    ) -> Result<(String, CredentialFormat), PolicyError> {
        let (header, header_at) = match (&c.header, preset) {
            (Some(h), _) => {
                if let Err(reason) = check_header(h.get_ref()) {
                    return Err(self.bad(h, &at.key("header"), reason));
                }
                (h.get_ref().to_ascii_lowercase(), h.span())
            }
            (None, Some(p)) => (p.header.to_owned(), at.table.clone()),
            (None, None) => return Err(self.cred_missing(at, "header")),
        };
        let format_text = match (&c.format, preset) {
            (Some(f), _) => f.clone(),
            (None, Some(p)) => Spanned::new(at.table.clone(), p.format.to_owned()),
            (None, None) => return Err(self.cred_missing(at, "format")),
        };
        let format = match format_text.get_ref().as_str() {
            GIT_BASIC => CredentialFormat::GitBasic,
            template => {
                if let Err(reason) = check_template(template) {
                    return Err(self.bad(&format_text, &at.key("format"), &reason));
                }
                CredentialFormat::Template(template.to_owned())
            }
        };
        if format == CredentialFormat::GitBasic && header != "authorization" {
            return Err(self.fail(
                header_at,
                &at.key("header"),
                &format!("{header:?}: format \"git-basic\" goes in the \"authorization\" header"),
            ));
        }
        Ok((header, format))
    }

    /// `methods` and `paths`: which requests on its hosts the credential is injected into;
    /// as written, else the preset's paths; every method and path when neither says. A
    /// git credential's scope is `[git]` and the GitHub API routes: neither may be set.
    fn credential_scope(
        &self,
        c: &RawCredential,
        preset: Option<&CredentialPreset>,
        at: &CredAt,
        format: &CredentialFormat,
    ) -> Result<CredentialScope, PolicyError> {
        if *format == CredentialFormat::GitBasic
            && let Some(span) = c
                .methods
                .as_ref()
                .map(Spanned::span)
                .or_else(|| c.paths.as_ref().map(Spanned::span))
        {
            return Err(self.fail(
                span,
                &at.key("methods"),
                "a git-basic credential is scoped by [git] repositories and the GitHub API routes, not by methods or paths",
            ));
        }
        let methods = match &c.methods {
            None => Methods::Any,
            Some(m) => self.methods(m, &at.key("methods"))?,
        };
        let paths = match (&c.paths, preset) {
            (Some(paths), _) => {
                if paths.get_ref().is_empty() {
                    return Err(self.fail(
                        paths.span(),
                        &at.key("paths"),
                        "needs at least one path glob (leave it out for every path)",
                    ));
                }
                paths
                    .get_ref()
                    .iter()
                    .map(|p| {
                        PathGlob::parse(p.get_ref())
                            .map_err(|e| self.bad(p, &at.key("paths"), &e.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            (None, Some(p)) => p
                .paths
                .iter()
                .map(|g| PathGlob::parse(g))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.fail(at.table.clone(), &at.key("paths"), &e.to_string()))?,
            (None, None) => Vec::new(),
        };
        Ok(CredentialScope { methods, paths })
    }

    fn l7_rules(
        &self,
        raw: Vec<Spanned<RawRule>>,
        passthrough: &[HostRule],
    ) -> Result<Vec<L7Rule>, PolicyError> {
        let mut out = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let key = |field: &str| format!("rules[{i}].{field}");
            let r = r.into_inner();
            let name = match &r.name {
                None => None,
                Some(n) => {
                    let text = n.get_ref();
                    let ok = (1..=MAX_RULE_NAME_LEN).contains(&text.chars().count())
                        && !text.chars().any(char::is_control);
                    if !ok {
                        return Err(self.bad(
                            n,
                            &key("name"),
                            "must be 1-100 characters, no control characters",
                        ));
                    }
                    Some(text.clone())
                }
            };
            let host = HostRule::parse(r.host.get_ref())
                .map_err(|e| self.bad(&r.host, &key("host"), &e.to_string()))?;
            if host.port.is_some() {
                return Err(self.bad(
                    &r.host,
                    &key("host"),
                    &RuleError::PortNotAllowed.to_string(),
                ));
            }
            if let Some(p) = covering(passthrough, &host.pattern) {
                return Err(self.bad(
                    &r.host,
                    &key("host"),
                    &format!(
                        "is in network.passthrough ({:?}), which is never intercepted: this rule could never apply",
                        p.text
                    ),
                ));
            }
            let methods = match &r.method {
                None => Methods::Any,
                Some(m) => self.methods(m, &key("method"))?,
            };
            let path = match &r.path {
                None => PathGlob::parse("/**"),
                Some(p) => PathGlob::parse(p.get_ref()),
            };
            let path = path.map_err(|e| match &r.path {
                Some(p) => self.bad(p, &key("path"), &e.to_string()),
                None => self.fail(r.host.span(), &key("path"), &e.to_string()),
            })?;
            out.push(L7Rule {
                name,
                host,
                methods,
                path,
                action: r.action,
            });
        }
        Ok(out)
    }

    /// `method`: `"*"`, one method, or a non-empty list of methods (uppercased).
    fn methods(&self, raw: &Spanned<toml::Value>, key: &str) -> Result<Methods, PolicyError> {
        let fail = |reason: &str| self.fail(raw.span(), key, reason);
        let list: Vec<&str> = match raw.get_ref() {
            toml::Value::String(s) => vec![s.as_str()],
            toml::Value::Array(a) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| fail("every method must be a string"))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(fail("a method (\"GET\"), a list of methods, or \"*\"")),
        };
        if list.is_empty() {
            return Err(fail("needs at least one method (or \"*\" for any)"));
        }
        if list.contains(&"*") {
            if list.len() > 1 {
                return Err(fail("\"*\" (any method) must be alone"));
            }
            return Ok(Methods::Any);
        }
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        let mut out: Vec<String> = Vec::new();
        for (j, m) in list.iter().enumerate() {
            if m.is_empty() || !m.bytes().all(token) {
                return Err(fail(&format!("[{j}] {m:?}: not an HTTP method")));
            }
            let m = m.to_ascii_uppercase();
            if !out.contains(&m) {
                out.push(m);
            }
        }
        Ok(Methods::Only(out))
    }

    fn presets(
        &self,
        raw: &[Spanned<String>],
        passthrough: &[HostRule],
        l7: &mut L7Rules,
    ) -> Result<(), PolicyError> {
        for (i, p) in raw.iter().enumerate() {
            let key = format!("l7.presets[{i}]");
            let preset = Preset::ALL
                .iter()
                .find(|(_, n)| n == p.get_ref())
                .map(|(preset, _)| *preset)
                .ok_or_else(|| self.bad(p, &key, "unknown preset (known: github)"))?;
            if l7.presets.contains(&preset) {
                return Err(self.bad(p, &key, "listed twice"));
            }
            let (deny, body) = match preset {
                Preset::Github => github::rules().map_err(|e| self.bad(p, &key, &e))?,
            };
            let hosts = deny
                .iter()
                .map(|r| &r.host)
                .chain(body.iter().map(|b| &b.host));
            for host in hosts {
                if let Some(pass) = covering(passthrough, &host.pattern) {
                    return Err(self.bad(
                        p,
                        &key,
                        &format!(
                            "its rules are for {}, which network.passthrough ({:?}) never intercepts",
                            host.text, pass.text
                        ),
                    ));
                }
            }
            l7.presets.push(preset);
            l7.preset_rules.extend(deny);
            l7.body_rules.extend(body);
        }
        Ok(())
    }

    fn credential_source(
        &self,
        raw: &Spanned<RawSource>,
        key: &str,
    ) -> Result<CredentialSource, PolicyError> {
        let env = match &raw.get_ref().env {
            None => None,
            Some(env) => {
                let name = env.get_ref();
                let mut bytes = name.bytes();
                let ok = bytes
                    .next()
                    .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !ok {
                    return Err(self.bad(
                        env,
                        &format!("{key}.env"),
                        "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                    ));
                }
                Some(name.clone())
            }
        };
        let file = match &raw.get_ref().file {
            None => None,
            Some(file) => {
                let path = file.get_ref();
                if !path.starts_with('/') || path.contains('\0') {
                    return Err(self.bad(
                        file,
                        &format!("{key}.file"),
                        "must be an absolute path (e.g. \"/run/secrets/name\")",
                    ));
                }
                Some(PathBuf::from(path))
            }
        };
        match (env, file) {
            (Some(env), None) => Ok(CredentialSource::Env(env)),
            (None, Some(file)) => Ok(CredentialSource::File(file)),
            (Some(env), Some(file)) => Ok(CredentialSource::EnvOrFile { env, file }),
            (None, None) => Err(self.fail(
                raw.span(),
                key,
                "needs `env`, `file` or both (the variable first, else the file), e.g. { env = \"API_KEY\" }",
            )),
        }
    }

    fn git(&self, raw: RawGit, sandbox: &str) -> Result<GitPolicy, PolicyError> {
        let mut out = GitPolicy::defaults_for(sandbox);
        if let Some(repos) = raw.repositories {
            out.repositories = self.each(&repos, "git.repositories", git::repository)?;
        }
        if let Some(branches) = raw.push_branches {
            out.push_branches = self.each(&branches, "git.push_branches", |b| {
                git::branch_pattern(b, true).map(|b| b.replace(SANDBOX_PLACEHOLDER, sandbox))
            })?;
        }
        if let Some(branches) = raw.protected_branches {
            out.protected_branches = self.each(&branches, "git.protected_branches", |b| {
                git::branch_pattern(b, false)
            })?;
        }
        if let Some(paths) = raw.restricted_paths {
            out.restricted_paths = self.each(&paths, "git.restricted_paths", git::path_pattern)?;
        }
        if let Some(fold) = raw.restricted_paths_case_insensitive {
            out.restricted_paths_case_insensitive = fold;
        }
        if let Some(tags) = raw.allow_tags {
            out.allow_tags = tags;
        }
        Ok(out)
    }

    fn each(
        &self,
        raw: &[Spanned<String>],
        key: &str,
        check: impl Fn(&str) -> Result<String, String>,
    ) -> Result<Vec<String>, PolicyError> {
        raw.iter()
            .enumerate()
            .map(|(i, v)| check(v.get_ref()).map_err(|e| self.bad(v, &format!("{key}[{i}]"), &e)))
            .collect()
    }
}

/// The passthrough rule that covers every host `pattern` matches, if any.
fn covering<'p>(passthrough: &'p [HostRule], pattern: &HostPattern) -> Option<&'p HostRule> {
    passthrough.iter().find(|p| p.pattern.covers(pattern))
}

/// A header name: an RFC 9110 token, and not one the proxy owns.
fn check_header(name: &str) -> Result<(), &'static str> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err("not a valid HTTP header name");
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err("this header frames the message or the connection; pick another");
    }
    Ok(())
}

/// A header value template: exactly one `{}`, no control characters.
fn check_template(template: &str) -> Result<(), String> {
    let n = template.matches("{}").count();
    if n != 1 {
        return Err(format!(
            "must contain exactly one \"{{}}\" (found {n}), e.g. \"Bearer {{}}\", or be \"git-basic\""
        ));
    }
    if template.chars().any(char::is_control) {
        return Err("control characters are not allowed in a header value".into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(text, Path::new("policy.toml"))
    }

    /// The error for `text`, asserting it points at `line` and mentions `needle`.
    #[track_caller]
    #[test]
    fn registries_by_name_are_read_only_allow_rules() {
        let base = "[sandbox]\nname = \"demo\"\n[network]\n";
        let p = parse(&format!("{base}registries = [\"pypi\", \"crates\"]\n")).unwrap();
        let host = |h: &str| crate::Host::parse(h).unwrap();
        for h in ["pypi.org", "files.pythonhosted.org", "static.crates.io"] {
            assert!(
                p.network.allow.iter().any(|r| r.matches_host(&host(h))),
                "{h}"
            );
            assert!(!p.is_writable(&host(h)), "{h} is read-only");
        }
        assert!(
            !p.network
                .allow
                .iter()
                .any(|r| r.matches_host(&host("registry.npmjs.org")))
        );
        refused(
            &format!("{base}registries = [\"npm\", \"cpan\"]\n"),
            4,
            "network.registries[1]: \"cpan\": is not a registry this version knows (npm, yarn, pypi",
        );
    }

    #[test]
    fn limits_default_far_above_an_honest_agent_and_are_validated_with_their_line() {
        use crate::limits::Limits;
        let base = "[sandbox]\nname = \"demo\"\n";
        assert_eq!(parse(base).unwrap().limits, Limits::default());
        let set = format!("{base}[limits]\nrequests_per_second = 5\nrequest_burst = 10\n");
        let l = parse(&set).unwrap().limits;
        assert_eq!((l.requests_per_second, l.request_burst), (5, 10));
        refused(
            &format!("{base}[limits]\nrequests_per_second = 0\n"),
            4,
            "limits.requests_per_second: must be between 1 and 1000000",
        );
        refused(
            &format!("{base}[limits]\n\nrequest_burst = 99999999999\n"),
            5,
            "limits.request_burst",
        );
        let set = format!("{base}[limits]\ncircuit_failures = 2\ncircuit_cooldown_seconds = 30\n");
        let l = parse(&set).unwrap().limits;
        assert_eq!((l.circuit_failures, l.circuit_cooldown_seconds), (2, 30));
        refused(
            &format!("{base}[limits]\ncircuit_cooldown_seconds = 86400\n"),
            4,
            "limits.circuit_cooldown_seconds: must be between 1 and 3600",
        );
        let set = format!(
            "{base}[limits]\nupload_bytes_per_hour = 4096\nsandbox_requests_per_hour = 9\n"
        );
        let l = parse(&set).unwrap().limits;
        assert_eq!(
            (l.upload_bytes_per_hour, l.sandbox_requests_per_hour),
            (4096, 9)
        );
        assert_eq!(l.sandbox_upload_bytes_per_hour, 4 << 30);
        refused(
            &format!("{base}[limits]\nsandbox_upload_bytes_per_hour = 10\n"),
            4,
            "limits.sandbox_upload_bytes_per_hour: must be between 1024 and 1099511627776",
        );
        let set = format!("{base}[limits]\nllm_tokens_per_hour = 10000\n");
        let l = parse(&set).unwrap().limits;
        assert_eq!(
            (l.llm_tokens_per_hour, l.llm_tokens_warn()),
            (10_000, 8_000)
        );
        let set = format!("{base}[limits]\nllm_tokens_warn_per_hour = 5000\n");
        assert_eq!(parse(&set).unwrap().limits.llm_tokens_warn(), 5000);
        refused(
            &format!("{base}[limits]\nllm_tokens_per_hour = 10\n"),
            4,
            "limits.llm_tokens_per_hour: must be between 1000",
        );
        let set = format!("{base}[limits]\napprovals_pending = 2\napprovals_per_minute = 500\n");
        let l = parse(&set).unwrap().limits;
        assert_eq!((l.approvals_pending, l.approvals_per_minute), (2, 500));
        refused(
            &format!("{base}[limits]\napprovals_pending = 0\n"),
            4,
            "limits.approvals_pending: must be between 1 and 10000",
        );
        // No hold by default: an asked request is refused at once.
        let l = parse(base).unwrap().limits;
        assert_eq!((l.approvals_hold_seconds, l.approvals_holds), (0, 4));
        let set = format!("{base}[limits]\napprovals_hold_seconds = 30\napprovals_holds = 2\n");
        let l = parse(&set).unwrap().limits;
        assert_eq!((l.approvals_hold_seconds, l.approvals_holds), (30, 2));
        refused(
            &format!("{base}[limits]\napprovals_hold_seconds = 301\n"),
            4,
            "limits.approvals_hold_seconds: must be between 0 and 300",
        );
        let unknown = parse(&format!("{base}[limits]\nrate = 7\n")).unwrap_err();
        assert_eq!(unknown.line(), Some(4), "{unknown}");
    }

    #[test]
    fn signals_default_to_log_and_are_validated_with_their_line() {
        use crate::signals::{SignalAction, Signals};
        let base = "[sandbox]\nname = \"demo\"\n";
        assert_eq!(parse(base).unwrap().signals, Signals::default());
        let set = format!(
            "{base}[signals]\nencoded_blob = \"deny\"\nblob_min_bytes = 8192\nhigh_entropy = \"off\"\n"
        );
        let s = parse(&set).unwrap().signals;
        assert_eq!(s.encoded_blob, SignalAction::Deny);
        assert_eq!(s.blob_min_bytes, 8192);
        assert_eq!(s.high_entropy, SignalAction::Off);
        assert_eq!(s.entropy_min_bytes, crate::signals::DEFAULT_ENTROPY_MIN);
        refused(
            &format!("{base}[signals]\nblob_min_bytes = 10\n"),
            4,
            "signals.blob_min_bytes: must be between 256",
        );
        refused(
            &format!("{base}[signals]\n\nentropy_min_bytes = -1\n"),
            5,
            "signals.entropy_min_bytes",
        );
        let bad = parse(&format!("{base}[signals]\nhigh_entropy = \"block\"\n")).unwrap_err();
        assert_eq!(bad.line(), Some(4), "{bad}");
        let unknown = parse(&format!("{base}[signals]\nentropy = 7\n")).unwrap_err();
        assert_eq!(unknown.line(), Some(4), "{unknown}");
    }

    /// The one-line error of the policy `text` (as `policy.toml`), which must point at
    /// `line` and say `needle`: every section's bad-input tests check their errors with it.
    pub(crate) fn refused(text: &str, line: usize, needle: &str) -> String {
        let err = match parse(text) {
            Ok(p) => panic!("accepted: {p:?}"),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert_eq!(err.line(), Some(line), "{msg}");
        assert!(msg.starts_with(&format!("policy.toml:{line}:")), "{msg}");
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
        assert!(!msg.contains('\n'), "not one line: {msg:?}");
        msg
    }

    const MINIMAL: &str = "[sandbox]\nname = \"demo\"\n";

    #[test]
    fn example_policy_parses() {
        let text = include_str!("../../examples/policy.toml");
        let p = Policy::parse(text, Path::new("examples/policy.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.sandbox.name, "demo");
        assert_eq!(p.sandbox.mode, Mode::Enforce);
        assert!(
            p.network
                .allow
                .iter()
                .any(|r| r.text == "api.anthropic.com")
        );
        assert_eq!(p.credentials.len(), 2);
        assert_eq!(p.credentials[0].header, "x-api-key");
        assert_eq!(
            p.credentials[0].source,
            CredentialSource::EnvOrFile {
                env: "ANTHROPIC_API_KEY".into(),
                file: "/run/secrets/anthropic_api_key".into()
            }
        );
        assert_eq!(p.credentials[1].format, CredentialFormat::GitBasic);
        assert_eq!(p.credentials[1].name, "github");
        assert_eq!(p.credentials[1].hosts.len(), 2);
        assert!(p.network.passthrough.is_empty());
        assert_eq!(p.l7.presets, [Preset::Github]);
        assert_eq!(p.l7.rules.len(), 1);
        assert_eq!(p.l7.rules[0].methods, Methods::Only(vec!["DELETE".into()]));
        // The example spells out the defaults: it must agree with them.
        let defaults = GitPolicy::defaults_for("demo");
        assert_eq!(p.git.push_branches, ["sandbox/demo/*"]);
        assert_eq!(p.git.push_branches, defaults.push_branches);
        assert_eq!(p.git.protected_branches, defaults.protected_branches);
        assert_eq!(p.git.restricted_paths, defaults.restricted_paths);
        assert_eq!(p.git.allow_tags, defaults.allow_tags);
        assert_eq!(p.git.repositories, ["github.com/example-org/example-repo"]);
    }

    #[test]
    fn minimal_policy_gets_defaults() {
        let p = parse(MINIMAL).unwrap();
        assert_eq!(p.sandbox.mode, Mode::Enforce);
        assert!(p.network.allow.is_empty() && p.network.deny.is_empty());
        assert!(p.credentials.is_empty());
        assert_eq!(p.git, GitPolicy::defaults_for("demo"));
        assert_eq!(p.git.protected_branches, ["main", "master", "release/*"]);
        assert_eq!(p.git.restricted_paths, [".github/workflows/**"]);
        assert!(p.git.restricted_paths_case_insensitive);
        assert!(!p.git.allow_tags);
        let exact = parse(&format!(
            "{MINIMAL}[git]\nrestricted_paths_case_insensitive = false\n"
        ))
        .unwrap();
        assert!(!exact.git.restricted_paths_case_insensitive);
        let rules = exact.git.compile().unwrap();
        assert!(rules.restricted_paths.matches(".github/workflows/x.yml"));
        assert!(!rules.restricted_paths.matches(".GitHub/workflows/x.yml"));
        let folded = p.git.compile().unwrap();
        assert!(folded.restricted_paths.matches(".GitHub/Workflows./x.yml"));
    }

    #[test]
    fn strip_headers_are_header_names_or_prefixes_checked_with_their_line() {
        let p = parse(
            "[sandbox]\nname = \"demo\"\n[network]\nstrip_headers = [\"X-Corp-User\", \"x-tenant-*\"]\n",
        )
        .unwrap();
        assert_eq!(p.network.strip_headers, ["x-corp-user", "x-tenant-*"]);
        assert!(p.network.strips_header("x-corp-user"));
        assert!(p.network.strips_header("x-tenant-id"));
        assert!(!p.network.strips_header("x-corp-user-agent"));
        assert!(!p.network.strips_header("x-tenant"));
        for (bad, why) in [
            ("\"x corp\"", "not a valid HTTP header name"),
            ("\"\"", "not a valid HTTP header name"),
            ("\"*\"", "at least two characters"),
            ("\"x*\"", "at least two characters"),
            ("\"x-a*b\"", "may only end a prefix"),
            ("\"x-**\"", "may only end a prefix"),
            ("\"Content-Length\"", "frames the message"),
            ("\"transfer-encoding\"", "frames the message"),
        ] {
            let text = format!("[sandbox]\nname = \"demo\"\n[network]\nstrip_headers = [{bad}]\n");
            refused(&text, 4, why);
            refused(&text, 4, "network.strip_headers[0]");
        }
        // Never the header a credential is injected into.
        let text = "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"api.anthropic.com\"]\nstrip_headers = [\"x-api-*\"]\n[[credentials]]\npreset = \"anthropic\"\nsource = { env = \"K\" }\n";
        refused(text, 5, "credential \"anthropic\"");
    }

    #[test]
    fn git_hosts_are_host_rules_without_ports() {
        let p = parse(
            "[sandbox]\nname = \"demo\"\n[network]\ngit_hosts = [\"git.corp.example\", \"*.mirror.example\"]\n",
        )
        .unwrap();
        assert_eq!(p.network.git_hosts.len(), 2);
        let text =
            "[sandbox]\nname = \"demo\"\n[network]\ngit_hosts = [\"git.corp.example:8443\"]\n";
        refused(text, 4, "network.git_hosts[0]");
    }

    #[test]
    fn dns_name_budget_is_a_bounded_byte_count() {
        assert_eq!(parse(MINIMAL).unwrap().network.dns_name_budget(), 16 * 1024);
        let p = parse("[sandbox]\nname = \"demo\"\n[network]\ndns_name_budget = 0\n").unwrap();
        assert_eq!(p.network.dns_name_budget(), 0);
        for bad in ["-1", "1048577", "\"big\""] {
            let text = format!("[sandbox]\nname = \"demo\"\n[network]\ndns_name_budget = {bad}\n");
            let needle = if bad.starts_with('"') {
                "invalid type"
            } else {
                "dns_name_budget"
            };
            refused(&text, 4, needle);
        }
    }

    #[test]
    fn unlisted_hosts_are_denied_unless_the_policy_asks() {
        assert_eq!(parse(MINIMAL).unwrap().network.unlisted, Unlisted::Deny);
        let p = parse("[sandbox]\nname = \"demo\"\n[network]\nunlisted = \"ask\"\n").unwrap();
        assert_eq!(p.network.unlisted, Unlisted::Ask);
        let p = parse("[sandbox]\nname = \"demo\"\n[network]\nunlisted = \"deny\"\n").unwrap();
        assert_eq!(p.network.unlisted, Unlisted::Deny);
        refused(
            "[sandbox]\nname = \"demo\"\n[network]\nunlisted = \"allow\"\n",
            4,
            "network.unlisted: \"allow\" is not \"deny\" or \"ask\"",
        );
    }

    #[test]
    fn report_mode_parses() {
        let p = parse("[sandbox]\nname = \"demo\"\nmode = \"report\"\n").unwrap();
        assert_eq!(p.sandbox.mode, Mode::Report);
        refused(
            "[sandbox]\nname = \"demo\"\nmode = \"audit\"\n",
            3,
            "unknown variant `audit`",
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        refused(
            "[sandbox]\nname = \"demo\"\n\n[network]\nallowx = []\n",
            5,
            "unknown field `allowx`",
        );
        refused(
            "[sandbox]\nname = \"demo\"\nnmae = \"x\"\n",
            3,
            "unknown field `nmae`",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[netwrok]\nallow = []\n",
            3,
            "unknown field `netwrok`",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[[credentials]]\nname = \"a\"\nsource = { env = \"A\", path = \"/x\" }\nhosts = [\"a.com\"]\nheader = \"x\"\nformat = \"{}\"\n",
            5,
            "unknown field `path`",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nallow_tag = true\n",
            4,
            "unknown field `allow_tag`",
        );
    }

    #[test]
    fn syntax_and_type_errors_have_a_line() {
        refused(
            "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"a.com\"\n",
            4,
            "",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nallow_tags = \"yes\"\n",
            4,
            "",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nrestricted_paths = []\nrestricted_paths_case_insensitive = \"no\"\n",
            5,
            "",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nrestricted_paths_case_sensitive = true\n",
            4,
            "unknown field",
        );
        refused("[sandbox]\nname = \"demo\"\nname = \"again\"\n", 3, "");
        let msg = refused("[network]\nallow = []\n", 1, "missing field `sandbox`");
        assert!(msg.starts_with("policy.toml:1:1: "), "{msg}");
    }

    #[test]
    fn bad_host_patterns_report_line_index_and_reason() {
        let text = "[sandbox]\nname = \"demo\"\n\n[network]\nallow = [\n  \"a.com\",\n  \"b.com\",\n  \"*.\",\n]\n";
        let msg = refused(
            text,
            8,
            "network.allow[2]: \"*.\": empty label in host pattern",
        );
        assert_eq!(
            msg,
            "policy.toml:8:3: network.allow[2]: \"*.\": empty label in host pattern"
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[network]\ndeny = [\"https://x.com\"]\n",
            4,
            "network.deny[0]: \"https://x.com\": a scheme is not allowed",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"*\"]\n",
            4,
            "network.allow[0]",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"a.com\", \"x.com\\r\\nevil: 1\"]\n",
            4,
            "network.allow[1]: \"x.com\\r\\nevil: 1\": forbidden character '\\r'",
        );
    }

    const CRED_HEAD: &str = "[sandbox]\nname = \"demo\"\n";

    fn cred(name: &str, extra: &str) -> String {
        format!(
            "[[credentials]]\nname = \"{name}\"\nsource = {{ env = \"K\" }}\nhosts = [\"a.com\"]\nheader = \"x-key\"\nformat = \"{{}}\"\n{extra}"
        )
    }

    #[test]
    fn duplicate_credential_names_point_at_the_second() {
        // Line 3 starts the first block (name on line 4); the second's name is on line 10.
        let text = format!("{CRED_HEAD}{}{}", cred("api", ""), cred("api", ""));
        let msg = refused(
            &text,
            10,
            "credentials[1].name: \"api\": duplicate credential name",
        );
        assert!(msg.contains("first defined on line 4"), "{msg}");
    }

    #[test]
    fn format_without_placeholder_points_at_format() {
        let text = format!(
            "{CRED_HEAD}[[credentials]]\nname = \"a\"\nsource = {{ env = \"K\" }}\nhosts = [\"a.com\"]\nheader = \"authorization\"\nformat = \"Bearer\"\n"
        );
        refused(
            &text,
            8,
            "credentials[0].format: \"Bearer\": must contain exactly one \"{}\" (found 0)",
        );
        let text = text.replace("\"Bearer\"", "\"{} {}\"");
        refused(&text, 8, "(found 2)");
        let text = text.replace("\"{} {}\"", "\"Bearer {}\\r\\nx-evil: 1\"");
        refused(&text, 8, "control characters");
    }

    #[test]
    fn credential_fields_are_validated() {
        let base = format!("{CRED_HEAD}{}", cred("a", ""));
        let p = parse(&base).unwrap();
        assert_eq!(
            p.credentials[0].format,
            CredentialFormat::Template("{}".into())
        );
        assert_eq!(
            p.credentials[0].format.render_template("s3cret").as_deref(),
            Some("s3cret")
        );

        let header = base.replace("\"x-key\"", "\"X-Api-Key\"");
        assert_eq!(parse(&header).unwrap().credentials[0].header, "x-api-key");
        for bad in [
            "\"x key\"",
            "\"x:key\"",
            "\"\"",
            "\"Host\"",
            "\"transfer-encoding\"",
            "\"x\\nkey\"",
        ] {
            refused(&base.replace("\"x-key\"", bad), 7, "credentials[0].header");
        }
        refused(&base.replace("\"a\"", "\"A\""), 4, "credentials[0].name");
        refused(&base.replace("\"a\"", "\"a.b\""), 4, "credentials[0].name");
        refused(
            &base.replace("[\"a.com\"]", "[]"),
            6,
            "credentials[0].hosts: needs at least one",
        );
        refused(
            &base.replace("[\"a.com\"]", "[\"a.com:443\"]"),
            6,
            "credentials[0].hosts[0]: \"a.com:443\": a port is not allowed",
        );
        refused(
            &base.replace("[\"a.com\"]", "[\"b.com\", \"*\"]"),
            6,
            "credentials[0].hosts[1]",
        );
        refused(
            &base.replace("{ env = \"K\" }", "{ env = \"K\", file = \"x\" }"),
            5,
            "credentials[0].source.file",
        );
        refused(
            &base.replace("{ env = \"K\" }", "{}"),
            5,
            "needs `env`, `file` or both",
        );
        refused(
            &base.replace("{ env = \"K\" }", "{ env = \"1K\" }"),
            5,
            "credentials[0].source.env",
        );
        refused(
            &base.replace("{ env = \"K\" }", "{ file = \"run/x\" }"),
            5,
            "credentials[0].source.file",
        );
        let file = base.replace("{ env = \"K\" }", "{ file = \"/run/secrets/k\" }");
        assert_eq!(
            parse(&file).unwrap().credentials[0].source,
            CredentialSource::File("/run/secrets/k".into())
        );
        // Both: the variable first, else the file (agent profiles, for docker run and the CLI).
        let both = base.replace(
            "{ env = \"K\" }",
            "{ env = \"K\", file = \"/run/secrets/k\" }",
        );
        let source = parse(&both).unwrap().credentials[0].source.clone();
        assert_eq!(
            source,
            CredentialSource::EnvOrFile {
                env: "K".into(),
                file: "/run/secrets/k".into()
            }
        );
        assert_eq!(source.env(), Some("K"));
        assert_eq!(source.file(), Some(Path::new("/run/secrets/k")));
        // git-basic must go in authorization.
        refused(&base.replace("\"{}\"", "\"git-basic\""), 7, "authorization");
        let gb = base
            .replace("\"{}\"", "\"git-basic\"")
            .replace("\"x-key\"", "\"Authorization\"");
        assert_eq!(
            parse(&gb).unwrap().credentials[0].format,
            CredentialFormat::GitBasic
        );
        // A missing field is a shape error with a line.
        refused(
            &base.replace("header = \"x-key\"\n", ""),
            3,
            "missing field `header`",
        );
    }

    #[test]
    fn sandbox_names() {
        for good in ["a", "demo", "team-1", &"a".repeat(40)] {
            assert!(
                parse(&format!("[sandbox]\nname = \"{good}\"\n")).is_ok(),
                "{good}"
            );
        }
        for bad in ["", "-a", "a-", "Demo", "a_b", "a.b", "a b", &"a".repeat(41)] {
            refused(&format!("[sandbox]\nname = \"{bad}\"\n"), 2, "sandbox.name");
        }
    }

    #[test]
    fn git_table() {
        let p = parse(
            "[sandbox]\nname = \"demo\"\n[git]\nrepositories = [\"GitHub.com/O/R\"]\npush_branches = [\"agent/{sandbox}/*\", \"feature/*\"]\nallow_tags = true\n",
        )
        .unwrap();
        assert_eq!(p.git.repositories, ["github.com/o/r"]);
        assert_eq!(p.git.push_branches, ["agent/demo/*", "feature/*"]);
        assert_eq!(p.git.protected_branches, ["main", "master", "release/*"]);
        assert!(p.git.allow_tags);
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nrepositories = [\"github.com/o/r\",\n \"https://github.com/o/r.git\"]\n",
            5,
            "git.repositories[1]",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nprotected_branches = [\"refs/heads/main\"]\n",
            4,
            "git.protected_branches[0]",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\npush_branches = [\"{user}/*\"]\n",
            4,
            "git.push_branches[0]",
        );
        refused(
            "[sandbox]\nname = \"demo\"\n[git]\nrestricted_paths = [\"/etc/**\"]\n",
            4,
            "git.restricted_paths[0]",
        );
    }

    #[test]
    fn credential_scopes_come_from_the_preset_or_the_table() {
        let p = parse(
            "[sandbox]\nname = \"demo\"\n[[credentials]]\npreset = \"anthropic\"\nsource = { env = \"A\" }\n[[credentials]]\nname = \"k\"\nsource = { env = \"K\" }\nhosts = [\"api.example.com\"]\nheader = \"x-key\"\nformat = \"{}\"\nmethods = \"post\"\npaths = [\"/v2/**\", \"/health\"]\n[[credentials]]\nname = \"any\"\nsource = { env = \"N\" }\nhosts = [\"b.example.com\"]\nheader = \"x-key\"\nformat = \"{}\"\n",
        )
        .unwrap();
        let [a, k, any] = p.credentials.as_slice() else {
            panic!("{:?}", p.credentials)
        };
        assert!(a.scope.allows("POST", "/v1/messages"));
        assert!(!a.scope.allows("POST", "/admin"));
        assert!(k.scope.allows("POST", "/v2/x/y"));
        assert!(k.scope.allows("post", "/health"));
        assert!(!k.scope.allows("GET", "/health"));
        assert!(!k.scope.allows("POST", "/v2/../admin"));
        assert!(any.scope.allows("DELETE", "/anything"));

        let head = "[sandbox]\nname = \"demo\"\n[[credentials]]\nsource = { env = \"A\" }\n";
        refused(
            &format!("{head}preset = \"github\"\npaths = [\"/repos/**\"]\n"),
            6,
            "a git-basic credential is scoped by [git] repositories",
        );
        refused(
            &format!("{head}preset = \"openai\"\npaths = []\n"),
            6,
            "needs at least one path glob",
        );
        refused(
            &format!("{head}preset = \"openai\"\npaths = [\"v1\"]\n"),
            6,
            "credentials[0].paths",
        );
        refused(
            &format!("{head}preset = \"openai\"\nmethods = []\n"),
            6,
            "credentials[0].methods",
        );
    }

    #[test]
    fn credential_presets_fill_hosts_header_and_format() {
        let p = parse(
            "[sandbox]\nname = \"demo\"\n[[credentials]]\npreset = \"anthropic\"\nsource = { env = \"A\" }\n[[credentials]]\npreset = \"openai\"\nsource = { env = \"O\" }\n[[credentials]]\npreset = \"github\"\nname = \"gh\"\nsource = { file = \"/run/secrets/gh\" }\nhosts = [\"github.com\"]\n",
        )
        .unwrap();
        let [a, o, g] = p.credentials.as_slice() else {
            panic!("{:?}", p.credentials)
        };
        assert_eq!(a.name, "anthropic");
        assert_eq!(a.header, "x-api-key");
        assert_eq!(a.format, CredentialFormat::Template("{}".into()));
        assert_eq!(
            a.hosts.iter().map(|h| h.text.as_str()).collect::<Vec<_>>(),
            ["api.anthropic.com"]
        );
        assert_eq!(o.name, "openai");
        assert_eq!(o.header, "authorization");
        assert_eq!(o.format, CredentialFormat::Template("Bearer {}".into()));
        assert_eq!(o.hosts[0].text, "api.openai.com");
        // Explicit values win over the preset's.
        assert_eq!(g.name, "gh");
        assert_eq!(g.format, CredentialFormat::GitBasic);
        assert_eq!(g.header, "authorization");
        assert_eq!(
            g.hosts.iter().map(|h| h.text.as_str()).collect::<Vec<_>>(),
            ["github.com"]
        );

        let head = "[sandbox]\nname = \"demo\"\n[[credentials]]\n";
        refused(
            &format!("{head}preset = \"gitlab\"\nsource = {{ env = \"A\" }}\n"),
            4,
            "credentials[0].preset: \"gitlab\": unknown credential preset",
        );
        // The source stays required.
        refused(
            &format!("{head}preset = \"github\"\n"),
            3,
            "missing field `source`",
        );
        // Without a preset the other fields are required, each named.
        refused(
            &format!(
                "{head}name = \"x\"\nsource = {{ env = \"A\" }}\nheader = \"x\"\nformat = \"{{}}\"\n"
            ),
            3,
            "missing field `hosts`",
        );
        // Two presets of the same name collide on the default name.
        refused(
            &format!(
                "{head}preset = \"github\"\nsource = {{ env = \"A\" }}\n[[credentials]]\npreset = \"github\"\nsource = {{ env = \"B\" }}\n"
            ),
            7,
            "duplicate credential name",
        );
        // git-basic with another header is refused even when the format came from the preset.
        refused(
            &format!(
                "{head}preset = \"github\"\nsource = {{ env = \"A\" }}\nheader = \"x-token\"\n"
            ),
            6,
            "credentials[0].header: \"x-token\": format \"git-basic\"",
        );
    }

    #[test]
    fn passthrough_hosts_take_no_port_and_no_credential_or_rule() {
        let head = "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"*.example.com\"]\n";
        let p = parse(&format!(
            "{head}passthrough = [\"cdn.example.com\", \"*.example.org\"]\n"
        ))
        .unwrap();
        assert_eq!(p.network.passthrough.len(), 2);
        refused(
            &format!("{head}passthrough = [\"cdn.example.com:443\"]\n"),
            5,
            "network.passthrough[0]: \"cdn.example.com:443\": a port is not allowed",
        );
        // A credential whose hosts are all passthrough could never be injected.
        let text = format!(
            "{head}passthrough = [\"*.example.com\"]\n[[credentials]]\nname = \"k\"\nsource = {{ env = \"K\" }}\nhosts = [\"a.example.com\", \"*.b.example.com\"]\nheader = \"x-key\"\nformat = \"{{}}\"\n"
        );
        refused(
            &text,
            9,
            "credentials[0].hosts: every host is in network.passthrough",
        );
        // One host still intercepted is enough.
        assert!(parse(&text.replace("\"*.b.example.com\"", "\"example.com\"")).is_ok());
        // The same through a preset points at the preset.
        refused(
            &format!(
                "{head}passthrough = [\"api.anthropic.com\"]\n[[credentials]]\npreset = \"anthropic\"\nsource = {{ env = \"K\" }}\n"
            ),
            7,
            "credentials[0].hosts: every host",
        );
        // A rule on a passthrough host could never apply.
        refused(
            &format!(
                "{head}passthrough = [\"*.example.com\"]\n[[rules]]\nhost = \"a.example.com\"\nmethod = \"DELETE\"\n"
            ),
            7,
            "rules[0].host: \"a.example.com\": is in network.passthrough (\"*.example.com\")",
        );
        // Nor could a preset's.
        refused(
            &format!("{head}passthrough = [\"api.github.com\"]\n[l7]\npresets = [\"github\"]\n"),
            7,
            "l7.presets[0]: \"github\": its rules are for api.github.com",
        );
    }

    #[test]
    fn websocket_hosts_take_no_port_and_no_passthrough_host() {
        let head = "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"*.example.com\"]\n";
        let p = parse(&format!(
            "{head}websocket = [\"ws.example.com\", \"*.rt.example.com\"]\n"
        ))
        .unwrap();
        let host = |h: &str| crate::Host::parse(h).unwrap();
        assert!(p.network.websocket_allowed(&host("ws.example.com")));
        assert!(p.network.websocket_allowed(&host("a.rt.example.com")));
        assert!(!p.network.websocket_allowed(&host("example.com")));
        assert!(
            !parse(head)
                .unwrap()
                .network
                .websocket_allowed(&host("ws.example.com"))
        );
        refused(
            &format!("{head}websocket = [\"ws.example.com\", \"ws.example.com:443\"]\n"),
            5,
            "network.websocket[1]: \"ws.example.com:443\": a port is not allowed",
        );
        refused(
            &format!("{head}websocket = [\"a..b\"]\n"),
            5,
            "network.websocket[0]: \"a..b\"",
        );
        refused(
            &format!("{head}passthrough = [\"*.example.com\"]\nwebsocket = [\"ws.example.com\"]\n"),
            6,
            "network.websocket[0]: \"ws.example.com\": is in network.passthrough (\"*.example.com\")",
        );
    }

    #[test]
    fn l7_rules_are_validated_with_their_line() {
        let head = "[sandbox]\nname = \"demo\"\n[[rules]]\n";
        let p = parse(&format!(
            "{head}name = \"no merge\"\nhost = \"API.github.com\"\nmethod = [\"put\", \"PUT\"]\npath = \"/repos/*/*/pulls/*/merge\"\n[[rules]]\nhost = \"*.example.com\"\naction = \"allow\"\n"
        ))
        .unwrap();
        let [a, b] = p.l7.rules.as_slice() else {
            panic!()
        };
        assert_eq!(a.methods, Methods::Only(vec!["PUT".into()]));
        assert_eq!(a.action, Action::Deny);
        assert_eq!(a.label(), "no merge");
        assert_eq!(b.methods, Methods::Any);
        assert_eq!(b.path.as_str(), "/**");
        assert_eq!(b.action, Action::Allow);
        assert_eq!(b.label(), "*.example.com * /**");

        for (body, line, needle) in [
            (
                "host = \"a.com:443\"\n",
                4,
                "rules[0].host: \"a.com:443\": a port is not allowed",
            ),
            ("host = \"https://a.com\"\n", 4, "rules[0].host"),
            (
                "host = \"a.com\"\npath = \"repos\"\n",
                5,
                "rules[0].path: \"repos\": a path glob starts with '/'",
            ),
            ("host = \"a.com\"\npath = \"/a/../b\"\n", 5, "rules[0].path"),
            (
                "host = \"a.com\"\npath = \"/a%2Fb\"\n",
                5,
                "write the path decoded",
            ),
            (
                "host = \"a.com\"\nmethod = []\n",
                5,
                "rules[0].method: needs at least one",
            ),
            (
                "host = \"a.com\"\nmethod = [\"*\", \"GET\"]\n",
                5,
                "must be alone",
            ),
            (
                "host = \"a.com\"\nmethod = \"GE T\"\n",
                5,
                "not an HTTP method",
            ),
            ("host = \"a.com\"\nmethod = 1\n", 5, "rules[0].method"),
            (
                "host = \"a.com\"\naction = \"allwo\"\n",
                5,
                "unknown variant `allwo`",
            ),
            (
                "host = \"a.com\"\nmethods = \"GET\"\n",
                5,
                "unknown field `methods`",
            ),
            ("host = \"a.com\"\nname = \"\"\n", 5, "rules[0].name"),
            ("method = \"GET\"\n", 3, "missing field `host`"),
        ] {
            refused(&format!("{head}{body}"), line, needle);
        }
    }

    #[test]
    fn presets_are_known_and_listed_once() {
        let head = "[sandbox]\nname = \"demo\"\n[l7]\n";
        let p = parse(&format!("{head}presets = [\"github\"]\n")).unwrap();
        assert_eq!(p.l7.presets, [Preset::Github]);
        assert!(!p.l7.preset_rules.is_empty() && !p.l7.body_rules.is_empty());
        refused(
            &format!("{head}presets = [\"gitlab\"]\n"),
            4,
            "l7.presets[0]: \"gitlab\": unknown preset",
        );
        refused(
            &format!("{head}presets = [\"github\",\n \"github\"]\n"),
            5,
            "l7.presets[1]: \"github\": listed twice",
        );
        refused(
            &format!("{head}preset = [\"github\"]\n"),
            4,
            "unknown field `preset`",
        );
    }

    #[test]
    fn load_reads_the_file_or_says_why_not() {
        let dir = std::env::temp_dir().join(format!("airlock-policy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.toml");
        std::fs::write(
            &path,
            "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"*.\"]\n",
        )
        .unwrap();
        let msg = Policy::load(&path).unwrap_err().to_string();
        assert_eq!(
            msg,
            format!(
                "{}:4:10: network.allow[0]: \"*.\": empty label in host pattern",
                path.display()
            )
        );
        std::fs::write(&path, MINIMAL).unwrap();
        assert_eq!(Policy::load(&path).unwrap().sandbox.name, "demo");
        let missing = dir.join("missing.toml");
        let err = Policy::load(&missing).unwrap_err();
        assert!(matches!(err, PolicyError::Read { .. }));
        assert!(
            err.to_string()
                .starts_with(&format!("cannot read policy {}: ", missing.display())),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
