//! The transparent listener: the agent's other outbound TCP, redirected here by the
//! firewall (`nat OUTPUT REDIRECT`). The destination comes from `SO_ORIGINAL_DST`, the host
//! from the client's first bytes (TLS SNI or HTTP `Host`, peeked, not consumed); then the
//! same policy as the explicit proxy, plus: the original destination must be one of the
//! addresses the host resolves to (no fronting by IP). A connection whose host cannot be
//! determined, or is not allowed, is refused and audited.
//!
//! Plain HTTP is then served request by request (hyper, like the explicit proxy), each
//! request named by its `Host` header and pinned to the original destination.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_policy::reason::Reason;
use tokio::net::{TcpListener, TcpStream};

use crate::Shared;
use crate::audit::{Event, Kind, Record, Verdict};
use crate::connection::{self, Ended, Granted};
use crate::decide;
use crate::identity::Caller;
use crate::identity::Proto;
use crate::limits::{Client, Slot};
use crate::pool::Lane;
use crate::shutdown::{Phase, accept_until_draining, reached};
use crate::sniff::{MAX_SNIFF, Sniff, sniff};
use crate::tunnel::Meter;

/// Where a redirected connection was going.
pub trait OriginalDst: std::fmt::Debug + Send + Sync + 'static {
    /// The destination the client connected to before the redirect.
    ///
    /// # Errors
    /// When the socket carries no such information (not redirected).
    fn original_dst(&self, stream: &TcpStream) -> io::Result<SocketAddr>;
}

/// The kernel's answer: `getsockopt(SOL_IP, SO_ORIGINAL_DST)` (IPv4; the listener binds
/// 127.0.0.1 only).
#[derive(Debug, Clone, Copy, Default)]
pub struct SoOriginalDst;

impl OriginalDst for SoOriginalDst {
    fn original_dst(&self, stream: &TcpStream) -> io::Result<SocketAddr> {
        let fd = stream.as_raw_fd();
        let mut addr = libc::sockaddr_in {
            sin_family: 0,
            sin_port: 0,
            sin_addr: libc::in_addr { s_addr: 0 },
            sin_zero: [0; 8],
        };
        let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_in>())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `fd` is a valid, open socket owned by `stream` for the duration of the
        // call; `addr` is a properly aligned, writable `sockaddr_in` and `len` holds its exact
        // size, so the kernel writes at most `len` bytes into it and updates `len`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_IP,
                libc::SO_ORIGINAL_DST,
                (&raw mut addr).cast::<libc::c_void>(),
                &raw mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if i32::from(addr.sin_family) != libc::AF_INET {
            return Err(io::Error::from(io::ErrorKind::InvalidData));
        }
        let ip = Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
        Ok(SocketAddr::V4(SocketAddrV4::new(
            ip,
            u16::from_be(addr.sin_port),
        )))
    }
}

/// Accepts on `listener` until draining starts.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut phase = shared.shutdown.subscribe();
    while let Some((stream, peer)) =
        accept_until_draining(&listener, &mut phase, "transparent").await
    {
        // The client's socket is addressed to the original destination (the redirect is
        // invisible to it), so that is the other half of its id.
        let orig = shared.original_dst.original_dst(&stream).ok();
        let caller = shared.caller(Proto::Tcp, peer, orig);
        match shared.slots.try_take(Client::of(caller)) {
            Ok(slot) => {
                tokio::spawn(handle(
                    stream,
                    peer,
                    caller,
                    orig,
                    Arc::clone(&shared),
                    slot,
                ));
            }
            Err(reason) => {
                let mut rec = Record::new(
                    &shared.who,
                    SystemTime::now(),
                    Kind::Transparent,
                    Some(peer),
                );
                caller.stamp(&mut rec);
                rec.reason = Some(reason);
                let _ = shared.audit.commit(&rec);
                drop(stream);
            }
        }
    }
}

/// Peeks until the first bytes say what they are, the size bound is reached, or `within`
/// passes. Never consumes: the bytes go upstream untouched.
async fn peek_sniff(stream: &TcpStream, within: Duration) -> Option<Sniff> {
    let mut buf = vec![0u8; MAX_SNIFF];
    let deadline = tokio::time::Instant::now() + within;
    let mut last = 0usize;
    let mut backoff = Duration::from_millis(1);
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None; // closed before saying anything
        }
        match sniff(&buf[..n]) {
            Sniff::NeedMore => {}
            decided => return Some(decided),
        }
        // peek returns at once while data is queued: wait for more with a short backoff.
        if n == last {
            if tokio::time::Instant::now() + backoff > deadline {
                return None;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(50));
        } else {
            backoff = Duration::from_millis(1);
        }
        last = n;
    }
}

async fn handle(
    stream: TcpStream,
    peer: SocketAddr,
    caller: Caller,
    orig: Option<SocketAddr>,
    shared: Arc<Shared>,
    slot: Slot,
) {
    let meter = Arc::new(Meter::new());
    let mut rec = Record::new(
        &shared.who,
        SystemTime::now(),
        Kind::Transparent,
        Some(peer),
    );
    caller.stamp(&mut rec);
    let Some(orig) = orig else {
        tracing::debug!("transparent connection from {peer} without an original destination");
        rec.reason = Some(Reason::UnknownHost);
        rec.event = Some(Event::NoOriginalDestination);
        let _ = shared.audit.commit(&rec);
        return;
    };
    if caller.uid.is_some() && caller.uid == Some(nix::unistd::geteuid().as_raw()) {
        // Our own upstream connection came back through the redirect: the firewall does not
        // exempt the proxy's uid. Refuse at once instead of multiplying connections.
        tracing::error!("redirect loop: the proxy's own connection to {orig} was redirected to it");
        rec.reason = Some(Reason::UpstreamUnreachable);
        rec.event = Some(Event::RedirectLoop);
        let _ = shared.audit.commit(&rec);
        return;
    }
    rec.port = Some(orig.port());
    let mut phase = shared.shutdown.subscribe();
    let sniffed = tokio::select! {
        s = peek_sniff(&stream, shared.limits.header_read_timeout) => s.unwrap_or(Sniff::NeedMore),
        () = reached(&mut phase, Phase::Stopping) => {
            rec.event = Some(Event::CloseShutdown);
            Sniff::NeedMore
        }
    };
    // Plain HTTP (a broken head included) is served request by request, each one checked.
    let tls = first_byte(&stream).await == Some(0x16);
    if !tls && matches!(sniffed, Sniff::Http(_) | Sniff::Invalid) {
        crate::explicit::serve_conn(
            stream,
            peer,
            caller,
            shared,
            Arc::new(slot),
            crate::explicit::Mode::Pinned(orig),
        )
        .await;
        return;
    }
    // One snapshot for the connection's admission and whether it is intercepted.
    let rules = shared.rules.load();
    let result = admit(&shared, &rules, (&mut rec, caller), &sniffed, orig, tls).await;
    let (target, upstream) = match result {
        Ok(u) => u,
        Err(reason) => {
            // The name the ClientHello asked for (the record's may be redacted).
            let asked = decide::transparent_target(&sniffed, orig.port())
                .ok()
                .map(|t| t.host.as_str().to_owned());
            refuse(stream, &shared, rec, reason, (orig, asked), tls, &meter).await;
            return;
        }
    };
    if let Some(up) = &upstream {
        rec.upstream = Some(up.addr);
        rec.upstream_local_port = up.local_port;
    }
    // The client's connection slot stays taken until the closing line is written.
    let slot = Arc::new(slot);
    let ended = if tls && rules.policy.intercepts(&target.host) {
        let conn = Granted {
            shared: Arc::clone(&shared),
            peer,
            caller,
            kind: Kind::Transparent,
            slot: Arc::clone(&slot),
            lane: Lane::Agent,
            target,
            addrs: vec![orig.ip()],
            upstream,
            meter: Arc::clone(&meter),
        };
        connection::intercepted(conn, stream, &mut rec).await
    } else {
        // Its bytes up count against the upload budgets as they cross (the same snapshot).
        let who = crate::limits::Client::of(caller);
        meter.charge(
            shared
                .budgets
                .charge(who, &target.host, rules.policy.limits),
        );
        let Some(upstream) = upstream else {
            // Only an intercepted connection goes without one (`admit`).
            tracing::error!("transparent tunnel without an upstream connection");
            rec.event = Some(Event::CloseError);
            shared.audit.emit(rec).await;
            return;
        };
        let end = connection::relayed(&shared, stream, upstream.stream, &target, &meter).await;
        Ended::relayed(end, &meter)
    };
    connection::closing(&mut rec, ended, &meter);
    shared.audit.emit(rec).await;
}

/// A refused connection: audited, then (for a refusal of the name a TLS client asked for)
/// answered legibly inside TLS, else closed.
async fn refuse(
    stream: TcpStream,
    shared: &Shared,
    mut rec: Record,
    reason: Reason,
    (orig, asked): (SocketAddr, Option<String>),
    tls: bool,
    meter: &Meter,
) {
    rec.decision = Verdict::Deny;
    rec.reason = Some(reason);
    // The name the ClientHello asked for, when the refusal is of that name.
    let named = asked.filter(|_| rec.host.is_some() && tls && crate::legible::speaks(reason));
    if rec.host.is_none() {
        rec.host = Some(orig.ip().to_string());
    }
    rec.duration_ms = meter.elapsed_ms();
    if reason == Reason::AuditUnavailable || shared.audit.commit(&rec).is_err() {
        return;
    }
    // Audited: now the client reads the refusal as an HTTP answer inside TLS.
    if let Some(host) = named {
        let (interception, limits) = (&shared.interception, &shared.limits);
        let refusal = crate::legible::Refusal {
            reason,
            host,
            port: orig.port(),
            named: crate::deny::Named {
                rule: None,
                approval: rec.approval.clone(),
            },
        };
        crate::legible::tls_denial(stream, interception, limits, &refusal).await;
    }
}

async fn admit(
    shared: &Shared,
    rules: &crate::snapshot::Rules,
    (rec, caller): (&mut Record, Caller),
    sniffed: &Sniff,
    orig: SocketAddr,
    tls: bool,
) -> Result<(decide::Target, Option<crate::upstream::Connected>), Reason> {
    let policy = &rules.policy;
    let target = decide::transparent_target(sniffed, orig.port())?;
    rec.host = Some(target.host.as_str().to_owned());
    // The rate, the policy, then the name the agent chose, before it is resolved.
    let pace = shared.pace(crate::limits::Client::of(caller));
    let admission = crate::admission::admit_holding(
        rules.name_rules(),
        &shared.dns_budget,
        Some(pace),
        &target,
    )
    .await;
    admission.stamp(rec);
    if let Some(reason) = admission.refused() {
        return Err(reason);
    }
    let addrs = shared.upstreams.resolve_checked(&target).await?;
    decide::check_original_destination(orig.ip(), &addrs, sniffed)?;
    // An intercepted connection's ClientHello goes to our TLS server, which reads only the
    // outer name; a tunnelled one would carry ECH to a front of the agent's choosing.
    if matches!(sniffed, Sniff::TlsEch(_)) && !(tls && policy.intercepts(&target.host)) {
        return Err(Reason::EchRefused);
    }
    // The record reaches the log before the upstream hears of the connection.
    shared
        .audit
        .commit_open(rec)
        .map_err(|crate::audit::Unavailable| Reason::AuditUnavailable)?;
    // An intercepted connection with an idle pooled connection to the pinned destination
    // makes none now (`pool`).
    if tls
        && policy.intercepts(&target.host)
        && crate::intercept::pooled(shared, &target, Lane::Agent, &[orig.ip()])
    {
        return Ok((target, None));
    }
    let up = shared
        .upstreams
        .connect_checked(&[orig.ip()], orig.port())
        .await;
    let intercepted = tls && policy.intercepts(&target.host);
    (shared.breakers).connected(&target, up.is_ok(), intercepted, policy.limits);
    Ok((target, Some(up?)))
}

async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(100), stream.peek(&mut b)).await {
        Ok(Ok(1)) => Some(b[0]),
        _ => None,
    }
}
