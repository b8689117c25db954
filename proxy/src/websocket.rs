//! WebSocket frames on hosts the policy lists in `network.websocket` (RFC 6455): after the
//! `101` the relay reads every frame instead of copying bytes.
//!
//! - [`Parser`] is the pure core: one frame at a time from the front of a buffer (7, 16 and
//!   64-bit lengths, minimal encodings only, masking, fragmentation and interleaved control
//!   frames), with frame and message size bounds. Anything else is a [`Violation`]: the
//!   relay answers the agent with a Close (`1002` protocol error, `1009` too big) and ends.
//!   No extension is ever in force (the proxy strips `Sec-WebSocket-Extensions` from the
//!   upgrade request and refuses a `101` that still negotiates one), so reserved bits are
//!   a violation and payloads are the plain bytes the endpoints read.
//! - [`Outbound`] searches the agent's payloads (text and binary alike, as bytes; control
//!   frames' too, in the same stream as data frames) for the credentials' placeholders,
//!   real values and injected forms and for secrets of known formats and the workspace's
//!   values going to a host that is not their provider's, as sent and decoded
//!   ([`crate::normalize`]). A payload is searched together with the end of what went
//!   before (across frames, fragments, messages, Pings, and the bodies and frames sent to
//!   the same host before this connection: [`crate::recent`]), so a secret split over two
//!   frames is caught at the frame that completes it: that frame is never forwarded, the
//!   agent gets a Close `1008` with the reason code, the upstream is closed. A fragment that is not its message's last is held until the
//!   next one passes, so a secret split across two fragments of a message leaves nothing
//!   (control frames go at once, possibly before a held fragment, as RFC 6455 allows). On an LLM API host a foreign secret is redacted in place
//!   instead (same length). In report mode the hit is logged and the frame goes on.
//! - [`Inbound`] scrubs the upstream's payloads of the real values in every form
//!   (`credentials`; same length, so the frame header stays true), control frames in the
//!   same stream as data frames.
//!
//! What stays unjudged: the L7 rules apply to the upgrade request only (a frame has no
//! method or path); the start of a secret split across two messages (or over three or more
//! fragments, or two Pings) has gone upstream by the time the frame completing it is
//! refused; a payload compressed by the application (not by an extension, which is never
//! negotiated) is searched as the bytes it is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use airlock_policy::Host;
use airlock_policy::reason::Reason;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, watch};

use crate::audit::{Audit, Event, Record, Verdict};
use crate::body::Cut;
use crate::detect;
use crate::recent::{Channel, Recent};
use crate::shutdown::{Phase, reached};
use crate::snapshot::Rules;
use crate::tunnel::Meter;

/// The largest frame payload relayed (1 MiB); a bigger one closes the relay (`1009`).
pub const MAX_FRAME: usize = 1 << 20;
/// The largest message (all its fragments) relayed (16 MiB); bigger closes it (`1009`).
pub const MAX_MESSAGE: usize = 16 << 20;
/// How much of what went before a payload is searched with it: longer than the longest
/// prefix a detector needs (as the streamed body's hold-back).
const CONTEXT: usize = 1024;

/// Close codes (RFC 6455 §7.4.1).
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// The frame carried what the policy forbids.
pub const CLOSE_POLICY_VIOLATION: u16 = 1008;
/// A frame or message over [`MAX_FRAME`] / [`MAX_MESSAGE`].
pub const CLOSE_TOO_BIG: u16 = 1009;

/// A frame's opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// A fragment after the first of a message.
    Continuation,
    /// A text message (or its first fragment).
    Text,
    /// A binary message (or its first fragment).
    Binary,
    /// Close.
    Close,
    /// Ping.
    Ping,
    /// Pong.
    Pong,
}

impl Opcode {
    const fn from_bits(b: u8) -> Option<Self> {
        Some(match b {
            0x0 => Self::Continuation,
            0x1 => Self::Text,
            0x2 => Self::Binary,
            0x8 => Self::Close,
            0x9 => Self::Ping,
            0xA => Self::Pong,
            _ => return None,
        })
    }

    const fn bits(self) -> u8 {
        match self {
            Self::Continuation => 0x0,
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }

    /// Close, ping, pong: never fragmented, at most 125 bytes, allowed between fragments.
    #[must_use]
    pub const fn is_control(self) -> bool {
        matches!(self, Self::Close | Self::Ping | Self::Pong)
    }
}

/// One frame, its payload unmasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The last frame of its message.
    pub fin: bool,
    /// What it is.
    pub opcode: Opcode,
    /// The payload as the endpoint reads it.
    pub payload: Vec<u8>,
}

impl Frame {
    /// A Close frame with `code` and a short `reason` (cut to 123 bytes).
    #[must_use]
    pub fn close(code: u16, reason: &str) -> Self {
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend(reason.bytes().take(123));
        Self {
            fin: true,
            opcode: Opcode::Close,
            payload,
        }
    }

    /// The wire form; masked with `mask` when given (a client's frame).
    #[must_use]
    pub fn encode(&self, mask: Option<[u8; 4]>) -> Vec<u8> {
        let len = self.payload.len();
        let mut out = Vec::with_capacity(len + 14);
        out.push(u8::from(self.fin) << 7 | self.opcode.bits());
        let m = if mask.is_some() { 0x80 } else { 0 };
        if len < 126 {
            out.push(m | len as u8);
        } else if let Ok(n) = u16::try_from(len) {
            out.push(m | 126);
            out.extend_from_slice(&n.to_be_bytes());
        } else {
            out.push(m | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
        match mask {
            Some(key) => {
                out.extend_from_slice(&key);
                out.extend(
                    self.payload
                        .iter()
                        .zip(key.iter().cycle())
                        .map(|(b, k)| b ^ k),
                );
            }
            None => out.extend_from_slice(&self.payload),
        }
        out
    }

    /// The status code of a Close frame, if it carries one.
    #[must_use]
    pub fn close_code(&self) -> Option<u16> {
        match (self.opcode, self.payload.as_slice()) {
            (Opcode::Close, [a, b, ..]) => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }
}

/// Why a stream of frames cannot be relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// Not RFC 6455 as negotiated (what is wrong): close `1002`.
    Protocol(&'static str),
    /// Over [`MAX_FRAME`] or [`MAX_MESSAGE`]: close `1009`.
    TooBig,
}

impl Violation {
    /// The Close frame the agent gets.
    #[must_use]
    pub fn close(self) -> Frame {
        match self {
            Self::Protocol(what) => Frame::close(CLOSE_PROTOCOL_ERROR, what),
            Self::TooBig => Frame::close(CLOSE_TOO_BIG, "frame or message too big"),
        }
    }
}

/// Reads frames of one direction: the agent's (which must be masked) or the upstream's
/// (which must not be).
#[derive(Debug)]
pub struct Parser {
    from_client: bool,
    max_frame: usize,
    max_message: usize,
    /// A fragmented message is open (a continuation is due).
    in_message: bool,
    /// Payload bytes of the open message so far.
    message_len: usize,
}

impl Parser {
    /// A parser with the default bounds ([`MAX_FRAME`], [`MAX_MESSAGE`]).
    #[must_use]
    pub fn new(from_client: bool) -> Self {
        Self::with_limits(from_client, MAX_FRAME, MAX_MESSAGE)
    }

    /// A parser with these bounds.
    #[must_use]
    pub fn with_limits(from_client: bool, max_frame: usize, max_message: usize) -> Self {
        Self {
            from_client,
            max_frame,
            max_message,
            in_message: false,
            message_len: 0,
        }
    }

    /// The frame at the front of `buf` and how many bytes it took, or `None` when `buf`
    /// does not hold all of it yet (nothing is consumed: call again with more).
    ///
    /// # Errors
    /// The [`Violation`]; the stream cannot go on after one.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, Violation> {
        let [b0, b1, ..] = *buf else {
            return Ok(None);
        };
        let fin = b0 & 0x80 != 0;
        if b0 & 0x70 != 0 {
            return Err(Violation::Protocol("reserved bits set"));
        }
        let opcode = Opcode::from_bits(b0 & 0x0F).ok_or(Violation::Protocol("unknown opcode"))?;
        let masked = b1 & 0x80 != 0;
        if masked != self.from_client {
            return Err(Violation::Protocol(if self.from_client {
                "unmasked client frame"
            } else {
                "masked server frame"
            }));
        }
        let Some((len, mut at)) = payload_len(b1 & 0x7F, buf)? else {
            return Ok(None);
        };
        self.admit(fin, opcode, len)?;
        let len = usize::try_from(len).map_err(|_| Violation::TooBig)?;
        let mask = if masked {
            let Some(key) = buf.get(at..at + 4) else {
                return Ok(None);
            };
            at += 4;
            Some([key[0], key[1], key[2], key[3]])
        } else {
            None
        };
        let Some(body) = buf.get(at..at + len) else {
            return Ok(None);
        };
        let mut payload = body.to_vec();
        if let Some(key) = mask {
            for (b, k) in payload.iter_mut().zip(key.iter().cycle()) {
                *b ^= k;
            }
        }
        if !opcode.is_control() {
            self.in_message = !fin;
            self.message_len = if fin { 0 } else { self.message_len + len };
        }
        Ok(Some((
            Frame {
                fin,
                opcode,
                payload,
            },
            at + len,
        )))
    }

    /// Whether a frame with this head may come now (control frame rules, fragmentation
    /// order, size bounds); changes nothing.
    fn admit(&self, fin: bool, opcode: Opcode, len: u64) -> Result<(), Violation> {
        if opcode.is_control() {
            if !fin {
                return Err(Violation::Protocol("fragmented control frame"));
            }
            if len > 125 {
                return Err(Violation::Protocol("control frame over 125 bytes"));
            }
            return Ok(());
        }
        match opcode {
            Opcode::Continuation if !self.in_message => {
                return Err(Violation::Protocol("continuation outside a message"));
            }
            Opcode::Text | Opcode::Binary if self.in_message => {
                return Err(Violation::Protocol("new message inside a fragmented one"));
            }
            _ => {}
        }
        if len > self.max_frame as u64 {
            return Err(Violation::TooBig);
        }
        let so_far = if opcode == Opcode::Continuation {
            self.message_len as u64
        } else {
            0
        };
        if so_far + len > self.max_message as u64 {
            return Err(Violation::TooBig);
        }
        Ok(())
    }
}

/// The payload length announced by the 7-bit field `len7` and the extended length in
/// `buf`, and where the header goes on; `None` when `buf` is too short to say.
fn payload_len(len7: u8, buf: &[u8]) -> Result<Option<(u64, usize)>, Violation> {
    Ok(Some(match len7 {
        126 => {
            let Some(&[a, b]) = buf.get(2..4) else {
                return Ok(None);
            };
            let n = u64::from(u16::from_be_bytes([a, b]));
            if n < 126 {
                return Err(Violation::Protocol("length not minimally encoded"));
            }
            (n, 4)
        }
        127 => {
            let Some(bytes) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut be = [0u8; 8];
            be.copy_from_slice(bytes);
            let n = u64::from_be_bytes(be);
            if n >> 63 != 0 {
                return Err(Violation::Protocol("64-bit length with its top bit set"));
            }
            if n <= 0xFFFF {
                return Err(Violation::Protocol("length not minimally encoded"));
            }
            (n, 10)
        }
        n => (u64::from(n), 2),
    }))
}

/// What the tail of what went before a payload is, for matches across frames.
#[derive(Debug, Default)]
struct Context {
    tail: Vec<u8>,
}

impl Context {
    /// `tail ++ payload`, and where the payload starts in it.
    fn window(&self, payload: &[u8]) -> (Vec<u8>, usize) {
        let mut w = Vec::with_capacity(self.tail.len() + payload.len());
        w.extend_from_slice(&self.tail);
        w.extend_from_slice(payload);
        (w, self.tail.len())
    }

    /// Keeps the last `keep` bytes of `window` as the next frame's context.
    fn advance(&mut self, mut window: Vec<u8>, keep: usize) {
        let keep = keep.min(window.len());
        self.tail = window.split_off(window.len() - keep);
    }
}

/// The agent's payloads, searched in order (see the module docs).
#[derive(Debug, Default)]
pub struct Outbound {
    context: Context,
    /// Where each payload that passes is left for the next search to the same host.
    remember: Option<(Arc<Recent>, Host)>,
}

impl Outbound {
    /// Payloads to `host` searched after what the session last sent there (bodies and
    /// frames); what this relay sends is left there in turn.
    #[must_use]
    pub fn after(recent: Arc<Recent>, host: &Host) -> Self {
        Self {
            context: Context {
                tail: recent.tail(host.as_str(), Channel::Body),
            },
            remember: Some((recent, host.clone())),
        }
    }

    /// Searches `frame`'s payload with what went before; foreign secrets on an LLM API
    /// host, or whose detector's action is `redact`, are overwritten in place, those whose
    /// action is `log` go on ([`detect::Detectors::judge_body`]); both are returned by
    /// detector. After a hit nothing of what went before is kept (in report mode the frame
    /// goes on, and the next one is searched from its own start: the hit is not reported
    /// twice).
    ///
    /// # Errors
    /// The [`Cut`]: a credential's secret, or a secret going to a host not its provider's.
    pub fn check(&mut self, rules: &Rules, host: &Host, frame: &mut Frame) -> Result<Seen, Cut> {
        let creds = &rules.credentials;
        // Control frames too: a secret split over two Pings is one stream. A Close is read
        // from its reason (its two-byte code would stand between what went before and it).
        let text = if frame.opcode == Opcode::Close {
            frame.payload.len().min(2)
        } else {
            0
        };
        let (mut window, start) = self.context.window(&frame.payload[text..]);
        let needles = creds.leak_needles();
        if let Some(tag) = needles.and_then(|n| n.find_ending_after(&window, start)) {
            self.context = Context::default();
            return Err(Cut::Credential(creds.name_of(tag).to_owned()));
        }
        let v = rules.detectors.judge_body_after(&mut window, start, host);
        if let Some(d) = v.refused {
            self.context = Context::default();
            return Err(Cut::Secret(d.name.clone()));
        }
        if !v.redacted.is_empty() {
            frame.payload[text..].copy_from_slice(&window[start..]);
        }
        let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        let seen = Seen {
            redacted: owned(&v.redacted),
            logged: owned(&v.logged),
        };
        if let Some((recent, to)) = &self.remember {
            recent.push(to.as_str(), Channel::Body, &frame.payload[text..]);
        }
        let keep = CONTEXT
            .max(needles.map_or(0, |n| n.max_len()))
            .max(rules.detectors.hold());
        self.context.advance(window, keep);
        Ok(seen)
    }
}

/// Foreign secrets a frame let through, by detector.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Overwritten in place.
    pub redacted: Vec<String>,
    /// Gone on as they were (action `log`).
    pub logged: Vec<String>,
}

/// The upstream's payloads, scrubbed of the real values in order (see the module docs).
#[derive(Debug, Default)]
pub struct Inbound {
    context: Context,
}

impl Inbound {
    /// Overwrites every real value (or the part of one that completes in this frame) in
    /// `frame`'s payload with `*`; returns whether anything was.
    pub fn scrub(&mut self, rules: &Rules, frame: &mut Frame) -> bool {
        let Some(needles) = rules.credentials.scrub_needles() else {
            return false;
        };
        let (mut window, start) = self.context.window(&frame.payload);
        let hit = needles.overwrite(&mut window);
        if hit {
            frame.payload.copy_from_slice(&window[start..]);
        }
        self.context.advance(window, needles.max_len());
        hit
    }
}

/// How an upgrade's `101` is relayed.
#[derive(Debug)]
pub enum Relay {
    /// As raw bytes, unread: a writable host with no credential and no L7 rule, not listed
    /// in `network.websocket`.
    Raw,
    /// Frame by frame ([`relay`]): a host listed in `network.websocket`.
    Frames(Session),
}

/// What a frame relay judges with.
#[derive(Debug)]
pub struct Session {
    /// The rules of the upgrade request.
    pub rules: Arc<Rules>,
    /// The upstream host (the provider check of the detectors).
    pub host: Host,
    /// Report mode: a hit is logged and the frame forwarded.
    pub report: bool,
    /// What the session last sent to each host: the agent's payloads are searched after
    /// it, and left there.
    pub recent: Arc<Recent>,
}

/// Whether the upstream's `101` can be relayed frame by frame: no extension negotiated
/// (the proxy offered none, so payloads stay plain).
///
/// # Errors
/// The refusal and the rule naming why.
pub fn accept(headers: &http::HeaderMap) -> Result<(), (Reason, &'static str)> {
    if headers.contains_key(http::header::SEC_WEBSOCKET_EXTENSIONS) {
        return Err((
            Reason::UpgradeNotSupported,
            "the upstream's 101 negotiated a WebSocket extension the proxy cannot read",
        ));
    }
    Ok(())
}

/// Who closed the relay, and how.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Frames from the agent (read) and from the upstream (read).
    pub frames_up: u64,
    /// Frames from the upstream.
    pub frames_down: u64,
    /// The first Close code seen and who sent it (`agent`, `upstream`, `proxy`).
    pub close: Option<(u16, &'static str)>,
    /// A hit that ended the relay (enforce mode).
    pub cut: Option<Cut>,
    /// A hit logged and let through (report mode).
    pub reported: Option<Cut>,
    /// Detectors whose secrets were redacted (LLM API host, action `redact`).
    pub redacted: Vec<String>,
    /// Detectors whose secrets went on, logged (action `log`).
    pub logged: Vec<String>,
    /// A protocol violation, and whose.
    pub violation: Option<(Violation, &'static str)>,
    /// How it ended.
    pub end: Option<Event>,
}

impl Summary {
    fn describe(&self) -> String {
        let close = match self.close {
            Some((code, who)) => format!("close {code} by {who}"),
            None => "no close frame".to_owned(),
        };
        let mut s = format!(
            "websocket: {} frames up, {} down, {close}",
            self.frames_up, self.frames_down
        );
        if let Some((v, who)) = self.violation {
            s.push_str(&format!(", {who} violated RFC 6455: {v:?}"));
        }
        s
    }

    /// Completes the relay's audit record: the hit (reason, credential or detector, never
    /// the value), then what was seen.
    pub fn apply(&self, rec: &mut Record) {
        if let Some(cut) = self.cut.as_ref().or(self.reported.as_ref()) {
            rec.reason = Some(cut.describe(rec));
            rec.decision = if self.cut.is_some() {
                Verdict::Deny
            } else {
                Verdict::Report
            };
            rec.event = Some(Event::LeakInBody);
        } else if !self.redacted.is_empty() || !self.logged.is_empty() {
            detect::note(rec, &self.redacted, &self.logged);
            if rec.event.is_none() {
                rec.event = self.end;
            }
        } else if let Some(e) = self.end {
            rec.event = Some(e);
        }
        if let Some((_, who)) = self.violation {
            rec.event = Some(Event::CloseError);
            if who == "agent" {
                rec.decision = Verdict::Deny;
                rec.reason = Some(Reason::MalformedRequest);
            }
        }
        let seen = self.describe();
        rec.rule = Some(match rec.rule.take() {
            Some(r) => format!("{r}; {seen}"),
            None => seen,
        });
    }
}

/// The relay's record: written with the [`Summary`] when the relay ends, or as it stood
/// when the relay was dropped.
#[derive(Debug)]
pub struct Guard {
    record: Option<Record>,
    meter: Arc<Meter>,
    audit: Audit,
}

impl Guard {
    /// Guards `record`.
    #[must_use]
    pub const fn new(record: Record, meter: Arc<Meter>, audit: Audit) -> Self {
        Self {
            record: Some(record),
            meter,
            audit,
        }
    }

    /// Writes the record completed with `summary`.
    pub fn finish(mut self, summary: &Summary) {
        if let Some(rec) = self.record.as_mut() {
            summary.apply(rec);
            tracing::info!(
                host = rec.host.as_deref().unwrap_or(""),
                "{}",
                rec.rule.as_deref().unwrap_or("")
            );
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut rec) = self.record.take() {
            rec.bytes_up = self.meter.up();
            rec.bytes_down = self.meter.down();
            rec.duration_ms = self.meter.elapsed_ms();
            self.audit.emit_detached(rec);
        }
    }
}

/// Frames counted by both directions (shared by reference within the relay task).
#[derive(Debug, Default)]
struct Counts {
    up: AtomicU64,
    down: AtomicU64,
}

/// How one direction stopped.
#[derive(Debug)]
enum Stop {
    /// Its reader ended cleanly (between frames).
    Eof,
    /// An I/O error.
    Io,
    /// Its frames broke the protocol.
    Violation(Violation),
    /// A hit (agent → upstream only).
    Cut(Cut),
}

/// Frames from one side; every read marks the relay active (a big frame arriving slowly
/// is not idle).
struct Reader<'m, R> {
    io: R,
    buf: BytesMut,
    parser: Parser,
    meter: &'m Meter,
}

impl<'m, R: AsyncRead + Unpin> Reader<'m, R> {
    fn new(io: R, from_client: bool, meter: &'m Meter) -> Self {
        Self {
            io,
            buf: BytesMut::with_capacity(16 * 1024),
            parser: Parser::new(from_client),
            meter,
        }
    }

    /// The next frame and its wire length; `None` at a clean end.
    async fn next(&mut self) -> Result<Option<(Frame, usize)>, Stop> {
        loop {
            if let Some((frame, used)) = self.parser.parse(&self.buf).map_err(Stop::Violation)? {
                self.buf.advance(used);
                return Ok(Some((frame, used)));
            }
            self.buf.reserve(16 * 1024);
            match self.io.read_buf(&mut self.buf).await {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => return Err(Stop::Io),
                Ok(_) => self.meter.touch(),
                Err(_) => return Err(Stop::Io),
            }
        }
    }
}

/// Writes one whole frame to the agent (both directions may).
async fn to_client<W: AsyncWrite + Unpin>(w: &Mutex<W>, frame: &Frame) -> std::io::Result<usize> {
    let bytes = frame.encode(None);
    let mut w = w.lock().await;
    w.write_all(&bytes).await?;
    w.flush().await?;
    Ok(bytes.len())
}

/// A fresh masking key for a frame the proxy sends upstream.
fn mask_key() -> [u8; 4] {
    let mut key = [0u8; 4];
    if getrandom::fill(&mut key).is_err() {
        key = [0x5a, 0xa5, 0x3c, 0xc3];
    }
    key
}

/// What both directions share.
struct Shared<'a, W> {
    session: &'a Session,
    client: &'a Mutex<W>,
    counts: &'a Counts,
    meter: &'a Meter,
    summary: &'a std::sync::Mutex<Summary>,
}

impl<W> Shared<'_, W> {
    fn note(&self, f: impl FnOnce(&mut Summary)) {
        if let Ok(mut s) = self.summary.lock() {
            f(&mut s);
        }
    }

    fn saw_close(&self, frame: &Frame, who: &'static str) {
        if let Some(code) = frame.close_code() {
            self.note(|s| {
                s.close.get_or_insert((code, who));
            });
        }
    }
}

/// Agent → upstream: each frame searched, forwarded re-masked, or the relay closed.
async fn pump_up<R, U, W>(mut from: Reader<'_, R>, to: &mut U, sh: &Shared<'_, W>) -> Stop
where
    R: AsyncRead + Unpin,
    U: AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = Outbound::after(Arc::clone(&sh.session.recent), &sh.session.host);
    // A fragment that is not its message's last waits for the next one, so a secret split
    // across two fragments is refused with neither sent.
    let mut held: Option<Frame> = None;
    loop {
        let mut frame = match from.next().await {
            Ok(Some((f, _))) => f,
            Ok(None) => {
                let _ = to.shutdown().await;
                return Stop::Eof;
            }
            Err(stop) => return stop,
        };
        sh.counts.up.fetch_add(1, Ordering::Relaxed);
        sh.saw_close(&frame, "agent");
        match out.check(&sh.session.rules, &sh.session.host, &mut frame) {
            Ok(seen) if seen != Seen::default() => sh.note(|s| {
                for (to, names) in [
                    (&mut s.redacted, seen.redacted),
                    (&mut s.logged, seen.logged),
                ] {
                    for n in names {
                        if !to.contains(&n) {
                            to.push(n);
                        }
                    }
                }
            }),
            Ok(_) => {}
            Err(cut) if sh.session.report => {
                tracing::warn!("websocket: {:?} in a frame (report mode: forwarded)", cut);
                sh.note(|s| {
                    s.reported.get_or_insert(cut);
                });
            }
            Err(cut) => return cut_relay(cut, to, sh).await,
        }
        for f in release(&mut held, frame) {
            let bytes = f.encode(Some(mask_key()));
            // A frame that would spend an upload budget does not go: the connection ends
            // here, as at a secret.
            if sh.meter.would_spend(bytes.len()) {
                let cut = Cut::Budget(sh.meter.budget().unwrap_or_default());
                return cut_relay(cut, to, sh).await;
            }
            if to.write_all(&bytes).await.is_err() || to.flush().await.is_err() {
                return Stop::Io;
            }
            sh.meter.add_up(bytes.len());
        }
    }
}

/// The relay ends at `cut`: the agent gets a Close 1008 naming the reason, the upstream's
/// side is shut down, and nothing of the frame that was cut goes.
async fn cut_relay<U, W>(cut: Cut, to: &mut U, sh: &Shared<'_, W>) -> Stop
where
    U: AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    let close = Frame::close(CLOSE_POLICY_VIOLATION, cut.reason().as_str());
    let _ = to_client(sh.client, &close).await;
    sh.note(|s| {
        s.close.get_or_insert((CLOSE_POLICY_VIOLATION, "proxy"));
    });
    let _ = to.shutdown().await;
    Stop::Cut(cut)
}

/// What goes upstream now that `frame` passed: a control frame at once (a Close drops a
/// held fragment: its message never ends); a fragment that is not its message's last is
/// held and the one held before it goes; a message's last fragment goes after the held one.
fn release(held: &mut Option<Frame>, frame: Frame) -> Vec<Frame> {
    match frame.opcode {
        Opcode::Close => {
            *held = None;
            vec![frame]
        }
        Opcode::Ping | Opcode::Pong => vec![frame],
        _ if !frame.fin => held.replace(frame).into_iter().collect(),
        _ => held.take().into_iter().chain([frame]).collect(),
    }
}

/// Upstream → agent: each frame scrubbed and forwarded.
async fn pump_down<R, W>(mut from: Reader<'_, R>, sh: &Shared<'_, W>) -> Stop
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut inbound = Inbound::default();
    loop {
        let mut frame = match from.next().await {
            Ok(Some((f, _))) => f,
            Ok(None) => {
                let _ = sh.client.lock().await.shutdown().await;
                return Stop::Eof;
            }
            Err(stop) => return stop,
        };
        sh.counts.down.fetch_add(1, Ordering::Relaxed);
        inbound.scrub(&sh.session.rules, &mut frame);
        sh.saw_close(&frame, "upstream");
        match to_client(sh.client, &frame).await {
            Ok(n) => sh.meter.add_down(n),
            Err(_) => return Stop::Io,
        }
    }
}

/// Until the relay is idle for `idle` or the proxy stops.
async fn watch_end(meter: &Meter, idle: Duration, phase: &mut watch::Receiver<Phase>) -> Event {
    let idle_out = async {
        loop {
            let quiet = meter.idle_for();
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    };
    tokio::select! {
        () = idle_out => Event::CloseIdle,
        () = reached(phase, Phase::Stopping) => Event::CloseShutdown,
    }
}

/// Relays frames between the agent (`client`) and the upstream (`server`) after a `101`
/// (see the module docs) until either side ends, a frame is refused, a side breaks the
/// protocol, the relay is idle for `idle` or the proxy stops. Returns what was seen.
pub async fn relay<C, S>(
    client: C,
    server: S,
    session: Session,
    meter: Arc<Meter>,
    idle: Duration,
    mut phase: watch::Receiver<Phase>,
) -> Summary
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (cr, cw) = tokio::io::split(client);
    let (sr, mut sw) = tokio::io::split(server);
    let cw = Mutex::new(cw);
    let counts = Counts::default();
    let summary = std::sync::Mutex::new(Summary::default());
    let sh = Shared {
        session: &session,
        client: &cw,
        counts: &counts,
        meter: &meter,
        summary: &summary,
    };
    let stop = {
        let up = pump_up(Reader::new(cr, true, &meter), &mut sw, &sh);
        let down = pump_down(Reader::new(sr, false, &meter), &sh);
        let end = watch_end(&meter, idle, &mut phase);
        tokio::pin!(up, down, end);
        let (first, up_first) = tokio::select! {
            s = &mut up => (s, true),
            s = &mut down => (s, false),
            e = &mut end => (Stop::Io, { sh.note(|s| s.end = Some(e)); true }),
        };
        match first {
            // The agent ended its side cleanly: the upstream may still say goodbye. (When
            // the upstream ends, nothing the agent sends could go anywhere.)
            Stop::Eof if up_first => {
                let rest = tokio::select! {
                    s = &mut down => s,
                    e = &mut end => { sh.note(|s| s.end = Some(e)); Stop::Io }
                };
                (rest, false)
            }
            other => (other, up_first),
        }
    };
    let (stop, up_side) = stop;
    if let Stop::Violation(v) = stop {
        let who = if up_side { "agent" } else { "upstream" };
        let _ = to_client(&cw, &v.close()).await;
        sh.note(|s| {
            s.violation = Some((v, who));
            s.close
                .get_or_insert((v.close().close_code().unwrap_or(0), "proxy"));
        });
    }
    let _ = cw.lock().await.shutdown().await;
    let _ = sw.shutdown().await;
    let mut out = summary.into_inner().unwrap_or_default();
    out.frames_up = counts.up.load(Ordering::Relaxed);
    out.frames_down = counts.down.load(Ordering::Relaxed);
    if let Stop::Cut(cut) = stop {
        out.cut = Some(cut);
    }
    if out.end.is_none() {
        out.end = Some(Event::Close);
    }
    out
}

#[cfg(test)]
mod tests;
