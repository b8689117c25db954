//! End-to-end attacks on the git service port, upgrade relaying, credential hosts and
//! read-only hosts (harness in `common`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
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
    // judged. A non-git path and a push of a repository not in [git] repositories are
    // refused by rule; a fetch of one would pass anonymously, but only with the git API's
    // ticket, and this request has none.
    let mut s = TcpStream::connect(h.service).await.unwrap();
    s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    let mut tls = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("allowed.test").unwrap(), s)
        .await
        .expect("the leaf verifies against the appliance CA");
    for (path, status, reason) in [
        ("/", "403", "request-denied-by-rule"),
        (
            "/o/r/info/refs?service=git-upload-pack",
            "200",
            "git-ticket-missing",
        ),
        ("/o/r/git-receive-pack", "200", "request-denied-by-rule"),
    ] {
        tls.write_all(format!("GET {path} HTTP/1.1\r\nhost: allowed.test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let head = read_head(&mut tls).await;
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{path}: {head}"
        );
        assert!(
            head.contains(&format!("x-airlock-error: {reason}")),
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
    assert_eq!(refused, 3, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "git-service" && l["reason"] == "git-ticket-missing"),
        "{lines:?}"
    );
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

/// The agent publishes the workspace to a host it may only read from (a registry, an
/// allowed CDN): every method that writes is refused with `read-only-host` and the hint,
/// audited, and nothing reaches the upstream; reads still pass.
#[tokio::test]
async fn attack_writes_to_a_read_only_host_never_reach_it() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("readonly.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let writes = [
        "PUT http://readonly.test/workspace.tar HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\ndata",
        "POST http://readonly.test/upload HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\ndata",
        "GET http://readonly.test/x?_method=DELETE HTTP/1.1\r\nhost: readonly.test\r\n\r\n",
    ];
    for raw in writes {
        let (_s, r) = request(h.addr, raw).await;
        assert_eq!(r.status, 403, "{raw}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("read-only-host"),
            "{raw}"
        );
        assert!(
            r.body.contains("network.writable"),
            "the hint says how to allow it: {}",
            r.body
        );
        assert!(
            r.json()["rule"].as_str().unwrap().contains("read-only"),
            "{}",
            r.body
        );
    }
    // A WebSocket would be a write channel nobody reads after the `101`.
    let (_s, r) = request(
        h.addr,
        "GET http://readonly.test/ws HTTP/1.1\r\nhost: readonly.test\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("upgrade-denied")
    );
    assert!(heads.try_recv().is_err(), "nothing reached the upstream");
    // A method override header does not turn a read into a write upstream: it is removed.
    let (_s, r) = request(
        h.addr,
        "GET http://readonly.test/pkg HTTP/1.1\r\nhost: readonly.test\r\nx-http-method-override: PUT\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let head = heads.recv().await.unwrap();
    assert!(
        !head.to_ascii_lowercase().contains("method-override"),
        "{head}"
    );
    // The git fetch exemption is for hosts that serve git, and fetch requests
    // (`read_only_body` has the fetches that pass).
    let (_s, r) = request(
        h.addr,
        "POST http://readonly.test/o/r.git/git-upload-pack HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 403, "readonly.test serves no git");
    assert!(heads.try_recv().is_err(), "nothing reached the upstream");
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "read-only-host")
        .collect();
    assert_eq!(refused.len(), 4, "{lines:?}");
    for l in refused {
        assert_eq!(l["decision"], "deny");
        assert!(
            l["rule"].as_str().unwrap().contains("network.writable"),
            "{l}"
        );
    }
}

/// Report mode, the way to learn a policy, logs the write it would refuse and lets it
/// through.
#[tokio::test]
async fn report_mode_logs_a_write_to_a_read_only_host() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "report",
        &[("readonly.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let (_s, r) = request(
        h.addr,
        "POST http://readonly.test/upload HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 2\r\n\r\nhi",
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(heads.recv().await.unwrap().starts_with("POST /upload"));
    let lines = h.finish().await;
    let l = lines_for(&lines, "readonly.test");
    assert_eq!(l.len(), 1, "{lines:?}");
    assert_eq!(l[0]["decision"], "report");
    assert_eq!(l[0]["reason"], "read-only-host");
}

/// A stream the proxy cannot read (ssh, a custom protocol) to an allowed host would carry
/// any write unjudged: refused as `not-inspectable` unless the host is passthrough, whose
/// relayed connections the audit marks uninspected.
#[tokio::test]
async fn attack_a_raw_stream_to_an_inspected_host_is_refused() {
    let (echo, _) = echo_server().await;
    let mut h = Harness::start(
        "enforce",
        &[
            ("readonly.test", &[ALLOWED_IP]),
            ("raw.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 443, echo), route(ALLOWED_IP, 2222, echo)],
    )
    .await;
    let (mut s, r) = request(h.addr, "CONNECT readonly.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    s.write_all(b"SSH-2.0-OpenSSH_9.6\r\nworkspace secrets")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    // At most our TLS alert: the echo upstream never heard the bytes.
    assert!(!out.windows(3).any(|w| w == b"SSH"), "{out:?}");
    // The passthrough host relays it, and says it did not read it.
    let (mut s, r) = request(h.addr, "CONNECT raw.test:2222 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    s.write_all(b"SSH-2.0-x").await.unwrap();
    let mut back = [0u8; 9];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"SSH-2.0-x");
    drop(s);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let l = lines_for(&lines, "readonly.test");
    assert_eq!(l.len(), 1, "{lines:?}");
    assert_eq!(l[0]["decision"], "deny");
    assert_eq!(l[0]["reason"], "not-inspectable");
    let l = lines_for(&lines, "raw.test");
    assert_eq!(l.len(), 1, "{lines:?}");
    assert_eq!(l[0]["decision"], "allow");
    assert_eq!(l[0]["intercepted"], false);
}

/// The operator names a host writable while the proxy runs (the control plane's reload):
/// the next request is decided under the new rules, with no restart, and the swap is
/// whole (the policy and its credentials together).
#[tokio::test]
async fn replaced_rules_decide_the_next_request() {
    let (up, mut heads) = http_server().await;
    let mut h = Harness::start(
        "enforce",
        &[("readonly.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up)],
    )
    .await;
    let post = "POST http://readonly.test/upload HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 2\r\n\r\nhi";
    let (_s, r) = request(h.addr, post).await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("read-only-host")
    );
    let text = "[sandbox]\nname = \"t\"\n[network]\nallow = [\"readonly.test\"]\nwritable = [\"readonly.test\"]\n";
    let policy = airlock_policy::Policy::parse(text, std::path::Path::new("p.toml")).unwrap();
    let rules = airlock_proxy::snapshot::Rules::new(
        policy,
        airlock_proxy::credentials::Credentials::none(),
    )
    .unwrap();
    h.running.as_ref().unwrap().replace_rules(rules);
    let (_s, r) = request(h.addr, post).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(heads.recv().await.unwrap().starts_with("POST /upload"));
    h.finish().await;
}

/// Slowloris inside an intercepted connection: after CONNECT and the TLS handshake the
/// agent dribbles a request head and never ends it. The head-read deadline (hyper's, on
/// the proxy's own coarse clock) cuts the connection and audits `header-timeout` (it was
/// recorded as an idle connection before); nothing reaches the upstream. A connection
/// silent since its handshake is idle, not slowloris.
#[tokio::test]
async fn attack_a_head_dribbled_inside_tls_is_cut_at_the_deadline() {
    let (up, got) = recorder().await;
    let timeout = std::time::Duration::from_millis(300);
    let limits = airlock_proxy::limits::Limits {
        header_read_timeout: timeout,
        ..airlock_proxy::limits::Limits::default()
    };
    let mut h = Harness::start_with(
        "enforce",
        &[("readonly.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
        limits,
    )
    .await;
    let (s, r) = request(h.addr, "CONNECT readonly.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    // hyper arms the head deadline when it starts reading, right after the handshake (not
    // at the first byte of the head): the earliest it can start is now.
    let t0 = std::time::Instant::now();
    let mut tls = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("readonly.test").unwrap(), s)
        .await
        .expect("the leaf verifies against the appliance CA");
    // Beside it, a connection that stays silent after its handshake: idle, not slowloris.
    let (quiet, r) = request(h.addr, "CONNECT readonly.test:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(r.status, 200);
    let _quiet = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("readonly.test").unwrap(), quiet)
        .await
        .expect("the leaf verifies against the appliance CA");
    tls.write_all(b"GET /slow HTTP/1.1\r\nhost: readonly.test\r\nx-a: ")
        .await
        .unwrap();
    let mut out = Vec::new();
    // The agent keeps dribbling until the proxy hangs up.
    let cut = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            tokio::select! {
                r = tls.read_to_end(&mut out) => break r,
                () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
                    if tls.write_all(b"a").await.is_err() {
                        break Ok(0);
                    }
                }
            }
        }
    })
    .await;
    assert!(cut.is_ok(), "the dribbling connection was never cut");
    let waited = t0.elapsed();
    assert!(waited >= timeout, "cut before the deadline: {waited:?}");
    assert!(got.lock().unwrap().is_empty(), "bytes reached the upstream");
    let lines = h.finish().await;
    let l = lines_for(&lines, "readonly.test");
    assert_eq!(
        l.iter().filter(|l| l["event"] == "header-timeout").count(),
        1,
        "one header-timeout line, the dribbler's (the silent one is idle): {lines:?}"
    );
    assert!(
        !l.iter().any(|l| l["path"] == "/slow"),
        "the dribbled request was recorded as served: {lines:?}"
    );
}
