//! Two sessions in one sandbox of the real image, through the operator's CLI: each
//! `airlock exec` is a session of its own (the agent's uid, its own gid), the proxy tells
//! them apart on every connection by the address the firewall gives each, and none of them
//! can take another's: not by binding the other's address, not through its `/proc`.
//! Files either session writes in the workspace stay the agent's and usable by the other.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{POLICY, Shell, World};
use serde_json::Value;

/// `curl` of `url` as the agent would, optionally from `--interface ADDR`: the JSON body.
fn get(url: &str, interface: Option<&str>) -> String {
    let from = interface.map_or(String::new(), |a| format!("--interface {a} "));
    format!("curl -s --max-time 10 {from}{url}")
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The item `id` of the sandbox's inbox.
fn item(w: &World, s: &str, id: &str) -> Value {
    let items: Value = json(&w.ok(&["approvals", s, "--json"]));
    items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no item {id} in {items}"))
}

/// Session A (2) asks and is approved `--session`: A passes, B (3, the same uid) is still
/// asked and files its own item. B cannot become A: a source bound to A's address is still
/// B's, and A's `/proc` is closed to it. Both write the workspace as the agent's uid. Every
/// audit line of theirs names its session.
#[test]
fn attack_two_sessions_of_one_sandbox_are_told_apart_and_neither_can_take_the_other() {
    let w = World::new("ses");
    std::fs::write(
        w.dir.path().join("policy.toml"),
        format!("{POLICY}unlisted = \"ask\"\n"),
    )
    .unwrap();
    let s = w.name("s");
    let new: Vec<String> = w.new_args(&s, Some("exec sleep 600"));
    w.ok(&new.iter().map(String::as_str).collect::<Vec<_>>());

    // Two sessions at once: the lowest free numbers after the agent's own (1).
    let mut a = Shell::start(&w, &s);
    let mut b = Shell::start(&w, &s);
    let (ka, kb): (u16, u16) = (
        a.run("echo $AIRLOCK_AGENT_SESSION").parse().unwrap(),
        b.run("echo $AIRLOCK_AGENT_SESSION").parse().unwrap(),
    );
    assert_ne!(ka, kb);
    assert!(
        (2..=64).contains(&ka) && (2..=64).contains(&kb),
        "{ka} {kb}"
    );
    let (uid_a, uid_b) = (a.run("id -u"), b.run("id -u"));
    assert_eq!(uid_a, uid_b, "every session is the agent's uid");
    assert_eq!(a.run("id -g"), (61_000 + u32::from(ka)).to_string());
    assert_eq!(b.run("id -g"), (61_000 + u32::from(kb)).to_string());

    // A asks; the inbox names A's session; the operator approves it for that session.
    let v = json(&a.run(&get("http://asked.example/", None)));
    assert_eq!(v["error"], "approval-required", "{v}");
    let id = v["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(item(&w, &s, &id)["session"], format!("session {ka}"));
    let out = w.ok(&["approve", &format!("{s}/{id}"), "--session"]);
    assert!(out.contains("approved (session)"), "{out}");
    // A passes the policy (nothing answers upstream here: no approval error any more).
    let passed = a.run("curl -s --max-time 10 -o /dev/null -D - http://asked.example/ | tr -d '\\r' | sed -n 's/^x-airlock-error: *//Ip'");
    assert!(!passed.contains("approval"), "{passed}");

    // B, the same uid, is still asked, with an item of its own.
    let v = json(&b.run(&get("http://asked.example/", None)));
    assert_eq!(v["error"], "approval-required", "{v}");
    let theirs = v["approval_id"].as_str().unwrap().to_owned();
    assert_ne!(theirs, id);
    assert_eq!(item(&w, &s, &theirs)["session"], format!("session {kb}"));

    // B binds A's address as its source: the firewall rewrites it to B's own.
    let forged = json(&b.run(&get(
        "http://asked.example/forged",
        Some(&format!("127.77.0.{ka}")),
    )));
    assert_eq!(forged["error"], "approval-required", "{forged}");
    assert_eq!(forged["approval_id"], theirs.as_str(), "{forged}");

    // A's /proc is closed to B: another gid, so no ptrace access (environ, memory, what
    // its descriptors are).
    let pid_a = a.run("echo $$");
    // (Its descriptors' numbers are listed to the uid, as for any process: not what they are.)
    let probe = b.run(&format!(
        "p=/proc/{pid_a}; for f in environ mem fd/1; do cat $p/$f >/dev/null 2>&1 && echo \"read $f\" || echo \"refused $f\"; done; readlink $p/fd/1 >/dev/null 2>&1 && echo 'read link' || echo 'refused link'"
    ));
    assert_eq!(
        probe, "refused environ\nrefused mem\nrefused fd/1\nrefused link",
        "{probe}"
    );
    // ... while A reads its own.
    assert!(a.run("cat /proc/$$/environ | tr '\\0' '\\n' | grep -c AIRLOCK_AGENT_SESSION") == "1");

    // The workspace: what one session writes the other can change, and it is the agent's.
    a.run("echo from-a > /workspace/shared.txt");
    b.run("echo from-b >> /workspace/shared.txt && echo b-new > /workspace/b.txt");
    a.run("echo a-was-here >> /workspace/b.txt");
    assert_eq!(
        b.run("cat /workspace/shared.txt /workspace/b.txt"),
        "from-a\nfrom-b\nb-new\na-was-here"
    );
    assert_eq!(
        a.run("stat -c %u /workspace/shared.txt /workspace/b.txt"),
        format!("{uid_a}\n{uid_a}")
    );

    // Every line of theirs names the agent's uid and its session; the forged one B's.
    drop((a, b));
    let log = w.ok(&["logs", &s, "--audit", "--json"]);
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &Value| l["host"] == "asked.example" && l["event"] != "approval-answered")
        .collect();
    assert!(lines.len() >= 4, "{log}");
    for l in &lines {
        assert_eq!(l["uid"].to_string(), uid_a, "{l}");
        let k = l["agent_session"].as_u64().unwrap_or_else(|| panic!("{l}"));
        assert!(k == u64::from(ka) || k == u64::from(kb), "{l}");
        if l["path"] == "/forged" {
            assert_eq!(k, u64::from(kb), "{l}");
        }
    }
    assert!(
        lines.iter().any(|l| l["agent_session"] == ka)
            && lines.iter().any(|l| l["agent_session"] == kb),
        "{log}"
    );
    w.ok(&["destroy", &s, "--force"]);
}
