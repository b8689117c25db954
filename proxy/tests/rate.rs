//! Rate limits and circuit breakers (`[limits]`): the agent floods one host; past its
//! bucket every request is refused `429 rate-limited` with `Retry-After`, audited, and
//! never reaches the upstream; other hosts are untouched; a request inside an intercepted
//! connection takes its own token; a reload that raises the limit applies to the next
//! request. An upstream that keeps failing is answered `503 upstream-circuit-open` at once
//! until a probe after the cool-down finds it well.

use airlock_proxy::limits::Limits;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::net::TcpListener;

use crate::common::*;

const LIMITS: &str = "\n[limits]\nrequests_per_second = 1\nrequest_burst = 3\n";

fn get(host: &str) -> String {
    format!("GET http://{host}/x HTTP/1.1\r\nhost: {host}\r\n\r\n")
}

#[tokio::test]
async fn attack_a_flood_to_one_host_is_refused_429_and_never_reaches_it() {
    let (up, mut heads) = http_server().await;
    let extra = Extra {
        policy: LIMITS.into(),
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("readonly.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 80, up)],
        Limits::default(),
        &extra,
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let (_s, r) = request(h.addr, &get("allowed.test")).await;
        if r.status == 429 {
            assert_eq!(r.header("retry-after").as_deref(), Some("1"));
            assert_eq!(r.header("x-airlock-error").as_deref(), Some("rate-limited"));
            let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            assert_eq!(body["error"], "rate-limited", "{body}");
            assert!(
                body["rule"]
                    .as_str()
                    .unwrap()
                    .contains("1 requests/s, burst 3"),
                "the denial names the limit: {body}"
            );
            assert!(
                body["message"].as_str().unwrap().contains("Retry-After"),
                "{body}"
            );
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses[..3], [200, 200, 200], "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");
    // Another host has its own bucket.
    let (_s, r) = request(h.addr, &get("readonly.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The upstream heard exactly the four requests that passed.
    let mut heard = 0;
    while let Ok(Some(_)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), heads.recv()).await
    {
        heard += 1;
    }
    assert_eq!(heard, 4);

    // A reload that raises the limit decides the next request (the bucket refills at the
    // new rate).
    let text = "[sandbox]\nname = \"t\"\n[network]\nallow = [\"allowed.test\"]\n[limits]\nrequests_per_second = 100000\nrequest_burst = 3\n";
    let policy = airlock_policy::Policy::parse(text, std::path::Path::new("p.toml")).unwrap();
    let rules = airlock_proxy::snapshot::Rules::new(
        policy,
        airlock_proxy::credentials::Credentials::none(),
    )
    .unwrap();
    h.running.as_ref().unwrap().replace_rules(rules);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (_s, r) = request(h.addr, &get("allowed.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);

    let lines = h.finish().await;
    let limited: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "rate-limited")
        .collect();
    assert_eq!(limited.len(), 7, "every refusal is audited");
    for l in limited {
        assert_eq!(l["decision"], "deny", "{l}");
        assert_eq!(l["host"], "allowed.test", "{l}");
    }
}

#[tokio::test]
async fn each_request_inside_an_intercepted_connection_takes_a_token() {
    let (tls, root, got) = tls_recorder("allowed.test").await;
    let extra = Extra {
        policy: LIMITS.into(),
        upstream_roots: vec![root],
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, tls)],
        Limits::default(),
        &extra,
    )
    .await;
    // The CONNECT takes the first token of three.
    let mut t = intercepted(&h, "allowed.test").await;
    // Two requests on the kept connection take the other two; the third is refused.
    for (i, want) in [(1, 200), (2, 200), (3, 429)] {
        t.write_all(format!("GET /r{i} HTTP/1.1\r\nhost: allowed.test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = read_resp(&mut t).await;
        assert_eq!(r.status, want, "request {i}: {}", r.head);
    }
    drop(t);
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert!(sent.contains("GET /r2 "), "{sent}");
    assert!(
        !sent.contains("GET /r3 "),
        "the refused request never left: {sent}"
    );
    let lines = h.finish().await;
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "rate-limited" && l["path"] == "/r3"),
        "{lines:#?}"
    );
}

/// An upstream answering every request with the status in `status`; counts the requests.
async fn switchable() -> (std::net::SocketAddr, Arc<AtomicU16>, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let status = Arc::new(AtomicU16::new(500));
    let heard = Arc::new(AtomicUsize::new(0));
    let (st, n) = (Arc::clone(&status), Arc::clone(&heard));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (st, n) = (Arc::clone(&st), Arc::clone(&n));
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                loop {
                    head.clear();
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read_exact(&mut b).await.is_err() {
                            return;
                        }
                        head.push(b[0]);
                    }
                    n.fetch_add(1, Ordering::SeqCst);
                    let code = st.load(Ordering::SeqCst);
                    let resp = format!("HTTP/1.1 {code} X\r\ncontent-length: 2\r\n\r\nok");
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, status, heard)
}

#[tokio::test]
async fn an_upstream_that_keeps_failing_is_answered_at_once_until_a_probe_finds_it_well() {
    let (sick, status, heard) = switchable().await;
    let (well, _heads) = http_server().await;
    let extra = Extra {
        policy: "\n[limits]\ncircuit_failures = 3\ncircuit_cooldown_seconds = 1\n".into(),
        admin: true,
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("readonly.test", &["198.51.100.7"]),
        ],
        &[route(ALLOWED_IP, 80, sick), route("198.51.100.7", 80, well)],
        Limits::default(),
        &extra,
    )
    .await;
    // Three failures pass through as the upstream's own answers.
    for _ in 0..3 {
        let (_s, r) = request(h.addr, &get("allowed.test")).await;
        assert_eq!(r.status, 500, "{}", r.body);
    }
    // Then the circuit is open: 503 at once, the upstream hears nothing more.
    let (_s, r) = request(h.addr, &get("allowed.test")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("upstream-circuit-open")
    );
    assert!(
        r.body.contains("circuit open after 3 failures"),
        "{}",
        r.body
    );
    assert_eq!(heard.load(Ordering::SeqCst), 3);
    // The operator sees it open.
    let sock = h.admin.clone().unwrap();
    let c = crate::admin::counters(&sock).await;
    assert_eq!(c.open_circuits, ["allowed.test:80"], "{c:?}");
    assert_eq!(c.denied_by_reason.get("upstream-circuit-open"), Some(&1));
    // Another upstream is untouched.
    let (_s, r) = request(h.addr, &get("readonly.test")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The upstream recovers; after the cool-down one probe finds it well and the circuit
    // closes.
    status.store(200, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for _ in 0..3 {
        let (_s, r) = request(h.addr, &get("allowed.test")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(heard.load(Ordering::SeqCst), 6);
    assert!(crate::admin::counters(&sock).await.open_circuits.is_empty());
    let lines = h.finish().await;
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["reason"] == "upstream-circuit-open")
            .count(),
        1
    );
}
