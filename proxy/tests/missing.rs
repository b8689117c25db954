//! A credential that was not configured when the sandbox started (the hand-off's
//! `missing`): every request it would have authenticated is refused `credential-missing`,
//! the answer naming the credential and the operator's fix, the refusal audited, and not
//! one byte of it reaches the upstream. A git push on the service port gets the refusal in
//! the form git prints (`fatal: remote error: ...`); a git fetch goes on anonymously.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const FIX: &str = "set ANTHROPIC_API_KEY on the host and start the sandbox again";
const GIT_FIX: &str = "start again with GITHUB_TOKEN_FILE=<that file> scripts/docker-run REPO";

/// An upstream that counts every byte it is sent and answers nothing (it hangs up after
/// the first read, so a TLS handshake with it fails at once).
async fn recorder() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let bytes = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&bytes);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if let Ok(n) = s.read(&mut buf).await {
                    seen.fetch_add(n, Ordering::SeqCst);
                }
            });
        }
    });
    (addr, bytes)
}

/// `CONNECT host:443` on `proxy`, then TLS trusting the appliance CA.
async fn tunnel(
    h: &Harness,
    proxy: SocketAddr,
    host: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nhost: {host}:443\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from(host.to_owned()).unwrap(), s)
        .await
        .expect("intercepted with a leaf of the appliance CA")
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "{buf:?}");
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

/// The git service port's key of the push test's start.
const SERVICE_KEY: airlock_ticket::ServiceKey = airlock_ticket::ServiceKey::from_bytes([5; 32]);

/// A ticket of the git API for `allowed.test/o/r`, sealed now.
fn ticket(op: airlock_ticket::Op, updates: Vec<airlock_ticket::RefUpdate>) -> String {
    airlock_ticket::Ticket::new(
        op,
        vec!["allowed.test/o/r".into()],
        updates,
        std::time::SystemTime::now(),
    )
    .unwrap()
    .seal(&SERVICE_KEY)
}

/// One request on `s`: the head and the body (content-length).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, raw: &str) -> (String, String) {
    s.write_all(raw.as_bytes()).await.unwrap();
    let head = read_head(s).await;
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn a_request_for_a_missing_llm_key_is_refused_with_the_fix_and_never_sent() {
    let (up, bytes) = recorder().await;
    let extra = Extra {
        policy: r#"
[[credentials]]
name = "anthropic"
source = { env = "ANTHROPIC_API_KEY" }
hosts = ["api.anthropic.com"]
header = "x-api-key"
format = "{}"
"#
        .into(),
        missing: vec![("anthropic", "airlock-placeholder-anthropic-0a", FIX)],
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("api.anthropic.com", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    let mut tls = tunnel(&h, h.addr, "api.anthropic.com").await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    for (method, extra_headers) in [
        ("POST", "x-api-key: airlock-placeholder-anthropic-0a\r\n"),
        // Without the placeholder, and a read: the key is still what the host needs.
        ("GET", ""),
    ] {
        let raw = format!(
            "{method} /v1/messages HTTP/1.1\r\nhost: api.anthropic.com\r\n{extra_headers}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let (head, answer) = exchange(&mut tls, &raw).await;
        assert!(head.starts_with("HTTP/1.1 403"), "{method}: {head}");
        assert!(
            head.contains("x-airlock-error: credential-missing"),
            "{head}"
        );
        let json: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(json["error"], "credential-missing");
        assert_eq!(json["credential"], "anthropic");
        assert_eq!(json["host"], "api.anthropic.com");
        let message = json["message"].as_str().unwrap();
        assert!(message.contains("\"anthropic\""), "{message}");
        assert!(message.contains(FIX), "{message}");
    }
    drop(tls);
    assert_eq!(
        bytes.load(Ordering::SeqCst),
        0,
        "nothing of the refused requests reached the upstream"
    );
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "credential-missing")
        .collect();
    assert_eq!(refused.len(), 2, "{lines:?}");
    for l in refused {
        assert_eq!(l["decision"], "deny", "{l}");
        assert_eq!(l["credential"], "anthropic", "{l}");
        assert_eq!(l["host"], "api.anthropic.com", "{l}");
        assert_eq!(l["path"], "/v1/messages", "{l}");
    }
}

#[tokio::test]
async fn a_push_without_the_git_token_is_refused_in_words_git_prints() {
    let (up, bytes) = recorder().await;
    let extra = Extra {
        policy: r#"
[[credentials]]
name = "github"
source = { file = "/run/secrets/github_token" }
hosts = ["allowed.test"]
header = "authorization"
format = "git-basic"

[git]
repositories = ["allowed.test/o/r"]
"#
        .into(),
        missing: vec![("github", "airlock-placeholder-github-0b", GIT_FIX)],
        git_service: Some((SERVICE_KEY, None)),
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    // What `git push` asks first, on the git API's service port (with the git API's ticket).
    let push = ticket(
        airlock_ticket::Op::Push,
        vec![
            airlock_ticket::RefUpdate::new("refs/heads/sandbox/t/x", None, &"1".repeat(40))
                .unwrap(),
        ],
    );
    let mut tls = tunnel(&h, h.service, "allowed.test").await;
    let (head, body) = exchange(
        &mut tls,
        &format!("GET /o/r.git/info/refs?service=git-receive-pack HTTP/1.1\r\nhost: allowed.test\r\nx-airlock-ticket: {push}\r\n\r\n"),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: application/x-git-receive-pack-advertisement"),
        "{head}"
    );
    assert!(
        head.contains("x-airlock-error: credential-missing"),
        "{head}"
    );
    // One pkt-line: four hex digits of length (their own included), then `ERR <message>`.
    let len = usize::from_str_radix(&body[..4], 16).unwrap();
    assert_eq!(len, body.len(), "{body}");
    let message = body[4..].strip_prefix("ERR ").unwrap();
    assert!(message.contains("git push"), "{message}");
    assert!(message.contains("credential \"github\""), "{message}");
    assert!(message.contains(GIT_FIX), "{message}");
    assert!(message.ends_with('\n') && !message.trim_end().contains('\n'));
    drop(tls);
    assert_eq!(
        bytes.load(Ordering::SeqCst),
        0,
        "nothing of the push reached the upstream"
    );
    // A fetch needs no token from a public repository: it goes upstream, unauthenticated
    // (here to an upstream that speaks no TLS, so the proxy answers 502).
    let fetch = ticket(airlock_ticket::Op::Fetch, vec![]);
    let mut tls = tunnel(&h, h.service, "allowed.test").await;
    let (head, _) = exchange(
        &mut tls,
        &format!("GET /o/r.git/info/refs?service=git-upload-pack HTTP/1.1\r\nhost: allowed.test\r\nx-airlock-ticket: {fetch}\r\n\r\n"),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(bytes.load(Ordering::SeqCst) > 0, "the fetch went upstream");
    drop(tls);
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "credential-missing")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    assert_eq!(refused[0]["credential"], "github");
    assert_eq!(refused[0]["kind"], "git-service");
    assert_eq!(refused[0]["decision"], "deny");
}
