//! The explicit HTTP proxy (`HTTP(S)_PROXY`): `CONNECT` tunnels, absolute-form plain HTTP,
//! and the health endpoint. Every decision is audited exactly once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use airlock_channels::HEALTH_PATH;
use airlock_policy::reason::Reason;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1 as client_http1;
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::Shared;
use crate::audit::{Kind, Record, Verdict};
use crate::body::{AuditOnDrop, Counted};
use crate::decide::{self, Target};
use crate::deny::{self, ProxyBody};
use crate::hop;
use crate::identity::Proto;
use crate::limits::{Client, Slot};
use crate::shutdown::{Phase, accept_until_draining, reached};
use crate::sniff::{self, Sniff};
use crate::tunnel::{self, Dir, Meter, Metered};

/// Accepts on `listener` until draining starts.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut phase = shared.shutdown.subscribe();
    while let Some((stream, peer)) = accept_until_draining(&listener, &mut phase, "explicit").await
    {
        let uid = stream
            .local_addr()
            .ok()
            .and_then(|local| shared.identity.uid(Proto::Tcp, peer, local));
        match shared.slots.try_take(Client::of(uid, peer)) {
            Ok(slot) => {
                tokio::spawn(serve_conn(
                    stream,
                    peer,
                    uid,
                    Arc::clone(&shared),
                    Arc::new(slot),
                    None,
                ));
            }
            Err(reason) => {
                tokio::spawn(refuse(stream, peer, uid, Arc::clone(&shared), reason));
            }
        }
    }
}

/// Answers a connection we have no slot for, without reading it, and audits that.
async fn refuse(
    mut stream: TcpStream,
    peer: SocketAddr,
    uid: Option<u32>,
    shared: Arc<Shared>,
    reason: Reason,
) {
    let mut rec = Record::new(
        Arc::clone(&shared.session),
        SystemTime::now(),
        Kind::Http,
        Some(peer),
    );
    rec.uid = uid;
    rec.reason = Some(reason.as_str());
    crate::transparent::answer_and_close(&mut stream, &deny::raw_denial(reason, "", 0)).await;
    shared.audit.emit(rec).await;
}

/// The per-connection upstream kept for plain-HTTP keep-alive: same host and port only.
struct Pooled {
    host: String,
    port: u16,
    addr: SocketAddr,
    local_port: Option<u16>,
    sender: client_http1::SendRequest<ProxyBody>,
}

struct ConnState {
    shared: Arc<Shared>,
    peer: SocketAddr,
    uid: Option<u32>,
    /// Transparent HTTP: the original destination every request must resolve to and go to.
    pin: Option<SocketAddr>,
    slot: Arc<Slot>,
    pooled: Mutex<Option<Pooled>>,
    requests: AtomicU64,
}

/// Serves one client connection with hyper. `pin` is set for plain HTTP arriving on the
/// transparent listener: requests are then origin-form, named by their `Host` header, and
/// may only go to that original destination.
pub(crate) async fn serve_conn(
    stream: TcpStream,
    peer: SocketAddr,
    uid: Option<u32>,
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    pin: Option<SocketAddr>,
) {
    let conn_kind = if pin.is_some() {
        Kind::Transparent
    } else {
        Kind::Http
    };
    let started = SystemTime::now();
    let read_meter = Arc::new(Meter::new());
    let io = TokioIo::new(Metered::new(stream, Arc::clone(&read_meter), Dir::Up));
    let state = Arc::new(ConnState {
        shared: Arc::clone(&shared),
        peer,
        uid,
        pin,
        slot,
        pooled: Mutex::new(None),
        requests: AtomicU64::new(0),
    });
    let svc_state = Arc::clone(&state);
    let svc = service_fn(move |req| {
        let st = Arc::clone(&svc_state);
        async move { Ok::<_, Infallible>(handle(st, req).await) }
    });
    let limits = &shared.limits;
    let mut builder = server_http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true);
    let conn = builder.serve_connection(io, svc).with_upgrades();
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
        let served = state.requests.load(Ordering::Relaxed);
        let reason = if e.is_parse_too_large() {
            Some(Reason::RequestTooLarge)
        } else if e.is_parse() {
            Some(Reason::MalformedRequest)
        } else if e.is_timeout() && served == 0 && read_meter.up() > 0 {
            // A request head that never completed: slowloris. (An idle keep-alive
            // connection timing out between requests is not a decision.)
            Some(Reason::MalformedRequest)
        } else {
            None
        };
        if let Some(reason) = reason {
            let mut rec = Record::new(Arc::clone(&shared.session), started, conn_kind, Some(peer));
            rec.uid = uid;
            rec.reason = Some(reason.as_str());
            rec.event = Some(if e.is_timeout() {
                "header-timeout"
            } else {
                "parse-error"
            });
            rec.bytes_up = read_meter.up();
            rec.duration_ms = read_meter.elapsed_ms();
            shared.audit.emit(rec).await;
        } else {
            tracing::debug!("client {peer}: {e}");
        }
    }
}

async fn handle(st: Arc<ConnState>, req: Request<Incoming>) -> Response<ProxyBody> {
    st.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(orig) = st.pin {
        return transparent_http(st, req, orig).await;
    }
    if req.method() == Method::CONNECT {
        return connect(st, req).await;
    }
    if req.uri().authority().is_none() {
        if req.method() == Method::GET && req.uri().path() == HEALTH_PATH {
            return deny::health(&st.shared.session);
        }
        let mut rec = record(&st, Kind::Http, &req);
        rec.path = Some(req.uri().path().chars().take(1024).collect());
        return deny_now(&st, rec, Reason::MalformedRequest, "", 0).await;
    }
    forward(st, req).await
}

fn record(st: &ConnState, kind: Kind, req: &Request<Incoming>) -> Record {
    let mut rec = Record::new(
        Arc::clone(&st.shared.session),
        SystemTime::now(),
        kind,
        Some(st.peer),
    );
    rec.uid = st.uid;
    rec.method = Some(req.method().as_str().chars().take(32).collect());
    rec
}

async fn deny_now(
    st: &ConnState,
    mut rec: Record,
    reason: Reason,
    host: &str,
    port: u16,
) -> Response<ProxyBody> {
    rec.decision = Verdict::Deny;
    rec.reason = Some(reason.as_str());
    st.shared.audit.emit(rec).await;
    deny::denial(reason, host, port)
}

/// Policy, then resolve once and check, shared by CONNECT and plain HTTP. On success the
/// record carries the verdict, rule and (for report mode) the reason.
async fn admit(
    st: &ConnState,
    rec: &mut Record,
    target: &Target,
) -> Result<Vec<std::net::IpAddr>, Reason> {
    rec.host = Some(target.host.as_str().to_owned());
    rec.port = Some(target.port);
    let d = decide::decide(&st.shared.policy, target);
    rec.rule.clone_from(&d.rule);
    rec.decision = d.verdict;
    rec.reason = d.reason.map(|r| r.as_str());
    if let (false, Some(reason)) = (d.passes(), d.reason) {
        return Err(reason);
    }
    st.shared.upstreams.resolve_checked(target).await
}

async fn connect(st: Arc<ConnState>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let mut rec = record(&st, Kind::Connect, &req);
    let meter = Arc::new(Meter::new());
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let target = match decide::connect_target(&authority) {
        Ok(t) => t,
        Err(rej) => {
            rec.host = Some(rej.raw_host.clone());
            return deny_now(&st, rec, rej.reason, &rej.raw_host, 0).await;
        }
    };
    let host = target.host.as_str().to_owned();
    let addrs = match admit(&st, &mut rec, &target).await {
        Ok(a) => a,
        Err(reason) => return deny_now(&st, rec, reason, &host, target.port).await,
    };
    let upstream = match st
        .shared
        .upstreams
        .connect_checked(&addrs, target.port)
        .await
    {
        Ok(c) => c,
        Err(reason) => return deny_now(&st, rec, reason, &host, target.port).await,
    };
    rec.upstream = Some(upstream.addr);
    rec.upstream_local_port = upstream.local_port;
    rec.event = Some("close");

    let on_upgrade = hyper::upgrade::on(&mut req);
    let shared = Arc::clone(&st.shared);
    let slot = Arc::clone(&st.slot);
    tokio::spawn(async move {
        let _slot = slot; // the tunnel counts against the client's connection cap
        let end = match on_upgrade.await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                let mut up = upstream.stream;
                match inspect_tunnel(
                    &mut client,
                    &mut up,
                    &target,
                    &meter,
                    shared.limits.idle_timeout,
                )
                .await
                {
                    Ok(()) => {
                        tunnel::relay(
                            client,
                            up,
                            Arc::clone(&meter),
                            shared.limits.idle_timeout,
                            shared.shutdown.subscribe(),
                        )
                        .await
                    }
                    Err(Inspect::Refused(reason)) => {
                        rec.decision = Verdict::Deny;
                        rec.reason = Some(reason.as_str());
                        tunnel::End::Closed
                    }
                    Err(Inspect::Ended(end)) => end,
                }
            }
            Err(e) => {
                tracing::debug!("upgrade failed: {e}");
                tunnel::End::Error
            }
        };
        rec.event = Some(end.as_str());
        rec.bytes_up = meter.up();
        rec.bytes_down = meter.down();
        rec.duration_ms = meter.elapsed_ms();
        shared.audit.emit(rec).await;
    });
    Response::new(deny::full(bytes::Bytes::new()))
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
        return deny_now(&st, rec, reason, "", orig.port()).await;
    };
    let raw = String::from_utf8_lossy(value.as_bytes()).into_owned();
    rec.host = Some(raw.chars().filter(|c| !c.is_control()).take(300).collect());
    if req.method() == Method::CONNECT {
        return deny_now(&st, rec, Reason::MalformedRequest, &raw, orig.port()).await;
    }
    let target = match airlock_policy::host::split_host_port(&raw, orig.port()) {
        Ok((host, port)) if port == orig.port() => Target { host, port },
        Ok(_) => return deny_now(&st, rec, Reason::HostMismatch, &raw, orig.port()).await,
        Err(_) => return deny_now(&st, rec, Reason::InvalidHost, &raw, orig.port()).await,
    };
    if let Some(a) = req.uri().authority() {
        let same = decide::http_target(req.uri()).is_ok_and(|(t, _)| t == target);
        if !same {
            let host = a.as_str().to_owned();
            return deny_now(&st, rec, Reason::HostMismatch, &host, orig.port()).await;
        }
    }
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let Ok(uri) = format!("http://{}:{}{pq}", bracketed(&target), target.port).parse::<Uri>()
    else {
        return deny_now(&st, rec, Reason::MalformedRequest, &raw, orig.port()).await;
    };
    *req.uri_mut() = uri;
    forward_with(st, req, rec).await
}

async fn forward(st: Arc<ConnState>, req: Request<Incoming>) -> Response<ProxyBody> {
    let rec = record(&st, Kind::Http, &req);
    forward_with(st, req, rec).await
}

async fn forward_with(
    st: Arc<ConnState>,
    req: Request<Incoming>,
    mut rec: Record,
) -> Response<ProxyBody> {
    let meter = Arc::new(Meter::new());
    let uri_len = req.uri().to_string().len();
    if uri_len > st.shared.limits.max_request_line {
        return deny_now(&st, rec, Reason::RequestTooLarge, "", 0).await;
    }
    let (target, path) = match decide::http_target(req.uri()) {
        Ok(x) => x,
        Err(rej) => {
            rec.host = Some(rej.raw_host.clone());
            return deny_now(&st, rec, rej.reason, &rej.raw_host, 0).await;
        }
    };
    rec.path = Some(path);
    let host = target.host.as_str().to_owned();
    let port = target.port;
    let mut addrs = match admit(&st, &mut rec, &target).await {
        Ok(a) => a,
        Err(reason) => return deny_now(&st, rec, reason, &host, port).await,
    };
    if let Some(orig) = st.pin {
        // No fronting by IP: the original destination must be an address of this host.
        if let Err(reason) =
            decide::check_original_destination(orig.ip(), &addrs, &Sniff::Http(None))
        {
            return deny_now(&st, rec, reason, &host, port).await;
        }
        addrs = vec![orig.ip()];
    }

    let (mut sender, addr, local_port) = match reuse(&st, &host, port).await {
        Some(p) => (p.sender, p.addr, p.local_port),
        None => match open(&st, &addrs, port).await {
            Ok(x) => x,
            Err(reason) => return deny_now(&st, rec, reason, &host, port).await,
        },
    };
    rec.upstream = Some(addr);
    rec.upstream_local_port = local_port;

    let out = match outgoing(req, &target, Arc::clone(&meter)) {
        Ok(r) => r,
        Err(reason) => return deny_now(&st, rec, reason, &host, port).await,
    };
    let resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("upstream {addr}: {e}");
            return deny_now(&st, rec, Reason::UpstreamUnreachable, &host, port).await;
        }
    };
    if let Ok(mut pool) = st.pooled.lock() {
        *pool = Some(Pooled {
            host,
            port,
            addr,
            local_port,
            sender,
        });
    }
    let (mut parts, body) = resp.into_parts();
    hop::strip(&mut parts.headers);
    let guard = AuditOnDrop::new(rec, Arc::clone(&meter), st.shared.audit.clone());
    let body = Counted::new(body, meter, Dir::Down)
        .with_audit(guard)
        .boxed();
    Response::from_parts(parts, body)
}

/// The pooled upstream of this client connection, when it goes to the same host and port
/// and is still usable.
async fn reuse(st: &ConnState, host: &str, port: u16) -> Option<Pooled> {
    let taken = st.pooled.lock().ok()?.take()?;
    if taken.host != host || taken.port != port {
        return None;
    }
    let mut p = taken;
    p.sender.ready().await.ok()?;
    Some(p)
}

async fn open(
    st: &ConnState,
    addrs: &[std::net::IpAddr],
    port: u16,
) -> Result<
    (
        client_http1::SendRequest<ProxyBody>,
        SocketAddr,
        Option<u16>,
    ),
    Reason,
> {
    let up = st.shared.upstreams.connect_checked(addrs, port).await?;
    // The upstream connection is closed after `idle_timeout` without a byte either way, so
    // a stalled response cannot hold a slot forever; a stream that keeps moving (SSE, a long
    // download) is never cut.
    let meter = Arc::new(Meter::new());
    let io = TokioIo::new(Metered::new(up.stream, Arc::clone(&meter), Dir::Down));
    let (sender, conn) = client_http1::Builder::new()
        .handshake(io)
        .await
        .map_err(|_| Reason::UpstreamUnreachable)?;
    let slot = Arc::clone(&st.slot);
    let idle = st.shared.limits.idle_timeout;
    let mut phase = st.shared.shutdown.subscribe();
    tokio::spawn(async move {
        let _slot = slot;
        tokio::select! {
            r = conn => if let Err(e) = r {
                tracing::debug!("upstream connection: {e}");
            },
            () = tunnel::idle_watch(&meter, idle) => tracing::debug!("upstream connection idle: closed"),
            () = reached(&mut phase, Phase::Stopping) => {}
        }
    });
    Ok((sender, up.addr, up.local_port))
}

/// The request as sent upstream: origin-form, `Host` from the checked target, hop-by-hop
/// and `Proxy-*` headers removed, body counted.
fn outgoing(
    req: Request<Incoming>,
    target: &Target,
    meter: Arc<Meter>,
) -> Result<Request<ProxyBody>, Reason> {
    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    parts.uri = pq.parse::<Uri>().map_err(|_| Reason::MalformedRequest)?;
    parts.version = Version::HTTP_11;
    hop::strip(&mut parts.headers);
    // The Host header always names the target we checked: a different inner Host cannot
    // smuggle a request to another virtual host on the same address.
    let host_value = if target.port == 80 {
        bracketed(target)
    } else {
        format!("{}:{}", bracketed(target), target.port)
    };
    let hv = HeaderValue::from_str(&host_value).map_err(|_| Reason::InvalidHost)?;
    parts.headers.insert(header::HOST, hv);
    let body = Counted::new(body, meter, Dir::Up).boxed();
    Ok(Request::from_parts(parts, body))
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
