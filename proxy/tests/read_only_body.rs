//! A read-only host takes no body: a `GET`, `HEAD` or `OPTIONS` carrying one is refused
//! `body-on-read` on every path the proxy reads (explicit plain HTTP, intercepted TLS,
//! base URL, transparent), so a body that an upstream ignoring read bodies would take for
//! a request of its own (`PUT /… HTTP/1.1`) never reaches it; and the git fetch exemption
//! (`POST …/git-upload-pack`) holds only for a real fetch request to a host that serves
//! git, so a JSON login body never reaches a registry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::net::SocketAddr;

use crate::common::*;
use airlock_proxy::limits::Limits;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// What an upstream that ignores a `GET`'s body would execute as the next request.
const SMUGGLED: &str =
    "PUT /admin/config HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\npwnd";

const ID: &str = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c";

fn pkt(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        match *l {
            "0000" | "0001" => out.extend_from_slice(l.as_bytes()),
            _ => out.extend_from_slice(format!("{:04x}{l}", l.len() + 4).as_bytes()),
        }
    }
    out
}

/// A protocol v2 fetch as git sends it.
fn fetch_request() -> Vec<u8> {
    pkt(&[
        "command=fetch\n",
        "agent=git/2.43.0\n",
        "object-format=sha1\n",
        "0001",
        "thin-pack\n",
        "ofs-delta\n",
        &format!("want {ID}\n"),
        &format!("have {ID}\n"),
        "done\n",
        "0000",
    ])
}

/// `readonly.test` (read-only) and `gone.test` (read-only, standing for a registry) both
/// route to `plain` on port 80 and `tls` on 443; `readonly.test` serves git.
async fn harness(
    plain: SocketAddr,
    tls: Option<(SocketAddr, rustls::pki_types::CertificateDer<'static>)>,
) -> Harness {
    let mut routes = vec![route(ALLOWED_IP, 80, plain)];
    let mut roots = Vec::new();
    if let Some((addr, root)) = tls {
        routes.push(route(ALLOWED_IP, 443, addr));
        roots.push(root);
    }
    let extra = Extra {
        policy: "git_hosts = [\"readonly.test\"]\n".into(),
        upstream_roots: roots,
        ..Extra::default()
    };
    Harness::start_extra(
        "enforce",
        &[
            ("readonly.test", &[ALLOWED_IP]),
            ("gone.test", &[ALLOWED_IP]),
            ("allowed.test", &[ALLOWED_IP]),
        ],
        &routes,
        Limits::default(),
        &extra,
    )
    .await
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed inside a head");
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

/// One request on `s`; the response head and its (content-length) body.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, raw: &[u8]) -> (String, String) {
    s.write_all(raw).await.unwrap();
    let head = read_head(s).await;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8_lossy(&body).into_owned())
}

fn error_of(head: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("x-airlock-error")
            .then(|| v.trim().to_owned())
    })
}

/// Reads with a body, on the explicit port's plain HTTP.
#[tokio::test]
async fn attack_a_read_with_a_body_never_reaches_a_read_only_host() {
    let (up, got) = recorder().await;
    let mut h = harness(up, None).await;
    let attempts = [
        format!(
            "GET http://readonly.test/search HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: {}\r\n\r\n{SMUGGLED}",
            SMUGGLED.len()
        ),
        format!(
            "GET http://readonly.test/search HTTP/1.1\r\nhost: readonly.test\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n",
            SMUGGLED.len()
        ),
        "OPTIONS http://readonly.test/x HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\ndata".into(),
        "get http://readonly.test/x HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\ndata".into(),
    ];
    for raw in &attempts {
        let (_s, r) = request(h.addr, raw).await;
        assert_eq!(r.status, 403, "{raw}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("body-on-read"),
            "{raw}"
        );
        assert!(
            r.body.contains("without a body"),
            "the hint says what works: {}",
            r.body
        );
        assert!(
            r.json()["rule"].as_str().unwrap().contains("read-only"),
            "{}",
            r.body
        );
    }
    // HEAD: the answer has no body, its head says why.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"HEAD http://readonly.test/x HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\ndata")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert_eq!(error_of(&head).as_deref(), Some("body-on-read"), "{head}");
    // TRACE writes (it is not a read): read-only-host, as before.
    let (_s, r) = request(
        h.addr,
        "TRACE http://readonly.test/x HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 4\r\n\r\ndata",
    )
    .await;
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("read-only-host")
    );
    assert!(
        got.lock().unwrap().is_empty(),
        "nothing reached the upstream: {:?}",
        String::from_utf8_lossy(&got.lock().unwrap())
    );
    // Reads without a body pass (an empty content-length is none); a writable host takes a
    // body on any method.
    for raw in [
        "GET http://readonly.test/x HTTP/1.1\r\nhost: readonly.test\r\n\r\n",
        "GET http://readonly.test/x HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: 0\r\n\r\n",
        "GET http://allowed.test/search HTTP/1.1\r\nhost: allowed.test\r\ncontent-length: 4\r\n\r\nbody",
    ] {
        let (_s, r) = request(h.addr, raw).await;
        assert_eq!(r.status, 200, "{raw}");
    }
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "body-on-read")
        .collect();
    assert_eq!(refused.len(), attempts.len() + 1, "{lines:?}");
    assert!(
        refused
            .iter()
            .all(|l| l["decision"] == "deny" && l["host"] == "readonly.test")
    );
}

/// The same reads inside intercepted TLS (`CONNECT`), in base-URL mode and on the
/// transparent listener (plain HTTP and TLS).
#[tokio::test]
async fn attack_a_read_with_a_body_is_refused_on_every_path() {
    let (plain, plain_got) = recorder().await;
    let (tls, root, tls_got) = tls_recorder("readonly.test").await;
    let mut h = harness(plain, Some((tls, root))).await;
    let smuggling = format!(
        "GET /search HTTP/1.1\r\nhost: readonly.test\r\ncontent-length: {}\r\n\r\n{SMUGGLED}",
        SMUGGLED.len()
    );
    // Intercepted, through CONNECT on the explicit port.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"CONNECT readonly.test:443 HTTP/1.1\r\nhost: readonly.test:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    let mut t = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("readonly.test").unwrap(), s)
        .await
        .unwrap();
    let (head, _) = exchange(&mut t, smuggling.as_bytes()).await;
    assert_eq!(error_of(&head).as_deref(), Some("body-on-read"), "{head}");
    drop(t);
    // Base URL.
    let raw = format!(
        "OPTIONS /https/readonly.test/search HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\n\r\n{SMUGGLED}",
        SMUGGLED.len()
    );
    let (_s, r) = request(h.addr, &raw).await;
    assert_eq!(r.header("x-airlock-error").as_deref(), Some("body-on-read"));
    // Transparent, plain HTTP.
    *h.orig_dst.0.lock().unwrap() = Some(SocketAddr::new(ALLOWED_IP.parse().unwrap(), 80));
    let mut s = TcpStream::connect(h.transparent).await.unwrap();
    let (head, _) = exchange(&mut s, smuggling.as_bytes()).await;
    assert_eq!(error_of(&head).as_deref(), Some("body-on-read"), "{head}");
    drop(s);
    // Transparent, TLS (intercepted by its SNI).
    *h.orig_dst.0.lock().unwrap() = Some(SocketAddr::new(ALLOWED_IP.parse().unwrap(), 443));
    let s = TcpStream::connect(h.transparent).await.unwrap();
    let mut t = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("readonly.test").unwrap(), s)
        .await
        .unwrap();
    let (head, _) = exchange(&mut t, smuggling.as_bytes()).await;
    assert_eq!(error_of(&head).as_deref(), Some("body-on-read"), "{head}");
    drop(t);
    assert!(
        plain_got.lock().unwrap().is_empty(),
        "nothing reached the plain upstream"
    );
    assert!(
        tls_got.lock().unwrap().is_empty(),
        "nothing reached the TLS upstream"
    );
    let lines = h.finish().await;
    let refused = lines
        .iter()
        .filter(|l| l["reason"] == "body-on-read")
        .count();
    assert_eq!(refused, 4, "{lines:?}");
}

/// The git fetch exemption: a login body to a registry's `…/git-upload-pack`, or to a git
/// host's, is a write; a real fetch request (plain or gzip, as git sends it) to a host that
/// serves git passes.
#[tokio::test]
async fn attack_the_git_fetch_exemption_carries_only_a_fetch() {
    let (up, got) = recorder().await;
    let mut h = harness(up, None).await;
    let login = "{\"name\":\"agent\",\"password\":\"hunter2-correct-horse\"}";
    let post = |host: &str, extra: &str, body: &[u8]| {
        let mut raw = format!(
            "POST http://{host}/o/r.git/git-upload-pack HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/x-git-upload-pack-request\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend_from_slice(body);
        raw
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(SMUGGLED.as_bytes()).unwrap();
    let gz_smuggled = gz.finish().unwrap();
    for raw in [
        // A registry is no git server, whatever its body.
        post("gone.test", "", login.as_bytes()),
        post("gone.test", "", &fetch_request()),
        // A git host: only a fetch request.
        post("readonly.test", "", login.as_bytes()),
        post("readonly.test", "", SMUGGLED.as_bytes()),
        post("readonly.test", "content-encoding: gzip\r\n", &gz_smuggled),
        post(
            "readonly.test",
            "content-encoding: br\r\n",
            &fetch_request(),
        ),
        post("readonly.test", "", b""),
    ] {
        let mut s = TcpStream::connect(h.addr).await.unwrap();
        s.write_all(&raw).await.unwrap();
        let r = read_resp(&mut s).await;
        assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&raw));
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("read-only-host"),
            "{}",
            String::from_utf8_lossy(&raw)
        );
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "nothing reached the upstream: {:?}",
        String::from_utf8_lossy(&got.lock().unwrap())
    );
    // A real fetch passes, byte for byte, plain and gzip-encoded.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&fetch_request()).unwrap();
    let gz_fetch = gz.finish().unwrap();
    for raw in [
        post("readonly.test", "", &fetch_request()),
        post("readonly.test", "content-encoding: gzip\r\n", &gz_fetch),
    ] {
        let mut s = TcpStream::connect(h.addr).await.unwrap();
        s.write_all(&raw).await.unwrap();
        let r = read_resp(&mut s).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&raw));
    }
    let sent = got.lock().unwrap().clone();
    assert!(
        sent.windows(fetch_request().len())
            .any(|w| w == fetch_request()),
        "the fetch went as sent"
    );
    assert!(
        sent.windows(gz_fetch.len()).any(|w| w == gz_fetch),
        "the gzip fetch went as sent"
    );
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "read-only-host")
        .collect();
    assert_eq!(refused.len(), 7, "{lines:?}");
}
