//! End-to-end attacks on the git service port and upgrade relaying (harness in `common`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
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
    // judged. A non-git path (and git of a repository not in [git] repositories) is refused.
    let mut s = TcpStream::connect(h.service).await.unwrap();
    s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(h.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("allowed.test").unwrap(), s)
        .await
        .expect("the leaf verifies against the appliance CA");
    for path in [
        "/",
        "/o/r/info/refs?service=git-upload-pack",
        "/o/r/git-receive-pack",
    ] {
        tls.write_all(format!("GET {path} HTTP/1.1\r\nhost: allowed.test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let head = read_head(&mut tls).await;
        assert!(head.starts_with("HTTP/1.1 403"), "{path}: {head}");
        assert!(
            head.contains("x-airlock-error: request-denied-by-rule"),
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
    assert_eq!(refused, 4, "{lines:?}");
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
