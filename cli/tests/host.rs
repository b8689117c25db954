//! The host-side commands against the real engine and image: `doctor`, `secret`, the
//! renderings written for other engines (`devcontainer`, `k8s render`) and `build`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::World;
use serde_json::Value;

fn doctor_json(w: &World, extra_env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend(args);
    let mut c = w.cmd(&all);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    (o.status.code(), v)
}

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} line in {v}"))
}

#[test]
fn doctor_reports_each_check_on_one_line_with_the_fix_when_wrong() {
    let w = World::new("doc");
    let (code, v) = doctor_json(&w, &[], &[]);
    for name in [
        "engine", "cgroup", "image", "iptables", "ipv6", "seccomp", "disk",
    ] {
        let c = check(&v, name);
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c}");
        assert_eq!(
            c["level"] == "ok",
            c["fix"].is_null(),
            "a fix exactly when not ok: {c}"
        );
    }
    assert_eq!(check(&v, "engine")["level"], "ok", "{v}");
    assert_eq!(check(&v, "image")["level"], "ok", "{v}");
    assert_eq!(
        check(&v, "iptables")["level"],
        "ok",
        "the firewall's tools work here: {v}"
    );
    assert_eq!(code, Some(0), "nothing fails on this machine: {v}");
    // No probe container is left behind.
    let left = common::sh(
        &w.repo(),
        "docker ps -aq --filter name=airlock-doctor- | wc -l",
    );
    assert_eq!(left, "0");
    // The text form: one line per check.
    let text = String::from_utf8_lossy(&w.cmd(&["doctor"]).output().unwrap().stdout).into_owned();
    assert_eq!(text.lines().count(), v.as_array().unwrap().len(), "{text}");

    // Engine down: that line fails with the fix, the machine's own lines still come.
    let (code, v) = doctor_json(&w, &[("DOCKER_HOST", "unix:///nonexistent.sock")], &[]);
    assert_eq!(code, Some(1));
    let e = check(&v, "engine");
    assert_eq!(e["level"], "fail");
    assert!(e["fix"].as_str().unwrap().contains("DOCKER_HOST"), "{e}");
    check(&v, "cgroup");
    check(&v, "disk");

    // A missing image: the image line fails and says how to build it.
    let (code, v) = doctor_json(&w, &[], &["--image", "airlock:does-not-exist"]);
    assert_eq!(code, Some(1));
    assert!(
        check(&v, "image")["fix"]
            .as_str()
            .unwrap()
            .contains("airlock build"),
        "{v}"
    );
}

/// `airlock ARGS` with `input` on stdin (a pipe).
fn piped(w: &World, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = w
        .cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn secrets_are_stored_0600_and_reach_a_sandbox_only_as_files() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new("sst");
    let value = format!("stored-sekrit-{}-{}", std::process::id(), w.prefix);
    let o = piped(
        &w,
        &["secret", "set", "api_token"],
        format!("{value}\n").as_bytes(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = w.config().join("secrets/api_token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), value);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&w.config().join("secrets")), 0o700);
    assert_eq!(w.ok(&["secret", "ls"]), "api_token\n");
    let ls: Value = serde_json::from_str(&w.ok(&["secret", "ls", "--json"])).unwrap();
    assert_eq!(ls[0]["name"], "api_token");
    assert!(!ls.to_string().contains(&value), "ls never shows a value");

    // A prompt on a terminal does not echo the value.
    let cmd = format!("{} secret set typed", env!("CARGO_BIN_EXE_airlock"));
    let o = common::sh(
        &w.repo(),
        &format!(
            "(sleep 1; printf 'typed-{v}\\n') | AIRLOCK_CONFIG_DIR='{c}' script -qec '{cmd}' /dev/null",
            v = w.prefix,
            c = w.config().display()
        ),
    );
    assert!(o.contains("not echoed") && !o.contains("typed-"), "{o}");
    let typed = std::fs::read_to_string(w.config().join("secrets/typed")).unwrap();
    assert_eq!(typed, format!("typed-{}", w.prefix));

    // A sandbox gets it as a read-only file; no host process has it in argv or environment.
    let s = w.name("s");
    let mut args = w.new_args(&s, Some("exec sleep 600"));
    args.splice(2..2, ["--secret".to_string(), "api_token".to_string()]);
    let mut child = w
        .cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut scans = 0;
    while child.try_wait().unwrap().is_none() || scans == 0 {
        assert_eq!(common::processes_holding(&value), Vec::<String>::new());
        scans += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(common::processes_holding(&value), Vec::<String>::new());
    let seen = common::sh(
        &w.repo(),
        &format!("docker exec airlock-{s} cat /run/secrets/api_token"),
    );
    assert_eq!(seen, value, "mounted at /run/secrets/api_token");
    let inspect = common::sh(&w.repo(), &format!("docker inspect airlock-{s}"));
    assert!(
        !inspect.contains(&value),
        "never in the container's configuration"
    );
    assert!(inspect.contains(&format!("{}:/run/secrets/api_token:ro", file.display())));
    w.ok(&["destroy", &s]);

    // Removed: gone from the list, and a sandbox asking for it is refused before anything.
    w.ok(&["secret", "rm", "api_token"]);
    assert!(!file.exists());
    let o = w.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("airlock secret set api_token"));
    assert!(w.list().is_empty());
}
