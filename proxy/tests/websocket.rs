//! WebSocket on inspected hosts, as attacks from the agent's seat: a host with a credential
//! bound refuses the upgrade unless `network.websocket` lists it; where it is listed the
//! relay reads every frame, refuses the agent's frames that carry a secret (Close 1008,
//! nothing of that frame upstream) and scrubs the upstream's.
//!
//! The upstream is a hand-written WebSocket server on loopback that records every request
//! head and every frame it receives (unmasked), says what it is told to after the `101`,
//! and echoes each data frame. Frames are built and read with the proxy's own codec
//! (`airlock_proxy::websocket`), which its unit tests check against RFC 6455's examples.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use airlock_proxy::websocket::{Frame, Opcode, Parser};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const PLACEHOLDER: &str = "airlock-placeholder-api-01";
const REAL: &str = "REAL-secret-9f2e7c";
/// An AWS access key id with its secret nearby (a built-in detector; not AWS's documented
/// example, which passes everywhere).
const AWS: &str = "aws_access_key_id = AKIA2Z3Y4X5W6V7U2T3S\naws_secret_access_key = abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB\n";

/// The credential bound to allowed.test, and (when `listed`) WebSocket allowed there.
fn extra(listed: bool) -> Extra {
    let websocket = if listed {
        "websocket = [\"allowed.test\"]\n"
    } else {
        ""
    };
    Extra {
        policy: format!(
            "{websocket}\n[[credentials]]\nname = \"api\"\nsource = {{ env = \"API_KEY\" }}\nhosts = [\"allowed.test\"]\nheader = \"authorization\"\nformat = \"Bearer {{}}\"\n"
        ),
        credentials: vec![("api", REAL, PLACEHOLDER)],
        ..Extra::default()
    }
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap_or(0) == 0 {
            break;
        }
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

/// Frames read from one side of a socket.
struct Frames {
    parser: Parser,
    buf: Vec<u8>,
}

impl Frames {
    fn new(from_client: bool) -> Self {
        Self {
            parser: Parser::new(from_client),
            buf: Vec::new(),
        }
    }

    /// The next frame; `None` at the end of the stream (or a broken one).
    async fn next<S: AsyncRead + Unpin>(&mut self, s: &mut S) -> Option<Frame> {
        loop {
            if let Some((f, used)) = self.parser.parse(&self.buf).ok()? {
                self.buf.drain(..used);
                return Some(f);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn text(fin: bool, opcode: Opcode, payload: &str) -> Frame {
    Frame {
        fin,
        opcode,
        payload: payload.as_bytes().to_vec(),
    }
}

/// What the upstream saw: each request head, then each frame it received.
struct Upstream {
    addr: SocketAddr,
    heads: mpsc::UnboundedReceiver<String>,
    frames: mpsc::UnboundedReceiver<Frame>,
}

impl Upstream {
    /// Every frame received so far (after the relay ended).
    fn received(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Ok(f) = self.frames.try_recv() {
            out.push(f);
        }
        out
    }
}

/// A WebSocket upstream: answers `101` (plus `extra_head`), sends `say`, then echoes each
/// data frame it receives and answers a Close with a Close.
async fn ws_upstream(extra_head: &'static str, say: Vec<Frame>) -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (htx, heads) = mpsc::unbounded_channel();
    let (ftx, frames) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (htx, ftx, say) = (htx.clone(), ftx.clone(), say.clone());
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                let _ = htx.send(head);
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n{extra_head}\r\n"
                );
                s.write_all(answer.as_bytes()).await.unwrap();
                for f in &say {
                    s.write_all(&f.encode(None)).await.unwrap();
                }
                let mut from = Frames::new(true);
                while let Some(f) = from.next(&mut s).await {
                    let _ = ftx.send(f.clone());
                    let reply = match f.opcode {
                        Opcode::Close => Frame::close(1000, ""),
                        Opcode::Ping => Frame {
                            opcode: Opcode::Pong,
                            ..f
                        },
                        Opcode::Pong => continue,
                        _ => f,
                    };
                    if s.write_all(&reply.encode(None)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Upstream {
        addr,
        heads,
        frames,
    }
}

/// The agent's upgrade to `host` through plain HTTP forwarding; the socket and the answer's
/// head.
async fn upgrade(proxy: SocketAddr, host: &str, extra_head: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let req = format!(
        "GET http://{host}/ws HTTP/1.1\r\nhost: {host}\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra_head}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await;
    (s, head)
}

async fn send<S: AsyncWrite + Unpin>(s: &mut S, frames: &[Frame], key: [u8; 4]) {
    for f in frames {
        s.write_all(&f.encode(Some(key))).await.unwrap();
    }
}

/// Frames the agent receives until the proxy or the upstream closes (a Close frame or the
/// end of the stream), within 5 s.
async fn until_close<S: AsyncRead + Unpin>(s: &mut S) -> Vec<Frame> {
    let mut from = Frames::new(false);
    let mut got = Vec::new();
    let read = async {
        while let Some(f) = from.next(s).await {
            let close = f.opcode == Opcode::Close;
            got.push(f);
            if close {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the relay answered");
    got
}

async fn harness(up: &Upstream, listed: bool, mode: &str) -> Harness {
    Harness::start_extra(
        mode,
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up.addr)],
        airlock_proxy::limits::Limits::default(),
        &extra(listed),
    )
    .await
}

fn ws_lines(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines.iter().filter(|l| l["path"] == "/ws").collect()
}

/// (a) Without `network.websocket`, a WebSocket on the credential's host is refused before
/// anything reaches the upstream, and the refusal names the switch.
#[tokio::test]
async fn without_the_switch_a_websocket_on_a_credential_host_is_refused() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, false, "enforce").await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(head.contains("x-airlock-error: upgrade-denied"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    let body = String::from_utf8(body).unwrap();
    assert!(body.contains("network.websocket"), "{body}");
    let lines = h.finish().await;
    assert!(up.heads.try_recv().is_err(), "nothing reached the upstream");
    let ws = ws_lines(&lines);
    assert_eq!(ws.len(), 1, "{lines:?}");
    assert_eq!(ws[0]["reason"], "upgrade-denied");
}

/// A name, and the frames (each with its masking key) the agent sends.
type Attack = (&'static str, Vec<(Frame, [u8; 4])>);

/// (b) Listed: the upgrade goes through, and a placeholder or the real value in a frame —
/// whole, split across two fragments of one message, or across two masked messages —
/// closes the relay with 1008 `credential-leak` at the frame that completes it; that frame
/// never reaches the upstream, nor does the first of two fragments (held for the next).
#[tokio::test]
async fn a_credential_in_a_frame_closes_the_relay_before_the_frame_goes_upstream() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let (a, b) = PLACEHOLDER.split_at(11);
    let attacks: Vec<Attack> = vec![
        (
            "whole",
            vec![(
                text(true, Opcode::Text, &format!("token {REAL}")),
                [1, 2, 3, 4],
            )],
        ),
        (
            "fragments",
            vec![
                (
                    text(false, Opcode::Text, &format!("first {a}")),
                    [9, 8, 7, 6],
                ),
                (
                    text(true, Opcode::Continuation, &format!("{b} last")),
                    [5, 4, 3, 2],
                ),
            ],
        ),
        (
            "messages",
            vec![
                (
                    text(true, Opcode::Binary, &format!("one {a}")),
                    [0xde, 0xad, 0xbe, 0xef],
                ),
                (
                    text(true, Opcode::Text, &format!("{b} two")),
                    [0x01, 0x80, 0xff, 0x7f],
                ),
            ],
        ),
    ];
    for (what, frames) in &attacks {
        let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
        assert!(head.starts_with("HTTP/1.1 101"), "{what}: {head}");
        assert!(up.heads.recv().await.unwrap().contains("GET /ws "));
        for (f, key) in frames {
            send(&mut s, std::slice::from_ref(f), *key).await;
        }
        let got = until_close(&mut s).await;
        let close = got.last().expect("a close frame");
        assert_eq!(close.close_code(), Some(1008), "{what}: {got:?}");
        assert_eq!(&close.payload[2..], b"credential-leak", "{what}");
        // Everything but the completing frame may have been echoed; nothing carries the
        // whole secret.
        assert!(
            got.iter()
                .all(|f| !contains(&f.payload, PLACEHOLDER) && !contains(&f.payload, REAL))
        );
    }
    let lines = h.finish().await;
    let received = up.received();
    let all: Vec<u8> = received.iter().flat_map(|f| f.payload.clone()).collect();
    assert!(
        !contains(&all, REAL) && !contains(&all, PLACEHOLDER),
        "{received:?}"
    );
    // Two fragments of one message: the first was held, so neither went.
    assert!(!contains(&all, b"first"), "{received:?}");
    assert!(
        !contains(&all, b"two") && !contains(&all, b"last"),
        "completing frames never went: {received:?}"
    );
    let ws = ws_lines(&lines);
    assert_eq!(ws.len(), 3, "{lines:?}");
    for l in ws {
        assert_eq!(l["decision"], "deny", "{l}");
        assert_eq!(l["reason"], "credential-leak", "{l}");
        assert_eq!(l["credential"], "api", "{l}");
        assert_eq!(l["status"], 101, "{l}");
        let rule = l["rule"].as_str().unwrap();
        assert!(
            rule.contains("websocket:") && rule.contains("close 1008 by proxy"),
            "{rule}"
        );
        assert!(!l.to_string().contains(REAL), "{l}");
    }
}

fn contains(hay: &[u8], needle: impl AsRef<[u8]>) -> bool {
    let n = needle.as_ref();
    hay.windows(n.len()).any(|w| w == n)
}

/// (c) A secret of a known format (an AWS key pair) in a frame to a host that is not its
/// provider's: `foreign-secret`, the detector named, the value nowhere; the frame, split
/// across two fragments, never reaches the upstream.
#[tokio::test]
async fn a_known_format_secret_in_a_frame_is_a_foreign_secret() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let (a, b) = AWS.split_at(AWS.len() - 12);
    send(
        &mut s,
        &[
            text(false, Opcode::Text, a),
            text(true, Opcode::Continuation, b),
        ],
        [7, 7, 7, 7],
    )
    .await;
    let got = until_close(&mut s).await;
    let close = got.last().unwrap();
    assert_eq!(close.close_code(), Some(1008), "{got:?}");
    assert_eq!(&close.payload[2..], b"foreign-secret");
    let lines = h.finish().await;
    let all: Vec<u8> = up
        .received()
        .iter()
        .flat_map(|f| f.payload.clone())
        .collect();
    assert!(!contains(&all, "abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB"));
    let ws = ws_lines(&lines);
    assert_eq!(ws.len(), 1, "{lines:?}");
    assert_eq!(ws[0]["reason"], "foreign-secret");
    let rule = ws[0]["rule"].as_str().unwrap();
    assert!(rule.starts_with("secret detector aws-"), "{rule}");
    assert!(!ws[0].to_string().contains("abcdEFGH1234"), "{}", ws[0]);
}

/// (d) The upstream sends the real credential back (whole, and split across two fragments):
/// the agent receives it overwritten, frame lengths intact.
#[tokio::test]
async fn the_upstreams_echo_of_the_real_credential_reaches_the_agent_scrubbed() {
    let (a, b) = REAL.split_at(7);
    let say = vec![
        text(true, Opcode::Text, &format!("you sent Bearer {REAL}")),
        text(false, Opcode::Text, &format!("split {a}")),
        text(true, Opcode::Continuation, &format!("{b} end")),
    ];
    let up = ws_upstream("", say.clone()).await;
    let mut h = harness(&up, true, "enforce").await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut from = Frames::new(false);
    let mut got = Vec::new();
    for _ in 0..say.len() {
        got.push(from.next(&mut s).await.unwrap());
    }
    for (g, sent) in got.iter().zip(&say) {
        assert_eq!(g.payload.len(), sent.payload.len());
        assert_eq!((g.fin, g.opcode), (sent.fin, sent.opcode));
    }
    assert_eq!(
        got[0].payload,
        format!("you sent Bearer {}", "*".repeat(REAL.len())).into_bytes()
    );
    assert_eq!(got[1].payload, b"split REAL-se");
    assert_eq!(
        got[2].payload,
        format!("{} end", "*".repeat(b.len())).into_bytes()
    );
    send(&mut s, &[Frame::close(1000, "")], [3, 3, 3, 3]).await;
    let _ = until_close(&mut s).await;
    drop(s);
    let lines = h.finish().await;
    assert!(!serde_json::to_string(&lines).unwrap().contains(REAL));
}

/// (e) Honest frames both ways pass unchanged: text, binary, fragments with a ping between
/// them, and a clean close; the record counts them.
#[tokio::test]
async fn honest_frames_pass_unchanged_both_ways() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let big = "x".repeat(70_000);
    let frames = vec![
        text(
            true,
            Opcode::Text,
            "{\"op\":\"subscribe\",\"airlock\":\"placeholder\"}",
        ),
        Frame {
            fin: true,
            opcode: Opcode::Binary,
            payload: vec![0, 255, 1, 254, 0x81, 0x7f],
        },
        text(false, Opcode::Text, "frag-one "),
        text(true, Opcode::Ping, "are you there"),
        text(true, Opcode::Continuation, &big),
    ];
    send(&mut s, &frames, [0x11, 0x22, 0x33, 0x44]).await;
    let mut from = Frames::new(false);
    let mut echoed = Vec::new();
    for _ in 0..frames.len() {
        echoed.push(from.next(&mut s).await.unwrap());
    }
    // Each frame as sent; the ping went before the fragment held for its successor.
    let mut expect = frames.clone();
    expect.swap(2, 3);
    expect[2].opcode = Opcode::Pong;
    assert_eq!(echoed, expect);
    send(&mut s, &[Frame::close(1000, "done")], [1, 1, 1, 1]).await;
    let got = until_close(&mut s).await;
    assert_eq!(got.last().unwrap().close_code(), Some(1000));
    drop(s);
    let lines = h.finish().await;
    let mut sent = frames.clone();
    sent.swap(2, 3);
    sent.push(Frame::close(1000, "done"));
    assert_eq!(up.received(), sent);
    let ws = ws_lines(&lines);
    assert_eq!(ws.len(), 1, "{lines:?}");
    assert_eq!(ws[0]["decision"], "allow", "{}", ws[0]);
    assert!(ws[0]["reason"].is_null(), "{}", ws[0]);
    let rule = ws[0]["rule"].as_str().unwrap();
    // The allow rule, then what was seen.
    assert_eq!(
        rule,
        "allowed.test; websocket: 6 frames up, 6 down, close 1000 by agent"
    );
}

/// (f) The agent offers permessage-deflate (compressed frames could hide a secret): the
/// offer never reaches the upstream; an upstream that negotiates an extension anyway gets
/// the relay refused.
#[tokio::test]
async fn compression_is_never_negotiated() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let offer = "sec-websocket-extensions: permessage-deflate; client_max_window_bits\r\n";
    let (s, head) = upgrade(h.addr, "allowed.test", offer).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let upgrade_head = up.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(
        upgrade_head.contains("upgrade: websocket"),
        "{upgrade_head}"
    );
    assert!(
        !upgrade_head.contains("sec-websocket-extensions"),
        "{upgrade_head}"
    );
    assert!(
        !upgrade_head.contains("permessage-deflate"),
        "{upgrade_head}"
    );
    drop(s);
    h.finish().await;

    let mut up = ws_upstream("sec-websocket-extensions: permessage-deflate\r\n", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let (_s, head) = upgrade(h.addr, "allowed.test", offer).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("x-airlock-error: upgrade-not-supported"),
        "{head}"
    );
    assert!(up.heads.recv().await.is_some());
    let lines = h.finish().await;
    let ws = ws_lines(&lines);
    assert!(
        ws.iter().any(|l| l["reason"] == "upgrade-not-supported"
            && l["rule"].as_str().unwrap_or("").contains("extension")),
        "{lines:?}"
    );
}

/// Report mode: the secret is logged as it would have been refused and the frame goes on.
#[tokio::test]
async fn report_mode_logs_the_hit_and_forwards() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "report").await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let f = text(true, Opcode::Text, &format!("p={PLACEHOLDER}"));
    send(&mut s, std::slice::from_ref(&f), [4, 3, 2, 1]).await;
    let mut from = Frames::new(false);
    assert_eq!(from.next(&mut s).await.unwrap(), f);
    send(&mut s, &[Frame::close(1000, "")], [1, 1, 1, 1]).await;
    let _ = until_close(&mut s).await;
    drop(s);
    let lines = h.finish().await;
    assert_eq!(up.received()[0], f);
    let ws = ws_lines(&lines);
    assert_eq!(ws.len(), 1, "{lines:?}");
    assert_eq!(ws[0]["decision"], "report", "{}", ws[0]);
    assert_eq!(ws[0]["reason"], "credential-leak", "{}", ws[0]);
}

/// An unmasked frame from the agent breaks RFC 6455: Close 1002, nothing forwarded.
#[tokio::test]
async fn an_unmasked_agent_frame_is_a_protocol_error() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&text(true, Opcode::Text, "hello").encode(None))
        .await
        .unwrap();
    let got = until_close(&mut s).await;
    assert_eq!(got.last().unwrap().close_code(), Some(1002), "{got:?}");
    let lines = h.finish().await;
    assert!(up.received().is_empty());
    let ws = ws_lines(&lines);
    assert_eq!(ws[0]["reason"], "malformed-request", "{}", ws[0]);
}

/// On a listed host with L7 rules the rules judge the upgrade request (its method and
/// path): an upgrade to a denied path is refused by the rule before the upstream; one to
/// an allowed path is relayed frame by frame.
#[tokio::test]
async fn the_l7_rules_judge_the_upgrade_request() {
    let mut up = ws_upstream("", vec![]).await;
    let extra = Extra {
        policy: "websocket = [\"ruled.allowed.test\"]\n\n[[rules]]\nhost = \"ruled.allowed.test\"\npath = \"/admin/**\"\naction = \"deny\"\n".into(),
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("ruled.allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up.addr)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    let ask = |path: &str| {
        format!(
            "GET http://ruled.allowed.test{path} HTTP/1.1\r\nhost: ruled.allowed.test\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
    };
    let (_s, r) = request(h.addr, &ask("/admin/ws")).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("x-airlock-error").as_deref(),
        Some("request-denied-by-rule")
    );
    assert!(up.heads.try_recv().is_err(), "nothing reached the upstream");
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(ask("/ws").as_bytes()).await.unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 101"));
    let f = text(true, Opcode::Text, "GET /admin/delete");
    send(&mut s, std::slice::from_ref(&f), [8, 8, 8, 8]).await;
    // A frame has no method or path: the relay reads it for secrets only.
    assert_eq!(Frames::new(false).next(&mut s).await.unwrap(), f);
    drop(s);
    let lines = h.finish().await;
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/admin/ws" && l["reason"] == "request-denied-by-rule")
    );
}

/// A secret cut in two and sent as two Ping frames (control frames go upstream at once,
/// searched in the same stream as the data frames): the second Ping closes the relay
/// with 1008 and never reaches the upstream; so does a known-format key sent hex-encoded
/// in a frame, and the second half of a placeholder sent over a second connection to the
/// same host.
#[tokio::test]
async fn attack_a_secret_split_over_two_pings_or_two_connections_is_caught() {
    let mut up = ws_upstream("", vec![]).await;
    let mut h = harness(&up, true, "enforce").await;
    let (a, b) = PLACEHOLDER.split_at(12);
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    send(
        &mut s,
        &[text(true, Opcode::Ping, a), text(true, Opcode::Ping, b)],
        [5, 6, 7, 8],
    )
    .await;
    let got = until_close(&mut s).await;
    let close = got.last().expect("a close frame");
    assert_eq!(close.close_code(), Some(1008), "{got:?}");
    assert_eq!(&close.payload[2..], b"credential-leak");
    drop(s);
    // Hex of a key pair in one text frame.
    let hex: String = AWS.bytes().map(|b| format!("{b:02x}")).collect();
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    send(&mut s, &[text(true, Opcode::Text, &hex)], [1, 2, 3, 4]).await;
    let got = until_close(&mut s).await;
    assert_eq!(got.last().unwrap().close_code(), Some(1008), "{got:?}");
    drop(s);
    // Half in a frame of one connection, half in a frame of the next.
    let (mut s, _) = upgrade(h.addr, "allowed.test", "").await;
    send(&mut s, &[text(true, Opcode::Text, a)], [9, 9, 9, 9]).await;
    let mut from = Frames::new(false);
    assert_eq!(from.next(&mut s).await.unwrap().payload, a.as_bytes());
    send(&mut s, &[Frame::close(1000, "")], [1, 1, 1, 1]).await;
    let _ = until_close(&mut s).await;
    drop(s);
    let (mut s, _) = upgrade(h.addr, "allowed.test", "").await;
    send(&mut s, &[text(true, Opcode::Text, b)], [9, 8, 9, 8]).await;
    let got = until_close(&mut s).await;
    assert_eq!(got.last().unwrap().close_code(), Some(1008), "{got:?}");
    drop(s);
    let lines = h.finish().await;
    let received = up.received();
    let all: Vec<u8> = received.iter().flat_map(|f| f.payload.clone()).collect();
    assert!(
        !contains(&all, b),
        "the completing half went upstream: {received:?}"
    );
    assert!(!contains(&all, "abcdEFGH1234"), "{received:?}");
    let denied: Vec<_> = ws_lines(&lines)
        .into_iter()
        .filter(|l| l["decision"] == "deny")
        .collect();
    assert_eq!(denied.len(), 3, "{lines:?}");
}

/// An upload budget (`[limits] upload_bytes_per_hour`) holds inside a WebSocket: a frame
/// that would spend it never reaches the upstream; the agent gets Close 1008
/// `budget-exhausted`, and the line says why.
#[tokio::test]
async fn attack_a_frame_past_the_upload_budget_never_leaves() {
    let mut up = ws_upstream("", vec![]).await;
    let mut extra = extra(true);
    extra
        .policy
        .push_str("\n[limits]\nupload_bytes_per_hour = 4096\n");
    let mut h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up.addr)],
        airlock_proxy::limits::Limits::default(),
        &extra,
    )
    .await;
    let (mut s, head) = upgrade(h.addr, "allowed.test", "").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // Within the budget: relayed and echoed.
    let small = text(true, Opcode::Text, &"s".repeat(1000));
    send(&mut s, std::slice::from_ref(&small), [1, 2, 3, 4]).await;
    let mut from = Frames::new(false);
    assert_eq!(from.next(&mut s).await.unwrap(), small);
    // Past it: the frame is cut before it leaves.
    let big = text(true, Opcode::Binary, &"b".repeat(5000));
    send(&mut s, &[big], [1, 2, 3, 4]).await;
    let got = until_close(&mut s).await;
    let close = got.last().unwrap();
    assert_eq!(close.close_code(), Some(1008), "{got:?}");
    assert!(
        String::from_utf8_lossy(&close.payload).contains("budget-exhausted"),
        "{got:?}"
    );
    drop(s);
    let lines = h.finish().await;
    assert_eq!(
        up.received(),
        vec![small],
        "only the frame within the budget left"
    );
    let ws = ws_lines(&lines);
    assert_eq!(ws.len(), 1, "{lines:?}");
    assert_eq!(ws[0]["reason"], "budget-exhausted", "{}", ws[0]);
    assert!(
        ws[0]["rule"]
            .as_str()
            .unwrap()
            .contains("upload_bytes_per_hour 4096"),
        "{}",
        ws[0]
    );
}
