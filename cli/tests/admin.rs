//! The CLI as the admin API's client against the real proxy of the real image
//! (`scripts/build-image`, an image with the admin API): `status` with the proxy's numbers,
//! `logs --audit -f` from the event stream, `policy show` (the effective rules and their
//! origins), `policy suggest` (from the audit log) and `policy reload` (a broken file
//! refused with FILE:LINE and the old revision kept, a good one swapped in, the same one
//! again unchanged), and `top` in a real terminal (tmux) showing a denial as it happens.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{POLICY, Shell, World};
use crate::top::Tmux;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// What the agent prints running `script` in its session, trimmed. One session plays the
/// agent for a whole test: each `airlock exec` is a session of its own, and an answer
/// `--session` is for the session that asked.
fn agent_sh(agent: &mut Shell, script: &str) -> String {
    agent.run(script)
}

/// The agent asks the proxy for a host: the proxy's refusal (its `x-airlock-error` header,
/// empty when it did not refuse).
fn refusal(agent: &mut Shell, host: &str) -> String {
    agent_sh(
        agent,
        &format!(
            "curl -s --max-time 10 -o /dev/null -D - http://{host}/ | tr -d '\\r' | sed -n 's/^x-airlock-error: *//Ip'"
        ),
    )
}

#[test]
fn status_logs_follow_and_policy_reload_through_the_admin_api() {
    let w = World::new("adm");
    let s = w.name("s");
    w.ok(&args(&w.new_args(&s, Some("exec sleep 600"))));
    let mut agent = Shell::start(&w, &s);

    // status: the proxy's view beside the registry's.
    let v: Value = serde_json::from_str(&w.ok(&["status", &s, "--json"])).unwrap();
    assert_eq!(v["admin_error"], Value::Null, "{v}");
    assert_eq!(v["admin"]["status"]["state"], "ready", "{v}");
    assert_eq!(v["admin"]["policy"]["revision"], 1, "{v}");
    assert_eq!(v["admin"]["counters"]["audit"], "writing", "{v}");
    let text = w.ok(&["status", &s]);
    for want in [
        "policy      revision 1 (",
        "requests    ",
        "audit       writing",
        "connections ",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }

    // top in a terminal: the sandbox's row, then a denial as it happens; q quits.
    let rc = w.dir.path().join("top.rc");
    let tmux = top_in_tmux(&w, &format!("echo rc=$? > {}", rc.display()));
    tmux.wait_for("the sandbox's row", |screen| {
        screen
            .lines()
            .any(|l| l.contains(&s) && l.contains("ready") && l.contains(" r1 "))
    });
    assert!(refusal(&mut agent, "top.blocked.test").contains("blocked-by-policy"));
    tmux.wait_for("the denial", |screen| {
        screen
            .lines()
            .any(|l| l.contains("top.blocked.test") && l.contains("blocked-by-policy"))
    });
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let start = Instant::now();
    while !rc.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "top did not quit on q:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "rc=0");
    drop(tmux);

    // logs --audit -f: a denial comes through the event stream while it follows.
    let mut follow = w
        .cmd(&["logs", &s, "--audit", "-f", "--denied"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(refusal(&mut agent, "stream.blocked.test").contains("blocked-by-policy"));
    let denied_at = Instant::now();
    let seen = loop {
        let (at, line) = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("logs -f never printed the denial");
        if line.contains("stream.blocked.test") {
            break (at, line);
        }
    };
    assert!(seen.1.contains("deny"), "{}", seen.1);
    eprintln!(
        "logs -f printed the denial {} ms after curl returned",
        seen.0.saturating_duration_since(denied_at).as_millis()
    );
    let _ = follow.kill();
    let _ = follow.wait();
    let v: Value = serde_json::from_str(&w.ok(&["status", &s, "--json"])).unwrap();
    assert!(v["admin"]["counters"]["denied"].as_u64() >= Some(1), "{v}");

    // policy check: the dry run agrees with what the agent got.
    let check = w.ok(&["policy", "check", &s, "http://stream.blocked.test/"]);
    assert!(check.starts_with("deny blocked-by-policy"), "{check}");
    // policy suggest: the refused hosts, read back from the sandbox's own audit log, as
    // the lines that would have allowed them.
    let suggested = w.ok(&["policy", "suggest", &s]);
    assert!(
        suggested.contains("\n[network]\nallow = [\n")
            && suggested.contains("\"stream.blocked.test\",")
            && suggested.contains("\"top.blocked.test\","),
        "{suggested}"
    );

    // policy reload: a broken file is refused with its FILE:LINE, revision 1 stays.
    let broken = w.dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        "[sandbox]\nname = \"clitest\"\n[network\nallow = []\n",
    )
    .unwrap();
    let o = w.run(&["policy", "reload", &s, broken.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:", broken.display())),
        "FILE:LINE in {err}"
    );
    assert!(w.ok(&["policy", "show", &s]).starts_with("revision 1 ("));

    // A good one: revision 2, and the host it allows now passes the policy.
    let good = w.dir.path().join("good.toml");
    std::fs::write(
        &good,
        POLICY.replace(
            "[\"allowed.test\"]",
            "[\"allowed.test\", \"stream.blocked.test\"]",
        ),
    )
    .unwrap();
    let out = w.ok(&["policy", "reload", &s, good.to_str().unwrap()]);
    assert!(out.starts_with("revision 2 ("), "{out}");
    assert!(out.contains("open connection"), "{out}");
    let shown = w.ok(&["policy", "show", &s]);
    assert!(shown.starts_with("revision 2 ("), "{shown}");
    assert!(shown.contains(&good.display().to_string()), "{shown}");
    // Its effective rules, each with where it came from.
    let line = |rule: &str| {
        shown
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(rule))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("{rule} not listed in {shown}"))
    };
    assert_eq!(
        line("stream.blocked.test"),
        "network.allow stream.blocked.test file network.allow[1]"
    );
    assert!(line("github.com").starts_with("network.git_hosts github.com built-in: "));
    let after = refusal(&mut agent, "stream.blocked.test");
    assert!(
        !after.contains("blocked-by-policy"),
        "the new revision allows it (it may still not resolve): {after}"
    );
    let check = w.ok(&[
        "policy",
        "check",
        &s,
        "http://stream.blocked.test/",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&check).unwrap();
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!(v["revision"], 2, "{v}");
    // The same rules again: nothing happens.
    let out = w.ok(&["policy", "reload", &s, good.to_str().unwrap()]);
    assert!(out.starts_with("unchanged: revision 2"), "{out}");

    // Stopped: the admin commands say it does not run; status is the registry's.
    w.ok(&["stop", &s]);
    let o = w.run(&["policy", "show", &s]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("is not running, or started before the admin API"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(&w.ok(&["status", &s, "--json"])).unwrap();
    assert_eq!(v["admin"], Value::Null, "{v}");
    w.ok(&["destroy", &s, "--force"]);
}

/// What the agent reads when it asks for `url` (the body of the answer, or nothing).
/// `airlock top --interval 0.2` of `w` in a 160×40 tmux session `top`; `then` runs after
/// it quits (the session stays a minute for the screen to be read).
fn top_in_tmux(w: &World, then: &str) -> Tmux {
    let tmux = Tmux {
        socket: w.dir.path().join("tmux.sock"),
    };
    let script = format!(
        "env AIRLOCK_DATA_DIR={} AIRLOCK_CONFIG_DIR={} {} top --interval 0.2; {then}; sleep 60",
        w.data().display(),
        w.config().display(),
        env!("CARGO_BIN_EXE_airlock"),
    );
    let o = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "160",
        "-y",
        "40",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        o.status.success(),
        "tmux: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    tmux
}

/// A world and a running sandbox `s` whose policy asks about unlisted hosts.
fn asking_sandbox(tag: &str) -> (World, String) {
    let w = World::new(tag);
    std::fs::write(
        w.dir.path().join("policy.toml"),
        format!("{POLICY}unlisted = \"ask\"\n"),
    )
    .unwrap();
    let s = w.name("s");
    w.ok(&args(&w.new_args(&s, Some("exec sleep 600"))));
    (w, s)
}

fn agent_get(agent: &mut Shell, url: &str) -> String {
    agent_sh(agent, &format!("curl -s --max-time 10 {url}"))
}

/// `[network] unlisted = "ask"` through the operator's CLI against the real proxy: the
/// agent is refused at once with the item's id, the operator lists, shows and answers it,
/// and the agent's next request gets exactly that answer.
#[test]
fn the_operator_answers_an_agents_ask_from_the_cli() {
    let (w, s) = asking_sandbox("apv");
    let mut agent = Shell::start(&w, &s);

    // The agent asks: refused at once, the item named, with how it gets answered.
    let v: Value = serde_json::from_str(&agent_get(&mut agent, "http://asked.example/")).unwrap();
    assert_eq!(v["error"], "approval-required", "{v}");
    let id = v["approval_id"].as_str().unwrap().to_owned();
    assert!(
        v["next_steps"]
            .as_str()
            .unwrap()
            .contains("airlock approve"),
        "{v}"
    );

    // The inbox, every running sandbox's and this one's.
    let inbox = w.ok(&["approvals"]);
    assert!(
        inbox.contains(&format!("{s}/{id}"))
            && inbox.contains("asked.example:80")
            && inbox.contains("pending"),
        "{inbox}"
    );
    let items: Value = serde_json::from_str(&w.ok(&["approvals", &s, "--json"])).unwrap();
    assert_eq!(items[0]["id"], id.as_str(), "{items}");
    assert_eq!(items[0]["sandbox"], s.as_str(), "{items}");
    let shown = w.ok(&["approvals", "show", &id]);
    let token = shown
        .lines()
        .find_map(|l| l.trim().strip_prefix("token "))
        .unwrap_or_else(|| panic!("no token in {shown}"))
        .to_owned();

    // A scope is required; a stale token is refused (exit 4) and changes nothing.
    assert_eq!(w.run(&["approve", &id]).status.code(), Some(2));
    let o = w.run(&["approve", &id, "--once", "--token", "0000000000000000"]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = w.ok(&[
        "approve",
        &id,
        "--session",
        "--for",
        "10m",
        "--token",
        &token,
    ]);
    assert!(out.contains("approved (session)"), "{out}");
    // The agent's next request passes the policy (nothing upstream here: it fails to
    // resolve instead of being asked).
    let after = refusal(&mut agent, "asked.example");
    assert!(!after.contains("approval"), "{after}");

    // A denial's reason reaches the agent; a second answer is refused.
    let v: Value = serde_json::from_str(&agent_get(&mut agent, "http://other.example/")).unwrap();
    let other = v["approval_id"].as_str().unwrap().to_owned();
    w.ok(&[
        "deny",
        &format!("{s}/{other}"),
        "--reason",
        "not for this task",
    ]);
    let v: Value = serde_json::from_str(&agent_get(&mut agent, "http://other.example/")).unwrap();
    assert_eq!(v["error"], "approval-denied", "{v}");
    assert!(
        v["rule"].as_str().unwrap().ends_with("not for this task"),
        "{v}"
    );
    let o = w.run(&["deny", &other, "--reason", "again"]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        w.run(&["approve", "ffffffff", "--once"]).status.code(),
        Some(3)
    );

    // The agent asks ahead of need with a reason (`airlock-request`, on its PATH): pending
    // (exit 3); the operator reads the reason as the agent's words and approves; the
    // agent's wait returns approved (exit 0).
    let asked = agent_sh(
        &mut agent,
        "airlock-request pkgs.example --reason 'pip needs the index'; echo \"rc=$?\"",
    );
    assert!(
        asked.ends_with("rc=3") && asked.contains("\"state\":\"pending\""),
        "{asked}"
    );
    let inbox = w.ok(&["approvals", &s]);
    assert!(
        inbox.contains("the agent says (untrusted): \"pip needs the index\""),
        "{inbox}"
    );
    let listed: Value = serde_json::from_str(&w.ok(&["approvals", &s, "--json"])).unwrap();
    let ahead = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["host"] == "pkgs.example")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    agent.send("airlock-request pkgs.example --reason again --wait 60; echo \"rc=$?\"");
    std::thread::sleep(Duration::from_secs(2));
    w.ok(&["approve", &ahead, "--session"]);
    let out = agent.finish();
    assert!(
        out.ends_with("rc=0") && out.contains("\"state\":\"approved\""),
        "{out}"
    );

    // The answers are in the sandbox's audit log, with who gave them.
    let log = w.ok(&["logs", &s, "--audit", "--json"]);
    assert_eq!(
        log.matches("\"event\":\"approval-answered\"").count(),
        3,
        "{log}"
    );
    w.ok(&["destroy", &s, "--force"]);
}

/// A stand-in for kubectl (no cluster runs here): the exact `kubectl -n NS exec -i POD -c
/// airlock -- CMD…` the CLI runs becomes `docker exec -i airlock-POD CMD…`, so the relay
/// is the real image's and the protocol the real proxy's. Another namespace is kubectl's
/// NotFound.
const KUBECTL: &str = r#"#!/bin/sh
[ "$1" = -n ] && [ "$3" = exec ] && [ "$4" = -i ] && [ "$6" = -c ] && [ "$7" = airlock ] && [ "$8" = -- ] || {
  echo "kubectl (test double): unexpected arguments: $*" >&2; exit 2; }
ns=$2 pod=$5; shift 8
[ "$ns" = sandboxes ] || { echo "Error from server (NotFound): pods \"$pod\" not found" >&2; exit 1; }
exec env -u DOCKER_HOST docker exec -i "airlock-$pod" "$@"
"#;

/// The operator's commands against a pod (`k8s:NAMESPACE/POD`) through `kubectl exec` of
/// the image's relay (`airlock-entrypoint __admin`): status, an ask answered, the policy and
/// the decisions, with no engine (DOCKER_HOST points nowhere) and no registry; the errors
/// say what kubectl said; the agent running the relay is refused.
#[test]
fn the_operator_reaches_a_pod_through_kubectl_exec() {
    use std::os::unix::fs::PermissionsExt;
    let (w, s) = asking_sandbox("pod");
    let mut agent = Shell::start(&w, &s);
    let kubectl = w.dir.path().join("kubectl");
    std::fs::write(&kubectl, KUBECTL).unwrap();
    std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let nowhere = w.dir.path().join("no-registry");
    let pod_cmd = |a: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"));
        c.args(a)
            .env("AIRLOCK_KUBECTL", &kubectl)
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .env("AIRLOCK_DATA_DIR", &nowhere)
            .env("AIRLOCK_CONFIG_DIR", &nowhere)
            .stdin(Stdio::null());
        c.output().unwrap()
    };
    let pod_ok = |a: &[&str]| {
        let o = pod_cmd(a);
        assert!(
            o.status.success(),
            "airlock {a:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let pod = format!("k8s:sandboxes/{s}");

    let text = pod_ok(&["status", &pod]);
    assert!(
        text.contains(&format!("name        {pod}")) && text.contains("policy      revision 1 ("),
        "{text}"
    );
    let v: Value = serde_json::from_str(&pod_ok(&["status", &pod, "--json"])).unwrap();
    assert_eq!(v["status"]["state"], "ready", "{v}");

    // An ask answered through the pod.
    let v: Value =
        serde_json::from_str(&agent_get(&mut agent, "http://pod-asked.example/")).unwrap();
    let id = v["approval_id"].as_str().unwrap().to_owned();
    let inbox = pod_ok(&["approvals", &pod]);
    assert!(
        inbox.contains(&format!("{pod}/{id}")) && inbox.contains("pod-asked.example:80"),
        "{inbox}"
    );
    let out = pod_ok(&["approve", &format!("{pod}/{id}"), "--once"]);
    assert!(out.contains("approved (once)"), "{out}");

    // The policy and the decisions.
    let shown = pod_ok(&["policy", "show", &pod]);
    assert!(shown.starts_with("revision 1 ("), "{shown}");
    assert!(refusal(&mut agent, "pod.blocked.test").contains("approval-required"));
    let log = pod_ok(&["logs", &pod, "--audit", "--json"]);
    assert!(
        log.contains("\"host\":\"pod.blocked.test\"")
            && log.contains("\"event\":\"approval-answered\""),
        "{log}"
    );

    // Errors: kubectl's own line; a command that is kubectl's job says which.
    let o = pod_cmd(&["status", &format!("k8s:elsewhere/{s}")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains(&format!(
                "the relay said: Error from server (NotFound): pods \"{s}\" not found"
            )),
        "{err}"
    );
    let o = pod_cmd(&["exec", &pod, "--", "ls"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2) && err.contains("kubectl -n sandboxes exec -it"),
        "{err}"
    );
    let o = pod_cmd(&["status", "k8s:Sandboxes"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The agent running the relay itself gets nothing.
    let o = w.run(&["exec", &s, "--", "sh", "-c", "printf 'GET /v1/status HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n' | airlock-entrypoint __admin; echo rc=$?"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.trim_end().ends_with("rc=78") && !out.contains("\"state\""),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    w.ok(&["destroy", &s, "--force"]);
}

/// `airlock top`'s inbox in a real terminal (tmux): the badge counts the agent's ask, `i`
/// lists it with the agent's own reason marked untrusted, `s` approves it for the session
/// and the agent's next request passes; `d` on another denies it with top's reason, which
/// reaches the agent.
#[test]
fn the_operator_answers_from_tops_inbox_in_a_terminal() {
    let (w, s) = asking_sandbox("tin");
    let mut agent = Shell::start(&w, &s);
    let asked = agent_sh(
        &mut agent,
        "airlock-request top-asked.example --reason 'docs for the task'; echo rc=$?",
    );
    assert!(asked.ends_with("rc=3"), "{asked}");

    let tmux = top_in_tmux(&w, "true");
    tmux.wait_for("the badge", |screen| {
        screen.contains("[1 pending: i inbox]")
    });
    tmux.cmd(&["send-keys", "-t", "top", "i"]);
    tmux.wait_for("the inbox", |screen| {
        screen.contains("airlock top > inbox  1 pending")
            && screen.contains("top-asked.example:443")
            && screen.contains("the agent says (untrusted): \"docs for the task\"")
    });
    tmux.cmd(&["send-keys", "-t", "top", "s"]);
    tmux.wait_for("the answer", |screen| {
        screen.contains("approved (session)") && screen.contains("inbox  0 pending")
    });
    let after = agent_sh(
        &mut agent,
        "airlock-request top-asked.example --reason again; echo rc=$?",
    );
    assert!(after.ends_with("rc=0"), "{after}");

    // A denial from the inbox: the agent reads top's reason.
    let v: Value =
        serde_json::from_str(&agent_get(&mut agent, "http://top-denied.example/")).unwrap();
    assert_eq!(v["error"], "approval-required", "{v}");
    tmux.wait_for("the second item", |screen| {
        screen.contains("inbox  1 pending") && screen.contains("top-denied.example:80")
    });
    tmux.cmd(&["send-keys", "-t", "top", "d"]);
    tmux.wait_for("the denial", |screen| screen.contains(": denied"));
    let v: Value =
        serde_json::from_str(&agent_get(&mut agent, "http://top-denied.example/")).unwrap();
    assert_eq!(v["error"], "approval-denied", "{v}");
    assert!(
        v["rule"]
            .as_str()
            .unwrap()
            .ends_with("denied by the operator in airlock top"),
        "{v}"
    );
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    drop(tmux);
    w.ok(&["destroy", &s, "--force"]);
}

/// `approvals --watch --notify CMD`: each new pending item is printed and handed to the
/// operator's command on the host once (asking again is no new item), with the item in the
/// environment only: the agent's reason, shell syntax included, is never run.
#[test]
fn attack_the_notifier_runs_once_per_new_item_and_never_runs_the_agents_words() {
    let (w, s) = asking_sandbox("ntf");
    let mut agent = Shell::start(&w, &s);
    let got = w.dir.path().join("notified");
    let pwned = w.dir.path().join("pwned");
    let notify = format!(
        "printf '%s|%s|%s|%s\\n' \"$AIRLOCK_SANDBOX\" \"$AIRLOCK_HOST\" \"$AIRLOCK_PORT\" \"$AIRLOCK_SAID\" >> {}",
        got.display()
    );
    /// Killed when the test ends, however it ends.
    struct Killed(Option<std::process::Child>);
    impl Drop for Killed {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut watch = Killed(Some(
        w.cmd(&["approvals", "--watch", "--notify", &notify])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_secs(3));
    let reason = format!("$(touch {}) `touch {}`", pwned.display(), pwned.display());
    let asked = agent_sh(
        &mut agent,
        &format!("airlock-request notified.example --reason '{reason}'; echo rc=$?"),
    );
    assert!(asked.ends_with("rc=3"), "{asked}");
    // Asking again is a hit on the same item, not a new one.
    let again = agent_sh(
        &mut agent,
        "airlock-request notified.example --reason again; echo rc=$?",
    );
    assert!(again.ends_with("rc=3"), "{again}");
    let start = Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&got).unwrap_or_default();
        if !text.is_empty() {
            // Give a second notification (there must be none) its chance.
            std::thread::sleep(Duration::from_secs(3));
            break std::fs::read_to_string(&got).unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no notification in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        [format!("{s}|notified.example|443|{reason}")],
        "one line for the one item"
    );
    assert!(!pwned.exists(), "the agent's words ran");
    let mut child = watch.0.take().unwrap();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("notified.example:443"), "{printed}");
    w.ok(&["destroy", &s, "--force"]);
}

/// `approve --all`: every pending item without a note is approved (against its token as it
/// stands), an item carrying a security note (here a name that looks encoded) is left
/// pending and listed, to be approved by its id.
#[test]
fn attack_a_bulk_approve_leaves_an_item_with_a_note_pending() {
    let (w, s) = asking_sandbox("blk");
    let mut agent = Shell::start(&w, &s);
    let encoded = "0123456789abcdef0123456789abcdef0123456789abcdef.bulk.example";
    for host in ["plain.bulk.example", encoded] {
        let v: Value =
            serde_json::from_str(&agent_get(&mut agent, &format!("http://{host}/"))).unwrap();
        assert_eq!(v["error"], "approval-required", "{host}: {v}");
    }
    let out = w.ok(&["approve", "--all", "--sandbox", &s, "--session"]);
    assert!(
        out.contains("1 approved, 1 with a note left pending"),
        "{out}"
    );
    assert!(
        out.contains("left pending: an item with a note is approved by its id"),
        "{out}"
    );
    let items: Value = serde_json::from_str(&w.ok(&["approvals", &s, "--json"])).unwrap();
    let state = |host: &str| {
        items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["host"] == host)
            .map(|i| i["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(
        state("plain.bulk.example").as_deref(),
        Some("approved"),
        "{items}"
    );
    assert_eq!(state(encoded).as_deref(), Some("pending"), "{items}");
    // An id and --all together are a usage error.
    assert_eq!(
        w.run(&["approve", "x", "--all", "--once"]).status.code(),
        Some(2)
    );
    w.ok(&["destroy", &s, "--force"]);
}

/// `approve --always` and `deny --always` are grants: a policy revision in force when the
/// command returns, listed by `policy show` with who made them, kept beside the sandbox's
/// audit log where the agent cannot read them, still in force after the sandbox restarts,
/// and taken back by id.
#[test]
fn attack_an_always_grant_outlives_a_restart_is_the_operators_alone_and_is_revoked_by_id() {
    let (w, s) = asking_sandbox("alw");
    let mut agent = Shell::start(&w, &s);
    let mut ask = |host: &str| -> String {
        let v: Value =
            serde_json::from_str(&agent_get(&mut agent, &format!("http://{host}/"))).unwrap();
        assert_eq!(v["error"], "approval-required", "{v}");
        v["approval_id"].as_str().unwrap().to_owned()
    };
    let granted = ask("granted.example");
    let refused = ask("refused.example");
    // A grant takes no time, and is made one item at a time.
    assert_eq!(
        w.run(&["approve", &granted, "--always", "--for", "1h"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        w.run(&["approve", "--all", "--always"]).status.code(),
        Some(2)
    );
    let out = w.ok(&["approve", &format!("{s}/{granted}"), "--always"]);
    assert!(
        out.contains("approved (always)") && out.contains(&format!("airlock revoke {s}/{granted}")),
        "{out}"
    );
    w.ok(&[
        "deny",
        &format!("{s}/{refused}"),
        "--always",
        "--reason",
        "a paste site",
    ]);
    // A grant is for every session: each check asks from a session of its own.
    let check = |when: &str| {
        let mut agent = Shell::start(&w, &s);
        let shown = w.ok(&["policy", "show", &s]);
        assert!(
            shown.contains("granted.example:80")
                && shown.contains(&format!("approve --always {granted} by uid"))
                && shown.contains(&format!("deny --always {refused} by uid")),
            "{when}: {shown}"
        );
        assert!(
            !refusal(&mut agent, "granted.example").contains("approval"),
            "{when}: the grant lets it through"
        );
        let no = refusal(&mut agent, "refused.example");
        assert!(!no.is_empty() && !no.contains("approval"), "{when}: {no}");
    };
    check("granted");

    // The agent can neither read nor replace the grants (the proxy's, beside the audit log).
    let tried = agent_sh(
        &mut agent,
        "{ cat /var/log/airlock/grants.json; echo '{}' > /var/log/airlock/grants.json; } 2>/dev/null; echo rc=$?",
    );
    assert!(
        !tried.contains(&granted) && tried.starts_with("rc=") && !tried.ends_with("rc=0"),
        "{tried}"
    );

    drop(agent);
    w.ok(&["stop", &s]);
    w.ok(&["start", &s]);
    check("after a restart");
    let mut agent = Shell::start(&w, &s);

    let out = w.ok(&["revoke", &format!("{s}/{granted}")]);
    assert!(out.contains(&format!("grant {granted} revoked")), "{out}");
    assert_eq!(refusal(&mut agent, "granted.example"), "approval-required");
    assert_eq!(
        w.run(&["revoke", &format!("{s}/{granted}")]).status.code(),
        Some(3)
    );
    w.ok(&["destroy", &s, "--force"]);
}

/// `action = "ask"` on a `[[rules]]` rule with the real image: the dry run names the rule,
/// the agent's request it matches is refused at once, nothing dialed, with an item that
/// names the rule and says it is a write (so no bulk approve takes it), and the session's
/// approval by id reaches the agent's own view of it. (The host is a documentation address:
/// nothing is resolved, and no request is sent after the approval.)
#[test]
fn an_ask_rule_puts_the_agents_write_to_the_operator() {
    let w = World::new("ask");
    std::fs::write(
        w.dir.path().join("policy.toml"),
        "[sandbox]\nname = \"clitest\"\nmode = \"enforce\"\n\n[network]\nallow = [\"203.0.113.7\"]\nwritable = [\"203.0.113.7\"]\n\n[[rules]]\nname = \"publish\"\nhost = \"203.0.113.7\"\nmethod = \"POST\"\npath = \"/releases\"\naction = \"ask\"\n",
    )
    .unwrap();
    let s = w.name("s");
    w.ok(&args(&w.new_args(&s, Some("exec sleep 600"))));
    let mut agent = Shell::start(&w, &s);
    let v: Value = serde_json::from_str(&w.ok(&[
        "policy",
        "check",
        &s,
        "http://203.0.113.7/releases",
        "--method",
        "POST",
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        (v["reason"].as_str(), v["rule"].as_str()),
        (Some("approval-required"), Some("publish")),
        "{v}"
    );
    let post = "curl -s --max-time 10 -X POST http://203.0.113.7/releases";
    let refused: Value = serde_json::from_str(&agent_sh(&mut agent, post)).unwrap();
    assert_eq!(refused["error"], "approval-required", "{refused}");
    let id = refused["approval_id"].as_str().unwrap().to_owned();
    let items: Value = serde_json::from_str(&w.ok(&["approvals", &s, "--json"])).unwrap();
    let item = &items[0];
    assert_eq!(
        (item["id"].as_str(), item["rule"].as_str()),
        (Some(id.as_str()), Some("publish")),
        "{items}"
    );
    assert!(
        item["notes"].to_string().contains("asks about writes"),
        "{items}"
    );
    // A bulk approve leaves it pending; its id approves it, for the session that asked.
    let out = w.ok(&["approve", "--all", "--sandbox", &s, "--session"]);
    assert!(
        out.contains("0 approved, 1 with a note left pending"),
        "{out}"
    );
    w.ok(&["approve", &format!("{s}/{id}"), "--session"]);
    let seen = agent_sh(
        &mut agent,
        &format!("curl -s http://airlock.local/v1/ask/{id}"),
    );
    assert!(seen.contains("\"state\":\"approved\""), "{seen}");
    let log = w.ok(&["logs", &s, "--audit", "--json"]);
    let asked: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["host"] == "203.0.113.7")
        .collect();
    assert!(
        !asked.is_empty() && asked.iter().all(|l| l["upstream"].is_null()),
        "the asked request has its line and nothing was dialed: {asked:?}"
    );
    w.ok(&["destroy", &s, "--force"]);
}
