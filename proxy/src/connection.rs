//! A granted connection's life: intercepted request by request ([`intercepted`]) or relayed
//! byte by byte ([`relayed`]), and its one closing line ([`closing`]). The CONNECT tunnel
//! (`explicit`) and the transparent listener (`transparent`) both end here once they have
//! the client's stream.
//!
//! It does not decide whether a connection is granted: that is admission (`admission`).
//! Nor does it get the client's stream (CONNECT's upgrade, the transparent sniffing) or
//! check a tunnel's first bytes (CONNECT's `inspect_tunnel`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::Shared;
use crate::audit::{Event, Kind, Record};
use crate::decide::Target;
use crate::identity::Caller;
use crate::intercept::{self, Ctx, Leg, Route};
use crate::limits::Slot;
use crate::pool::Lane;
use crate::tunnel::{self, Dir, End, Meter, Metered};
use crate::upstream::Connected;

/// A connection admitted and about to be served: who asked, where it goes, and what was
/// made for it.
pub(crate) struct Granted {
    pub shared: Arc<Shared>,
    pub peer: SocketAddr,
    pub caller: Caller,
    /// The audit kind of its requests' lines.
    pub kind: Kind,
    /// The client's connection slot: the connection counts against its cap.
    pub slot: Arc<Slot>,
    /// The listeners whose pooled upstream connections it may share.
    pub lane: Lane,
    pub target: Target,
    /// The checked addresses its requests may go to.
    pub addrs: Vec<IpAddr>,
    /// Made before it was granted (none for an intercepted target with a pooled one).
    pub upstream: Option<Connected>,
    /// Counts its bytes both ways.
    pub meter: Arc<Meter>,
}

/// How a connection's life ended, for its closing line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub end: End,
    /// Whether anything of it went upstream: when nothing did, an allowed connection's line
    /// says `abandoned`.
    pub went_upstream: bool,
}

impl Ended {
    /// A relayed connection's end: its bytes are counted as they cross, so none either way
    /// means none went upstream.
    pub fn relayed(end: End, meter: &Meter) -> Self {
        Self {
            end,
            went_upstream: meter.up() > 0 || meter.down() > 0,
        }
    }
}

/// Serves `conn` intercepted: the agent's TLS on `client` is terminated with a leaf of the
/// appliance CA and each request is judged (`intercept::serve_tls`). Only a request sends
/// anything upstream, so it went upstream when the client made one.
pub(crate) async fn intercepted<C>(conn: Granted, client: C, rec: &mut Record) -> Ended
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut ctx = Ctx::new(conn.shared, conn.peer, conn.caller, conn.kind, conn.slot);
    ctx.lane = conn.lane;
    let route = Route::new(conn.target, conn.addrs, Leg::Intercepted);
    let ctx = Arc::new(ctx);
    let client = Metered::both(client, conn.meter, Dir::Up);
    let end = intercept::serve_tls(client, Arc::clone(&ctx), route, conn.upstream, rec).await;
    Ended {
        end,
        went_upstream: ctx.requests.load(Ordering::Relaxed) > 0,
    }
}

/// Relays `client` to `upstream`, socket to socket when both are, until it ends or a
/// policy reload refuses `target` (`conns`).
pub(crate) async fn relayed<C>(
    shared: &Shared,
    client: C,
    upstream: TcpStream,
    target: &Target,
    meter: &Arc<Meter>,
) -> End
where
    C: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let idle = shared.limits.idle_timeout;
    let phase = shared.shutdown.subscribe();
    let relay = tunnel::relay(client, upstream, Arc::clone(meter), idle, phase);
    shared.conns.guard(target, relay).await
}

/// Fills in a connection's closing line: `abandoned` when nothing went upstream, how it
/// ended (or that it spent an upload budget, naming the budgets), the bytes each way and
/// how long it lasted. The caller writes the line.
pub(crate) fn closing(rec: &mut Record, ended: Ended, meter: &Meter) {
    if !ended.went_upstream {
        crate::audit::abandoned(rec);
    }
    rec.event = Some(if meter.over() {
        // Cut because it spent an upload budget: the line names the budgets.
        rec.rule = meter.budget();
        Event::CloseBudget
    } else {
        ended.end.into()
    });
    rec.bytes_up = meter.up();
    rec.bytes_down = meter.down();
    rec.duration_ms = meter.elapsed_ms();
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use airlock_policy::Host;
    use airlock_policy::limits::Limits;

    use super::*;
    use crate::audit::{Verdict, Who};
    use crate::budget::Budgets;
    use crate::limits::Client;

    fn allowed() -> Record {
        let who = Who::new("s", "sandbox", None);
        let mut rec = Record::new(&who, SystemTime::now(), Kind::Connect, None);
        rec.decision = Verdict::Allow;
        rec.rule = Some("allow a.test".into());
        rec
    }

    #[test]
    fn a_relayed_connection_closes_with_its_end_and_its_bytes() {
        let meter = Meter::new();
        meter.add_up(5);
        meter.add_down(7);
        let mut rec = allowed();
        closing(&mut rec, Ended::relayed(End::Idle, &meter), &meter);
        assert_eq!(rec.event, Some(Event::CloseIdle));
        assert_eq!((rec.bytes_up, rec.bytes_down), (5, 7));
        assert_eq!(rec.decision, Verdict::Allow);
        assert_eq!(rec.rule.as_deref(), Some("allow a.test"));
    }

    #[test]
    fn nothing_upstream_is_abandoned_but_a_denial_stays_one() {
        let meter = Meter::new();
        let mut rec = allowed();
        closing(&mut rec, Ended::relayed(End::Closed, &meter), &meter);
        assert_eq!(rec.decision, Verdict::Abandoned);
        assert_eq!(rec.event, Some(Event::Close));

        let mut denied = allowed();
        denied.decision = Verdict::Deny;
        closing(&mut denied, Ended::relayed(End::Closed, &meter), &meter);
        assert_eq!(denied.decision, Verdict::Deny);
    }

    #[test]
    fn an_intercepted_connection_with_a_request_is_not_abandoned_without_bytes() {
        let meter = Meter::new();
        let mut rec = allowed();
        let ended = Ended {
            end: End::Shutdown,
            went_upstream: true,
        };
        closing(&mut rec, ended, &meter);
        assert_eq!(rec.decision, Verdict::Allow);
        assert_eq!(rec.event, Some(Event::CloseShutdown));
    }

    #[test]
    fn a_spent_budget_closes_naming_the_budgets() {
        let limits = Limits {
            upload_bytes_per_hour: 10,
            ..Limits::default()
        };
        let host = Host::parse("a.test").unwrap();
        let charge = Budgets::default().charge(Client::Uid(1000), &host, limits);
        let meter = Meter::new();
        meter.charge(charge.clone());
        meter.add_up(11);
        let mut rec = allowed();
        closing(&mut rec, Ended::relayed(End::Error, &meter), &meter);
        assert_eq!(rec.event, Some(Event::CloseBudget));
        assert_eq!(rec.rule, Some(charge.describe()));
        assert_eq!(rec.bytes_up, 11);
    }
}
