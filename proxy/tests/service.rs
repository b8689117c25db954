//! The git service port trusts a proof, not a group: every smart-HTTP request there must
//! carry a ticket the git API sealed with this start's service key, bound to the request's
//! repository and operation, and a push may make only the ref updates the ticket signed,
//! and of those only what the git rules allow (no deletion, no tag, no protected branch, no
//! branch outside the sandbox's own). Everything else is refused in words git prints,
//! audited with a stable reason, and not one byte of it reaches the upstream.
//!
//! The attacker here holds the service port (as anything running with the git API's
//! identity does: the firewall's group rule is the outer fence) and speaks smart HTTP by
//! hand: no ticket, forged, expired, for another repository or operation, replayed, and
//! pushes whose updates differ from the signed ones.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::common::*;
use airlock_ticket::{Op, RefUpdate, ServiceKey, Ticket};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: ServiceKey = ServiceKey::from_bytes([9; 32]);
const TOKEN: &str = "service-port-real-token-0000";
const PLACEHOLDER: &str = "airlock-placeholder-github-0a";
const REPO: &str = "allowed.test/o/r";
const A: &str = "1111111111111111111111111111111111111111";
const B: &str = "2222222222222222222222222222222222222222";
const C: &str = "3333333333333333333333333333333333333333";
const ZERO: &str = "0000000000000000000000000000000000000000";
/// The sandbox's own branch (`sandbox/{sandbox}/*`, the sandbox is `t`).
const OWN: &str = "refs/heads/sandbox/t/x";

/// The harness's policy plus the git credential and `[git]` (defaults: push
/// `sandbox/t/*`, protected `main`, `master`, `release/*`, no tags).
const POLICY: &str = r#"
[[credentials]]
name = "github"
source = { file = "/run/secrets/github_token" }
hosts = ["allowed.test"]
header = "authorization"
format = "git-basic"

[git]
repositories = ["allowed.test/o/r", "allowed.test/o/other"]
"#;

/// A proxy whose service port leads to a TLS upstream that records every byte it is sent;
/// the sandbox started on branch `feature`.
async fn start() -> (Harness, Arc<Mutex<Vec<u8>>>) {
    let (up, root, got) = tls_recorder("allowed.test").await;
    let extra = Extra {
        policy: POLICY.into(),
        credentials: vec![("github", TOKEN, PLACEHOLDER)],
        git_service: Some((KEY, Some("feature"))),
        upstream_roots: vec![root],
        ..Extra::default()
    };
    let h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    (h, got)
}

/// `CONNECT allowed.test:443` on the service port, then TLS trusting the appliance CA.
async fn tunnel(h: &Harness) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut s = TcpStream::connect(h.service).await.unwrap();
    s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("allowed.test").unwrap(), s)
        .await
        .expect("intercepted with a leaf of the appliance CA")
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "closed inside a head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

/// One request on `s`: the head and the body (content-length).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, raw: &[u8]) -> (String, Vec<u8>) {
    s.write_all(raw).await.unwrap();
    let head = read_head(s).await;
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (head, body)
}

/// A ticket sealed with `key`, issued at `at`.
fn sealed_at(
    key: &ServiceKey,
    op: Op,
    repos: &[&str],
    updates: &[(&str, &str, &str)],
    at: SystemTime,
) -> String {
    let updates = updates
        .iter()
        .map(|(name, old, new)| RefUpdate::new(name, Some(old), new).unwrap())
        .collect();
    Ticket::new(
        op,
        repos.iter().map(|r| (*r).to_owned()).collect(),
        updates,
        at,
    )
    .unwrap()
    .seal(key)
}

/// A ticket of this start, issued now.
fn sealed(op: Op, repos: &[&str], updates: &[(&str, &str, &str)]) -> String {
    sealed_at(&KEY, op, repos, updates, SystemTime::now())
}

/// The `x-airlock-ticket` header line (empty for none).
fn ticket_header(ticket: Option<&str>) -> String {
    ticket.map_or_else(String::new, |t| format!("x-airlock-ticket: {t}\r\n"))
}

/// `GET /o/r.git/info/refs?service=<service>` as git sends it.
fn advertisement(repo_path: &str, service: &str, ticket: Option<&str>) -> Vec<u8> {
    format!(
        "GET /{repo_path}.git/info/refs?service={service} HTTP/1.1\r\nhost: allowed.test\r\n{}\r\n",
        ticket_header(ticket)
    )
    .into_bytes()
}

/// `POST /o/r.git/<service>` with `body`.
fn post(repo_path: &str, service: &str, ticket: Option<&str>, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "POST /{repo_path}.git/{service} HTTP/1.1\r\nhost: allowed.test\r\ncontent-type: application/x-{service}-request\r\n{}{extra}content-length: {}\r\n\r\n",
        ticket_header(ticket),
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

/// One pkt-line.
fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", payload.len() + 4).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// A ref-update command: (ref, old, new).
type Cmd = (&'static str, &'static str, &'static str);

/// A receive-pack request body: the commands (the first with `caps`), a flush, then a
/// stand-in pack.
fn commands_with(caps: &str, cmds: &[(&str, &str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, (name, old, new)) in cmds.iter().enumerate() {
        let line = if i == 0 {
            format!("{old} {new} {name}\0{caps}\n")
        } else {
            format!("{old} {new} {name}\n")
        };
        body.extend(pkt(line.as_bytes()));
    }
    body.extend_from_slice(b"0000");
    body.extend_from_slice(b"PACK\0\0\0\x02\0\0\0\0stand-in-for-a-pack-of-objects");
    body
}

fn commands(cmds: &[(&str, &str, &str)]) -> Vec<u8> {
    commands_with("report-status agent=git/2.47", cmds)
}

fn upstream(got: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&got.lock().unwrap()).into_owned()
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// How many requests were refused with `reason`: their own lines (each checked to be the
/// service port's, saying what exactly was refused), and those the log folded into a
/// destination's `suppressed` count (after the first few to one destination).
fn refused_count(lines: &[serde_json::Value], reason: &str) -> u64 {
    let mut n = 0;
    for l in lines.iter().filter(|l| l["reason"] == reason) {
        assert_eq!(l["kind"], "git-service", "{l}");
        assert_eq!(l["decision"], "deny", "{l}");
        if l["event"] == "suppressed" {
            n += l["count"].as_u64().unwrap();
            continue;
        }
        assert!(l["upstream"].is_null(), "a refusal names an upstream: {l}");
        assert!(
            l["rule"].as_str().is_some_and(|r| !r.is_empty()),
            "each refusal says what exactly: {l}"
        );
        n += 1;
    }
    n
}

#[tokio::test]
async fn every_request_without_a_valid_ticket_is_refused_before_anything_goes_upstream() {
    let (mut h, got) = start().await;
    let now = SystemTime::now();
    let other_key = ServiceKey::from_bytes([1; 32]);
    let fetch = sealed(Op::Fetch, &[REPO], &[]);
    let push = sealed(Op::Push, &[REPO], &[(OWN, A, B)]);
    let forged = sealed_at(&other_key, Op::Fetch, &[REPO], &[], now);
    let expired = sealed_at(
        &KEY,
        Op::Fetch,
        &[REPO],
        &[],
        now - airlock_ticket::LIFETIME - Duration::from_secs(1),
    );
    let before_start = sealed_at(&KEY, Op::Fetch, &[REPO], &[], now - Duration::from_secs(60));
    let other_repo = sealed(Op::Fetch, &["allowed.test/o/other"], &[]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "no ticket, fetch",
            advertisement("o/r", "git-upload-pack", None),
            "git-ticket-missing",
        ),
        (
            "no ticket, push",
            advertisement("o/r", "git-receive-pack", None),
            "git-ticket-missing",
        ),
        (
            "no ticket, push POST",
            post(
                "o/r",
                "git-receive-pack",
                None,
                "",
                &commands(&[("refs/heads/main", A, C)]),
            ),
            "git-ticket-missing",
        ),
        (
            "forged",
            advertisement("o/r", "git-upload-pack", Some(&forged)),
            "git-ticket-invalid",
        ),
        (
            "garbage",
            advertisement("o/r", "git-upload-pack", Some("v1.AAAA.BBBB")),
            "git-ticket-invalid",
        ),
        (
            "expired",
            advertisement("o/r", "git-upload-pack", Some(&expired)),
            "git-ticket-expired",
        ),
        (
            "issued before the proxy started",
            advertisement("o/r", "git-upload-pack", Some(&before_start)),
            "git-ticket-expired",
        ),
        (
            "another repository's",
            advertisement("o/r", "git-upload-pack", Some(&other_repo)),
            "git-ticket-invalid",
        ),
        (
            "a fetch ticket on a push",
            advertisement("o/r", "git-receive-pack", Some(&fetch)),
            "git-ticket-invalid",
        ),
        (
            "a fetch ticket on a push POST",
            post(
                "o/r",
                "git-receive-pack",
                Some(&fetch),
                "",
                &commands(&[(OWN, A, B)]),
            ),
            "git-ticket-invalid",
        ),
        (
            "a push ticket on a fetch",
            advertisement("o/r", "git-upload-pack", Some(&push)),
            "git-ticket-invalid",
        ),
    ];
    for (name, raw, reason) in &cases {
        let mut tls = tunnel(&h).await;
        let (head, body) = exchange(&mut tls, raw).await;
        assert_eq!(
            header(&head, "x-airlock-error").as_deref(),
            Some(*reason),
            "{name}: {head}"
        );
        // git shows the reason: one `ERR` packet, or a report-status with `ng`.
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains(&format!("airlock: {reason}")),
            "{name}: {text}"
        );
    }
    // Two tickets in one request: refused, whichever the proxy would have read.
    let mut tls = tunnel(&h).await;
    let raw = format!(
        "GET /o/r.git/info/refs?service=git-upload-pack HTTP/1.1\r\nhost: allowed.test\r\nx-airlock-ticket: {fetch}\r\nx-airlock-ticket: {forged}\r\n\r\n"
    );
    let (head, _) = exchange(&mut tls, raw.as_bytes()).await;
    assert!(
        head.contains("x-airlock-error: git-ticket-invalid"),
        "{head}"
    );
    drop(tls);
    assert_eq!(upstream(&got), "", "a refused request reached the upstream");
    let lines = h.finish().await;
    for (reason, n) in [
        ("git-ticket-missing", 3),
        ("git-ticket-invalid", 7),
        ("git-ticket-expired", 2),
    ] {
        assert_eq!(refused_count(&lines, reason), n, "{reason}: {lines:#?}");
    }
}

#[tokio::test]
async fn an_honest_fetch_and_push_pass_with_the_token_and_without_the_ticket() {
    let (mut h, got) = start().await;
    let fetch = sealed(Op::Fetch, &[REPO], &[]);
    let mut tls = tunnel(&h).await;
    let (head, _) = exchange(
        &mut tls,
        &advertisement("o/r", "git-upload-pack", Some(&fetch)),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(header(&head, "x-airlock-error"), None, "{head}");
    let want = [
        pkt(format!("want {A}\n").as_bytes()),
        b"00000009done\n".to_vec(),
    ]
    .concat();
    let (head, _) = exchange(
        &mut tls,
        &post("o/r", "git-upload-pack", Some(&fetch), "", &want),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let push = sealed(
        Op::Push,
        &[REPO],
        &[(OWN, A, B), ("refs/heads/feature", ZERO, B)],
    );
    let (head, _) = exchange(
        &mut tls,
        &advertisement("o/r", "git-receive-pack", Some(&push)),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The probe git sends before a large push (a flush alone): no update, goes through.
    let (head, _) = exchange(
        &mut tls,
        &post("o/r", "git-receive-pack", Some(&push), "", b"0000"),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Both signed updates, one to the sandbox's own branch, one to its start branch.
    let body = commands(&[(OWN, A, B), ("refs/heads/feature", ZERO, B)]);
    let (head, _) = exchange(
        &mut tls,
        &post("o/r", "git-receive-pack", Some(&push), "", &body),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(header(&head, "x-airlock-error"), None, "{head}");
    drop(tls);
    let seen = upstream(&got);
    assert_eq!(seen.matches("HTTP/1.1\r\n").count(), 5, "{seen}");
    assert!(
        !seen.to_ascii_lowercase().contains("x-airlock-ticket"),
        "the ticket went upstream: {seen}"
    );
    assert!(!seen.contains("v1."), "the ticket went upstream: {seen}");
    let basic = base64_basic(TOKEN);
    assert_eq!(
        seen.matches(&format!("authorization: Basic {basic}"))
            .count(),
        5,
        "every request carries the git token: {seen}"
    );
    // The push body went upstream byte for byte.
    assert!(
        seen.contains(std::str::from_utf8(&body).unwrap()),
        "the body arrived changed: {seen}"
    );
    let lines = h.finish().await;
    assert!(lines.iter().all(|l| l["decision"] != "deny"), "{lines:#?}");
}

fn base64_basic(token: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
}

/// Posts `body` with `ticket` on a fresh tunnel; the refusal's head and body.
async fn push_refused(h: &Harness, ticket: &str, body: &[u8]) -> (String, String) {
    let mut tls = tunnel(h).await;
    let (head, answer) = exchange(
        &mut tls,
        &post("o/r", "git-receive-pack", Some(ticket), "", body),
    )
    .await;
    (head, String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test]
async fn a_push_whose_updates_differ_from_the_signed_ones_is_refused() {
    let (mut h, got) = start().await;
    let ticket = sealed(Op::Push, &[REPO], &[(OWN, A, B)]);
    let unsigned: Vec<(&str, Vec<Cmd>)> = vec![
        ("another old (a force)", vec![(OWN, C, B)]),
        ("another new", vec![(OWN, A, C)]),
        (
            "another branch of its own",
            vec![("refs/heads/sandbox/t/y", ZERO, B)],
        ),
        (
            "the signed update and one more",
            vec![(OWN, A, B), ("refs/heads/sandbox/t/y", ZERO, B)],
        ),
    ];
    for (name, cmds) in &unsigned {
        let (head, answer) = push_refused(&h, &ticket, &commands(cmds)).await;
        assert!(
            head.contains("x-airlock-error: git-ref-update-unsigned"),
            "{name}: {head}"
        );
        assert!(
            head.contains("content-type: application/x-git-receive-pack-result"),
            "{name}: {head}"
        );
        // report-status: git prints `! [remote rejected] <ref> (<reason>)` for each.
        assert!(answer.contains("unpack ok\n"), "{name}: {answer}");
        for (r, _, _) in cmds {
            assert!(
                answer.contains(&format!("ng {r} airlock: ")),
                "{name}: {answer}"
            );
        }
    }
    // What the git rules refuse, signed or not: the ticket of a git API that was fooled.
    let fooled = sealed(
        Op::Push,
        &[REPO],
        &[
            (OWN, A, ZERO),
            ("refs/tags/v666", ZERO, B),
            ("refs/heads/main", A, C),
            ("refs/heads/release/1", A, C),
            ("refs/heads/sandbox/other/x", ZERO, B),
            ("refs/notes/commits", ZERO, B),
        ],
    );
    let refused = [
        ("a deletion", (OWN, A, ZERO)),
        ("a tag", ("refs/tags/v666", ZERO, B)),
        ("a protected branch", ("refs/heads/main", A, C)),
        ("a protected pattern", ("refs/heads/release/1", A, C)),
        (
            "another sandbox's branch",
            ("refs/heads/sandbox/other/x", ZERO, B),
        ),
        ("not a branch", ("refs/notes/commits", ZERO, B)),
    ];
    for (name, cmd) in refused {
        for t in [&ticket, &fooled] {
            let (head, answer) = push_refused(&h, t, &commands(&[cmd])).await;
            assert!(
                head.contains("x-airlock-error: git-ref-update-refused"),
                "{name}: {head}"
            );
            assert!(
                answer.contains(&format!("ng {} airlock: ", cmd.0)),
                "{name}: {answer}"
            );
        }
    }
    // With side-band-64k the report is in band 1, and band 2 says why on git's stderr.
    let (head, answer) = push_refused(
        &h,
        &ticket,
        &commands_with(
            "report-status side-band-64k agent=git/2.47",
            &[("refs/heads/main", A, C)],
        ),
    )
    .await;
    assert!(
        head.contains("x-airlock-error: git-ref-update-refused"),
        "{head}"
    );
    assert!(
        answer.contains("\x02airlock: git-ref-update-refused"),
        "{answer:?}"
    );
    assert!(answer.contains("\x01"), "{answer:?}");
    assert!(
        answer.contains("ng refs/heads/main airlock: "),
        "{answer:?}"
    );
    assert_eq!(upstream(&got), "", "a refused push reached the upstream");
    let lines = h.finish().await;
    assert_eq!(
        refused_count(&lines, "git-ref-update-unsigned"),
        4,
        "{lines:#?}"
    );
    assert_eq!(
        refused_count(&lines, "git-ref-update-refused"),
        13,
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_push_ticket_takes_its_updates_once() {
    let (mut h, got) = start().await;
    let ticket = sealed(Op::Push, &[REPO], &[(OWN, A, B)]);
    let body = commands(&[(OWN, A, B)]);
    let mut tls = tunnel(&h).await;
    let (head, _) = exchange(
        &mut tls,
        &post("o/r", "git-receive-pack", Some(&ticket), "", &body),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(header(&head, "x-airlock-error"), None, "{head}");
    drop(tls);
    let (head, answer) = push_refused(&h, &ticket, &body).await;
    assert!(
        head.contains("x-airlock-error: git-ticket-replayed"),
        "{head}"
    );
    assert!(answer.contains("airlock: git-ticket-replayed"), "{answer}");
    // Its reads stay usable until it expires (git asks for the advertisement again).
    let mut tls = tunnel(&h).await;
    let (head, _) = exchange(
        &mut tls,
        &advertisement("o/r", "git-receive-pack", Some(&ticket)),
    )
    .await;
    assert_eq!(header(&head, "x-airlock-error"), None, "{head}");
    drop(tls);
    let seen = upstream(&got);
    assert_eq!(seen.matches("POST ").count(), 1, "{seen}");
    let lines = h.finish().await;
    assert_eq!(refused_count(&lines, "git-ticket-replayed"), 1);
}

#[tokio::test]
async fn a_receive_pack_body_that_cannot_be_read_is_refused() {
    let (mut h, got) = start().await;
    let ticket = sealed(Op::Push, &[REPO], &[(OWN, A, B)]);
    let first = |caps: &str| pkt(format!("{A} {B} {OWN}\0{caps}\n").as_bytes());
    let mut oversized = Vec::new();
    for i in 0..400 {
        let name = format!("refs/heads/sandbox/t/{i:0>150}");
        oversized.extend(pkt(format!("{A} {B} {name}\n").as_bytes()));
    }
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), ""),
        ("short", b"00".to_vec(), ""),
        ("not hex", b"zzzz0000".to_vec(), ""),
        ("delim packet", b"0001".to_vec(), ""),
        ("response-end packet", b"0002".to_vec(), ""),
        ("length 3", b"0003".to_vec(), ""),
        ("empty packet", b"00040000".to_vec(), ""),
        ("too long a packet", b"fff5".to_vec(), ""),
        ("no flush", first("report-status"), ""),
        (
            "bad object id",
            [
                pkt(format!("xyz {B} {OWN}\0report-status\n").as_bytes()),
                b"0000".to_vec(),
            ]
            .concat(),
            "",
        ),
        (
            "no ref",
            [
                pkt(format!("{A} {B}\0report-status\n").as_bytes()),
                b"0000".to_vec(),
            ]
            .concat(),
            "",
        ),
        (
            "a signed push",
            [
                pkt(b"push-cert\0report-status\n"),
                pkt(b"certificate version 0.1\n"),
                pkt(b"push-cert-end\n"),
                b"0000".to_vec(),
            ]
            .concat(),
            "",
        ),
        (
            "too many commands",
            [first("report-status"), oversized, b"0000".to_vec()].concat(),
            "",
        ),
        (
            "content-encoded",
            commands(&[(OWN, A, B)]),
            "content-encoding: gzip\r\n",
        ),
    ];
    for (name, body, extra) in &cases {
        let mut tls = tunnel(&h).await;
        let (head, _) = exchange(
            &mut tls,
            &post("o/r", "git-receive-pack", Some(&ticket), extra, body),
        )
        .await;
        assert!(
            head.contains("x-airlock-error: git-push-malformed"),
            "{name}: {head}"
        );
    }
    assert_eq!(upstream(&got), "", "a malformed push reached the upstream");
    // None of them used up the ticket: its signed update still goes through.
    let mut tls = tunnel(&h).await;
    let (head, _) = exchange(
        &mut tls,
        &post(
            "o/r",
            "git-receive-pack",
            Some(&ticket),
            "",
            &commands(&[(OWN, A, B)]),
        ),
    )
    .await;
    assert_eq!(header(&head, "x-airlock-error"), None, "{head}");
    drop(tls);
    let lines = h.finish().await;
    assert_eq!(
        refused_count(&lines, "git-push-malformed"),
        cases.len() as u64,
        "{lines:#?}"
    );
}

/// A read-only remote: the git API fetches a repository outside `[git] repositories` on a
/// host the policy allows (its ticket names that repository). The upload-pack goes upstream
/// with no credential at all (the git token is for authorized repositories only, and an
/// `Authorization` of git's own is dropped); a push to it is refused whatever the ticket
/// says, in words git prints, before anything goes upstream; and the fetch still needs a
/// ticket naming it.
#[tokio::test]
async fn a_fetch_of_an_unauthorized_repository_passes_anonymously_and_a_push_to_it_never() {
    let (mut h, got) = start().await;
    let public = "allowed.test/x/pub";
    let fetch = sealed(Op::Fetch, &[public], &[]);
    let mut tls = tunnel(&h).await;
    let mut raw = advertisement("x/pub", "git-upload-pack", Some(&fetch));
    // git's own credentials on the request (a helper's answer): never sent on.
    let own = format!("authorization: Basic {}\r\n\r\n", base64_basic("agent-own"));
    raw.truncate(raw.len() - 2);
    raw.extend_from_slice(own.as_bytes());
    let (head, _) = exchange(&mut tls, &raw).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(header(&head, "x-airlock-error"), None, "{head}");
    let want = [
        pkt(format!("want {A}\n").as_bytes()),
        b"00000009done\n".to_vec(),
    ]
    .concat();
    let (head, _) = exchange(
        &mut tls,
        &post("x/pub", "git-upload-pack", Some(&fetch), "", &want),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(tls);
    // A push to it: refused with a reason git shows, whatever ticket it carries.
    let push = sealed(Op::Push, &[public], &[(OWN, A, B)]);
    for (name, raw) in [
        (
            "advertisement",
            advertisement("x/pub", "git-receive-pack", Some(&push)),
        ),
        (
            "POST",
            post(
                "x/pub",
                "git-receive-pack",
                Some(&push),
                "",
                &commands(&[(OWN, A, B)]),
            ),
        ),
    ] {
        let mut tls = tunnel(&h).await;
        let (head, body) = exchange(&mut tls, &raw).await;
        assert_eq!(
            header(&head, "x-airlock-error").as_deref(),
            Some("request-denied-by-rule"),
            "{name}: {head}"
        );
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains("airlock: request-denied-by-rule") && text.contains("read-only"),
            "{name}: {text}"
        );
    }
    // Still only the git API's own fetches: no ticket, or one for another repository.
    let other = sealed(Op::Fetch, &[REPO], &[]);
    for (ticket, reason) in [
        (None, "git-ticket-missing"),
        (Some(&other), "git-ticket-invalid"),
    ] {
        let mut tls = tunnel(&h).await;
        let (head, _) = exchange(
            &mut tls,
            &advertisement("x/pub", "git-upload-pack", ticket.map(String::as_str)),
        )
        .await;
        assert_eq!(
            header(&head, "x-airlock-error").as_deref(),
            Some(reason),
            "{head}"
        );
    }
    let seen = upstream(&got);
    assert_eq!(seen.matches("HTTP/1.1\r\n").count(), 2, "{seen}");
    assert!(
        !seen.to_ascii_lowercase().contains("authorization"),
        "a credential went upstream with an unauthorized repository's fetch: {seen}"
    );
    assert!(!seen.contains(TOKEN) && !seen.contains("v1."), "{seen}");
    assert!(!seen.contains("git-receive-pack"), "{seen}");
    let lines = h.finish().await;
    let passed: Vec<_> = lines
        .iter()
        .filter(|l| l["kind"] == "git-service" && l["decision"] == "allow" && l["path"].is_string())
        .collect();
    assert!(
        passed.iter().all(|l| l["credential"].is_null()),
        "{passed:#?}"
    );
    assert_eq!(
        refused_count(&lines, "request-denied-by-rule"),
        2,
        "{lines:#?}"
    );
}
