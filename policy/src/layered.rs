//! A policy with the operator's grants laid over it ([`crate::overlay`]): each grant one
//! more host rule, after the file's own (see the overlay's module docs for where and why).
//! It reads no file and decides nothing.

use crate::model::Policy;
use crate::overlay::{Overlay, OverlayError};
use crate::rule::HostRule;

impl Policy {
    /// This policy with `overlay`'s grants as rules (see the module docs).
    ///
    /// # Errors
    /// [`OverlayError`]: a grant that makes no host rule, or an id listed twice.
    pub fn with_overlay(mut self, overlay: &Overlay) -> Result<Policy, OverlayError> {
        let mut seen = std::collections::HashSet::new();
        for g in &overlay.grants {
            if !seen.insert(g.id.as_str()) {
                return Err(OverlayError::Duplicate(g.id.clone()));
            }
            let text = g.rule_text();
            let mut rule = HostRule::parse(&text).map_err(|source| OverlayError::Rule {
                id: g.id.clone(),
                rule: text.clone(),
                source,
            })?;
            if g.allow {
                self.network.allow.push(rule);
            } else {
                // The rule's text is what a refusal names: the operator's reason with it,
                // for the agent to read.
                if let Some(why) = &g.why {
                    rule.text = format!("{text}: denied by the operator: {why}");
                }
                self.network.deny.push(rule);
            }
        }
        self.provenance.overlay = overlay.grants.clone();
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Origin;
    use crate::overlay::Grant;

    fn grant(id: &str, allow: bool, host: &str, port: u16) -> Grant {
        Grant {
            id: id.into(),
            allow,
            host: host.into(),
            port,
            by: 1000,
            at: "2026-11-29T04:00:00.000Z".into(),
            why: None,
        }
    }

    const BASE: &str = "[sandbox]\nname = \"box\"\n\n[network]\nallow = [\"a.example\"]\ndeny = [\"bad.example\"]\nregistries = [\"pypi\"]\n";

    #[test]
    fn grants_become_rules_after_the_files_and_name_their_origin() {
        let p = Policy::parse(BASE, std::path::Path::new("p.toml")).unwrap();
        let o = Overlay::default()
            .with(grant("0a0b0c0d", true, "new.example", 443))
            .with(Grant {
                why: Some("not this one".into()),
                ..grant("1a1b1c1d", false, "worse.example", 8443)
            })
            .with(grant("2a2b2c2d", true, "2001:db8::1", 8080));
        let p = p.with_overlay(&o).unwrap();
        let listing = p.listing();
        let find = |rule: &str| {
            listing
                .iter()
                .find(|l| l.rule == rule)
                .unwrap_or_else(|| panic!("{rule} in {listing:?}"))
        };
        assert_eq!(
            find("a.example").origin,
            Origin::File("network.allow[0]".into())
        );
        assert_eq!(
            find("bad.example").origin,
            Origin::File("network.deny[0]".into())
        );
        assert!(matches!(
            find("pypi.org").origin,
            Origin::Bundle {
                kind: "registry",
                ..
            }
        ));
        let new = find("new.example:443");
        assert_eq!(new.list, "network.allow");
        assert_eq!(
            new.origin.to_string(),
            "approve --always 0a0b0c0d by uid 1000 at 2026-11-29T04:00:00.000Z"
        );
        let worse = find("worse.example:8443");
        assert_eq!(worse.list, "network.deny");
        // A refusal names the deny grant's rule with the operator's reason.
        assert_eq!(
            p.network.deny.last().unwrap().text,
            "worse.example:8443: denied by the operator: not this one"
        );
        assert!(
            worse
                .origin
                .to_string()
                .starts_with("deny --always 1a1b1c1d")
        );
        assert_eq!(find("[2001:db8::1]:8080").list, "network.allow");
    }

    #[test]
    fn a_grant_that_is_no_host_rule_or_a_twice_listed_id_is_refused() {
        let p = Policy::parse(BASE, std::path::Path::new("p.toml")).unwrap();
        let bad = Overlay {
            grants: vec![grant("x", true, "a b.example", 443)],
        };
        assert!(matches!(
            p.clone().with_overlay(&bad),
            Err(OverlayError::Rule { .. })
        ));
        let twice = Overlay {
            grants: vec![
                grant("x", true, "a.example", 443),
                grant("x", true, "b.example", 443),
            ],
        };
        assert_eq!(
            p.with_overlay(&twice).unwrap_err(),
            OverlayError::Duplicate("x".into())
        );
    }

    #[test]
    fn with_replaces_and_without_removes_by_id() {
        let o = Overlay::default()
            .with(grant("x", true, "a.example", 443))
            .with(grant("x", false, "a.example", 443));
        assert_eq!(o.grants.len(), 1);
        assert!(!o.grants[0].allow);
        assert_eq!(o.without("x").unwrap().grants.len(), 0);
        assert!(o.without("y").is_none());
    }
}
