//! A request body searched as it streams ([`CheckedBody`] and its [`RequestCheck`]s):
//! secrets, decoding, signals and the credentials' needles.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use airlock_policy::Host;
use airlock_policy::reason::Reason;
use bytes::Bytes;
use http_body_util::Either;
use hyper::body::{Body, Frame, SizeHint};

use super::Cx;
use super::request_body::{Tally, measures_signals, unreadable};
use crate::body::{BoxError, Cut, CutFlag, SignalNote};
use crate::decode::{self, Coding};
use crate::detect;
use crate::recent::{Channel, Recent};
use crate::scan;
use crate::signal;
use crate::snapshot::Rules;

/// One way of searching a streamed request body ([`CheckedBody`]).
trait RequestCheck: Unpin {
    /// What of `data` may go now (a tail that could start a secret is held back), or why
    /// the body must be cut.
    ///
    /// # Errors
    /// The [`Cut`].
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut>;
    /// What was held back, at the end of the body.
    ///
    /// # Errors
    /// The [`Cut`].
    fn finish(&mut self) -> Result<Bytes, Cut>;
}

/// A request body searched as it streams by a [`RequestCheck`]: bytes go on as the check
/// releases them; at a cut the body fails (hyper then abandons the upstream request) and
/// the reason is left in the flag. Request trailers are dropped (never searched, never
/// sent). The announced length holds: a check keeps lengths (redaction) or ends the body.
pub(super) struct CheckedBody<B, C> {
    inner: B,
    check: C,
    flag: CutFlag,
    done: bool,
    /// Whether what goes on is as long as what came in (false: a decoder; the length is
    /// then unknown, and the upstream request is sent chunked).
    keeps_length: bool,
}

impl<B, C> CheckedBody<B, C> {
    pub(super) fn new(inner: B, check: C, flag: &CutFlag) -> Self {
        Self {
            inner,
            check,
            flag: Arc::clone(flag),
            done: false,
            keeps_length: true,
        }
    }

    /// The check changes the body's length.
    fn changing_length(mut self) -> Self {
        self.keeps_length = false;
        self
    }

    /// Data that may go (`None`: nothing yet), or the body's error at a cut.
    fn release(&mut self, checked: Result<Bytes, Cut>) -> Option<Result<Frame<Bytes>, BoxError>> {
        match checked {
            Ok(b) if b.is_empty() => None,
            Ok(b) => Some(Ok(Frame::data(b))),
            Err(cut) => {
                let why = cut.reason().as_str();
                let _ = self.flag.set(cut);
                self.done = true;
                Some(Err(format!("request body cut: {why}").into()))
            }
        }
    }
}

impl<B, C> Body for CheckedBody<B, C>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    C: RequestCheck,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    let rest = this.check.finish();
                    this.done = true;
                    return Poll::Ready(this.release(rest));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers: dropped
                    };
                    let checked = this.check.chunk(data);
                    if let Some(out) = this.release(checked) {
                        return Poll::Ready(Some(out));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        if self.keeps_length {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

/// Secrets of known formats and the workspace's values in a streamed request body: the
/// last [`detect::Detectors::hold`] bytes (1 to 3 KiB) are held back until more arrive (or
/// the body ends), so a secret is always seen whole before any byte of it is sent. A
/// foreign secret cuts the body ([`Cut::Secret`]: the request is refused `foreign-secret`);
/// on an LLM API host, or by its detector's `redact` action, it is overwritten in place
/// instead; by `log` it goes on ([`detect::Detectors::judge_body`]). What went on is left in
/// the note for the record. The first bytes are searched joined to the end of what went to
/// the same host before (`before`), and the end of what this body sent is left for the
/// next ([`Channel::Body`]).
pub(super) struct SecretScan {
    pub(super) rules: Arc<Rules>,
    pub(super) host: Host,
    pub(super) note: detect::Note,
    pub(super) held: Vec<u8>,
    /// What went to the host before this body: in front of each window until as much as
    /// the hold-back has been released after it (no secret reaches further back).
    pub(super) before: Vec<u8>,
    /// How much of this body was released.
    pub(super) sent: usize,
    /// Where what is released is left for the next search to the same host.
    pub(super) recent: Arc<Recent>,
}

impl SecretScan {
    /// Checks `part` (what was held plus a new chunk) after `before`; returns what may go
    /// now, keeping the tail unless `last`.
    fn pass(&mut self, part: Vec<u8>, last: bool) -> Result<Bytes, Cut> {
        let detectors = &self.rules.detectors;
        let skip = self.before.len();
        let mut window = if skip == 0 {
            part
        } else {
            let mut w = Vec::with_capacity(skip + part.len());
            w.extend_from_slice(&self.before);
            w.extend_from_slice(&part);
            w
        };
        let v = detectors.judge_body_after(&mut window, skip, &self.host);
        if let Some(d) = v.refused {
            return Err(Cut::Secret(d.name.clone()));
        }
        self.note.add(&v);
        if skip > 0 {
            window.drain(..skip);
        }
        let hold = detectors.hold();
        let keep = if last { 0 } else { hold.min(window.len()) };
        self.held = window.split_off(window.len() - keep);
        self.sent += window.len();
        self.recent.push(self.host.as_str(), Channel::Body, &window);
        if !self.before.is_empty() {
            crate::recent::keep_tail(&mut self.before, &window, crate::recent::TAIL);
            if self.sent >= hold {
                self.before.clear();
            }
        }
        Ok(Bytes::from(window))
    }
}

impl RequestCheck for SecretScan {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        let mut window = std::mem::take(&mut self.held);
        window.extend_from_slice(&data);
        self.pass(window, false)
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        let held = std::mem::take(&mut self.held);
        self.pass(held, true)
    }
}

/// A streamed request body in a `Content-Encoding`, decoded as it comes (bounded:
/// [`decode::REQUEST`]); the checks after it read, and the upstream receives, the decoded
/// bytes. A bomb or a coding that does not decode cuts the body ([`Cut::Unreadable`]).
pub(super) struct DecodeCheck {
    decoder: decode::Decoder,
}

impl DecodeCheck {
    /// `body` decoded when it has codings, else as it is.
    pub(super) fn around<B>(
        codings: &[Coding],
        body: B,
        tally: &Tally,
    ) -> Result<Either<CheckedBody<B, Self>, B>, Reason> {
        if codings.is_empty() {
            return Ok(Either::Right(body));
        }
        let decoder =
            decode::Decoder::new(codings, decode::REQUEST).map_err(|_| Reason::MalformedRequest)?;
        let check = Self { decoder };
        Ok(Either::Left(
            CheckedBody::new(body, check, &tally.leak_flag).changing_length(),
        ))
    }
}

impl RequestCheck for DecodeCheck {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        self.decoder
            .feed(&data)
            .map(Bytes::from)
            .map_err(|e| unreadable(&e))
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        self.decoder
            .finish()
            .map(Bytes::from)
            .map_err(|e| unreadable(&e))
    }
}

/// The signals of a streamed request body ([`crate::signal`]): bytes go on as they come;
/// a signal the policy denies cuts the body at the chunk that raised it ([`Cut::Signal`];
/// what went before it went, at most `blob_min_bytes` of a run). At the end, or at the
/// cut, the signals are left in the note for the record. Report mode never cuts.
pub(super) struct SignalCheck {
    analyzer: signal::Analyzer,
    note: SignalNote,
    cut: bool,
}

impl SignalCheck {
    /// `body` measured for signals when [`measures_signals`], else as it is.
    pub(super) fn around<B>(
        ctx: &Cx<'_>,
        host: &Host,
        body: B,
        tally: &Tally,
    ) -> Either<CheckedBody<B, Self>, B> {
        if !measures_signals(ctx, host) {
            return Either::Right(body);
        }
        let knobs = ctx.rules.policy.signals;
        let check = SignalCheck {
            analyzer: signal::Analyzer::new(knobs),
            note: Arc::clone(&tally.signals),
            cut: !matches!(ctx.rules.policy.sandbox.mode, airlock_policy::Mode::Report),
        };
        Either::Left(CheckedBody::new(body, check, &tally.leak_flag))
    }
}

/// A streamed body whose bytes spent an upload budget ([`crate::budget`]; counted by the
/// [`crate::body::Counted`] under it) is cut at the chunk that spent it
/// ([`Cut::Budget`]).
pub(super) struct BudgetCheck {
    pub(super) meter: Arc<crate::tunnel::Meter>,
}

impl RequestCheck for BudgetCheck {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        if self.meter.over() {
            return Err(Cut::Budget(self.meter.budget().unwrap_or_default()));
        }
        Ok(data)
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        Ok(Bytes::new())
    }
}

impl RequestCheck for SignalCheck {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        self.analyzer.feed(&data);
        if self.cut
            && let Some(s) = self.analyzer.denied()
        {
            let _ = self.note.set(self.analyzer.signals());
            return Err(Cut::Signal(s));
        }
        Ok(data)
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        let _ = self.note.set(self.analyzer.signals());
        Ok(Bytes::new())
    }
}

/// Which needle set a streamed request body is searched with.
#[derive(Clone, Copy)]
pub(super) enum Which {
    All,
    Except(usize),
}

/// The credentials' placeholders and real values in a streamed request body: bytes are
/// released as soon as they cannot be the start of one ([`scan::Stream`]); one found cuts
/// the body ([`Cut::Credential`]).
pub(super) struct NeedleScan {
    pub(super) which: Which,
    pub(super) stream: scan::Stream,
    pub(super) rules: Arc<Rules>,
}

impl RequestCheck for NeedleScan {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        let creds = &self.rules.credentials;
        let needles = match self.which {
            Which::All => creds.leak_needles(),
            Which::Except(i) => creds.leak_needles_except(i),
        };
        let Some(needles) = needles else {
            return Ok(data); // nothing to look for
        };
        self.stream
            .check(needles, data)
            .map_err(|tag| Cut::Credential(creds.name_of(tag).to_owned()))
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        Ok(self.stream.finish())
    }
}
