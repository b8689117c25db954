//! The command line itself: help with examples everywhere, completions, exit codes, render.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

fn airlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const SUBCOMMANDS: [&str; 22] = [
    "run",
    "new",
    "list",
    "status",
    "attach",
    "exec",
    "stop",
    "start",
    "destroy",
    "logs",
    "fetch",
    "gc",
    "doctor",
    "secret",
    "rescan",
    "devcontainer",
    "k8s",
    "build",
    "render",
    "audit",
    "completions",
    "help",
];

#[test]
fn every_subcommand_has_help_with_examples() {
    let top = airlock(&["--help"]);
    assert!(top.status.success());
    let text = stdout(&top);
    assert!(
        text.contains("Examples:") && text.contains("Exit codes:"),
        "{text}"
    );
    for sub in SUBCOMMANDS.iter().filter(|s| **s != "help") {
        assert!(text.contains(sub), "{sub} listed");
        let o = airlock(&[sub, "--help"]);
        assert!(o.status.success(), "{sub}");
        assert!(
            stdout(&o).contains("Examples:"),
            "{sub} --help has examples"
        );
    }
    for sub in ["list", "status", "gc", "new", "doctor"] {
        assert!(
            stdout(&airlock(&[sub, "--help"])).contains("--json"),
            "{sub} has --json"
        );
    }
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = airlock(&["completions", shell]);
        assert!(o.status.success(), "{shell}");
        assert!(
            stdout(&o).contains("destroy"),
            "{shell} completes subcommands"
        );
    }
}

#[test]
fn bad_usage_and_bad_names_exit_2_with_one_line() {
    let o = airlock(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let o = airlock(&["render", "k8s", "--name", "Bad_Name", "--repo", "."]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not allowed") && err.contains("e.g. fix-login"),
        "{err}"
    );
}

/// `airlock audit verify` reads files only (no engine): exit 0 and one line for an intact
/// log given in any order, exit 7 and one line naming FILE:LINE for an edited one, 2 when no
/// stream file is given, 1 for a file it cannot read.
#[test]
fn audit_verify_names_the_first_bad_line_and_exits_7() {
    use airlock_audit_schema::chain;
    let dir = tempfile::tempdir().unwrap();
    let mut head = chain::GENESIS;
    let mut write = |name: &str, bodies: &[&str]| {
        let mut buf = Vec::new();
        for b in bodies {
            let start = buf.len();
            buf.extend_from_slice(b.as_bytes());
            head = chain::seal(&mut buf, start, &head).unwrap();
            buf.push(b'\n');
        }
        let path = dir.path().join(name);
        std::fs::write(&path, buf).unwrap();
        path.display().to_string()
    };
    let older = write("audit.jsonl.1", &[r#"{"n":1}"#, r#"{"n":2}"#]);
    let current = write("audit.jsonl", &[r#"{"n":3}"#, r#"{"n":4}"#]);
    let archive = dir.path().join("audit.jsonl.first").display().to_string();
    std::fs::write(&archive, "{\"n\":0}\n").unwrap();

    let o = airlock(&["audit", "verify", &current, &archive, &older]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with("intact: 4 lines in 2 files, from the log's first line; last chain "),
        "{out}"
    );
    assert!(out.contains("not checked: 1 archive file"), "{out}");

    let text = std::fs::read_to_string(&older).unwrap();
    std::fs::write(&older, text.replace("\"n\":2", "\"n\":9")).unwrap();
    let o = airlock(&["audit", "verify", &older, &current]);
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("airlock: {older}:2: the chain breaks here")),
        "{err}"
    );

    let o = airlock(&["audit", "verify", &archive]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let missing = dir.path().join("gone/audit.jsonl").display().to_string();
    let o = airlock(&["audit", "verify", &missing]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read"));
}

#[test]
fn render_prints_every_target_from_the_one_definition() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    let repo = dir.path().to_str().unwrap();
    for target in ["compose", "devcontainer", "k8s", "docker", "engine"] {
        let o = airlock(&["render", target, "--repo", repo]);
        assert!(
            o.status.success(),
            "{target}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = stdout(&o);
        assert!(text.contains("NET_ADMIN"), "{target}: {text}");
        assert!(
            text.contains("/workspace/.git"),
            "{target} covers .git: {text}"
        );
        if target != "compose" && target != "docker" {
            serde_json::from_str::<serde_json::Value>(&text).unwrap();
        }
    }
}
