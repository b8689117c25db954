//! Data leaving through the resolver. Every name the agent asks is resolved by the proxy
//! (the DNS filter answers with addresses it resolved; `CONNECT`, plain HTTP, base URL and
//! the transparent listener resolve the host they are given), and a name that is resolved
//! reaches the upstream resolver and, through it, the zone's name servers. [`judge`] is the
//! decision on such a name, the second step of the destination's admission
//! ([`crate::admission`], which every path asks): no name is resolved before it passed.
//!
//! Only the labels the agent chose are judged: none of a name an exact allow rule lists (the
//! operator chose it); below the zone for a name allowed by a `*.` rule alone; the whole
//! name otherwise (report mode resolves names the policy does not allow). Three checks:
//! - **Content**: the labels, lower-cased (the proxy resolves the canonical, lowercase name:
//!   case never leaves) and joined (dots removed, so a value split over labels is whole),
//!   are searched by the secret detectors ([`crate::detect::Detectors`]: the known formats,
//!   also upper-cased, as a format's uppercase letters are recovered from a lowercase name)
//!   and for the workspace's values as a name can carry them ([`NameNeedles`]: the value's
//!   letters and digits, lower-cased, and its hex). A secret not for the name's host is
//!   refused `foreign-secret` (in report mode too: a secret leaving is never a policy
//!   denial), the detector named in the rule; one whose action is `log` is reported.
//! - **Shape** (below a wildcard zone): the labels look like an encoded payload: more than
//!   [`MAX_PAYLOAD`] bytes in all, or, labels joined, one hyphen-free run of at least [`RUN`]
//!   characters that is all hex, or that mixes digits or letter case the way base32/base64
//!   do (names people choose are words joined by hyphens:
//!   `github-production-release-asset-2e65be`).
//! - **Budget** (below a wildcard zone): distinct names below one zone may carry
//!   `network.dns_name_budget` bytes (default 16 KiB) per proxy lifetime (the sandbox's
//!   session); past it, new names under that zone are refused and names already answered
//!   still resolve.
//!
//! Shape and budget refuse with `dns-exfil-suspect` (reported in report mode). A
//! legitimate name that trips them is listed exactly in the policy by the operator.
//!
//! What no check here catches: data in an alphabet of letters alone (a run without digits
//! or mixed case does not look encoded); the budget bounds it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use aho_corasick::{AhoCorasick, MatchKind};
use airlock_handoff::WorkspaceSecret;
use airlock_policy::Policy;
use airlock_policy::host::Host;
use airlock_policy::reason::Reason;
use airlock_policy::rule::HostPattern;

use crate::detect::{DetectError, Detectors, SecretAction, WORKSPACE_PREFIX};

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

/// Whether the labels below the zone look like an encoded payload (labels joined: a
/// payload cut into short labels is one run again).
#[must_use]
pub fn looks_encoded(prefix: &str) -> bool {
    prefix.len() > MAX_PAYLOAD
        || prefix
            .replace('.', "")
            .split(['-', '_'])
            .filter(|run| run.len() >= RUN)
            .any(encoded_run)
}

/// A workspace value shorter than this, as a name carries it (letters and digits), is no
/// needle of a name: too many ordinary labels would hold it.
pub const MIN_NAME_NEEDLE: usize = 8;

/// The workspace's values as a name can carry them: each value the body scanner has as a
/// needle (same detector: `workspace:<file>`), reduced to its letters and digits,
/// lower-cased, and its hex; searched in a name reduced the same way, in one
/// Aho-Corasick pass. Built with the rules ([`crate::snapshot::Rules::new`]), so a rescan's
/// values are in the next name's check.
#[derive(Debug, Default)]
pub struct NameNeedles {
    ac: Option<AhoCorasick>,
    /// `of[pattern]`: the detector ([`Detectors::get`]) of that needle.
    of: Vec<usize>,
}

impl NameNeedles {
    /// The needles of `secrets` that `detectors` searches bodies for.
    ///
    /// # Errors
    /// [`DetectError::Compile`] when the automaton cannot be built.
    pub fn new(detectors: &Detectors, secrets: &[WorkspaceSecret]) -> Result<Self, DetectError> {
        let mut needles: Vec<Vec<u8>> = Vec::new();
        let mut of = Vec::new();
        for s in secrets {
            let value = s.value.expose().trim().as_bytes();
            // The body scanner's own detector of this value: none when it is no needle
            // there (too short, common, allowed by the policy).
            let Some(detector) = detectors
                .find(value)
                .into_iter()
                .find(|h| {
                    h.range == (0..value.len())
                        && detectors.get(h.detector).name.starts_with(WORKSPACE_PREFIX)
                })
                .map(|h| h.detector)
            else {
                continue;
            };
            let hex: Vec<u8> = value
                .iter()
                .flat_map(|b| {
                    let digit = |n: u8| b"0123456789abcdef"[usize::from(n)];
                    [digit(b >> 4), digit(b & 0xf)]
                })
                .collect();
            for form in [project(value), hex] {
                if form.len() >= MIN_NAME_NEEDLE && !needles.contains(&form) {
                    needles.push(form);
                    of.push(detector);
                }
            }
        }
        if needles.is_empty() {
            return Ok(Self::default());
        }
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&needles)
            .map_err(|e| DetectError::Compile {
                name: format!("{WORKSPACE_PREFIX}names"),
                detail: e.to_string(),
            })?;
        Ok(Self { ac: Some(ac), of })
    }

    /// How many needles are searched.
    #[must_use]
    pub fn len(&self) -> usize {
        self.of.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }
}

/// Letters and digits of `bytes`, lower-cased: what a value keeps when spelled in labels.
fn project(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(u8::to_ascii_lowercase)
        .collect()
}

/// The decision on a name about to be resolved for the agent ([`judge`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameVerdict {
    /// Resolve it.
    Pass,
    /// Resolve it, the line saying why it would not be (report mode's shape and budget,
    /// a detector whose action is `log`); `rule` names the detector when one fired.
    Report {
        reason: Reason,
        rule: Option<String>,
    },
    /// Never resolved.
    Refuse {
        reason: Reason,
        rule: Option<String>,
    },
}

/// The rules a name is judged under: the policy, its detectors and the workspace's values
/// as names carry them (one snapshot of [`crate::snapshot::Rules`]).
#[derive(Debug, Clone, Copy)]
pub struct NameRules<'a> {
    pub policy: &'a Policy,
    pub detectors: &'a Detectors,
    pub needles: &'a NameNeedles,
}

/// The decision on a name the policy lets the agent resolve (see the module docs), asked
/// only by [`crate::admission`]: a name is resolved only on [`NameVerdict::Pass`] or
/// [`NameVerdict::Report`].
#[must_use]
pub fn judge(rules: NameRules<'_>, budget: &Budget, host: &Host) -> NameVerdict {
    if host.ip().is_some() {
        return NameVerdict::Pass;
    }
    let policy = rules.policy;
    let exact = policy
        .network
        .allow
        .iter()
        .any(|r| matches!(&r.pattern, HostPattern::Exact(h) if h == host));
    if exact {
        return NameVerdict::Pass;
    }
    let zone = wildcard_zone(policy, host);
    let chosen = match &zone {
        Some(zone) => below(host.as_str(), zone),
        None => host.as_str(),
    };
    // Below a zone the agent's labels end where the zone starts; a name no rule lists (one
    // the operator is asked about) has no such edge, so a secret may sit between any two of
    // its labels: every run of them is searched.
    let content = if zone.is_some() {
        secret_in(rules, host, chosen)
    } else {
        secret_in_any_run(rules, host, chosen)
    };
    if matches!(content, NameVerdict::Refuse { .. }) {
        return content;
    }
    let Some(zone) = zone else {
        return content;
    };
    let report = matches!(policy.sandbox.mode, airlock_policy::Mode::Report);
    let suspect = if report {
        NameVerdict::Report {
            reason: Reason::DnsExfilSuspect,
            rule: None,
        }
    } else {
        NameVerdict::Refuse {
            reason: Reason::DnsExfilSuspect,
            rule: None,
        }
    };
    if looks_encoded(chosen) {
        return suspect;
    }
    if !budget.admit(&zone, chosen, policy.network.dns_name_budget()) {
        return suspect;
    }
    content
}

/// `host` as the audit line keeps a name that carries a secret: the labels the agent
/// chose (see [`judge`]) with every letter and digit replaced by `*` (the log names the
/// detector, never the value).
#[must_use]
pub fn redacted(policy: &Policy, host: &Host) -> String {
    let name = host.as_str();
    let keep = wildcard_zone(policy, host).map_or(0, |z| z.as_str().len() + 1);
    let cut = name.len().saturating_sub(keep);
    let (chosen, zone) = name.split_at(cut);
    let masked: String = chosen
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { '*' } else { c })
        .collect();
    format!("{masked}{zone}")
}

/// The content check: a secret of a known format or a workspace value in the joined
/// labels, not for `host`.
/// Most labels a name no rule lists may have for its runs to be searched; one with more is
/// refused as a likely channel (`dns-exfil-suspect`).
pub const MAX_RUN_LABELS: usize = 16;

/// [`secret_in`] over every run of consecutive labels of `name` (a secret split over labels
/// is found whatever labels stand before and after it), the first refusal or report.
fn secret_in_any_run(rules: NameRules<'_>, host: &Host, name: &str) -> NameVerdict {
    let labels: Vec<&str> = name.trim_end_matches('.').split('.').collect();
    if labels.len() > MAX_RUN_LABELS {
        return NameVerdict::Refuse {
            reason: Reason::DnsExfilSuspect,
            rule: None,
        };
    }
    let mut reported = None;
    for start in 0..labels.len() {
        for end in start + 1..=labels.len() {
            let run = labels[start..end].join(".");
            match secret_in(rules, host, &run) {
                NameVerdict::Pass => {}
                v @ NameVerdict::Refuse { .. } => return v,
                v @ NameVerdict::Report { .. } => {
                    reported.get_or_insert(v);
                }
            }
        }
    }
    reported.unwrap_or(NameVerdict::Pass)
}

fn secret_in(rules: NameRules<'_>, host: &Host, chosen: &str) -> NameVerdict {
    let joined = chosen.replace('.', "");
    let mut logged: Option<String> = None;
    let log = |logged: &mut Option<String>, name: &str| {
        if logged.is_none() {
            *logged = Some(format!("{}{name}", crate::detect::RULE_PREFIX));
        }
    };
    for form in [joined.clone(), joined.to_ascii_uppercase()] {
        let v = rules.detectors.judge(form.as_bytes(), host);
        if let Some(d) = v.refused {
            return NameVerdict::Refuse {
                reason: Reason::ForeignSecret,
                rule: Some(format!("{}{}", crate::detect::RULE_PREFIX, d.name)),
            };
        }
        if let Some(name) = v.logged.first() {
            log(&mut logged, name);
        }
    }
    if let Some(ac) = &rules.needles.ac {
        let projected = project(joined.as_bytes());
        for m in ac.find_iter(&projected) {
            let d = rules
                .detectors
                .get(rules.needles.of[m.pattern().as_usize()]);
            if d.provider(host) {
                continue;
            }
            match d.action {
                SecretAction::Deny | SecretAction::Redact => {
                    return NameVerdict::Refuse {
                        reason: Reason::ForeignSecret,
                        rule: Some(format!("{}{}", crate::detect::RULE_PREFIX, d.name)),
                    };
                }
                SecretAction::Log => log(&mut logged, &d.name),
                SecretAction::Off => {}
            }
        }
    }
    match logged {
        Some(rule) => NameVerdict::Report {
            reason: Reason::ForeignSecret,
            rule: Some(rule),
        },
        None => NameVerdict::Pass,
    }
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
    fn a_payload_cut_into_short_labels_is_one_run() {
        assert!(looks_encoded("68656c6c6f.20776f726c.64207468.69732069"));
        assert!(looks_encoded("nbswy3dp.eb3w64tm.mqqhi2lj"));
        for name in [
            "my-bucket.s3.us-east-1",
            "internal-my-elb-1234567890.us-east-1.elb",
            "o123456.ingest",
            "a1b2c3d4e5.execute-api.us-east-1",
            "objects.cdn",
        ] {
            assert!(!looks_encoded(name), "{name}");
        }
    }

    fn secret(file: &str, value: &str) -> WorkspaceSecret {
        WorkspaceSecret {
            file: file.into(),
            name: "K".into(),
            detector: None,
            value: airlock_handoff::Secret::new(value.into()),
        }
    }

    #[test]
    fn workspace_values_are_found_however_labels_spell_them() {
        let p = policy(r#""*.zone.test", "exact.zone.test""#);
        let values = [
            secret(".env", "hunter2-correct-horse"),
            secret(".env", "s3cr3t/p@ss word!"),
            secret(".env", "short"),
        ];
        let detectors = Detectors::with_workspace(&values).unwrap();
        let needles = NameNeedles::new(&detectors, &values).unwrap();
        // Two values, each as letters and digits and as hex; "short" is no needle.
        assert_eq!(needles.len(), 4);
        let rules = NameRules {
            policy: &p,
            detectors: &detectors,
            needles: &needles,
        };
        let b = Budget::default();
        let verdict = |name: &str| judge(rules, &b, &Host::parse(name).unwrap());
        let refused = |name: &str| {
            assert_eq!(
                verdict(name),
                NameVerdict::Refuse {
                    reason: Reason::ForeignSecret,
                    rule: Some("secret detector workspace:.env".into())
                },
                "{name}"
            );
        };
        refused("hunter2-correct-horse.zone.test");
        assert_eq!(
            redacted(&p, &Host::parse("hunter2-correct.horse.zone.test").unwrap()),
            "*******-*******.*****.zone.test"
        );
        refused("HUNTER2.Correct.horse.zone.test");
        refused("x-hunter2correcthorse-y.a.zone.test");
        refused("s3cr3t-p-ss-word.zone.test");
        refused("6875.6e746572322d636f72726563742d686f727365.zone.test");
        // A known format, split over labels, in lower case.
        assert!(matches!(
            verdict("ghp_aaaabbbbccccddddeeee.ffffgggghhhh1234.zone.test"),
            NameVerdict::Refuse {
                reason: Reason::ForeignSecret,
                ..
            }
        ));
        // The operator's exact name is never judged; ordinary names pass.
        assert_eq!(verdict("exact.zone.test"), NameVerdict::Pass);
        assert_eq!(verdict("cdn-eu-1.zone.test"), NameVerdict::Pass);
        assert_eq!(verdict("short.zone.test"), NameVerdict::Pass);
        assert_eq!(
            verdict("68656c6c6f.20776f726c.64207468.69732069.zone.test"),
            NameVerdict::Refuse {
                reason: Reason::DnsExfilSuspect,
                rule: None
            }
        );
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
