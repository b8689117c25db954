//! End-to-end attacks on the git service port and upgrade relaying (harness in `common`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "{:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

#[tokio::test]
async fn the_service_port_serves_only_git_smart_http_of_authorized_repositories() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
    )
    .await;

    // Not CONNECT: refused without going anywhere.
    let (_s, r) = request(
        h.service,
        "GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("request-denied-by-rule")
    );

    // CONNECT is always intercepted here: the leaf of the appliance CA, then each request
    // judged. A non-git path (and git of a repository not in [git] repositories) is refused.
    let mut s = TcpStream::connect(h.service).await.unwrap();
    s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    let mut tls = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("allowed.test").unwrap(), s)
        .await
        .expect("the leaf verifies against the appliance CA");
    for path in [
        "/",
        "/o/r/info/refs?service=git-upload-pack",
        "/o/r/git-receive-pack",
    ] {
        tls.write_all(format!("GET {path} HTTP/1.1\r\nhost: allowed.test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let head = read_head(&mut tls).await;
        assert!(head.starts_with("HTTP/1.1 403"), "{path}: {head}");
        assert!(
            head.contains("x-airlock-error: request-denied-by-rule"),
            "{path}: {head}"
        );
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut body = vec![0u8; len];
        tls.read_exact(&mut body).await.unwrap();
    }
    drop(tls);
    assert!(heads.try_recv().is_err(), "nothing reached upstream");
    let lines = h.finish().await;
    let refused = lines
        .iter()
        .filter(|l| l["kind"] == "git-service" && l["reason"] == "request-denied-by-rule")
        .count();
    assert_eq!(refused, 4, "{lines:?}");
}

#[tokio::test]
async fn a_plain_http_upgrade_relays_both_ways() {
    // An upstream that answers 101 and then echoes.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let head = read_head(&mut s).await.to_ascii_lowercase();
        assert!(head.contains("upgrade: websocket"), "{head}");
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n")
            .await
            .unwrap();
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"GET http://allowed.test/ws HTTP/1.1\r\nhost: allowed.test\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"ping frames").await.unwrap();
    let mut buf = [0u8; 11];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping frames");
    drop(s);
    let lines = h.finish().await;
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/ws" && l["status"] == 101),
        "{lines:?}"
    );
}

/// Sends `raw` to the proxy and returns the answer's status and `x-airlock-error`.
async fn refusal(proxy: std::net::SocketAddr, raw: &str) -> (u16, Option<String>) {
    let (_s, r) = request(proxy, raw).await;
    (r.status, r.header("x-airlock-error"))
}

/// The agent asks for an upgrade that would turn its connection into a relay nobody reads:
/// `h2c` (with its settings), a TLS upgrade, a list of tokens, or a WebSocket on a method
/// other than `GET`. Each is refused with `upgrade-not-supported`, audited, and nothing
/// reaches the upstream.
#[tokio::test]
async fn upgrades_other_than_a_websocket_get_never_reach_the_upstream() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let attempts = [
        "GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nconnection: upgrade, http2-settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
        "GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nconnection: upgrade\r\nupgrade: TLS/1.2\r\n\r\n",
        "GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nconnection: upgrade\r\nupgrade: websocket, h2c\r\n\r\n",
        "GET http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nconnection: upgrade\r\nupgrade: websocket\r\nupgrade: h2c\r\n\r\n",
        "POST http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nconnection: upgrade\r\nupgrade: websocket\r\ncontent-length: 0\r\n\r\n",
    ];
    for raw in attempts {
        let (status, reason) = refusal(h.addr, raw).await;
        assert_eq!(status, 403, "{raw}");
        assert_eq!(reason.as_deref(), Some("upgrade-not-supported"), "{raw}");
    }
    assert!(heads.try_recv().is_err(), "nothing reached the upstream");
    let lines = h.finish().await;
    let refused = lines
        .iter()
        .filter(|l| l["reason"] == "upgrade-not-supported" && l["decision"] == "deny")
        .count();
    assert_eq!(refused, attempts.len(), "{lines:?}");
}

/// A credential bound as `authorization: Bearer {}` and an L7 rule denying `/admin/**`:
/// the agent asks for a WebSocket there, hoping that after the `101` its frames (an
/// `/admin/delete`, a placeholder) cross unjudged and the upstream's echo of the real
/// header comes back unscrubbed. The upgrade is refused with `upgrade-denied` before any
/// byte reaches the upstream, on the credential's host and on a host with rules only.
#[tokio::test]
async fn a_websocket_on_a_credential_or_rule_host_is_refused_before_the_upstream() {
    let (up, mut heads) = http_server().await;
    let extra = Extra {
        policy: r#"
[[credentials]]
name = "api"
source = { env = "API_KEY" }
hosts = ["allowed.test"]
header = "authorization"
format = "Bearer {}"

[[rules]]
host = "ruled.allowed.test"
path = "/admin/**"
action = "deny"
"#
        .into(),
        credentials: vec![("api", "REAL-secret-9f2", "airlock-placeholder-api-01")],
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("ruled.allowed.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 80, up)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    for host in ["allowed.test", "ruled.allowed.test"] {
        let raw = format!(
            "GET http://{host}/ws HTTP/1.1\r\nhost: {host}\r\nconnection: upgrade\r\nupgrade: websocket\r\nauthorization: Bearer airlock-placeholder-api-01\r\n\r\n"
        );
        let (status, reason) = refusal(h.addr, &raw).await;
        assert_eq!(status, 403, "{host}");
        assert_eq!(reason.as_deref(), Some("upgrade-denied"), "{host}");
    }
    // Without the upgrade the same host still works (the credential host is served).
    let (status, _) = refusal(
        h.addr,
        "GET http://allowed.test/ok HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    let served = heads.try_recv().expect("the ordinary request was served");
    assert!(served.starts_with("GET /ok "), "{served}");
    assert!(heads.try_recv().is_err(), "no upgrade reached the upstream");
    let lines = h.finish().await;
    let denied: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "upgrade-denied")
        .collect();
    assert_eq!(denied.len(), 2, "{lines:?}");
    assert!(denied.iter().all(|l| l["path"] == "/ws"), "{denied:?}");
}

/// TRACE and TRACK make a server echo the request; on the credential's host the echo would
/// carry the injected secret back in a body. The proxy never sends them there
/// (`credential-method-refused`), whatever the case of the method.
#[tokio::test]
async fn trace_and_track_never_reach_a_credential_host() {
    let (up, mut heads) = http_server().await;
    let extra = Extra {
        policy: r#"
[[credentials]]
name = "api"
source = { env = "API_KEY" }
hosts = ["allowed.test"]
header = "x-api-key"
format = "{}"
"#
        .into(),
        credentials: vec![("api", "REAL-secret-9f2", "airlock-placeholder-api-01")],
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    for method in ["TRACE", "TRACK", "trace"] {
        let raw = format!(
            "{method} http://allowed.test/ HTTP/1.1\r\nhost: allowed.test\r\nx-api-key: airlock-placeholder-api-01\r\n\r\n"
        );
        let (status, reason) = refusal(h.addr, &raw).await;
        assert_eq!(status, 403, "{method}");
        assert_eq!(
            reason.as_deref(),
            Some("credential-method-refused"),
            "{method}"
        );
    }
    assert!(heads.try_recv().is_err(), "nothing reached the upstream");
    let lines = h.finish().await;
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["reason"] == "credential-method-refused")
            .count(),
        3,
        "{lines:?}"
    );
}

/// On the credential's host the agent adds its own identity (an attacker's bearer token
/// beside the bound `x-api-key`, a session cookie): the upstream sees none of it, so which
/// account the request acts for is never the agent's choice.
#[tokio::test]
async fn the_agent_cannot_speak_for_another_account_on_a_credential_host() {
    let (up, mut heads) = http_server().await;
    let extra = Extra {
        policy: r#"
[[credentials]]
name = "api"
source = { env = "API_KEY" }
hosts = ["allowed.test"]
header = "x-api-key"
format = "{}"
"#
        .into(),
        credentials: vec![("api", "REAL-secret-9f2", "airlock-placeholder-api-01")],
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    let (status, _) = refusal(
        h.addr,
        "GET http://allowed.test/v1/messages HTTP/1.1\r\nhost: allowed.test\r\n\
         x-api-key: airlock-placeholder-api-01\r\nauthorization: Bearer attacker-token\r\n\
         cookie: user_session=attacker\r\nx-goog-api-key: attacker\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    let head = heads.try_recv().unwrap().to_ascii_lowercase();
    for gone in [
        "authorization",
        "cookie",
        "x-goog-api-key",
        "attacker",
        "x-api-key",
    ] {
        assert!(!head.contains(gone), "{gone} reached the upstream:\n{head}");
    }
    h.finish().await;
}

/// The agent holds every connection its budget allows (and the proxy's whole budget), so
/// that the git API's next push gets `too-many-connections`: the git service port has slots
/// of its own, and a refusal there would be audited as the git service's, not `http`.
#[tokio::test]
async fn the_agent_cannot_starve_the_git_service_port() {
    let (echo, _) = echo_server().await;
    let limits = airlock_proxy::limits::Limits {
        max_connections: 6,
        max_per_client: 6,
        ..airlock_proxy::limits::Limits::default()
    };
    let mut h = Harness::start_with(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, echo)],
        limits,
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..6 {
        let (s, r) = request(
            h.addr,
            "CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n",
        )
        .await;
        assert_eq!(r.status, 200);
        held.push(s);
    }
    let (_s, r) = request(
        h.addr,
        "CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 429, "the agent's budget is spent");
    let (_svc, r) = request(
        h.service,
        "CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "the git service port still has room");
    drop(held);
    h.finish().await;
}
