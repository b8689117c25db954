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

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use airlock_policy::Host;
use airlock_policy::reason::Reason;
use airlock_policy::signals::SignalAction;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1 as client_http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::Shared;
use crate::audit::{Event, Kind, Pending, Record, Verdict};
use crate::body::{AuditOnDrop, BoxError, Counted, Cut, CutFlag, Framed, Held, SignalNote};
use crate::ca::Ca;
use crate::credentials::{GitScope, Injected};
use crate::decide::Target;
use crate::decode::{self, Coding};
use crate::deny::{self, ProxyBody};
use crate::detect;
use crate::gate::{Gate, GateShared, MessageEnd};
use crate::gitfetch;
use crate::gitpath::{self, Service};
use crate::hop;
use crate::leaf::{self, Leaves};
use crate::limits::Slot;
use crate::pool::{self, Pooled};
use crate::read_ahead::ReadAhead;
use crate::recent::{Channel, Recent};
use crate::scan;
use crate::service::{self, Admitted};
use crate::shutdown::{Phase, reached};
use crate::signal;
use crate::signal::SignalPolicy as _;
use crate::snapshot::Rules;
use crate::tunnel::{self, Dir, Meter, Metered};
use crate::upstream::Connected;
use crate::websocket;
use airlock_policy::github_api::{self, ApiUse};
use airlock_policy::l7::METHOD_OVERRIDE_HEADERS;
use airlock_policy::{L7Verdict, RequestView};

/// A body announced (content-length) as at most this many bytes is read whole and
/// searched before anything is sent upstream.
pub const SMALL_BODY: usize = 64 * 1024;

/// A body announced as at most this many bytes to an LLM API host is read whole, so that a
/// secret in it can be redacted before anything is sent.
pub const LLM_BODY: usize = 16 * 1024 * 1024;

/// How long a finished client connection's upstream connection may take to become idle
/// and be pooled (its last response is normally over already).
const POOL_SETTLE: Duration = Duration::from_secs(1);

/// Body type of requests sent upstream.
pub(crate) type UpBody = BoxBody<Bytes, BoxError>;

/// An agent's (or the git API's) request body as it is judged: ending cleanly only where
/// its message did, with what was read of it to judge it put back in front.
type InBody = Held<Framed<Incoming>>;

/// At most this much of a refused git service request's body is read (and dropped) before
/// the refusal is sent, so that git, still sending, reads the refusal.
const DRAIN_CAP: usize = 16 << 20;

/// Setting up interception failed.
#[derive(Debug, thiserror::Error)]
pub enum InterceptionError {
    /// An `--upstream-ca` file is unusable.
    #[error("cannot use upstream CA file {path}: {detail}")]
    Roots {
        path: std::path::PathBuf,
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// What interception needs: the leaves and the upstream TLS client configuration (one,
/// shared). The credentials and detectors change with the policy: [`crate::snapshot::Rules`].
pub struct Interception {
    leaves: Leaves,
    client: Arc<ClientConfig>,
    /// The git service port's per-start state (it always intercepts): when this proxy
    /// started, and the push tickets already taken.
    service: service::ServiceState,
    /// What this session last sent to each host (`recent`): the next body, query or
    /// frame is searched joined to it.
    recent: Arc<Recent>,
}

impl std::fmt::Debug for Interception {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interception")
            .field("leaves", &self.leaves)
            .finish_non_exhaustive()
    }
}

impl Interception {
    /// Leaves under `ca`; upstream roots are webpki-roots plus `extra_roots`.
    ///
    /// # Errors
    /// [`InterceptionError::Config`].
    pub fn new(
        ca: Ca,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> Result<Self, InterceptionError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for r in extra_roots {
            roots
                .add(r)
                .map_err(|e| InterceptionError::Config(e.to_string()))?;
        }
        let mut client = ClientConfig::builder_with_provider(crate::crypto::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| InterceptionError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        client.max_fragment_size = Some(crate::crypto::MAX_FRAGMENT_SIZE);
        Ok(Self {
            leaves: Leaves::new(Arc::new(ca), leaf::DEFAULT_CAPACITY),
            client: Arc::new(client),
            service: service::ServiceState::new(),
            recent: Arc::default(),
        })
    }

    /// Reads every certificate of a PEM file (`--upstream-ca`).
    ///
    /// # Errors
    /// [`InterceptionError::Roots`] when the file cannot be read or holds no certificate.
    pub fn read_roots(
        path: &std::path::Path,
    ) -> Result<Vec<CertificateDer<'static>>, InterceptionError> {
        use rustls::pki_types::pem::PemObject;
        let err = |detail: String| InterceptionError::Roots {
            path: path.to_owned(),
            detail,
        };
        let certs: Vec<_> = CertificateDer::pem_file_iter(path)
            .map_err(|e| err(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| err(e.to_string()))?;
        if certs.is_empty() {
            return Err(err("no certificate in it".into()));
        }
        Ok(certs)
    }

    /// The leaves (and through them the CA).
    #[must_use]
    pub const fn leaves(&self) -> &Leaves {
        &self.leaves
    }

    /// The git service port's per-start state.
    pub(crate) const fn service_state(&self) -> &service::ServiceState {
        &self.service
    }

    /// What this session last sent to each host.
    #[must_use]
    pub fn recent(&self) -> &Arc<Recent> {
        &self.recent
    }
}

/// How a route reaches its upstream, and what the request's `Host` must say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leg {
    /// The agent's own TLS terminated here (CONNECT, transparent): TLS to the upstream, and
    /// `Host` must name the target.
    Intercepted,
    /// Base-URL mode (`http://127.0.0.1:3128/https/<host>/...`): TLS to the upstream;
    /// `Host` names the proxy, not the target.
    BaseUrl,
    /// Plain HTTP forwarded from an absolute-form request: the target is the URL's.
    Plain,
}

/// Where one request goes.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub target: Target,
    /// The checked addresses (or the pinned original destination).
    pub addrs: Vec<IpAddr>,
    /// TLS to the upstream (intercepted, base-URL, service port) or plain HTTP.
    pub tls: bool,
    /// `Host` must agree with the target (false in base-URL mode, where it names us).
    pub check_host: bool,
    /// The `Host` header sent upstream (computed once per route, not per request).
    host_header: Option<HeaderValue>,
}

impl Route {
    pub fn new(target: Target, addrs: Vec<IpAddr>, leg: Leg) -> Self {
        let tls = leg != Leg::Plain;
        let check_host = leg == Leg::Intercepted;
        let host_header = HeaderValue::from_str(&host_value(&target, tls)).ok();
        Self {
            target,
            addrs,
            tls,
            check_host,
            host_header,
        }
    }
}

/// One client connection's side of [`exchange`]: who, and the upstream kept alive.
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    pub peer: SocketAddr,
    pub uid: Option<u32>,
    pub kind: Kind,
    /// Which listeners' connections it may share: the agent's, or the git service port's.
    pub lane: pool::Lane,
    pub slot: Arc<Slot>,
    pub requests: AtomicU64,
    pool: Mutex<Option<Live>>,
    /// A TCP connection already made to the target (CONNECT / transparent), used first.
    pre: Mutex<Option<Connected>>,
}

/// An upstream HTTP/1.1 connection and where it goes.
pub(crate) struct Live {
    target: Target,
    tls: bool,
    sender: client_http1::SendRequest<UpBody>,
    addr: SocketAddr,
    local_port: Option<u16>,
}

impl Pooled for Live {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn ready(&self) -> bool {
        self.sender.is_ready()
    }
}

impl Drop for Ctx {
    /// The client connection is over: its upstream connection, once idle, serves the next
    /// client connection to the same target (`pool`).
    fn drop(&mut self) {
        let Some(live) = self.pool.get_mut().ok().and_then(Option::take) else {
            return;
        };
        let key = self.key_of(&live.target, live.tls);
        let shared = Arc::clone(&self.shared);
        if live.sender.is_ready() {
            shared.pool.put(key, live, Instant::now());
            return;
        }
        if live.sender.is_closed() {
            return;
        }
        // The last response may still be finishing on the upstream side.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut live = live;
            rt.spawn(async move {
                let ready = tokio::time::timeout(POOL_SETTLE, live.sender.ready()).await;
                if matches!(ready, Ok(Ok(()))) {
                    shared.pool.put(key, live, Instant::now());
                }
            });
        }
    }
}

impl Ctx {
    pub fn new(
        shared: Arc<Shared>,
        peer: SocketAddr,
        uid: Option<u32>,
        kind: Kind,
        slot: Arc<Slot>,
    ) -> Self {
        Self {
            shared,
            peer,
            uid,
            kind,
            lane: pool::Lane::Agent,
            slot,
            requests: AtomicU64::new(0),
            pool: Mutex::new(None),
            pre: Mutex::new(None),
        }
    }

    /// Whether the connection came in on the git service port.
    pub fn git_service(&self) -> bool {
        self.lane == pool::Lane::GitService
    }

    /// An audit record for a request of this connection, written even if the client hangs
    /// up before the request's outcome ([`Pending`]).
    pub fn record(&self, method: &http::Method) -> Pending {
        let mut rec = Record::new(
            &self.shared.who,
            SystemTime::now(),
            self.kind,
            Some(self.peer),
        );
        rec.uid = self.uid;
        rec.method = Some(method.as_str().chars().take(32).collect());
        self.shared.audit.pending(rec)
    }

    async fn deny(&self, rec: Pending, reason: Reason, route: &Route) -> Response<ProxyBody> {
        deny::audited(rec, reason, route.target.host.as_str(), route.target.port).await
    }

    fn key_of(&self, target: &Target, tls: bool) -> pool::Key {
        pool::Key {
            target: target.clone(),
            tls,
            lane: self.lane,
        }
    }

    /// The kept-alive upstream for `route`, if it is still usable.
    async fn reuse(&self, route: &Route) -> Option<Live> {
        let live = self.pool.lock().ok()?.take()?;
        if live.target != route.target || live.tls != route.tls {
            return None;
        }
        let mut live = live;
        live.sender.ready().await.ok()?;
        Some(live)
    }

    /// An idle pooled connection for `route`, else the connection made at `CONNECT` time,
    /// else a new one.
    async fn open(&self, route: &Route) -> Result<Live, Reason> {
        let key = self.key_of(&route.target, route.tls);
        if let Some(live) = self.shared.pool.take(&key, &route.addrs, Instant::now()) {
            return Ok(live);
        }
        let pre = self.pre.lock().ok().and_then(|mut p| p.take());
        let up = match pre {
            Some(c) => c,
            None => {
                self.shared
                    .upstreams
                    .connect_checked(&route.addrs, route.target.port)
                    .await?
            }
        };
        let (addr, local_port) = (up.addr, up.local_port);
        let sender = if route.tls {
            let name = ServerName::try_from(route.target.host.as_str().to_owned())
                .map_err(|_| Reason::InvalidHost)?;
            let connector =
                tokio_rustls::TlsConnector::from(Arc::clone(&self.shared.interception.client));
            let tls = tokio::time::timeout(
                self.shared.limits.connect_timeout,
                connector.connect(name, ReadAhead::new(up.stream)),
            )
            .await
            .map_err(|_| Reason::UpstreamUnreachable)?
            .map_err(|e| tls_reason(&e))?;
            self.drive(tls).await?
        } else {
            self.drive(up.stream).await?
        };
        Ok(Live {
            target: route.target.clone(),
            tls: route.tls,
            sender,
            addr,
            local_port,
        })
    }

    /// HTTP/1.1 client handshake on `io`; the connection task lives until the upstream
    /// closes, stays idle for `idle_timeout`, or shutdown reaches Stopping.
    async fn drive<IO>(&self, io: IO) -> Result<client_http1::SendRequest<UpBody>, Reason>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let meter = Arc::new(Meter::new());
        let io = TokioIo::new(Metered::new(io, Arc::clone(&meter), Dir::Down));
        let (sender, conn) = client_http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|_| Reason::UpstreamUnreachable)?;
        // No connection slot is held here: while a client connection uses this upstream
        // connection, the client's slot counts it; afterwards it is one of the pool's
        // bounded idle connections, or closed.
        let idle = self.shared.limits.idle_timeout;
        let mut phase = self.shared.shutdown.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                r = conn.with_upgrades() => if let Err(e) = r {
                    tracing::debug!("upstream connection: {e}");
                },
                () = tunnel::idle_watch(&meter, idle) => tracing::debug!("upstream connection idle: closed"),
                () = reached(&mut phase, Phase::Stopping) => {}
            }
        });
        Ok(sender)
    }
}

/// Whether an idle pooled TLS connection to `target` (at one of `addrs`) is waiting, so an
/// intercepted client connection need not open one before its first request.
pub(crate) fn pooled(shared: &Shared, target: &Target, lane: pool::Lane, addrs: &[IpAddr]) -> bool {
    let key = pool::Key {
        target: target.clone(),
        tls: true,
        lane,
    };
    shared.pool.has(&key, addrs, Instant::now())
}

/// A failed upstream handshake: a certificate problem is `upstream-certificate-invalid`,
/// anything else `upstream-unreachable`.
fn tls_reason(e: &std::io::Error) -> Reason {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(
            rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::InvalidCertRevocationList(_),
        ) => Reason::UpstreamCertificateInvalid,
        _ => Reason::UpstreamUnreachable,
    }
}

/// `Host` value for `target` (default port omitted).
fn host_value(target: &Target, tls: bool) -> String {
    let host = match target.host.ip() {
        Some(IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => target.host.as_str().to_owned(),
    };
    let default = if tls { 443 } else { 80 };
    if target.port == default {
        host
    } else {
        format!("{host}:{}", target.port)
    }
}

/// Whether every `Host` header (at most one) and an absolute-form authority name the
/// route's target.
fn host_agrees(req: &Request<Incoming>, route: &Route) -> Result<(), Reason> {
    let target = &route.target;
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(Reason::MalformedRequest);
    }
    let same = |raw: &str| {
        airlock_policy::host::split_host_port(raw, target.port)
            .is_ok_and(|(h, p)| h == target.host && p == target.port)
    };
    // The usual case costs a byte comparison: the value is exactly the one we send
    // upstream, the target's own rendering (which reads back as the target); anything
    // else is parsed and compared.
    if let Some(v) = first
        && route.host_header.as_ref() != Some(v)
    {
        let ok = v.to_str().is_ok_and(same);
        if !ok {
            return Err(Reason::HostMismatch);
        }
    }
    if let Some(a) = req.uri().authority()
        && !same(a.as_str())
    {
        return Err(Reason::HostMismatch);
    }
    Ok(())
}

fn is_upgrade(req: &Request<Incoming>) -> bool {
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
fn upgrade_verdict(
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

/// Methods that never carry a credential: `TRACE` and `TRACK` make the server echo the
/// request (the injected secret would come back in a body), `CONNECT` inside an
/// intercepted connection would open a tunnel no rule reads.
fn never_credentialed(method: &http::Method) -> bool {
    ["TRACE", "TRACK", "CONNECT"]
        .iter()
        .any(|m| method.as_str().eq_ignore_ascii_case(m))
}

/// One request, end to end (see the module docs). `rec` carries what the caller already
/// decided (policy verdict and rule of the host). Every check is a step of [`prepare`]
/// returning the request as it will be sent or the one reason it is refused, applied to
/// the record in one place; [`forward`] then sends it.
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
    match prepare(ctx, req, route, &mut rec).await {
        Ok(prepared) => forward(ctx, prepared, route, rec).await,
        Err(Refuse::Plain(Reason::CredentialMissing)) => missing_credential(ctx, rec, route, &uri),
        Err(Refuse::Plain(reason)) => ctx.deny(rec, reason, route).await,
        Err(Refuse::Git(refusal)) => {
            rec.rule = Some(refusal.rule.clone());
            let (host, port) = (route.target.host.as_str(), route.target.port);
            deny::audited_with(rec, refusal.reason, host, port, || refusal.answer())
        }
    }
}

/// Why a request is not sent: a reason (answered as JSON, or as git prints it where the
/// request is git's), or a git service port refusal with its own answer.
enum Refuse {
    Plain(Reason),
    Git(service::Refusal),
}

impl From<Reason> for Refuse {
    fn from(reason: Reason) -> Self {
        Refuse::Plain(reason)
    }
}

/// One request: its connection's context and the rules it is decided under (one
/// [`crate::snapshot::Snapshot::load`], taken when the request arrived).
struct Cx<'a> {
    ctx: &'a Ctx,
    rules: Arc<Rules>,
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

/// A request that passed every check, as it will be sent.
struct Prepared {
    out: Request<UpBody>,
    /// The agent's side of an allowed upgrade, and how its `101` is relayed.
    on_client_upgrade: Option<(hyper::upgrade::OnUpgrade, websocket::Relay)>,
    /// Byte counts (and activity) of this request's body both ways.
    meter: Arc<Meter>,
    /// Set when a streamed body was cut at a secret (the credential's name).
    leak_flag: CutFlag,
    /// A streamed body's signals, for the record.
    signals: SignalNote,
    /// A streamed body's secrets let through, for the record.
    secrets: detect::Note,
    /// Whether a credential was injected (the response is then scrubbed).
    injected: bool,
}

/// Every check on the request, in order; the request as it will be sent. `Err` is the
/// request's denial (the record already names the rule or credential involved).
async fn prepare(
    ctx: &Cx<'_>,
    req: Request<Incoming>,
    route: &Route,
    rec: &mut Pending,
) -> Result<Prepared, Refuse> {
    describe(rec, &req, route);
    check_head(ctx, &req, route)?;
    // A cheap clone (shared bytes) the path and query are borrowed from.
    let uri = req.uri().clone();
    let (path, query) = (uri.path(), uri.query());
    let method = req.method().clone();
    let scope = git_scope(ctx, route, method.as_str(), path, query, rec)?;
    let (mut req, admitted) = service_gate(ctx, req, route, rec).await?;
    let view = RequestView {
        host: &route.target.host,
        method: method.as_str(),
        path,
        query,
    };
    let body_cap = judge_head(ctx, &mut req, &view, rec)?;
    let upgrade = check_credential_use(ctx, &req, route, rec)?;
    check_missing(ctx, route, scope, &view, rec)?;
    let upgrading = upgrade.is_some();
    let on_client_upgrade = upgrade.map(|relay| (hyper::upgrade::on(&mut req), relay));
    let (mut parts, body) = req.into_parts();
    // From here on the body ends cleanly only where its message really ended (`Framed`).
    let end = parts.extensions.remove::<MessageEnd>();
    let body = Framed::new(body, end);
    let body = match admitted {
        Some(a) => push_commands(ctx, &a, &method, body, &parts.headers).await?,
        None => fetch_request(ctx, &view, body, &parts.headers, rec).await?,
    };
    let upgrade_value = parts.headers.get(header::UPGRADE).cloned();
    hop::strip(&mut parts.headers);
    hop::strip_claims(&mut parts.headers, &ctx.rules.policy.network);
    check_foreign_secrets(ctx, route, &parts, rec)?;
    let injected = inject(ctx, route, &mut parts.headers, scope, &view, rec)?;
    let tally = Tally::default();
    let up_body = prepare_body(
        ctx,
        body,
        &mut parts.headers,
        body_cap,
        &view,
        injected.as_ref(),
        &tally,
        rec,
    )
    .await?;
    let out = origin_form(parts, route, upgrade_value.filter(|_| upgrading), up_body)?;
    Ok(Prepared {
        out,
        on_client_upgrade,
        meter: tally.meter,
        leak_flag: tally.leak_flag,
        signals: tally.signals,
        secrets: tally.secrets,
        injected: injected.is_some(),
    })
}

/// The record's target and path (the path cut at 1,024 characters).
fn describe(rec: &mut Pending, req: &Request<Incoming>, route: &Route) {
    rec.host = Some(route.target.host.as_str().to_owned());
    rec.port = Some(route.target.port);
    rec.intercepted = route.tls;
    let path = req.uri().path();
    rec.path = Some(if path.len() <= 1024 {
        path.to_owned()
    } else {
        path.chars().take(1024).collect()
    });
}

/// The head names the connection's checked target (no fronting), and its request line
/// fits the limit.
fn check_head(ctx: &Ctx, req: &Request<Incoming>, route: &Route) -> Result<(), Reason> {
    if route.check_host {
        host_agrees(req, route)?;
    }
    let pq_len = req.uri().path_and_query().map_or(1, |pq| pq.as_str().len());
    if pq_len > ctx.shared.limits.max_request_line {
        return Err(Reason::RequestTooLarge);
    }
    Ok(())
}

/// What the git credential may do for this request: on the service port only smart-HTTP
/// passes, with the token for authorized repositories, and with no credential at all for
/// another repository (a read-only remote; [`service_gate`] refuses a push to it); on the
/// agent's ports a push is refused, a read of an authorized repository may carry the token,
/// and on the GitHub API host the token opens pull requests of authorized repositories
/// (`airlock_policy::github_api`).
fn git_scope(
    ctx: &Cx<'_>,
    route: &Route,
    method: &str,
    path: &str,
    query: Option<&str>,
    rec: &mut Pending,
) -> Result<GitScope, Reason> {
    let policy = &ctx.rules.policy;
    if !ctx.git_service() && policy.github_api_bound(&route.target.host) {
        return match policy.github_api_use(method, path) {
            ApiUse::Token => Ok(GitScope::Api),
            ApiUse::Anonymous => Ok(GitScope::None),
            ApiUse::Refused => {
                rec.rule = Some(github_api::REFUSED_RULE.into());
                Err(Reason::RequestDeniedByRule)
            }
        };
    }
    let git = gitpath::parse(path, query);
    let authorized = git.as_ref().is_some_and(|g| {
        let repo = g.repository(route.target.host.as_str());
        ctx.rules.policy.git.repositories.contains(&repo)
    });
    if ctx.git_service() {
        return match git {
            _ if authorized => Ok(GitScope::Service),
            // A read-only remote: no credential (see `service_gate`, `inject`).
            Some(_) => Ok(GitScope::None),
            None => {
                rec.rule = Some("git service: git smart-HTTP only".into());
                Err(Reason::RequestDeniedByRule)
            }
        };
    }
    if gitpath::is_push(path, query) {
        return Err(Reason::GitPushBlocked);
    }
    Ok(match &git {
        Some(g) if authorized && g.service == Service::UploadPack => GitScope::Read,
        _ => GitScope::None,
    })
}

/// On the git service port: the request's ticket, checked ([`service::admit`]); only `GET`
/// and `POST` (all git sends). Elsewhere nothing. A refused request's body is drained first.
async fn service_gate(
    ctx: &Cx<'_>,
    req: Request<Incoming>,
    route: &Route,
    rec: &mut Pending,
) -> Result<(Request<Incoming>, Option<Admitted>), Refuse> {
    if !ctx.git_service() {
        return Ok((req, None));
    }
    // `git_scope` let only smart-HTTP requests this far.
    let Some(git) = gitpath::parse(req.uri().path(), req.uri().query()) else {
        return Err(Reason::RequestDeniedByRule.into());
    };
    let post = req.method() == http::Method::POST;
    if !post && req.method() != http::Method::GET {
        rec.rule = Some("git service: GET and POST only".into());
        return Err(Reason::RequestDeniedByRule.into());
    }
    let repository = git.repository(route.target.host.as_str());
    let authorized = ctx.rules.policy.git.repositories.contains(&repository);
    let verdict = if !authorized && git.service == Service::ReceivePack {
        Err(service::read_only(&repository, post))
    } else {
        service::admit(
            ctx.rules.credentials.git_service(),
            ctx.shared.interception.service_state(),
            req.headers(),
            (git.service, &repository),
            post,
            SystemTime::now(),
        )
    };
    match verdict {
        Ok(admitted) => Ok((req, Some(admitted))),
        Err(refusal) => {
            let idle = ctx.shared.limits.idle_timeout;
            service::drain(req.into_body(), DRAIN_CAP, idle).await;
            Err(Refuse::Git(refusal))
        }
    }
}

/// A request the service port admitted, its body as it will be sent: a push's
/// ref-update commands read and judged first ([`service::judge`]) and its ticket's updates
/// taken ([`service::take`]); any other receive-pack request without a body.
async fn push_commands(
    ctx: &Cx<'_>,
    admitted: &Admitted,
    method: &http::Method,
    mut body: Framed<Incoming>,
    headers: &http::HeaderMap,
) -> Result<InBody, Refuse> {
    if admitted.service != Service::ReceivePack {
        return Ok(Held::none(body));
    }
    let idle = ctx.shared.limits.idle_timeout;
    let verdict = if *method != http::Method::POST {
        if body.is_end_stream() {
            return Ok(Held::none(body));
        }
        Err(service::malformed(
            "a receive-pack request that is not a POST carries a body",
        ))
    } else if headers.contains_key(header::CONTENT_ENCODING) {
        Err(service::malformed(
            "a receive-pack body must not be content-encoded",
        ))
    } else {
        match service::read_commands(&mut body, idle).await {
            Err(why) => Err(service::malformed(why)),
            Ok((held, commands)) => {
                let start = ctx.rules.credentials.git_service();
                let start = start.and_then(|p| p.start_branch.as_deref());
                let now = SystemTime::now();
                service::judge_policy(&commands, &admitted.ticket, &ctx.rules.policy, start)
                    .and_then(|()| {
                        if commands.updates.is_empty() {
                            return Ok(());
                        }
                        let state = ctx.shared.interception.service_state();
                        service::take(state, admitted, commands.caps, &commands, now)
                    })
                    .map(|()| held)
            }
        }
    };
    match verdict {
        Ok(held) => Ok(Held::new(held, body)),
        Err(refusal) => {
            service::drain(body, DRAIN_CAP, idle).await;
            Err(Refuse::Git(refusal))
        }
    }
}

/// A git fetch that passes a read-only host ([`airlock_policy::Policy::fetch_exempt`]): its
/// body is read whole (at most [`gitfetch::MAX_FETCH_BODY`] bytes) and must be a fetch
/// request ([`gitfetch::check`], gzip decoded first), else it is a write
/// (`read-only-host`, reported in report mode); it then goes upstream byte for byte. Any
/// other request's body is untouched.
async fn fetch_request(
    ctx: &Cx<'_>,
    view: &RequestView<'_>,
    body: Framed<Incoming>,
    headers: &http::HeaderMap,
    rec: &mut Pending,
) -> Result<InBody, Reason> {
    if ctx.git_service() || !ctx.rules.policy.fetch_exempt(view) {
        return Ok(Held::none(body));
    }
    let mut body = body;
    let idle = ctx.shared.limits.idle_timeout;
    let refusal = |why: &str| L7Verdict::Deny {
        reason: Reason::ReadOnlyHost,
        rule: format!(
            "{}: read-only (not in network.writable): a git-upload-pack body that is not a git fetch request ({why})",
            view.host
        ),
    };
    let bytes = match read_capped(&mut body, gitfetch::MAX_FETCH_BODY, idle).await {
        Ok(bytes) => bytes,
        // Nothing can go on of a body read in part: refused in both modes.
        Err(Reason::RequestDeniedByRule) => {
            return apply_l7(refusal("larger than a fetch request"), rec)
                .map(|()| Held::none(body));
        }
        Err(reason) => return Err(reason),
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(HeaderValue::as_bytes);
    if let Err(why) = gitfetch::decoded(&bytes, encoding).and_then(|d| gitfetch::check(&d)) {
        // Report mode logs it and sends it as it came.
        apply_l7(reported(&ctx.rules.policy, refusal(why), rec), rec)?;
    }
    Ok(Held::new(bytes, body))
}

/// The policy's L7 rules on the head (not on the service port), with the method-override
/// headers removed; returns how much of the body a body rule wants to judge.
fn judge_head(
    ctx: &Cx<'_>,
    req: &mut Request<Incoming>,
    view: &RequestView<'_>,
    rec: &mut Pending,
) -> Result<Option<usize>, Reason> {
    if ctx.git_service() {
        return Ok(None);
    }
    let verdict = reported(&ctx.rules.policy, ctx.rules.policy.judge(view), rec);
    apply_l7(verdict, rec)?;
    // A read's body: what an upstream that ignores it may take for a request of its own.
    if !req.body().is_end_stream() {
        let verdict = ctx.rules.policy.judge_read_body(view);
        apply_l7(reported(&ctx.rules.policy, verdict, rec), rec)?;
    }
    for h in METHOD_OVERRIDE_HEADERS {
        req.headers_mut().remove(h);
    }
    // A host without L7 rules answers at once (`body_needed` checks that first).
    Ok(ctx.rules.policy.body_needed(view))
}

/// Report mode exists to learn what a policy must name writable: a write to a read-only
/// host (a read carrying a body included) is logged (`report`, `read-only-host` or
/// `body-on-read`, the rule) and let through. Every other L7
/// denial holds in both modes.
fn reported(policy: &airlock_policy::Policy, verdict: L7Verdict, rec: &mut Pending) -> L7Verdict {
    match verdict {
        L7Verdict::Deny {
            reason: reason @ (Reason::ReadOnlyHost | Reason::BodyOnRead),
            rule,
        } if matches!(policy.sandbox.mode, airlock_policy::Mode::Report) => {
            rec.decision = Verdict::Report;
            rec.reason = Some(reason);
            rec.rule = Some(rule);
            L7Verdict::Pass { rule: None }
        }
        v => v,
    }
}

/// An L7 verdict on the record: a denial names its rule; a pass keeps the rule it matched.
fn apply_l7(verdict: L7Verdict, rec: &mut Pending) -> Result<(), Reason> {
    match verdict {
        L7Verdict::Deny { reason, rule } => {
            rec.rule = Some(rule);
            Err(reason)
        }
        L7Verdict::Pass { rule } => {
            if rule.is_some() {
                rec.rule = rule;
            }
            Ok(())
        }
    }
}

/// Where a credential could be abused: a secret in the URL, a method that echoes or
/// tunnels on a credential's host, an upgrade to a relay. Returns how an allowed upgrade
/// is relayed (`None`: not an upgrade).
fn check_credential_use(
    ctx: &Cx<'_>,
    req: &Request<Incoming>,
    route: &Route,
    rec: &mut Pending,
) -> Result<Option<websocket::Relay>, Reason> {
    let creds = &ctx.rules.credentials;
    let host = &route.target.host;
    if let Some(pq) = req.uri().path_and_query()
        && let Err(leak) = creds.check_url(pq.as_str())
    {
        rec.credential = Some(leak.credential);
        return Err(Reason::CredentialLeak);
    }
    if never_credentialed(req.method()) && creds.any_bound_to(host) {
        return Err(Reason::CredentialMethodRefused);
    }
    if !is_upgrade(req) {
        return Ok(None);
    }
    let policy = &ctx.rules.policy;
    // Listed in `network.websocket`: the relay reads the frames (never on the git service
    // port, whose only business is smart HTTP).
    let frames = || {
        (!ctx.git_service() && policy.network.websocket_allowed(host)).then(|| websocket::Session {
            rules: Arc::clone(&ctx.rules),
            host: host.clone(),
            report: matches!(policy.sandbox.mode, airlock_policy::Mode::Report),
            recent: Arc::clone(ctx.shared.interception.recent()),
        })
    };
    upgrade_verdict(req, frames, || {
        // After the `101` of a raw relay every frame is a write nobody judges: only a
        // writable host may carry one.
        ctx.git_service()
            || creds.any_bound_to(host)
            || policy.l7.has_rules_for(host)
            || !(policy.is_writable(host) || policy.is_passthrough(host))
    })
    .map(Some)
}

/// A credential the request would carry (over TLS) that was not configured at start:
/// `credential-missing`, the record naming it. The git credential lets the reads an
/// upstream may answer anonymously through without it (a fetch, a `GET` of the API).
fn check_missing(
    ctx: &Cx<'_>,
    route: &Route,
    scope: GitScope,
    view: &RequestView<'_>,
    rec: &mut Pending,
) -> Result<(), Reason> {
    // A read-only remote's fetch on the service port carries no credential at all.
    if !route.tls || (ctx.git_service() && scope == GitScope::None) {
        return Ok(());
    }
    let anonymous_read = match scope {
        GitScope::None => false,
        GitScope::Read => true,
        GitScope::Service => {
            gitpath::parse(view.path, view.query).is_some_and(|g| g.service == Service::UploadPack)
        }
        GitScope::Api => matches!(view.method, "GET" | "HEAD"),
    };
    let creds = &ctx.rules.credentials;
    match creds.missing_for(view.host, scope, (view.method, view.path), anonymous_read) {
        Some(names) => {
            rec.credential = Some(names);
            Err(Reason::CredentialMissing)
        }
        None => Ok(()),
    }
}

/// Secrets of known formats and the workspace's values in the URL (as sent and decoded) and
/// the agent's headers, on their way to a host that is not their provider's:
/// `foreign-secret`, the detector named in the record's rule (one whose action is `log`
/// goes on, noted on the record: [`detect::Detectors::judge`]). The query's values are
/// also searched joined to those of the last queries to the same host
/// ([`Channel::Query`]), so a value split over two requests is found in the second.
fn check_foreign_secrets(
    ctx: &Cx<'_>,
    route: &Route,
    parts: &http::request::Parts,
    rec: &mut Pending,
) -> Result<(), Reason> {
    let detectors = &ctx.rules.detectors;
    let host = &route.target.host;
    let pq = parts.uri.path_and_query().map_or("", |p| p.as_str());
    // The decoded form only when there is something to decode (no copy per request).
    let decoded = pq
        .contains('%')
        .then(|| airlock_policy::path::percent_decode(pq.as_bytes()));
    let places = std::iter::once(pq.as_bytes())
        .chain(decoded.as_deref())
        .chain(parts.headers.values().map(HeaderValue::as_bytes));
    for bytes in places {
        let v = detectors.judge(bytes, host);
        if let Some(d) = v.refused {
            rec.rule = Some(format!("secret detector {}", d.name));
            return Err(Reason::ForeignSecret);
        }
        v.note(rec);
    }
    if let Some(query) = parts.uri.query().filter(|q| !q.is_empty()) {
        let recent = ctx.shared.interception.recent();
        let values = crate::recent::query_values(query);
        let mut joined = recent.tail(host.as_str(), Channel::Query);
        let skip = joined.len();
        if skip > 0 {
            joined.extend_from_slice(&values);
            let v = detectors.judge_after(&joined, skip, host);
            if let Some(d) = v.refused {
                rec.rule = Some(format!("secret detector {}", d.name));
                return Err(Reason::ForeignSecret);
            }
            v.note(rec);
        }
        recent.push(host.as_str(), Channel::Query, &values);
    }
    Ok(())
}

/// A body read whole: a foreign secret in it is refused, or on an LLM API host (where file
/// contents legitimately go) or by its detector's `redact` action overwritten in place
/// (same length) and the request goes on; one whose action is `log` goes on as it is
/// ([`detect::Detectors::judge_body`]). What went on is noted on the record.
fn check_body_secrets(
    ctx: &Cx<'_>,
    host: &Host,
    bytes: Bytes,
    rec: &mut Pending,
) -> Result<Bytes, Reason> {
    let recent = ctx.shared.interception.recent();
    let before = recent.tail(host.as_str(), Channel::Body);
    let (bytes, v) = ctx.rules.detectors.judge_whole_after(&before, bytes, host);
    if let Some(d) = v.refused {
        rec.rule = Some(format!("secret detector {}", d.name));
        return Err(Reason::ForeignSecret);
    }
    v.note(rec);
    recent.push(host.as_str(), Channel::Body, &bytes);
    Ok(bytes)
}

/// Whether a request body to `host` is measured for signals ([`crate::signal`]): not on
/// an LLM API host (agents send files there as context), not a git push on the service
/// port (a pack is compressed by design), and only when the policy measures any.
fn measures_signals(ctx: &Cx<'_>, host: &Host) -> bool {
    !ctx.git_service() && !detect::llm_host(host) && ctx.rules.policy.signals.any()
}

/// A body read whole: its signals go on the record; one the policy denies refuses the
/// request (in report mode: `report` with the reason, and it goes on).
fn check_signals(ctx: &Cx<'_>, host: &Host, bytes: &[u8], rec: &mut Pending) -> Result<(), Reason> {
    if !measures_signals(ctx, host) {
        return Ok(());
    }
    let knobs = ctx.rules.policy.signals;
    rec.signals = signal::of(knobs, bytes);
    let Some(denied) = rec
        .signals
        .iter()
        .find(|s| s.action(&knobs) == SignalAction::Deny)
        .copied()
    else {
        return Ok(());
    };
    rec.rule = Some(denied.describe());
    if matches!(ctx.rules.policy.sandbox.mode, airlock_policy::Mode::Report) {
        rec.decision = Verdict::Report;
        rec.reason = Some(denied.reason());
        return Ok(());
    }
    Err(denied.reason())
}

/// The credentials on the headers (`Credentials::apply`); the record names what was
/// injected, or the credential a leak belongs to.
fn inject(
    ctx: &Cx<'_>,
    route: &Route,
    headers: &mut http::HeaderMap,
    scope: GitScope,
    view: &RequestView<'_>,
    rec: &mut Pending,
) -> Result<Option<Injected>, Reason> {
    let creds = &ctx.rules.credentials;
    let request = Some((view.method, view.path));
    // On the service port a repository outside `[git] repositories` (a read-only remote) is
    // fetched with no credential: the bound headers are still removed, nothing is added.
    let anonymous = ctx.git_service() && scope == GitScope::None;
    if anonymous {
        headers.remove(header::AUTHORIZATION);
    }
    let add = route.tls && !anonymous;
    match creds.apply_to(&route.target.host, headers, scope, add, request) {
        Ok(injected) => {
            rec.credential = injected.as_ref().map(|i| i.names.clone());
            Ok(injected)
        }
        Err(leak) => {
            rec.credential = Some(leak.credential);
            tracing::warn!("credential leak refused: {}", leak.place);
            Err(Reason::CredentialLeak)
        }
    }
}

/// What a request body's journey is measured and flagged with.
#[derive(Default)]
struct Tally {
    meter: Arc<Meter>,
    leak_flag: CutFlag,
    signals: SignalNote,
    /// Secrets a streamed body let through (redacted, logged).
    secrets: detect::Note,
}

/// The body as it will be sent: judged (read up to the rule's cap), searched before
/// anything is sent (small and announced), searched as it streams, or streamed untouched.
/// A body in a `Content-Encoding` is searched decoded (bounded: [`decode::REQUEST`]); read
/// whole it goes as sent unless a redaction rewrote it, streamed it goes upstream decoded
/// (what was searched is what is sent); an encoding the proxy cannot read is refused. On a request that received a credential, `Accept-Encoding` is cut to
/// the codings the proxy reads, so that the response can be decoded and scrubbed.
#[allow(clippy::too_many_arguments)] // the request's parts, each used once
async fn prepare_body(
    ctx: &Cx<'_>,
    body: InBody,
    headers: &mut http::HeaderMap,
    body_cap: Option<usize>,
    view: &RequestView<'_>,
    injected: Option<&Injected>,
    tally: &Tally,
    rec: &mut Pending,
) -> Result<UpBody, Reason> {
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
            rec.rule = Some(unsupported.to_string());
            return Err(Reason::ContentEncodingUnsupported);
        }
    };
    let host = view.host;
    if let Some(cap) = body_cap {
        let bytes = judged_body(ctx, body, headers, cap, view, rec).await?;
        if scan_body && let Some(tag) = creds.leak_needles().and_then(|n| n.find(&bytes)) {
            rec.credential = Some(creds.name_of(tag).to_owned());
            return Err(Reason::CredentialLeak);
        }
        let bytes = check_body_secrets(ctx, host, bytes, rec)?;
        check_signals(ctx, host, &bytes, rec)?;
        tally.meter.add_up(bytes.len());
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
        let decoded = decoded_whole(&codings, sent.clone(), rec)?;
        if let Some(tag) = body_needles.and_then(|n| n.find(&decoded)) {
            rec.credential = Some(creds.name_of(tag).to_owned());
            return Err(Reason::CredentialLeak);
        }
        let checked = check_body_secrets(ctx, host, decoded.clone(), rec)?;
        check_signals(ctx, host, &checked, rec)?;
        // Nothing rewritten: the body goes as the agent sent it (encoded or not); a
        // redaction goes decoded, its headers saying so.
        let bytes = if checked.as_ptr() == decoded.as_ptr() {
            sent
        } else {
            decode::mark_decoded(headers);
            checked
        };
        tally.meter.add_up(bytes.len());
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

/// A body read whole, decoded as its codings say (empty: as it is), at most [`LLM_BODY`]
/// decoded bytes ([`decode::REQUEST`]'s ratio within it).
fn decoded_whole(codings: &[Coding], bytes: Bytes, rec: &mut Pending) -> Result<Bytes, Reason> {
    if codings.is_empty() {
        return Ok(bytes);
    }
    let bounds = decode::Bounds {
        total: LLM_BODY as u64,
        ..decode::REQUEST
    };
    match decode::decode_all(codings, &bytes, bounds) {
        Ok(decoded) => Ok(Bytes::from(decoded)),
        Err(e) => Err(unreadable(&e).describe(rec)),
    }
}

/// A body that did not decode, as the refusal it is.
fn unreadable(e: &decode::DecodeError) -> Cut {
    let reason = match e {
        decode::DecodeError::Bomb => Reason::DecompressionBomb,
        decode::DecodeError::Corrupt(_) => Reason::MalformedRequest,
    };
    Cut::Unreadable(reason, e.to_string())
}

/// A body a rule judges: not content-encoded, read whole up to `cap`, then judged.
async fn judged_body(
    ctx: &Cx<'_>,
    body: InBody,
    headers: &http::HeaderMap,
    cap: usize,
    view: &RequestView<'_>,
    rec: &mut Pending,
) -> Result<Bytes, Reason> {
    if headers.contains_key(header::CONTENT_ENCODING) {
        rec.rule = Some("a judged body must not be content-encoded".into());
        return Err(Reason::RequestDeniedByRule);
    }
    let bytes = match read_capped(body, cap, ctx.shared.limits.idle_timeout).await {
        Ok(b) => b,
        Err(reason) => {
            rec.rule = Some(format!("body judged up to {cap} bytes"));
            return Err(reason);
        }
    };
    apply_l7(ctx.rules.policy.judge_body(view, &bytes), rec)?;
    Ok(bytes)
}

/// The request as sent: origin-form (the path and query as received, no re-parse),
/// HTTP/1.1, `Host` from the checked target, and the upgrade headers of an allowed upgrade.
fn origin_form(
    mut parts: http::request::Parts,
    route: &Route,
    upgrade: Option<HeaderValue>,
    body: UpBody,
) -> Result<Request<UpBody>, Reason> {
    parts.uri = match parts.uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    };
    parts.version = Version::HTTP_11;
    let hv = route.host_header.clone().ok_or(Reason::InvalidHost)?;
    parts.headers.insert(header::HOST, hv);
    if let Some(u) = upgrade {
        parts.headers.insert(header::UPGRADE, u);
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        // No compression (permessage-deflate) nor any other extension: the frames stay
        // plain bytes the relay can read.
        parts.headers.remove(header::SEC_WEBSOCKET_EXTENSIONS);
    }
    Ok(Request::from_parts(parts, body))
}

/// Writes the record's `open` line, sends the request on a kept-alive or new upstream
/// connection, and answers with the response (or the relay of an upgrade).
async fn forward(
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
            Err(reason) => return ctx.deny(rec, reason, route).await,
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
        Err(e) => return send_failed(ctx, &e, addr, &leak_flag, route, rec).await,
    };
    rec.status = Some(resp.status().as_u16());
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
    respond(ctx, rparts, rbody, tally, injected.then_some(codings), rec)
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

/// A `101`: both sides are relayed from now on, frame by frame (`websocket`) or as raw
/// bytes (the record is written when the relay ends); the agent gets the `101` with its
/// upgrade headers.
///
/// The relay is `registration`'s (`conns`): a policy reload that refuses the host ends it.
fn relay_upgrade(
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

/// The response streams back as it arrives, counted, its record written when it ends.
/// When a credential was injected (`injected`: the response's codings) it is scrubbed of
/// the real secrets, decoded first when it is encoded (it then reaches the agent decoded:
/// [`decode::mark_decoded`]); a coding that fails to decode, or expands past
/// [`decode::RESPONSE`], cuts it, the record saying why.
fn respond(
    ctx: &Cx<'_>,
    mut rparts: http::response::Parts,
    rbody: Incoming,
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

/// Reads at most `cap` bytes of `body`, with `idle` as the deadline for the whole body.
async fn read_capped<B>(body: B, cap: usize, idle: Duration) -> Result<Bytes, Reason>
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

/// One way of searching a streamed request body ([`CheckedBody`]).
trait RequestCheck: Unpin {
    /// What of `data` may go now (a tail that could start a secret is held back), or why
    /// the body must be cut.
    ///
    /// # Errors
    /// The [`Cut`].
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut>;
    /// What was held back, at the end of the body.
    ///
    /// # Errors
    /// The [`Cut`].
    fn finish(&mut self) -> Result<Bytes, Cut>;
}

/// A request body searched as it streams by a [`RequestCheck`]: bytes go on as the check
/// releases them; at a cut the body fails (hyper then abandons the upstream request) and
/// the reason is left in the flag. Request trailers are dropped (never searched, never
/// sent). The announced length holds: a check keeps lengths (redaction) or ends the body.
struct CheckedBody<B, C> {
    inner: B,
    check: C,
    flag: CutFlag,
    done: bool,
    /// Whether what goes on is as long as what came in (false: a decoder; the length is
    /// then unknown, and the upstream request is sent chunked).
    keeps_length: bool,
}

impl<B, C> CheckedBody<B, C> {
    fn new(inner: B, check: C, flag: &CutFlag) -> Self {
        Self {
            inner,
            check,
            flag: Arc::clone(flag),
            done: false,
            keeps_length: true,
        }
    }

    /// The check changes the body's length.
    fn changing_length(mut self) -> Self {
        self.keeps_length = false;
        self
    }

    /// Data that may go (`None`: nothing yet), or the body's error at a cut.
    fn release(&mut self, checked: Result<Bytes, Cut>) -> Option<Result<Frame<Bytes>, BoxError>> {
        match checked {
            Ok(b) if b.is_empty() => None,
            Ok(b) => Some(Ok(Frame::data(b))),
            Err(cut) => {
                let why = cut.reason().as_str();
                let _ = self.flag.set(cut);
                self.done = true;
                Some(Err(format!("request body cut: {why}").into()))
            }
        }
    }
}

impl<B, C> Body for CheckedBody<B, C>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    C: RequestCheck,
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
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    let rest = this.check.finish();
                    this.done = true;
                    return Poll::Ready(this.release(rest));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers: dropped
                    };
                    let checked = this.check.chunk(data);
                    if let Some(out) = this.release(checked) {
                        return Poll::Ready(Some(out));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        if self.keeps_length {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

/// Secrets of known formats and the workspace's values in a streamed request body: the
/// last [`detect::Detectors::hold`] bytes (1 to 3 KiB) are held back until more arrive (or
/// the body ends), so a secret is always seen whole before any byte of it is sent. A
/// foreign secret cuts the body ([`Cut::Secret`]: the request is refused `foreign-secret`);
/// on an LLM API host, or by its detector's `redact` action, it is overwritten in place
/// instead; by `log` it goes on ([`detect::Detectors::judge_body`]). What went on is left in
/// the note for the record. The first bytes are searched joined to the end of what went to
/// the same host before (`before`), and the end of what this body sent is left for the
/// next ([`Channel::Body`]).
struct SecretScan {
    rules: Arc<Rules>,
    host: Host,
    note: detect::Note,
    held: Vec<u8>,
    /// What went to the host before this body: in front of each window until as much as
    /// the hold-back has been released after it (no secret reaches further back).
    before: Vec<u8>,
    /// How much of this body was released.
    sent: usize,
    /// Where what is released is left for the next search to the same host.
    recent: Arc<Recent>,
}

impl SecretScan {
    /// Checks `part` (what was held plus a new chunk) after `before`; returns what may go
    /// now, keeping the tail unless `last`.
    fn pass(&mut self, part: Vec<u8>, last: bool) -> Result<Bytes, Cut> {
        let detectors = &self.rules.detectors;
        let skip = self.before.len();
        let mut window = if skip == 0 {
            part
        } else {
            let mut w = Vec::with_capacity(skip + part.len());
            w.extend_from_slice(&self.before);
            w.extend_from_slice(&part);
            w
        };
        let v = detectors.judge_body_after(&mut window, skip, &self.host);
        if let Some(d) = v.refused {
            return Err(Cut::Secret(d.name.clone()));
        }
        self.note.add(&v);
        if skip > 0 {
            window.drain(..skip);
        }
        let hold = detectors.hold();
        let keep = if last { 0 } else { hold.min(window.len()) };
        self.held = window.split_off(window.len() - keep);
        self.sent += window.len();
        self.recent.push(self.host.as_str(), Channel::Body, &window);
        if !self.before.is_empty() {
            crate::recent::keep_tail(&mut self.before, &window, crate::recent::TAIL);
            if self.sent >= hold {
                self.before.clear();
            }
        }
        Ok(Bytes::from(window))
    }
}

impl RequestCheck for SecretScan {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        let mut window = std::mem::take(&mut self.held);
        window.extend_from_slice(&data);
        self.pass(window, false)
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        let held = std::mem::take(&mut self.held);
        self.pass(held, true)
    }
}

/// A streamed request body in a `Content-Encoding`, decoded as it comes (bounded:
/// [`decode::REQUEST`]); the checks after it read, and the upstream receives, the decoded
/// bytes. A bomb or a coding that does not decode cuts the body ([`Cut::Unreadable`]).
struct DecodeCheck {
    decoder: decode::Decoder,
}

impl DecodeCheck {
    /// `body` decoded when it has codings, else as it is.
    fn around<B>(
        codings: &[Coding],
        body: B,
        tally: &Tally,
    ) -> Result<Either<CheckedBody<B, Self>, B>, Reason> {
        if codings.is_empty() {
            return Ok(Either::Right(body));
        }
        let decoder =
            decode::Decoder::new(codings, decode::REQUEST).map_err(|_| Reason::MalformedRequest)?;
        let check = Self { decoder };
        Ok(Either::Left(
            CheckedBody::new(body, check, &tally.leak_flag).changing_length(),
        ))
    }
}

impl RequestCheck for DecodeCheck {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        self.decoder
            .feed(&data)
            .map(Bytes::from)
            .map_err(|e| unreadable(&e))
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        self.decoder
            .finish()
            .map(Bytes::from)
            .map_err(|e| unreadable(&e))
    }
}

/// The signals of a streamed request body ([`crate::signal`]): bytes go on as they come;
/// a signal the policy denies cuts the body at the chunk that raised it ([`Cut::Signal`];
/// what went before it went, at most `blob_min_bytes` of a run). At the end, or at the
/// cut, the signals are left in the note for the record. Report mode never cuts.
struct SignalCheck {
    analyzer: signal::Analyzer,
    note: SignalNote,
    cut: bool,
}

impl SignalCheck {
    /// `body` measured for signals when [`measures_signals`], else as it is.
    fn around<B>(
        ctx: &Cx<'_>,
        host: &Host,
        body: B,
        tally: &Tally,
    ) -> Either<CheckedBody<B, Self>, B> {
        if !measures_signals(ctx, host) {
            return Either::Right(body);
        }
        let knobs = ctx.rules.policy.signals;
        let check = SignalCheck {
            analyzer: signal::Analyzer::new(knobs),
            note: Arc::clone(&tally.signals),
            cut: !matches!(ctx.rules.policy.sandbox.mode, airlock_policy::Mode::Report),
        };
        Either::Left(CheckedBody::new(body, check, &tally.leak_flag))
    }
}

impl RequestCheck for SignalCheck {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        self.analyzer.feed(&data);
        if self.cut
            && let Some(s) = self.analyzer.denied()
        {
            let _ = self.note.set(self.analyzer.signals());
            return Err(Cut::Signal(s));
        }
        Ok(data)
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        let _ = self.note.set(self.analyzer.signals());
        Ok(Bytes::new())
    }
}

/// Which needle set a streamed request body is searched with.
#[derive(Clone, Copy)]
enum Which {
    All,
    Except(usize),
}

/// The credentials' placeholders and real values in a streamed request body: bytes are
/// released as soon as they cannot be the start of one ([`scan::Stream`]); one found cuts
/// the body ([`Cut::Credential`]).
struct NeedleScan {
    which: Which,
    stream: scan::Stream,
    rules: Arc<Rules>,
}

impl RequestCheck for NeedleScan {
    fn chunk(&mut self, data: Bytes) -> Result<Bytes, Cut> {
        let creds = &self.rules.credentials;
        let needles = match self.which {
            Which::All => creds.leak_needles(),
            Which::Except(i) => creds.leak_needles_except(i),
        };
        let Some(needles) = needles else {
            return Ok(data); // nothing to look for
        };
        self.stream
            .check(needles, data)
            .map_err(|tag| Cut::Credential(creds.name_of(tag).to_owned()))
    }

    fn finish(&mut self) -> Result<Bytes, Cut> {
        Ok(self.stream.finish())
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

/// Why a connection that must be intercepted sent no usable ClientHello: bytes that are not
/// TLS at all (ssh, plain HTTP, a custom protocol) cannot be read, so only a
/// `network.passthrough` host may carry them (`not-inspectable`); a broken TLS hello is
/// `client-tls-failed`.
fn hello_failure(e: &std::io::Error) -> Reason {
    let not_tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| {
            matches!(
                tls,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        });
    if not_tls {
        Reason::NotInspectable
    } else {
        Reason::ClientTlsFailed
    }
}

/// Whether a handshake failed because the client went away (end of stream, reset, broken
/// pipe) rather than because of what it sent.
fn client_left(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
    )
}

/// Terminates the agent's TLS on an intercepted connection to `route.target` and serves
/// its requests. `pre` is the TCP connection already made to the target. Returns how the
/// connection ended, for the connection's audit line (`rec`, written by the caller).
pub(crate) async fn serve_tls<C>(
    client: C,
    ctx: Arc<Ctx>,
    route: Route,
    pre: Option<Connected>,
    rec: &mut Record,
) -> tunnel::End
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::clone(&ctx.shared);
    rec.intercepted = true;
    if let Ok(mut p) = ctx.pre.lock() {
        *p = pre;
    }
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        ReadAhead::new(client),
    );
    // A client that never finishes its handshake is cut at shutdown like any other.
    let mut phase = shared.shutdown.subscribe();
    let hello = tokio::select! {
        r = tokio::time::timeout(shared.limits.header_read_timeout, acceptor) => r,
        () = reached(&mut phase, Phase::Stopping) => return tunnel::End::Shutdown,
    };
    let start = match hello {
        Ok(Ok(s)) => s,
        // Gone before a byte: nothing was refused (report mode keeps its `report`).
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return tunnel::End::Closed;
        }
        Ok(Err(e)) => {
            tracing::debug!("client hello from {}: {e}", ctx.peer);
            rec.decision = Verdict::Deny;
            rec.reason = Some(hello_failure(&e));
            return tunnel::End::Error;
        }
        Err(_) => return tunnel::End::Idle,
    };
    // No fronting: a server name, when sent, must be the checked target.
    if let Some(sni) = start.client_hello().server_name()
        && Host::parse(sni).ok().as_ref() != Some(&route.target.host)
    {
        rec.decision = Verdict::Deny;
        rec.reason = Some(Reason::SniMismatch);
        return tunnel::End::Closed;
    }
    let config = match shared
        .interception
        .leaves
        .server_config(route.target.host.as_str())
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            rec.decision = Verdict::Deny;
            rec.reason = Some(Reason::ClientTlsFailed);
            return tunnel::End::Error;
        }
    };
    let handshake = tokio::select! {
        r = tokio::time::timeout(shared.limits.header_read_timeout, start.into_stream(config)) => r,
        () = reached(&mut phase, Phase::Stopping) => return tunnel::End::Shutdown,
    };
    let tls = match handshake {
        Ok(Ok(t)) => t,
        // Gone in the middle of the handshake: the client left, nothing was refused (its
        // line says `abandoned` when no request went upstream).
        Ok(Err(e)) if client_left(&e) => {
            tracing::debug!("client {} left during its TLS handshake: {e}", ctx.peer);
            return tunnel::End::Closed;
        }
        Ok(Err(e)) => {
            tracing::info!("client TLS with {} failed: {e}", ctx.peer);
            rec.decision = Verdict::Deny;
            rec.reason = Some(Reason::ClientTlsFailed);
            return tunnel::End::Error;
        }
        Err(_) => return tunnel::End::Idle,
    };
    serve_http(tls, ctx, route).await
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{ClientConnection, Connection, ServerConnection};

    /// `host_agrees`' shortcut (a `Host` byte-equal to the route's own value agrees) holds
    /// only if that value reads back as the target: names, IPv4 and IPv6 literals, default
    /// and other ports, both schemes.
    #[test]
    fn the_host_value_sent_upstream_reads_back_as_the_target() {
        for host in ["api.example.com", "203.0.113.7", "2001:db8::1"] {
            for port in [80, 443, 8443] {
                for tls in [false, true] {
                    let target = Target {
                        host: Host::parse(host).unwrap(),
                        port,
                    };
                    let value = host_value(&target, tls);
                    let back = airlock_policy::host::split_host_port(&value, port).unwrap();
                    assert_eq!(back, (target.host.clone(), port), "{value}");
                    let leg = if tls { Leg::Intercepted } else { Leg::Plain };
                    let route = Route::new(target, Vec::new(), leg);
                    assert!(route.host_header.is_some(), "{value}");
                }
            }
        }
    }

    /// Record lengths on the wire after `conn` sends `len` bytes of data.
    fn record_sizes(conn: &mut Connection, len: usize) -> Vec<usize> {
        conn.set_buffer_limit(None);
        std::io::Write::write_all(&mut conn.writer(), &vec![7u8; len]).unwrap();
        let mut wire = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut wire).unwrap();
        }
        let mut sizes = Vec::new();
        let mut rest = &wire[..];
        while rest.len() >= 5 {
            let n = 5 + usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            sizes.push(n);
            rest = &rest[n..];
        }
        assert!(rest.is_empty(), "a cut record: {rest:?}");
        sizes
    }

    /// What `crypto::MAX_FRAGMENT_SIZE` promises, read off the wire of a real handshake
    /// between the two configurations the proxy uses (the agent-facing leaf, the upstream
    /// client): each side sends a long body in records of exactly 16 KiB plus one for the
    /// remainder.
    #[test]
    fn both_sides_send_full_records_of_exactly_sixteen_kib() {
        let ca = Ca::generate().unwrap();
        let root = ca.cert_der().clone();
        let interception = Interception::new(ca, vec![root]).unwrap();
        let leaf = interception.leaves.server_config("a.example").unwrap();
        let name = ServerName::try_from("a.example").unwrap();
        let mut client = Connection::from(
            ClientConnection::new(Arc::clone(&interception.client), name).unwrap(),
        );
        let mut server = Connection::from(ServerConnection::new(leaf).unwrap());
        // One flight from `from` to `to`.
        let flight = |from: &mut Connection, to: &mut Connection| {
            let mut wire = Vec::new();
            while from.wants_write() {
                from.write_tls(&mut wire).unwrap();
            }
            to.read_tls(&mut &wire[..]).unwrap();
            to.process_new_packets().unwrap();
        };
        while client.is_handshaking() || server.is_handshaking() {
            flight(&mut client, &mut server);
            flight(&mut server, &mut client);
        }
        assert_eq!(
            server.negotiated_cipher_suite().map(|s| s.suite()),
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
        let full = 100_000 / (crate::crypto::MAX_FRAGMENT_SIZE - 5);
        for (side, conn) in [("leaf", &mut server), ("upstream client", &mut client)] {
            let sizes = record_sizes(conn, 100_000);
            assert_eq!(sizes.len(), full + 1, "{side}: {sizes:?}");
            assert!(
                sizes[..full].iter().all(|&n| n == 16_384),
                "{side}: {sizes:?}"
            );
        }
    }
}
