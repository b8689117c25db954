//! Upload budgets (`[limits]`): what the agent sends to a host is counted on every path,
//! and past the budget nothing more leaves. A whole body that would spend it is not sent; a
//! streamed body is cut at the chunk that spends it; a passthrough tunnel stops relaying;
//! the next request is refused `429 budget-exhausted`, the budget and its reset named, and
//! every cut and refusal is audited.

use airlock_proxy::limits::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

const BUDGET: &str = "\n[limits]\nupload_bytes_per_hour = 4096\n";

async fn harness(routes: &[(std::net::SocketAddr, std::net::SocketAddr)]) -> Harness {
    Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP]), ("raw.test", &[ALLOWED_IP])],
        routes,
        Limits::default(),
        &Extra {
            policy: BUDGET.into(),
            admin: true,
            ..Extra::default()
        },
    )
    .await
}

fn post(len: usize) -> String {
    format!(
        "POST http://allowed.test/up HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: {len}\r\n\r\n{}",
        "Z".repeat(len)
    )
}

fn assert_exhausted(r: &Resp) {
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("budget-exhausted")
    );
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let rule = body["rule"].as_str().unwrap();
    assert!(
        rule.contains("upload_bytes_per_hour 4096"),
        "the denial names the budget: {body}"
    );
}

#[tokio::test]
async fn attack_bodies_past_the_budget_never_leave_and_the_host_is_refused_until_the_reset() {
    let (up, got) = recorder().await;
    let mut h = harness(&[route(ALLOWED_IP, 80, up)]).await;
    // 3,000 bytes: within the budget, sent.
    let (_s, r) = request(h.addr, &post(3000)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // 3,000 more would spend it: read whole, not sent.
    let (_s, r) = request(h.addr, &post(3000)).await;
    assert_exhausted(&r);
    // Any request now: refused before anything is sent, the reset named.
    let (_s, r) = request(
        h.addr,
        "GET http://allowed.test/x HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
    )
    .await;
    assert_exhausted(&r);
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        body["rule"].as_str().unwrap().contains("resets at 20"),
        "{body}"
    );
    // The operator sees the sandbox's budgets spent so far this hour.
    let c = crate::admin::counters(&h.admin.clone().unwrap()).await;
    let used = |name: &str| c.budgets.iter().find(|b| b.budget == name).map(|b| b.used);
    assert!(used("sandbox_upload_bytes_per_hour") >= Some(3000), "{c:?}");
    assert_eq!(
        used("sandbox_requests_per_hour"),
        Some(2),
        "the refused GET spent none: {c:?}"
    );
    let sent = got.lock().unwrap().clone();
    assert_eq!(
        sent.iter().filter(|b| **b == b'Z').count(),
        3000,
        "only the first body reached the upstream"
    );
    let lines = h.finish().await;
    let refused = lines
        .iter()
        .filter(|l| l["reason"] == "budget-exhausted" && l["decision"] == "deny")
        .count();
    assert_eq!(refused, 2, "{lines:#?}");
}

#[tokio::test]
async fn attack_a_streamed_body_is_cut_at_the_chunk_that_spends_the_budget() {
    let (up, got) = recorder().await;
    let mut h = harness(&[route(ALLOWED_IP, 80, up)]).await;
    // Chunked and large: streamed, counted as it goes.
    let mut s = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    s.write_all(
        b"POST http://allowed.test/stream HTTP/1.1\r\nhost: allowed.test\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let chunk = format!("1000\r\n{}\r\n", "b".repeat(0x1000));
    for _ in 0..64 {
        if s.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let r = read_resp(&mut s).await;
    assert_exhausted(&r);
    let sent = got.lock().unwrap().clone();
    let leaked = sent.iter().filter(|b| **b == b'b').count();
    assert!(leaked <= 4096, "{leaked} bytes of the body left");
    assert!(
        !sent.ends_with(b"0\r\n\r\n"),
        "the upstream never saw a whole body"
    );
    let lines = h.finish().await;
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "budget-exhausted" && l["path"] == "/stream"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn attack_a_passthrough_tunnel_stops_at_the_budget() {
    let (echo, _peers) = echo_server().await;
    let mut h = harness(&[route(ALLOWED_IP, 443, echo)]).await;
    let (mut s, r) = request(
        h.addr,
        "CONNECT raw.test:443 HTTP/1.1\r\nhost: raw.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    // Within the budget: relayed both ways.
    s.write_all(&[b'c'; 1000]).await.unwrap();
    let mut back = vec![0u8; 1000];
    s.read_exact(&mut back).await.unwrap();
    // Past it: the tunnel ends; what came back is at most the budget.
    let big = vec![b'c'; 64 * 1024];
    let _ = s.write_all(&big).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(
        1000 + rest.len() <= 4096,
        "{} bytes relayed",
        1000 + rest.len()
    );
    drop(s);
    // The next tunnel to that host is refused.
    let (_s, r) = request(
        h.addr,
        "CONNECT raw.test:443 HTTP/1.1\r\nhost: raw.test:443\r\n\r\n",
    )
    .await;
    assert_exhausted(&r);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let cut = lines_for(&lines, "raw.test")
        .into_iter()
        .find(|l| l["event"] == "close-budget")
        .unwrap_or_else(|| panic!("no close-budget line: {lines:#?}"));
    assert!(
        cut["rule"]
            .as_str()
            .unwrap()
            .contains("upload_bytes_per_hour 4096"),
        "{cut}"
    );
}
