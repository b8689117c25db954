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

fn get() -> String {
    "GET http://allowed.test/x HTTP/1.1\r\nhost: allowed.test\r\n\r\n".to_owned()
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
async fn attack_a_body_past_the_budget_never_leaves_and_a_request_that_sends_nothing_still_passes()
{
    let (up, got) = recorder().await;
    let mut h = harness(&[route(ALLOWED_IP, 80, up)]).await;
    // 3,000 bytes: within the budget, sent.
    let (_s, r) = request(h.addr, &post(3000)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // 3,000 more would spend it: read whole, not sent.
    let (_s, r) = request(h.addr, &post(3000)).await;
    assert_exhausted(&r);
    // A request that sends no body spends nothing: 1,096 bytes are left.
    let (_s, r) = request(h.addr, &get()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The operator sees the sandbox's budgets spent so far this hour.
    let c = crate::admin::counters(&h.admin.clone().unwrap()).await;
    let used = |name: &str| c.budgets.iter().find(|b| b.budget == name).map(|b| b.used);
    // Only the body that left counts: the refused one was judged before it was sent.
    assert_eq!(used("sandbox_upload_bytes_per_hour"), Some(3000), "{c:?}");
    let host = c
        .budgets
        .iter()
        .find(|b| b.budget == "upload_bytes_per_hour")
        .unwrap_or_else(|| panic!("{c:?}"));
    let scope = host.scope.as_deref().unwrap_or_default();
    assert!(
        scope.starts_with("uid ") && scope.ends_with(", allowed.test"),
        "{c:?}"
    );
    assert_eq!((host.used, host.limit), (3000, 4096));
    assert_eq!(used("sandbox_requests_per_hour"), Some(3), "{c:?}");
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
    assert_eq!(refused, 1, "{lines:#?}");
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
    // The budget is spent: any request to the host is refused before anything is sent,
    // the reset named.
    let (_s, r) = request(h.addr, &get()).await;
    assert_exhausted(&r);
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        body["rule"].as_str().unwrap().contains("resets at 20"),
        "{body}"
    );
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
    let r = refused_in_tunnel(&h, "raw.test", 443).await;
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

/// An LLM API answering every request with `body` as `content_type`.
async fn llm(content_type: &'static str, body: &'static str) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if complete(&buf) {
                        buf.clear();
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

const MESSAGE: &str = r#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":300,"output_tokens":300}}"#;
const STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":300,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":300}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

async fn llm_harness(up: std::net::SocketAddr, other: std::net::SocketAddr) -> Harness {
    Harness::start_extra(
        "enforce",
        &[
            ("api.anthropic.com", &[ALLOWED_IP]),
            ("allowed.test", &["198.51.100.7"]),
        ],
        &[route(ALLOWED_IP, 80, up), route("198.51.100.7", 80, other)],
        Limits::default(),
        &Extra {
            policy: "\n[limits]\nllm_tokens_per_hour = 1000\n".into(),
            admin: true,
            ..Extra::default()
        },
    )
    .await
}

fn message_post() -> String {
    "POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nhost: api.anthropic.com\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}".to_owned()
}

#[tokio::test]
async fn llm_tokens_past_the_budget_refuse_the_next_request_and_the_answer_under_way_finishes() {
    for (content_type, body) in [("application/json", MESSAGE), ("text/event-stream", STREAM)] {
        let up = llm(content_type, body).await;
        let (other, _heads) = http_server().await;
        let mut h = llm_harness(up, other).await;
        // 600 tokens, then 1,200: the answer that spends the budget arrives whole.
        for _ in 0..2 {
            let (_s, r) = request(h.addr, &message_post()).await;
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.body, body, "the agent gets every byte as the API sent it");
        }
        // The next request to the LLM API is refused, naming the budget.
        let (_s, r) = request(h.addr, &message_post()).await;
        assert_eq!(r.status, 429, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["error"], "budget-exhausted", "{v}");
        assert!(
            v["rule"]
                .as_str()
                .unwrap()
                .contains("llm_tokens_per_hour 1000 spent"),
            "{v}"
        );
        // Other hosts are not LLM APIs: they go on.
        let (_s, r) = request(
            h.addr,
            "GET http://allowed.test/x HTTP/1.1\r\nhost: allowed.test\r\n\r\n",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let c = crate::admin::counters(&h.admin.clone().unwrap()).await;
        assert_eq!(
            c.denied_by_reason.get("budget-exhausted"),
            Some(&1),
            "{c:?}"
        );
        let tokens = c
            .budgets
            .iter()
            .find(|b| b.budget == "sandbox_llm_tokens_per_hour");
        assert_eq!(tokens.map(|b| b.used), Some(1200), "{c:?}");
        let session = c.budgets.iter().find(|b| b.budget == "llm_tokens_per_hour");
        assert_eq!(
            session.map(|b| (b.used, b.limit)),
            Some((1200, 1000)),
            "{c:?}"
        );
        // The warning and the overshoot are audit lines (notes, not requests).
        assert_eq!(c.requests, 4, "{c:?}");
        let lines = h.finish().await;
        let note = |event: &str| {
            lines
                .iter()
                .find(|l| l["event"] == event)
                .and_then(|l| l["rule"].as_str().map(str::to_owned))
                .unwrap_or_else(|| panic!("no {event} line: {lines:#?}"))
        };
        assert!(note("llm-tokens-warning").contains("used 1200"));
        assert!(note("llm-tokens-spent").contains("600 tokens (300 in, 300 out)"));
        assert!(note("llm-tokens-spent").contains("200 over"));
    }
}

#[tokio::test]
async fn attack_a_transparent_passthrough_connection_stops_at_the_budget() {
    let (echo, _peers) = echo_server().await;
    let mut h = harness(&[route(ALLOWED_IP, 443, echo)]).await;
    // A TLS client redirected to the transparent listener, its host passthrough.
    let hello = airlock_proxy::sniff::test_client_hello(Some("raw.test"));
    *h.orig_dst.0.lock().unwrap() =
        Some(std::net::SocketAddr::new(ALLOWED_IP.parse().unwrap(), 443));
    let mut s = tokio::net::TcpStream::connect(h.transparent).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).await.unwrap();
    // Past the budget: the connection ends; what came back is at most the budget.
    let _ = s.write_all(&vec![b'c'; 64 * 1024]).await;
    let rest = read_to_close(&mut s).await;
    assert!(
        hello.len() + rest.len() <= 4096,
        "{} bytes relayed",
        hello.len() + rest.len()
    );
    drop(s);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let lines = h.finish().await;
    let cut = lines
        .iter()
        .find(|l| l["kind"] == "transparent" && l["event"] == "close-budget")
        .unwrap_or_else(|| panic!("no close-budget line: {lines:#?}"));
    assert!(
        cut["rule"]
            .as_str()
            .unwrap()
            .contains("upload_bytes_per_hour 4096"),
        "{cut}"
    );
}
