//! The admin API against the real proxy: its answers, the event stream, the counters, a
//! policy reload with connections open, bad input, and a peer it refuses.

use std::path::Path;
use std::time::Duration;

use airlock_control::admin::{
    CheckQuery, EventsQuery, ReloadRequest, Request, Response, StreamLine,
};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

use crate::common::{ALLOWED_IP, Extra, Harness, echo_server, refused_in_tunnel, request, route};
use airlock_proxy::limits::Limits;

/// One exchange on the admin socket: the status and the body.
pub(crate) async fn call(sock: &Path, req: &Request) -> (u16, Vec<u8>) {
    let http = req.to_http().unwrap();
    raw_call(
        sock,
        http.method.as_str(),
        &http.target,
        http.body.unwrap_or_default(),
    )
    .await
}

async fn raw_call(sock: &Path, method: &str, target: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let stream = UnixStream::connect(sock).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(target)
        .header("host", "airlock")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, body)
}

pub(crate) fn response(body: &[u8]) -> Response {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

pub(crate) async fn counters(sock: &Path) -> airlock_control::admin::Counters {
    let (status, body) = call(sock, &Request::Counters).await;
    assert_eq!(status, 200);
    match response(&body) {
        Response::Counters(c) => c,
        other => panic!("{other:?}"),
    }
}

async fn admin_harness(routes: &[(std::net::SocketAddr, std::net::SocketAddr)]) -> Harness {
    Harness::start_extra(
        "enforce",
        &[("raw.test", &[ALLOWED_IP]), ("evil.test", &[ALLOWED_IP])],
        routes,
        Limits::default(),
        &Extra {
            admin: true,
            ..Extra::default()
        },
    )
    .await
}

#[tokio::test]
async fn the_api_answers_its_operations_and_counts_what_the_log_records() {
    let mut h = admin_harness(&[]).await;
    let sock = h.admin.clone().unwrap();
    let r = refused_in_tunnel(&h, "evil.test", 443).await;
    assert_eq!(r.status, 403);
    let c = counters(&sock).await;
    assert_eq!((c.requests, c.denied), (1, 1), "{c:?}");
    assert_eq!(c.denied_by_reason.get("blocked-by-policy"), Some(&1));
    let (status, body) = call(&sock, &Request::Policy).await;
    assert_eq!(status, 200);
    let Response::Policy(p) = response(&body) else {
        panic!()
    };
    assert_eq!(p.revision, 1);
    assert_eq!(
        p.hash,
        airlock_proxy::revision::hash(&std::fs::read(&h.policy_path).unwrap())
    );
    // The effective rules of the revision in force, each with where it came from.
    let origin = |list: &str, rule: &str| {
        p.rules
            .iter()
            .find(|r| r.list == list && r.rule == rule)
            .map(|r| r.origin.as_str())
    };
    assert_eq!(
        origin("network.allow", "allowed.test"),
        Some("file network.allow[0]")
    );
    assert_eq!(
        origin("network.deny", "bad.allowed.test"),
        Some("file network.deny[0]")
    );
    assert_eq!(
        origin("network.passthrough", "raw.test"),
        Some("file network.passthrough[0]")
    );
    let (status, body) = call(&sock, &Request::Sessions).await;
    assert_eq!(status, 200);
    let Response::Sessions(s) = response(&body) else {
        panic!()
    };
    assert_eq!(s.sessions[0].id, "sess-1");
    // No readiness record in this harness: said, not invented.
    let (status, body) = call(&sock, &Request::Status).await;
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    let (status, body) = call(&sock, &Request::Metrics).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("airlock_denials_total{reason=\"blocked-by-policy\"} 1"),
        "{text}"
    );
    assert!(text.contains("airlock_policy_revision 1"), "{text}");
    h.finish().await;
}

#[tokio::test]
async fn malformed_requests_get_clear_errors_and_the_proxy_keeps_serving() {
    let mut h = admin_harness(&[]).await;
    let sock = h.admin.clone().unwrap();
    for (method, target, body, status, code) in [
        ("GET", "/v2/status", "", 404, "unknown-version"),
        ("GET", "/v1/nothing", "", 404, "not-found"),
        ("DELETE", "/v1/status", "", 405, "method-not-allowed"),
        ("GET", "/v1/events?colour=red", "", 400, "bad-request"),
        ("POST", "/v1/policy/reload", "[1,2]", 400, "bad-request"),
    ] {
        let (s, b) = raw_call(&sock, method, target, body.as_bytes().to_vec()).await;
        assert_eq!(s, status, "{method} {target}");
        let Response::Error(e) = response(&b) else {
            panic!("{method} {target}")
        };
        assert_eq!(
            serde_json::to_value(e.code).unwrap(),
            code,
            "{method} {target}"
        );
        assert!(!e.message.is_empty());
    }
    // Garbage on the socket: the connection is closed, the API answers the next one.
    let mut raw = UnixStream::connect(&sock).await.unwrap();
    raw.write_all(b"\x00\x01garbage\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut out)).await;
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 400") || out.is_empty());
    let c = counters(&sock).await;
    assert_eq!(c.requests, 0);
    // And the agent's side was never affected.
    let (_s, r) = request(h.addr, "GET /__airlock/health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert_eq!(r.status, 200);
    h.finish().await;
}

/// Reads NDJSON stream lines from `body` until `pred` holds for one, returning it.
async fn next_matching(
    body: &mut hyper::body::Incoming,
    buf: &mut Vec<u8>,
    pred: impl Fn(&StreamLine) -> bool,
) -> StreamLine {
    loop {
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            let parsed: StreamLine = serde_json::from_slice(&line).unwrap();
            if pred(&parsed) {
                return parsed;
            }
        }
        let frame = body.frame().await.unwrap().unwrap();
        if let Some(d) = frame.data_ref() {
            buf.extend_from_slice(d);
        }
    }
}

/// The denial reaches a follower as it is written (the time it takes, target 100 ms, is
/// measured by `ONLY=admin bench/run.sh`, the row "a denial to logs -f", not here).
#[tokio::test]
async fn a_follower_sees_a_denial_as_it_is_written_and_resumes_from_its_cursor() {
    let mut h = admin_harness(&[]).await;
    let sock = h.admin.clone().unwrap();
    let stream = UnixStream::connect(&sock).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let q = EventsQuery {
        decision: Some("deny".into()),
        follow: true,
        ..EventsQuery::default()
    };
    let req = hyper::Request::get(format!("/v1/events?{}", q.to_query()))
        .header("host", "airlock")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let r = refused_in_tunnel(&h, "evil.test", 443).await;
    assert_eq!(r.status, 403);
    let record = next_matching(&mut body, &mut buf, |l| matches!(l, StreamLine::Record(_)));
    let line = tokio::time::timeout(Duration::from_secs(10), record)
        .await
        .expect("the denial never reached the follower");
    let StreamLine::Record(ev) = line else {
        panic!()
    };
    assert_eq!(ev.record["host"], "evil.test");
    assert_eq!(ev.record["reason"], "blocked-by-policy");
    // A second denial; a new reader resuming after the first cursor gets it and no other.
    let (_s, _) = request(h.addr, "CONNECT evil.test:8443 HTTP/1.1\r\n\r\n").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (status, body) = call(
        &sock,
        &Request::Events(EventsQuery {
            after: Some(ev.cursor.clone()),
            ..EventsQuery::default()
        }),
    )
    .await;
    assert_eq!(status, 200);
    let lines: Vec<StreamLine> = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let StreamLine::Record(second) = &lines[0] else {
        panic!()
    };
    assert_eq!(second.record["port"], 8443);
    h.finish().await;
}

#[tokio::test]
async fn a_burst_leaves_counters_stream_log_and_chain_consistent() {
    let mut h = admin_harness(&[]).await;
    let sock = h.admin.clone().unwrap();
    const N: usize = 10_000;
    // Keep-alive plain HTTP denials to many hosts (no folding past the first lines to one
    // destination: every denial is its own line).
    let mut s = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    for i in 0..N {
        let req = format!(
            "GET http://h{}.evil.test/ HTTP/1.1\r\nhost: h{}.evil.test\r\n\r\n",
            i % 5000,
            i % 5000
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let r = crate::common::read_resp(&mut s).await;
        assert_eq!(r.status, 403);
    }
    drop(s);
    let c = counters(&sock).await;
    let (status, body) = call(&sock, &Request::Events(EventsQuery::default())).await;
    assert_eq!(status, 200);
    let records: Vec<serde_json::Value> = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| match serde_json::from_slice::<StreamLine>(l).unwrap() {
            StreamLine::Record(e) => Some(e.record),
            _ => None,
        })
        .collect();
    let path = h.audit_path.clone();
    let lines = h.finish().await;
    let in_log: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["reason"] == "blocked-by-policy" && l["event"].is_null())
        .collect();
    let suppressed: u64 = lines
        .iter()
        .filter(|l| l["event"] == "suppressed")
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert_eq!(c.denied, N as u64, "{c:?}");
    assert_eq!(in_log.len() as u64 + suppressed, N as u64);
    // The stream carried the log's lines, each once, in the log's order (those written
    // before it was read).
    assert_eq!(&lines[..records.len()], &records[..]);
    assert!(records.len() >= in_log.len().min(N));
    airlock_audit_schema::chain::verify_paths(&[path]).unwrap();
}

#[tokio::test]
async fn a_reload_swaps_the_policy_keeps_what_it_allows_and_closes_what_it_refuses() {
    let (echo, _peers) = echo_server().await;
    let mut h = admin_harness(&[route(ALLOWED_IP, 443, echo), route(ALLOWED_IP, 2222, echo)]).await;
    let sock = h.admin.clone().unwrap();
    // 100 open tunnels, half to a port the new policy drops.
    let mut kept = Vec::new();
    let mut doomed = Vec::new();
    for i in 0..100 {
        let port = if i % 2 == 0 { 443 } else { 2222 };
        let (mut s, r) =
            request(h.addr, &format!("CONNECT raw.test:{port} HTTP/1.1\r\n\r\n")).await;
        assert_eq!(r.status, 200);
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        if port == 443 {
            kept.push(s)
        } else {
            doomed.push(s)
        }
    }
    let text = std::fs::read_to_string(&h.policy_path).unwrap();
    // A broken file: refused with its line, the revision stays.
    let (status, body) = call(
        &sock,
        &Request::Reload(ReloadRequest {
            text: Some(format!("{text}\n[network.bogus\n")),
            origin: Some("/host/policy.toml".into()),
        }),
    )
    .await;
    assert_eq!(status, 422);
    let Response::Error(e) = response(&body) else {
        panic!()
    };
    assert!(e.message.starts_with("/host/policy.toml:"), "{}", e.message);
    // A change only a restart applies (the mode); the start's own name is none (the
    // text's name is the start's override, as at start).
    let (status, _) = call(
        &sock,
        &Request::Reload(ReloadRequest {
            text: Some(text.replace("mode = \"enforce\"", "mode = \"report\"")),
            origin: None,
        }),
    )
    .await;
    assert_eq!(status, 409);
    let new_text = text
        .replace(", \"raw.test:2222\"", "")
        .replace("\"gone.test\"", "\"gone.test\", \"evil.test\"");
    assert_ne!(new_text, text);
    let (status, body) = call(
        &sock,
        &Request::Reload(ReloadRequest {
            text: Some(new_text.clone()),
            origin: Some("/host/policy.toml".into()),
        }),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let Response::Reloaded(r) = response(&body) else {
        panic!()
    };
    assert_eq!((r.revision, r.changed, r.closed), (2, true, 50));
    assert_eq!(r.hash, airlock_proxy::revision::hash(new_text.as_bytes()));
    // The same text again: nothing happens.
    let (_, body) = call(
        &sock,
        &Request::Reload(ReloadRequest {
            text: Some(new_text),
            origin: None,
        }),
    )
    .await;
    let Response::Reloaded(again) = response(&body) else {
        panic!()
    };
    assert_eq!((again.revision, again.changed), (2, false));
    // Every refused tunnel is closed; every other one still carries bytes.
    for mut s in doomed {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "a refused tunnel stayed open");
    }
    for s in &mut kept {
        s.write_all(b"pong").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"pong");
    }
    // The new revision decides new requests: evil.test is allowed now.
    let (_s, r) = request(h.addr, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n").await;
    assert_ne!(r.status, 403);
    drop(kept);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let reloads: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["event"] == "reload").collect();
    assert_eq!(reloads.len(), 3, "two refusals and one load: {reloads:?}");
    assert_eq!(reloads[0]["decision"], "deny");
    assert_eq!(reloads[1]["decision"], "deny");
    assert_eq!(reloads[2]["decision"], "allow");
    assert_eq!(reloads[2]["revision"], 2);
    assert_eq!(reloads[2]["closed"], 50);
    assert_eq!(reloads[2]["previous_hash"], reloads[0]["hash"]);
    // The reload line comes before the lines of the connections it closed.
    let at = |pred: &dyn Fn(&serde_json::Value) -> bool| lines.iter().position(pred).unwrap();
    let reload_at = at(&|l| l["event"] == "reload" && l["decision"] == "allow");
    let first_revoked = at(&|l| l["event"] == "close-revoked");
    assert!(reload_at < first_revoked);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["event"] == "close-revoked")
            .count(),
        50
    );
}

#[tokio::test]
async fn a_peer_that_is_not_an_operator_is_refused() {
    let mut h = admin_harness(&[]).await;
    let sock = h.admin.clone().unwrap();
    // The socket file's mode is not what is tested here: let anyone reach the socket so that
    // the peer check alone answers.
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    std::fs::set_permissions(
        sock.parent().unwrap(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs a client as another uid: run the tests as root (CI does)"
    );
    // Off the runtime's one thread, which must go on serving the proxy meanwhile.
    let path = sock.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--unix-socket"])
            .arg(&path)
            .arg("http://airlock/v1/counters")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("curl runs (scripts/install-test-deps installs it)")
    })
    .await
    .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        body.contains("\"forbidden\""),
        "{body} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(body.contains("uid 65534"), "{body}");
    let (status, body) = call(&sock, &Request::Metrics).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("airlock_admin_refused_total 1"));
    h.finish().await;
}

use std::os::unix::process::CommandExt as _;

#[tokio::test]
async fn a_dry_run_names_the_rule_that_decides_and_sends_nothing() {
    let mut h = admin_harness(&[]).await;
    let sock = h.admin.clone().unwrap();
    let ask = |url: &str, method: Option<&str>| {
        Request::Check(CheckQuery {
            url: url.into(),
            method: method.map(str::to_owned),
        })
    };
    let (status, body) = call(&sock, &ask("https://evil.test/x", Some("GET"))).await;
    assert_eq!(status, 200);
    let Response::Checked(c) = response(&body) else {
        panic!()
    };
    assert_eq!((c.decision.as_str(), c.stage.as_str()), ("deny", "host"));
    assert_eq!(c.reason.as_deref(), Some("blocked-by-policy"));
    assert_eq!(c.revision, 1);
    let (_, body) = call(&sock, &ask("https://allowed.test/v1/x", Some("POST"))).await;
    let Response::Checked(c) = response(&body) else {
        panic!()
    };
    assert_eq!(c.decision, "allow", "{c:?}");
    assert_eq!(c.rule.as_deref(), Some("allowed.test"));
    let (status, body) = call(&sock, &ask("ftp://allowed.test/", None)).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    // A dry run is no request: nothing counted, nothing looked up, nothing in the log.
    assert_eq!(counters(&sock).await.requests, 0);
    assert!(h.lookups.lock().unwrap().is_empty());
    let lines = h.finish().await;
    assert!(lines.iter().all(|l| l["host"] != "evil.test"), "{lines:?}");
}
