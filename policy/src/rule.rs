//! Host rules: the entries of `network.allow`, `network.deny` and `credentials.hosts`.
//!
//! Syntax: `host`, `*.suffix` (strict subdomains of `suffix` only), each with an optional
//! `:port`; IP literals only as exact rules (`203.0.113.7`, `[2001:db8::1]:8443`). The host
//! of a rule is normalised by [`Host::parse`], exactly like a request host, so a rule and a
//! request can only match on canonical forms.

use std::fmt;

use crate::host::{Host, HostError, parse_port, split_authority};

/// Ports a rule without an explicit port allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What a rule's host part matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this host (a name or an IP literal).
    Exact(Host),
    /// Strict subdomains of this name (the suffix after `*.`): never the name itself.
    Subdomains(Host),
}

impl HostPattern {
    /// Whether a canonical host matches this pattern.
    #[must_use]
    pub fn matches(&self, host: &Host) -> bool {
        match self {
            HostPattern::Exact(h) => h == host,
            HostPattern::Subdomains(suffix) => host.is_strict_subdomain_of(suffix),
        }
    }
}

impl HostPattern {
    /// Whether every host `other` matches is also matched by `self` (`*.example.com`
    /// covers `a.example.com` and `*.a.example.com`; nothing but `*.`-rules and the same
    /// exact host cover an exact host).
    #[must_use]
    pub fn covers(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Subdomains(s), HostPattern::Exact(h)) => h.is_strict_subdomain_of(s),
            (HostPattern::Subdomains(s), HostPattern::Subdomains(o)) => {
                o == s || o.is_strict_subdomain_of(s)
            }
            (HostPattern::Exact(_), HostPattern::Subdomains(_)) => false,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(h) => write!(f, "{h}"),
            HostPattern::Subdomains(h) => write!(f, "*.{h}"),
        }
    }
}

/// One parsed host rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostRule {
    /// The host part.
    pub pattern: HostPattern,
    /// The port, if the rule names one; `None` means 80 and 443 in an allow rule and every
    /// port in a deny rule.
    pub port: Option<u16>,
    /// The rule as the audit log's `rule` field and the agent's refusal name it: as written
    /// in the policy file, or for an operator's grant its host and port (a denial followed
    /// by the operator's reason, which the agent reads).
    pub text: String,
}

/// Why a host rule was refused. Display reads as a reason, e.g. "empty label in host pattern".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The rule is empty.
    #[error("empty host pattern")]
    Empty,
    /// `https://...`: rules name hosts, not URLs.
    #[error("a scheme is not allowed in a host pattern (write the host only)")]
    Scheme,
    /// `example.com/path`: rules name hosts, not URLs.
    #[error("a path is not allowed in a host pattern")]
    Path,
    /// `*` alone, or `*` anywhere but a leading `*.` label.
    #[error("`*` is only allowed as a leading `*.` label (e.g. \"*.example.com\")")]
    Wildcard,
    /// `*.` followed by an IP address.
    #[error("an IP literal is only allowed as an exact rule, not after `*.`")]
    WildcardIp,
    /// A port where none is allowed (credential hosts).
    #[error("a port is not allowed here")]
    PortNotAllowed,
    /// The host part is not a valid host.
    #[error("{0} in host pattern")]
    Host(HostError),
}

impl HostRule {
    /// Parse one rule as written in the policy file.
    ///
    /// # Errors
    /// A [`RuleError`] saying what is wrong with the rule.
    pub fn parse(text: &str) -> Result<HostRule, RuleError> {
        if text.is_empty() {
            return Err(RuleError::Empty);
        }
        // Before splitting off a port, so `x.com\r\nevil: 1` is reported for what it is.
        if let Some(c) = text.chars().find(|c| c.is_control() || c.is_whitespace()) {
            return Err(RuleError::Host(HostError::ForbiddenChar(c)));
        }
        if text.contains("://") {
            return Err(RuleError::Scheme);
        }
        if text.contains('/') {
            return Err(RuleError::Path);
        }
        let (host_text, port_text) = split_authority(text).map_err(RuleError::Host)?;
        let port = match port_text {
            Some(p) => Some(parse_port(p).ok_or(RuleError::Host(HostError::InvalidPort))?),
            None => None,
        };
        let pattern = if let Some(suffix) = host_text.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(RuleError::Wildcard);
            }
            if suffix.is_empty() || suffix == "." {
                return Err(RuleError::Host(HostError::EmptyLabel));
            }
            let suffix = Host::parse(suffix).map_err(RuleError::Host)?;
            if suffix.ip().is_some() {
                return Err(RuleError::WildcardIp);
            }
            HostPattern::Subdomains(suffix)
        } else if host_text.contains('*') {
            return Err(RuleError::Wildcard);
        } else {
            HostPattern::Exact(Host::parse(host_text).map_err(RuleError::Host)?)
        };
        Ok(HostRule {
            pattern,
            port,
            text: text.to_owned(),
        })
    }

    /// Whether the host part matches (whatever the port).
    #[must_use]
    pub fn matches_host(&self, host: &Host) -> bool {
        self.pattern.matches(host)
    }

    /// Whether an allow rule lets this port through: the rule's port, or 80 and 443.
    #[must_use]
    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// Whether a deny rule covers this port: the rule's port, or every port.
    #[must_use]
    pub fn denies_port(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> HostRule {
        HostRule::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[test]
    fn coverage_of_patterns() {
        let covers = |a: &str, b: &str| rule(a).pattern.covers(&rule(b).pattern);
        assert!(covers("api.github.com", "API.github.com."));
        assert!(covers("*.github.com", "api.github.com"));
        assert!(covers("*.github.com", "*.api.github.com"));
        assert!(covers("*.github.com", "*.github.com"));
        assert!(!covers("*.github.com", "github.com"));
        assert!(!covers("*.github.com", "*.com"));
        assert!(!covers("api.github.com", "*.api.github.com"));
        assert!(!covers("github.com", "api.github.com"));
        assert!(!covers("*.github.com", "evilgithub.com"));
    }
    fn host(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn attack_wildcard_does_not_match_apex_or_lookalikes() {
        let r = rule("*.example.com");
        assert!(r.matches_host(&host("a.example.com")));
        assert!(r.matches_host(&host("a.b.example.com")));
        assert!(r.matches_host(&host("A.EXAMPLE.COM.")));
        assert!(!r.matches_host(&host("example.com")));
        assert!(!r.matches_host(&host("evilexample.com")));
        assert!(!r.matches_host(&host("example.com.evil.net")));
        assert!(!r.matches_host(&host("a.example.co")));
    }

    #[test]
    fn exact_rule_matches_every_spelling_of_the_host() {
        let r = rule("example.com");
        for spelling in [
            "example.com",
            "EXAMPLE.com.",
            "ＥＸＡＭＰＬＥ.com",
            "Example.Com",
        ] {
            assert!(r.matches_host(&host(spelling)), "{spelling:?}");
        }
        assert!(!r.matches_host(&host("www.example.com")));
        // The rule itself is normalised too.
        assert!(rule("EXAMPLE.COM.").matches_host(&host("example.com")));
        assert!(rule("*.BÜCHER.de").matches_host(&host("www.xn--bcher-kva.de")));
    }

    #[test]
    fn ports() {
        let r = rule("example.com");
        assert_eq!(r.port, None);
        assert!(r.allows_port(443) && r.allows_port(80) && !r.allows_port(8443));
        assert!(r.denies_port(8443));
        let r = rule("registry.npmjs.org:443");
        assert_eq!(r.port, Some(443));
        assert!(r.allows_port(443) && !r.allows_port(80) && !r.denies_port(80));
        let r = rule("[2001:db8::1]:8443");
        assert_eq!(r.pattern, HostPattern::Exact(host("2001:db8::1")));
        assert_eq!(r.port, Some(8443));
        let r = rule("203.0.113.7");
        assert_eq!(r.pattern, HostPattern::Exact(host("203.0.113.7")));
        assert_eq!(r.text, "203.0.113.7");
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        let cases: &[(&str, RuleError)] = &[
            ("", RuleError::Empty),
            ("*", RuleError::Wildcard),
            ("*.", RuleError::Host(HostError::EmptyLabel)),
            ("*..", RuleError::Host(HostError::EmptyLabel)),
            ("*.*.example.com", RuleError::Wildcard),
            ("**.example.com", RuleError::Wildcard),
            ("*example.com", RuleError::Wildcard),
            ("foo.*.com", RuleError::Wildcard),
            ("example.*", RuleError::Wildcard),
            ("*.10.0.0.1", RuleError::WildcardIp),
            ("*.1", RuleError::WildcardIp),
            ("https://example.com", RuleError::Scheme),
            ("example.com/path", RuleError::Path),
            ("a..example.com", RuleError::Host(HostError::EmptyLabel)),
            ("example.com:0", RuleError::Host(HostError::InvalidPort)),
            ("example.com:65536", RuleError::Host(HostError::InvalidPort)),
            ("example.com:", RuleError::Host(HostError::InvalidPort)),
            ("example.com:https", RuleError::Host(HostError::InvalidPort)),
            ("2001:db8::1", RuleError::Host(HostError::UnbracketedIpv6)),
            ("1.2.3.4.5", RuleError::Host(HostError::InvalidIpv4)),
            (
                "exa mple.com",
                RuleError::Host(HostError::ForbiddenChar(' ')),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(HostRule::parse(text), Err(*want), "{text:?}");
        }
        assert_eq!(
            RuleError::Host(HostError::EmptyLabel).to_string(),
            "empty label in host pattern"
        );
    }
}
