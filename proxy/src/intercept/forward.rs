//! A prepared request sent upstream ([`forward`]) and its response streamed back
//! ([`respond`]): scrubbed of injected secrets, decoded when it must be read, audited when it
//! ends.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use airlock_policy::reason::Reason;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Either};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::Cx;
use super::ctx::Live;
use super::request::Prepared;
use super::request_body::Tally;
use super::route::Route;
use super::upgrade::relay_upgrade;
use crate::audit::{Event, Pending};
use crate::body::{AuditOnDrop, BoxError, Counted, Cut, CutFlag};
use crate::decode::{self, Coding};
use crate::deny::{self, ProxyBody};
use crate::hop;
use crate::scan;
use crate::snapshot::Rules;
use crate::tunnel::Dir;
use crate::websocket;

/// Writes the record's `open` line, sends the request on a kept-alive or new upstream
/// connection, and answers with the response (or the relay of an upgrade).
pub(super) async fn forward(
    ctx: &Cx<'_>,
    prepared: Prepared,
    route: &Route,
    rec: Pending,
) -> Response<ProxyBody> {
    let Prepared {
        out,
        on_client_upgrade,
        meter,
        leak_flag,
        signals,
        secrets,
        injected,
    } = prepared;
    // The record reaches the log before anything of the request goes upstream.
    let Ok(mut rec) = rec.open() else {
        return deny::denial(
            Reason::AuditUnavailable,
            route.target.host.as_str(),
            route.target.port,
        );
    };
    let live = match ctx.reuse(route).await {
        Some(l) => l,
        None => match ctx.open(route).await {
            Ok(l) => l,
            Err(reason) => {
                if reason == Reason::UpstreamUnreachable {
                    ctx.upstream_answered(route, false);
                }
                return ctx.deny(rec, reason, route).await;
            }
        },
    };
    rec.upstream = Some(live.addr);
    rec.upstream_local_port = live.local_port;
    let Live {
        target,
        tls,
        mut sender,
        addr,
        local_port,
    } = live;
    rec.forwarded();
    let resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => {
            ctx.upstream_answered(route, false);
            return send_failed(ctx, &e, addr, &leak_flag, route, rec).await;
        }
    };
    rec.status = Some(resp.status().as_u16());
    ctx.upstream_answered(route, !resp.status().is_server_error());
    let (rparts, rbody) = resp.into_parts();
    if rparts.status == StatusCode::SWITCHING_PROTOCOLS {
        let Some(upgrade) = on_client_upgrade else {
            return ctx.deny(rec, Reason::MalformedRequest, route).await;
        };
        if matches!(upgrade.1, websocket::Relay::Frames(_))
            && let Err((reason, why)) = websocket::accept(&rparts.headers)
        {
            rec.rule = Some(why.into());
            return ctx.deny(rec, reason, route).await;
        }
        let registration = ctx.shared.conns.register(&route.target);
        return relay_upgrade(
            ctx,
            upgrade,
            (rparts, rbody),
            meter,
            (injected, registration),
            rec,
        );
    }
    // An answer to a credentialed request is read (decoded) to be scrubbed: one in a coding
    // the proxy cannot decode is refused, its connection not kept.
    let codings = match injected.then(|| response_codings(&rparts)).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(why) => {
            rec.rule = Some(why);
            let mut refused = ctx
                .deny(rec, Reason::ContentEncodingUnsupported, route)
                .await;
            if refused.status() == StatusCode::FORBIDDEN {
                *refused.status_mut() = StatusCode::BAD_GATEWAY;
            }
            return refused;
        }
    };
    if let Ok(mut pool) = ctx.pool.lock() {
        *pool = Some(Live {
            target,
            tls,
            sender,
            addr,
            local_port,
        });
    }
    let tally = Tally {
        meter,
        leak_flag,
        signals,
        secrets,
    };
    let answer = (rparts, rbody);
    respond(
        ctx,
        answer,
        &route.target.host,
        tally,
        injected.then_some(codings),
        rec,
    )
}

/// The codings of a response the proxy must read, or why it cannot: a coding it does not
/// decode, or a range (`206`) of an encoded representation (not decodable on its own).
fn response_codings(parts: &http::response::Parts) -> Result<Vec<Coding>, String> {
    let codings = decode::codings(&parts.headers).map_err(|u| format!("the upstream's {u}"))?;
    if !codings.is_empty() && parts.status == StatusCode::PARTIAL_CONTENT {
        return Err("the upstream sent a range (206) of an encoded representation".into());
    }
    Ok(codings)
}

/// The upstream request failed: a secret cut the streamed body (`credential-leak`), the
/// agent's body broke off (its line says `client-gone`), or the upstream failed.
async fn send_failed(
    ctx: &Cx<'_>,
    e: &hyper::Error,
    addr: SocketAddr,
    leak_flag: &OnceLock<Cut>,
    route: &Route,
    mut rec: Pending,
) -> Response<ProxyBody> {
    if let Some(cut) = leak_flag.get() {
        let reason = cut.describe(&mut rec);
        return ctx.deny(rec, reason, route).await;
    }
    if e.is_user() {
        // Our request body failed: the agent's body broke off (it hung up mid-body, or
        // its message never ended). The upstream request was cut, not completed.
        tracing::debug!("request to {addr} abandoned mid-body: {e}");
        rec.event = Some(Event::ClientGone);
        rec.emit().await;
        return deny::denial(
            Reason::MalformedRequest,
            route.target.host.as_str(),
            route.target.port,
        );
    }
    tracing::debug!("upstream {addr}: {e}");
    ctx.deny(rec, Reason::UpstreamUnreachable, route).await
}

/// The response streams back as it arrives, counted, its record written when it ends.
/// When a credential was injected (`injected`: the response's codings) it is scrubbed of
/// the real secrets, decoded first when it is encoded (it then reaches the agent decoded:
/// [`decode::mark_decoded`]); a coding that fails to decode, or expands past
/// [`decode::RESPONSE`], cuts it, the record saying why.
fn respond(
    ctx: &Cx<'_>,
    (mut rparts, rbody): (http::response::Parts, Incoming),
    route_host: &airlock_policy::host::Host,
    tally: Tally,
    injected: Option<Vec<Coding>>,
    rec: Pending,
) -> Response<ProxyBody> {
    let shared = &ctx.shared;
    let creds = &ctx.rules.credentials;
    hop::strip(&mut rparts.headers);
    let cut = CutFlag::default();
    let guard = AuditOnDrop::new(
        rec.into_record(),
        Arc::clone(&tally.meter),
        shared.audit.clone(),
    )
    .with_leak_flag(tally.leak_flag)
    .with_signals(tally.signals)
    .with_secrets(tally.secrets)
    .with_response_cut(Arc::clone(&cut));
    let counted = Counted::new(rbody, tally.meter, Dir::Down).with_audit(guard);
    let scrub = |inner| Scrubbed {
        inner,
        stream: scan::Stream::new(),
        rules: Arc::clone(&ctx.rules),
        pending: None,
        done: false,
    };
    let body = match injected {
        Some(codings) if creds.scrub_needles().is_some() => {
            creds.scrub_headers(&mut rparts.headers);
            match decode::Decoder::new(&codings, decode::RESPONSE) {
                Ok(decoder) if !codings.is_empty() => {
                    decode::mark_decoded(&mut rparts.headers);
                    scrub(Either::Left(DecodedBody {
                        inner: counted,
                        decoder,
                        cut,
                        done: false,
                    }))
                    .boxed()
                }
                _ => scrub(Either::Right(counted.map_err(BoxError::from))).boxed(),
            }
        }
        _ => counted.map_err(BoxError::from).boxed(),
    };
    // An LLM API's answer, as the agent gets it (decoded when it is decoded here), is read
    // for its token usage on the way; one in a coding not decoded here cannot be.
    let plain = rparts
        .headers
        .get(http::header::CONTENT_ENCODING)
        .is_none_or(|c| c.as_bytes().eq_ignore_ascii_case(b"identity"));
    if crate::detect::llm_host(route_host) && plain && !ctx.git_service() {
        let content_type = rparts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let spend = super::tokens::Spend {
            shared: Arc::clone(&ctx.shared),
            who: crate::limits::Client::of(ctx.caller),
            limits: ctx.rules.policy.limits,
            host: route_host.as_str().to_owned(),
        };
        let tapped = super::tokens::TokenTap::new(body, content_type, spend);
        return Response::from_parts(rparts, tapped.boxed());
    }
    Response::from_parts(rparts, body)
}

/// A response body decoded as it arrives ([`decode::RESPONSE`]); at a bomb or a coding
/// that does not decode it fails (the agent's connection is cut, never given a truncated
/// body as whole) and the flag says why.
struct DecodedBody<B> {
    inner: B,
    decoder: decode::Decoder,
    cut: CutFlag,
    done: bool,
}

impl<B> DecodedBody<B> {
    fn fail(&mut self, e: &decode::DecodeError) -> BoxError {
        let cut = match e {
            decode::DecodeError::Bomb => Cut::Unreadable(Reason::DecompressionBomb, e.to_string()),
            decode::DecodeError::Corrupt(_) => Cut::Unreadable(
                Reason::ContentEncodingUnsupported,
                format!("the upstream's {e}"),
            ),
        };
        let _ = self.cut.set(cut);
        self.done = true;
        e.to_string().into()
    }
}

impl<B> Body for DecodedBody<B>
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
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                None => {
                    this.done = true;
                    return match this.decoder.finish() {
                        Ok(rest) if rest.is_empty() => Poll::Ready(None),
                        Ok(rest) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest))))),
                        Err(e) => Poll::Ready(Some(Err(this.fail(&e)))),
                    };
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => match this.decoder.feed(&data) {
                        Ok(out) if out.is_empty() => {}
                        Ok(out) => return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out))))),
                        Err(e) => return Poll::Ready(Some(Err(this.fail(&e)))),
                    },
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// A response body with every real value overwritten (same length), released as it
/// arrives except a tail that could start a secret.
struct Scrubbed<B> {
    inner: B,
    stream: scan::Stream,
    rules: Arc<Rules>,
    pending: Option<Frame<Bytes>>,
    done: bool,
}

impl<B> Body for Scrubbed<B>
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
        let this = &mut *self;
        if let Some(f) = this.pending.take() {
            return Poll::Ready(Some(Ok(f)));
        }
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let Some(needles) = this.rules.credentials.scrub_needles() else {
                return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
            };
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    let rest = this.stream.finish();
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.stream.scrub(needles, data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(trailers) => {
                        let rest = this.stream.finish();
                        if rest.is_empty() {
                            return Poll::Ready(Some(Ok(trailers)));
                        }
                        this.pending = Some(trailers);
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && !self.stream.holding() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
