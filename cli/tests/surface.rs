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

const SUBCOMMANDS: [&str; 21] = [
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
