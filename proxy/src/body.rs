//! Bodies that count their bytes, and the response body that writes the audit line when the
//! exchange is over (fully sent, or the client went away).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::audit::{Audit, Record};
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

/// Emits its record, completed with the meter's bytes and duration, when dropped.
#[derive(Debug)]
pub struct AuditOnDrop {
    record: Option<Record>,
    meter: Arc<Meter>,
    audit: Audit,
    /// Set when the request body was cut for a leak after the response had started.
    leak: Option<Arc<std::sync::OnceLock<String>>>,
}

impl AuditOnDrop {
    /// Guards `record`.
    #[must_use]
    pub const fn new(record: Record, meter: Arc<Meter>, audit: Audit) -> Self {
        Self {
            record: Some(record),
            meter,
            audit,
            leak: None,
        }
    }

    /// Marks the record as a `credential-leak` denial if `flag` is set by then.
    #[must_use]
    pub fn with_leak_flag(mut self, flag: Arc<std::sync::OnceLock<String>>) -> Self {
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
            if let Some(name) = self.leak.as_ref().and_then(|f| f.get()) {
                rec.decision = crate::audit::Verdict::Deny;
                rec.reason = Some(airlock_policy::Reason::CredentialLeak.as_str());
                rec.event = Some("leak-in-body");
                tracing::warn!("credential {name}: seen in a request body, upstream cut");
            }
            self.audit.emit_detached(rec);
        }
    }
}
