//! The effective rules of a loaded policy, each with where it came from: what `airlock
//! policy show` lists. A rule the file wrote names its key (`network.allow[2]`), one a
//! named bundle brought in names the bundle and the key that listed it (`registry pypi`,
//! `preset github`), and one built into airlock says so.
//!
//! Read from the policy and what the loader noted of each list's source
//! ([`Provenance`]); it decides nothing. The order is the order of the file within each
//! list.

use std::fmt;

use crate::l7::{Action, L7Rule};
use crate::model::{GIT_FORGES, Policy};
use crate::provenance::Provenance;
use crate::rule::HostRule;

/// Where a rule in force came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Written in the policy file, at this key.
    File(String),
    /// Brought in by a named bundle the file lists (`kind` `registry` or `preset`) at `key`.
    Bundle {
        kind: &'static str,
        name: String,
        key: String,
    },
    /// Built into airlock: the phrase says what it is.
    Builtin(&'static str),
    /// An operator's standing answer ([`crate::overlay::Grant`]): `approve --always` or
    /// `deny --always` of item `id`, by uid `by`, at `at`.
    Grant {
        id: String,
        allow: bool,
        by: u32,
        at: String,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(key) => write!(f, "file {key}"),
            Self::Bundle { kind, name, key } => write!(f, "{kind} {name} ({key})"),
            Self::Builtin(what) => write!(f, "built-in: {what}"),
            Self::Grant { id, allow, by, at } => write!(
                f,
                "{} --always {id} by uid {by} at {at}",
                if *allow { "approve" } else { "deny" }
            ),
        }
    }
}

/// One rule in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The list it is in, as the file names it (`network.allow`, `rules`, `credentials`).
    pub list: &'static str,
    /// The rule as written (a host rule's text, an L7 rule's action and label, a
    /// credential's name, hosts and header).
    pub rule: String,
    pub origin: Origin,
}

fn file(list: &'static str, rules: &[HostRule]) -> impl Iterator<Item = Listed> {
    rules.iter().enumerate().map(move |(i, r)| Listed {
        list,
        rule: r.text.clone(),
        origin: Origin::File(format!("{list}[{i}]")),
    })
}

fn l7_text(r: &L7Rule) -> String {
    let action = match r.action {
        Action::Deny => "deny",
        Action::Allow => "allow",
        Action::Ask => "ask",
    };
    format!("{action} {}", r.label())
}

impl Policy {
    /// Its effective rules, each with where it came from (see the module docs).
    #[must_use]
    pub fn listing(&self) -> Vec<Listed> {
        listing(self, &self.provenance)
    }
}

fn listing(p: &Policy, s: &Provenance) -> Vec<Listed> {
    let n = &p.network;
    let mut out: Vec<Listed> =
        file("network.allow", &n.allow[..s.file_allow.min(n.allow.len())]).collect();
    let mut from_registries = n.allow.iter().skip(s.file_allow);
    for (i, (name, count)) in s.registries.iter().enumerate() {
        for r in from_registries.by_ref().take(*count) {
            out.push(Listed {
                list: "network.allow",
                rule: r.text.clone(),
                origin: Origin::Bundle {
                    kind: "registry",
                    name: name.clone(),
                    key: format!("network.registries[{i}]"),
                },
            });
        }
    }
    let granted = |allow: bool| {
        s.overlay
            .iter()
            .filter(move |g| g.allow == allow)
            .map(|g| Listed {
                list: if g.allow {
                    "network.allow"
                } else {
                    "network.deny"
                },
                rule: g.rule_text(),
                origin: Origin::Grant {
                    id: g.id.clone(),
                    allow: g.allow,
                    by: g.by,
                    at: g.at.clone(),
                },
            })
    };
    out.extend(granted(true));
    let deny_grants = s.overlay.iter().filter(|g| !g.allow).count();
    out.extend(file(
        "network.deny",
        &n.deny[..n.deny.len().saturating_sub(deny_grants)],
    ));
    out.extend(granted(false));
    // Only when it changes what an unlisted host gets.
    if n.unlisted == crate::model::Unlisted::Ask {
        out.push(Listed {
            list: "network.unlisted",
            rule: "ask: a host no rule lists waits for the operator's answer".to_owned(),
            origin: Origin::File("network.unlisted".to_owned()),
        });
    }
    out.extend(file("network.passthrough", &n.passthrough));
    out.extend(file("network.writable", &n.writable));
    out.extend(file("network.websocket", &n.websocket));
    out.extend(file("network.git_hosts", &n.git_hosts));
    out.extend(GIT_FORGES.iter().map(|h| Listed {
        list: "network.git_hosts",
        rule: (*h).to_owned(),
        origin: Origin::Builtin("a git forge known to serve fetches (allows nothing by itself)"),
    }));
    out.extend(p.l7.rules.iter().enumerate().map(|(i, r)| Listed {
        list: "rules",
        rule: l7_text(r),
        origin: Origin::File(format!("rules[{i}]")),
    }));
    for r in &p.l7.preset_rules {
        // A preset's rules are named after it (`github: ...`).
        let (i, name) = s
            .presets
            .iter()
            .enumerate()
            .find(|(_, name)| {
                r.name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("{name}:")))
            })
            .map_or((0, "?"), |(i, n)| (i, n.as_str()));
        out.push(Listed {
            list: "rules",
            rule: l7_text(r),
            origin: Origin::Bundle {
                kind: "preset",
                name: name.to_owned(),
                key: format!("l7.presets[{i}]"),
            },
        });
    }
    for (i, c) in p.credentials.iter().enumerate() {
        let hosts: Vec<&str> = c.hosts.iter().map(|h| h.text.as_str()).collect();
        let key = format!("credentials[{i}]");
        let origin = match s.credentials.get(i) {
            Some((Some(preset), false)) => Origin::Bundle {
                kind: "preset",
                name: preset.clone(),
                key,
            },
            _ => Origin::File(key),
        };
        out.push(Listed {
            list: "credentials",
            rule: format!("{} -> {} ({})", c.name, hosts.join(", "), c.header),
            origin,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_names_where_it_came_from() {
        let text = r#"[sandbox]
name = "demo"
[network]
allow = ["api.anthropic.com", "*.example.com:8443"]
registries = ["crates"]
deny = ["bad.example.com"]
passthrough = ["pass.example.com"]
unlisted = "ask"
[l7]
presets = ["github"]
[[rules]]
host = "api.example.com"
method = "DELETE"
path = "/**"
[[credentials]]
preset = "anthropic"
source = { env = "K" }
[[credentials]]
name = "corp"
source = { env = "C" }
hosts = ["api.example.com"]
header = "x-token"
format = "{}"
"#;
        let p = Policy::parse(text, std::path::Path::new("p.toml")).unwrap();
        let listing = p.listing();
        let at = |list: &str, rule: &str| {
            listing
                .iter()
                .find(|l| l.list == list && l.rule == rule)
                .map(|l| l.origin.to_string())
                .unwrap_or_else(|| panic!("{list} {rule} not listed: {listing:#?}"))
        };
        assert_eq!(
            at("network.allow", "api.anthropic.com"),
            "file network.allow[0]"
        );
        assert_eq!(
            at("network.allow", "*.example.com:8443"),
            "file network.allow[1]"
        );
        assert_eq!(
            at("network.allow", "static.crates.io"),
            "registry crates (network.registries[0])"
        );
        assert_eq!(
            at("network.deny", "bad.example.com"),
            "file network.deny[0]"
        );
        assert_eq!(
            at("network.passthrough", "pass.example.com"),
            "file network.passthrough[0]"
        );
        assert_eq!(
            at(
                "network.unlisted",
                "ask: a host no rule lists waits for the operator's answer"
            ),
            "file network.unlisted"
        );
        assert!(at("network.git_hosts", "github.com").starts_with("built-in: "));
        assert_eq!(
            at("rules", "deny api.example.com DELETE /**"),
            "file rules[0]"
        );
        assert!(
            listing
                .iter()
                .any(|l| l.list == "rules"
                    && l.origin.to_string() == "preset github (l7.presets[0])")
        );
        assert_eq!(
            at("credentials", "anthropic -> api.anthropic.com (x-api-key)"),
            "preset anthropic (credentials[0])"
        );
        assert_eq!(
            at("credentials", "corp -> api.example.com (x-token)"),
            "file credentials[1]"
        );
        // Nothing listed twice, nothing in force left out of the allow list.
        let allow = listing.iter().filter(|l| l.list == "network.allow").count();
        assert_eq!(allow, p.network.allow.len());
    }
}
