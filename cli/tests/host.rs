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
