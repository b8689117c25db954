use airlock_handoff::WorkspaceSecret;
use airlock_policy::Policy;
use airlock_policy::host::Host;
use airlock_policy::reason::Reason;

use super::{Admission, Outcome, Port, admit, policy};
use crate::audit::{Kind, Record, Verdict};
use crate::decide::Target;
use crate::detect::Detectors;
use crate::names::{Budget, NameNeedles, NameRules};

fn parsed(mode: &str, allow: &str) -> Policy {
    let text = format!(
        "[sandbox]\nname = \"t\"\nmode = \"{mode}\"\n[network]\nallow = [{allow}]\ndeny = [\"denied.test\"]\n"
    );
    Policy::parse(&text, std::path::Path::new("p.toml")).unwrap()
}

fn target(host: &str, port: u16) -> Target {
    Target {
        host: Host::parse(host).unwrap(),
        port,
    }
}

/// Decides `host:port` under `p` with one workspace value, `hunter2-correct-horse`.
fn decide(p: &Policy, budget: &Budget, host: &str, port: u16) -> Admission {
    let values = [WorkspaceSecret {
        file: ".env".into(),
        name: "K".into(),
        detector: None,
        value: airlock_handoff::Secret::new("hunter2-correct-horse".into()),
    }];
    let detectors = Detectors::with_workspace(&values).unwrap();
    let needles = NameNeedles::new(&detectors, &values).unwrap();
    let rules = NameRules {
        policy: p,
        detectors: &detectors,
        needles: &needles,
    };
    admit(rules, budget, None, &target(host, port))
}

const ALLOW: &str = r#""ok.test", "*.zone.test""#;

#[test]
fn the_policy_decides_first_and_a_refused_host_never_reaches_the_name_check() {
    let p = parsed("enforce", ALLOW);
    let b = Budget::default();
    let a = decide(&p, &b, "ok.test", 443);
    assert_eq!(
        (a.outcome, a.rule.as_deref()),
        (Outcome::Allow, Some("ok.test"))
    );
    assert_eq!(
        decide(&p, &b, "other.test", 443).refused(),
        Some(Reason::BlockedByPolicy)
    );
    assert_eq!(
        decide(&p, &b, "denied.test", 443).refused(),
        Some(Reason::DeniedByRule)
    );
    assert_eq!(
        decide(&p, &b, "ok.test", 22).refused(),
        Some(Reason::BlockedPort)
    );
    // A name carrying the workspace value, on a host the policy refuses: the policy's
    // reason, and nothing spent of any budget.
    let a = decide(&p, &b, "hunter2-correct-horse.other.test", 443);
    assert_eq!(a.outcome, Outcome::Deny(Reason::BlockedByPolicy));
    assert_eq!(a.redacted, None);
}

#[test]
fn a_name_the_policy_lets_through_is_judged_and_masked_when_a_detector_fires() {
    let p = parsed("enforce", ALLOW);
    let b = Budget::default();
    let a = decide(&p, &b, "hunter2-correct-horse.zone.test", 443);
    assert_eq!(a.outcome, Outcome::Deny(Reason::ForeignSecret));
    assert_eq!(a.rule.as_deref(), Some("secret detector workspace:.env"));
    assert_eq!(
        a.redacted.as_deref(),
        Some("*******-*******-*****.zone.test")
    );
    // The shape check keeps the policy's rule and the name (it carries no value).
    let a = decide(
        &p,
        &b,
        "68656c6c6f.20776f726c.64207468.69732069.zone.test",
        443,
    );
    assert_eq!(a.outcome, Outcome::Deny(Reason::DnsExfilSuspect));
    assert_eq!((a.rule.as_deref(), a.redacted), (Some("*.zone.test"), None));
}

#[test]
fn report_mode_reports_what_configuration_opens_and_never_a_hard_deny_or_a_secret() {
    let p = parsed("report", ALLOW);
    let b = Budget::default();
    assert_eq!(
        decide(&p, &b, "other.test", 443).outcome,
        Outcome::Report(Reason::BlockedByPolicy)
    );
    for (host, reason) in [
        ("169.254.169.254", Reason::BlockedMetadataAddress),
        ("127.0.0.1", Reason::BlockedPrivateAddress),
        ("203.0.113.7", Reason::BlockedIpLiteral),
        ("hunter2-correct-horse.zone.test", Reason::ForeignSecret),
    ] {
        let a = decide(&p, &b, host, 443);
        assert!(a.outcome == Outcome::Deny(reason), "{host}: {a:?}");
    }
    // An encoded name is reported in report mode, resolved, and the line says why.
    let a = decide(
        &p,
        &b,
        "68656c6c6f.20776f726c.64207468.69732069.zone.test",
        443,
    );
    assert_eq!(a.outcome, Outcome::Report(Reason::DnsExfilSuspect));
}

#[test]
fn a_dns_question_asks_for_the_name_on_any_port() {
    let p = parsed("enforce", r#""ok.test:8443""#);
    let t = target("ok.test", 443);
    assert_eq!(
        policy(&p, &t, Port::Exact).refused(),
        Some(Reason::BlockedPort)
    );
    assert_eq!(policy(&p, &t, Port::Any).outcome, Outcome::Allow);
}

#[test]
fn the_record_carries_the_decision_as_every_path_writes_it() {
    let p = parsed("enforce", ALLOW);
    let b = Budget::default();
    let who = crate::audit::Who::new("s1", "t", None);
    let mut rec = Record::new(&who, std::time::SystemTime::UNIX_EPOCH, Kind::Connect, None);
    rec.host = Some("hunter2-correct-horse.zone.test".into());
    decide(&p, &b, "hunter2-correct-horse.zone.test", 443).stamp(&mut rec);
    assert_eq!(rec.decision, Verdict::Deny);
    assert_eq!(rec.reason, Some(Reason::ForeignSecret));
    assert_eq!(rec.host.as_deref(), Some("*******-*******-*****.zone.test"));
    decide(&p, &b, "ok.test", 443).stamp(&mut rec);
    assert_eq!((rec.decision, rec.reason), (Verdict::Allow, None));
    assert_eq!(rec.rule.as_deref(), Some("ok.test"));
}

#[test]
fn only_a_host_no_rule_lists_is_asked_about_and_never_one_that_cannot_exist() {
    let text = "[sandbox]\nname = \"t\"\n[network]\nallow = [\"ok.test\", \"203.0.113.7\"]\ndeny = [\"denied.test\"]\nunlisted = \"ask\"\n";
    let p = Policy::parse(text, std::path::Path::new("p.toml")).unwrap();
    let outcome = |host: &str, port: u16| policy(&p, &target(host, port), Port::Exact).outcome;
    assert_eq!(outcome("new.test", 443), Outcome::Ask);
    assert_eq!(outcome("ok.test", 443), Outcome::Allow);
    assert_eq!(outcome("ok.test", 22), Outcome::Deny(Reason::BlockedPort));
    assert_eq!(
        outcome("denied.test", 443),
        Outcome::Deny(Reason::DeniedByRule)
    );
    assert_eq!(
        outcome("198.51.100.9", 443),
        Outcome::Deny(Reason::BlockedIpLiteral)
    );
    assert_eq!(
        outcome("169.254.169.254", 80),
        Outcome::Deny(Reason::BlockedMetadataAddress)
    );
    // The entrypoint's self-test name (RFC 6761's `.invalid`): refused, not asked about.
    assert_eq!(
        outcome("airlock-self-test.invalid", 80),
        Outcome::Deny(Reason::BlockedByPolicy)
    );
    // Without a pace (the git service port) an asked host is refused as unlisted.
    let budget = Budget::default();
    let a = decide(&p, &budget, "new.test", 443);
    assert_eq!(a.outcome, Outcome::Deny(Reason::BlockedByPolicy));
}
