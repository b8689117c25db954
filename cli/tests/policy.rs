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

/// A proxy audit line as the log writes it.
fn refusal(
    ms: u64,
    reason: &str,
    host: &str,
    port: u16,
    method: &str,
    path: Option<&str>,
) -> String {
    use airlock_audit_schema::{Kind, Record, Verdict, Who};
    let who = Who::new("1764300000-a1b2c3d4e5f6", "pol", None);
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let kind = if path.is_some() {
        Kind::Http
    } else {
        Kind::Connect
    };
    let mut r: Record = Record::new(&who, at, kind, None);
    r.decision = Verdict::Deny;
    r.reason = Some(reason.into());
    r.host = Some(host.into());
    r.port = Some(port);
    r.method = Some(method.into());
    r.path = path.map(str::to_owned);
    serde_json::to_string(&r).unwrap()
}

#[test]
fn policy_suggest_folds_the_audit_log_into_lines_to_review() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _fake) = fake::sandbox(dir.path(), "pol");
    let audit = data.join("sandboxes/pol/audit");
    std::fs::create_dir_all(&audit).unwrap();
    let day = 1_764_300_000_000;
    // The rotated file is read too; the archives beside it are not (sorted copies).
    std::fs::write(
        audit.join("audit.jsonl.1"),
        refusal(
            day,
            "blocked-by-policy",
            "old.example",
            443,
            "CONNECT",
            None,
        ) + "\n",
    )
    .unwrap();
    std::fs::write(
        audit.join("audit.jsonl.allowed"),
        refusal(
            day,
            "blocked-by-policy",
            "archive.example",
            443,
            "CONNECT",
            None,
        ) + "\n",
    )
    .unwrap();
    let now = airlock_audit_schema::Timestamp::now().0;
    let lines = [
        refusal(now, "blocked-by-policy", "pypi.org", 443, "CONNECT", None),
        refusal(now, "blocked-by-policy", "pypi.org", 443, "CONNECT", None),
        refusal(
            now,
            "read-only-host",
            "api.example.com",
            443,
            "POST",
            Some("/v1/items"),
        ),
        refusal(
            now,
            "blocked-metadata-address",
            "169.254.169.254",
            80,
            "GET",
            Some("/"),
        ),
        "not json".to_owned(),
    ];
    std::fs::write(audit.join("audit.jsonl"), lines.join("\n") + "\n").unwrap();

    let o = airlock(&data, &["policy", "suggest", "pol"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("# pol: 5 refusals in its audit log."),
        "{out}"
    );
    assert!(out.contains("\n[network]\nallow = [\n"), "{out}");
    assert!(out.contains("\"old.example\","), "{out}");
    assert!(
        out.contains("\"pypi.org\",") && out.contains("# 2 refusals (blocked-by-policy)"),
        "{out}"
    );
    assert!(!out.contains("archive.example"), "{out}");
    assert!(out.contains("[[rules]]\nhost = \"api.example.com\"\nmethod = \"POST\"\npath = \"/v1/items\"\naction = \"allow\""), "{out}");
    assert!(
        out.contains("#   blocked-metadata-address: 1 refusal"),
        "{out}"
    );

    // --since leaves the rotated day-old refusal out; JSON for machines.
    let o = airlock(
        &data,
        &["policy", "suggest", "pol", "--since", "1h", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["refusals"], 4, "{v}");
    assert!(v["network"]["allow"].get("old.example").is_none(), "{v}");
    assert_eq!(v["network"]["allow"]["pypi.org"]["count"], 2, "{v}");
    assert_eq!(v["rules"][0]["path"], "/v1/items", "{v}");

    let o = airlock(&data, &["policy", "suggest", "pol", "--since", "yesterday"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("--since \"yesterday\" is neither a span"),
        "{}",
        text(&o.stderr)
    );
    let o = airlock(&data, &["policy", "suggest", "nosuch"]);
    assert!(
        text(&o.stderr).contains("no audit logs of a sandbox named \"nosuch\""),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn approvals_lists_the_inbox_of_a_sandbox_and_of_every_running_one() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _fake) = fake::sandbox(dir.path(), "pol");
    for args in [&["approvals", "pol"][..], &["approvals"][..]] {
        let o = airlock(&data, args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(out.starts_with("1 pending\n"), "{out}");
        assert!(
            out.contains("pol/3f2a9c1d  uid 1000  asked.example:443  2 hits, last 2025-11-28T03:20:01.000Z  pending"),
            "{out}"
        );
    }
    let o = airlock(&data, &["approvals", "pol", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["sandbox"], "pol", "{v}");
    assert_eq!(v[0]["id"], "3f2a9c1d", "{v}");
    // Answering needs a scope, and a denial a reason (the parser's refusals: exit 2).
    assert_eq!(
        airlock(&data, &["approve", "3f2a9c1d"]).status.code(),
        Some(2)
    );
    assert_eq!(airlock(&data, &["deny", "3f2a9c1d"]).status.code(), Some(2));
    let o = airlock(
        &data,
        &["approve", "3f2a9c1d", "--session", "--for", "soon"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
