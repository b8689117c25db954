//! Data leaving through the resolver: under a wildcard allow (`*.example.com`) the agent
//! chooses every label below the zone, and each label reaches the zone's name servers; a
//! prompt-injected agent can spell the workspace into them. Exact names in the policy are
//! never affected: only names allowed by a `*.` rule alone are judged here.
//!
//! Two checks, both pure but the budget's counter:
//! - **Shape**: the labels below the zone look like an encoded payload: more than
//!   [`MAX_PAYLOAD`] bytes in all, or one hyphen-free run of at least [`RUN`] characters
//!   that is all hex, or that mixes digits or letter case the way base32/base64 do (names
//!   people choose are words joined by hyphens: `github-production-release-asset-2e65be`).
//! - **Budget**: distinct names below one zone may carry `network.dns_name_budget` bytes
//!   (default 16 KiB) per proxy lifetime (the sandbox's session); past it, new names under
//!   that zone are refused and names already answered still resolve.
//!
//! Both refuse with `dns-exfil-suspect`. A legitimate name that trips them is listed
//! exactly in the policy by the operator.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use airlock_policy::Policy;
use airlock_policy::host::Host;
use airlock_policy::rule::HostPattern;

/// Most bytes of labels below the zone one name may carry.
pub const MAX_PAYLOAD: usize = 100;
/// A hyphen-free run this long that looks encoded marks a payload.
pub const RUN: usize = 20;

/// The widest wildcard zone `host` is allowed under, when no exact allow rule names it.
#[must_use]
pub fn wildcard_zone(policy: &Policy, host: &Host) -> Option<Host> {
    let rules = || policy.network.allow.iter().map(|r| &r.pattern);
    if rules().any(|p| matches!(p, HostPattern::Exact(h) if h == host)) {
        return None;
    }
    rules()
        .filter_map(|p| match p {
            HostPattern::Subdomains(zone) if host.is_strict_subdomain_of(zone) => Some(zone),
            _ => None,
        })
        .min_by_key(|zone| zone.as_str().len())
        .cloned()
}

/// The labels of `name` (as the agent sent it, case kept) below `zone`.
#[must_use]
pub fn below<'a>(name: &'a str, zone: &Host) -> &'a str {
    let name = name.strip_suffix('.').unwrap_or(name);
    let keep = name.len().saturating_sub(zone.as_str().len() + 1);
    name.get(..keep).unwrap_or(name)
}

/// Whether the labels below the zone look like an encoded payload.
#[must_use]
pub fn looks_encoded(prefix: &str) -> bool {
    prefix.len() > MAX_PAYLOAD
        || prefix
            .split(['.', '-', '_'])
            .filter(|run| run.len() >= RUN)
            .any(encoded_run)
}

fn encoded_run(run: &str) -> bool {
    let hex = run.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = run.bytes().filter(u8::is_ascii_digit).count();
    let upper = run.bytes().any(|b| b.is_ascii_uppercase());
    let lower = run.bytes().any(|b| b.is_ascii_lowercase());
    hex || digits >= 2 || (upper && lower)
}

/// Distinct names seen below each zone, and their bytes.
#[derive(Debug, Default)]
pub struct Budget {
    zones: Mutex<HashMap<String, Zone>>,
}

#[derive(Debug, Default)]
struct Zone {
    names: HashSet<String>,
    bytes: usize,
}

impl Budget {
    /// Counts `prefix` under `zone`; `false` when a new name would pass `budget` bytes.
    pub fn admit(&self, zone: &Host, prefix: &str, budget: usize) -> bool {
        let Ok(mut zones) = self.zones.lock() else {
            return false;
        };
        let z = zones.entry(zone.as_str().to_owned()).or_default();
        let prefix = prefix.to_ascii_lowercase();
        if z.names.contains(&prefix) {
            return true;
        }
        if z.bytes + prefix.len() > budget {
            return false;
        }
        z.bytes += prefix.len();
        z.names.insert(prefix);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &str) -> Policy {
        let text = format!("[sandbox]\nname = \"t\"\n[network]\nallow = [{allow}]\n");
        Policy::parse(&text, std::path::Path::new("p.toml")).unwrap()
    }

    #[test]
    fn only_names_allowed_by_a_wildcard_alone_are_judged() {
        let p = policy(r#""*.evil.test", "exact.evil.test", "*.a.evil.test", "other.test""#);
        let h = |s: &str| Host::parse(s).unwrap();
        assert_eq!(wildcard_zone(&p, &h("x.evil.test")), Some(h("evil.test")));
        // The widest zone: everything below it is the agent's choice.
        assert_eq!(wildcard_zone(&p, &h("x.a.evil.test")), Some(h("evil.test")));
        assert_eq!(wildcard_zone(&p, &h("exact.evil.test")), None);
        assert_eq!(wildcard_zone(&p, &h("other.test")), None);
        assert_eq!(below("AbC.x.Evil.test.", &h("evil.test")), "AbC.x");
    }

    #[test]
    fn encoded_payloads_are_suspect_and_names_people_choose_are_not() {
        for payload in [
            // base64, base32, hex of "hello world this is exfiltrated data"
            "aGVsbG8gd29ybGQgdGhpcyBpcyBleGZpbHRyYXRlZCBkYXRhIGluIGEgbGFiZWw",
            "nbswy3dpeb3w64tmmqqhi2ljomqgs4za",
            "68656c6c6f20776f726c6420746869732069",
            // short labels, many of them
            &"abcdefgh.".repeat(12),
        ] {
            assert!(looks_encoded(payload), "{payload}");
        }
        for name in [
            "github-production-release-asset-2e65be",
            "my-company-build-artifacts-prod",
            "production-eu-west-1-artifacts",
            "objects",
            "d1a2b3c4",
            "o123456.ingest",
        ] {
            assert!(!looks_encoded(name), "{name}");
        }
    }

    #[test]
    fn the_budget_counts_distinct_names_per_zone() {
        const ZONE_BUDGET: usize = 16 * 1024;
        let b = Budget::default();
        let zone = Host::parse("evil.test").unwrap();
        let other = Host::parse("other.test").unwrap();
        let label = "a".repeat(60);
        let (mut n, mut bytes) = (0, 0);
        loop {
            let name = format!("{label}{n}");
            if !b.admit(&zone, &name, ZONE_BUDGET) {
                // Refused exactly when this new name would pass the budget.
                assert!(bytes + name.len() > ZONE_BUDGET, "{n} {bytes}");
                break;
            }
            bytes += name.len();
            n += 1;
        }
        assert!(bytes <= ZONE_BUDGET && n > 200, "{n} {bytes}");
        // Names already answered still resolve; another zone has its own budget.
        assert!(b.admit(&zone, &format!("{label}0"), ZONE_BUDGET));
        assert!(b.admit(&zone, &format!("{}0", label.to_uppercase()), ZONE_BUDGET));
        assert!(b.admit(&other, "x", ZONE_BUDGET));
        // A budget of 0: no new name under a wildcard zone resolves.
        assert!(!b.admit(&other, "y", 0));
    }
}
