//! End-to-end attacks on the transparent listener (and on fronting inside CONNECT).
//! `SO_ORIGINAL_DST` is replaced by the harness's `FakeOrigDst`.

// Test helpers outside `#[test]` fns are test code too (clippy.toml only sees `#[test]`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::*;
use airlock_proxy::sniff::test_client_hello;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn dst(ip: &str, port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(ip.parse().unwrap(), port))
}

async fn transparent(h: &Harness, to: Option<SocketAddr>, first: &[u8]) -> TcpStream {
    *h.orig_dst.0.lock().unwrap() = to;
    let mut s = TcpStream::connect(h.transparent).await.unwrap();
    s.write_all(first).await.unwrap();
    s
}

#[tokio::test]
async fn tls_with_an_allowed_sni_reaches_the_original_destination() {
    let (echo, mut peers) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("raw.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo)],
    )
    .await;
    let hello = test_client_hello(Some("raw.test"));
    let mut s = transparent(&h, dst(ALLOWED_IP, 443), &hello).await;
    // The peeked ClientHello is relayed untouched (not consumed by the sniffing).
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, hello);
    s.shutdown().await.unwrap();
    let _ = read_to_close(&mut s).await;
    let upstream_peer = peers.recv().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["kind"], "transparent");
    assert_eq!(l["decision"], "allow");
    assert_eq!(l["host"], "raw.test");
    assert_eq!(l["upstream"], format!("{ALLOWED_IP}:443"));
    assert_eq!(l["upstream_local_port"], upstream_peer.port());
    assert_eq!(l["bytes_up"], hello.len());
}

#[tokio::test]
async fn sni_of_an_allowed_host_sent_to_another_address_is_refused() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[
            route(ALLOWED_IP, 443, echo),
            route("198.51.100.66", 443, echo),
        ],
    )
    .await;
    let mut s = transparent(
        &h,
        dst("198.51.100.66", 443),
        &test_client_hello(Some("allowed.test")),
    )
    .await;
    assert!(
        read_to_close(&mut s).await.is_empty(),
        "closed without a byte"
    );
    assert_eq!(h.connects.load(Ordering::SeqCst), 0);
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["decision"], "deny");
    assert_eq!(lines[0]["reason"], "sni-mismatch");
}

#[tokio::test]
async fn blocked_sni_no_sni_and_unknown_protocols_are_refused() {
    let mut h = Harness::start("enforce", &[("evil.test", &[ALLOWED_IP])], &[]).await;
    // A blocked name gets a TLS answer (the legible refusal, below); nothing goes upstream.
    let mut s = transparent(
        &h,
        dst(ALLOWED_IP, 443),
        &test_client_hello(Some("evil.test")),
    )
    .await;
    let _ = read_to_close(&mut s).await;
    let mut s = transparent(&h, dst(ALLOWED_IP, 443), &test_client_hello(None)).await;
    assert!(read_to_close(&mut s).await.is_empty());
    let mut s = transparent(&h, dst(ALLOWED_IP, 22), b"SSH-2.0-OpenSSH_9.6\r\n").await;
    assert!(read_to_close(&mut s).await.is_empty());
    // Not redirected at all (no original destination).
    let mut s = transparent(&h, None, b"GET / HTTP/1.1\r\nhost: allowed.test\r\n\r\n").await;
    assert!(read_to_close(&mut s).await.is_empty());
    assert_eq!(h.connects.load(Ordering::SeqCst), 0);
    let lines = h.finish().await;
    let reasons: Vec<_> = lines
        .iter()
        .map(|l| l["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        reasons,
        [
            "blocked-by-policy",
            "unknown-host",
            "unknown-host",
            "unknown-host"
        ]
    );
    assert!(
        lines
            .iter()
            .all(|l| l["decision"] == "deny" && l["kind"] == "transparent")
    );
}

#[tokio::test]
async fn plain_http_by_host_header_and_its_denial_is_readable() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("evil.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let mut s = transparent(
        &h,
        dst(ALLOWED_IP, 80),
        b"GET /x HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    )
    .await;
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "hello from upstream");
    let head = heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /x http/1.1\r\n"), "{head}");
    assert!(head.contains("\r\nhost: allowed.test\r\n"), "{head}");
    drop(s);
    let mut s = transparent(
        &h,
        dst(ALLOWED_IP, 80),
        b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    )
    .await;
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-by-policy")
    );
    assert_eq!(r.json()["host"], "evil.test");
    let mut s = transparent(
        &h,
        dst(ALLOWED_IP, 80),
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: allowed.test\r\n\r\n",
    )
    .await;
    let r = read_resp(&mut s).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("malformed-request")
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    assert_eq!(lines.len(), 3, "{lines:?}");
}

#[tokio::test]
async fn rebinding_through_the_transparent_path_is_refused() {
    let mut h = Harness::start("enforce", &[("rebind.test", &["127.0.0.1"])], &[]).await;
    // Even if the agent's traffic really was headed to loopback, a name resolving there is
    // never connected to.
    let mut s = transparent(
        &h,
        dst("127.0.0.1", 443),
        &test_client_hello(Some("rebind.test")),
    )
    .await;
    // At most the legible refusal comes back (TLS from the proxy itself); nothing connects.
    let _ = read_to_close(&mut s).await;
    assert_eq!(h.connects.load(Ordering::SeqCst), 0);
    let lines = h.finish().await;
    assert_eq!(lines[0]["reason"], "blocked-private-address");
}

#[tokio::test]
async fn fronting_inside_connect_is_refused() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("raw.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo), route(ALLOWED_IP, 80, echo)],
    )
    .await;
    // SNI of a blocked host inside a tunnel to an allowed one.
    let (mut s, r) = request(h.addr, "CONNECT raw.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    s.write_all(&test_client_hello(Some("evil.test")))
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(
        out.is_empty(),
        "nothing from upstream: the hello never left"
    );
    // Host header of another host inside a tunnel.
    let (mut s, _) = request(h.addr, "CONNECT raw.test:80 HTTP/1.1\r\n\r\n").await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(out.is_empty());
    // The honest one passes, split into two writes.
    let hello = test_client_hello(Some("raw.test"));
    let (mut s, _) = request(h.addr, "CONNECT raw.test:443 HTTP/1.1\r\n\r\n").await;
    s.write_all(&hello[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.write_all(&hello[10..]).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, hello);
    drop(s);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let reasons: Vec<_> = lines
        .iter()
        .map(|l| (l["decision"].as_str().unwrap(), l["reason"].as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("deny", Some("sni-mismatch")),
            ("deny", Some("host-mismatch")),
            ("allow", None)
        ],
        "{lines:?}"
    );
}

#[tokio::test]
async fn server_first_protocols_still_work_through_connect() {
    // An upstream that greets first (like SSH or SMTP).
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"220 hello\r\n").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        s.write_all(&b).await.unwrap();
    });
    let mut h = Harness::start(
        "enforce",
        &[("raw.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
    )
    .await;
    let (mut s, r) = request(h.addr, "CONNECT raw.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    let mut greet = [0u8; 11];
    s.read_exact(&mut greet).await.unwrap();
    assert_eq!(&greet, b"220 hello\r\n");
    s.write_all(b"QUIT").await.unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"QUIT");
    drop(s);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    assert_eq!(lines[0]["decision"], "allow");
}

#[tokio::test]
async fn every_request_of_a_transparent_keep_alive_connection_is_checked() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("evil.test", &[ALLOWED_IP]),
            ("other.allowed.test", &["198.51.100.5"]),
        ],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let mut s = transparent(
        &h,
        dst(ALLOWED_IP, 80),
        b"GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    )
    .await;
    assert_eq!(read_resp(&mut s).await.status, 200);
    // Same connection, same address, another virtual host: refused.
    s.write_all(b"GET /2 HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        .await
        .unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("blocked-by-policy")
    );
    // An allowed host that does not live at this address: refused (no fronting by IP).
    s.write_all(b"GET /3 HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n")
        .await
        .unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("host-mismatch")
    );
    // Absolute-form naming another host than Host: refused.
    s.write_all(b"GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .await
        .unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("host-mismatch")
    );
    // No Host at all.
    s.write_all(b"GET /5 HTTP/1.0\r\n\r\n").await.unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(r.header("x-airlock-error").as_deref(), Some("unknown-host"));
    drop(s);
    assert!(heads.recv().await.unwrap().starts_with("GET /1 "));
    assert!(
        heads.try_recv().is_err(),
        "only the first request reached upstream"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let d: Vec<_> = lines
        .iter()
        .map(|l| {
            (
                l["decision"].as_str().unwrap(),
                l["reason"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        d,
        [
            ("allow", "-"),
            ("deny", "blocked-by-policy"),
            ("deny", "host-mismatch"),
            ("deny", "host-mismatch"),
            ("deny", "unknown-host")
        ],
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l["kind"] == "transparent"));
}

/// Encrypted ClientHello through an uninspected tunnel: the outer name is an allowed host
/// on a CDN, the inner one (hidden) anything on the same CDN. The agent carries an ECH
/// config of its own (DNS answers never give it one): through a `CONNECT` tunnel and
/// through the transparent listener its hello is refused (`ech-refused`) before a byte of
/// it leaves.
#[tokio::test]
async fn an_encrypted_client_hello_never_leaves_through_a_tunnel() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("raw.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo)],
    )
    .await;
    let hello = airlock_proxy::sniff::test_client_hello_ech(Some("raw.test"));
    let (mut s, r) = request(h.addr, "CONNECT raw.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    s.write_all(&hello).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(out.is_empty(), "nothing came back: the hello never left");

    let mut s = transparent(&h, dst(ALLOWED_IP, 443), &hello).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(out.is_empty(), "nothing came back: the hello never left");
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "ech-refused" && l["decision"] == "deny")
        .collect();
    assert_eq!(refused.len(), 2, "{lines:?}");
    assert!(
        refused.iter().any(|l| l["kind"] == "connect"),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|l| l["kind"] == "transparent"),
        "{refused:?}"
    );
}

/// The agent's TLS client (trusting the appliance CA, as every client in the sandbox does)
/// reaches a denied host through the redirect: it reads a real `403` with the reason and the
/// hint from inside TLS, instead of a reset it would take for a broken network; nothing is
/// forwarded, one audit line says so.
#[tokio::test]
async fn a_denied_https_destination_answers_a_readable_403_inside_tls() {
    let (echo, mut peers) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("evil.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo)],
    )
    .await;
    let config = h.trusting_client();
    *h.orig_dst.0.lock().unwrap() = dst(ALLOWED_IP, 443);
    let s = TcpStream::connect(h.transparent).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(
            rustls::pki_types::ServerName::try_from("evil.test").unwrap(),
            s,
        )
        .await
        .expect("the refusal's leaf verifies against the appliance CA");
    tls.write_all(b"POST /upload HTTP/1.1\r\nhost: evil.test\r\ncontent-length: 6\r\n\r\nsecret")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), tls.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("x-airlock-error: blocked-by-policy"),
        "{answer}"
    );
    assert!(
        answer.contains(r#""error":"blocked-by-policy""#),
        "{answer}"
    );
    assert!(answer.contains(r#""host":"evil.test""#), "{answer}");
    assert_eq!(
        h.connects.load(Ordering::SeqCst),
        0,
        "nothing went upstream"
    );
    assert!(peers.try_recv().is_err(), "the upstream heard nothing");
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["decision"], "deny");
    assert_eq!(lines[0]["reason"], "blocked-by-policy");
    assert_eq!(lines[0]["host"], "evil.test");
}

/// The refusal's leaf is minted only for the name that was judged: a ClientHello naming a
/// denied host gets no certificate for any other name.
#[tokio::test]
async fn the_refusal_never_mints_a_leaf_for_another_name() {
    let mut h = Harness::start("enforce", &[("evil.test", &[ALLOWED_IP])], &[]).await;
    let config = h.trusting_client();
    *h.orig_dst.0.lock().unwrap() = dst(ALLOWED_IP, 443);
    let s = TcpStream::connect(h.transparent).await.unwrap();
    // The SNI is judged (evil.test is denied): the connection carries no TLS for a name
    // the client did not send; an IP-only hello (no SNI) gets nothing either.
    let r = tokio_rustls::TlsConnector::from(config)
        .connect(
            rustls::pki_types::ServerName::try_from("198.51.100.10").unwrap(),
            s,
        )
        .await;
    assert!(r.is_err(), "no leaf without a judged name");
    assert_eq!(h.connects.load(Ordering::SeqCst), 0);
    let lines = h.finish().await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["decision"], "deny");
}

/// Issue 13 item 4: a transparent TLS connection to an intercepted host whose client
/// finishes the handshake with the proxy and leaves without a request: nothing reached the
/// upstream (its recorder saw no byte), so the line says `abandoned`, not `allow`.
#[tokio::test]
async fn a_transparent_client_that_leaves_before_anything_went_upstream_is_abandoned() {
    let (up, got) = recorder().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
    )
    .await;
    *h.orig_dst.0.lock().unwrap() = dst(ALLOWED_IP, 443);
    let s = TcpStream::connect(h.transparent).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(
            rustls::pki_types::ServerName::try_from("allowed.test").unwrap(),
            s,
        )
        .await
        .expect("the handshake with the proxy's leaf");
    drop(tls);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = h.finish().await;
    assert!(got.lock().unwrap().is_empty(), "the upstream saw bytes");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let l = &lines[0];
    assert_eq!(l["kind"], "transparent");
    assert_eq!(l["intercepted"], true, "{l}");
    assert_eq!(l["decision"], "abandoned", "{l}");
    assert_eq!(l["rule"], "allowed.test", "{l}");
}
