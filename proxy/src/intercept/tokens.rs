//! An LLM API's answer read for its token usage as it streams ([`crate::usage`]), spent
//! against the session's and the sandbox's token budgets when it ends ([`crate::budget`]).
//! Every byte goes on to the agent as it arrives: the tap only looks.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use std::time::SystemTime;

use crate::Shared;
use crate::audit::{Event, Kind, Record};
use crate::limits::Client;
use crate::usage::Usage;

/// The answer's body, its usage read on the way.
pub(super) struct TokenTap<B> {
    inner: B,
    usage: Option<Usage>,
    spend: Spend,
}

/// Where the tokens go when the answer ends.
pub(super) struct Spend {
    pub(super) shared: Arc<Shared>,
    pub(super) who: Client,
    pub(super) limits: airlock_policy::limits::Limits,
    pub(super) host: String,
}

impl<B> TokenTap<B> {
    pub(super) fn new(inner: B, content_type: Option<&str>, spend: Spend) -> Self {
        Self {
            inner,
            usage: Some(Usage::new(content_type)),
            spend,
        }
    }

    /// The answer ended (or was dropped part-way): what it reported is spent, once.
    fn settle(&mut self) {
        let Some(usage) = self.usage.take() else {
            return;
        };
        let overflowed = usage.overflowed;
        let tokens = usage.finish();
        let s = &self.spend;
        if overflowed {
            tracing::warn!(
                "LLM tokens: an answer of {} was too large to read for its usage; it counts {} tokens",
                s.host,
                tokens.total()
            );
        }
        if tokens.total() == 0 {
            return;
        }
        let spent = s
            .shared
            .budgets
            .spend_tokens(s.who, tokens.total(), s.limits);
        let l = s.limits;
        if spent.warned {
            let said = format!(
                "limits: llm_tokens_warn_per_hour {} passed: the session used {} of its llm_tokens_per_hour {}",
                l.llm_tokens_warn(),
                spent.session,
                l.llm_tokens_per_hour
            );
            tracing::warn!("LLM tokens: {said}");
            self.note(Event::LlmTokensWarning, said);
        }
        if spent.exhausted {
            let over = spent
                .session
                .saturating_sub(l.llm_tokens_per_hour)
                .max(spent.sandbox.saturating_sub(l.sandbox_llm_tokens_per_hour));
            let said = format!(
                "limits: an answer of {} tokens ({} in, {} out) spent a token budget, {over} over: session {} of llm_tokens_per_hour {}, sandbox {} of sandbox_llm_tokens_per_hour {}; the next request to an LLM API is refused",
                tokens.total(),
                tokens.input,
                tokens.output,
                spent.session,
                l.llm_tokens_per_hour,
                spent.sandbox,
                l.sandbox_llm_tokens_per_hour
            );
            tracing::warn!("LLM tokens: {said}");
            self.note(Event::LlmTokensSpent, said);
        }
    }

    /// An audit line about the token budgets (the operator's event stream carries it).
    fn note(&self, event: Event, rule: String) {
        let s = &self.spend;
        let mut rec = Record::new(&s.shared.who, SystemTime::now(), Kind::Http, None);
        s.who.caller().stamp(&mut rec);
        rec.host = Some(s.host.clone());
        rec.event = Some(event);
        rec.rule = Some(rule);
        // A note: a line lost in an outage is counted there; nothing waits on it.
        let _ = s.shared.audit.commit(&rec);
    }
}

impl<B> Drop for TokenTap<B> {
    fn drop(&mut self) {
        self.settle();
    }
}

impl<B> Body for TokenTap<B>
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
        match &res {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(usage)) = (frame.data_ref(), self.usage.as_mut()) {
                    usage.feed(data);
                }
            }
            Poll::Ready(None) => self.settle(),
            _ => {}
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
