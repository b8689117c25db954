//! L7 rules as values: what the proxy may let through on an intercepted connection,
//! request by request (method and path, and for a few preset endpoints the body). The
//! rules, their methods and actions, the request view and the verdict live here; the
//! decision itself, which reads the whole policy (and the GitHub judges), is
//! [`crate::judge`]. This module imports neither.
//!
//! A judged body is only meaningful if the upstream reads the same values from it, so for
//! a request whose body is judged: a non-empty query string is denied (frameworks such as
//! Rails merge query parameters over body parameters: `?branch=main`, `?event=APPROVE`,
//! `?query=mutation...` would override what was judged), and the proxy must refuse a
//! `content-type` that [`judged_body_content_type_ok`] rejects (a form-encoded body can
//! hide `&branch=main` inside a JSON string) and any `content-encoding`.
//!
//! Semantics for a request on host H (its canonical form), method M, path P:
//! - rules apply when their host rule matches H; a `network.passthrough` host is never
//!   intercepted, so no rule ever applies to it;
//! - **deny wins**: a deny rule (of `[[rules]]` or of a preset) whose method matches M and
//!   whose path glob matches **any** reading of P ([`crate::path`]) denies;
//! - if H has allow rules, the request must match one of them, its method and **every
//!   strict reading** of P; otherwise it is denied with rule `"<H>: no allow rule matches"`;
//! - an `ask` rule is an allow rule the operator answers: a request that matches no allow
//!   rule but matches an ask rule (as an allow rule must) is [`L7Verdict::Ask`], for the
//!   proxy to put to the operator; a deny rule still wins over it;
//! - otherwise it passes.
//!
//! Methods compare ASCII case-insensitively. A `_method` query parameter (a method
//! override some frameworks honour) counts as a second method of the request: a deny rule
//! matching either denies, an allow rule must match both. The override *headers*
//! ([`METHOD_OVERRIDE_HEADERS`]) are the proxy's job: it removes them from intercepted
//! requests on hosts with rules, since this view does not carry headers.
//!
//! A path that cannot be judged ([`crate::path::PathError`]) on a host with rules is
//! denied.

use std::fmt;

use crate::glob::PathGlob;
use crate::host::Host;
use crate::path::PathForms;
use crate::reason::Reason;
use crate::rule::HostRule;

/// Request headers that ask a server to act as if the method were another. The proxy
/// strips them (or refuses the request) on hosts with rules.
pub const METHOD_OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Whether a request whose body is judged may carry this `content-type` (`None`: the
/// header is absent). Only JSON (`application/json`, `application/*+json`, any
/// parameters) is read the same way by the judge and the upstream; the proxy refuses
/// anything else with [`Reason::RequestDeniedByRule`].
#[must_use]
pub fn judged_body_content_type_ok(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else {
        return true;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json") && !sub.contains(['/', ' ']))
}

/// What the proxy knows of a request when it asks the policy.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The canonical host (after the CONNECT/SNI/Host agreement checks).
    pub host: &'a Host,
    /// The method as sent.
    pub method: &'a str,
    /// The origin-form path as sent (raw: not decoded), without the query.
    pub path: &'a str,
    /// The query string as sent, without the `?`.
    pub query: Option<&'a str>,
}

/// The L7 decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L7Verdict {
    /// Let it through; `rule` is the allow rule that matched, if one had to.
    Pass {
        /// The allow rule (its name, or its host, methods and path), if any.
        rule: Option<String>,
    },
    /// Ask the operator (an `ask` rule matched, no allow rule did): the proxy refuses it
    /// `approval-required` unless the session holds an approval for `rule`.
    Ask {
        /// The ask rule (its name, or its host, methods and path).
        rule: String,
    },
    /// Refuse it with `reason` (always [`Reason::RequestDeniedByRule`] today).
    Deny {
        /// Why (a stable code).
        reason: Reason,
        /// The rule responsible, for the audit log and the agent.
        rule: String,
    },
}

impl L7Verdict {
    /// True for [`L7Verdict::Pass`].
    #[must_use]
    pub fn is_pass(&self) -> bool {
        matches!(self, L7Verdict::Pass { .. })
    }

    /// True for [`L7Verdict::Deny`].
    #[must_use]
    pub fn is_deny(&self) -> bool {
        matches!(self, L7Verdict::Deny { .. })
    }

    pub(crate) fn deny(rule: impl Into<String>) -> L7Verdict {
        L7Verdict::Deny {
            reason: Reason::RequestDeniedByRule,
            rule: rule.into(),
        }
    }
}

/// `action` of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Refuse matching requests (the default).
    #[default]
    Deny,
    /// Let matching requests through; the host then refuses everything no allow rule
    /// matches.
    Allow,
    /// Put matching requests to the operator (the session's, answered out of band): an
    /// allow rule whose every use waits for an approval. Counts as an allow rule for what
    /// the host then refuses.
    Ask,
}

/// The methods every host accepts: they read. Anything else writes, and needs
/// [`crate::Policy::is_writable`] or an `allow` rule.
pub const READ_METHODS: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

/// Which methods a rule covers (uppercase).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Methods {
    /// `"*"`: every method.
    #[default]
    Any,
    /// These methods only.
    Only(Vec<String>),
    /// Every method but these (used by presets: "every write").
    Except(Vec<String>),
}

impl Methods {
    /// The methods that only read: a preset's "write" is any method but these.
    pub(crate) fn writes() -> Methods {
        Methods::Except(READ_METHODS.iter().map(|m| (*m).to_owned()).collect())
    }

    pub(crate) fn matches(&self, method: &str) -> bool {
        match self {
            Methods::Any => true,
            Methods::Only(list) => list.iter().any(|m| m == method),
            Methods::Except(list) => !list.iter().any(|m| m == method),
        }
    }

    /// Whether these include a method that writes (any but `GET`, `HEAD`, `OPTIONS`).
    #[must_use]
    pub fn write(&self) -> bool {
        match self {
            Methods::Only(list) => list.iter().any(|m| !READ_METHODS.contains(&m.as_str())),
            Methods::Any | Methods::Except(_) => true,
        }
    }
}

impl fmt::Display for Methods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Methods::Any => f.write_str("*"),
            Methods::Only(list) => f.write_str(&list.join(",")),
            Methods::Except(list) => write!(f, "!{}", list.join(",")),
        }
    }
}

/// One L7 rule (of `[[rules]]` or of a preset).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct L7Rule {
    /// `name`, shown in the audit log instead of the rule's text.
    pub name: Option<String>,
    /// The host rule (no port).
    pub host: HostRule,
    /// The methods.
    pub methods: Methods,
    /// The path glob.
    pub path: PathGlob,
    /// Deny or allow.
    pub action: Action,
}

impl L7Rule {
    /// How the audit log names this rule: its name, or `"<host> <methods> <path>"`.
    #[must_use]
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("{} {} {}", self.host.text, self.methods, self.path.as_str()),
        }
    }

    /// Whether this rule's host rule matches `host`.
    #[must_use]
    pub fn applies_to(&self, host: &Host) -> bool {
        self.host.matches_host(host)
    }

    /// Deny semantics: any method, any reading of the path.
    pub(crate) fn matches_any(&self, methods: &[String], forms: &PathForms) -> bool {
        methods.iter().any(|m| self.methods.matches(m))
            && forms.all().iter().any(|f| self.path.matches(f))
    }

    /// Allow semantics: every method, every strict reading of the path.
    pub(crate) fn matches_every(&self, methods: &[String], forms: &PathForms) -> bool {
        methods.iter().all(|m| self.methods.matches(m))
            && forms.strict().iter().all(|f| self.path.matches(f))
    }
}

/// A body judge of a preset: which requests, how much body, and which judge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BodyRule {
    /// Shown in the audit log.
    pub name: String,
    /// Host rule (no port).
    pub host: HostRule,
    /// The methods.
    pub methods: Methods,
    /// The path glob (matched like a deny rule: any reading).
    pub path: PathGlob,
    /// Largest body read; a larger one is denied.
    pub cap: usize,
    /// What looks at the body.
    pub judge: BodyJudge,
}

/// The body judges (all in [`crate::github`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyJudge {
    /// `POST /graphql`: the mutations of the document.
    GithubGraphql,
    /// `PUT`/`DELETE` of repository contents: the branch and the file path.
    GithubContents,
    /// Pull request reviews: no `APPROVE` event.
    GithubReview,
}

/// `[l7] presets`: named bundles of rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// `"github"`: see [`crate::github`].
    Github,
}

impl Preset {
    /// Every preset, with its name in the policy file.
    pub const ALL: [(Preset, &'static str); 1] = [(Preset::Github, "github")];

    /// The name in the policy file.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Preset::Github => "github",
        }
    }
}

/// Every L7 rule of a policy: `[[rules]]` in file order, then the presets' rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct L7Rules {
    /// `[[rules]]`, in file order.
    pub rules: Vec<L7Rule>,
    /// `[l7] presets`, in file order.
    pub presets: Vec<Preset>,
    /// The presets' rules (deny only).
    pub preset_rules: Vec<L7Rule>,
    /// The presets' body judges.
    pub body_rules: Vec<BodyRule>,
}

impl L7Rules {
    pub(crate) fn all_rules(&self) -> impl Iterator<Item = &L7Rule> {
        self.rules.iter().chain(&self.preset_rules)
    }

    /// Whether `host` has an ask rule named (labelled) `label`: what an approval of it
    /// stands on.
    #[must_use]
    pub fn asks(&self, host: &Host, label: &str) -> bool {
        self.ask_rule(host, label).is_some()
    }

    /// The ask rule of `host` named (labelled) `label`.
    #[must_use]
    pub fn ask_rule(&self, host: &Host, label: &str) -> Option<&L7Rule> {
        self.all_rules()
            .find(|r| r.action == Action::Ask && r.applies_to(host) && r.label() == label)
    }

    /// Whether any rule or body judge applies to `host`.
    #[must_use]
    pub fn has_rules_for(&self, host: &Host) -> bool {
        self.all_rules().any(|r| r.applies_to(host))
            || self.body_rules.iter().any(|b| b.host.matches_host(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_bodies_must_be_json() {
        for ok in [
            None,
            Some("application/json"),
            Some("Application/JSON; charset=utf-8"),
            Some("application/vnd.github+json"),
        ] {
            assert!(judged_body_content_type_ok(ok), "{ok:?}");
        }
        for bad in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/plain",
            "",
            "application/graphql",
            "json",
        ] {
            assert!(!judged_body_content_type_ok(Some(bad)), "{bad:?}");
        }
    }
}
