//! Secrets in any encoding, from the agent's seat: the workspace's values and known-format
//! keys are refused to an allowed writable host however the body, query or header spells
//! them (compressed, escaped, hex, base32, upper-cased, reversed, spaced, split over two
//! requests), a decompression bomb is refused without being expanded, and the real
//! credential an upstream echoes never reaches the agent, compressed or not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use airlock_proxy::limits::Limits;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A database password of no known format, and one that changes when URL-encoded.
const DB_PASSWORD: &str = "hunter2-correct-horse";
const API_SECRET: &str = "s3cr3t/p@ss word!";
/// An AWS key pair of the built-in format (not AWS's documented example).
const AWS_ID: &str = "AKIA2Z3Y4X5W6V7U2T3S";
const AWS_SECRET: &str = "abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB";

async fn harness(upstream: SocketAddr) -> Harness {
    let extra = Extra {
        workspace: vec![(".env", DB_PASSWORD), (".env", API_SECRET)],
        ..Extra::default()
    };
    Harness::start_extra(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("other.allowed.test", &[ALLOWED_IP]),
        ],
        &[route(ALLOWED_IP, 80, upstream)],
        Limits::default(),
        &extra,
    )
    .await
}

/// A request with `headers` (each `name: value\r\n`) and a binary body.
fn post(path: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "POST http://allowed.test{path} HTTP/1.1\r\nhost: allowed.test\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

fn get(target: &str, headers: &str) -> Vec<u8> {
    format!("GET http://allowed.test{target} HTTP/1.1\r\nhost: allowed.test\r\n{headers}\r\n")
        .into_bytes()
}

/// Sends `raw` on a new connection; the answer.
async fn send(proxy: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(raw).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("the proxy answers")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        w.write_all(data).unwrap();
    }
    out
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}

fn hex(data: &[u8]) -> String {
    data.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// RFC 4648 base32, padded.
fn base32(data: &[u8]) -> String {
    const A: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::new();
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let n = u64::from_be_bytes([0, 0, 0, buf[0], buf[1], buf[2], buf[3], buf[4]]);
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < chars {
                out.push(A[((n >> (35 - 5 * i)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn json_escaped(value: &str) -> String {
    value.bytes().fold(String::new(), |mut s, b| {
        let _ = write!(s, "\\u{b:04x}");
        s
    })
}

fn percent_all(value: &str) -> String {
    value.bytes().fold(String::new(), |mut s, b| {
        let _ = write!(s, "%{b:02X}");
        s
    })
}

fn spaced(value: &str) -> String {
    value
        .chars()
        .map(String::from)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A `.env` long enough that every compressor really compresses it (a short one goes out
/// in a stored block, the value readable as it is).
fn env_file(value: &str) -> String {
    let mut file: String = (0..40)
        .map(|i| format!("SETTING_{i}=value-{i}\n"))
        .collect();
    file.push_str(&format!("DB_PASSWORD={value}\n"));
    for coded in [
        gzip(file.as_bytes()),
        zlib(file.as_bytes()),
        brotli(file.as_bytes()),
        zstd(file.as_bytes()),
    ] {
        assert!(
            !contains(&coded, value.as_bytes()),
            "the compressor stored the value as it is"
        );
    }
    file
}

/// Every way the issue found to carry a workspace value past the needles: each must be
/// refused `foreign-secret` (rule `secret detector workspace:.env`) with nothing reaching
/// the upstream, and the honest twin of each goes through.
#[tokio::test]
async fn attack_a_workspace_value_leaves_in_no_encoding() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let file = env_file(DB_PASSWORD);
    let v = DB_PASSWORD;
    let reversed: String = v.chars().rev().collect();
    let attempts: Vec<(&str, Vec<u8>)> = vec![
        (
            "gzip body",
            post("/p", "content-encoding: gzip\r\n", &gzip(file.as_bytes())),
        ),
        (
            "x-gzip body",
            post("/p", "content-encoding: x-gzip\r\n", &gzip(file.as_bytes())),
        ),
        (
            "deflate (zlib) body",
            post(
                "/p",
                "content-encoding: deflate\r\n",
                &zlib(file.as_bytes()),
            ),
        ),
        (
            "deflate (raw) body",
            post(
                "/p",
                "content-encoding: deflate\r\n",
                &raw_deflate(file.as_bytes()),
            ),
        ),
        (
            "br body",
            post("/p", "content-encoding: br\r\n", &brotli(file.as_bytes())),
        ),
        (
            "zstd body",
            post("/p", "content-encoding: zstd\r\n", &zstd(file.as_bytes())),
        ),
        (
            "gzip of gzip",
            post(
                "/p",
                "content-encoding: gzip, gzip\r\n",
                &gzip(&gzip(file.as_bytes())),
            ),
        ),
        (
            "JSON \\u escapes",
            post(
                "/p",
                "content-type: application/json\r\n",
                format!("{{\"v\":\"{}\"}}", json_escaped(v)).as_bytes(),
            ),
        ),
        (
            "JSON, one character escaped",
            post(
                "/p",
                "content-type: application/json\r\n",
                br#"{"v":"hunter2-c\u006frrect-horse"}"#,
            ),
        ),
        (
            "form body, every byte %XX",
            post(
                "/p",
                "content-type: application/x-www-form-urlencoded\r\n",
                format!("user=a&password={}", percent_all(API_SECRET)).as_bytes(),
            ),
        ),
        (
            "double-percent query",
            get(&format!("/q?p={}", percent_all(v).replace('%', "%25")), ""),
        ),
        ("hex body", post("/p", "", hex(file.as_bytes()).as_bytes())),
        (
            "upper-case hex body",
            post("/p", "", hex(v.as_bytes()).to_uppercase().as_bytes()),
        ),
        (
            "hex body, one digit before",
            post("/p", "", format!("7{}", hex(v.as_bytes())).as_bytes()),
        ),
        ("hex query", get(&format!("/q?d={}", hex(v.as_bytes())), "")),
        (
            "hex header",
            get("/h", &format!("x-trace: {}\r\n", hex(v.as_bytes()))),
        ),
        (
            "\\x escapes",
            post(
                "/p",
                "",
                v.bytes()
                    .fold(String::new(), |mut s, b| {
                        let _ = write!(s, "\\x{b:02x}");
                        s
                    })
                    .as_bytes(),
            ),
        ),
        (
            "upper-cased value",
            post("/p", "", v.to_uppercase().as_bytes()),
        ),
        (
            "upper-cased value in a header",
            get("/h", &format!("x-note: {}\r\n", v.to_uppercase())),
        ),
        ("reversed", post("/p", "", reversed.as_bytes())),
        (
            "base32 of the file",
            post("/p", "", base32(file.as_bytes()).as_bytes()),
        ),
        (
            "lower-case base32 of the value",
            post("/p", "", base32(v.as_bytes()).to_lowercase().as_bytes()),
        ),
        ("spaced", post("/p", "", spaced(v).as_bytes())),
        (
            "spaced hex",
            post(
                "/p",
                "",
                v.bytes()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
                    .as_bytes(),
            ),
        ),
    ];
    for (what, raw) in &attempts {
        let r = send(h.addr, raw).await;
        assert_eq!(r.status, 403, "{what}: {}", r.body);
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("foreign-secret"),
            "{what}"
        );
        assert_eq!(r.json()["rule"], "secret detector workspace:.env", "{what}");
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "a request reached the upstream: {}",
        String::from_utf8_lossy(&got.lock().unwrap())
    );
    // Honest requests of the same shapes pass.
    for raw in [
        post(
            "/p",
            "content-encoding: gzip\r\n",
            &gzip(b"APP=1\nOTHER=2\n"),
        ),
        post("/p", "", hex(b"just some bytes here").as_bytes()),
        post(
            "/p",
            "",
            b"HUNTER2 is a password meme; the horse is correct",
        ),
        post("/p", "", spaced("not the value at all").as_bytes()),
        get("/q?p=%2541%2542", ""),
    ] {
        let r = send(h.addr, &raw).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&raw));
    }
    let lines = h.finish().await;
    let refused = lines
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .count();
    assert_eq!(refused, attempts.len(), "{lines:?}");
    let text = serde_json::to_string(&lines).unwrap();
    assert!(!text.contains(DB_PASSWORD), "a value reached the audit log");
}

/// The AWS key pair: refused however it is spelled (compressed, escaped, hex), in either
/// order, with any separator (also `=` right after the secret) and up to 256 bytes apart.
#[tokio::test]
async fn attack_a_known_format_key_pair_leaves_in_no_encoding() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let pair = format!("aws_access_key_id={AWS_ID}\naws_secret_access_key={AWS_SECRET}\n");
    let config = format!("{}{pair}", env_file("not-the-secret-value"));
    assert!(!contains(&gzip(config.as_bytes()), AWS_SECRET.as_bytes()));
    let attempts: Vec<(&str, Vec<u8>)> = vec![
        (
            "gzip",
            post("/p", "content-encoding: gzip\r\n", &gzip(config.as_bytes())),
        ),
        (
            "JSON escapes",
            post(
                "/p",
                "content-type: application/json\r\n",
                format!("{{\"k\":\"{}\"}}", json_escaped(&pair)).as_bytes(),
            ),
        ),
        ("hex", post("/p", "", hex(pair.as_bytes()).as_bytes())),
        (
            "secret followed by =",
            post("/p", "", format!("{AWS_ID}:{AWS_SECRET}=").as_bytes()),
        ),
        (
            "secret before the id",
            post("/p", "", format!("s={AWS_SECRET}&i={AWS_ID}").as_bytes()),
        ),
        (
            "120 characters apart",
            post(
                "/p",
                "",
                format!("{AWS_ID} {} {AWS_SECRET}", "x".repeat(120)).as_bytes(),
            ),
        ),
        (
            "250 characters apart, secret first",
            post(
                "/p",
                "",
                format!("{AWS_SECRET}|{}|{AWS_ID}", "- ".repeat(125)).as_bytes(),
            ),
        ),
    ];
    for (what, raw) in &attempts {
        let r = send(h.addr, raw).await;
        assert_eq!(r.status, 403, "{what}: {}", r.body);
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("foreign-secret"),
            "{what}"
        );
        assert_eq!(r.json()["rule"], "secret detector aws-access-key", "{what}");
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "a request reached the upstream"
    );
    // The id alone, or far from any 40-character run, is no pair.
    for body in [
        format!("id={AWS_ID}"),
        format!("{AWS_ID} {} {AWS_SECRET}", "x ".repeat(400)),
    ] {
        let r = send(h.addr, &post("/p", "", body.as_bytes())).await;
        assert_eq!(r.status, 200, "{body}");
    }
    h.finish().await;
}

/// A gzip (and a zstd) body that expands past what the proxy will decode: refused
/// `decompression-bomb` whether announced small or streamed, with nothing sent upstream
/// and the proxy never holding the expansion.
#[tokio::test]
async fn attack_a_decompression_bomb_is_refused_not_expanded() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let zeros = vec![0u8; 64 << 20];
    let gz = gzip(&zeros);
    let zs = zstd(&zeros);
    assert!(gz.len() < 128 * 1024 && zs.len() < 64 * 1024);
    for (what, raw) in [
        ("gzip", post("/bomb", "content-encoding: gzip\r\n", &gz)),
        ("zstd", post("/bomb", "content-encoding: zstd\r\n", &zs)),
    ] {
        let r = send(h.addr, &raw).await;
        assert_eq!(r.status, 403, "{what}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("decompression-bomb"),
            "{what}"
        );
    }
    // Streamed (chunked): cut at the chunk that crosses the bound.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"POST http://allowed.test/bomb HTTP/1.1\r\nhost: allowed.test\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    for part in gz.chunks(8192) {
        let mut chunk = format!("{:x}\r\n", part.len()).into_bytes();
        chunk.extend_from_slice(part);
        chunk.extend_from_slice(b"\r\n");
        if s.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("an answer");
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("decompression-bomb")
    );
    drop(s);
    let lines = h.finish().await;
    let sent = got.lock().unwrap().len();
    assert!(
        sent < 4 << 20,
        "{sent} bytes of the expansion reached the upstream"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["reason"] == "decompression-bomb")
            .count(),
        3,
        "{lines:?}"
    );
}

/// Honest compressed uploads still work: read whole, the body goes as sent (it was
/// searched decoded); streamed, it goes decoded as it was searched, sent chunked; an
/// encoding the proxy cannot read is refused with what to do instead.
#[tokio::test]
async fn honest_compressed_bodies_arrive_whole_and_unknown_ones_are_refused() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let json = "{\"name\":\"pkg\",\"files\":[\"a.rs\",\"b.rs\"]}".repeat(40);
    let gz_json = gzip(json.as_bytes());
    let r = send(
        h.addr,
        &post(
            "/small",
            "content-type: application/json\r\ncontent-encoding: gzip\r\n",
            &gz_json,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let sent = got.lock().unwrap().clone();
    let lower = String::from_utf8_lossy(&sent).to_ascii_lowercase();
    assert!(lower.contains("content-encoding: gzip\r\n"), "{lower}");
    assert!(sent.ends_with(&gz_json), "as sent");
    got.lock().unwrap().clear();
    // Streamed: 300 KiB of text, gzip'd, chunked.
    let big: String = (0..6000)
        .map(|i| format!("line {i}: nothing secret here at all\n"))
        .collect();
    let gz = gzip(big.as_bytes());
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"POST http://allowed.test/big HTTP/1.1\r\nhost: allowed.test\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    for part in gz.chunks(1000) {
        let mut chunk = format!("{:x}\r\n", part.len()).into_bytes();
        chunk.extend_from_slice(part);
        chunk.extend_from_slice(b"\r\n");
        s.write_all(&chunk).await.unwrap();
    }
    s.write_all(b"0\r\n\r\n").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("an answer");
    assert_eq!(r.status, 200);
    drop(s);
    let sent = got.lock().unwrap().clone();
    let end = sent.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(
        !String::from_utf8_lossy(&sent[..end])
            .to_ascii_lowercase()
            .contains("content-encoding")
    );
    assert_eq!(dechunk(&sent[end + 4..]), big.as_bytes());
    got.lock().unwrap().clear();
    // An encoding nobody can read here.
    let r = send(
        h.addr,
        &post("/z", "content-encoding: compress\r\n", b"\x1f\x9d\x90abc"),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("content-encoding-unsupported")
    );
    assert!(
        r.body.contains("gzip"),
        "the answer says what works: {}",
        r.body
    );
    assert!(got.lock().unwrap().is_empty());
    h.finish().await;
}

/// The bytes of a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap().trim(), 16).unwrap();
        b = &b[nl + 2..];
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[..n]);
        b = &b[n + 2..];
    }
}

/// A value cut in two and sent as two requests to the same host: the second is refused
/// (the session keeps the end of what it sent to each host and searches the next body or
/// query joined to it); the same for the AWS pair, in either order. Another host's
/// requests are searched with their own.
#[tokio::test]
async fn attack_a_value_split_over_two_requests_is_caught() {
    let (up, got) = recorder().await;
    let mut h = harness(up).await;
    let (a, b) = DB_PASSWORD.split_at(9);
    // Bodies: the first half goes (it is no secret alone), the second is refused.
    let r = send(h.addr, &post("/one", "", a.as_bytes())).await;
    assert_eq!(r.status, 200);
    // Another host in between does not break the join.
    let other = b"POST http://other.allowed.test/x HTTP/1.1\r\nhost: other.allowed.test\r\ncontent-length: 3\r\n\r\nxyz";
    assert_eq!(send(h.addr, other).await.status, 200);
    let r = send(h.addr, &post("/two", "", b.as_bytes())).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["rule"], "secret detector workspace:.env");
    // Query values: the same.
    let (c, d) = API_SECRET.split_at(7);
    let q = |part: &str| get(&format!("/q?p={}", percent_all(part)), "");
    assert_eq!(send(h.addr, &q(c)).await.status, 200);
    let r = send(h.addr, &q(d)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    // The AWS pair, id first then secret, and secret first then id (to a fresh host key).
    assert_eq!(
        send(
            h.addr,
            &post("/k", "", format!("{{\"id\":\"{AWS_ID}\"}}").as_bytes())
        )
        .await
        .status,
        200
    );
    let r = send(
        h.addr,
        &post(
            "/k",
            "",
            format!("{{\"secret\":\"{AWS_SECRET}\"}}").as_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["rule"], "secret detector aws-access-key");
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert!(!sent.contains(b) && !sent.contains(AWS_SECRET), "{sent}");
    h.finish().await;
}

/// A TLS upstream for `allowed.test` that echoes the `authorization` header it got: as
/// is (`/echo`), or compressed by the path's coding (`/gz`, `/deflate`, `/br`, `/zstd`,
/// `/gz-chunked` in small chunks), hex- or base64-encoded (`/hex`, `/b64`), or with a
/// coding nobody can read (`/compress`). Every request head is kept.
async fn echo_upstream() -> (
    SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
    Arc<Mutex<Vec<String>>>,
) {
    let certified = rcgen::generate_simple_self_signed(vec!["allowed.test".to_owned()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                loop {
                    let head = read_head(&mut s).await;
                    if head.is_empty() {
                        return;
                    }
                    kept.lock().unwrap().push(head.clone());
                    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    let auth = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("authorization")
                                .then(|| v.trim().to_owned())
                        })
                        .unwrap_or_default();
                    // Padding that repeats, so every coder really compresses.
                    let echo = format!(
                        "{{\"you sent\":\"{auth}\",\"pad\":\"{}\"}}",
                        "echo ".repeat(60)
                    );
                    let (coding, body): (&str, Vec<u8>) = match path.as_str() {
                        "/gz" | "/gz-chunked" => ("gzip", gzip(echo.as_bytes())),
                        "/deflate" => ("deflate", zlib(echo.as_bytes())),
                        "/br" => ("br", brotli(echo.as_bytes())),
                        "/zstd" => ("zstd", zstd(echo.as_bytes())),
                        "/gz-br" => ("gzip, br", brotli(&gzip(echo.as_bytes()))),
                        "/hex" => ("", hex(auth.as_bytes()).into_bytes()),
                        "/b64" => {
                            use base64::Engine as _;
                            (
                                "",
                                base64::engine::general_purpose::STANDARD
                                    .encode(format!("auth={auth}"))
                                    .into_bytes(),
                            )
                        }
                        "/compress" => ("compress", b"\x1f\x9d\x90\x00".to_vec()),
                        _ => ("", echo.into_bytes()),
                    };
                    let enc = if coding.is_empty() {
                        String::new()
                    } else {
                        format!("content-encoding: {coding}\r\netag: \"v1\"\r\n")
                    };
                    let ok = if path == "/gz-chunked" {
                        let mut out =
                            format!("HTTP/1.1 200 OK\r\n{enc}transfer-encoding: chunked\r\n\r\n")
                                .into_bytes();
                        for part in body.chunks(3) {
                            out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                            out.extend_from_slice(part);
                            out.extend_from_slice(b"\r\n");
                        }
                        out.extend_from_slice(b"0\r\n\r\n");
                        s.write_all(&out).await.is_ok()
                    } else {
                        let mut out = format!(
                            "HTTP/1.1 200 OK\r\n{enc}content-length: {}\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        out.extend_from_slice(&body);
                        s.write_all(&out).await.is_ok()
                    };
                    if !ok {
                        return;
                    }
                }
            });
        }
    });
    (addr, cert, heads)
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap_or(0) == 0 {
            return String::new();
        }
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

/// One response on `s`: head and body (content-length or chunked), the body decoded as
/// its `content-encoding` says (as `curl --compressed` does).
async fn response<S: AsyncRead + Unpin>(s: &mut S) -> (String, Vec<u8>) {
    let head = read_head(s).await;
    let lower = head.to_ascii_lowercase();
    let header = |name: &str| {
        lower.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == name).then(|| v.trim().to_owned())
        })
    };
    let mut body = Vec::new();
    if let Some(n) = header("content-length") {
        body = vec![0u8; n.parse().unwrap()];
        s.read_exact(&mut body).await.unwrap();
    } else if header("transfer-encoding").as_deref() == Some("chunked") {
        let mut raw = Vec::new();
        let mut b = [0u8; 1];
        while !raw.ends_with(b"\r\n0\r\n\r\n") && raw != b"0\r\n\r\n" {
            s.read_exact(&mut b).await.unwrap();
            raw.push(b[0]);
        }
        body = dechunk(&raw);
    }
    let decoded = match header("content-encoding").as_deref() {
        None | Some("identity") => body,
        Some("gzip") => {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut out)
                .unwrap();
            out
        }
        Some(other) => panic!("the agent got content-encoding {other}: {head}"),
    };
    (head, decoded)
}

async fn tunnel(h: &Harness) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\nhost: allowed.test:443\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(ServerName::try_from("allowed.test").unwrap(), s)
        .await
        .unwrap()
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, raw: &str) -> (String, Vec<u8>) {
    s.write_all(raw.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), response(s))
        .await
        .expect("an answer")
}

const REAL: &str = "sk-REAL-9f2e7c41d0b8a6e3";
const PLACEHOLDER: &str = "airlock-placeholder-api-01";

async fn credential_harness(
    up: SocketAddr,
    root: rustls::pki_types::CertificateDer<'static>,
) -> Harness {
    let extra = Extra {
        policy: "\n[[credentials]]\nname = \"api\"\nsource = { env = \"API_KEY\" }\nhosts = [\"allowed.test\"]\nheader = \"authorization\"\nformat = \"Bearer {}\"\n".into(),
        credentials: vec![("api", REAL, PLACEHOLDER)],
        upstream_roots: vec![root],
        ..Extra::default()
    };
    Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 443, up)],
        Limits::default(),
        &extra,
    )
    .await
}

/// `curl --compressed -H "Authorization: Bearer $TOKEN" https://cred.test/echo-auth-gz`:
/// the upstream echoes the injected header gzip'd (deflate, br, zstd, gzip then br, in
/// three-byte chunks, hex, base64); the agent gets it decoded and masked every time, never
/// the real value, with headers that describe what it got.
#[tokio::test]
async fn attack_the_real_credential_never_comes_back_in_any_encoding() {
    let (up, root, heads) = echo_upstream().await;
    let mut h = credential_harness(up, root).await;
    let mut t = tunnel(&h).await;
    for path in [
        "/echo",
        "/gz",
        "/gz-chunked",
        "/deflate",
        "/br",
        "/zstd",
        "/gz-br",
        "/hex",
        "/b64",
    ] {
        let (head, body) = exchange(
            &mut t,
            &format!(
                "GET {path} HTTP/1.1\r\nhost: allowed.test\r\naccept-encoding: gzip, deflate, br, zstd\r\nauthorization: Bearer {PLACEHOLDER}\r\n\r\n"
            ),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        let text = String::from_utf8_lossy(&body).into_owned();
        let real_hex = hex(REAL.as_bytes());
        assert!(
            !text.contains(REAL) && !text.to_ascii_lowercase().contains(&real_hex),
            "{path}: the real credential reached the agent: {text}"
        );
        if path == "/b64" {
            // The masked run decodes to nothing of the value.
            use base64::Engine as _;
            assert!(text.contains("****"), "{text}");
            let shown = base64::engine::general_purpose::STANDARD
                .decode(text.replace('*', "A").as_bytes())
                .unwrap();
            assert!(!contains(&shown, REAL.as_bytes()), "{text}");
            assert!(
                !contains(&shown, &REAL.as_bytes()[1..REAL.len() - 1]),
                "{text}"
            );
        }
        if path != "/hex" && path != "/b64" {
            assert!(
                text.contains(&format!("Bearer {}", "*".repeat(REAL.len()))),
                "{path}: masked in place: {text}"
            );
        }
        let lower = head.to_ascii_lowercase();
        if path != "/echo" && path != "/hex" && path != "/b64" {
            assert!(!lower.contains("content-encoding"), "{path}: {head}");
            assert!(
                !lower.contains("etag: \"v1\""),
                "{path}: a strong etag of the encoded form: {head}"
            );
        }
    }
    // The upstream was never asked for an encoding the proxy cannot read.
    for head in heads.lock().unwrap().iter() {
        let ae = head
            .to_ascii_lowercase()
            .lines()
            .find_map(|l| {
                l.strip_prefix("accept-encoding:")
                    .map(|v| v.trim().to_owned())
            })
            .unwrap_or_default();
        assert_eq!(ae, "gzip, deflate, br, zstd", "{head}");
    }
    drop(t);
    let lines = h.finish().await;
    assert!(!serde_json::to_string(&lines).unwrap().contains(REAL));
}

/// An encoding the proxy cannot decode is not asked for (`accept-encoding` keeps only what
/// it reads, `identity` when nothing is left), and an upstream that answers in one anyway
/// has its answer refused `content-encoding-unsupported`, audited, nothing of it relayed.
#[tokio::test]
async fn attack_an_encoding_the_proxy_cannot_read_is_refused() {
    let (up, root, heads) = echo_upstream().await;
    let mut h = credential_harness(up, root).await;
    let mut t = tunnel(&h).await;
    let (head, body) = exchange(
        &mut t,
        &format!(
            "GET /compress HTTP/1.1\r\nhost: allowed.test\r\naccept-encoding: compress, x-bzip2, gzip;q=0.5, *\r\nauthorization: Bearer {PLACEHOLDER}\r\n\r\n"
        ),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(
        head.contains("x-airlock-error: content-encoding-unsupported"),
        "{head}"
    );
    assert!(
        !contains(&body, b"\x1f\x9d"),
        "nothing of the answer relayed"
    );
    drop(t);
    let mut t = tunnel(&h).await;
    let _ = exchange(
        &mut t,
        "GET /echo HTTP/1.1\r\nhost: allowed.test\r\naccept-encoding: compress\r\n\r\n",
    )
    .await;
    drop(t);
    let heads = heads.lock().unwrap().clone();
    let ae = |head: &str| {
        head.to_ascii_lowercase().lines().find_map(|l| {
            l.strip_prefix("accept-encoding:")
                .map(|v| v.trim().to_owned())
        })
    };
    assert_eq!(ae(&heads[0]).as_deref(), Some("gzip;q=0.5"), "{}", heads[0]);
    assert_eq!(ae(&heads[1]).as_deref(), Some("identity"), "{}", heads[1]);
    let lines = h.finish().await;
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "content-encoding-unsupported")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    assert_eq!(refused[0]["decision"], "deny");
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
