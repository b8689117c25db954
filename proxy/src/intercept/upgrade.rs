//! Upgrades: which `Upgrade` request may be relayed ([`upgrade_verdict`]), and the relay of
//! a `101`, frame by frame or as raw bytes ([`relay_upgrade`]).

use std::sync::Arc;

use airlock_policy::reason::Reason;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::Cx;
use crate::audit::Pending;
use crate::body::AuditOnDrop;
use crate::deny::{self, ProxyBody};
use crate::hop;
use crate::tunnel::{self, Meter};
use crate::websocket;

pub(super) fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Whether an upgrade request (see [`is_upgrade`]) may be relayed, and how: a `GET` whose
/// one `Upgrade` header is exactly `websocket`, to a host listed in `network.websocket`
/// (`frames`: the relay reads every frame) or to a host where nothing would be lost after
/// the `101` (writable, no credential bound, no L7 rule, not the git service port: raw).
/// Every other upgrade (`h2c`, `TLS/1.2`, a list of tokens) is refused: a `101` turns the
/// connection into a relay that no rule reads.
pub(super) fn upgrade_verdict(
    req: &Request<Incoming>,
    frames: impl FnOnce() -> Option<websocket::Session>,
    blind_spot: impl FnOnce() -> bool,
) -> Result<websocket::Relay, Reason> {
    let mut values = req.headers().get_all(header::UPGRADE).iter();
    let websocket = values
        .next()
        .is_some_and(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"websocket"))
        && values.next().is_none();
    if req.method() != http::Method::GET || !websocket {
        return Err(Reason::UpgradeNotSupported);
    }
    if let Some(session) = frames() {
        return Ok(websocket::Relay::Frames(session));
    }
    if blind_spot() {
        return Err(Reason::UpgradeDenied);
    }
    Ok(websocket::Relay::Raw)
}

/// A `101`: both sides are relayed from now on, frame by frame (`websocket`) or as raw
/// bytes (the record is written when the relay ends); the agent gets the `101` with its
/// upgrade headers.
///
/// The relay is `registration`'s (`conns`): a policy reload that refuses the host ends it.
pub(super) fn relay_upgrade(
    ctx: &Cx<'_>,
    (client_up, relay): (hyper::upgrade::OnUpgrade, websocket::Relay),
    (mut rparts, rbody): (http::response::Parts, Incoming),
    meter: Arc<Meter>,
    (injected, mut registration): (bool, crate::conns::Registration),
    rec: Pending,
) -> Response<ProxyBody> {
    let shared = &ctx.shared;
    let server_up = hyper::upgrade::on(Response::from_parts(rparts.clone(), rbody));
    let record = rec.into_record();
    let audit = shared.audit.clone();
    let idle = shared.limits.idle_timeout;
    let phase = shared.shutdown.subscribe();
    let slot = Arc::clone(&ctx.slot);
    tokio::spawn(async move {
        let _slot = slot;
        let relayed = async move {
            let session = match relay {
                websocket::Relay::Frames(session) => session,
                websocket::Relay::Raw => {
                    // The line is written when the relay ends.
                    let _guard = AuditOnDrop::new(record, Arc::clone(&meter), audit);
                    if let (Ok(c), Ok(s)) = tokio::join!(client_up, server_up) {
                        let s = TokioIo::new(s);
                        // Plain HTTP: the client's bare socket, so the relay can splice.
                        let _ = match crate::gate::upgraded_tcp(c)
                            .map(crate::gate::Prefixed::into_bare)
                        {
                            Ok(Ok(tcp)) => tunnel::relay(tcp, s, meter, idle, phase).await,
                            Ok(Err(pre)) => tunnel::relay(pre, s, meter, idle, phase).await,
                            Err(c) => tunnel::relay(TokioIo::new(c), s, meter, idle, phase).await,
                        };
                    }
                    return;
                }
            };
            let guard = websocket::Guard::new(record, Arc::clone(&meter), audit);
            if let (Ok(c), Ok(s)) = tokio::join!(client_up, server_up) {
                let (c, s) = (TokioIo::new(c), TokioIo::new(s));
                let summary = websocket::relay(c, s, session, meter, idle, phase).await;
                guard.finish(&summary);
            }
        };
        tokio::select! {
            () = relayed => {}
            () = registration.revoked() => {}
        }
    });
    let upgrade = rparts.headers.get(header::UPGRADE).cloned();
    hop::strip(&mut rparts.headers);
    if injected {
        ctx.rules.credentials.scrub_headers(&mut rparts.headers);
    }
    if let Some(u) = upgrade {
        rparts.headers.insert(header::UPGRADE, u);
        rparts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    Response::from_parts(rparts, deny::full(Bytes::new()))
}
