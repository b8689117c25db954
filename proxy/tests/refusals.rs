//! Every refusal of a broken request head is the uniform denial (JSON body,
//! `x-airlock-error`) with exactly one `parse-error` audit line per connection, on the
//! explicit port, the transparent listener's plain HTTP and inside intercepted TLS; and the
//! proxy keeps serving. (hyper's own bare `400`/`431` answers never reach the agent.) A
//! broken policy is a refused start with one line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The broken heads: (name, bytes, status, reason).
fn attacks() -> Vec<(&'static str, Vec<u8>, u16, &'static str)> {
    let big = format!(
        "GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let mut many = b"GET http://allowed.test/ HTTP/1.1\r\n".to_vec();
    for i in 0..150 {
        many.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    vec![
        ("garbage line", b"\x16\x03\x01\x00\x05hello\r\n\r\n".to_vec(), 400, "malformed-request"),
        ("spaces", b"GET  http://allowed.test/  HTTP/1.1\r\n\r\n".to_vec(), 400, "malformed-request"),
        ("version", b"GET http://allowed.test/ HTTP/9.9\r\n\r\n".to_vec(), 400, "malformed-request"),
        (
            "NUL in a header name",
            b"GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nx-a\0b: 1\r\n\r\n".to_vec(),
            400,
            "malformed-request",
        ),
        (
            "bare LF",
            b"GET http://allowed.test/ HTTP/1.1\nhost: allowed.test\n\n".to_vec(),
            400,
            "malformed-request",
        ),
        (
            "bare LF in one line",
            b"GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\nx-smuggled: 1\r\n\r\n".to_vec(),
            400,
            "malformed-request",
        ),
        (
            "bare CR",
            b"GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\rx-smuggled: 1\r\n\r\n".to_vec(),
            400,
            "malformed-request",
        ),
        (
            "obs-fold",
            b"GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nx-a: 1\r\n folded\r\n\r\n"
                .to_vec(),
            400,
            "malformed-request",
        ),
        (
            "content-length and transfer-encoding",
            b"POST http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_vec(),
            400,
            "malformed-request",
        ),
        (
            "two content-lengths",
            b"POST http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab"
                .to_vec(),
            400,
            "malformed-request",
        ),
        ("head over the limit", big.into_bytes(), 431, "request-too-large"),
        ("too many headers", many, 431, "request-too-large"),
    ]
}

/// The denial in `out` (a whole response followed by the close).
fn check_denial(name: &str, out: &[u8], status: u16, reason: &str) {
    let text = String::from_utf8_lossy(out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(
        head.starts_with(&format!("HTTP/1.1 {status} ")),
        "{name}: {text:?}"
    );
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains(&format!("\r\nx-airlock-error: {reason}\r\n")),
        "{name}: {head}"
    );
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{name}: {head}"
    );
    assert!(head.contains("\r\nconnection: close"), "{name}: {head}");
    let json: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{name}: {e}: {body:?}"));
    assert_eq!(json["error"], reason, "{name}");
}

fn parse_errors<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["event"] == "parse-error" && l["kind"] == kind)
        .collect()
}

#[tokio::test]
async fn broken_heads_on_the_explicit_port_get_the_uniform_denial() {
    let mut h = Harness::start("enforce", &[("allowed.test", &[ALLOWED_IP])], &[]).await;
    let attacks = attacks();
    for (name, bytes, status, reason) in &attacks {
        let mut s = TcpStream::connect(h.addr).await.unwrap();
        let _ = s.write_all(bytes).await;
        let out = read_all(&mut s).await;
        check_denial(name, &out, *status, reason);
    }
    // Trickled a byte at a time, the head is judged when it ends (not re-parsed per byte).
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    for b in b"GET http://allowed.test/ HTTP/1.1\r\nx-a\0b: 1\r\n\r\n" {
        s.write_all(&[*b]).await.unwrap();
    }
    check_denial(
        "trickled",
        &read_all(&mut s).await,
        400,
        "malformed-request",
    );
    // A head cut short by a half-close is refused too.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nhost: all")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    check_denial(
        "half-closed",
        &read_all(&mut s).await,
        400,
        "malformed-request",
    );

    let (_s, r) = request(h.addr, "GET /__airlock/health HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200, "still serving");
    assert_eq!(
        h.connects.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing was dialed"
    );
    let lines = h.finish().await;
    let pe = parse_errors(&lines, "http");
    assert_eq!(
        pe.len(),
        attacks.len() + 2,
        "one line per connection: {lines:?}"
    );
    for ((name, _, _, reason), l) in attacks.iter().zip(&pe) {
        assert_eq!(l["reason"], *reason, "{name}: {l}");
        assert_eq!(l["decision"], "deny", "{name}");
    }
    assert_eq!(lines.len(), pe.len(), "no other line: {lines:?}");
}

#[tokio::test]
async fn a_broken_head_after_good_requests_is_answered_in_order() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    // Pipelined: a good GET, a good POST with a chunked body, then a smuggling attempt.
    s.write_all(
        b"GET http://allowed.test/1 HTTP/1.1\r\nhost: allowed.test\r\n\r\n\
POST http://allowed.test/2 HTTP/1.1\r\nhost: allowed.test\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nx-t: 1\r\n\r\n\
GET http://allowed.test/3 HTTP/1.1\r\nhost: allowed.test\nx-smuggled: 1\r\n\r\n\
GET http://allowed.test/4 HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
    )
    .await
    .unwrap();
    let first = read_resp(&mut s).await;
    assert_eq!(first.status, 200);
    let second = read_resp(&mut s).await;
    assert_eq!(second.status, 200);
    let out = read_all(&mut s).await;
    check_denial("pipelined", &out, 400, "malformed-request");
    let mut got = Vec::new();
    while let Ok(head) = heads.try_recv() {
        // (this upstream reads bodies as if they were heads: keep the request lines)
        let line = head.lines().next().unwrap_or_default();
        if line.ends_with(" HTTP/1.1") {
            got.push(line.to_owned());
        }
    }
    assert_eq!(
        got,
        ["GET /1 HTTP/1.1", "POST /2 HTTP/1.1"],
        "nothing after the refusal"
    );
    let lines = h.finish().await;
    assert_eq!(parse_errors(&lines, "http").len(), 1, "{lines:?}");
}

#[tokio::test]
async fn broken_heads_on_the_transparent_listener_get_the_uniform_denial() {
    // (the sniffer gives up on bytes it cannot call HTTP or TLS after the head timeout)
    let limits = airlock_proxy::limits::Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let mut h =
        Harness::start_with("enforce", &[("allowed.test", &[ALLOWED_IP])], &[], limits).await;
    let attacks = attacks();
    for (name, bytes, status, reason) in &attacks {
        *h.orig_dst.0.lock().unwrap() = Some(format!("{ALLOWED_IP}:80").parse().unwrap());
        let mut s = TcpStream::connect(h.transparent).await.unwrap();
        let _ = s.write_all(bytes).await;
        let out = read_all(&mut s).await;
        if out.is_empty() && *status == 400 {
            // Bytes the sniffer cannot call HTTP at all (TLS-looking garbage, bare LF
            // lines) are an unknown protocol there: closed unanswered, audited.
            continue;
        }
        check_denial(name, &out, *status, reason);
    }
    let lines = h.finish().await;
    assert!(!parse_errors(&lines, "transparent").is_empty(), "{lines:?}");
}

#[tokio::test]
async fn broken_heads_inside_intercepted_tls_get_the_uniform_denial() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
    )
    .await;
    let config = h.trusting_client();
    let attacks = attacks();
    // The service port always intercepts: the head is judged inside the TLS.
    for (name, bytes, status, reason) in &attacks {
        let mut s = TcpStream::connect(h.service).await.unwrap();
        s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
            .await
            .unwrap();
        let r = read_resp(&mut s).await;
        assert_eq!(r.status, 200);
        let mut tls = tokio_rustls::TlsConnector::from(Arc::clone(&config))
            .connect(ServerName::try_from("allowed.test").unwrap(), s)
            .await
            .unwrap();
        let _ = tls.write_all(bytes).await;
        let out = read_all(&mut tls).await;
        check_denial(name, &out, *status, reason);
    }
    assert!(heads.try_recv().is_err(), "nothing reached upstream");
    let lines = h.finish().await;
    let pe = parse_errors(&lines, "git-service");
    assert_eq!(pe.len(), attacks.len(), "{lines:?}");
    for ((name, _, _, reason), l) in attacks.iter().zip(&pe) {
        assert_eq!(l["reason"], *reason, "{name}: {l}");
        assert_eq!(l["intercepted"], true);
    }
}

/// The proxy binary started in `dir` on the policy `text` (`policy.toml`, the audit log
/// `audit.jsonl` beside it): its exit code and what it said on stderr.
fn start_in(dir: &std::path::Path, text: &str) -> (Option<i32>, String) {
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock-proxy"))
        .arg("--policy")
        .arg(&policy)
        .arg("--audit")
        .arg(dir.join("audit.jsonl"))
        .args(["--session", "s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

/// A policy the proxy cannot use is a refused start (78) with one line naming the file and
/// line, the way the entrypoint reports every configuration problem, never a crash (1).
#[test]
fn a_broken_policy_is_a_refused_start_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = start_in(dir.path(), "[sandbox]\nname = \"Not A Name\"\n");
    assert_eq!(code, Some(78), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("policy.toml:2:"), "{err}");
}

/// The operator's grants beside the audit log that do not load stop the start (78, one
/// line naming the file): never a start that silently drops a grant, or a deny.
#[test]
fn a_grants_file_that_does_not_load_is_a_refused_start() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join(airlock_channels::GRANTS_FILE);
    std::fs::write(&grants, "{\"version\": 1, \"grants\": [{\"id\": \"x\"").unwrap();
    let (code, err) = start_in(dir.path(), "[sandbox]\nname = \"box\"\n");
    assert_eq!(code, Some(78), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("grants.json does not load") && err.contains("move it away"),
        "{err}"
    );
}
