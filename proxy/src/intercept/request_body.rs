//! A request body as it will be sent ([`prepare_body`]): judged, read whole and searched
//! before anything is sent, or searched as it streams ([`super::streamed`]).

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::Host;
use airlock_policy::reason::Reason;
use airlock_policy::signals::SignalAction;
use bytes::Bytes;
use http::header;
use http_body_util::{BodyExt, Full};
use hyper::body::Body;

use super::request::{secrets_found, settled};
use super::streamed::{
    BudgetCheck, CheckedBody, DecodeCheck, NeedleScan, SecretScan, SignalCheck, Which,
};
use super::{Cx, InBody, LLM_BODY, SMALL_BODY, UpBody};
use crate::body::{BoxError, Counted, Cut, CutFlag, SignalNote};
use crate::credentials::Injected;
use crate::decode::{self, Coding};
use crate::detect;
use crate::finding::{Denial, Finding, Findings};
use crate::recent::Channel;
use crate::scan;
use crate::signal;
use crate::signal::SignalPolicy as _;
use crate::tunnel::{Dir, Meter};
use airlock_policy::RequestView;

/// What a request body's journey is measured and flagged with.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) meter: Arc<Meter>,
    pub(super) leak_flag: CutFlag,
    pub(super) signals: SignalNote,
    /// Secrets a streamed body let through (redacted, logged).
    pub(super) secrets: detect::Note,
}

/// The body as it will be sent: judged (read up to the rule's cap), searched before
/// anything is sent (small and announced), searched as it streams, or streamed untouched.
/// A body in a `Content-Encoding` is searched decoded (bounded: [`decode::REQUEST`]); read
/// whole it goes as sent unless a redaction rewrote it, streamed it goes upstream decoded
/// (what was searched is what is sent); an encoding the proxy cannot read is refused. On a request that received a credential, `Accept-Encoding` is cut to
/// the codings the proxy reads, so that the response can be decoded and scrubbed. A body
/// judged under an ask rule passes that rule only when the operator answered it on the
/// head (`asked`).
#[allow(clippy::too_many_arguments)] // the request's parts, each used once
pub(super) async fn prepare_body(
    ctx: &Cx<'_>,
    body: InBody,
    headers: &mut http::HeaderMap,
    body_cap: Option<usize>,
    view: &RequestView<'_>,
    injected: Option<&Injected>,
    tally: &Tally,
    asked: Option<&str>,
    found: &mut Findings,
) -> Result<UpBody, Denial> {
    let shared = &ctx.shared;
    let creds = &ctx.rules.credentials;
    if injected.is_some() {
        decode::restrict_accept_encoding(headers);
    }
    // The body is searched for every secret but the ones injected into this request.
    let body_needles = creds.body_needles(injected);
    let scan_body = body_needles.is_some();
    let announced = body.size_hint().exact();
    if body.is_end_stream() {
        return Ok(Full::new(Bytes::new()).map_err(|n| match n {}).boxed());
    }
    let codings = match decode::codings(headers) {
        Ok(c) => c,
        Err(unsupported) => {
            let reason = Reason::ContentEncodingUnsupported;
            return Err(Denial::by_rule(reason, unsupported.to_string()));
        }
    };
    let host = view.host;
    if let Some(cap) = body_cap {
        let (bytes, passed) = judged_body(ctx, body, headers, cap, view, asked).await?;
        found.add(passed);
        if scan_body && let Some(tag) = creds.leak_needles().and_then(|n| n.find(&bytes)) {
            let leaked = creds.name_of(tag).to_owned();
            return Err(Denial::of_credential(Reason::CredentialLeak, leaked));
        }
        let bytes = check_body_secrets(ctx, host, bytes, found)?;
        check_signals(ctx, host, &bytes, found)?;
        spend(&tally.meter, bytes.len())?;
        return Ok(Full::new(bytes).map_err(|n| match n {}).boxed());
    }
    // A small announced body is read and searched before anything is sent: for the
    // credentials' needles and for secrets of known formats. To an LLM API host, where a
    // found secret is redacted rather than refused, a body up to `LLM_BODY` is read whole
    // (agents send whole files as context).
    let whole = if detect::llm_host(host) {
        LLM_BODY
    } else {
        SMALL_BODY
    };
    if announced.is_some_and(|n| n <= whole as u64) {
        let cap = usize::try_from(announced.unwrap_or(0)).unwrap_or(whole);
        let sent = read_capped(body, cap, shared.limits.idle_timeout).await?;
        let decoded = decoded_whole(&codings, sent.clone())?;
        if let Some(tag) = body_needles.and_then(|n| n.find(&decoded)) {
            let leaked = creds.name_of(tag).to_owned();
            return Err(Denial::of_credential(Reason::CredentialLeak, leaked));
        }
        let checked = check_body_secrets(ctx, host, decoded.clone(), found)?;
        check_signals(ctx, host, &checked, found)?;
        // Nothing rewritten: the body goes as the agent sent it (encoded or not); a
        // redaction goes decoded, its headers saying so.
        let bytes = if checked.as_ptr() == decoded.as_ptr() {
            sent
        } else {
            decode::mark_decoded(headers);
            checked
        };
        spend(&tally.meter, bytes.len())?;
        return Ok(Full::new(bytes).map_err(|n| match n {}).boxed());
    }
    // Streamed: decoded as it comes (when encoded), secrets of known formats checked (or,
    // to an LLM API host, redacted) as it goes, holding back enough to see a secret whole
    // before any of it is sent, and searched joined to the end of the last body sent to
    // the same host.
    let recent = Arc::clone(shared.interception.recent());
    let secrets = SecretScan {
        before: recent.tail(host.as_str(), Channel::Body),
        sent: 0,
        recent,
        rules: Arc::clone(&ctx.rules),
        host: host.clone(),
        note: tally.secrets.clone(),
        held: Vec::new(),
    };
    let counted = Counted::new(body, Arc::clone(&tally.meter), Dir::Up);
    let budget = BudgetCheck {
        meter: Arc::clone(&tally.meter),
    };
    let counted = CheckedBody::new(counted, budget, &tally.leak_flag);
    if !codings.is_empty() {
        decode::mark_decoded(headers);
    }
    let decoded = DecodeCheck::around(&codings, counted, tally)?;
    let counted = SignalCheck::around(ctx, host, decoded, tally);
    let checked = CheckedBody::new(counted, secrets, &tally.leak_flag);
    if scan_body {
        let which = match injected {
            Some(Injected { only: Some(i), .. }) => Which::Except(*i),
            _ => Which::All,
        };
        let needles = NeedleScan {
            which,
            stream: scan::Stream::new(),
            rules: Arc::clone(&ctx.rules),
        };
        return Ok(CheckedBody::new(checked, needles, &tally.leak_flag).boxed());
    }
    Ok(checked.boxed())
}

/// A body read whole: a foreign secret in it is refused, or on an LLM API host (where file
/// contents legitimately go) or by its detector's `redact` action overwritten in place
/// (same length) and the request goes on; one whose action is `log` goes on as it is
/// ([`detect::Detectors::judge_body`]). What went on is found.
fn check_body_secrets(
    ctx: &Cx<'_>,
    host: &Host,
    bytes: Bytes,
    found: &mut Findings,
) -> Result<Bytes, Denial> {
    let recent = ctx.shared.interception.recent();
    let before = recent.tail(host.as_str(), Channel::Body);
    let (bytes, v) = ctx.rules.detectors.judge_whole_after(&before, bytes, host);
    found.add(secrets_found(&v)?);
    recent.push(host.as_str(), Channel::Body, &bytes);
    Ok(bytes)
}

/// Whether a request body to `host` is measured for signals ([`crate::signal`]): not on
/// an LLM API host (agents send files there as context), not a git push on the service
/// port (a pack is compressed by design), and only when the policy measures any.
pub(super) fn measures_signals(ctx: &Cx<'_>, host: &Host) -> bool {
    !ctx.git_service() && !detect::llm_host(host) && ctx.rules.policy.signals.any()
}

/// A body read whole: its signals are found; one the policy denies refuses the request
/// (in report mode: `report` with the reason, and it goes on).
fn check_signals(
    ctx: &Cx<'_>,
    host: &Host,
    bytes: &[u8],
    found: &mut Findings,
) -> Result<(), Denial> {
    if !measures_signals(ctx, host) {
        return Ok(());
    }
    let knobs = ctx.rules.policy.signals;
    let signals = signal::of(knobs, bytes);
    let denied = signals
        .iter()
        .find(|s| s.action(&knobs) == SignalAction::Deny)
        .copied();
    found.add([Finding::Signals(signals)]);
    let Some(denied) = denied else {
        return Ok(());
    };
    let rule = denied.describe();
    if matches!(ctx.rules.policy.sandbox.mode, airlock_policy::Mode::Report) {
        let reason = denied.reason();
        found.add([Finding::Reported { reason, rule }]);
        return Ok(());
    }
    Err(Denial::by_rule(denied.reason(), rule))
}

/// A body read whole, decoded as its codings say (empty: as it is), at most [`LLM_BODY`]
/// decoded bytes ([`decode::REQUEST`]'s ratio within it).
fn decoded_whole(codings: &[Coding], bytes: Bytes) -> Result<Bytes, Denial> {
    if codings.is_empty() {
        return Ok(bytes);
    }
    let bounds = decode::Bounds {
        total: LLM_BODY as u64,
        ..decode::REQUEST
    };
    match decode::decode_all(codings, &bytes, bounds) {
        Ok(decoded) => Ok(Bytes::from(decoded)),
        Err(e) => Err(unreadable(&e).denial()),
    }
}

/// A body that did not decode, as the refusal it is.
pub(super) fn unreadable(e: &decode::DecodeError) -> Cut {
    let reason = match e {
        decode::DecodeError::Bomb => Reason::DecompressionBomb,
        decode::DecodeError::Corrupt(_) => Reason::MalformedRequest,
    };
    Cut::Unreadable(reason, e.to_string())
}

/// A body a rule judges: not content-encoded, read whole up to `cap`, then judged (an ask
/// passes only for the rule the operator answered on the head, `asked`). Returns the body
/// and the rule that let it through, if one had to.
async fn judged_body(
    ctx: &Cx<'_>,
    body: InBody,
    headers: &http::HeaderMap,
    cap: usize,
    view: &RequestView<'_>,
    asked: Option<&str>,
) -> Result<(Bytes, Option<Finding>), Denial> {
    if headers.contains_key(header::CONTENT_ENCODING) {
        let rule = "a judged body must not be content-encoded";
        return Err(Denial::by_rule(Reason::RequestDeniedByRule, rule));
    }
    let bytes = read_capped(body, cap, ctx.shared.limits.idle_timeout)
        .await
        .map_err(|reason| Denial::by_rule(reason, format!("body judged up to {cap} bytes")))?;
    let passed = settled(ctx.rules.policy.judge_body(view, &bytes), asked)?;
    Ok((bytes, passed))
}

/// Reads at most `cap` bytes of `body`, with `idle` as the deadline for the whole body.
pub(super) async fn read_capped<B>(body: B, cap: usize, idle: Duration) -> Result<Bytes, Reason>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let limited = http_body_util::Limited::new(body, cap);
    match tokio::time::timeout(idle, limited.collect()).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(Reason::RequestDeniedByRule)
        }
        Ok(Err(_)) | Err(_) => Err(Reason::MalformedRequest),
    }
}

/// Counts a body read whole before it is sent: one that spends an upload budget is not sent
/// (`budget-exhausted`, the refusal naming the budgets).
fn spend(meter: &crate::tunnel::Meter, n: usize) -> Result<(), Denial> {
    if meter.would_spend(n) {
        let budgets = meter.budget().map(Finding::Rule);
        return Err(Denial::naming(Reason::BudgetExhausted, budgets));
    }
    meter.add_up(n);
    Ok(())
}
