//! The network decision: canonical host and port in, allow or deny (with reason) out.
//!
//! Order, first match wins: hard-denied address → `network.deny` → `network.allow`
//! (host and port) → an allow rule for the host on another port → nothing matched.
//! The mode (`enforce` / `report`) is not applied here: the caller decides what a denial
//! does, so that the audit log always records the real decision.

use crate::address::hard_deny;
use crate::host::Host;
use crate::model::{HostDecision, Policy};
use crate::reason::Reason;

impl Policy {
    /// The network decision for a canonical host and port (before any address resolution;
    /// the caller checks every resolved address with `address::hard_deny` too).
    #[must_use]
    pub fn decide(&self, host: &Host, port: u16) -> HostDecision {
        if let Some(reason) = host.ip().and_then(hard_deny) {
            return HostDecision::Deny { reason, rule: None };
        }
        if let Some(rule) = self
            .network
            .deny
            .iter()
            .find(|r| r.matches_host(host) && r.denies_port(port))
        {
            return HostDecision::Deny {
                reason: Reason::DeniedByRule,
                rule: Some(rule.text.clone()),
            };
        }
        let mut other_port = None;
        for rule in self.network.allow.iter().filter(|r| r.matches_host(host)) {
            if rule.allows_port(port) {
                return HostDecision::Allow {
                    rule: rule.text.clone(),
                };
            }
            other_port.get_or_insert(rule);
        }
        if let Some(rule) = other_port {
            return HostDecision::Deny {
                reason: Reason::BlockedPort,
                rule: Some(rule.text.clone()),
            };
        }
        let reason = if host.ip().is_some() {
            Reason::BlockedIpLiteral
        } else {
            Reason::BlockedByPolicy
        };
        HostDecision::Deny { reason, rule: None }
    }

    /// The credentials bound to `host`, in file order.
    pub fn credentials_for<'a>(
        &'a self,
        host: &'a Host,
    ) -> impl Iterator<Item = &'a crate::model::Credential> + 'a {
        self.credentials.iter().filter(move |c| c.applies_to(host))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn policy(network: &str) -> Policy {
        let text = format!("[sandbox]\nname = \"t\"\n[network]\n{network}\n");
        Policy::parse(&text, Path::new("test.toml")).unwrap_or_else(|e| panic!("{e}"))
    }
    fn decide(p: &Policy, host: &str, port: u16) -> HostDecision {
        p.decide(&Host::parse(host).unwrap(), port)
    }
    fn allow(rule: &str) -> HostDecision {
        HostDecision::Allow { rule: rule.into() }
    }
    fn deny(reason: Reason, rule: Option<&str>) -> HostDecision {
        HostDecision::Deny {
            reason,
            rule: rule.map(String::from),
        }
    }

    #[test]
    fn allow_rules_and_default_ports() {
        let p = policy(
            r#"allow = ["api.anthropic.com", "*.githubusercontent.com", "registry.npmjs.org:443"]"#,
        );
        assert_eq!(
            decide(&p, "api.anthropic.com", 443),
            allow("api.anthropic.com")
        );
        assert_eq!(
            decide(&p, "API.Anthropic.com.", 80),
            allow("api.anthropic.com")
        );
        assert_eq!(
            decide(&p, "raw.githubusercontent.com", 443),
            allow("*.githubusercontent.com")
        );
        assert_eq!(
            decide(&p, "githubusercontent.com", 443),
            deny(Reason::BlockedByPolicy, None)
        );
        assert_eq!(
            decide(&p, "evilgithubusercontent.com", 443),
            deny(Reason::BlockedByPolicy, None)
        );
        assert_eq!(
            decide(&p, "api.anthropic.com", 22),
            deny(Reason::BlockedPort, Some("api.anthropic.com"))
        );
        assert_eq!(
            decide(&p, "registry.npmjs.org", 80),
            deny(Reason::BlockedPort, Some("registry.npmjs.org:443"))
        );
        assert_eq!(
            decide(&p, "registry.npmjs.org", 443),
            allow("registry.npmjs.org:443")
        );
    }

    #[test]
    fn attack_deny_beats_allow() {
        let p = policy(
            r#"allow = ["*.github.com", "github.com", "*.example.com:8443"]
deny = ["gist.github.com", "*.evil.example.com", "github.com:22"]"#,
        );
        assert_eq!(decide(&p, "api.github.com", 443), allow("*.github.com"));
        assert_eq!(
            decide(&p, "gist.github.com", 443),
            deny(Reason::DeniedByRule, Some("gist.github.com"))
        );
        assert_eq!(
            decide(&p, "GIST.github.com.", 80),
            deny(Reason::DeniedByRule, Some("gist.github.com"))
        );
        assert_eq!(
            decide(&p, "a.evil.example.com", 8443),
            deny(Reason::DeniedByRule, Some("*.evil.example.com"))
        );
        // A deny rule with a port denies that port only; without one, every port.
        assert_eq!(
            decide(&p, "github.com", 22),
            deny(Reason::DeniedByRule, Some("github.com:22"))
        );
        assert_eq!(decide(&p, "github.com", 443), allow("github.com"));
    }

    #[test]
    fn attack_allow_rule_cannot_open_private_or_metadata_addresses() {
        let p = policy(
            r#"allow = ["127.0.0.1", "10.0.0.1", "169.254.169.254", "[::1]", "[fd00:ec2::254]:80", "127.0.0.1:8080"]"#,
        );
        for (host, port) in [
            ("127.0.0.1", 443),
            ("127.1", 443),
            ("0x7f000001", 80),
            ("127.0.0.1", 8080),
            ("10.0.0.1", 443),
            ("012.0.0.1", 443),
            ("[::ffff:10.0.0.1]", 443),
            ("[::1]", 443),
        ] {
            assert_eq!(
                decide(&p, host, port),
                deny(Reason::BlockedPrivateAddress, None),
                "{host}:{port}"
            );
        }
        for (host, port) in [
            ("169.254.169.254", 80),
            ("::ffff:169.254.169.254", 80),
            ("[fd00:ec2::254]", 80),
        ] {
            assert_eq!(
                decide(&p, host, port),
                deny(Reason::BlockedMetadataAddress, None),
                "{host}:{port}"
            );
        }
    }

    #[test]
    fn ip_literals_need_an_exact_rule() {
        let p = policy(r#"allow = ["203.0.113.7", "[2001:db8::1]:8443", "*.example.com"]"#);
        assert_eq!(decide(&p, "203.0.113.7", 443), allow("203.0.113.7"));
        // Another spelling of the same address is the same host.
        assert_eq!(decide(&p, "0xcb.0.0x71.7", 443), allow("203.0.113.7"));
        assert_eq!(
            decide(&p, "203.0.113.8", 443),
            deny(Reason::BlockedIpLiteral, None)
        );
        assert_eq!(
            decide(&p, "[2001:DB8:0::1]", 8443),
            allow("[2001:db8::1]:8443")
        );
        assert_eq!(
            decide(&p, "2001:db8::1", 443),
            deny(Reason::BlockedPort, Some("[2001:db8::1]:8443"))
        );
        assert_eq!(
            decide(&p, "198.51.100.1", 443),
            deny(Reason::BlockedIpLiteral, None)
        );
    }

    #[test]
    fn empty_network_denies_everything() {
        let p = policy("");
        assert_eq!(
            decide(&p, "example.com", 443),
            deny(Reason::BlockedByPolicy, None)
        );
    }

    #[test]
    fn credentials_bind_to_hosts() {
        let text = r#"
[sandbox]
name = "t"
[network]
allow = ["api.anthropic.com", "*.github.com"]
[[credentials]]
name = "anthropic"
source = { env = "ANTHROPIC_API_KEY" }
hosts = ["api.anthropic.com"]
header = "X-Api-Key"
format = "{}"
[[credentials]]
name = "github"
source = { file = "/run/secrets/github" }
hosts = ["*.github.com"]
header = "authorization"
format = "Bearer {}"
"#;
        let p = Policy::parse(text, Path::new("t.toml")).unwrap();
        let names = |h: &str| {
            let host = Host::parse(h).unwrap();
            p.credentials_for(&host)
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("api.anthropic.com"), ["anthropic"]);
        assert_eq!(names("api.github.com"), ["github"]);
        assert!(names("github.com").is_empty());
        assert!(names("evil.com").is_empty());
    }
}
