//! Requests the proxy reads: intercepted TLS (the agent's TLS terminated with a leaf of the
//! appliance CA), base-URL mode, the git service port, and plain HTTP forwarding all go
//! through `exchange`, one request at a time:
//!
//! 1. `Host` (and an absolute-form target) must name the connection's checked target (no
//!    fronting inside an intercepted connection);
//! 2. git: on the service port only smart-HTTP requests of authorized repositories pass,
//!    each with the git API's ticket, and a push only with the ref updates the ticket signed
//!    and the git rules allow (`service`, read before anything is sent); on the agent's
//!    ports anything that looks like `git-receive-pack` is `git-push-blocked`;
//! 3. the policy's L7 rules (`judge`, and `judge_body` on the buffered body when asked);
//! 4. credentials (`credentials` module): the URL and headers searched for secrets, the
//!    bound header replaced; a body of a request that received no credential is searched
//!    too (a body announced as at most [`SMALL_BODY`] bytes is read and searched before
//!    anything is sent, so a leak in it never crosses the wire; a bigger or chunked body is
//!    searched as it streams, and at a secret the upstream request is cut before the secret
//!    is sent, answered `403 credential-leak` when the response has not started yet);
//! 5. forwarded on an upstream connection kept alive for this client connection and, once
//!    it ends, for the next one to the same target (`pool`),
//!    opened to the already-checked address; for TLS verified against webpki roots plus
//!    `--upstream-ca` (`upstream-certificate-invalid` → `502`, the request is never sent);
//! 6. the response streams back as it arrives (SSE, chunked); when a credential was
//!    injected its real value is scrubbed from headers and body. An upgrade is forwarded
//!    only for a `GET` with exactly `Upgrade: websocket` (its `Sec-WebSocket-Extensions`
//!    removed): to a host listed in `network.websocket` the `101` becomes a relay that reads
//!    every frame (`websocket`: the agent's payloads searched for secrets, the upstream's
//!    scrubbed); to a writable host with no credential and no L7 rule, a relay of raw bytes,
//!    unread; anywhere else it is refused (`upgrade-denied`).
//!
//! Every request is one audit line (with `intercepted`, `credential`, `status`), written
//! when its response is over.

// A request's way through these modules, top to bottom.

// The agent's TLS accepted with a leaf of the appliance CA; the upstream TLS client.
mod tls;

// The connection's requests served one by one, and how the connection ends.
mod server;

// Where a request goes, and what its `Host` must say.
mod route;

// The connection's context and its upstream connection, kept alive, then pooled.
mod ctx;

// Each request through `exchange` (below): every check on it, in order.
mod request;

// Its git steps: the git credential's scope, the service port's ticket and push commands,
// a fetch through a read-only host.
mod git;

// Its body as it will be sent: judged, read whole and searched, or streamed and searched
// as it goes (`streamed`).
mod request_body;
mod streamed;

// Sent upstream, and the response streamed back (an LLM API's read for its tokens).
mod forward;
mod tokens;

// Or its upgrade relayed.
mod upgrade;

pub(crate) use ctx::{Ctx, Live, pooled};
pub(crate) use route::{Leg, Route};
pub(crate) use tls::serve_tls;
pub use tls::{Interception, InterceptionError};

use std::sync::Arc;

use airlock_policy::reason::Reason;
use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;

use crate::audit::Pending;
use crate::body::{BoxError, Framed, Held};
use crate::deny::{self, ProxyBody};
use crate::finding::{Denial, Finding, Findings};
use crate::gitpath::{self, Service};
use crate::service;
use crate::snapshot::Rules;
use forward::forward;
use request::prepare;

/// A body announced (content-length) as at most this many bytes is read whole and
/// searched before anything is sent upstream.
pub const SMALL_BODY: usize = 64 * 1024;

/// A body announced as at most this many bytes to an LLM API host is read whole, so that a
/// secret in it can be redacted before anything is sent.
pub const LLM_BODY: usize = 16 * 1024 * 1024;

/// Body type of requests sent upstream.
pub(crate) type UpBody = BoxBody<Bytes, BoxError>;

/// An agent's (or the git API's) request body as it is judged: ending cleanly only where
/// its message did, with what was read of it to judge it put back in front.
type InBody = Held<Framed<Incoming>>;

/// One request, end to end (see the module docs). `rec` carries what the caller already
/// decided (policy verdict and rule of the host). Every check is a step of [`prepare`]
/// returning what it found and the request as it will be sent, or the one refusal; what
/// was found is written on the record here, in one place, and [`forward`] then sends it.
pub(crate) async fn exchange(
    ctx: &Ctx,
    rules: Arc<Rules>,
    req: Request<Incoming>,
    route: &Route,
    mut rec: Pending,
) -> Response<ProxyBody> {
    // One snapshot of the rules for the whole request, its response included.
    let ctx = &Cx { ctx, rules };
    // Shared bytes: what a refusal worded for this request reads.
    let uri = req.uri().clone();
    request::describe(&mut rec, &req, route);
    let mut found = Findings::default();
    let prepared = prepare(ctx, req, route, &mut found).await;
    found.apply(&mut rec);
    match prepared {
        Ok(prepared) => forward(ctx, prepared, route, rec).await,
        Err(Refuse::Denied(denial)) => match denial.apply(&mut rec) {
            Reason::CredentialMissing => missing_credential(ctx, rec, route, &uri),
            reason => ctx.deny(rec, reason, route).await,
        },
        Err(Refuse::Git(refusal)) => {
            Finding::Rule(refusal.rule.clone()).apply(&mut rec);
            let (host, port) = (route.target.host.as_str(), route.target.port);
            deny::audited_with(rec, refusal.reason, host, port, || refusal.answer())
        }
    }
}

/// Why a request is not sent: a check's denial (answered as JSON, or as git prints it
/// where the request is git's), or a git service port refusal with its own answer.
enum Refuse {
    Denied(Denial),
    Git(service::Refusal),
}

impl From<Denial> for Refuse {
    fn from(denial: Denial) -> Self {
        Refuse::Denied(denial)
    }
}

impl From<Reason> for Refuse {
    fn from(reason: Reason) -> Self {
        Refuse::Denied(reason.into())
    }
}

/// One request: its connection's context and the rules it is decided under (one
/// [`crate::snapshot::Snapshot::load`], taken when the request arrived).
struct Cx<'a> {
    ctx: &'a Ctx,
    rules: Arc<Rules>,
}

impl Cx<'_> {
    /// Tells the upstream's circuit ([`crate::breaker`]) how a request to it went: `ok` is
    /// an answer below `500`. The git service port's upstream is not judged there.
    fn upstream_answered(&self, route: &Route, ok: bool) {
        if !self.git_service() {
            let (limits, now) = (self.rules.policy.limits, std::time::Instant::now());
            self.shared.breakers.report(&route.target, ok, limits, now);
        }
    }
}

impl std::ops::Deref for Cx<'_> {
    type Target = Ctx;

    fn deref(&self) -> &Ctx {
        self.ctx
    }
}

/// The refusal of a request whose credential was not configured (`rec.credential` names
/// it, or the alternatives none of which was): the JSON denial with the credentials and the
/// operator's fixes as its message, or for a git push the `ERR` packet git shows the agent.
fn missing_credential(ctx: &Cx<'_>, rec: Pending, route: &Route, uri: &Uri) -> Response<ProxyBody> {
    let creds = &ctx.rules.credentials;
    let names = rec.credential.clone().unwrap_or_default();
    let missing = creds.missing_named(&names);
    let quoted: Vec<String> = missing.iter().map(|m| format!("{:?}", m.name)).collect();
    let fixes: Vec<&str> = missing.iter().map(|m| m.fix).collect();
    let (which, one) = match quoted.as_slice() {
        [only] => (format!("credential {only}"), "it"),
        _ => (format!("credentials {}", quoted.join(" or ")), "one"),
    };
    let fix = fixes.join("; or ");
    let (host, port) = (route.target.host.as_str(), route.target.port);
    let git = gitpath::parse(uri.path(), uri.query()).filter(|_| missing.iter().any(|m| m.git));
    let reason = Reason::CredentialMissing;
    deny::audited_with(rec, reason, host, port, || match git {
        Some(g) => {
            let (service, what) = match g.service {
                Service::ReceivePack => ("git-receive-pack", "git push"),
                Service::UploadPack => ("git-upload-pack", "this git fetch"),
            };
            let message = format!(
                "airlock: {reason}: {what} to {host} needs the git token ({which}), which was not configured when this sandbox started; to provide {one}, {fix}"
            );
            deny::git_refusal(reason, service, &message)
        }
        None => {
            let message = format!(
                "The {which} that requests to {host} need was not configured when this sandbox started, so nothing was sent; to provide {one}, {fix}"
            );
            deny::denial_with(reason, host, port, Some(&names), &message)
        }
    })
}
