//! The explicit HTTP proxy (`HTTP(S)_PROXY`): `CONNECT` tunnels, absolute-form plain HTTP,
//! and the health endpoint. Every decision is audited exactly once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use airlock_channels::{BASE_URL_PREFIX, HEALTH_PATH};
use airlock_policy::reason::Reason;
use http::header;
use http::{Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::Shared;
use crate::audit::{Event, Kind, Pending, Record, Verdict};
use crate::connection::{self, Ended, Granted};
use crate::decide::{self, Target};
use crate::deny::{self, ProxyBody};
use crate::gate::{self, Gate, GateShared};
use crate::identity::Caller;
use crate::identity::Proto;
use crate::intercept::{self, Ctx, Leg, Route};
use crate::limits::{Client, Slot};
use crate::pool;
use crate::shutdown::{Phase, accept_until_draining, reached};
use crate::snapshot::Rules;
use crate::sniff::{self, Sniff};
use crate::tunnel::{self, Dir, Meter, Metered};

/// The two ports that speak the explicit-proxy protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// The agent's HTTP proxy.
    Explicit,
    /// The git service port: CONNECT only, always intercepted, git smart-HTTP of authorized
    /// repositories only.
    GitService,
}

impl Port {
    /// The listener's name in the proxy's own messages.
    fn name(self) -> &'static str {
        match self {
            Port::Explicit => "explicit",
            Port::GitService => "git-service",
        }
    }

    /// How its connections are served.
    fn mode(self) -> Mode {
        match self {
            Port::Explicit => Mode::Explicit,
            Port::GitService => Mode::Service,
        }
    }

    /// Its connections' audit kind.
    fn kind(self) -> Kind {
        match self {
            Port::Explicit => Kind::Http,
            Port::GitService => Kind::GitService,
        }
    }
}

/// Accepts on `listener` until draining starts; each port has its own connection slots.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, port: Port) {
    let mut phase = shared.shutdown.subscribe();
    while let Some((stream, peer)) = accept_until_draining(&listener, &mut phase, port.name()).await
    {
        let caller = shared.caller(Proto::Tcp, peer, stream.local_addr().ok());
        let slots = match port {
            Port::Explicit => &shared.slots,
            Port::GitService => &shared.service_slots,
        };
        match slots.try_take(Client::of(caller)) {
            Ok(slot) => {
                tokio::spawn(serve_conn(
                    stream,
                    peer,
                    caller,
                    Arc::clone(&shared),
                    Arc::new(slot),
                    port.mode(),
                ));
            }
            Err(reason) => {
                let kind = port.kind();
                tokio::spawn(refuse(
                    stream,
                    peer,
                    caller,
                    Arc::clone(&shared),
                    kind,
                    reason,
                ));
            }
        }
    }
}

/// Answers a connection we have no slot for, without reading it, and audits that.
async fn refuse(
    mut stream: TcpStream,
    peer: SocketAddr,
    caller: Caller,
    shared: Arc<Shared>,
    kind: Kind,
    reason: Reason,
) {
    let mut rec = Record::new(&shared.who, SystemTime::now(), kind, Some(peer));
    caller.stamp(&mut rec);
    rec.reason = Some(reason);
    let reason = match shared.audit.commit(&rec) {
        Ok(()) => reason,
        Err(crate::audit::Unavailable) => Reason::AuditUnavailable,
    };
    deny::answer_and_close(&mut stream, &deny::raw_denial(reason, "", 0)).await;
}

/// Which listener a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The explicit proxy.
    Explicit,
    /// The git service port.
    Service,
    /// Plain HTTP on the transparent listener: every request must resolve to and go to this
    /// original destination.
    Pinned(SocketAddr),
}

struct ConnState {
    shared: Arc<Shared>,
    peer: SocketAddr,
    caller: Caller,
    mode: Mode,
    slot: Arc<Slot>,
    /// Requests read on this connection: their exchange context and kept-alive upstream.
    ctx: Ctx,
    requests: AtomicU64,
    /// The request-head gate's refusals and upgrade decisions.
    gate: Arc<GateShared>,
    kind: Kind,
    started: SystemTime,
    read_meter: Arc<Meter>,
}

impl ConnState {
    const fn pin(&self) -> Option<SocketAddr> {
        match self.mode {
            Mode::Pinned(a) => Some(a),
            Mode::Explicit | Mode::Service => None,
        }
    }
}

/// Serves one client connection with hyper. In [`Mode::Pinned`] (plain HTTP arriving on
/// the transparent listener) requests are origin-form, named by their `Host` header, and
/// may only go to that original destination.
pub(crate) async fn serve_conn(
    stream: TcpStream,
    peer: SocketAddr,
    caller: Caller,
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    mode: Mode,
) {
    let conn_kind = match mode {
        Mode::Pinned(_) => Kind::Transparent,
        Mode::Service => Kind::GitService,
        Mode::Explicit => Kind::Http,
    };
    let started = SystemTime::now();
    let read_meter = Arc::new(Meter::new());
    let gate = Arc::new(GateShared::new());
    let limits = &shared.limits;
    let io = TokioIo::new(Gate::new(
        Metered::new(stream, Arc::clone(&read_meter), Dir::Up),
        limits.max_header_bytes,
        Arc::clone(&gate),
    ));
    let state = Arc::new(ConnState {
        shared: Arc::clone(&shared),
        peer,
        caller,
        mode,
        ctx: Ctx::new(
            Arc::clone(&shared),
            peer,
            caller,
            conn_kind,
            Arc::clone(&slot),
        ),
        slot,
        requests: AtomicU64::new(0),
        gate,
        kind: conn_kind,
        started,
        read_meter: Arc::clone(&read_meter),
    });
    let svc_state = Arc::clone(&state);
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let st = Arc::clone(&svc_state);
        // Where this request's message ends, for its body (`body::Framed`).
        req.extensions_mut().insert(st.gate.next_message());
        async move {
            if let Some(reason) = st.gate.refusal_for(&req) {
                return Ok::<_, Infallible>(refuse_head(&st, reason).await);
            }
            let upgrade = gate::wants_upgrade(&req).then(|| req.method() == Method::CONNECT);
            let resp = handle(Arc::clone(&st), req).await;
            if let Some(connect) = upgrade {
                st.gate
                    .upgrade_decided(gate::upgrades(connect, resp.status()));
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = gate::http1_server(&shared.head_timer, limits)
        .serve_connection(io, svc)
        .with_upgrades();
    tokio::pin!(conn);
    let mut phase = shared.shutdown.subscribe();
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = reached(&mut phase, Phase::Draining) => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                () = reached(&mut phase, Phase::Stopping) => {
                    // Pending lookups/connects give up at Stopping; let their handlers
                    // answer and audit before the connection is dropped.
                    tokio::time::timeout(std::time::Duration::from_millis(200), conn.as_mut())
                        .await
                        .unwrap_or(Ok(()))
                }
            }
        }
    };
    if let Err(e) = result {
        // The gate refuses every head hyper would: hyper's own bare 400/431 is not expected
        // here any more, but stays audited if it ever comes.
        let reason = if e.is_parse_too_large() {
            Some(Reason::RequestTooLarge)
        } else if e.is_parse() {
            Some(Reason::MalformedRequest)
        } else if e.is_timeout() && state.gate.head_unfinished() {
            // A request head that never completed: slowloris, on the connection's first
            // request or a later one. (An idle keep-alive connection timing out between
            // requests is not a decision.)
            Some(Reason::MalformedRequest)
        } else {
            None
        };
        if let Some(reason) = reason {
            let mut rec = Record::new(&shared.who, started, conn_kind, Some(peer));
            caller.stamp(&mut rec);
            rec.reason = Some(reason);
            rec.event = Some(if e.is_timeout() {
                Event::HeaderTimeout
            } else {
                Event::ParseError
            });
            rec.bytes_up = read_meter.up();
            rec.duration_ms = read_meter.elapsed_ms();
            let _ = shared.audit.commit(&rec);
        } else {
            tracing::debug!("client {peer}: {e}");
        }
    }
}

/// The gate refused a request head: the uniform denial, the connection closes after it,
/// and the connection's one `parse-error` line.
async fn refuse_head(st: &ConnState, reason: Reason) -> Response<ProxyBody> {
    let mut rec = Record::new(&st.shared.who, st.started, st.kind, Some(st.peer));
    st.caller.stamp(&mut rec);
    rec.reason = Some(reason);
    rec.event = Some(Event::ParseError);
    rec.bytes_up = st.read_meter.up();
    rec.duration_ms = st.read_meter.elapsed_ms();
    let reason = match st.shared.audit.commit(&rec) {
        Ok(()) => reason,
        Err(crate::audit::Unavailable) => Reason::AuditUnavailable,
    };
    gate::closing(deny::denial(reason, "", 0))
}

async fn handle(st: Arc<ConnState>, req: Request<Incoming>) -> Response<ProxyBody> {
    st.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(orig) = st.pin() {
        return transparent_http(st, req, orig).await;
    }
    if st.mode == Mode::Service {
        if req.method() == Method::CONNECT {
            return connect(st, req).await;
        }
        // The git API's git speaks only CONNECT here (http.proxy); nothing else is served.
        let mut rec = record(&st, Kind::GitService, &req);
        rec.path = Some(req.uri().path().chars().take(1024).collect());
        rec.rule = Some("git service: CONNECT only".into());
        return deny::audited(rec, Reason::RequestDeniedByRule, "", 0).await;
    }
    // The agent's own API: answered here, never admitted or forwarded.
    if crate::agent_api::addressed(&req) {
        return crate::agent_api::serve(&st.shared, st.caller, req).await;
    }
    if req.method() == Method::CONNECT {
        return connect(st, req).await;
    }
    if req.uri().authority().is_none() {
        if req.method() == Method::GET && req.uri().path() == HEALTH_PATH {
            return deny::health(&st.shared.who.session, st.shared.audit.available());
        }
        if req.uri().path().starts_with(BASE_URL_PREFIX) {
            return base_url(st, req).await;
        }
        let mut rec = record(&st, Kind::Http, &req);
        rec.path = Some(req.uri().path().chars().take(1024).collect());
        return deny::audited(rec, Reason::MalformedRequest, "", 0).await;
    }
    forward(st, req).await
}

/// A request's record, written even if the client hangs up before its outcome ([`Pending`]).
fn record(st: &ConnState, kind: Kind, req: &Request<Incoming>) -> Pending {
    let mut rec = Record::new(&st.shared.who, SystemTime::now(), kind, Some(st.peer));
    st.caller.stamp(&mut rec);
    rec.method = Some(req.method().as_str().chars().take(32).collect());
    st.shared.audit.pending(rec)
}

/// The destination's admission ([`crate::admission::admit`]: the rate, the policy, then
/// the name),
/// then resolve once and check, shared by CONNECT, plain HTTP and base URL. The record
/// carries the decision either way.
async fn admit(
    st: &ConnState,
    rules: &Rules,
    rec: &mut Record,
    target: &Target,
) -> Result<Vec<std::net::IpAddr>, Reason> {
    rec.host = Some(target.host.as_str().to_owned());
    rec.port = Some(target.port);
    // The git service port's pushes are the git API's: never rate-limited here.
    let pace =
        (st.mode != Mode::Service).then(|| st.shared.pace(crate::limits::Client::of(st.caller)));
    let admission =
        crate::admission::admit_holding(rules.name_rules(), &st.shared.dns_budget, pace, target)
            .await;
    admission.stamp(rec);
    if let Some(reason) = admission.refused() {
        return Err(reason);
    }
    st.shared.upstreams.resolve_checked(target).await
}

async fn connect(st: Arc<ConnState>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let lane = if st.mode == Mode::Service {
        pool::Lane::GitService
    } else {
        pool::Lane::Agent
    };
    let service = lane == pool::Lane::GitService;
    let kind = if service {
        Kind::GitService
    } else {
        Kind::Connect
    };
    let mut rec = record(&st, kind, &req);
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let target = match decide::connect_target(&authority) {
        Ok(t) => t,
        Err(rej) => {
            rec.host = Some(rej.raw_host.clone());
            return deny::audited(rec, rej.reason, &rej.raw_host, 0).await;
        }
    };
    let host = target.host.as_str().to_owned();
    // One snapshot for the tunnel's admission and whether it is intercepted.
    let rules = st.shared.rules.load();
    let addrs = match admit(&st, &rules, &mut rec, &target).await {
        Ok(a) => a,
        Err(reason) if !service && speaks_in_tunnel(reason, &target) => {
            return refuse_in_tunnel(&st, rec, reason, &target, &mut req);
        }
        Err(reason) => return deny::audited(rec, reason, &host, target.port).await,
    };
    // The record reaches the log before the upstream hears of the tunnel.
    let mut rec = match rec.open() {
        Ok(r) => r,
        Err(crate::audit::Unavailable) => {
            return deny::denial(Reason::AuditUnavailable, &host, target.port);
        }
    };
    // The service port always intercepts (it exists to inject the git credential).
    let intercept = service || rules.policy.intercepts(&target.host);
    // An intercepted connection whose target has an idle pooled upstream connection makes
    // none now (its requests go on the pooled one; `pool`). Otherwise the upstream is
    // reached before the tunnel is granted, so an unreachable one is a `502` to CONNECT.
    let pooled = intercept && intercept::pooled(&st.shared, &target, lane, &addrs);
    let upstream = if pooled {
        None
    } else {
        let connected = st
            .shared
            .upstreams
            .connect_checked(&addrs, target.port)
            .await;
        if !service {
            let limits = rules.policy.limits;
            (st.shared.breakers).connected(&target, connected.is_ok(), intercept, limits);
        }
        match connected {
            Ok(c) => {
                rec.upstream = Some(c.addr);
                rec.upstream_local_port = c.local_port;
                Some(c)
            }
            Err(reason) => return deny::audited(rec, reason, &host, target.port).await,
        }
    };
    let conn = Granted {
        shared: Arc::clone(&st.shared),
        peer: st.peer,
        caller: st.caller,
        kind,
        slot: Arc::clone(&st.slot),
        lane,
        target,
        addrs,
        upstream,
        meter: Arc::new(Meter::new()),
    };
    // A passthrough tunnel's bytes up count against the upload budgets as they cross (an
    // intercepted one's are counted request by request).
    if !intercept && !service {
        let who = crate::limits::Client::of(st.caller);
        let charge = (st.shared.budgets).charge(who, &conn.target.host, rules.policy.limits);
        conn.meter.charge(charge);
    }
    rec.forwarded();
    tokio::spawn(run_tunnel(
        conn,
        intercept,
        hyper::upgrade::on(&mut req),
        rec,
    ));
    Response::new(deny::full(bytes::Bytes::new()))
}

/// Whether a refused `CONNECT` to `target` is answered inside the tunnel (`legible`): a
/// refusal of a name (a TLS client asks for it by name; an IP literal has none to mint).
fn speaks_in_tunnel(reason: Reason, target: &Target) -> bool {
    target.host.ip().is_none() && crate::legible::speaks(reason)
}

/// Audits the refusal of `target`, then grants the tunnel only to answer it inside
/// (`legible::tunnel_denial`): the client prints the reason and the hint instead of
/// "CONNECT tunnel failed". Nothing is dialed. Without the audit line nothing is granted.
fn refuse_in_tunnel(
    st: &ConnState,
    rec: Pending,
    reason: Reason,
    target: &Target,
    req: &mut Request<Incoming>,
) -> Response<ProxyBody> {
    let (host, port) = (target.host.as_str().to_owned(), target.port);
    let Ok(named) = deny::commit_refusal(rec, reason) else {
        return deny::denial(Reason::AuditUnavailable, &host, port);
    };
    let refusal = crate::legible::Refusal {
        reason,
        host,
        port,
        named,
    };
    let on_upgrade = hyper::upgrade::on(req);
    let shared = Arc::clone(&st.shared);
    // The client's connection slot stays taken while the answer is spoken.
    let slot = Arc::clone(&st.slot);
    tokio::spawn(async move {
        let _slot = slot;
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let (interception, limits) = (&shared.interception, &shared.limits);
        let client = TokioIo::new(upgraded);
        crate::legible::tunnel_denial(client, interception, limits, &refusal).await;
    });
    Response::new(deny::full(bytes::Bytes::new()))
}

/// Serves a granted tunnel once hyper hands its connection over (intercepted request by
/// request, or relayed after its first bytes are checked), then writes its closing line.
async fn run_tunnel(
    conn: Granted,
    intercept: bool,
    on_upgrade: hyper::upgrade::OnUpgrade,
    mut rec: Pending,
) {
    let _slot = Arc::clone(&conn.slot);
    rec.event = Some(Event::Close);
    let meter = Arc::clone(&conn.meter);
    let ended = match on_upgrade.await {
        Ok(upgraded) if intercept => intercepted_tunnel(conn, upgraded, &mut rec).await,
        Ok(upgraded) => Ended::relayed(relayed_tunnel(conn, upgraded, &mut rec).await, &meter),
        Err(e) => {
            tracing::debug!("upgrade failed: {e}");
            Ended {
                end: tunnel::End::Error,
                went_upstream: false,
            }
        }
    };
    connection::closing(&mut rec, ended, &meter);
    rec.emit().await;
}

/// Intercepted: served over the bare client socket when hyper's upgrade is one.
async fn intercepted_tunnel(
    conn: Granted,
    upgraded: hyper::upgrade::Upgraded,
    rec: &mut Record,
) -> Ended {
    match gate::upgraded_tcp(upgraded) {
        // The bare socket: no dynamic IO layers under the TLS.
        Ok(tcp) => connection::intercepted(conn, tcp, rec).await,
        Err(upgraded) => connection::intercepted(conn, TokioIo::new(upgraded), rec).await,
    }
}

/// Not intercepted: the first bytes must name the same host (no fronting, no ECH), then
/// socket to socket.
async fn relayed_tunnel(
    conn: Granted,
    upgraded: hyper::upgrade::Upgraded,
    rec: &mut Record,
) -> tunnel::End {
    let Some(upstream) = conn.upstream else {
        // Only an intercepted connection goes without one.
        tracing::error!("CONNECT tunnel without an upstream connection");
        return tunnel::End::Error;
    };
    let Ok(mut client) = gate::upgraded_tcp(upgraded) else {
        tracing::error!("CONNECT tunnel not over the client socket");
        return tunnel::End::Error;
    };
    let mut up = upstream.stream;
    let shared = &conn.shared;
    let checked = inspect_tunnel(
        &mut client,
        &mut up,
        &conn.target,
        &conn.meter,
        shared.limits.idle_timeout,
        shared.shutdown.subscribe(),
    )
    .await;
    match checked {
        // Prefix consumed (the usual case): socket to socket, spliced.
        Ok(()) => match client.into_bare() {
            Ok(tcp) => connection::relayed(shared, tcp, up, &conn.target, &conn.meter).await,
            Err(client) => connection::relayed(shared, client, up, &conn.target, &conn.meter).await,
        },
        Err(Inspect::Refused(reason)) => {
            rec.decision = Verdict::Deny;
            rec.reason = Some(reason);
            tunnel::End::Closed
        }
        Err(Inspect::Ended(end)) => end,
    }
}

/// Plain HTTP from the transparent listener: the `Host` header names the target (it must
/// be the only one, and agree with the original destination's port and any absolute-form
/// target); then the request is forwarded like an explicit one, pinned to the original
/// destination. Every request of a keep-alive connection is checked, so a second request
/// cannot name another virtual host on the same address.
async fn transparent_http(
    st: Arc<ConnState>,
    mut req: Request<Incoming>,
    orig: SocketAddr,
) -> Response<ProxyBody> {
    let mut rec = record(&st, Kind::Transparent, &req);
    rec.port = Some(orig.port());
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let (Some(value), None) = (hosts.next(), hosts.next()) else {
        let reason = if req.headers().contains_key(header::HOST) {
            Reason::MalformedRequest
        } else {
            Reason::UnknownHost
        };
        return deny::audited(rec, reason, "", orig.port()).await;
    };
    let raw = String::from_utf8_lossy(value.as_bytes()).into_owned();
    rec.host = Some(raw.chars().filter(|c| !c.is_control()).take(300).collect());
    if req.method() == Method::CONNECT {
        return deny::audited(rec, Reason::MalformedRequest, &raw, orig.port()).await;
    }
    let target = match airlock_policy::host::split_host_port(&raw, orig.port()) {
        Ok((host, port)) if port == orig.port() => Target { host, port },
        Ok(_) => return deny::audited(rec, Reason::HostMismatch, &raw, orig.port()).await,
        Err(_) => return deny::audited(rec, Reason::InvalidHost, &raw, orig.port()).await,
    };
    if let Some(a) = req.uri().authority() {
        let same = decide::http_target(req.uri()).is_ok_and(|(t, _)| t == target);
        if !same {
            let host = a.as_str().to_owned();
            return deny::audited(rec, Reason::HostMismatch, &host, orig.port()).await;
        }
    }
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let Ok(uri) = format!("http://{}:{}{pq}", bracketed(&target), target.port).parse::<Uri>()
    else {
        return deny::audited(rec, Reason::MalformedRequest, &raw, orig.port()).await;
    };
    *req.uri_mut() = uri;
    forward_with(st, req, rec).await
}

async fn forward(st: Arc<ConnState>, req: Request<Incoming>) -> Response<ProxyBody> {
    let rec = record(&st, Kind::Http, &req);
    forward_with(st, req, rec).await
}

/// Plain HTTP (absolute-form, or transparent with the URI rewritten from `Host`): policy,
/// resolve once, pin, then [`intercept::exchange`] (L7 rules, git push refusal, credential
/// leak search; never an injection over plain HTTP).
async fn forward_with(
    st: Arc<ConnState>,
    req: Request<Incoming>,
    mut rec: Pending,
) -> Response<ProxyBody> {
    let uri_len = req.uri().to_string().len();
    if uri_len > st.shared.limits.max_request_line {
        return deny::audited(rec, Reason::RequestTooLarge, "", 0).await;
    }
    let (target, _path) = match decide::http_target(req.uri()) {
        Ok(x) => x,
        Err(rej) => {
            rec.host = Some(rej.raw_host.clone());
            return deny::audited(rec, rej.reason, &rej.raw_host, 0).await;
        }
    };
    rec.path = Some(req.uri().path().chars().take(1024).collect());
    let host = target.host.as_str().to_owned();
    let port = target.port;
    // One snapshot for the admission and the request.
    let rules = st.shared.rules.load();
    let mut addrs = match admit(&st, &rules, &mut rec, &target).await {
        Ok(a) => a,
        Err(reason) => return deny::audited(rec, reason, &host, port).await,
    };
    if let Some(orig) = st.pin() {
        // No fronting by IP: the original destination must be an address of this host.
        if let Err(reason) =
            decide::check_original_destination(orig.ip(), &addrs, &Sniff::Http(None))
        {
            return deny::audited(rec, reason, &host, port).await;
        }
        addrs = vec![orig.ip()];
    }
    let route = Route::new(target, addrs, Leg::Plain);
    intercept::exchange(&st.ctx, rules, req, &route, rec).await
}

/// Base-URL mode: `http://127.0.0.1:3128/https/<host>[:port]/<path>` goes to
/// `https://<host>[:port]/<path>` over verified TLS, like an intercepted request (policy,
/// L7 rules, the credential injected when bound). The agent needs no CA for this.
async fn base_url(st: Arc<ConnState>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let mut rec = record(&st, Kind::Http, &req);
    let (target, path) = match decide::base_url_target(req.uri().path()) {
        Ok(x) => x,
        Err(rej) => {
            rec.host = Some(rej.raw_host.clone());
            rec.path = Some(req.uri().path().chars().take(1024).collect());
            return deny::audited(rec, rej.reason, &rej.raw_host, 0).await;
        }
    };
    let pq = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let Ok(uri) = pq.parse::<Uri>() else {
        return deny::audited(rec, Reason::MalformedRequest, "", 0).await;
    };
    *req.uri_mut() = uri;
    let host = target.host.as_str().to_owned();
    let port = target.port;
    // One snapshot for the admission and the request.
    let rules = st.shared.rules.load();
    let addrs = match admit(&st, &rules, &mut rec, &target).await {
        Ok(a) => a,
        Err(reason) => return deny::audited(rec, reason, &host, port).await,
    };
    let route = Route::new(target, addrs, Leg::BaseUrl);
    intercept::exchange(&st.ctx, rules, req, &route, rec).await
}

fn bracketed(target: &Target) -> String {
    match target.host.ip() {
        Some(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => target.host.as_str().to_owned(),
    }
}

enum Inspect {
    /// The client's first bytes name another host (or are broken): refused.
    Refused(Reason),
    /// The tunnel ended before anything was decided.
    Ended(tunnel::End),
}

/// Reads the client's first bytes inside a `CONNECT` tunnel and checks that the TLS server
/// name or HTTP `Host` agrees with the authority (no domain fronting). The bytes read are
/// then sent upstream unchanged. If the upstream speaks first (SSH banners, SMTP, ...) the
/// protocol is not TLS/HTTP-first and the tunnel proceeds without inspection; a client that
/// says nothing is held until the idle timeout, never waved through.
async fn inspect_tunnel<C>(
    client: &mut C,
    up: &mut TcpStream,
    target: &Target,
    meter: &Meter,
    idle: std::time::Duration,
    mut phase: tokio::sync::watch::Receiver<Phase>,
) -> Result<(), Inspect>
where
    C: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut prefix: Vec<u8> = Vec::with_capacity(2048);
    let deadline = tokio::time::Instant::now() + idle;
    let verdict = loop {
        if prefix.len() >= sniff::MAX_SNIFF {
            break sniff::sniff(&prefix);
        }
        let mut chunk = [0u8; 2048];
        let room = (sniff::MAX_SNIFF - prefix.len()).min(chunk.len());
        tokio::select! {
            r = client.read(&mut chunk[..room]) => match r {
                Ok(0) => return Err(Inspect::Ended(tunnel::End::Closed)),
                Ok(n) => {
                    prefix.extend_from_slice(&chunk[..n]);
                    match sniff::sniff(&prefix) {
                        Sniff::NeedMore => {}
                        decided => break decided,
                    }
                }
                Err(_) => return Err(Inspect::Ended(tunnel::End::Error)),
            },
            r = up.readable(), if prefix.is_empty() => {
                if r.is_err() {
                    return Err(Inspect::Ended(tunnel::End::Error));
                }
                break Sniff::Other; // server speaks first
            }
            () = tokio::time::sleep_until(deadline) => return Err(Inspect::Ended(tunnel::End::Idle)),
            // A tunnel whose client never spoke is cut at shutdown like any other.
            () = reached(&mut phase, Phase::Stopping) => return Err(Inspect::Ended(tunnel::End::Shutdown)),
        }
    };
    decide::check_inner_host(target, &verdict).map_err(Inspect::Refused)?;
    if !prefix.is_empty() {
        up.write_all(&prefix)
            .await
            .map_err(|_| Inspect::Ended(tunnel::End::Error))?;
        meter.add_up(prefix.len());
    }
    Ok(())
}
