//! `airlock policy show|reload` and the admin part of `status` against a fake admin API
//! (no engine): what each prints, its exit codes, what it sends. The real proxy's answers
//! are `admin::` (the Docker tier).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::fake;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn airlock(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .env("AIRLOCK_DATA_DIR", data)
        .env("AIRLOCK_CONFIG_DIR", data.join("config"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn policy_show_prints_the_revision_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _fake) = fake::sandbox(dir.path(), "pol");
    let o = airlock(&data, &["policy", "show", "pol"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "revision 7 (feedface0123456789) loaded at 2025-11-28T03:20:00.000Z from /etc/airlock/policy.toml\n\
         \x20 network.allow  api.anthropic.com   file network.allow[0]\n\
         \x20 rules          deny merges\\x1b[2J  preset github (l7.presets[0])\n"
    );
    let o = airlock(&data, &["policy", "show", "pol", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["revision"], 7, "{v}");
    assert_eq!(v["origin"], "/etc/airlock/policy.toml", "{v}");
    assert_eq!(v["rules"][0]["origin"], "file network.allow[0]", "{v}");
}

#[test]
fn policy_reload_sends_the_host_file_and_prints_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (data, fake) = fake::sandbox(dir.path(), "pol");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[network]\nallow = [\"a.example\"]\n").unwrap();
    // A relative FILE: sent with its absolute path as the origin.
    let o = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["policy", "reload", "pol", "good.toml"])
        .current_dir(dir.path())
        .env("AIRLOCK_DATA_DIR", &data)
        .env("AIRLOCK_CONFIG_DIR", data.join("config"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "revision 8 (0badc0de0bad) loaded at 2025-11-28T03:20:02.000Z; 1 open connection it refuses closed\n"
    );
    let sent = fake.reloads.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        sent.text.as_deref(),
        Some("[network]\nallow = [\"a.example\"]\n")
    );
    assert_eq!(sent.origin.as_deref(), Some(good.to_str().unwrap()));

    // No FILE: the proxy reads its own again; here nothing changed.
    let o = airlock(&data, &["policy", "reload", "pol"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "unchanged: revision 7 (feedface0123) stays in force\n"
    );
    let sent = fake.reloads.lock().unwrap().last().cloned().unwrap();
    assert_eq!((sent.text, sent.origin), (None, None));
}

#[test]
fn a_refused_reload_prints_the_proxys_line_and_exits_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _fake) = fake::sandbox(dir.path(), "pol");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[sandbox]\nname = \"x\"\n[network\n").unwrap();
    let o = airlock(
        &data,
        &["policy", "reload", "pol", broken.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        format!(
            "airlock: {}:3: unclosed table header; the policy in force stays\n",
            broken.display()
        )
    );
    assert!(o.stdout.is_empty());

    let git = dir.path().join("git.toml");
    std::fs::write(&git, "[git]\nrepositories = []\n").unwrap();
    let o = airlock(&data, &["policy", "reload", "pol", git.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("needs a restart"),
        "{}",
        text(&o.stderr)
    );

    // A file that is not there: said before anything is sent.
    let o = airlock(&data, &["policy", "reload", "pol", "/nonexistent/p.toml"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with("airlock: cannot read the policy /nonexistent/p.toml"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_sandbox_without_an_admin_socket_is_said_not_to_run_and_an_unknown_one_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fake::register(&data, "old");
    let o = airlock(&data, &["policy", "show", "old"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with(
            "airlock: the sandbox old is not running, or started before the admin API: restart it (no socket at "
        ),
        "{err}"
    );
    let o = airlock(&data, &["policy", "reload", "nosuch"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
}

#[test]
fn policy_check_prints_the_decision_reason_and_rule_first() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _fake) = fake::sandbox(dir.path(), "pol");
    let o = airlock(&data, &["policy", "check", "pol", "https://evil.example/x"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "deny blocked-by-policy  (revision 7, host step)\n  https://evil.example/x is not in [network] allow: to allow, add \"evil.example\"\n  to allow: add \"evil.example\" to [network] allow in the policy\n"
    );
    let o = airlock(
        &data,
        &[
            "policy",
            "check",
            "pol",
            "https://api.example/v1",
            "--method",
            "POST",
        ],
    );
    assert_eq!(
        text(&o.stdout).lines().next(),
        Some("allow  rule \"api.example\"  (revision 7, request step)")
    );
    let o = airlock(
        &data,
        &["policy", "check", "pol", "api.example:443", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!(v["stage"], "host", "{v}");
}
