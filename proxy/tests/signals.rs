//! Signals, not verdicts (issue 21 item 5), from the agent's seat: a file base64-encoded
//! into a request body, or sent compressed, to an allowed writable host is audited as a
//! signal and goes on; where the policy makes the signal a refusal, the request is refused
//! (`encoded-blob`, `high-entropy`) and nothing of it reaches the upstream, whole or
//! streamed; report mode logs what it would refuse; the LLM API host is not measured.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use airlock_proxy::limits::Limits;
use base64::Engine as _;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

async fn harness(mode: &str, upstream: SocketAddr, signals: &str) -> Harness {
    let extra = Extra {
        policy: signals.to_owned(),
        ..Extra::default()
    };
    Harness::start_extra(
        mode,
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

/// Deterministic bytes that look encrypted (xorshift).
fn random(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// `~/.ssh`-sized loot, base64-encoded as `base64 FILE` prints it (76 columns).
fn encoded_file() -> String {
    let flat = base64::engine::general_purpose::STANDARD.encode(random(9000));
    flat.as_bytes().chunks(76).fold(String::new(), |mut s, l| {
        let _ = writeln!(s, "{}", std::str::from_utf8(l).unwrap());
        s
    })
}

fn post(host: &str, body: &str) -> String {
    format!(
        "POST http://{host}/upload HTTP/1.1\r\nhost: {host}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const DENY_BLOBS: &str = "[signals]\nencoded_blob = \"deny\"\nhigh_entropy = \"deny\"\n";

#[tokio::test]
async fn an_encoded_file_is_a_signal_by_default_and_goes_on() {
    let (up, got) = recorder().await;
    let mut h = harness("enforce", up, "").await;
    let file = encoded_file();
    let (_s, r) = request(h.addr, &post("allowed.test", &file)).await;
    assert_eq!(r.status, 200, "log only by default");
    assert!(String::from_utf8_lossy(&got.lock().unwrap()).contains(&file[..200]));
    // An honest body of the same size raises nothing.
    let prose = "The quick brown fox jumps over the lazy dog.\n".repeat(300);
    let (_s, r) = request(h.addr, &post("allowed.test", &prose)).await;
    assert_eq!(r.status, 200);
    let lines = h.finish().await;
    let l = lines_for(&lines, "allowed.test");
    let closes: Vec<_> = l.iter().filter(|l| l["status"] == 200).collect();
    assert_eq!(closes.len(), 2, "{l:?}");
    assert_eq!(closes[0]["decision"], "allow");
    assert_eq!(closes[0]["signals"][0]["signal"], "encoded-blob", "{l:?}");
    assert_eq!(closes[0]["signals"][0]["alphabet"], "base64");
    assert!(closes[0]["signals"][0]["run"].as_u64().unwrap() >= 12_000);
    assert_eq!(closes[1]["signals"], serde_json::json!([]), "prose: {l:?}");
}

#[tokio::test]
async fn the_policy_turns_the_signal_into_a_refusal_and_nothing_leaves() {
    let (up, got) = recorder().await;
    let mut h = harness("enforce", up, DENY_BLOBS).await;
    let encoded = encoded_file();
    let hex: String = random(4000).iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    for (body, reason) in [
        (encoded.as_str(), "encoded-blob"),
        (hex.as_str(), "encoded-blob"),
    ] {
        let (_s, r) = request(h.addr, &post("allowed.test", body)).await;
        assert_eq!(r.status, 403);
        assert_eq!(r.header("x-airlock-error").as_deref(), Some(reason));
        assert!(
            r.json()["rule"]
                .as_str()
                .is_some_and(|s| s.starts_with("signal encoded-blob")),
            "the answer names the signal: {}",
            r.body
        );
    }
    // Compressed bytes (high entropy), sent as a binary body.
    let gz = random(16_384);
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    let head = format!(
        "POST http://allowed.test/upload HTTP/1.1\r\nhost: allowed.test\r\ncontent-type: application/gzip\r\ncontent-length: {}\r\n\r\n",
        gz.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&gz).await.unwrap();
    let r = read_resp(&mut s).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-airlock-error").as_deref(), Some("high-entropy"));
    // The LLM API is not measured: the same file as context goes to the provider.
    let (_s, r) = request(h.addr, &post("api.anthropic.com", &encoded)).await;
    assert_eq!(r.status, 200);
    let lines = h.finish().await;
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    assert_eq!(
        sent.matches("POST /upload").count(),
        1,
        "only the LLM request went upstream: {}",
        &sent[..sent.len().min(300)]
    );
    assert!(sent.contains("host: api.anthropic.com"));
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["decision"] == "deny" && l["host"] == "allowed.test")
        .collect();
    assert_eq!(refused.len(), 3, "{lines:?}");
    assert_eq!(refused[2]["reason"], "high-entropy");
    assert_eq!(refused[2]["signals"][0]["signal"], "high-entropy");
    assert!(refused[2]["signals"][0]["bits"].as_f64().unwrap() > 7.9);
}

/// A streamed upload (chunked, past what is read whole): cut at the chunk where the run
/// crosses the threshold; what went before is at most the threshold.
#[tokio::test]
async fn a_streamed_encoded_upload_is_cut_where_the_run_crosses_the_threshold() {
    let (up, got) = recorder().await;
    let mut h = harness("enforce", up, DENY_BLOBS).await;
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(
        b"POST http://allowed.test/upload HTTP/1.1\r\nhost: allowed.test\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let prose = "an honest preamble of plain words.\n".repeat(2000);
    let encoded = encoded_file();
    let mut parts = vec![prose.as_str()];
    parts.extend(
        encoded
            .as_bytes()
            .chunks(1000)
            .map(|c| std::str::from_utf8(c).unwrap()),
    );
    for part in parts {
        // Once the proxy refuses it answers and may close: later writes can fail.
        let _ = s
            .write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
            .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let r = tokio::time::timeout(Duration::from_secs(10), read_resp(&mut s))
        .await
        .expect("the proxy answers");
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-airlock-error").as_deref(), Some("encoded-blob"));
    drop(s);
    let lines = h.finish().await;
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    let leaked = encoded.lines().filter(|l| sent.contains(*l)).count() * 77;
    assert!(
        leaked <= 4096 + 1000,
        "{leaked} bytes of the encoded file reached the upstream"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "encoded-blob" && l["signals"][0]["signal"] == "encoded-blob"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn report_mode_logs_the_refusal_it_would_make_and_sends() {
    let (up, got) = recorder().await;
    let mut h = harness("report", up, DENY_BLOBS).await;
    let file = encoded_file();
    let (_s, r) = request(h.addr, &post("allowed.test", &file)).await;
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&got.lock().unwrap()).contains(&file[..200]));
    let lines = h.finish().await;
    let l = lines_for(&lines, "allowed.test");
    assert!(
        l.iter().any(|l| l["decision"] == "report"
            && l["reason"] == "encoded-blob"
            && l["signals"][0]["signal"] == "encoded-blob"),
        "{l:?}"
    );
}

/// `xxd -p -c 30 loot | ...`: 12 KB of hex wrapped at 59 characters (or any other width),
/// and gzip'd data spelled in a 16-symbol alphabet of the agent's choosing (no hex digit
/// in it): both are encoded blobs, refused where the policy says so; prose and a word list
/// of the same size are not.
#[tokio::test]
async fn attack_encoded_data_at_any_line_width_or_in_any_alphabet_is_a_signal() {
    let (up, got) = recorder().await;
    let mut h = harness("enforce", up, DENY_BLOBS).await;
    let hex: String = random(6000).iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    let wrap = |text: &str, width: usize| -> String {
        text.as_bytes()
            .chunks(width)
            .fold(String::new(), |mut s, l| {
                let _ = writeln!(s, "{}", std::str::from_utf8(l).unwrap());
                s
            })
    };
    let gz = {
        use std::io::Write as _;
        let text: String = (0..4000)
            .map(|i| format!("KEY_{i}={}\n", i * 7919))
            .collect();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    assert!(gz.len() > 6000, "{}", gz.len());
    let symbols = b"ghijklmnopqrstuv";
    let mapped: String = gz
        .iter()
        .flat_map(|b| [symbols[usize::from(b >> 4)], symbols[usize::from(b & 15)]])
        .map(char::from)
        .collect();
    for (what, body) in [
        ("hex wrapped at 59", wrap(&hex, 59)),
        ("hex wrapped at 17", wrap(&hex, 17)),
        ("gzip in 16 symbols", mapped.clone()),
        ("gzip in 16 symbols wrapped at 59", wrap(&mapped, 59)),
    ] {
        let (_s, r) = request(h.addr, &post("allowed.test", &body)).await;
        assert_eq!(r.status, 403, "{what}");
        assert_eq!(
            r.header("x-airlock-error").as_deref(),
            Some("encoded-blob"),
            "{what}"
        );
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "a blob reached the upstream"
    );
    let words: String = (0..3000).map(|i| format!("word{}\n", i % 97)).collect();
    let prose = "The quick brown fox jumps over the lazy dog.\n".repeat(300);
    let digits: String = (0..3000)
        .map(|i| format!("{:.6},", f64::from(i).sin()))
        .collect();
    for body in [words, prose, format!("[{digits}0]")] {
        let (_s, r) = request(h.addr, &post("allowed.test", &body)).await;
        assert_eq!(r.status, 200, "{}", &body[..80]);
    }
    h.finish().await;
}
