//! Bodies that count their bytes, and the response body that writes the audit line when the
//! exchange is over (fully sent, or the client went away).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::audit::{Audit, Record};
use crate::detect::RULE_PREFIX;
use crate::finding::{Denial, Finding};
use crate::gate::MessageEnd;

/// The error type of bodies the proxy builds.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
use crate::tunnel::{Dir, Meter};

/// A body whose data frames are counted on a [`Meter`].
#[derive(Debug)]
pub struct Counted<B> {
    inner: B,
    meter: Arc<Meter>,
    dir: Dir,
    on_end: Option<AuditOnDrop>,
}

impl<B> Counted<B> {
    /// Counts `inner` in direction `dir`.
    pub const fn new(inner: B, meter: Arc<Meter>, dir: Dir) -> Self {
        Self {
            inner,
            meter,
            dir,
            on_end: None,
        }
    }

    /// Also emits `guard`'s record when this body is dropped.
    #[must_use]
    pub fn with_audit(mut self, guard: AuditOnDrop) -> Self {
        self.on_end = Some(guard);
        self
    }
}

impl<B> Body for Counted<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let res = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &res
            && let Some(data) = frame.data_ref()
        {
            match self.dir {
                Dir::Up => self.meter.add_up(data.len()),
                Dir::Down => self.meter.add_down(data.len()),
            }
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that ends cleanly only where its message really ends ([`MessageEnd`]): a
/// clean end the gate did not see is turned into an error, so the upstream request is cut
/// (never completed) and a body judged whole is refused.
#[derive(Debug)]
pub struct Framed<B> {
    inner: B,
    end: Option<MessageEnd>,
}

impl<B> Framed<B> {
    /// `inner`, checked against `end` (`None`: no gate vouches for it, so it never ends
    /// cleanly).
    pub const fn new(inner: B, end: Option<MessageEnd>) -> Self {
        Self { inner, end }
    }
}

/// A request body ended without its last bytes.
#[derive(Debug, thiserror::Error)]
#[error("the request body ended before its message did (client gone mid-body)")]
pub struct BodyCut;

impl<B> Body for Framed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(r) => Poll::Ready(Some(r.map_err(Into::into))),
            None if self.end.as_ref().is_some_and(MessageEnd::passed) => Poll::Ready(None),
            None => Poll::Ready(Some(Err(BodyCut.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        // Only claim the end when it is vouched for (hyper then never polls again).
        self.inner.is_end_stream() && self.end.as_ref().is_some_and(MessageEnd::passed)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body with the bytes already read from it (to judge them before anything is
/// sent) put back in front: the upstream gets the body byte for byte.
#[derive(Debug)]
pub struct Held<B> {
    held: Option<Bytes>,
    inner: B,
}

impl<B> Held<B> {
    /// `inner` as it is.
    pub const fn none(inner: B) -> Self {
        Self { held: None, inner }
    }

    /// `held`, then the rest of `inner`.
    pub fn new(held: Bytes, inner: B) -> Self {
        Self {
            held: (!held.is_empty()).then_some(held),
            inner,
        }
    }
}

impl<B> Body for Held<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(held) = self.held.take() {
            return Poll::Ready(Some(Ok(Frame::data(held))));
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let n = self.held.as_ref().map_or(0, |h| h.len() as u64);
        if n == 0 {
            return inner;
        }
        if let Some(exact) = inner.exact() {
            return SizeHint::with_exact(exact.saturating_add(n));
        }
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(n));
        }
        hint.set_lower(inner.lower().saturating_add(n));
        hint
    }
}

/// Why a streamed request body was cut on its way upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// A credential's placeholder or real value (its name).
    Credential(String),
    /// A secret of a known format going to a host that is not its provider's (the
    /// detector's name).
    Secret(std::borrow::Cow<'static, str>),
    /// A signal the policy refuses (`[signals] ... = "deny"`).
    Signal(crate::signal::Signal),
    /// A body that cannot be read as it must be to be searched (`decompression-bomb`, a
    /// coding that does not decode), and why (the record's `rule`).
    Unreadable(airlock_policy::Reason, String),
    /// An upload budget of `[limits]` spent mid-body (which: the record's `rule`).
    Budget(String),
}

impl Cut {
    /// The denial it is reported as.
    #[must_use]
    pub fn reason(&self) -> airlock_policy::Reason {
        use crate::signal::SignalPolicy as _;
        match self {
            Self::Credential(_) => airlock_policy::Reason::CredentialLeak,
            Self::Secret(_) => airlock_policy::Reason::ForeignSecret,
            Self::Signal(s) => s.reason(),
            Self::Unreadable(reason, _) => *reason,
            Self::Budget(_) => airlock_policy::Reason::BudgetExhausted,
        }
    }

    /// The refusal it is, naming what was found (the credential, or the rule).
    #[must_use]
    pub fn denial(&self) -> Denial {
        let found = match self {
            Self::Credential(name) => vec![Finding::Credential(name.clone())],
            Self::Secret(name) => vec![Finding::Rule(format!("{RULE_PREFIX}{name}"))],
            Self::Signal(s) => vec![Finding::Rule(s.describe()), Finding::Signal(*s)],
            Self::Unreadable(_, why) | Self::Budget(why) => vec![Finding::Rule(why.clone())],
        };
        Denial::naming(self.reason(), found)
    }

    /// Names what was found on the record (`credential` or `rule`) and returns the reason.
    pub fn describe(&self, rec: &mut Record) -> airlock_policy::Reason {
        self.denial().apply(rec)
    }
}

/// Set by a body checker when it cuts a request body (first cut wins).
pub type CutFlag = Arc<std::sync::OnceLock<Cut>>;

/// Emits its record, completed with the meter's bytes and duration, when dropped.
#[derive(Debug)]
pub struct AuditOnDrop {
    record: Option<Record>,
    meter: Arc<Meter>,
    audit: Audit,
    /// Set when the request body was cut after the response had started.
    leak: Option<CutFlag>,
    /// The signals of a streamed request body, measured as it went.
    signals: Option<SignalNote>,
    /// The secrets a streamed request body let through (redacted, logged).
    secrets: Option<crate::detect::Note>,
    /// Set when the response was cut on its way to the agent (it did not decode).
    response_cut: Option<CutFlag>,
}

/// Where a streamed request body's signals are left for its record (first note wins).
pub type SignalNote = Arc<std::sync::OnceLock<Vec<crate::signal::Signal>>>;

impl AuditOnDrop {
    /// Guards `record`.
    #[must_use]
    pub const fn new(record: Record, meter: Arc<Meter>, audit: Audit) -> Self {
        Self {
            record: Some(record),
            meter,
            audit,
            leak: None,
            signals: None,
            secrets: None,
            response_cut: None,
        }
    }

    /// Marks the record as a denial (`decompression-bomb`, `content-encoding-unsupported`)
    /// ending in `close-error` if `flag` is set by then: the response was cut.
    #[must_use]
    pub fn with_response_cut(mut self, flag: CutFlag) -> Self {
        self.response_cut = Some(flag);
        self
    }

    /// Adds the signals left in `note` (by the time the record is written) to the record.
    #[must_use]
    pub fn with_signals(mut self, note: SignalNote) -> Self {
        self.signals = Some(note);
        self
    }

    /// Notes on the record the secrets a streamed body let through, as `note` holds them by
    /// the time the record is written ([`crate::detect::note`]).
    #[must_use]
    pub fn with_secrets(mut self, note: crate::detect::Note) -> Self {
        self.secrets = Some(note);
        self
    }

    /// Marks the record as a denial (`credential-leak`, `foreign-secret`) if `flag` is set
    /// by then.
    #[must_use]
    pub fn with_leak_flag(mut self, flag: CutFlag) -> Self {
        self.leak = Some(flag);
        self
    }
}

impl Drop for AuditOnDrop {
    fn drop(&mut self) {
        if let Some(mut rec) = self.record.take() {
            rec.bytes_up = self.meter.up();
            rec.bytes_down = self.meter.down();
            rec.duration_ms = self.meter.elapsed_ms();
            if let Some(seen) = self.signals.as_ref().and_then(|n| n.get()) {
                for s in seen {
                    if !rec.signals.contains(s) {
                        rec.signals.push(*s);
                    }
                }
            }
            if let Some(note) = &self.secrets {
                note.apply(&mut rec);
            }
            if let Some(cut) = self.leak.as_ref().and_then(|f| f.get()) {
                rec.decision = crate::audit::Verdict::Deny;
                rec.reason = Some(cut.describe(&mut rec));
                rec.event = Some(crate::audit::Event::LeakInBody);
                tracing::warn!("{cut:?}: seen in a request body, upstream cut");
            }
            if let Some(cut) = self.response_cut.as_ref().and_then(|f| f.get()) {
                rec.decision = crate::audit::Verdict::Deny;
                rec.reason = Some(cut.describe(&mut rec));
                rec.event = Some(crate::audit::Event::CloseError);
                tracing::warn!("{cut:?}: the response was cut on its way to the agent");
            }
            self.audit.emit_detached(rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{Gate, GateShared};
    use http_body_util::BodyExt;
    use tokio::io::AsyncReadExt;

    /// Data frames, then a clean end.
    struct Parts(Vec<&'static [u8]>);

    fn parts(p: &[&'static [u8]]) -> Parts {
        Parts(p.iter().rev().copied().collect())
    }

    impl Body for Parts {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop().map(|b| Ok(Frame::data(Bytes::from_static(b)))))
        }
    }

    /// hyper's side of a gate: reads exactly what was written, as it passes.
    async fn pass(
        client: &mut tokio::io::DuplexStream,
        gate: &mut Gate<tokio::io::DuplexStream>,
        wire: &[u8],
    ) {
        use tokio::io::AsyncWriteExt;
        client.write_all(wire).await.unwrap();
        let mut seen = vec![0u8; wire.len()];
        gate.read_exact(&mut seen).await.unwrap();
        assert_eq!(seen, wire);
    }

    #[tokio::test]
    async fn a_body_that_ends_before_its_message_did_fails_instead_of_ending() {
        let shared = Arc::new(GateShared::new());
        let end = shared.next_message();
        let (mut client, server) = tokio::io::duplex(4096);
        let mut gate = Gate::new(server, 1024, Arc::clone(&shared));
        // The body stream ends cleanly (as hyper's does when it stops reading a connection
        // the client left) but the client never sent the last chunk.
        let head = b"PUT / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n";
        pass(&mut client, &mut gate, head).await;
        let cut = Framed::new(parts(&[b"ab"]), Some(end.clone()))
            .collect()
            .await;
        assert!(cut.is_err(), "a cut body must fail, never end");
        // The same body after its last chunk went through: a clean end.
        pass(&mut client, &mut gate, b"0\r\n\r\n").await;
        let whole = Framed::new(parts(&[b"ab"]), Some(end)).collect().await;
        assert_eq!(whole.unwrap().to_bytes(), Bytes::from_static(b"ab"));
        // No gate to vouch for it: never a clean end.
        assert!(Framed::new(parts(&[]), None).collect().await.is_err());
    }
}
