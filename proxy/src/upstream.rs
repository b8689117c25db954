//! Reaching upstream: resolve once, check every address, connect to a checked address.
//!
//! The resolver and the connector are seams ([`Resolve`], [`Connect`]) so that tests can map
//! a name to a listener of their own. The binary always uses [`SystemResolver`] and
//! [`TcpConnect`]; nothing on its command line can swap them.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use airlock_policy::reason::Reason;
use hickory_resolver::TokioResolver;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::shutdown::{Phase, reached};

use crate::decide::{Target, check_addresses};

/// A boxed, sendable future (the seams are object-safe traits).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Name resolution failed (no answer, no such name, timeout).
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {host}: {detail}")]
pub struct ResolveError {
    pub host: String,
    pub detail: String,
}

/// Building the system resolver failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolverSetupError {
    /// The resolv.conf file could not be read.
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// The resolv.conf file could not be parsed.
    #[error("cannot parse {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
    /// The resolver could not be built from the parsed configuration.
    #[error("cannot build a resolver from {path}: {detail}")]
    Build { path: PathBuf, detail: String },
}

/// Resolves a DNS name to addresses.
pub trait Resolve: Send + Sync + 'static {
    /// All A and AAAA addresses of `name` (already canonical, no trailing dot needed).
    fn lookup<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, ResolveError>>;
}

/// Opens a TCP connection to a checked address.
pub trait Connect: Send + Sync + 'static {
    /// Connects to `addr`.
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// The proxy's own resolver: nameservers read once from a resolv.conf file.
#[derive(Debug, Clone)]
pub struct SystemResolver {
    inner: TokioResolver,
}

impl SystemResolver {
    /// Reads `path` (resolv.conf syntax) and builds a resolver that asks those nameservers.
    ///
    /// # Errors
    /// When the file cannot be read or parsed.
    pub fn from_resolv_conf(path: &Path) -> Result<Self, ResolverSetupError> {
        let data = std::fs::read(path).map_err(|source| ResolverSetupError::Read {
            path: path.to_owned(),
            source,
        })?;
        let (mut config, mut opts) = hickory_resolver::system_conf::parse_resolv_conf(&data)
            .map_err(|e| ResolverSetupError::Parse {
                path: path.to_owned(),
                detail: e.to_string(),
            })?;
        // An NXDOMAIN from one nameserver is not final: the next one is asked (hickory 0.25's
        // resolv.conf default; 0.26 trusts the first NXDOMAIN).
        for server in &mut config.name_servers {
            server.trust_negative_responses = false;
        }
        // The proxy must not consult /etc/hosts: the agent-side hosts file is not ours to trust
        // and names are only what the nameservers say.
        opts.use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
        // Search domains would let "internal" silently become "internal.corp.example".
        opts.ndots = 0;
        // Both families: every address of the name is checked (and the DNS filter can answer
        // AAAA); connects still try IPv4 first.
        opts.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
        let inner = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(opts)
            .build()
            .map_err(|e| ResolverSetupError::Build {
                path: path.to_owned(),
                detail: e.to_string(),
            })?;
        Ok(Self { inner })
    }

    /// The underlying resolver (the DNS filter asks it for other record types).
    #[must_use]
    pub const fn inner(&self) -> &TokioResolver {
        &self.inner
    }
}

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, ResolveError>> {
        Box::pin(async move {
            // A fully-qualified name: no search list, ever.
            let fqdn = if name.ends_with('.') {
                name.to_owned()
            } else {
                format!("{name}.")
            };
            match self.inner.lookup_ip(fqdn).await {
                Ok(found) => Ok(found.iter().collect()),
                Err(e) => Err(ResolveError {
                    host: name.to_owned(),
                    detail: e.to_string(),
                }),
            }
        })
    }
}

/// Plain `connect(2)` to the checked address.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnect;

impl Connect for TcpConnect {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(async move {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok(s)
        })
    }
}

/// An open upstream connection and where it goes.
#[derive(Debug)]
pub struct Connected {
    pub stream: TcpStream,
    /// The checked address we connected to.
    pub addr: SocketAddr,
    /// Our source port on that connection.
    pub local_port: Option<u16>,
}

/// Resolver + connector + connect timeout.
#[derive(Clone)]
pub struct Upstreams {
    resolver: Arc<dyn Resolve>,
    connector: Arc<dyn Connect>,
    connect_timeout: Duration,
    /// Set by `Proxy::start`: pending lookups and connects give up at `Phase::Stopping`, so
    /// their decisions are still audited before the log is flushed.
    phase: Option<watch::Receiver<Phase>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl Upstreams {
    /// Makes pending work give up when `phase` reaches [`Phase::Stopping`].
    #[must_use]
    pub fn with_phase(mut self, phase: watch::Receiver<Phase>) -> Self {
        self.phase = Some(phase);
        self
    }

    async fn unless_stopping<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        match &self.phase {
            None => Some(work.await),
            Some(rx) => {
                let mut rx = rx.clone();
                tokio::select! {
                    r = work => Some(r),
                    () = reached(&mut rx, Phase::Stopping) => None,
                }
            }
        }
    }

    /// Builds the seam set.
    #[must_use]
    pub fn new(
        resolver: Arc<dyn Resolve>,
        connector: Arc<dyn Connect>,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            resolver,
            connector,
            connect_timeout,
            phase: None,
        }
    }

    /// Resolves `target` once (IP literals skip resolution) and checks every address.
    ///
    /// # Errors
    /// `resolve-failed`, or the hard-deny reason of any resolved address.
    pub async fn resolve_checked(&self, target: &Target) -> Result<Vec<IpAddr>, Reason> {
        let addrs = match target.host.ip() {
            Some(ip) => vec![ip],
            None => match self
                .unless_stopping(self.resolver.lookup(target.host.as_str()))
                .await
                .unwrap_or_else(|| {
                    Err(ResolveError {
                        host: target.host.as_str().to_owned(),
                        detail: "shutting down".into(),
                    })
                }) {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!("{e}");
                    return Err(Reason::ResolveFailed);
                }
            },
        };
        check_addresses(&addrs)?;
        Ok(addrs)
    }

    /// Connects to the first checked address that answers, within the connect timeout per
    /// attempt. Never resolves again.
    ///
    /// # Errors
    /// `upstream-unreachable` when no address accepted the connection in time.
    pub async fn connect_checked(&self, addrs: &[IpAddr], port: u16) -> Result<Connected, Reason> {
        // IPv4 first: the container's IPv6 is usually off, and a failing v6 attempt would
        // only add latency.
        let ordered = addrs
            .iter()
            .filter(|ip| ip.is_ipv4())
            .chain(addrs.iter().filter(|ip| ip.is_ipv6()));
        for ip in ordered {
            let addr = SocketAddr::new(*ip, port);
            let attempt = tokio::time::timeout(self.connect_timeout, self.connector.connect(addr));
            let Some(attempt) = self.unless_stopping(attempt).await else {
                return Err(Reason::UpstreamUnreachable);
            };
            match attempt {
                Ok(Ok(stream)) => {
                    let local_port = stream.local_addr().ok().map(|a| a.port());
                    return Ok(Connected {
                        stream,
                        addr,
                        local_port,
                    });
                }
                Ok(Err(e)) => tracing::debug!("connect {addr}: {e}"),
                Err(_) => tracing::debug!("connect {addr}: timed out"),
            }
        }
        Err(Reason::UpstreamUnreachable)
    }
}
