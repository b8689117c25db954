//! The request-head gate (`airlock_proxy::gate`): `judge_head` on its own, and the whole
//! `Gate` stream (head framing, content-length and chunked bodies, pipelining, upgrades,
//! refusals) driven the way hyper reads it, with the client's bytes split into reads in
//! fuzzer-chosen ways.
//!
//! Input: byte 0 picks `max_head` (bits 0-1) and the service's answers to the first six
//! upgrade requests (bits 2-7: 1 = upgraded); byte 1 picks hyper's read size (bits 4-7)
//! and how many read sizes follow (bits 0-3); then the read sizes; the rest is the stream.
//!
//! Invariants:
//! - never panics, never stalls (every `Pending` is a refusal or an upgrade to decide);
//! - what hyper reads is an unmodified prefix of the client's bytes, then (if refused)
//!   exactly the synthetic request; without a refusal, everything but stray line ends at EOF;
//! - **the outcome does not depend on how the bytes are split into reads** (nor on hyper's
//!   buffer size): same bytes to hyper, same refusal, same upgrade requests. The one
//!   tolerated difference: a head already longer than `max_head` and not yet complete may
//!   be `request-too-large` or `malformed-request` depending on how much of it was read
//!   (both refuse it; fuzz/README.md says so);
//! - a refused head is one `judge_head` refuses (or an incomplete one at EOF);
//! - `judge_head`: an accepted head re-parses (httparse, and a separate line splitter
//!   written here) to the same method, path, version and headers; it has CRLF line ends
//!   only, no NUL or other non-token byte in a header name, no obs-fold, not both
//!   `content-length` and `transfer-encoding`, no `transfer-encoding` before HTTP/1.1, a
//!   framing that is the one the headers announce, at most `MAX_HEADERS` headers and at most
//!   `max_head` bytes; `Partial` only within `max_head`; a verdict reached on a prefix is
//!   the verdict on the whole input.
#![no_main]

use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, Waker};

use airlock_policy::Reason;
use airlock_proxy::gate::{BodyLen, Framing, Gate, GateShared, MAX_HEADERS, Verdict, judge_head};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, ReadBuf};

const MAX_HEADS: [usize; 4] = [24, 96, 512, 64 * 1024];
const HYPER_BUFS: [usize; 16] = [
    1, 2, 3, 5, 8, 13, 16, 31, 64, 100, 255, 512, 1000, 4096, 8192, 65536,
];

fuzz_target!(|data: &[u8]| {
    // Learnt before any agent bytes: an agent head may end like the synthetic one does.
    LazyLock::force(&SYNTHETIC);
    let [cfg, reads, rest @ ..] = data else {
        return;
    };
    let max_head = MAX_HEADS[usize::from(cfg & 3)];
    let decisions = cfg >> 2;
    let n_sizes = usize::from(reads & 15).min(rest.len());
    let (sizes, stream) = rest.split_at(n_sizes);
    let sizes: Vec<usize> = sizes.iter().map(|&s| usize::from(s) + 1).collect();
    let hyper_buf = HYPER_BUFS[usize::from(reads >> 4)];

    check_heads(stream, max_head);

    // Reference: the whole stream in one read, a buffer that takes it all.
    let whole = drive(stream, &[], 1 << 20, max_head, decisions);
    check_outcome(stream, max_head, &whole, "one read");
    let mut runs = vec![(sizes.clone(), hyper_buf)];
    if stream.len() <= 1024 {
        runs.push((vec![1], 8192)); // a byte at a time
        runs.push((vec![1 << 20], 1)); // one read, hyper takes a byte at a time
    }
    for (sizes, buf) in runs {
        let split = drive(stream, &sizes, buf, max_head, decisions);
        check_outcome(
            stream,
            max_head,
            &split,
            &format!("reads {sizes:?} / hyper buffer {buf}"),
        );
        assert_eq!(
            split.passed, whole.passed,
            "reads {sizes:?} / hyper buffer {buf}: hyper got different bytes"
        );
        assert_eq!(split.upgrades, whole.upgrades, "reads {sizes:?}: upgrades");
        match (split.refused, whole.refused) {
            (a, b) if a == b => {}
            (
                Some(Reason::RequestTooLarge | Reason::MalformedRequest),
                Some(Reason::RequestTooLarge | Reason::MalformedRequest),
            ) => {
                // Tolerated only for a head still incomplete beyond max_head bytes.
                let head = &stream[whole.passed.len()..];
                assert!(
                    head.len() > max_head
                        && matches!(judge_head(&head[..=max_head], usize::MAX), Verdict::Partial),
                    "reads {sizes:?}: refused as {:?}, in one read as {:?}",
                    split.refused,
                    whole.refused
                );
            }
            (None, Some(Reason::MalformedRequest)) | (Some(Reason::MalformedRequest), None)
                if stray(&stream[whole.passed.len()..]) =>
            {
                // Line ends alone before EOF (e.g. `\r\r`): refused when one read shows httparse
                // the bare CR, a clean EOF when they trickle in and EOF comes first. Nothing
                // reaches hyper either way.
            }
            (a, b) => panic!("reads {sizes:?} / buffer {buf}: refusal {a:?}, in one read {b:?}"),
        }
    }
});

/// Only line ends (what the gate drops at EOF as no head).
fn stray(rest: &[u8]) -> bool {
    rest.iter().all(|b| matches!(b, b'\r' | b'\n'))
}

/// The synthetic request the gate hands hyper in place of a refused head (the path is
/// random per process: learnt once by refusing a NUL).
static SYNTHETIC: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let out = drive(b"\0\r\n\r\n", &[], 4096, 1024, 0);
    assert_eq!(out.refused, Some(Reason::MalformedRequest));
    assert!(out.synthetic.starts_with(b"GET /.airlock-refused/"));
    out.synthetic
});

struct Outcome {
    /// Client bytes hyper read (before any synthetic request).
    passed: Vec<u8>,
    /// The synthetic request hyper read after them (empty when nothing was refused).
    synthetic: Vec<u8>,
    refused: Option<Reason>,
    upgrades: usize,
}

/// The client socket: `data` in reads of the given sizes (cycled; one read if none).
struct Client<'a> {
    data: &'a [u8],
    sizes: &'a [usize],
    n: usize,
}

impl AsyncRead for Client<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let want = if self.sizes.is_empty() {
            usize::MAX
        } else {
            self.sizes[self.n % self.sizes.len()]
        };
        self.n += 1;
        let k = want.min(buf.remaining()).min(self.data.len());
        buf.put_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Poll::Ready(Ok(()))
    }
}

/// Reads the gate as hyper does, answering upgrade requests from `decisions`.
fn drive(
    data: &[u8],
    sizes: &[usize],
    hyper_buf: usize,
    max_head: usize,
    decisions: u8,
) -> Outcome {
    let shared = Arc::new(GateShared::new());
    let client = Client { data, sizes, n: 0 };
    let mut gate = Gate::new(client, max_head, shared.clone());
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut upgrades = 0usize;
    let mut storage = vec![0u8; hyper_buf];
    let mut idle = 0;
    let synthetic_known = LazyLock::get(&SYNTHETIC).is_some();
    loop {
        let mut rb = ReadBuf::new(&mut storage);
        match Pin::new(&mut gate).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                if rb.filled().is_empty() {
                    break; // EOF
                }
                out.extend_from_slice(rb.filled());
                idle = 0;
            }
            Poll::Ready(Err(e)) => panic!("the gate failed on a socket that cannot: {e}"),
            Poll::Pending => {
                let refused = if synthetic_known {
                    out.ends_with(&SYNTHETIC)
                } else {
                    out.ends_with(b" HTTP/1.1\r\nhost: airlock\r\n\r\n")
                };
                if refused {
                    break;
                }
                idle += 1;
                assert!(idle < 3, "stalled: Pending without a refusal or an upgrade");
                // Waiting on the service's answer to an upgrade request.
                let up = upgrades < 6 && decisions & (1 << upgrades) != 0;
                upgrades += 1;
                shared.upgrade_decided(up);
            }
        }
    }
    let (split, refused) = if synthetic_known && out.ends_with(&SYNTHETIC) {
        (out.len() - SYNTHETIC.len(), true)
    } else if !synthetic_known {
        let p = out
            .windows(22)
            .position(|w| w == b"GET /.airlock-refused/")
            .unwrap_or(out.len());
        (p, p < out.len())
    } else {
        (out.len(), false)
    };
    let synthetic = out.split_off(split);
    let reason = if refused {
        let line = synthetic.split(|&b| b == b'\r').next().unwrap_or_default();
        let path = line.split(|&b| b == b' ').nth(1).unwrap_or_default();
        let path = std::str::from_utf8(path).unwrap();
        let req = http::Request::get(path).body(()).unwrap();
        let r = shared.refusal_for(&req);
        assert!(r.is_some(), "synthetic request without a refusal");
        assert_eq!(shared.refusal_for(&req), None, "a refusal answered twice");
        r
    } else {
        None
    };
    let other = http::Request::get("/.airlock-refused/0").body(()).unwrap();
    assert_eq!(
        shared.refusal_for(&other),
        None,
        "another path took the refusal"
    );
    let (_, held) = gate.into_parts();
    // What the gate keeps is bounded by the head limit plus one read.
    assert!(
        held.len() <= max_head + 8192 + hyper_buf.min(1 << 20) + 128,
        "holding {} bytes",
        held.len()
    );
    Outcome {
        passed: out,
        synthetic,
        refused: reason,
        upgrades,
    }
}

fn check_outcome(stream: &[u8], max_head: usize, o: &Outcome, run: &str) {
    assert!(
        stream.starts_with(&o.passed),
        "hyper read bytes the client did not send"
    );
    let rest = &stream[o.passed.len()..];
    match o.refused {
        None => assert!(
            stray(rest),
            "{run}: {} client bytes neither passed nor refused ({} upgrade answers)",
            rest.len(),
            o.upgrades
        ),
        Some(reason) => {
            if LazyLock::get(&SYNTHETIC).is_some() {
                assert_eq!(o.synthetic, *SYNTHETIC);
            }
            match judge_head(rest, max_head) {
                Verdict::Pass(f) => panic!("refused ({reason:?}) a head judge_head passes: {f:?}"),
                Verdict::Partial => {
                    assert_eq!(reason, Reason::MalformedRequest, "incomplete head at EOF");
                }
                Verdict::Refuse(r) => assert!(
                    r == reason
                        || (rest.len() > max_head
                            && matches!(
                                judge_head(&rest[..=max_head], usize::MAX),
                                Verdict::Partial
                            )),
                    "refused as {reason:?}, judge_head says {r:?}"
                ),
            }
        }
    }
}

/// `judge_head` invariants at the start of the stream and at the first line starts after it
/// (where pipelined heads begin).
fn check_heads(stream: &[u8], max_head: usize) {
    check_head(stream, max_head);
    let starts = stream
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .filter(|&i| i < stream.len())
        .take(12);
    for i in starts {
        check_head(&stream[i..], max_head);
    }
}

fn check_head(buf: &[u8], max_head: usize) {
    let v = judge_head(buf, max_head);
    match v {
        Verdict::Partial => assert!(buf.len() <= max_head, "Partial beyond max_head"),
        Verdict::Refuse(Reason::RequestTooLarge) => {
            let mut headers = [httparse::EMPTY_HEADER; 4 * MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            let big = match req.parse(buf) {
                Ok(httparse::Status::Complete(n)) => {
                    n > max_head || req.headers.len() > MAX_HEADERS
                }
                Ok(httparse::Status::Partial) => buf.len() > max_head,
                Err(httparse::Error::TooManyHeaders) => true,
                Err(_) => false,
            };
            assert!(big, "request-too-large for a head within the limits");
        }
        Verdict::Refuse(_) => {}
        Verdict::Pass(f) => check_accepted(buf, max_head, f),
    }
    // A verdict reached on a prefix is the verdict on the whole.
    let cuts = match v {
        Verdict::Pass(f) => [buf.len() / 2, f.head_len.saturating_sub(1), f.head_len],
        _ => [
            buf.len() / 2,
            buf.len().saturating_sub(1),
            buf.len().min(16),
        ],
    };
    for cut in cuts {
        if cut >= buf.len() {
            continue;
        }
        match judge_head(&buf[..cut], max_head) {
            Verdict::Partial => {}
            Verdict::Refuse(Reason::RequestTooLarge) => {
                assert!(
                    matches!(v, Verdict::Refuse(_)),
                    "too large at {cut}, then {v:?}"
                )
            }
            early => assert_eq!(early, v, "decided at {cut} bytes, changed with more"),
        }
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An accepted head, checked with a line splitter of its own (not httparse's code).
fn check_accepted(buf: &[u8], max_head: usize, f: Framing) {
    assert!(f.head_len <= max_head, "accepted a head over max_head");
    assert!(f.head_len <= buf.len());
    let head = &buf[..f.head_len];
    // CRLF only.
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && head[i - 1] == b'\r', "bare LF accepted");
        }
        if b == b'\r' {
            assert!(head.get(i + 1) == Some(&b'\n'), "bare CR accepted");
        }
    }
    let mut body = head;
    while let Some(r) = body.strip_prefix(b"\r\n") {
        body = r;
    }
    let body = body
        .strip_suffix(b"\r\n\r\n")
        .expect("an accepted head ends with an empty line");
    let mut lines = body
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("accepted request line {:?}", String::from_utf8_lossy(line));
    };
    assert!(
        !method.is_empty() && method.iter().all(|&b| is_tchar(b)),
        "method"
    );
    assert!(
        !path.is_empty() && path.iter().all(|&b| b > b' ' && b != 0x7f),
        "path with a control byte or space"
    );
    let http11 = match version {
        b"HTTP/1.1" => true,
        b"HTTP/1.0" => false,
        v => panic!("accepted version {:?}", String::from_utf8_lossy(v)),
    };
    let mut mine: Vec<(&[u8], &[u8])> = Vec::new();
    for l in lines {
        assert!(
            !l.starts_with(b" ") && !l.starts_with(b"\t"),
            "obs-fold accepted"
        );
        let colon = l
            .iter()
            .position(|&b| b == b':')
            .expect("header line without a colon");
        let (name, value) = (&l[..colon], &l[colon + 1..]);
        assert!(!name.is_empty(), "empty header name");
        assert!(!name.contains(&0), "NUL in a header name accepted");
        assert!(
            name.iter().all(|&b| is_tchar(b)),
            "non-token header name accepted"
        );
        mine.push((name, value.trim_ascii()));
    }
    assert!(mine.len() <= MAX_HEADERS, "{} headers accepted", mine.len());

    // httparse, on the head alone, agrees.
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    assert_eq!(
        req.parse(head).ok(),
        Some(httparse::Status::Complete(f.head_len)),
        "the accepted head does not re-parse to its own length"
    );
    assert_eq!(req.method.map(str::as_bytes), Some(method));
    assert_eq!(req.path.map(str::as_bytes), Some(path));
    assert_eq!(req.version, Some(u8::from(http11)));
    assert_eq!(req.headers.len(), mine.len(), "header count");
    for (h, (name, value)) in req.headers.iter().zip(&mine) {
        assert_eq!(h.name.as_bytes(), *name);
        assert_eq!(h.value, *value);
    }

    // The framing is the one the headers announce; no smuggling signature passes.
    let named = |n: &'static str| {
        mine.iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(n.as_bytes()))
    };
    let cls: Vec<&[u8]> = named("content-length").map(|(_, v)| *v).collect();
    let tes: Vec<&[u8]> = named("transfer-encoding").map(|(_, v)| *v).collect();
    assert!(
        cls.is_empty() || tes.is_empty(),
        "content-length with transfer-encoding accepted"
    );
    assert!(
        tes.is_empty() || http11,
        "transfer-encoding on HTTP/1.0 accepted"
    );
    if let Some(last) = tes.last() {
        let coding = last.rsplit(|&b| b == b',').next().unwrap_or_default();
        assert!(
            coding.trim_ascii().eq_ignore_ascii_case(b"chunked"),
            "TE not ending in chunked"
        );
        assert_eq!(f.body, BodyLen::Chunked);
    } else if let Some(first) = cls.first() {
        assert!(
            cls.iter().all(|v| v == first),
            "differing content-lengths accepted"
        );
        assert!(
            !first.is_empty() && first.iter().all(u8::is_ascii_digit),
            "content-length"
        );
        let n: u64 = std::str::from_utf8(first).unwrap().parse().unwrap();
        assert_eq!(f.body, BodyLen::Length(n));
    } else {
        assert_eq!(f.body, BodyLen::Length(0));
    }
    let upgrade = method == b"CONNECT" || (http11 && named("upgrade").next().is_some());
    assert_eq!(f.wants_upgrade, upgrade, "wants_upgrade");
}
