//! Names are content: a name the agent asks (of the DNS filter, or of the proxy through
//! `CONNECT`, plain HTTP, base URL or the transparent listener, which resolve it for the
//! agent) reaches the upstream resolver only when it carries no value of the workspace's
//! secret files and no secret of a known format (its labels lower-cased and joined, so a
//! value split over labels or spelled in another case is found), and, below a wildcard
//! zone, when it does not look encoded: one check, whatever path resolved the name.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use crate::common::*;
use airlock_proxy::limits::Limits;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// A database password of no known format, and a value that a name cannot carry as is.
const DB_PASSWORD: &str = "hunter2-correct-horse";
const API_SECRET: &str = "s3cr3t/p@ss word!";
/// A value added to the workspace after the start (found by a rescan).
const LATER: &str = "Rotated-Deploy-Key-7781";
/// 40 hex characters: what `sha1sum` of anything looks like.
const HEX: &str = "68656c6c6f20776f726c6420746869732069732e";

fn hex(value: &str) -> String {
    value.bytes().map(|b| format!("{b:02x}")).collect()
}

fn query(name: &str, ty: RecordType) -> Vec<u8> {
    let mut m = Message::new(7, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_str(name).unwrap(), ty));
    m.set_edns(Edns::new());
    m.to_vec().unwrap()
}

async fn udp(h: &Harness, name: &str) -> Message {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(&query(name, RecordType::A), h.dns).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(2), s.recv(&mut buf))
        .await
        .expect("the DNS filter answers")
        .unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

fn ede(m: &Message) -> Option<String> {
    match m.edns.as_ref()?.options().get(EdnsCode::from(15u16))? {
        EdnsOption::Unknown(15, d) => Some(String::from_utf8(d[2..].to_vec()).unwrap()),
        _ => None,
    }
}

fn handoff(workspace: &[(&str, &str)]) -> airlock_handoff::Handoff {
    airlock_handoff::Handoff {
        version: airlock_handoff::HANDOFF_VERSION,
        session: "sess-1".into(),
        credentials: Vec::new(),
        git_placeholder: None,
        workspace_secrets: workspace
            .iter()
            .map(|(file, value)| airlock_handoff::WorkspaceSecret {
                file: (*file).to_owned(),
                name: "TEST".into(),
                detector: None,
                value: airlock_handoff::Secret::new((*value).to_owned()),
            })
            .collect(),
        missing: Vec::new(),
        git_service: None,
    }
}

/// Every name the test asks resolves to the allowed address (so a name that is not
/// refused is looked up: `h.lookups` says which names reached the resolver).
async fn harness(
    names: &[&str],
    routes: &[(SocketAddr, SocketAddr)],
    roots: Vec<rustls::pki_types::CertificateDer<'static>>,
) -> Harness {
    let extra = Extra {
        workspace: vec![(".env", DB_PASSWORD), (".env", API_SECRET)],
        upstream_roots: roots,
        ..Extra::default()
    };
    let owned: Vec<(&str, &[&str])> = names.iter().map(|n| (*n, &[ALLOWED_IP][..])).collect();
    Harness::start_extra("enforce", &owned, routes, Limits::default(), &extra).await
}

/// Names that carry a workspace value or a known-format secret, under the
/// `*.allowed.test` wildcard (where the agent chooses the labels).
fn secret_names() -> Vec<(String, &'static str)> {
    vec![
        (format!("{DB_PASSWORD}.allowed.test"), "foreign-secret"),
        (
            "hunter2.correct.horse.allowed.test".into(),
            "foreign-secret",
        ),
        (
            "HUNTER2-Correct-HORSE.x.allowed.test".into(),
            "foreign-secret",
        ),
        ("s3cr3t-p-ss-word.allowed.test".into(), "foreign-secret"),
        // The value in hex (26 characters over two labels: each short enough).
        (
            format!(
                "{}.{}.allowed.test",
                &hex(DB_PASSWORD)[..21],
                &hex(DB_PASSWORD)[21..]
            ),
            "foreign-secret",
        ),
        // A GitHub token split over labels.
        (
            "ghp_aaaabbbbccccddddeeee.ffffgggghhhh1234.allowed.test".into(),
            "foreign-secret",
        ),
        (format!("{HEX}.allowed.test"), "dns-exfil-suspect"),
        // Encoded, split into labels each too short to look encoded alone.
        (
            "68656c6c6f.20776f726c.64207468.69732069.allowed.test".into(),
            "dns-exfil-suspect",
        ),
    ]
}

/// Through the agent's own resolver (the DNS filter): refused, never looked up.
#[tokio::test]
async fn attack_names_that_carry_secrets_never_reach_the_resolver() {
    let mut h = harness(&["ok.allowed.test", "allowed.test"], &[], Vec::new()).await;
    for (name, reason) in secret_names() {
        let r = udp(&h, &format!("{name}.")).await;
        assert_eq!(r.response_code, ResponseCode::NXDomain, "{name}");
        assert_eq!(ede(&r), Some(format!("airlock: {reason}")), "{name}");
    }
    assert!(
        h.lookups.lock().unwrap().is_empty(),
        "a refused name reached the resolver: {:?}",
        h.lookups.lock().unwrap()
    );
    // Ordinary names still resolve.
    for name in ["ok.allowed.test.", "allowed.test."] {
        assert_eq!(
            udp(&h, name).await.response_code,
            ResponseCode::NoError,
            "{name}"
        );
    }
    let lines = h.finish().await;
    let secrets: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .collect();
    assert_eq!(secrets.len(), 6, "{lines:?}");
    for l in &secrets {
        assert_eq!(l["kind"], "dns");
        assert_eq!(l["decision"], "deny");
        assert!(
            l["rule"].as_str().unwrap().starts_with("secret detector "),
            "{l}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l["rule"] == "secret detector workspace:.env"),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.to_string().contains(DB_PASSWORD)),
        "the value is never in the log"
    );
}

/// The same names asked of the proxy, which would resolve them for the agent: `CONNECT`,
/// plain HTTP, base URL and the transparent listener (Host and SNI) all refuse them, and
/// the resolver never hears of them.
#[tokio::test]
async fn attack_names_that_carry_secrets_are_refused_on_every_proxy_path() {
    let (up, got) = recorder().await;
    let mut h = harness(
        &["ok.allowed.test"],
        &[route(ALLOWED_IP, 80, up), route(ALLOWED_IP, 443, up)],
        Vec::new(),
    )
    .await;
    let names = secret_names();
    for (name, reason) in &names {
        let r = refused_in_tunnel(&h, name, 443).await;
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some(*reason),
            "CONNECT {name}"
        );
        let (_s, r) = request(
            h.addr,
            &format!("GET http://{name}/ HTTP/1.1\r\nhost: {name}\r\n\r\n"),
        )
        .await;
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some(*reason),
            "GET {name}"
        );
        let (_s, r) = request(
            h.addr,
            &format!("GET /https/{name}/x HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"),
        )
        .await;
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some(*reason),
            "base URL {name}"
        );
        *h.orig_dst.0.lock().unwrap() = Some(SocketAddr::new(ALLOWED_IP.parse().unwrap(), 80));
        let mut s = TcpStream::connect(h.transparent).await.unwrap();
        s.write_all(format!("GET / HTTP/1.1\r\nhost: {name}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = read_resp(&mut s).await;
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some(*reason),
            "transparent {name}"
        );
        // TLS on the transparent listener: its SNI names the host (a name with `_` is not
        // a valid SNI; the plain paths above carry that one).
        if !name.contains('_') {
            *h.orig_dst.0.lock().unwrap() = Some(SocketAddr::new(ALLOWED_IP.parse().unwrap(), 443));
            let s = TcpStream::connect(h.transparent).await.unwrap();
            let tls = tokio_rustls::TlsConnector::from(h.trusting_client())
                .connect(ServerName::try_from(name.to_ascii_lowercase()).unwrap(), s)
                .await;
            // Refused before anything, and answered legibly inside TLS.
            let mut t = tls.unwrap_or_else(|e| panic!("transparent TLS {name}: {e}"));
            let _ = t.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(3), t.read_to_end(&mut out)).await;
            let out = String::from_utf8_lossy(&out);
            assert!(out.contains(reason), "transparent TLS {name}: {out}");
        }
    }
    assert!(
        h.lookups.lock().unwrap().is_empty(),
        "a refused name reached the resolver: {:?}",
        h.lookups.lock().unwrap()
    );
    assert!(
        got.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    // An ordinary name under the wildcard still works through the proxy.
    let (_s, r) = request(
        h.addr,
        "GET http://ok.allowed.test/ HTTP/1.1\r\nhost: ok.allowed.test\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let lines = h.finish().await;
    let refused = lines
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .count();
    // Six secret names, each on four plain paths; five of them also over TLS.
    assert_eq!(refused, 6 * 4 + 5, "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.to_string().contains(DB_PASSWORD)),
        "the value is never in the log"
    );
}

/// A secret file written after the start: the rescan's rules decide the next name.
#[tokio::test]
async fn a_value_found_by_a_rescan_is_refused_in_the_next_name() {
    let mut h = harness(&["rotated-deploy.key-7781.allowed.test"], &[], Vec::new()).await;
    let name = "rotated-deploy.key-7781.allowed.test.";
    let before = udp(&h, name).await;
    assert_eq!(
        before.response_code,
        ResponseCode::NoError,
        "not a secret yet"
    );
    let text = std::fs::read_to_string(h.audit_path.parent().unwrap().join("policy.toml")).unwrap();
    let policy = airlock_policy::Policy::parse(&text, std::path::Path::new("p.toml")).unwrap();
    let credentials = airlock_proxy::credentials::Credentials::from_handoff(
        handoff(&[(".env", DB_PASSWORD), (".env.local", LATER)]),
        &policy,
    )
    .unwrap();
    let rules = airlock_proxy::snapshot::Rules::new(policy, credentials).unwrap();
    h.running.as_ref().unwrap().replace_rules(rules);
    let after = udp(&h, name).await;
    assert_eq!(after.response_code, ResponseCode::NXDomain);
    assert_eq!(ede(&after).as_deref(), Some("airlock: foreign-secret"));
    let lines = h.finish().await;
    assert!(
        lines
            .iter()
            .any(|l| l["rule"] == "secret detector workspace:.env.local"),
        "{lines:?}"
    );
}
