//! Smoke tests of the namespace harness itself, without any airlock process: the fake
//! internet answers, the capture and the log see what happened, Worlds are isolated from each
//! other and clean up after themselves. Root only; never skips.

// Tests may unwrap and panic (clippy.toml); clippy only knows that inside `#[test]` fns, and
// this file's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::IpAddr;
use std::process::Output;
use std::time::{Duration, Instant};

use airlock_tests::fakenet::TXT_ANSWER;
use airlock_tests::topology::{
    ALLOWED_V4, ALLOWED_V6, BLOCKED_V4, DNS_V4, FOREIGN_DNS_V4, METADATA_V4, SANDBOX_MAC,
};
use airlock_tests::{Proto, World};
use serde_json::Value;

fn world() -> World {
    let start = Instant::now();
    let w =
        World::new().expect("build the namespace World (run as root with ip, unshare, tcpdump)");
    eprintln!("World {} set up in {:?}", w.sandbox_ns(), start.elapsed());
    w
}

/// `sh -c script` as root inside the sandbox.
fn sh(world: &World, script: &str) -> Output {
    world
        .sandbox_command("sh".as_ref())
        .args(["-c", script])
        .output()
        .expect("spawn sh in the sandbox")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn curl(world: &World, args: &str) -> String {
    format!(
        "curl -sS --max-time 10 --cacert {} {args}",
        world.ca_pem_path().display()
    )
}

fn json(s: &str) -> Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s:?}"))
}

fn log_of(world: &World, kind: &str) -> Vec<Value> {
    world
        .upstream_log()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == kind)
        .collect()
}

#[test]
fn curl_and_dig_reach_the_fake_internet_and_the_capture_sees_them() {
    let mut w = world();
    w.start_capture().unwrap();
    let echo = json(&ok(&sh(&w, &curl(&w, "https://allowed.test/hello?x=1"))));
    let a = ok(&sh(
        &w,
        "dig +short +tries=1 +time=3 @203.0.113.53 allowed.test A",
    ));
    let aaaa = ok(&sh(
        &w,
        "dig +tcp +short +tries=1 +time=3 @203.0.113.53 allowed.test AAAA",
    ));
    let capture = w.stop_capture().unwrap();

    // What the client saw.
    assert_eq!(echo["tls"], true);
    assert_eq!(echo["sni"], "allowed.test");
    assert_eq!(echo["host"], "allowed.test");
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], "/hello?x=1");
    let server = echo["server"].as_str().unwrap().to_owned();
    assert!(
        server == "203.0.113.10:443" || server == "[2001:db8:113::10]:443",
        "{server}"
    );
    assert_eq!(a.trim(), "203.0.113.10");
    assert_eq!(aaaa.trim(), "2001:db8:113::10");

    // What upstream saw.
    let http = log_of(&w, "http");
    assert_eq!(http.len(), 1, "{http:?}");
    assert_eq!(http[0]["path"], "/hello?x=1");
    assert_eq!(http[0]["sni"], "allowed.test");
    let dns = log_of(&w, "dns");
    assert!(
        dns.iter()
            .any(|d| d["qname"] == "allowed.test" && d["qtype"] == "A" && d["transport"] == "udp")
    );
    assert!(
        dns.iter().any(|d| d["qname"] == "allowed.test"
            && d["qtype"] == "AAAA"
            && d["transport"] == "tcp")
    );

    // What crossed the wire.
    let egress = capture.egress(&w);
    let https_dst = if server.starts_with('[') {
        IpAddr::from(ALLOWED_V6)
    } else {
        IpAddr::from(ALLOWED_V4)
    };
    assert!(
        egress.iter().any(|p| p.proto == Proto::Tcp
            && p.dst == https_dst
            && p.dst_port == Some(443)
            && p.tcp_flags.unwrap().is_syn_only()),
        "no SYN to {https_dst}:443 in {egress:#?}"
    );
    assert!(egress.iter().all(|p| p.src_mac == SANDBOX_MAC));
    assert!(
        egress.iter().any(|p| p.proto == Proto::Udp
            && p.dst == IpAddr::from(DNS_V4)
            && p.dst_port == Some(53))
    );
    let queries = capture.dns_queries();
    let sb = IpAddr::from(w.sandbox_ip_v4());
    for (qname, qtype) in [("allowed.test", "A"), ("allowed.test", "AAAA")] {
        assert!(
            queries
                .iter()
                .any(|(src, n, t)| *src == sb && n == qname && t == qtype),
            "{qname} {qtype} not in {queries:?}"
        );
    }
    // The capture also holds upstream's answers, and the kernel's neighbour discovery is
    // recognisable as such.
    assert!(
        capture
            .packets
            .iter()
            .any(|p| p.src == IpAddr::from(ALLOWED_V4) || p.src == IpAddr::from(ALLOWED_V6))
    );
    assert!(
        capture
            .packets
            .iter()
            .filter(|p| p.is_housekeeping())
            .all(|p| matches!(p.proto, Proto::Arp | Proto::Icmpv6))
    );
}

#[test]
fn two_worlds_at_once_do_not_collide() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(world);
        let b = s.spawn(world);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_ne!(a.sandbox_ns(), b.sandbox_ns());
    assert_ne!(a.upstream_ns(), b.upstream_ns());
    assert_ne!(a.dir(), b.dir());
    std::thread::scope(|s| {
        s.spawn(|| ok(&sh(&a, &curl(&a, "http://allowed.test/from-a"))));
        s.spawn(|| ok(&sh(&b, &curl(&b, "http://allowed.test/from-b"))));
    });
    let paths = |w: &World| {
        log_of(w, "http")
            .iter()
            .map(|l| l["path"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(paths(&a), vec!["/from-a"]);
    assert_eq!(paths(&b), vec!["/from-b"]);
    // Each trusts only its own CA.
    let cross = sh(
        &a,
        &format!(
            "curl -sS --max-time 10 --cacert {} https://allowed.test/",
            b.ca_pem_path().display()
        ),
    );
    assert!(!cross.status.success(), "World a accepted World b's CA");
}

fn netns_list() -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn drop_removes_namespaces_files_and_processes_even_after_a_panic() {
    let w = world();
    let names = [w.sandbox_ns().to_owned(), w.upstream_ns().to_owned()];
    let dir = w.dir().to_path_buf();
    let etc = std::path::Path::new("/etc/netns").join(w.sandbox_ns());
    // A process still running in the sandbox when the World goes away.
    let mut sleeper = w
        .sandbox_command("sleep".as_ref())
        .arg("600")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let list = netns_list();
    assert!(names.iter().all(|n| list.contains(n.as_str())), "{list}");
    assert!(dir.is_dir() && etc.join("resolv.conf").is_file());

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _w = w;
        panic!("a test failing while it owns a World");
    }));
    assert!(result.is_err());

    let list = netns_list();
    assert!(
        names.iter().all(|n| !list.contains(n.as_str())),
        "still listed after drop: {list}"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(!etc.exists(), "{} left behind", etc.display());
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = sleeper.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the sandbox's process survived the World"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
}

#[test]
fn namespaces_left_by_a_dead_process_are_swept() {
    // A pid that certainly exited: our own finished child.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let id = airlock_tests::topology::WorldId { pid: dead, seq: 0 };
    let stale = id.sandbox_ns();
    let out = std::process::Command::new("ip")
        .args(["netns", "add", &stale])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stale_dir = std::path::Path::new("/tmp").join(id.dir_name());
    std::fs::create_dir_all(&stale_dir).unwrap();
    assert!(netns_list().contains(stale.as_str()));

    let _w = world();
    assert!(
        !netns_list().contains(stale.as_str()),
        "stale namespace {stale} survived"
    );
    assert!(!stale_dir.exists());
}

#[test]
fn sandbox_command_is_pid1_with_the_worlds_etc_and_ipv6_up() {
    let w = world();
    let out = ok(&sh(
        &w,
        "echo pid=$$; ls /proc | grep -c '^[0-9]'; cat /etc/resolv.conf; getent passwd agent; \
         getent group airlock-git; cat /proc/sys/net/ipv6/conf/all/disable_ipv6; ip -o addr show dev eth0",
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "pid=1");
    assert!(
        lines[1].parse::<u32>().unwrap() <= 3,
        "own /proc shows only our processes: {out}"
    );
    assert!(out.contains("nameserver 203.0.113.53"));
    let home = w.dir().join("home/agent");
    assert!(
        out.contains(&format!(
            "agent:x:64103:64103:airlock test agent:{}:/bin/bash",
            home.display()
        )),
        "{out}"
    );
    assert!(out.contains("airlock-git:x:64102:"));
    assert!(
        out.lines().any(|l| l == "0"),
        "IPv6 disabled in the sandbox: {out}"
    );
    assert!(out.contains("198.51.100.2/24") && out.contains("2001:db8:100::2/64"));
    assert_eq!(w.users().agent, 64103);
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let meta = std::fs::metadata(&home).unwrap();
    assert_eq!(
        (meta.uid(), meta.permissions().mode() & 0o777),
        (64103, 0o700)
    );
    assert_eq!(
        std::fs::metadata(w.dir()).unwrap().permissions().mode() & 0o777,
        0o755
    );

    // IPv6 egress works in the bare sandbox (so "IPv6 egress fails under airlock" means something).
    let echo = json(&ok(&sh(&w, &curl(&w, "-6 https://v6.test/"))));
    assert_eq!(echo["server"], "[2001:db8:113::10]:443");
    let from = echo["from"].as_str().unwrap();
    assert!(
        from.starts_with(&format!("[{}]:", w.sandbox_ip_v6())),
        "{from}"
    );
}

#[test]
fn fakenet_serves_streams_uploads_dns_and_logs_failures() {
    let mut w = world();
    // /bytes: exact length and the i % 256 pattern.
    let sums = ok(&sh(
        &w,
        &format!(
            "{} -o /tmp/b http://allowed.test/bytes/100000 && wc -c < /tmp/b && od -An -tu1 -j 65790 -N 3 /tmp/b; \
             {} http://allowed.test/bytes/1000?chunked=1 -D - -o /dev/null",
            curl(&w, ""),
            curl(&w, "")
        ),
    ));
    let mut it = sums.lines();
    assert_eq!(it.next().unwrap().trim(), "100000");
    assert_eq!(
        it.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["254", "255", "0"]
    );
    let headers = sums.to_ascii_lowercase();
    assert!(headers.contains("transfer-encoding: chunked"), "{sums}");

    // /upload: length and SHA-256 of what arrived.
    let up = json(&ok(&sh(
        &w,
        &curl(
            &w,
            "--data-binary 'hello airlock' https://allowed.test/upload",
        ),
    )));
    assert_eq!(up["len"], 13);
    assert_eq!(up["sha256"], sha256_hex(b"hello airlock"));

    // /sse: events arrive spread out, each when produced (a lower bound: never flaky).
    let sse = ok(&sh(
        &w,
        &format!(
            "{} -N 'http://allowed.test/sse?n=3&ms=300' | while IFS= read -r l; do \
               case \"$l\" in data:*) echo \"$(date +%s%N) $l\";; esac; done",
            curl(&w, "")
        ),
    ));
    let stamps: Vec<u128> = sse
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(stamps.len(), 3, "{sse}");
    assert!(
        stamps[2] - stamps[0] >= 500_000_000,
        "events were not streamed: {sse}"
    );

    // DNS: NXDOMAIN, TXT for anything, the foreign server answers too, metadata is reachable.
    let dns = ok(&sh(
        &w,
        "dig +tries=1 +time=3 @203.0.113.53 nope.test A | grep -o 'status: [A-Z]*'; \
         dig +short +tries=1 +time=3 @203.0.113.53 secret.exfil.example TXT; \
         dig +short +tries=1 +time=3 @203.0.113.54 rebind.test A; \
         dig +short +tries=1 +time=3 @203.0.113.53 meta.test A",
    ));
    assert_eq!(
        dns.lines().collect::<Vec<_>>(),
        [
            "status: NXDOMAIN".to_owned(),
            format!("\"{TXT_ANSWER}\""),
            "127.0.0.1".to_owned(),
            METADATA_V4.to_string()
        ]
    );
    let meta = json(&ok(&sh(
        &w,
        &curl(&w, "http://169.254.169.254/latest/meta-data/"),
    )));
    assert_eq!(meta["server"], "169.254.169.254:80");
    let foreign = log_of(&w, "dns")
        .into_iter()
        .filter(|d| d["server"] == format!("{FOREIGN_DNS_V4}:53"))
        .count();
    assert_eq!(foreign, 1);

    // TLS clients that reject the certificate are logged with their SNI (a wrong name fails
    // after the handshake, an unknown CA during it); a UDP datagram is logged; a SYN to a
    // closed port is visible on the wire though nothing logs it.
    w.start_capture().unwrap();
    let wrong_name = sh(
        &w,
        &curl(
            &w,
            &format!("--resolve allowed.test:443:{BLOCKED_V4} https://allowed.test/"),
        ),
    );
    assert!(!wrong_name.status.success());
    let unknown_ca = sh(&w, "curl -sS --max-time 10 https://other.test/");
    assert!(!unknown_ca.status.success());
    let udp_out = w
        .sandbox_command("bash".as_ref())
        .args(["-c", "printf quic > /dev/udp/203.0.113.10/443"])
        .output()
        .unwrap();
    ok(&udp_out);
    let closed = sh(&w, "curl -sS --max-time 5 http://203.0.113.10:22/");
    assert!(!closed.status.success());
    let capture = w.stop_capture().unwrap();
    // The server notices a client's hang-up after the client has exited: wait for it.
    let is = |l: &Value, kind: &str, sni: &str, server: &str| {
        l["kind"] == kind && l["sni"] == sni && l["server"] == server
    };
    let log = w
        .wait_upstream_log(Duration::from_secs(5), |log| {
            log.iter()
                .any(|l| is(l, "tls", "allowed.test", "203.0.113.11:443"))
                && log
                    .iter()
                    .any(|l| is(l, "tls_error", "other.test", "203.0.113.12:443"))
        })
        .unwrap();
    assert!(
        !log.iter()
            .any(|l| l["kind"] == "http" && l["server"] == "203.0.113.11:443")
    );
    let udp = log_of(&w, "udp");
    assert_eq!(udp.len(), 1);
    assert_eq!(
        (udp[0]["server"].as_str(), udp[0]["len"].as_u64()),
        (Some("203.0.113.10:443"), Some(4))
    );
    let egress = capture.egress(&w);
    assert!(
        egress
            .iter()
            .any(|p| p.dst_port == Some(22) && p.tcp_flags.is_some_and(|f| f.is_syn_only()))
    );
    assert!(
        egress
            .iter()
            .any(|p| p.proto == Proto::Udp && p.dst_port == Some(443) && p.payload == b"quic")
    );
    assert!(
        capture
            .packets
            .iter()
            .any(|p| p.src_port == Some(22) && p.tcp_flags.is_some_and(|f| f.rst))
    );
}

fn sha256_hex(data: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}
