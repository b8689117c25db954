//! airlock's egress proxy: the one process allowed to leave the container.
//!
//! It answers the agent on loopback only: an explicit HTTP proxy (`CONNECT` tunnels,
//! absolute-form plain HTTP, base-URL mode `/https/<host>/...`), a health endpoint, a
//! transparent listener for redirected TCP (host from TLS SNI or HTTP `Host`), a DNS filter
//! that answers allowed names with addresses it resolved itself, and the git service port
//! (the git API's only way out). For every request it canonicalises the host, asks the one
//! admission every way in shares ([`admission`]: the session's rate and budgets, the
//! policy, the name, the upstream's circuit), resolves the name **once** with its own resolver, checks every
//! address against the hard-deny ranges, connects to a checked address and audits the
//! decision as one JSON line.
//!
//! Every allowed host that is not declared `network.passthrough` is **intercepted**: the
//! agent's TLS is terminated with a per-host leaf of the appliance CA ([`ca`], [`leaf`]),
//! each request is judged (method, rules, secrets) and its credential injected, and it goes
//! on over verified TLS ([`intercept`], [`credentials`]). Each check returns what it found
//! (the `finding` module), and the request's audit line is written in one place. Real
//! secrets live only in this process's memory; a passthrough host is tunnelled untouched
//! and audited as uninspected.
//!
//! It does not: set up the firewall, parse the policy file (that is `airlock-policy`), read
//! secrets from the environment (the entrypoint hands them over in a private file), decide
//! what a git push may do (the git API does; on the service port the proxy takes only the
//! ref updates the git API's ticket signs, and never a deletion, a tag, a protected branch
//! or another sandbox's branch: the `service` module), or inspect what it tunnels.
//!
//! The binary wires the real resolver and connector; tests build a [`Proxy`] with their own
//! [`upstream::Resolve`] / [`upstream::Connect`] seams, which the command line cannot reach.

pub mod admin;
pub mod admission;
mod agent_api;
pub mod approvals;
pub mod audit;
mod body;
pub mod breaker;
pub mod budget;
pub mod ca;
pub mod clock;
pub mod config;
mod connection;
pub mod conns;
pub mod credentials;
pub mod crypto;
pub mod decide;
pub mod decode;
pub mod deny;
pub mod detect;
pub mod dns;
pub mod events;
mod explicit;
mod finding;
pub mod gate;
pub mod gitfetch;
pub mod gitpath;
pub mod grants;
pub mod hop;
pub mod identity;
pub mod intercept;
pub mod leaf;
pub mod legible;
pub mod limits;
pub mod metrics;
pub mod names;
pub mod normalize;
pub mod pool;
pub mod rate;
mod read_ahead;
pub mod receive_pack;
pub mod recent;
mod replace;
pub mod revision;
pub mod scan;
mod service;
pub mod shutdown;
pub mod signal;
pub mod snapshot;
pub mod sniff;
pub mod transparent;
pub mod tunnel;
pub mod upstream;
pub mod usage;
pub mod websocket;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::audit::Audit;
use crate::limits::{Limits, Slots};
use crate::shutdown::{Phase, Shutdown};
use crate::upstream::Upstreams;

/// State every connection task shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The policy, credentials and detectors: one [`snapshot::Snapshot::load`] per
    /// request or connection.
    pub rules: snapshot::Snapshot<snapshot::Rules>,
    pub upstreams: Upstreams,
    pub audit: Audit,
    /// The session, sandbox and container every audit line names.
    pub who: crate::audit::Who,
    pub limits: Limits,
    pub shutdown: Shutdown,
    pub slots: Arc<Slots>,
    /// The git service port's own slots: an agent holding all of its connections cannot
    /// starve the git API's pushes.
    pub service_slots: Arc<Slots>,
    pub original_dst: Arc<dyn transparent::OriginalDst>,
    /// UDP DNS queries being answered (they hold no connection slot).
    pub dns_inflight: Arc<tokio::sync::Semaphore>,
    pub identity: Arc<dyn identity::PeerIdentity>,
    /// The agent's uid: its sessions' (they are found by address, not by socket).
    pub agent_uid: Option<u32>,
    pub interception: Arc<intercept::Interception>,
    /// Idle upstream connections for the next client connection to the same target.
    pub pool: pool::Pool<intercept::Live>,
    /// Query-name bytes carried below each wildcard-allowed zone (`names`).
    pub dns_budget: names::Budget,
    /// The rate limits' buckets (`rate`).
    pub rate: rate::Rate,
    /// The upstreams' circuits (`breaker`).
    pub breakers: breaker::Breakers,
    /// The hourly upload and request budgets (`budget`).
    pub budgets: budget::Budgets,
    /// The operator's inbox of asked hosts and its answers (`approvals`).
    pub approvals: approvals::Approvals,
    /// hyper's head-read timeout clock for every client connection.
    pub head_timer: gate::HeadTimer,
    /// The open connections a policy reload re-judges.
    pub conns: Arc<conns::Conns>,
    /// The audit lines as written (the event stream's ring): the agent API's own denials.
    pub hub: Arc<events::Hub>,
}

impl Shared {
    /// Who is calling from `peer` (see [`identity::caller`]).
    pub(crate) fn caller(
        &self,
        proto: identity::Proto,
        peer: SocketAddr,
        local: Option<SocketAddr>,
    ) -> identity::Caller {
        identity::caller(&*self.identity, self.agent_uid, proto, peer, local)
    }

    /// What the admission counts and asks on behalf of the agent session `who`.
    pub(crate) const fn pace(&self, who: limits::Client) -> admission::Pace<'_> {
        admission::Pace {
            rate: &self.rate,
            breakers: &self.breakers,
            budgets: &self.budgets,
            approvals: &self.approvals,
            who,
        }
    }
}

/// Everything a proxy instance needs.
#[derive(Debug)]
pub struct Proxy {
    /// The policy, credentials and detectors requests are decided under.
    pub rules: snapshot::Rules,
    /// Session id, sandbox and container (every audit line, the health answer).
    pub who: crate::audit::Who,
    /// Resolver, connector, connect timeout.
    pub upstreams: Upstreams,
    /// Audit producer handle.
    pub audit: Audit,
    /// Resource limits.
    pub limits: Limits,
    /// Where the explicit proxy listens (`channels::explicit_addr()` in production).
    pub explicit_addr: SocketAddr,
    /// Where the transparent listener listens (`channels::transparent_addr()`), if at all.
    pub transparent_addr: Option<SocketAddr>,
    /// Where the DNS filter listens, UDP and TCP (`channels::dns_addr()`), if at all.
    pub dns_addr: Option<SocketAddr>,
    /// Who owns each client socket ([`identity::SockDiag`] in production).
    pub identity: Arc<dyn identity::PeerIdentity>,
    /// The agent's uid, when known: its sessions' connections carry it (the admin API's
    /// sessions too).
    pub agent_uid: Option<u32>,
    /// How the transparent listener learns a connection's original destination
    /// ([`transparent::SoOriginalDst`] in production).
    pub original_dst: Arc<dyn transparent::OriginalDst>,
    /// The CA and its leaves, the upstream TLS roots.
    pub interception: Arc<intercept::Interception>,
    /// Where the git service port listens (`channels::git_service_addr()`), if at all.
    pub git_service_addr: Option<SocketAddr>,
    /// The admin API, if served.
    pub admin: Option<AdminSetup>,
}

/// The admin API's socket and what it serves from ([`admin`]).
#[derive(Debug)]
pub struct AdminSetup {
    /// The bound socket (PID 1 binds it and hands it over).
    pub listener: std::os::unix::net::UnixListener,
    /// Who may connect besides root.
    pub operators: admin::peer::Operators,
    /// Where PID 1's readiness record is (a directory holding `status.json`).
    pub status_dir: Option<std::path::PathBuf>,
    /// The policy revision the proxy starts with.
    pub revisions: revision::Revisions,
}

/// A started proxy.
#[derive(Debug)]
pub struct Running {
    /// The explicit proxy's bound address (useful when started on port 0).
    pub explicit_addr: SocketAddr,
    /// The transparent listener's bound address, when started.
    pub transparent_addr: Option<SocketAddr>,
    /// The DNS filter's bound address (UDP; TCP on the same port), when started.
    pub dns_addr: Option<SocketAddr>,
    /// The git service port's bound address, when started.
    pub git_service_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    listeners: Vec<JoinHandle<()>>,
    /// The lines written to the audit log, as the event stream carries them.
    pub hub: Arc<events::Hub>,
    /// The counters the admin API serves.
    pub metrics: Arc<metrics::Metrics>,
}

impl Proxy {
    /// Binds the listeners and starts serving. Returns once the proxy accepts connections.
    ///
    /// # Errors
    /// When a listener cannot be bound.
    pub async fn start(self) -> io::Result<Running> {
        let listener = TcpListener::bind(self.explicit_addr).await?;
        let explicit_addr = listener.local_addr()?;
        let transparent = match self.transparent_addr {
            Some(a) => Some(TcpListener::bind(a).await?),
            None => None,
        };
        let transparent_addr = transparent
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;
        let service = match self.git_service_addr {
            Some(a) => Some(TcpListener::bind(a).await?),
            None => None,
        };
        let git_service_addr = service.as_ref().map(TcpListener::local_addr).transpose()?;
        let dns = match self.dns_addr {
            Some(a) => Some(bind_dns(a).await?),
            None => None,
        };
        let dns_addr = dns.as_ref().map(|(u, _)| u.local_addr()).transpose()?;
        let slots = Slots::new(&self.limits);
        let service_slots = Slots::service(&self.limits);
        let shutdown = Shutdown::new();
        let head_timer = gate::HeadTimer::new(self.limits.header_read_timeout);
        let hub = Arc::new(events::Hub::new());
        let metrics = Arc::new(metrics::Metrics::default());
        self.audit.observe(Arc::clone(&hub), Arc::clone(&metrics));
        let admin = match self.admin {
            Some(a) => {
                a.listener.set_nonblocking(true)?;
                let listener = tokio::net::UnixListener::from_std(a.listener)?;
                let state = admin::Admin {
                    operators: a.operators,
                    status_dir: a.status_dir,
                    hub: Arc::clone(&hub),
                    metrics: Arc::clone(&metrics),
                    revisions: a.revisions,
                    started_at_ms: admin::now_ms(),
                    agent_uid: self.agent_uid,
                };
                Some((listener, Arc::new(state)))
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            rules: snapshot::Snapshot::new(self.rules),
            upstreams: self.upstreams.with_phase(shutdown.subscribe()),
            audit: self.audit,
            who: self.who,
            limits: self.limits,
            shutdown,
            dns_inflight: Arc::new(tokio::sync::Semaphore::new(dns::MAX_UDP_INFLIGHT)),
            slots,
            service_slots,
            original_dst: self.original_dst,
            identity: self.identity,
            agent_uid: self.agent_uid,
            interception: self.interception,
            pool: pool::Pool::default(),
            dns_budget: names::Budget::default(),
            rate: rate::Rate::default(),
            breakers: breaker::Breakers::default(),
            budgets: budget::Budgets::default(),
            approvals: approvals::Approvals::default(),
            head_timer,
            conns: Arc::new(conns::Conns::default()),
            hub: Arc::clone(&hub),
        });
        let mut listeners = vec![tokio::spawn(explicit::serve(
            listener,
            Arc::clone(&shared),
            explicit::Port::Explicit,
        ))];
        if let Some(s) = service {
            listeners.push(tokio::spawn(explicit::serve(
                s,
                Arc::clone(&shared),
                explicit::Port::GitService,
            )));
        }
        if let Some(t) = transparent {
            listeners.push(tokio::spawn(transparent::serve(t, Arc::clone(&shared))));
        }
        if let Some((udp, tcp)) = dns {
            listeners.push(tokio::spawn(dns::serve_udp(udp, Arc::clone(&shared))));
            listeners.push(tokio::spawn(dns::serve_tcp(tcp, Arc::clone(&shared))));
        }
        if let Some((listener, state)) = admin {
            listeners.push(tokio::spawn(admin::serve(
                listener,
                Arc::clone(&shared),
                state,
            )));
        }
        Ok(Running {
            explicit_addr,
            transparent_addr,
            dns_addr,
            git_service_addr,
            shared,
            listeners,
            hub,
            metrics,
        })
    }
}

/// UDP and TCP on the same port. On port 0 the port UDP got may already be taken for TCP
/// (by any other socket): try a few times.
async fn bind_dns(addr: SocketAddr) -> io::Result<(tokio::net::UdpSocket, TcpListener)> {
    let mut attempt = 0;
    loop {
        let udp = tokio::net::UdpSocket::bind(addr).await?;
        match TcpListener::bind(udp.local_addr()?).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if addr.port() != 0 || attempt >= 8 => return Err(e),
            Err(_) => attempt += 1,
        }
    }
}

impl Running {
    /// Makes `rules` the policy, credentials and detectors of every request and connection
    /// that starts from now on; what is in flight finishes under the rules it started with
    /// ([`snapshot`]). The control plane's reload is this call. Returns the rules replaced.
    pub fn replace_rules(&self, rules: snapshot::Rules) -> Arc<snapshot::Rules> {
        self.shared.rules.replace(rules)
    }

    /// The rules new requests and connections start with.
    #[must_use]
    pub fn rules(&self) -> Arc<snapshot::Rules> {
        self.shared.rules.load()
    }

    /// Stops accepting, lets in-flight work finish for the grace period, then cuts what is
    /// left (tunnels are audited as `close-shutdown`) and waits for the audit lines of the
    /// cut work to be queued. Flushing the log is the caller's last step
    /// (`AuditWriter::finish`).
    pub async fn stop(self) {
        let shared = self.shared;
        shared.shutdown.advance(Phase::Draining);
        for l in self.listeners {
            let _ = l.await;
        }
        let grace = shared.limits.shutdown_grace;
        let (agents, service) = tokio::join!(
            shared.slots.wait_idle(grace),
            shared.service_slots.wait_idle(grace)
        );
        if !(agents && service) {
            tracing::info!(
                "grace over with {} connections open: cutting them",
                shared.slots.in_use() + shared.service_slots.in_use()
            );
        }
        shared.shutdown.advance(Phase::Stopping);
        // Pending lookups and connects give up now and audit their decision; wait for that.
        let _ = shared
            .slots
            .wait_idle(std::time::Duration::from_millis(500))
            .await;
        let _ = shared
            .service_slots
            .wait_idle(std::time::Duration::from_millis(500))
            .await;
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            shared
                .dns_inflight
                .acquire_many(u32::try_from(dns::MAX_UDP_INFLIGHT).unwrap_or(u32::MAX)),
        )
        .await;
        shared.audit.flush().await;
    }
}
