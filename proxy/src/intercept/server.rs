//! The connection server: an intercepted (or service-port) connection's HTTP/1.1 requests
//! served one by one through [`exchange`](super::exchange), and how the connection ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use airlock_policy::reason::Reason;
use http::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::ctx::Ctx;
use super::exchange;
use super::route::Route;
use crate::audit::{Event, Verdict};
use crate::decide::Target;
use crate::deny;
use crate::gate::{Gate, GateShared};
use crate::shutdown::{Phase, reached};
use crate::tunnel;

/// Serves HTTP/1.1 requests on an intercepted (or service-port) connection, every request
/// head judged by the gate first (`gate`).
pub(crate) async fn serve_http<IO>(io: IO, ctx: Arc<Ctx>, route: Route) -> tunnel::End
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::clone(&ctx.shared);
    let target = route.target.clone();
    let gate = Arc::new(GateShared::new());
    let io = TokioIo::new(Gate::new(
        io,
        shared.limits.max_header_bytes,
        Arc::clone(&gate),
    ));
    let svc_ctx = Arc::clone(&ctx);
    let route = Arc::new(route);
    let heads = Arc::clone(&gate);
    let svc = service_fn(move |req: Request<Incoming>| {
        let ctx = Arc::clone(&svc_ctx);
        let route = Arc::clone(&route);
        let gate = Arc::clone(&gate);
        async move {
            let mut req = req;
            req.extensions_mut().insert(gate.next_message());
            if let Some(reason) = gate.refusal_for(&req) {
                parse_error(&ctx, &route.target, reason, Event::ParseError).await;
                let denial = deny::denial(reason, route.target.host.as_str(), route.target.port);
                return Ok(crate::gate::closing(denial));
            }
            ctx.requests.fetch_add(1, Ordering::Relaxed);
            let upgrade =
                crate::gate::wants_upgrade(&req).then(|| req.method() == http::Method::CONNECT);
            let mut rec = ctx.record(req.method());
            rec.decision = Verdict::Allow;
            let resp = exchange(&ctx, ctx.shared.rules.load(), req, &route, rec).await;
            if let Some(connect) = upgrade {
                gate.upgrade_decided(crate::gate::upgrades(connect, resp.status()));
            }
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = crate::gate::http1_server(&shared.head_timer, &shared.limits)
        .serve_connection(io, svc)
        .with_upgrades();
    tokio::pin!(conn);
    let mut phase = shared.shutdown.subscribe();
    // A policy reload that refuses this host closes the connection (`conns`).
    let mut registration = shared.conns.register(&target);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = registration.revoked() => return tunnel::End::Revoked,
        () = reached(&mut phase, Phase::Draining) => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                () = reached(&mut phase, Phase::Stopping) => {
                    tokio::time::timeout(Duration::from_millis(200), conn.as_mut())
                        .await
                        .unwrap_or(Ok(()))
                }
            }
        }
    };
    match result {
        Ok(()) => tunnel::End::Closed,
        Err(e) => {
            let reason = if e.is_parse_too_large() {
                Some(Reason::RequestTooLarge)
            } else if e.is_parse() {
                Some(Reason::MalformedRequest)
            } else {
                None
            };
            if let Some(reason) = reason {
                parse_error(&ctx, &target, reason, Event::ParseError).await;
            } else if e.is_timeout() && heads.head_unfinished() {
                // A head begun and never finished: slowloris, not an idle connection.
                parse_error(
                    &ctx,
                    &target,
                    Reason::MalformedRequest,
                    Event::HeaderTimeout,
                )
                .await;
            }
            if e.is_timeout() {
                tunnel::End::Idle
            } else {
                tunnel::End::Error
            }
        }
    }
}

/// The connection's one `parse-error` line (a request head refused before any request),
/// or its `header-timeout` line (a head that never finished).
async fn parse_error(ctx: &Ctx, target: &Target, reason: Reason, event: Event) {
    let mut rec = ctx.record(&http::Method::GET);
    rec.method = None;
    rec.host = Some(target.host.as_str().to_owned());
    rec.port = Some(target.port);
    rec.intercepted = true;
    rec.reason = Some(reason);
    rec.event = Some(event);
    let _ = rec.commit();
}
