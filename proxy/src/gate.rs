//! The request-head gate: every request head a client sends is read and judged here
//! **before** hyper sees a byte of it, so that a head hyper would refuse with its own bare
//! answer (`400 Bad Request`, `431`) is refused like every other denial instead (JSON body,
//! `x-airlock-error`, one audit line with `event: parse-error`).
//!
//! The gate sits between the client stream and hyper's HTTP/1.1 server. It follows the
//! message framing (request head, `content-length` or chunked body, then the next head) and
//! hands hyper only bytes it has judged:
//!
//! - a head is parsed with `httparse` (hyper's own parser, same settings), then checked the
//!   way hyper checks it (method, URI, header names, `content-length`, `transfer-encoding`),
//!   plus what hyper tolerates and an appliance should not: bare LF line ends, bare CR,
//!   `content-length` together with `transfer-encoding` (the smuggling signature);
//! - a head is held until complete, at most `max_head` bytes (else `request-too-large`), and
//!   never re-parsed per byte (only on its first bytes and when an end of head arrives);
//! - after a head that asks for an upgrade (`CONNECT`, or `Upgrade` on HTTP/1.1) the gate
//!   waits for the service's answer ([`GateShared::upgrade_decided`]): a `101` or a `2xx` to
//!   `CONNECT` makes the rest of the stream opaque, anything else resumes parsing heads;
//! - a refused head is never given to hyper: in its place hyper reads a fixed synthetic
//!   request naming a per-connection random path ([`GateShared::refusal_for`]), which the
//!   service answers with the uniform denial and `connection: close`. Requests before it on
//!   the connection (pipelined) are answered first, in order.
//!
//! A chunked body the gate cannot follow makes the rest of the stream opaque: hyper reads
//! the same bytes and fails that body itself (no head is at stake any more).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use airlock_policy::reason::Reason;
use bytes::{Buf, BytesMut};
use http::{Method, Request, Uri};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod head_timer;
pub use head_timer::HeadTimer;

/// Most headers in one request head (more: `request-too-large`). hyper is configured with
/// a higher cap so that it never refuses first.
pub const MAX_HEADERS: usize = 100;

/// Why a head was refused, or that it may pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The head is acceptable; its framing.
    Pass(Framing),
    /// Not a complete head yet.
    Partial,
    /// Refused.
    Refuse(Reason),
}

/// What follows an accepted head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// Bytes of the head (including leading empty lines).
    pub head_len: usize,
    /// The body.
    pub body: BodyLen,
    /// `CONNECT`, or an `Upgrade` header on HTTP/1.1.
    pub wants_upgrade: bool,
}

/// A request body's length as the head announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    /// `content-length: n` (0 without either header).
    Length(u64),
    /// `transfer-encoding: …, chunked`.
    Chunked,
}

/// Judges the request head at the start of `buf` (see the module docs).
#[must_use]
pub fn judge_head(buf: &[u8], max_head: usize) -> Verdict {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > max_head {
                Verdict::Refuse(Reason::RequestTooLarge)
            } else {
                Verdict::Partial
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Verdict::Refuse(Reason::RequestTooLarge),
        Err(_) => return Verdict::Refuse(Reason::MalformedRequest),
    };
    if head_len > max_head {
        return Verdict::Refuse(Reason::RequestTooLarge);
    }
    let malformed = Verdict::Refuse(Reason::MalformedRequest);
    if !crlf_only(&buf[..head_len]) {
        return malformed;
    }
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return malformed;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return malformed;
    };
    if Uri::try_from(path).is_err() {
        return malformed;
    }
    let http11 = version == 1;
    let mut wants_upgrade = method == Method::CONNECT;
    let mut length: Option<u64> = None;
    let mut te: Option<bool> = None; // Some(last encoding is chunked)
    for h in req.headers.iter() {
        let Ok(name) = http::HeaderName::from_bytes(h.name.as_bytes()) else {
            return malformed;
        };
        if name == http::header::CONTENT_LENGTH {
            let Some(n) = digits(h.value) else {
                return malformed;
            };
            if length.is_some_and(|l| l != n) || n >= u64::MAX - 1 {
                return malformed;
            }
            length = Some(n);
        } else if name == http::header::TRANSFER_ENCODING {
            if !http11 {
                return malformed;
            }
            let last = h.value.rsplit(|b| *b == b',').next().unwrap_or_default();
            te = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == http::header::UPGRADE {
            wants_upgrade = http11;
        }
    }
    let body = match (te, length) {
        (Some(_), Some(_)) | (Some(false), None) => return malformed,
        (Some(true), None) => BodyLen::Chunked,
        (None, n) => BodyLen::Length(n.unwrap_or(0)),
    };
    Verdict::Pass(Framing {
        head_len,
        body,
        wants_upgrade,
    })
}

/// Every LF is preceded by CR and every CR followed by LF.
fn crlf_only(head: &[u8]) -> bool {
    let mut prev = 0u8;
    for &b in head {
        if (b == b'\n') != (prev == b'\r') {
            return false;
        }
        prev = b;
    }
    prev != b'\r'
}

/// A `content-length` value: ASCII digits only (no sign, no list), like hyper.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Where the gate is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a request head.
    Head,
    /// Inside a body of known length: bytes left, then whether an upgrade was asked.
    Body(u64, bool),
    /// Inside a chunked body.
    Chunked(Chunk, bool),
    /// Waiting for the service's answer to an upgrade request.
    Await,
    /// Upgraded (or a body we could not follow): no more HTTP to judge.
    Through,
    /// A head was refused; the synthetic request was handed over. Nothing more is read.
    Refused,
}

/// Chunked-body framing, as hyper's decoder follows it (only the positions matter here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Start,
    Size(u64),
    SizeLws(u64),
    Ext(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
}

/// What one chunk byte does: the next state, the end of the body, or framing we cannot
/// follow.
enum ChunkStep {
    Next(Chunk),
    End,
    Lost,
}

fn chunk_step(c: Chunk, b: u8) -> ChunkStep {
    use ChunkStep::{End, Lost, Next};
    let hex = |b: u8| char::from(b).to_digit(16).map(u64::from);
    let grow = |size: u64, d: u64| size.checked_mul(16).and_then(|s| s.checked_add(d));
    match c {
        Chunk::Start => hex(b).map_or(Lost, |d| Next(Chunk::Size(d))),
        Chunk::Size(n) => match (b, hex(b)) {
            (_, Some(d)) => grow(n, d).map_or(Lost, |s| Next(Chunk::Size(s))),
            (b'\t' | b' ', _) => Next(Chunk::SizeLws(n)),
            (b';', _) => Next(Chunk::Ext(n)),
            (b'\r', _) => Next(Chunk::SizeLf(n)),
            _ => Lost,
        },
        Chunk::SizeLws(n) => match b {
            b'\t' | b' ' => Next(Chunk::SizeLws(n)),
            b';' => Next(Chunk::Ext(n)),
            b'\r' => Next(Chunk::SizeLf(n)),
            _ => Lost,
        },
        Chunk::Ext(n) => match b {
            b'\r' => Next(Chunk::SizeLf(n)),
            b'\n' => Lost,
            _ => Next(Chunk::Ext(n)),
        },
        Chunk::SizeLf(n) => match (b, n) {
            (b'\n', 0) => Next(Chunk::EndCr),
            (b'\n', n) => Next(Chunk::Data(n)),
            _ => Lost,
        },
        // Data is skipped in bulk by the caller; a single byte here is one of them.
        Chunk::Data(n) if n > 1 => Next(Chunk::Data(n - 1)),
        Chunk::Data(_) => Next(Chunk::DataCr),
        Chunk::DataCr if b == b'\r' => Next(Chunk::DataLf),
        Chunk::DataLf if b == b'\n' => Next(Chunk::Start),
        Chunk::DataCr | Chunk::DataLf => Lost,
        Chunk::Trailer if b == b'\r' => Next(Chunk::TrailerLf),
        Chunk::Trailer => Next(Chunk::Trailer),
        Chunk::TrailerLf if b == b'\n' => Next(Chunk::EndCr),
        Chunk::TrailerLf => Lost,
        Chunk::EndCr if b == b'\r' => Next(Chunk::EndLf),
        Chunk::EndCr => Next(Chunk::Trailer),
        Chunk::EndLf if b == b'\n' => End,
        Chunk::EndLf => Lost,
    }
}

/// `/.airlock-refused/<random>`, drawn once per process: a path no agent can know, so a
/// request naming it can only be the gate's own synthetic one.
fn marker() -> &'static str {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER.get_or_init(|| {
        let mut r = [0u8; 16];
        if getrandom::fill(&mut r).is_err() {
            // Still unguessable enough for its only job (not mistaking an agent's path).
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            r = (t ^ u128::from(std::process::id())).to_le_bytes();
        }
        let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
        format!("/.airlock-refused/{hex}")
    })
}

/// Upgrade decision slots.
const UNDECIDED: u8 = 0;
const UPGRADED: u8 = 1;
const NOT_UPGRADED: u8 = 2;

/// The part of a gate the service sees: refusals and upgrade decisions.
#[derive(Debug)]
pub struct GateShared {
    /// The path of the synthetic request ([`marker`]).
    marker: &'static str,
    refusal: Mutex<Option<Reason>>,
    upgrade: AtomicU8,
    waker: Mutex<Option<Waker>>,
    /// Messages (head and body) the gate passed whole, in order.
    ended: AtomicU64,
    /// Requests the service received, in order ([`GateShared::next_message`]).
    dispatched: AtomicU64,
    /// A chunked body the gate could not follow: no message end can be vouched for.
    lost: AtomicBool,
    /// The gate holds the first bytes of a head whose end has not arrived (as of its last
    /// read): what tells a slowloris head from an idle connection when the head-read
    /// deadline fires.
    head_unfinished: AtomicBool,
}

/// Where one request's message ends, as the gate saw it: lets the request's body tell a
/// real end from a cut one ([`crate::body::Framed`]).
///
/// hyper can end a request body cleanly (no error) when it stops reading a connection the
/// client abandoned mid-body; forwarded as is, a chunked upload the agent never finished
/// would reach the upstream complete. hyper reads only bytes the gate passed, so a body
/// really ended only if the gate passed its end.
#[derive(Debug, Clone)]
pub struct MessageEnd {
    gate: Arc<GateShared>,
    /// 1-based position of the request on its connection.
    index: u64,
}

impl MessageEnd {
    /// Whether the gate passed the whole message (head and body) of this request.
    #[must_use]
    pub fn passed(&self) -> bool {
        !self.gate.lost.load(Ordering::Acquire)
            && self.gate.ended.load(Ordering::Acquire) >= self.index
    }
}

impl GateShared {
    /// A fresh per-connection handle.
    #[must_use]
    pub fn new() -> Self {
        Self {
            marker: marker(),
            refusal: Mutex::new(None),
            upgrade: AtomicU8::new(UNDECIDED),
            waker: Mutex::new(None),
            ended: AtomicU64::new(0),
            dispatched: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            head_unfinished: AtomicBool::new(false),
        }
    }

    /// Whether the client had begun a request head and not finished it (as of the gate's
    /// last read): a head-read timeout then cut a slowloris, not an idle connection.
    #[must_use]
    pub fn head_unfinished(&self) -> bool {
        self.head_unfinished.load(Ordering::Acquire)
    }

    /// Called by the service for every request hyper hands it, in order: where that
    /// request's message ends.
    #[must_use]
    pub fn next_message(self: &Arc<Self>) -> MessageEnd {
        MessageEnd {
            gate: Arc::clone(self),
            index: self.dispatched.fetch_add(1, Ordering::AcqRel) + 1,
        }
    }

    /// When `req` is the synthetic request standing for a refused head: the reason.
    pub fn refusal_for<B>(&self, req: &Request<B>) -> Option<Reason> {
        if req.uri().path() != self.marker {
            return None;
        }
        self.refusal.lock().ok()?.take()
    }

    /// The service answered an upgrade request (`CONNECT`, `Upgrade`): with the stream
    /// handed over (`101`, `2xx` to `CONNECT`) or not.
    pub fn upgrade_decided(&self, upgraded: bool) {
        self.upgrade.store(
            if upgraded { UPGRADED } else { NOT_UPGRADED },
            Ordering::Release,
        );
        if let Some(w) = self.waker.lock().ok().and_then(|mut w| w.take()) {
            w.wake();
        }
    }

    fn synthetic(&self) -> Vec<u8> {
        format!("GET {} HTTP/1.1\r\nhost: airlock\r\n\r\n", self.marker).into_bytes()
    }
}

impl Default for GateShared {
    fn default() -> Self {
        Self::new()
    }
}

/// hyper's HTTP/1.1 server for a gated client connection: keep-alive, the head-read
/// timeout on `timer` ([`HeadTimer`]: no syscall per request), and hyper's own size limits
/// set above the gate's so that hyper never refuses a head first.
#[must_use]
pub fn http1_server(
    timer: &HeadTimer,
    limits: &crate::limits::Limits,
) -> hyper::server::conn::http1::Builder {
    let max_head = limits.max_header_bytes;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(timer.clone())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size((max_head + 16 * 1024).max(8192))
        .max_header_size(max_head + 8 * 1024)
        .keep_alive(true);
    builder
}

/// `response` with `connection: close` (hyper then closes after writing it).
#[must_use]
pub fn closing<B>(mut response: http::Response<B>) -> http::Response<B> {
    response.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

/// Whether the service's answer to `req` hands the stream over (see [`GateShared`]).
#[must_use]
pub fn wants_upgrade<B>(req: &Request<B>) -> bool {
    req.method() == Method::CONNECT
        || (req.version() == http::Version::HTTP_11
            && req.headers().contains_key(http::header::UPGRADE))
}

/// The client stream, as hyper reads it (see the module docs).
#[derive(Debug)]
pub struct Gate<IO> {
    io: IO,
    /// Read from `io`, not yet given to hyper: `[..ready]` judged, the rest not yet (an
    /// incomplete head, or bytes after an upgrade request).
    held: BytesMut,
    ready: usize,
    /// How far `held[ready..]` was searched for the end of a head.
    searched: usize,
    state: State,
    max_head: usize,
    shared: Arc<GateShared>,
}

impl<IO> Gate<IO> {
    /// Gates `io`; heads longer than `max_head` are `request-too-large`.
    pub fn new(io: IO, max_head: usize, shared: Arc<GateShared>) -> Self {
        Self {
            io,
            held: BytesMut::new(),
            ready: 0,
            searched: 0,
            state: State::Head,
            max_head,
            shared,
        }
    }

    /// The stream and the bytes read from it that hyper has not seen (after an upgrade).
    pub fn into_parts(self) -> (IO, BytesMut) {
        (self.io, self.held)
    }

    /// Judges `data` (bytes following everything judged so far). Returns how many of them
    /// may go to hyper; the rest must be held (an incomplete head, or after an upgrade
    /// request) or, when the state is now `Refused`, dropped.
    fn scan(&mut self, data: &[u8]) -> usize {
        let mut pos = 0;
        while pos < data.len() {
            match self.state {
                State::Through => return data.len(),
                State::Await | State::Refused => return pos,
                State::Body(left, up) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(data.len() - pos);
                    pos += take;
                    let left = left - take as u64;
                    self.state = if left > 0 {
                        State::Body(left, up)
                    } else {
                        self.end_message(up)
                    };
                }
                State::Chunked(c, up) => {
                    if let Chunk::Data(n) = c
                        && n > 1
                    {
                        let take = usize::try_from(n - 1)
                            .unwrap_or(usize::MAX)
                            .min(data.len() - pos);
                        pos += take;
                        self.state = State::Chunked(Chunk::Data(n - take as u64), up);
                        continue;
                    }
                    self.state = match chunk_step(c, data[pos]) {
                        ChunkStep::Next(c) => State::Chunked(c, up),
                        ChunkStep::End => self.end_message(up),
                        ChunkStep::Lost => {
                            self.shared.lost.store(true, Ordering::Release);
                            State::Through
                        }
                    };
                    pos += 1;
                }
                State::Head => {
                    let rest = &data[pos..];
                    match judge_head(rest, self.max_head) {
                        Verdict::Partial => return pos,
                        Verdict::Refuse(reason) => {
                            self.refuse(reason);
                            return pos;
                        }
                        Verdict::Pass(f) => {
                            pos += f.head_len;
                            self.state = match f.body {
                                BodyLen::Length(0) => self.end_message(f.wants_upgrade),
                                BodyLen::Length(n) => State::Body(n, f.wants_upgrade),
                                BodyLen::Chunked => State::Chunked(Chunk::Start, f.wants_upgrade),
                            };
                        }
                    }
                }
            }
        }
        pos
    }

    /// A message (head and body) was passed whole: counted for [`MessageEnd`].
    fn end_message(&self, upgrade: bool) -> State {
        self.shared.ended.fetch_add(1, Ordering::Release);
        if upgrade { State::Await } else { State::Head }
    }

    fn refuse(&mut self, reason: Reason) {
        tracing::debug!("request head refused: {reason}");
        if let Ok(mut r) = self.shared.refusal.lock() {
            *r = Some(reason);
        }
        self.state = State::Refused;
    }

    /// Judges what is held beyond `ready` (after new bytes arrived, or an upgrade was
    /// refused). A held incomplete head is only re-parsed when an end of head may have
    /// arrived, so a head trickled byte by byte costs linear time.
    fn judge_held(&mut self, fresh: bool) {
        if self.state == State::Head && !fresh {
            let tail = &self.held[self.ready..];
            let from = self.searched.saturating_sub(3);
            let end_seen = tail[from..]
                .windows(2)
                .any(|w| w == b"\n\n" || w == b"\n\r");
            self.searched = tail.len();
            if !end_seen && tail.len() <= self.max_head {
                return;
            }
        }
        let tail = self.held.split_off(self.ready);
        let n = self.scan(&tail);
        match self.state {
            State::Refused => {
                self.held.truncate(self.ready);
                self.held.extend_from_slice(&tail[..n]);
                self.held.extend_from_slice(&self.shared.synthetic());
                self.ready = self.held.len();
            }
            _ => {
                self.held.unsplit(tail);
                self.ready += n;
            }
        }
        self.searched = 0;
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Gate<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = self.as_mut().poll_gated(cx, buf);
        // Stray line ends between requests are not a head.
        let unfinished = self.state == State::Head
            && self.held[self.ready.min(self.held.len())..]
                .iter()
                .any(|b| !matches!(b, b'\r' | b'\n'));
        if self.shared.head_unfinished.load(Ordering::Relaxed) != unfinished {
            self.shared
                .head_unfinished
                .store(unfinished, Ordering::Release);
        }
        polled
    }
}

impl<IO: AsyncRead + Unpin> Gate<IO> {
    /// [`AsyncRead::poll_read`] itself; the trait's method notes whether a head is
    /// unfinished after each read.
    fn poll_gated(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready > 0 {
                let n = this.ready.min(buf.remaining());
                buf.put_slice(&this.held[..n]);
                this.held.advance(n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            match this.state {
                State::Refused => return Poll::Pending, // hyper closes after the denial
                State::Await => match this.shared.upgrade.load(Ordering::Acquire) {
                    UNDECIDED => {
                        if let Ok(mut w) = this.shared.waker.lock() {
                            *w = Some(cx.waker().clone());
                        }
                        // Decided between the load and the registration: look again.
                        if this.shared.upgrade.load(Ordering::Acquire) == UNDECIDED {
                            return Poll::Pending;
                        }
                        continue;
                    }
                    d => {
                        this.shared.upgrade.store(UNDECIDED, Ordering::Release);
                        this.state = if d == UPGRADED {
                            State::Through
                        } else {
                            State::Head
                        };
                        this.judge_held(true);
                        continue;
                    }
                },
                State::Through if this.held.is_empty() => {
                    return Pin::new(&mut this.io).poll_read(cx, buf);
                }
                _ => {}
            }
            if this.held.is_empty() && this.state != State::Through {
                // Fast path: read straight into hyper's buffer and judge in place; give
                // back only what may pass, keep an incomplete head.
                let before = buf.filled().len();
                std::task::ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
                let after = buf.filled().len();
                if after == before {
                    return Poll::Ready(Ok(())); // EOF
                }
                let pass = this.scan(&buf.filled()[before..after]);
                if pass == after - before {
                    return Poll::Ready(Ok(()));
                }
                let rest = &buf.filled()[before + pass..after];
                if this.state == State::Refused {
                    this.held.extend_from_slice(&this.shared.synthetic());
                    this.ready = this.held.len();
                } else {
                    this.held.extend_from_slice(rest);
                    this.searched = rest.len();
                }
                buf.set_filled(before + pass);
                if pass > 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            // Slow path: more bytes for what is held.
            let mut chunk = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut chunk);
            std::task::ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                // EOF inside a head: refused like any malformed head (a client that only
                // half-closed still reads the answer). Stray line ends are not a head.
                if this.held.iter().all(|b| matches!(b, b'\r' | b'\n')) {
                    this.held.clear();
                    return Poll::Ready(Ok(()));
                }
                this.refuse(Reason::MalformedRequest);
                this.held.clear();
                this.held.extend_from_slice(&this.shared.synthetic());
                this.ready = this.held.len();
                continue;
            }
            this.held.extend_from_slice(rb.filled());
            if this.state == State::Through {
                this.ready = this.held.len();
                continue;
            }
            this.judge_held(false);
        }
    }
}

/// Writes go straight to the wrapped stream (`io` field): the gate and the prefix only
/// concern what is read.
macro_rules! write_through {
    ($t:ident) => {
        impl<IO: AsyncWrite + Unpin> AsyncWrite for $t<IO> {
            fn poll_write(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.io).poll_write(cx, buf)
            }
            fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.io).poll_flush(cx)
            }
            fn poll_shutdown(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<io::Result<()>> {
                Pin::new(&mut self.io).poll_shutdown(cx)
            }
            fn poll_write_vectored(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
            }
            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }
        }
    };
}

write_through!(Gate);

/// A stream with bytes already read from it in front (what hyper and the gate had read
/// when the connection was upgraded).
#[derive(Debug)]
pub struct Prefixed<IO> {
    pre: bytes::Bytes,
    io: IO,
}

impl<IO> Prefixed<IO> {
    /// `pre`, then `io`.
    pub const fn new(pre: bytes::Bytes, io: IO) -> Self {
        Self { pre, io }
    }

    /// The stream, once its prefix is consumed (else `self` back).
    ///
    /// # Errors
    /// `self` when prefix bytes are left.
    pub fn into_bare(self) -> Result<IO, Self> {
        if self.pre.is_empty() {
            Ok(self.io)
        } else {
            Err(self)
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pre.is_empty() {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let n = self.pre.len().min(buf.remaining());
        buf.put_slice(&self.pre[..n]);
        self.pre.advance(n);
        Poll::Ready(Ok(()))
    }
}

write_through!(Prefixed);

/// The client socket under a connection the explicit listener (or the transparent one's
/// plain HTTP) upgraded, with every byte read from it that nobody consumed yet in front.
/// Relays over it can then splice (`tunnel::tcp`).
///
/// # Errors
/// The upgraded connection back when it runs over anything else (TLS).
pub fn upgraded_tcp(
    up: hyper::upgrade::Upgraded,
) -> Result<Prefixed<tokio::net::TcpStream>, hyper::upgrade::Upgraded> {
    type Io = hyper_util::rt::TokioIo<Gate<crate::tunnel::Metered<tokio::net::TcpStream>>>;
    let parts = up.downcast::<Io>()?;
    let (metered, held) = parts.io.into_inner().into_parts();
    let pre = if held.is_empty() {
        parts.read_buf
    } else {
        let mut all = BytesMut::from(parts.read_buf);
        all.extend_from_slice(&held);
        all.freeze()
    };
    Ok(Prefixed::new(pre, metered.into_inner()))
}

/// Whether hyper hands the connection over after this answer to an upgrade request (a
/// `101`, or a `2xx` to `CONNECT`): the gate then stops reading heads on it.
pub(crate) fn upgrades(connect: bool, status: http::StatusCode) -> bool {
    status == http::StatusCode::SWITCHING_PROTOCOLS || (connect && status.is_success())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 * 1024;

    #[test]
    fn a_message_ends_only_where_the_gate_passed_its_last_byte() {
        let shared = Arc::new(GateShared::new());
        let mut gate = Gate::new((), MAX, Arc::clone(&shared));
        let first = shared.next_message();
        let second = shared.next_message();
        // A chunked upload, cut before its last chunk: not ended, however it stops.
        let head = b"PUT /u HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n";
        assert_eq!(gate.scan(head), head.len());
        assert!(!first.passed());
        // Its last chunk: ended. The next message (content-length) ends with its last byte.
        let rest = b"0\r\n\r\nPOST /v HTTP/1.1\r\ncontent-length: 3\r\n\r\nxy";
        assert_eq!(gate.scan(rest), rest.len());
        assert!(first.passed());
        assert!(!second.passed());
        assert_eq!(gate.scan(b"z"), 1);
        assert!(second.passed());
        // A chunked body the gate cannot follow: nothing is vouched for any more.
        let third = shared.next_message();
        let lost = b"PUT /w HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n";
        gate.scan(lost);
        assert!(!third.passed());
        assert!(!first.passed(), "a lost gate vouches for nothing");
    }

    fn verdict(head: &[u8]) -> Verdict {
        judge_head(head, MAX)
    }

    #[test]
    fn good_heads_pass_with_their_framing() {
        let Verdict::Pass(f) = verdict(b"GET /a?b HTTP/1.1\r\nhost: x\r\n\r\nrest") else {
            panic!()
        };
        assert_eq!(
            (f.head_len, f.body, f.wants_upgrade),
            (30, BodyLen::Length(0), false)
        );
        let Verdict::Pass(f) =
            verdict(b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n")
        else {
            panic!()
        };
        assert_eq!(f.body, BodyLen::Length(5));
        let Verdict::Pass(f) =
            verdict(b"POST / HTTP/1.1\r\ntransfer-encoding: gzip, Chunked\r\n\r\n")
        else {
            panic!()
        };
        assert_eq!(f.body, BodyLen::Chunked);
        let Verdict::Pass(f) = verdict(b"CONNECT a:443 HTTP/1.1\r\n\r\n") else {
            panic!()
        };
        assert!(f.wants_upgrade);
        let Verdict::Pass(f) = verdict(b"\r\nGET / HTTP/1.1\r\nupgrade: websocket\r\n\r\n") else {
            panic!()
        };
        assert!(f.wants_upgrade);
        let Verdict::Pass(f) = verdict(b"GET / HTTP/1.0\r\nupgrade: websocket\r\n\r\n") else {
            panic!()
        };
        assert!(!f.wants_upgrade, "no upgrade on HTTP/1.0");
        assert_eq!(verdict(b"GET / HTTP/1.1\r\nhost: x\r\n"), Verdict::Partial);
        assert_eq!(verdict(b"GE"), Verdict::Partial);
    }

    #[test]
    fn broken_heads_are_refused_with_the_right_reason() {
        let bad = Verdict::Refuse(Reason::MalformedRequest);
        for head in [
            &b"\x16\x03\x01\x00\x05hello\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nx\0y: 1\r\n\r\n",
            b"GET / HTTP/1.1\nhost: x\n\n",
            b"GET / HTTP/1.1\r\nhost: x\n\r\n",
            b"GET / HTTP/1.1\r\nhost: x\ry\r\n\r\n",
            b"GET / HTTP/1.1\rhost: x\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET / HTTP/1.1\r\na: 1\r\n b\r\n\r\n",
            b"POST / HTTP/1.1\r\ncontent-length: +5\r\n\r\n",
            b"POST / HTTP/1.1\r\ncontent-length: 5, 5\r\n\r\n",
            b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
            b"GET /\x7f HTTP/1.1\r\n\r\n",
        ] {
            let v = verdict(head);
            assert_eq!(v, bad, "{:?}", String::from_utf8_lossy(head));
        }
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(verdict(&many), Verdict::Refuse(Reason::RequestTooLarge));
        let big = format!("GET / HTTP/1.1\r\nx: {}", "a".repeat(MAX));
        assert_eq!(
            verdict(big.as_bytes()),
            Verdict::Refuse(Reason::RequestTooLarge)
        );
    }
}
