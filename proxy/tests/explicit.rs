//! End-to-end attacks on the explicit proxy over real sockets (harness in `common`).

// Test helpers outside `#[test]` fns are test code too (clippy.toml only sees `#[test]`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::*;
use airlock_audit_schema::{Event, Record, Verdict};
use airlock_proxy::limits::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn health_answers_with_the_session() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let (_s, r) = request(h.addr, "GET /__airlock/health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        serde_json::json!({"status": "ok", "session": "sess-1", "audit": "ok"})
    );
    h.finish().await;
}

#[tokio::test]
async fn connect_tunnel_relays_and_is_audited_at_close() {
    let (echo, mut peers) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("raw.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo)],
    )
    .await;
    let (mut s, r) = request(
        h.addr,
        "CONNECT Raw.Test.:443 HTTP/1.1\r\nhost: raw.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    s.write_all(b"ping-1234").await.unwrap();
    let mut buf = [0u8; 9];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping-1234");
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    drop(s);
    let upstream_peer = peers.recv().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let l = lines_for(&lines, "raw.test");
    assert_eq!(l.len(), 1, "{lines:?}");
    let l = l[0];
    assert_eq!(l["kind"], "connect");
    assert_eq!(l["decision"], "allow");
    assert_eq!(l["rule"], "raw.test");
    assert_eq!(l["session"], "sess-1");
    assert_eq!(l["port"], 443);
    assert_eq!(l["event"], "close");
    assert_eq!(l["upstream"], format!("{ALLOWED_IP}:443"));
    // The source port the upstream saw is the one we audited.
    assert_eq!(l["upstream_local_port"], upstream_peer.port());
    assert_eq!(l["bytes_up"], 9);
    assert_eq!(l["bytes_down"], 9);
    assert!(l["ts"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn the_agents_brief_says_an_unlisted_host_is_refused() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let (_s, r) = request(
        h.addr,
        "GET http://airlock.local/v1/brief HTTP/1.1\r\nhost: airlock.local\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains("Any other host is refused: `403 blocked-by-policy`"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("airlock-request"), "{}", r.body);
    // Nothing about it is a destination: no line, nothing dialed.
    let lines = h.finish().await;
    assert!(
        lines.iter().all(|l| l["host"] != "airlock.local"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn blocked_host_gets_a_uniform_403() {
    let mut h = Harness::start("enforce", &[("evil.test", &[ALLOWED_IP])], &[]).await;
    // The tunnel is granted only to speak the refusal inside TLS (what curl, pip and git
    // then print), with a leaf for the name asked.
    let r = refused_in_tunnel(&h, "evil.test", 443).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-by-policy")
    );
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    let j = r.json();
    assert_eq!(j["error"], "blocked-by-policy");
    assert_eq!(j["host"], "evil.test");
    assert_eq!(j["port"], 443);
    assert!(j["message"].as_str().unwrap().contains("network.allow"));
    assert_eq!(h.connects.load(Ordering::SeqCst), 0, "nothing was dialed");
    let lines = h.finish().await;
    let l = lines_for(&lines, "evil.test");
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["decision"], "deny");
    assert_eq!(l[0]["reason"], "blocked-by-policy");
}

#[tokio::test]
async fn deny_rule_and_wrong_port() {
    let mut h = Harness::start("enforce", &[("bad.allowed.test", &[ALLOWED_IP])], &[]).await;
    let r = refused_in_tunnel(&h, "bad.allowed.test", 443).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("denied-by-rule")
    );
    let r = refused_in_tunnel(&h, "allowed.test", 22).await;
    assert_eq!(r.header("x-airlock-error").as_deref(), Some("blocked-port"));
    h.finish().await;
}

#[tokio::test]
async fn rebinding_to_loopback_or_metadata_is_refused_before_any_connect() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[
            ("rebind.test", &[ALLOWED_IP, "127.0.0.1"]),
            ("meta.test", &["169.254.169.254"]),
        ],
        &[route(ALLOWED_IP, 443, echo)],
    )
    .await;
    let r = refused_in_tunnel(&h, "rebind.test", 443).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-private-address")
    );
    let (_s, r) = request(
        h.addr,
        "GET http://meta.test/latest/meta-data HTTP/1.1\r\nhost: meta.test\r\n\r\n",
    )
    .await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-metadata-address")
    );
    assert_eq!(
        h.connects.load(Ordering::SeqCst),
        0,
        "no connection attempt to a denied name"
    );
    h.finish().await;
}

#[tokio::test]
async fn ip_literals_in_every_spelling() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start("enforce", &[], &[route(ALLOWED_IP, 443, echo)]).await;
    for (authority, reason) in [
        ("169.254.169.254:80", "blocked-metadata-address"),
        ("0xa9.0xfe.0xa9.0xfe:80", "blocked-metadata-address"),
        ("2852039166:80", "blocked-metadata-address"),
        ("[::ffff:169.254.169.254]:80", "blocked-metadata-address"),
        ("127.1:443", "blocked-private-address"),
        ("[::1]:443", "blocked-private-address"),
        ("198.51.100.1:443", "blocked-ip-literal"),
    ] {
        let (_s, r) = request(h.addr, &format!("CONNECT {authority} HTTP/1.1\r\n\r\n")).await;
        assert_eq!(r.status, 403, "{authority}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some(reason),
            "{authority}"
        );
    }
    // A listed literal is allowed and skips resolution.
    let (_s, r) = request(
        h.addr,
        &format!("CONNECT {ALLOWED_IP}:443 HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(h.connects.load(Ordering::SeqCst), 1);
    h.finish().await;
}

#[tokio::test]
async fn plain_http_is_forwarded_origin_form_without_proxy_headers() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up), route(ALLOWED_IP, 8080, up)],
    )
    .await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(
        b"GET http://allowed.test/v1/x?token=s3cret HTTP/1.1\r\nhost: evil.test\r\nproxy-authorization: Basic Zm9v\r\nproxy-connection: keep-alive\r\nconnection: x-hop\r\nx-hop: 1\r\naccept: */*\r\n\r\n",
    )
    .await
    .unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "hello from upstream");
    assert_eq!(r.header("x-upstream").as_deref(), Some("yes"));
    assert!(
        r.header("keep-alive").is_none(),
        "hop-by-hop response headers are stripped"
    );
    let head = heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(
        head.starts_with("get /v1/x?token=s3cret http/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nhost: allowed.test\r\n"),
        "Host names the checked target: {head}"
    );
    assert!(!head.contains("evil.test"));
    assert!(!head.contains("proxy-"), "{head}");
    assert!(!head.contains("x-hop"), "{head}");
    assert!(head.contains("accept: */*"));

    // Keep-alive: a second request on the same client connection, other port.
    s.write_all(b"POST http://allowed.test:8080/up HTTP/1.1\r\nhost: allowed.test:8080\r\ncontent-length: 4\r\n\r\nabcd")
        .await
        .unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 200);
    let head = heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.contains("\r\nhost: allowed.test:8080\r\n"), "{head}");
    drop(s);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let lines = h.finish().await;
    let l = lines_for(&lines, "allowed.test");
    assert_eq!(l.len(), 2, "{lines:?}");
    assert_eq!(l[0]["kind"], "http");
    assert_eq!(l[0]["method"], "GET");
    assert_eq!(l[0]["path"], "/v1/x", "never the query");
    assert_eq!(l[0]["decision"], "allow");
    assert_eq!(l[0]["bytes_down"], 19);
    assert!(!serde_json::to_string(&lines).unwrap().contains("s3cret"));
    assert_eq!(l[1]["method"], "POST");
    assert_eq!(l[1]["port"], 8080);
    assert_eq!(l[1]["bytes_up"], 4);
}

#[tokio::test]
async fn malformed_input_gets_400_and_an_audit_line() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let (_s, r) = request(h.addr, "CONNECT bad_host!.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-airlock-error").as_deref(), Some("invalid-host"));
    let (_s, r) = request(h.addr, "GET /not-health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("malformed-request")
    );
    let (_s, r) = request(h.addr, "GET https://allowed.test/ HTTP/1.1\r\n\r\n").await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("malformed-request")
    );
    // Garbage that is not HTTP at all: the same uniform denial, audited `parse-error`.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"\x16\x03\x01\x00\x05hello\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    assert!(
        String::from_utf8_lossy(&out).starts_with("HTTP/1.1 400"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert!(String::from_utf8_lossy(&out).contains("x-airlock-error: malformed-request"));
    let lines = h.finish().await;
    let reasons: Vec<_> = lines
        .iter()
        .map(|l| l["reason"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines.iter().all(|l| l["decision"] == "deny"));
    assert_eq!(
        reasons.iter().filter(|r| *r == "malformed-request").count(),
        3,
        "{reasons:?}"
    );
}

#[tokio::test]
async fn oversized_head_is_refused_and_audited() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    let big = format!(
        "GET http://allowed.test/ HTTP/1.1\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let _ = s.write_all(big.as_bytes()).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    assert!(
        String::from_utf8_lossy(&out).starts_with("HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert!(String::from_utf8_lossy(&out).contains("x-airlock-error: request-too-large"));
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["reason"], "request-too-large");
}

#[tokio::test]
async fn resolve_and_connect_failures_are_502() {
    let mut h = Harness::start("enforce", &[("gone.test", &["198.51.100.99"])], &[]).await;
    let (_s, r) = request(h.addr, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 502);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("resolve-failed")
    );
    let (_s, r) = request(h.addr, "CONNECT gone.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 502);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("upstream-unreachable")
    );
    let lines = h.finish().await;
    assert_eq!(lines.len(), 2);
}

#[tokio::test]
async fn report_mode_passes_policy_denials_but_never_hard_denies() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start(
        "report",
        &[
            ("other.test", &[ALLOWED_IP]),
            ("rebind.test", &["10.0.0.1"]),
        ],
        &[route(ALLOWED_IP, 443, echo)],
    )
    .await;
    let (s, r) = request(h.addr, "CONNECT other.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200, "report mode lets a policy denial through");
    drop(s);
    let r = refused_in_tunnel(&h, "rebind.test", 443).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-private-address")
    );
    let (_s, r) = request(h.addr, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n").await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-metadata-address")
    );
    let (_s, r) = request(h.addr, "CONNECT 198.51.100.1:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-ip-literal")
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let l = lines_for(&lines, "other.test");
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["decision"], "report");
    assert_eq!(l[0]["reason"], "blocked-by-policy");
}

#[tokio::test]
async fn shutdown_cuts_open_tunnels_after_the_grace_and_audits_them() {
    let (echo, _) = echo_server().await;
    let limits = Limits {
        shutdown_grace: Duration::from_millis(100),
        ..Limits::default()
    };
    let mut h = Harness::start_with(
        "enforce",
        &[("raw.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo)],
        limits,
    )
    .await;
    let (mut s, r) = request(h.addr, "CONNECT raw.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    s.write_all(b"abc").await.unwrap();
    let mut b = [0u8; 3];
    s.read_exact(&mut b).await.unwrap();
    let t0 = std::time::Instant::now();
    let lines = h.finish().await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    let l = lines_for(&lines, "raw.test");
    assert_eq!(l.len(), 1, "{lines:?}");
    assert_eq!(l[0]["event"], "close-shutdown");
    assert_eq!(l[0]["bytes_up"], 3);
    // And the listener is gone.
    assert!(TcpStream::connect(h.addr).await.is_err());
}

#[tokio::test]
async fn slowloris_head_is_cut_and_audited() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut h = Harness::start_with("enforce", &[], &[], limits).await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nx-a: ")
        .await
        .unwrap();
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "header-timeout");
}

/// Slowloris after an honest request on the same keep-alive connection: the second head
/// dribbles and never ends; it is cut at the deadline and audited `header-timeout` like a
/// first one (it was not: only a connection's first head counted), and never reaches the
/// upstream.
#[tokio::test]
async fn slowloris_on_a_later_request_of_a_keep_alive_connection_is_cut_and_audited() {
    let (up, mut heads) = http_server().await;
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let mut h = Harness::start_with(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        limits,
    )
    .await;
    let (mut s, r) = request(
        h.addr,
        "GET http://allowed.test/first HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(heads.recv().await.unwrap().contains("/first"));
    s.write_all(b"GET http://allowed.test/slow HTTP/1.1\r\nx-a: ")
        .await
        .unwrap();
    let mut out = Vec::new();
    let cut = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(cut.is_ok(), "the dribbling connection was never cut");
    assert!(
        heads.try_recv().is_err(),
        "the dribbled head reached the upstream"
    );
    let lines = h.finish().await;
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["event"] == "header-timeout")
            .count(),
        1,
        "{lines:?}"
    );
}

#[tokio::test]
async fn per_client_connection_cap() {
    let limits = Limits {
        max_per_client: 2,
        ..Limits::default()
    };
    let mut h = Harness::start_with("enforce", &[], &[], limits).await;
    let _a = TcpStream::connect(h.addr).await.unwrap();
    let _b = TcpStream::connect(h.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut c = TcpStream::connect(h.addr).await.unwrap();
    let r = read_resp(&mut c).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("too-many-connections")
    );
    drop((_a, _b));
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["reason"], "too-many-connections");
}

#[tokio::test]
async fn overlong_request_target_is_refused() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let path = "a".repeat(20 * 1024);
    let (_s, r) = request(
        h.addr,
        &format!("GET http://allowed.test/{path} HTTP/1.1\r\nhost: allowed.test\r\n\r\n"),
    )
    .await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("request-too-large")
    );
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["reason"], "request-too-large");
}

/// A tiny deterministic generator (xorshift) so the garbage is reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[tokio::test]
async fn garbage_never_takes_the_proxy_down() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let mut h =
        Harness::start_with("enforce", &[("allowed.test", &[ALLOWED_IP])], &[], limits).await;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let seeds: [&[u8]; 6] = [
        b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n",
        b"GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
        b"GET /__airlock/health HTTP/1.1\r\n\r\n",
        b"POST http://allowed.test/ HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\nzz\r\n",
        b"CONNECT [::ffff:127.0.0.1]:443 HTTP/1.0\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ];
    let mut tasks = Vec::new();
    for i in 0..200 {
        let mut input = seeds[i % seeds.len()].to_vec();
        // Mutate: flip, truncate, or splice random bytes.
        for _ in 0..(rng.next() % 6) {
            let pos = usize::try_from(rng.next()).unwrap() % input.len().max(1);
            match rng.next() % 3 {
                0 => input[pos] ^= u8::try_from(rng.next() % 255 + 1).unwrap(),
                1 => input.truncate(pos),
                _ => input.insert(pos, u8::try_from(rng.next() % 256).unwrap()),
            }
            if input.is_empty() {
                input.push(b'G');
            }
        }
        let addr = h.addr;
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(&input).await;
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_s, r) = request(h.addr, "GET /__airlock/health HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200, "still serving after 200 garbage connections");
    let lines = h.finish().await;
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| l["session"] == "sess-1"));
}

#[tokio::test]
async fn one_slowloris_client_does_not_starve_the_others() {
    let (up, _heads) = http_server().await;
    let limits = Limits {
        header_read_timeout: Duration::from_secs(3),
        ..Limits::default()
    };
    let mut h = Harness::start_with(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        limits,
    )
    .await;
    // The slow client dribbles a head, one byte every 50 ms: it would take 10 s, longer
    // than the header timeout, so it is still dribbling while the others are served.
    let addr = h.addr;
    let slow = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET http://allowed.test/ HTTP/1.1\r\nx-slow: {}",
            "a".repeat(200)
        );
        for b in head.bytes() {
            if s.write_all(&[b]).await.is_err() {
                return true; // cut
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    // 500 concurrent clients, as the issue asks.
    let mut tasks = Vec::new();
    for _ in 0..500 {
        tasks.push(tokio::spawn(async move {
            let (_s, r) = request(
                addr,
                "GET http://allowed.test/x HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
            )
            .await;
            r.status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert!(
        !slow.is_finished(),
        "all 500 were served while the slow one was still dribbling (not cut yet)"
    );
    assert!(
        slow.await.unwrap(),
        "the slowloris client is cut at the header timeout"
    );
    let lines = h.finish().await;
    assert_eq!(
        lines.iter().filter(|l| l["decision"] == "allow").count(),
        500
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["event"] == "header-timeout")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_stalled_upstream_response_is_closed_by_the_idle_timeout() {
    // Upstream sends a head promising 100 bytes, sends 5, then stalls forever.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhello")
                    .await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let mut h = Harness::start_with(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        limits,
    )
    .await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(String::from_utf8_lossy(&out).ends_with("hello"));
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["bytes_down"], 5);
}

#[tokio::test]
async fn decisions_pending_at_shutdown_are_still_audited() {
    let limits = Limits {
        shutdown_grace: Duration::from_millis(100),
        ..Limits::default()
    };
    let mut h = Harness::start_with("enforce", &[], &[], limits).await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"CONNECT hang.test:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut s2 = TcpStream::connect(h.addr).await.unwrap();
    s2.write_all(b"GET http://hang.test/ HTTP/1.1\r\nhost: hang.test\r\n\r\n")
        .await
        .unwrap();
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut q = hickory_proto::op::Message::new(
        0,
        hickory_proto::op::MessageType::Query,
        hickory_proto::op::OpCode::Query,
    );
    q.add_query(hickory_proto::op::Query::query(
        hickory_proto::rr::Name::from_ascii("hang.test.").unwrap(),
        hickory_proto::rr::RecordType::A,
    ));
    udp.send_to(&q.to_vec().unwrap(), h.dns).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lines = h.finish().await;
    let hang = lines_for(&lines, "hang.test");
    assert_eq!(hang.len(), 3, "{lines:?}");
    let kinds: Vec<_> = hang.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"connect") && kinds.contains(&"http") && kinds.contains(&"dns"));
    assert!(hang.iter().all(|l| l["reason"] == "resolve-failed"));
}

#[tokio::test]
async fn audit_names_the_uid_of_the_client_process() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    // A process running as `nobody` asks for a blocked host, then speaks plain HTTP in the
    // tunnel granted to carry the refusal: it reads the refusal as plain HTTP.
    let raw = "CONNECT evil.test:443 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nhost: evil.test\r\n\r\n";
    let answer = as_nobody(h.addr, raw).await;
    let out = &answer;
    let (granted, refusal) = answer.split_once("\r\n\r\n").unwrap();
    assert!(granted.starts_with("HTTP/1.1 200"), "{out:?}");
    assert!(refusal.starts_with("HTTP/1.1 403"), "{out:?}");
    assert!(
        refusal.contains("x-airlock-error: blocked-by-policy"),
        "{out:?}"
    );
    assert!(refusal.contains("network.allow"), "the hint: {out:?}");
    // And one from us.
    let r = refused_in_tunnel(&h, "evil.test", 443).await;
    assert_eq!(r.status, 403);
    let lines = h.finish().await;
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["uid"], 65534);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    assert_eq!(lines[1]["uid"], me);
}

/// The agent sends a request and hangs up before the upstream answers, hoping the request
/// leaves no trace (hyper drops an in-flight request when its client goes). It still gets
/// its audit line: what was decided, where it went, `event: client-gone`.
#[tokio::test]
async fn a_request_abandoned_before_its_answer_is_still_audited() {
    // An upstream that reads the request and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut s, _) = silent.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        got_tx
            .send(String::from_utf8_lossy(&buf[..n]).into_owned())
            .unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    });
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, silent_addr)],
    )
    .await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"GET http://allowed.test/vanishing HTTP/1.1\r\nhost: allowed.test\r\n\r\n")
        .await
        .unwrap();
    let sent = got.recv().await.unwrap();
    assert!(sent.starts_with("GET /vanishing "), "{sent}");
    drop(s); // the agent hangs up while the proxy waits for the answer
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lines = h.finish().await;
    let l = lines_for(&lines, "allowed.test");
    assert_eq!(l.len(), 1, "exactly one line for the request: {lines:#?}");
    // Read through the log's schema, as the CLI and other consumers do.
    let r: Record = serde_json::from_value(l[0].clone()).unwrap();
    assert_eq!(r.path.as_deref(), Some("/vanishing"));
    assert_eq!(r.decision, Verdict::Allow);
    assert_eq!(r.event, Some(Event::ClientGone));
    assert_eq!(
        r.upstream,
        Some(format!("{ALLOWED_IP}:80").parse().unwrap())
    );
    assert!(r.status.is_none(), "no answer was read: {r:?}");
}

/// Issue 13 item 4: the agent asks for an allowed host and hangs up while the proxy is still
/// resolving it. Nothing went upstream, so the line must not say `allow`: it says
/// `abandoned` (with `event: client-gone`). (hyper keeps a `CONNECT` whose client left until
/// the proxy answers it, so a tunnel's line is its real outcome, here the resolve failing at
/// shutdown.)
#[tokio::test]
async fn a_request_abandoned_before_it_was_forwarded_is_not_recorded_as_allowed() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let mut plain = TcpStream::connect(h.addr).await.unwrap();
    plain
        .write_all(b"GET http://hang.test/never-sent HTTP/1.1\r\nhost: hang.test\r\n\r\n")
        .await
        .unwrap();
    // It waits on the resolver (hang.test never resolves) when its client leaves.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while h.lookups.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy never resolved"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(plain);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = h.finish().await;
    let hang = lines_for(&lines, "hang.test");
    assert_eq!(hang.len(), 1, "one line for the request: {lines:#?}");
    let l = hang[0];
    assert_eq!(l["path"], "/never-sent");
    assert_eq!(l["decision"], "abandoned", "{l}");
    assert_eq!(l["event"], "client-gone", "{l}");
    assert!(l["upstream"].is_null() && l["status"].is_null(), "{l}");
    assert_eq!(
        l["rule"], "hang.test",
        "the rule that allowed it is kept: {l}"
    );
}

/// The agent starts a chunked upload and hangs up in the middle (with a FIN, and with a
/// reset). The upstream must see a request that never ends, never the last chunk: a
/// truncated body presented as complete would commit what the agent never finished.
#[tokio::test]
async fn an_upload_the_agent_abandons_never_reaches_upstream_as_complete() {
    for reset in [false, true] {
        let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up_addr = up.local_addr().unwrap();
        let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let (mut s, _) = up.accept().await.unwrap();
            let mut all = Vec::new();
            let mut buf = vec![0u8; 65536];
            let mut continued = false;
            // Everything the proxy sends until it closes (or 3 s of silence).
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await
            {
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n]);
                if !continued && all.windows(4).any(|w| w == b"\r\n\r\n") {
                    continued = true;
                    s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.unwrap();
                }
            }
            got_tx.send(all).unwrap();
        });
        let mut h = Harness::start(
            "enforce",
            &[("allowed.test", &[ALLOWED_IP])],
            &[route(ALLOWED_IP, 80, up_addr)],
        )
        .await;
        let mut s = TcpStream::connect(h.addr).await.unwrap();
        s.write_all(
            b"PUT http://allowed.test/upload HTTP/1.1\r\nhost: allowed.test\r\nexpect: 100-continue\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
        let chunk = vec![b'a'; 16 * 1024];
        for _ in 0..8 {
            s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await
                .unwrap();
            s.write_all(&chunk).await.unwrap();
            s.write_all(b"\r\n").await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if reset {
            // SO_LINGER 0: close sends a reset.
            let zero = nix::libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Linger, &zero).unwrap();
        }
        drop(s);
        let sent = got.recv().await.unwrap();
        let text = String::from_utf8_lossy(&sent);
        assert!(
            text.starts_with("PUT /upload "),
            "reset={reset}: {}",
            &text[..80.min(text.len())]
        );
        assert!(
            !text.ends_with("0\r\n\r\n"),
            "reset={reset}: the upstream saw the abandoned upload end cleanly ({} bytes)",
            sent.len()
        );
        h.finish().await;
    }
}

/// Whether the audit file at `path` has a line with `field == value` and `event == event`.
fn logged(path: &std::path::Path, field: &str, value: &str, event: Option<&str>) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|l| l[field] == value && l["event"].as_str() == event)
}

/// Write before answering: the upstream looks at the audit file the moment a request (plain
/// HTTP) or a tunnel (CONNECT) reaches it, and its line is already there; the agent looks
/// at it the moment it reads a refusal, and the refusal's line is already there. Nothing
/// waits for a flush (the proxy is still running when each check is made).
#[tokio::test]
async fn every_record_is_in_the_file_before_the_upstream_or_the_agent_sees_anything() {
    let dir = tempfile::tempdir().unwrap();
    let seen_path = dir.path().join("audit-path");
    // An upstream that reports, per request, whether its open line was in the file.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, bool)>();
    let seen = seen_path.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let audit = std::path::PathBuf::from(std::fs::read_to_string(&seen).unwrap());
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let (tag, found) = if head.starts_with("GET ") {
                    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                    let found = logged(&audit, "path", &path, Some("open"));
                    (path, found)
                } else {
                    // Tunnelled bytes: the CONNECT's open line.
                    let found = logged(&audit, "method", "CONNECT", Some("open"));
                    ("tunnel".to_owned(), found)
                };
                let _ = tx.send((tag, found));
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            });
        }
    });
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up), route(ALLOWED_IP, 443, up)],
    )
    .await;
    std::fs::write(&seen_path, h.audit_path.to_str().unwrap()).unwrap();

    for i in 0..20 {
        let (_s, r) = request(
            h.addr,
            &format!("GET http://allowed.test/p{i} HTTP/1.1\r\nhost: allowed.test\r\n\r\n"),
        )
        .await;
        assert_eq!(r.status, 200);
        let (tag, found) = rx.recv().await.unwrap();
        assert_eq!(tag, format!("/p{i}"));
        assert!(found, "/p{i} reached the upstream before its audit line");
    }

    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 200);
    s.write_all(b"not tls, just bytes").await.unwrap();
    let (tag, found) = rx.recv().await.unwrap();
    assert_eq!(tag, "tunnel");
    assert!(
        found,
        "tunnelled bytes reached the upstream before the CONNECT's line"
    );
    drop(s);

    for i in 0..20 {
        let (_s, r) = request(
            h.addr,
            &format!("GET http://evil.test/d{i} HTTP/1.1\r\nhost: evil.test\r\n\r\n"),
        )
        .await;
        assert_eq!(r.status, 403);
        assert!(
            logged(&h.audit_path, "path", &format!("/d{i}"), None),
            "the agent saw the refusal of /d{i} before its audit line was written"
        );
    }
    h.finish().await;
}

/// The agent dresses its request as if a proxy on the way had vouched for it (its "real"
/// address, another host, airlock's own headers); the upstream sees none of it.
#[tokio::test]
async fn forwarding_claims_from_the_agent_never_reach_the_upstream() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let (_s, r) = request(
        h.addr,
        "GET http://allowed.test/claims HTTP/1.1\r\nhost: allowed.test\r\n\
         x-forwarded-for: 10.0.0.1\r\nx-forwarded-host: admin.internal\r\n\
         x-forwarded-proto: https\r\nforwarded: for=10.0.0.1;host=admin.internal\r\n\
         via: 1.1 airlock\r\nx-real-ip: 127.0.0.1\r\nx-airlock-credential: anthropic\r\n\
         x-kept: yes\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let head = heads.try_recv().unwrap().to_ascii_lowercase();
    assert!(head.contains("x-kept: yes"), "{head}");
    for claim in [
        "x-forwarded",
        "forwarded:",
        "via:",
        "x-real-ip",
        "x-airlock",
        "10.0.0.1",
        "admin.internal",
    ] {
        assert!(
            !head.contains(claim),
            "{claim} reached the upstream:\n{head}"
        );
    }
    h.finish().await;
}

/// Secrets the proxy was never told about: the agent sends a key pair from the workspace's
/// `.env` in a body, a GitHub token in the URL (plain and percent-encoded) and in a header,
/// to an allowed host that is none of their providers': each is refused `foreign-secret`
/// with the detector named, and nothing reaches the upstream. AWS's documented example
/// pair passes.
#[tokio::test]
async fn a_known_secret_on_its_way_to_a_foreign_host_is_refused() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let env = "AWS_ACCESS_KEY_ID=AKIA2Z3Y4X5W6V7U2T3S\nAWS_SECRET_ACCESS_KEY=abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB\n";
    let gh = format!("ghp_{}", "a1B2".repeat(9));
    let gh_encoded: String = gh.bytes().map(|b| format!("%{b:02X}")).collect();
    let attempts = [
        format!(
            "POST http://allowed.test/paste HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: {}\r\n\r\n{env}",
            env.len()
        ),
        format!("GET http://allowed.test/q?t={gh} HTTP/1.1\r\nhost: allowed.test\r\n\r\n"),
        format!("GET http://allowed.test/q?t={gh_encoded} HTTP/1.1\r\nhost: allowed.test\r\n\r\n"),
        format!(
            "GET http://allowed.test/h HTTP/1.1\r\nhost: allowed.test\r\nx-debug: {gh}\r\n\r\n"
        ),
    ];
    for raw in &attempts {
        let (_s, r) = request(h.addr, raw).await;
        assert_eq!(r.status, 403, "{raw}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("foreign-secret")
        );
    }
    assert!(heads.try_recv().is_err(), "a secret reached the upstream");
    let docs = "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n";
    let (_s, r) = request(
        h.addr,
        &format!(
            "POST http://allowed.test/docs HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: {}\r\n\r\n{docs}",
            docs.len()
        ),
    )
    .await;
    assert_eq!(r.status, 200, "the documented example passes");
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .collect();
    assert_eq!(refused.len(), attempts.len(), "{lines:?}");
    assert!(
        refused[0]["rule"] == "secret detector aws-access-key",
        "{:?}",
        refused[0]
    );
    assert!(
        refused[1]["rule"] == "secret detector github-token",
        "{:?}",
        refused[1]
    );
    let text = serde_json::to_string(&lines).unwrap();
    assert!(
        !text.contains(&gh) && !text.contains("abcdEFGH1234"),
        "a value reached the audit log"
    );
}

/// On an LLM API host the agent legitimately sends file contents, secrets included: a
/// 200 KiB prompt carrying a GitHub token and a private key reaches the provider with both
/// overwritten (same length, so the framing holds) and the request is audited
/// `secret-redacted`.
#[tokio::test]
async fn a_known_secret_in_a_prompt_reaches_the_llm_api_redacted() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 65536];
        let body_start = loop {
            let n = s.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..body_start]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        while buf.len() < body_start + len {
            let n = s.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
        }
        let _ = tx.send(buf[body_start..].to_vec());
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
    });
    let mut h = Harness::start(
        "enforce",
        &[("api.anthropic.com", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let gh = format!("ghp_{}", "a1B2".repeat(9));
    let pem = "-----BEGIN RSA PRIVATE KEY-----";
    let body = format!(
        "{{\"messages\":[{{\"role\":\"user\",\"content\":\"{} TOKEN={gh} {pem} {}\"}}]}}",
        "a".repeat(100_000),
        "b".repeat(100_000)
    );
    let (_s, r) = request(
        h.addr,
        &format!(
            "POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nhost: api.anthropic.com\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let got = String::from_utf8(rx.recv().await.unwrap()).unwrap();
    assert_eq!(got.len(), body.len(), "same length");
    assert!(
        !got.contains(&gh) && !got.contains(pem),
        "a secret reached the provider"
    );
    assert!(got.contains("TOKEN=*****"), "redacted in place");
    let lines = h.finish().await;
    let l = lines_for(&lines, "api.anthropic.com");
    assert_eq!(l[0]["event"], "secret-redacted", "{l:?}");
    assert_eq!(l[0]["decision"], "allow");
}

/// A secret in a streamed upload (chunked, past what is read whole), split across chunks
/// sent with pauses between them, to a host that is not its provider's: the upload is cut
/// before any byte of the secret is sent, and refused `foreign-secret`.
#[tokio::test]
async fn a_known_secret_split_across_chunks_of_a_streamed_upload_never_leaves() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut all = Vec::new();
                let mut chunk = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    all.extend_from_slice(&chunk[..n]);
                }
                let _ = tx.send(all);
            });
        }
    });
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let gh = format!("ghp_{}", "a1B2".repeat(9));
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(
        b"POST http://allowed.test/upload HTTP/1.1\r\nhost: allowed.test\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let filler = format!("{}\nTOKEN=", "f".repeat(70_000));
    let (a, b) = gh.split_at(10);
    // Once the secret is seen the proxy answers and may close: later writes can fail.
    for part in [filler.as_str(), a, b, "tail"] {
        let _ = s
            .write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("the proxy answers at once");
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("foreign-secret")
    );
    drop(s);
    let lines = h.finish().await;
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap_or_default();
    let got = String::from_utf8_lossy(&got);
    assert!(
        !got.contains(a),
        "a piece of the secret reached the upstream"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "foreign-secret" && l["rule"] == "secret detector github-token"),
        "{lines:?}"
    );
}

/// Attribution: every line names the sandbox and the container beside the session, so the
/// operator of many sandboxes knows whose decision it was.
#[tokio::test]
async fn every_line_names_its_sandbox_and_container() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let (_s, r) = request(
        h.addr,
        "GET http://evil.test/ HTTP/1.1\r\nhost: evil.test\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 403);
    let lines = h.finish().await;
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(l["session"], "sess-1", "{l}");
        assert_eq!(l["sandbox"], "t", "{l}");
        assert_eq!(l["container"], "c0ffee00", "{l}");
    }
}

/// A streamed (chunked) prompt to an LLM API host with a secret split across two chunks:
/// the provider receives it overwritten, every byte of it, and the request is served.
#[tokio::test]
async fn a_known_secret_split_across_chunks_to_the_llm_api_is_redacted() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut all = Vec::new();
        let mut chunk = vec![0u8; 65536];
        while !all.ends_with(b"0\r\n\r\n") {
            let n = s.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&chunk[..n]);
        }
        let _ = tx.send(all);
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
    });
    let mut h = Harness::start(
        "enforce",
        &[("api.anthropic.com", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let gh = format!("ghp_{}", "a1B2".repeat(9));
    let (a, b) = gh.split_at(12);
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(
        b"POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nhost: api.anthropic.com\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let head = format!("{}\nTOKEN=", "c".repeat(5_000));
    for part in [head.as_str(), a, b, " and the rest"] {
        s.write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    s.write_all(b"0\r\n\r\n").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("answered");
    assert_eq!(r.status, 200);
    let got = String::from_utf8_lossy(&rx.recv().await.unwrap()).into_owned();
    assert!(
        !got.contains(a) && !got.contains(b),
        "a piece of the secret reached the provider"
    );
    assert!(
        got.contains("TOKEN=") && got.contains(" and the rest"),
        "{got:.200}"
    );
    drop(s);
    h.finish().await;
}

/// Issue 13 item 4: the agent opens `CONNECT` tunnels to allowed hosts and hangs up before a
/// byte of its went upstream: tunnelled (passthrough) with nothing sent, intercepted with
/// nothing sent, and intercepted after a finished TLS handshake but no request. The upstream
/// saw no byte, so no tunnel's final line may say `allow`: each says `abandoned` (the rule
/// that allowed it kept), with no bytes counted upstream.
#[tokio::test]
async fn a_tunnel_the_agent_leaves_before_a_byte_went_upstream_is_abandoned() {
    let (up, got) = recorder().await;
    let mut h = Harness::start(
        "enforce",
        &[("raw.test", &[ALLOWED_IP]), ("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
    )
    .await;
    for target in ["raw.test:443", "allowed.test:443"] {
        let (s, r) = request(
            h.addr,
            &format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n"),
        )
        .await;
        assert_eq!(r.status, 200, "{target}");
        drop(s); // gone before saying anything inside the tunnel
    }
    let (s, r) = request(
        h.addr,
        "CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let tls = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(
            rustls::pki_types::ServerName::try_from("allowed.test").unwrap(),
            s,
        )
        .await
        .expect("the handshake with the proxy's leaf");
    drop(tls); // gone after the handshake, before any request
    // Gone in the middle of the handshake: its ClientHello sent, the proxy's answer read,
    // never finished. The client left; the proxy refused nothing.
    let (mut s, r) = request(
        h.addr,
        "CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let mut conn = rustls::ClientConnection::new(
        h.trusting_client(),
        rustls::pki_types::ServerName::try_from("allowed.test").unwrap(),
    )
    .unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    s.write_all(&hello).await.unwrap();
    let mut answer = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut answer))
        .await
        .expect("the proxy answers the hello")
        .unwrap();
    assert!(n > 0 && answer[0] == 0x16, "a TLS handshake record");
    drop(s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = h.finish().await;
    assert!(
        got.lock().unwrap().is_empty(),
        "the upstream saw bytes: the test is wrong"
    );
    let tunnels: Vec<_> = lines.iter().filter(|l| l["kind"] == "connect").collect();
    assert_eq!(tunnels.len(), 4, "one final line per tunnel: {lines:#?}");
    for l in tunnels {
        assert_eq!(l["decision"], "abandoned", "{l}");
        assert!(l["reason"].is_null(), "nothing was refused: {l}");
        assert!(l["rule"].is_string(), "the allowing rule is kept: {l}");
    }
    // The tunnelled one counts what crossed it (nothing); an intercepted one counts the
    // client's side of its TLS.
    let raw = lines_for(&lines, "raw.test");
    assert_eq!(raw[0]["bytes_up"], 0, "{:?}", raw[0]);
}

/// The other side of the line above: a client that does not trust the proxy's leaf says so
/// with an alert and leaves; that is a failed TLS (`deny`, `client-tls-failed`), not a
/// client that merely went away.
#[tokio::test]
async fn a_client_that_refuses_the_leaf_is_recorded_as_a_failed_handshake() {
    let (up, got) = recorder().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
    )
    .await;
    let (s, r) = request(
        h.addr,
        "CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let untrusting = client_with_roots(rustls::RootCertStore::empty());
    let refused = tokio_rustls::TlsConnector::from(untrusting)
        .connect(
            rustls::pki_types::ServerName::try_from("allowed.test").unwrap(),
            s,
        )
        .await;
    assert!(refused.is_err(), "a client without the CA refuses the leaf");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = h.finish().await;
    assert!(got.lock().unwrap().is_empty(), "nothing went upstream");
    let tunnel: Vec<_> = lines.iter().filter(|l| l["kind"] == "connect").collect();
    assert_eq!(tunnel.len(), 1, "{lines:#?}");
    assert_eq!(tunnel[0]["decision"], "deny", "{}", tunnel[0]);
    assert_eq!(tunnel[0]["reason"], "client-tls-failed", "{}", tunnel[0]);
}
