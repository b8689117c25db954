//! One client connection's context ([`Ctx`]) and its upstream connection ([`Live`]), kept
//! alive for the connection and then pooled for the next one to the same target.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use airlock_policy::reason::Reason;
use http::Response;
use hyper::client::conn::http1 as client_http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::UpBody;
use super::route::Route;
use super::tls::tls_reason;
use crate::Shared;
use crate::audit::{Kind, Pending, Record};
use crate::decide::Target;
use crate::deny::{self, ProxyBody};
use crate::identity::Caller;
use crate::limits::Slot;
use crate::pool::{self, Pooled};
use crate::read_ahead::ReadAhead;
use crate::shutdown::{Phase, reached};
use crate::tunnel::{self, Dir, Meter, Metered};
use crate::upstream::Connected;

/// How long a finished client connection's upstream connection may take to become idle
/// and be pooled (its last response is normally over already).
const POOL_SETTLE: Duration = Duration::from_secs(1);

/// One client connection's side of [`exchange`](super::exchange): who, and the upstream kept alive.
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    pub peer: SocketAddr,
    pub caller: Caller,
    pub kind: Kind,
    /// Which listeners' connections it may share: the agent's, or the git service port's.
    pub lane: pool::Lane,
    pub slot: Arc<Slot>,
    pub requests: AtomicU64,
    pub(super) pool: Mutex<Option<Live>>,
    /// A TCP connection already made to the target (CONNECT / transparent), used first.
    pub(super) pre: Mutex<Option<Connected>>,
}

/// An upstream HTTP/1.1 connection and where it goes.
pub(crate) struct Live {
    pub(super) target: Target,
    pub(super) tls: bool,
    pub(super) sender: client_http1::SendRequest<UpBody>,
    pub(super) addr: SocketAddr,
    pub(super) local_port: Option<u16>,
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
        caller: Caller,
        kind: Kind,
        slot: Arc<Slot>,
    ) -> Self {
        Self {
            shared,
            peer,
            caller,
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
        self.caller.stamp(&mut rec);
        rec.method = Some(method.as_str().chars().take(32).collect());
        self.shared.audit.pending(rec)
    }

    pub(super) async fn deny(
        &self,
        rec: Pending,
        reason: Reason,
        route: &Route,
    ) -> Response<ProxyBody> {
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
    pub(super) async fn reuse(&self, route: &Route) -> Option<Live> {
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
    pub(super) async fn open(&self, route: &Route) -> Result<Live, Reason> {
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
