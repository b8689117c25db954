//! The admin API: the operator's channel into a running proxy (docs/design.md §10).
//!
//! HTTP/1.1 with JSON bodies on a Unix socket in the control directory, which PID 1 binds
//! (as root, in a directory the agent cannot enter) and hands to the proxy as an inherited
//! descriptor, so the socket outlives a proxy restart. The protocol is
//! `airlock_control::admin`'s: [`Request::from_http`] routes, one handler per operation
//! answers. Every connection's peer is checked first ([`peer`]); a refused one gets a 403
//! error body and a line in the proxy's log, and is counted.
//!
//! It serves: readiness (PID 1's record, which PID 1 also copies beside the proxy's state),
//! the sessions (and hears from root that a second session begins, which drops what the
//! inbox kept for the ended session that had its number), the policy revision, the counters
//! and Prometheus metrics ([`crate::metrics`]), the event stream ([`stream`], every audit
//! line as written), and the policy reload ([`crate::revision`]), after which the open
//! connections the new revision refuses are closed ([`crate::conns`]) and the inbox's items
//! it decides itself dropped, and the operator's inbox of asked hosts with its answers
//! ([`approvals`]).
//!
//! It does not decide anything about the agent's traffic, and a slow or broken admin client
//! never holds up the proxy: each connection is its own task, bodies are bounded, and the
//! event stream never makes the audit writer wait.

mod approvals;
pub mod check;
pub mod peer;
pub mod stream;

use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_control::admin::{
    EffectiveRule, ErrorBody, ErrorCode, PolicyRevision, Request, Response, Session, SessionBegun,
    SessionKind, Sessions,
};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::Shared;
use crate::events::Hub;
use crate::metrics::Metrics;
use crate::revision::{Outcome, Revisions};
use crate::shutdown::{Phase, reached};
use peer::{Operators, Peer};

/// Largest request body (a reload's policy text and its JSON escaping).
const MAX_BODY: usize = 2 * crate::revision::MAX_TEXT;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What the admin API serves from, besides the proxy's shared state.
#[derive(Debug)]
pub struct Admin {
    /// Who may connect besides root.
    pub operators: Operators,
    /// PID 1's readiness record (a copy beside the proxy's state), if there is one.
    pub status_dir: Option<PathBuf>,
    /// The lines written to the audit log.
    pub hub: Arc<Hub>,
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The policy revisions.
    pub revisions: Revisions,
    /// When this proxy started, Unix ms.
    pub started_at_ms: u64,
    /// The uid the agent's session runs as, when known.
    pub agent_uid: Option<u32>,
}

/// Serves `listener` until the proxy drains.
pub(crate) async fn serve(listener: UnixListener, shared: Arc<Shared>, admin: Arc<Admin>) {
    let mut phase = shared.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = reached(&mut phase, Phase::Draining) => return,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, Arc::clone(&shared), Arc::clone(&admin)));
            }
            Err(e) => {
                tracing::warn!("admin socket: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(stream: UnixStream, shared: Arc<Shared>, admin: Arc<Admin>) {
    // Who calls (who answers an approval: the operator's uid), as the kernel says.
    let cred = stream.peer_cred();
    let peer = cred.as_ref().map_or(
        Peer {
            uid: u32::MAX,
            pid: None,
        },
        |c| Peer {
            uid: c.uid(),
            pid: c.pid(),
        },
    );
    let refused = match cred {
        Ok(_) => admin.operators.admit(peer).err().map(|r| r.0),
        Err(e) => Some(format!("the peer's credentials cannot be read: {e}")),
    };
    if let Some(why) = &refused {
        admin.metrics.admin_refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("admin API: connection refused: {why}");
    }
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let shared = Arc::clone(&shared);
        let admin = Arc::clone(&admin);
        let refused = refused.clone();
        async move {
            let resp = match refused {
                Some(why) => error(ErrorCode::Forbidden, why),
                None => handle(req, &shared, &admin, peer).await,
            };
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(64 * 1024)
        .serve_connection(TokioIo::new(stream), svc);
    if let Err(e) = conn.await {
        tracing::debug!("admin API connection: {e}");
    }
}

/// One request's answer: read and routed, then answered.
async fn handle(
    req: hyper::Request<Incoming>,
    shared: &Shared,
    admin: &Admin,
    peer: Peer,
) -> AdminResponse {
    match read(req).await {
        Ok(request) => dispatch(request, shared, admin, peer).await,
        Err(refused) => refused,
    }
}

/// The request's body (bounded) and its route ([`Request::from_http`]), or the error to
/// answer.
async fn read(req: hyper::Request<Incoming>) -> Result<Request, AdminResponse> {
    let method = req.method().as_str().to_owned();
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Err(error(
                ErrorCode::BadRequest,
                format!("the request body cannot be read (at most {MAX_BODY} bytes): {e}"),
            ));
        }
    };
    Request::from_http(&method, &target, &body).map_err(|e| {
        tracing::info!("admin API: {method} {target}: {}", e.message);
        error(e.code, e.message)
    })
}

/// One handler per operation (`peer` admitted to the API already).
async fn dispatch(request: Request, shared: &Shared, admin: &Admin, peer: Peer) -> AdminResponse {
    let operator = peer.uid;
    let revision = || admin.revisions.current().revision;
    match request {
        Request::Status => status(admin),
        Request::Sessions => json(StatusCode::OK, &Response::Sessions(sessions(shared, admin))),
        Request::Policy => json(StatusCode::OK, &Response::Policy(policy(shared, admin))),
        Request::Counters => json(StatusCode::OK, &Response::Counters(counters(shared, admin))),
        Request::Metrics => metrics(shared, admin),
        Request::Events(q) => events(shared, admin, q),
        Request::Reload(r) => reload(shared, admin, r).await,
        Request::Check(q) => {
            reply(check::check(&shared.rules.load(), revision(), &q).map(Response::Checked))
        }
        Request::Approvals => json(
            StatusCode::OK,
            &Response::Approvals(airlock_control::admin::Approvals {
                items: approvals::list(shared),
            }),
        ),
        Request::Approval(q) => {
            reply(approvals::show(shared, &q.id, revision()).map(Response::Approval))
        }
        Request::Answer(a) => reply(
            approvals::answer(shared, &admin.revisions, &a, operator, revision())
                .await
                .map(Response::Approval),
        ),
        Request::Revoke(r) => reply(
            approvals::revoke(shared, &admin.revisions, &r.id, operator)
                .await
                .map(Response::Reloaded),
        ),
        Request::BeginSession(b) => reply(begin_session(shared, admin, peer, b.session)),
        Request::Unknown => error(ErrorCode::NotFound, "no such operation".to_owned()),
    }
}

/// An operation's outcome as its answer: `200` with the response, or the error.
fn reply(outcome: Result<Response, ErrorBody>) -> AdminResponse {
    match outcome {
        Ok(r) => json(StatusCode::OK, &r),
        Err(e) => error(e.code, e.message),
    }
}

/// The sessions of this start the proxy knows: the agent's first process (session 1,
/// from the proxy's start), then each second session begun since ([`begin_session`]), by
/// number. A session that ended is listed until its number is begun again.
fn sessions(shared: &Shared, admin: &Admin) -> Sessions {
    let session = |number: u16, kind: SessionKind, started_at_ms: u64| Session {
        id: shared.who.session.to_string(),
        kind,
        uid: admin.agent_uid,
        started_at_ms,
        number,
    };
    let mut sessions = vec![session(1, SessionKind::Agent, admin.started_at_ms)];
    sessions.extend(
        (shared.approvals.begun().into_iter())
            .map(|(k, at)| session(k, SessionKind::Exec, unix_ms(at))),
    );
    Sessions { sessions }
}

/// Second session `k` begins: root says so (the entrypoint in the container, before the
/// session's first process runs), and what the inbox kept for the ended session that had
/// the number before is dropped ([`crate::approvals::Approvals::begin`]) before the answer.
/// Anyone else is refused ([`peer::may_begin_sessions`]): the host operator has nothing to
/// begin, and an agent that could call it would shed its own denials.
fn begin_session(
    shared: &Shared,
    admin: &Admin,
    peer: Peer,
    k: u16,
) -> Result<Response, ErrorBody> {
    if let Err(refused) = peer::may_begin_sessions(peer) {
        admin.metrics.admin_refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("admin API: session {k} not begun: {refused}");
        return Err(ErrorBody {
            code: ErrorCode::Forbidden,
            message: refused.0,
        });
    }
    let at = SystemTime::now();
    let f = shared.approvals.begin(k, at);
    tracing::info!(
        "session {k} began (uid {}); of the ended session {k} before it, dropped: {} pending items, {} once/session approvals, {} session denials",
        admin
            .agent_uid
            .map_or_else(|| "unknown".to_owned(), |u| u.to_string()),
        f.pending,
        f.approvals,
        f.denials
    );
    let n = |x: usize| u64::try_from(x).unwrap_or(u64::MAX);
    Ok(Response::SessionBegun(SessionBegun {
        session: k,
        started_at_ms: unix_ms(at),
        dropped_pending: n(f.pending),
        dropped_approvals: n(f.approvals),
        dropped_denials: n(f.denials),
    }))
}

/// Prometheus text of the counters.
fn metrics(shared: &Shared, admin: &Admin) -> AdminResponse {
    let c = counters(shared, admin);
    let text = admin
        .metrics
        .prometheus(&c, admin.revisions.current().revision);
    let mut resp = hyper::Response::new(AdminBody::full(text.into_bytes()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// The event stream, fed by its own task.
fn events(shared: &Shared, admin: &Admin, q: airlock_control::admin::EventsQuery) -> AdminResponse {
    let (tx, rx) = mpsc::channel(stream::CHANNEL);
    tokio::spawn(stream::follow(
        Arc::clone(&admin.hub),
        Arc::clone(&admin.metrics),
        q,
        tx,
        shared.shutdown.subscribe(),
    ));
    let mut resp = hyper::Response::new(AdminBody::Stream(rx));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

/// A reload: swapped, then the open connections it refuses closed and the pending
/// approvals it decides dropped.
async fn reload(
    shared: &Shared,
    admin: &Admin,
    r: airlock_control::admin::ReloadRequest,
) -> AdminResponse {
    let outcome = admin
        .revisions
        .reload(&shared.rules, &shared.audit, r, |new| {
            shared.conns.refused_by(new)
        })
        .await;
    match outcome {
        Ok(Outcome::Unchanged(r)) => json(StatusCode::OK, &Response::Reloaded(r)),
        Ok(Outcome::Loaded(r)) => {
            let closed = settle(shared);
            tracing::info!(
                "policy revision {} ({}) loaded; {closed} open connections it refuses closed",
                r.revision,
                r.hash
            );
            json(StatusCode::OK, &Response::Reloaded(r))
        }
        Err(e) => {
            tracing::warn!("policy reload refused: {}", e.message);
            error(e.code, e.message)
        }
    }
}

/// After a new revision is in force: the open connections it refuses closed, the pending
/// approvals it decides dropped; the number closed.
fn settle(shared: &Shared) -> u64 {
    let closed = shared.conns.close_refused();
    let rules = shared.rules.load();
    let dropped = shared
        .approvals
        .drop_covered(|host, port, rule| decides(&rules.policy, host, port, rule));
    if dropped > 0 {
        tracing::info!("{dropped} pending approvals dropped: the policy decides them now");
    }
    closed
}

/// Whether `policy` decides `host:port` itself (allows or refuses it) rather than asking the
/// operator, or, for an item an ask rule filed, no longer has that rule: a pending item for
/// it is then moot.
fn decides(policy: &airlock_policy::Policy, host: &str, port: u16, rule: Option<&str>) -> bool {
    let Ok(host) = airlock_policy::host::Host::parse(host) else {
        return true;
    };
    if let Some(label) = rule {
        return !policy.l7.asks(&host, label);
    }
    let target = crate::decide::Target { host, port };
    let a = crate::admission::policy(policy, &target, crate::admission::Port::Exact);
    a.outcome != crate::admission::Outcome::Ask
}

/// The revision in force with its effective rules, read from the rules snapshot between
/// two reads of the revision that agree (a reload finished between them is read again;
/// one caught mid-swap, rules swapped and revision not yet, can still pair them).
fn policy(shared: &Shared, admin: &Admin) -> PolicyRevision {
    let mut current = admin.revisions.current();
    for _ in 0..3 {
        let rules = shared.rules.load();
        let again = admin.revisions.current();
        if again.revision == current.revision {
            current.rules = rules
                .policy
                .listing()
                .into_iter()
                .map(|l| EffectiveRule {
                    list: l.list.to_owned(),
                    rule: l.rule,
                    origin: l.origin.to_string(),
                })
                .collect();
            break;
        }
        current = again;
    }
    current
}

fn counters(shared: &Shared, admin: &Admin) -> airlock_control::admin::Counters {
    let open = shared.slots.in_use() + shared.service_slots.in_use();
    let mut c = admin.metrics.counters(
        u64::try_from(open).unwrap_or(u64::MAX),
        shared.audit.available(),
    );
    c.open_circuits = shared.breakers.open();
    let limits = shared.rules.load().policy.limits;
    c.budgets = (shared.budgets.usage(limits))
        .into_iter()
        .map(|u| airlock_control::admin::BudgetUse {
            budget: u.knob.to_owned(),
            scope: u.scope,
            used: u.spent,
            limit: u.limit,
            resets_at_ms: u
                .resets_at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        })
        .collect();
    c
}

fn status(admin: &Admin) -> AdminResponse {
    let Some(dir) = &admin.status_dir else {
        return error(
            ErrorCode::Unavailable,
            "this proxy was started without a readiness record".to_owned(),
        );
    };
    match airlock_control::status::read(dir) {
        Ok(Some(s)) => json(StatusCode::OK, &Response::Status(s)),
        Ok(None) => error(
            ErrorCode::Unavailable,
            "no readiness record yet: the start is still under way".to_owned(),
        ),
        Err(e) => error(
            ErrorCode::Internal,
            format!("the readiness record cannot be read: {e}"),
        ),
    }
}

/// Unix milliseconds now.
#[must_use]
pub fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// `t` in Unix milliseconds.
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

type AdminResponse = hyper::Response<AdminBody>;

fn json(status: StatusCode, value: &Response) -> AdminResponse {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut resp = hyper::Response::new(AdminBody::full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(code: ErrorCode, message: String) -> AdminResponse {
    let status = StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    json(status, &Response::Error(ErrorBody { code, message }))
}

/// A whole body, or the event stream's chunks as they come.
#[derive(Debug)]
pub enum AdminBody {
    /// The whole body (taken by the first poll).
    Full(Option<Bytes>),
    /// Chunks from the stream's task; the end of the channel is the end of the body.
    Stream(mpsc::Receiver<Bytes>),
}

impl AdminBody {
    fn full(b: Vec<u8>) -> Self {
        Self::Full(Some(Bytes::from(b)))
    }
}

impl Body for AdminBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            AdminBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            AdminBody::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, AdminBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AdminBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            AdminBody::Full(None) => SizeHint::with_exact(0),
            AdminBody::Stream(_) => SizeHint::default(),
        }
    }
}
