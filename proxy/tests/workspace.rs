//! The workspace's own secrets as exact needles (issue 21 item 2), from the agent's seat:
//! values of no known format (a database password from `.env`) handed over by the
//! entrypoint are refused to an allowed host in a body, a form-encoded body, the URL and a
//! header, split across the chunks of a streamed upload too, with the detector
//! `workspace:.env` named and nothing reaching the upstream; on an LLM API host they are
//! redacted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use airlock_proxy::limits::Limits;
use base64::Engine as _;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A database password of no known format, and one that changes when URL-encoded.
const DB_PASSWORD: &str = "hunter2-correct-horse";
const API_SECRET: &str = "s3cr3t/p@ss word!";

async fn harness(upstream: SocketAddr) -> Harness {
    // Both hosts are writable in the harness's policy: a 403 here is the secret's.
    let extra = Extra {
        workspace: vec![(".env", DB_PASSWORD), (".env", API_SECRET)],
        ..Extra::default()
    };
    Harness::start_extra(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("api.anthropic.com", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 80, upstream)],
        Limits::default(),
        &extra,
    )
    .await
}

fn post(path: &str, content_type: &str, body: &str) -> String {
    format!(
        "POST http://allowed.test{path} HTTP/1.1\r\nhost: allowed.test\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_workspace_value_of_any_format_never_reaches_an_allowed_host() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let encoded = "user=app&password=s3cr3t%2Fp%40ss+word%21";
    let attempts = [
        post(
            "/paste",
            "application/json",
            &format!("{{\"env\":\"DB_PASSWORD={DB_PASSWORD}\"}}"),
        ),
        post("/login", "application/x-www-form-urlencoded", encoded),
        // `base64 -w0 .env`: the value's encoding inside the encoded file.
        post(
            "/paste",
            "text/plain",
            &base64::engine::general_purpose::STANDARD
                .encode(format!("APP=1\nDB_PASSWORD={DB_PASSWORD}\n")),
        ),
        post(
            "/login",
            "application/x-www-form-urlencoded",
            "password=s3cr3t%2fp%40ss%20word%21",
        ),
        format!("GET http://allowed.test/q?p={DB_PASSWORD} HTTP/1.1\r\nhost: allowed.test\r\n\r\n"),
        "GET http://allowed.test/q?p=s3cr3t%2Fp%40ss%20word%21 HTTP/1.1\r\nhost: allowed.test\r\n\r\n"
            .to_owned(),
        format!(
            "GET http://allowed.test/h HTTP/1.1\r\nhost: allowed.test\r\nx-debug: {DB_PASSWORD}\r\n\r\n"
        ),
    ];
    for raw in &attempts {
        let (_s, r) = request(h.addr, raw).await;
        assert_eq!(r.status, 403, "{raw}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("foreign-secret"),
            "{raw}"
        );
        assert!(!r.body.contains(DB_PASSWORD) && !r.body.contains("s3cr3t"));
        // The agent learns which detector refused it, never the value.
        assert_eq!(r.json()["rule"], "secret detector workspace:.env", "{raw}");
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "a request reached the upstream"
    );
    // The same host takes the same request without the value: the 403s were the secret's.
    let (_s, r) = request(h.addr, &post("/paste", "text/plain", "DB_PASSWORD=***")).await;
    assert_eq!(r.status, 200);
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .collect();
    assert_eq!(refused.len(), attempts.len(), "{lines:?}");
    for l in &refused {
        assert_eq!(l["rule"], "secret detector workspace:.env", "{l}");
    }
    let text = serde_json::to_string(&lines).unwrap();
    assert!(
        !text.contains(DB_PASSWORD) && !text.contains("s3cr3t"),
        "a value reached the audit log"
    );
}

/// A streamed upload (chunked, past what is read whole) with the value split across
/// chunks sent apart, as is and URL-encoded: cut before any byte of it is sent.
#[tokio::test]
async fn a_workspace_value_split_across_chunks_never_leaves() {
    for (value, cut) in [(DB_PASSWORD, 7), ("s3cr3t%2Fp%40ss+word%21", 9)] {
        let (up, got) = recorder().await;
        let mut h = harness(up).await;
        let mut s = TcpStream::connect(h.addr).await.unwrap();
        s.write_all(
            b"POST http://allowed.test/upload HTTP/1.1\r\nhost: allowed.test\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
        let filler = format!("{}\npassword=", "f".repeat(70_000));
        let (a, rest) = value.split_at(cut);
        let (b, c) = rest.split_at(rest.len() / 2);
        for part in [filler.as_str(), a, b, c, "&tail=1"] {
            // Once the value is seen the proxy answers and may close: later writes can fail.
            let _ = s
                .write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = s.write_all(b"0\r\n\r\n").await;
        let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
            .await
            .expect("the proxy answers at once");
        assert_eq!(r.status, 403, "{value}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("foreign-secret")
        );
        drop(s);
        let lines = h.finish().await;
        let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
        assert!(
            !sent.contains(a),
            "a piece of the value reached the upstream ({value})"
        );
        assert!(
            lines.iter().any(|l| l["reason"] == "foreign-secret"
                && l["rule"] == "secret detector workspace:.env"),
            "{lines:?}"
        );
    }
}

/// On an LLM API host the agent sends file contents as context: the value arrives
/// overwritten (same length) and the request is audited `secret-redacted`.
#[tokio::test]
async fn a_workspace_value_in_a_prompt_reaches_the_llm_api_redacted() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let body = format!(
        "{{\"messages\":[{{\"role\":\"user\",\"content\":\"here is .env: DB_PASSWORD={DB_PASSWORD}\"}}]}}"
    );
    let raw = format!(
        "POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nhost: api.anthropic.com\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (_s, r) = request(h.addr, &raw).await;
    assert_eq!(r.status, 200);
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert!(
        !sent.contains(DB_PASSWORD),
        "the value reached the provider"
    );
    assert!(
        sent.contains(&format!("DB_PASSWORD={}\"", "*".repeat(DB_PASSWORD.len()))),
        "redacted in place, same length: {sent}"
    );
    let lines = h.finish().await;
    let l = lines_for(&lines, "api.anthropic.com");
    assert_eq!(l[0]["event"], "secret-redacted", "{l:?}");
    assert_eq!(l[0]["rule"], "secret detector workspace:.env");
}

// The policy's own detectors and actions (issue 21 item 1: `[[detectors]]`, `[secrets]`),
// from the agent's seat.

/// A format of the policy's own: `acme-token`, whose provider is `acme.allowed.test`.
const ACME: &str = "acme_0123456789abcdefghijABCDEFGHIJkl";
/// The vendor's documented example, allowed by the policy.
const ACME_EXAMPLE: &str = "acme_EXAMPLEEXAMPLEEXAMPLEEXAMPLE0000";
const SLACK: &str = "xoxb-1234567890-abcdefghijkl";
const STRIPE: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";

/// The harness with a policy that adds `acme-token`, logs `slack-token`, turns
/// `stripe-live-key` off and redacts `github-token` everywhere.
async fn policy_harness(upstream: SocketAddr) -> Harness {
    let extra = Extra {
        policy: format!(
            "\n[secrets]\nallow = [\"{ACME_EXAMPLE}\"]\n\n\
             [[detectors]]\nname = \"acme-token\"\npattern = '\\bacme_[A-Za-z0-9]{{32}}\\b'\nhosts = [\"acme.allowed.test\"]\n\n\
             [[detectors]]\nname = \"slack-token\"\naction = \"log\"\n\n\
             [[detectors]]\nname = \"stripe-live-key\"\naction = \"off\"\n\n\
             [[detectors]]\nname = \"github-token\"\naction = \"redact\"\n"
        ),
        ..Extra::default()
    };
    Harness::start_extra(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("acme.allowed.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 80, upstream)],
        Limits::default(),
        &extra,
    )
    .await
}

fn post_to(host: &str, body: &str) -> String {
    format!(
        "POST http://{host}/paste HTTP/1.1\r\nhost: {host}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The policy's detector refuses its secret to a host that is not its provider's, in a
/// body and in a header, naming the detector, with nothing reaching the upstream; to its
/// provider's host it goes; the vendor's documented example (allowed) goes anywhere.
#[tokio::test]
async fn a_policy_detectors_secret_goes_to_its_provider_only() {
    let (up, got) = recorder().await;
    let mut h = policy_harness(up).await;
    for raw in [
        post_to("allowed.test", &format!("ACME_TOKEN={ACME}\n")),
        format!(
            "GET http://allowed.test/h HTTP/1.1\r\nhost: allowed.test\r\nauthorization: Bearer {ACME}\r\n\r\n"
        ),
    ] {
        let (_s, r) = request(h.addr, &raw).await;
        assert_eq!(r.status, 403, "{raw}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("foreign-secret")
        );
        assert_eq!(r.json()["rule"], "secret detector acme-token");
        assert!(!r.body.contains(ACME));
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "a request reached the upstream"
    );
    let (_s, r) = request(h.addr, &post_to("acme.allowed.test", &format!("t={ACME}"))).await;
    assert_eq!(r.status, 200, "its provider's host takes it");
    let (_s, r) = request(
        h.addr,
        &post_to("allowed.test", &format!("t={ACME_EXAMPLE}")),
    )
    .await;
    assert_eq!(r.status, 200, "the documented example is no secret");
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert_eq!(
        sent.matches(ACME).count(),
        1,
        "only to acme.allowed.test: {sent}"
    );
    assert!(sent.contains(ACME_EXAMPLE));
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .collect();
    assert_eq!(refused.len(), 2, "{lines:?}");
    assert!(
        refused
            .iter()
            .all(|l| l["decision"] == "deny" && l["rule"] == "secret detector acme-token")
    );
    assert!(
        !serde_json::to_string(&lines).unwrap().contains(ACME),
        "the value reached the log"
    );
}

/// `log`: the request goes on as it is and its line says so (`report`, `foreign-secret`,
/// the detector), read whole or streamed; `off`: nothing happens; `redact` on a host that
/// is no LLM API: the upstream gets the value overwritten.
#[tokio::test]
async fn a_detectors_action_log_off_or_redact_is_applied() {
    let (up, got) = recorder().await;
    let mut h = policy_harness(up).await;
    let (_s, r) = request(h.addr, &post_to("allowed.test", &format!("SLACK={SLACK}"))).await;
    assert_eq!(r.status, 200, "log lets it through");
    let (_s, r) = request(
        h.addr,
        &post_to("allowed.test", &format!("STRIPE={STRIPE}")),
    )
    .await;
    assert_eq!(r.status, 200, "off finds nothing");
    let gh = format!("ghp_{}", "a1B2".repeat(9));
    let (_s, r) = request(h.addr, &post_to("allowed.test", &format!("GH={gh}"))).await;
    assert_eq!(r.status, 200, "redact lets the request go on");
    // Streamed (chunked, past what is read whole): logged on the request's final line.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"POST http://allowed.test/upload HTTP/1.1\r\nhost: allowed.test\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let filler = "f".repeat(70_000);
    for part in [filler.as_str(), "\nslack=", SLACK, "\n"] {
        s.write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
            .await
            .unwrap();
    }
    s.write_all(b"0\r\n\r\n").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("an answer");
    assert_eq!(r.status, 200);
    drop(s);
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert_eq!(sent.matches(SLACK).count(), 2, "logged, sent as it is");
    assert!(sent.contains(&format!("STRIPE={STRIPE}")));
    assert!(!sent.contains(&gh), "redacted on its way");
    assert!(
        sent.contains(&format!("GH={}", "*".repeat(gh.len()))),
        "same length: {sent}"
    );
    let lines = h.finish().await;
    let paste: Vec<_> = lines.iter().filter(|l| l["path"] == "/paste").collect();
    assert_eq!(paste.len(), 3, "{lines:?}");
    for l in [
        paste[0],
        lines.iter().find(|l| l["path"] == "/upload").unwrap(),
    ] {
        assert_eq!(l["decision"], "report", "{l}");
        assert_eq!(l["reason"], "foreign-secret", "{l}");
        assert_eq!(l["rule"], "secret detector slack-token", "{l}");
        assert_eq!(l["status"], 200, "{l}");
    }
    assert_eq!(paste[1]["decision"], "allow", "off: {}", paste[1]);
    assert!(paste[1]["reason"].is_null() && !paste[1]["rule"].to_string().contains("stripe"));
    assert_eq!(paste[2]["decision"], "allow", "{}", paste[2]);
    assert_eq!(paste[2]["event"], "secret-redacted");
    assert_eq!(paste[2]["rule"], "secret detector github-token");
    let text = serde_json::to_string(&lines).unwrap();
    assert!(
        !text.contains(SLACK) && !text.contains(&gh),
        "a value reached the log"
    );
}

/// The built-in `jwt` detector has no provider host, so by default it logs instead of
/// refusing: a token in a header or a body goes on as it is, and each request's line says
/// `report`, `foreign-secret`, `secret detector jwt` (never the value), so an operator sees
/// where the agent sent one and can make it `deny` with `[[detectors]] name = "jwt"`.
#[tokio::test]
async fn a_jwt_going_anywhere_is_logged_not_refused() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let jwt = format!(
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.{}",
        "Zm9vYmFyYmF6".repeat(4)
    );
    for raw in [
        post("/paste", "text/plain", &format!("token={jwt}")),
        format!(
            "GET http://allowed.test/me HTTP/1.1\r\nhost: allowed.test\r\nauthorization: Bearer {jwt}\r\n\r\n"
        ),
    ] {
        let (_s, r) = request(h.addr, &raw).await;
        assert_eq!(r.status, 200, "{raw}");
    }
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert_eq!(sent.matches(&jwt).count(), 2, "sent as it is: {sent}");
    let lines = h.finish().await;
    let logged: Vec<_> = lines
        .iter()
        .filter(|l| l["rule"] == "secret detector jwt")
        .collect();
    assert_eq!(logged.len(), 2, "{lines:?}");
    for l in logged {
        assert_eq!(l["decision"], "report", "{l}");
        assert_eq!(l["reason"], "foreign-secret", "{l}");
    }
    assert!(
        !serde_json::to_string(&lines).unwrap().contains(&jwt),
        "the value reached the log"
    );
}
