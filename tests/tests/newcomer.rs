//! The first ten minutes (issue 15): what a newcomer does on the first day must work, in the
//! real entrypoint, proxy and firewall in the namespace world.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// `mode = "report"` (the documented way to learn which hosts an agent needs) starts: the
/// self-test proves the firewall with what report mode still denies, a policy denial is let
/// through and logged as `report`, and a hard deny stays denied.
#[test]
fn report_mode_starts_lets_policy_denials_through_and_logs_them() {
    let world = world();
    let airlock = Airlock::new(
        &world,
        "[sandbox]\nname = \"learn\"\nmode = \"report\"\n\n[network]\nallow = [\"allowed.test\"]\n",
    );
    let script = [
        probe(&world, "blocked", "http://blocked.test/"),
        probe(&world, "meta", "http://169.254.169.254/"),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("blocked=200"),
        "report mode lets a policy denial through:\n{text}\n{}",
        stderr(&out)
    );
    assert!(text.contains("meta=403"), "hard denies stay denied:\n{text}");
    let audit = airlock.audit();
    assert!(
        audit
            .iter()
            .any(|l| l["host"] == "blocked.test" && l["decision"] == "report"),
        "the let-through is logged as report: {audit:#?}"
    );
}
