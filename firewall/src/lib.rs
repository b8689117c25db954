//! airlock's kernel firewall: turns a [`Plan`] (a value) into `iptables-restore` input for
//! IPv4 and IPv6, and applies it atomically, one restore process per family.
//!
//! # The rule set, and why each rule is there
//!
//! The container's only way out is the proxy's uid; the agent reaches the network only
//! through the proxy's loopback listeners (explicit port, transparent redirect, DNS filter).
//!
//! IPv4 `filter` (the whole table is ours):
//! - `INPUT DROP`: accept loopback and `RELATED,ESTABLISHED` (replies to the proxy's flows,
//!   ICMP errors for them); nothing listens outside loopback. `FORWARD DROP`.
//! - `OUTPUT DROP`, then in order:
//!   1. TCP to the git service port on any local address (`addrtype LOCAL`, judged after
//!      nat) is reset unless the sender holds the git API's group (`--suppl-groups`: also as
//!      a supplementary group, which is how the git API runs). This comes before "loopback
//!      is fine", or the agent could reach it.
//!   2. anything to Docker's embedded resolver `127.0.0.11` from another uid than the proxy
//!      is rejected: it listens on random real ports, so an agent that found them could send
//!      DNS straight to it and exfiltrate, bypassing our DNS filter.
//!   3. `RELATED,ESTABLISHED` is accepted. This is safe before the owner checks: the agent's
//!      TCP is redirected to loopback in `nat` (its conntrack entry is to `127.0.0.1`), and
//!      any other non-proxy packet to the outside is rejected by rule 6 *on its first packet*,
//!      and a conntrack entry whose first packet was dropped is never confirmed. So no
//!      non-proxy flow to the outside can ever be established; inbound can't create one either
//!      (`INPUT DROP`). Conntrack helpers are not auto-assigned (kernel >= 4.7), so no
//!      `RELATED` expectation opens a side door. Putting it third keeps the hot path short.
//!   4. `-o lo` is accepted, and so is `-d 127.0.0.0/8`: the proxy's listeners, where the
//!      agent's traffic lands. The second rule is not redundant: in the OUTPUT hooks the
//!      output device is the one routed *before* nat, so a flow that `REDIRECT` rewrote from
//!      `192.0.2.1:443` to `127.0.0.1:15001` still shows `-o eth0` in `filter` (verified on
//!      this kernel: with `-o lo` alone every redirected flow is rejected). A `127/8`
//!      destination is always delivered locally, so this opens nothing outward.
//!   5. the proxy's uid is accepted: the one identity that leaves.
//!   6. the rest is rejected so it fails fast instead of hanging: TCP reset, ICMP port
//!      unreachable for UDP (QUIC falls back to TCP at once), admin-prohibited otherwise.
//!
//! IPv4 `nat` (rendered whole, so applying gives exactly the text and re-applying is
//! idempotent): `-A OUTPUT -j AIRLOCK_OUTPUT` and `-A POSTROUTING -j AIRLOCK_POSTROUTING`
//! first in their chains, then Docker's preserved jumps. In `AIRLOCK_OUTPUT`: the proxy
//! `RETURN`s (its DNS goes on to Docker's DNAT); all other port-53 traffic, UDP and TCP,
//! loopback included, is `REDIRECT`ed to the DNS filter (this is before the loopback
//! `RETURN`, so `127.0.0.11:53` and `127.0.0.1:53` are caught too); loopback `RETURN`s; all
//! other TCP is `REDIRECT`ed to the transparent listener, which reads the original
//! destination with `SO_ORIGINAL_DST`. Docker's `DOCKER_*` chains and the built-in-chain
//! jumps into them are preserved verbatim (see [`preserved_nat_from_save`]).
//!
//! `AIRLOCK_POSTROUTING` tells the proxy which session a connection comes from, unforgeably:
//! 1. per session `k` ([`Plan::session_gids`]), its connections to the proxy's agent-facing
//!    listeners (`-d 127.0.0.1`, TCP to the explicit, transparent and DNS ports, UDP to the
//!    DNS port) are `SNAT`ed to [`airlock_channels::session_addr`]`(k)` = `127.77.0.k`,
//!    matched by the socket's primary gid (`-m owner --gid-owner`: the fsgid of the process
//!    that made the socket). No `--suppl-groups`: a second session also holds the agent's gid
//!    as a supplementary group and must not pass for session 1. POSTROUTING sees the
//!    destination after OUTPUT's `REDIRECT`, so redirected TCP and DNS are rewritten too;
//!    conntrack undoes both rewrites on the replies. A source the process bound itself is
//!    rewritten like any other.
//! 2. a source in `127.77.0.0/24` that no session rule claimed (another identity binding a
//!    session's address itself) is `SNAT`ed to `127.0.0.1`: only a session's gid gives its
//!    address. (A loopback source towards a non-loopback address never gets this far: the
//!    kernel refuses to route it.)
//!
//! Only those ports: the agent's own loopback servers (a local redis checking for
//! `127.0.0.1`) keep seeing `127.0.0.1`, and the git service port is no session's.
//!
//! IPv6 `filter`: the same shape without the resolver rule, plus the kernel's own neighbour
//! discovery (ICMPv6 133–136, no owner match: an unprivileged socket cannot emit those
//! types, ping sockets only send echo requests) so that the proxy can reach v6 upstreams.
//! There is no v6 `nat`: the agent's IPv6 egress is simply rejected.
//!
//! `iptables-restore` commits table by table; `filter` is rendered before `nat` so that a
//! failure between the two leaves the container closed, not open.
//!
//! # What it does not do
//!
//! It does not decide whether IPv6 must be filtered (it reports [`Ipv6State`]; the entrypoint
//! fails closed), resolve users or groups (the plan carries numeric ids), touch the `mangle`
//! or `raw` tables or the v6 `nat` table, or enforce any policy above layer 4: hosts, paths
//! and credentials are the proxy's job. The renderers do not check the plan: run
//! [`Plan::check`] first.
//!
//! Sessions: it does not hand out session numbers or set a session's gid (the entrypoint
//! does; the plan carries the gids). The address names the gid a socket was *made* with,
//! not the process using it: a socket one session passes to another keeps its maker's
//! address, and any process running with session `k`'s primary gid is session `k` to the
//! proxy (the git API runs with the agent's gid, so on the proxy's agent-facing listeners
//! it is session 1). No rule keeps one session from connecting to another's loopback
//! servers.

mod error;
mod preserve;
mod render;

pub mod apply;

pub use apply::{Ipv6State, Runner, apply, ipv6_state, save_nat_v4};
pub use error::FirewallError;
pub use preserve::{PreservedNat, preserved_nat_from_save};
pub use render::{render_v4, render_v6};

use std::net::Ipv4Addr;

use airlock_channels::{
    DNS_PORT, EXPLICIT_PORT, GIT_SERVICE_PORT, MAX_SESSIONS, TRANSPARENT_PORT, session_addr,
};

/// Everything the rendered rules depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The ONLY uid allowed to leave the container (the proxy's).
    pub proxy_uid: u32,
    /// Group of the git API; only it may reach the service port.
    pub git_gid: u32,
    /// The explicit proxy port (reached over loopback; only the sessions' source rewrite
    /// names it).
    pub explicit_port: u16,
    /// The agent's outbound TCP is `REDIRECT`ed here.
    pub transparent_port: u16,
    /// All non-proxy port-53 traffic (UDP and TCP) is `REDIRECT`ed here.
    pub dns_port: u16,
    /// The git API's loopback service port on the proxy.
    pub git_service_port: u16,
    /// The sessions' primary gids: index `i` is session `i + 1`, whose connections to the
    /// proxy's agent-facing listeners are rewritten to come from
    /// [`airlock_channels::session_addr`]`(i + 1)`. At most
    /// [`airlock_channels::MAX_SESSIONS`]; see [`Plan::sessions`].
    pub session_gids: Vec<u32>,
    /// Docker's embedded-DNS nat rules found in the container.
    pub preserved_nat: PreservedNat,
}

impl Plan {
    /// A plan with the ports from `airlock-channels`.
    #[must_use]
    pub fn with_channel_ports(
        proxy_uid: u32,
        git_gid: u32,
        session_gids: Vec<u32>,
        preserved_nat: PreservedNat,
    ) -> Self {
        Self {
            proxy_uid,
            git_gid,
            explicit_port: EXPLICIT_PORT,
            transparent_port: TRANSPARENT_PORT,
            dns_port: DNS_PORT,
            git_service_port: GIT_SERVICE_PORT,
            session_gids,
            preserved_nat,
        }
    }

    /// Each session's gid and the address the proxy sees it from, session 1 first. Never
    /// more than [`airlock_channels::MAX_SESSIONS`] (the rest of an over-long list, which
    /// [`Plan::check`] refuses, is not rendered: its addresses would wrap around).
    pub fn sessions(&self) -> impl Iterator<Item = (u32, Ipv4Addr)> + '_ {
        (1..=MAX_SESSIONS)
            .zip(&self.session_gids)
            .map(|(k, gid)| (*gid, session_addr(k)))
    }

    /// Refuse plans whose rules would not mean what they say: root as the egress identity
    /// (everything root runs would leave), a port 0 or 53 (a redirect loop), two roles on
    /// one port; a session gid that is root's group (everything root runs would be taken for
    /// that session), another session's (the second would be seen as the first) or the git
    /// API's; more sessions than [`airlock_channels::MAX_SESSIONS`].
    ///
    /// # Errors
    /// [`FirewallError::CheckPlan`] naming the problem.
    pub fn check(&self) -> Result<(), FirewallError> {
        let fail = |reason: String| Err(FirewallError::CheckPlan { reason });
        if self.proxy_uid == 0 {
            return fail("the proxy uid must not be root".to_owned());
        }
        if self.session_gids.len() > usize::from(MAX_SESSIONS) {
            return fail(format!(
                "{} session gids, more than the {MAX_SESSIONS} sessions there can be",
                self.session_gids.len()
            ));
        }
        for (i, gid) in self.session_gids.iter().enumerate() {
            let k = i + 1;
            if *gid == 0 {
                return fail(format!("session {k}'s gid must not be root's group (0)"));
            }
            if *gid == self.git_gid {
                return fail(format!("session {k}'s gid {gid} is the git API's group"));
            }
            if let Some(j) = self.session_gids.iter().skip(k).position(|g| g == gid) {
                return fail(format!("sessions {k} and {} share gid {gid}", k + 1 + j));
            }
        }
        let ports = [
            ("explicit", self.explicit_port),
            ("transparent", self.transparent_port),
            ("dns", self.dns_port),
            ("git service", self.git_service_port),
        ];
        for (i, (name, port)) in ports.iter().enumerate() {
            if *port == 0 || *port == 53 {
                return fail(format!("the {name} port must not be {port}"));
            }
            if let Some((other, _)) = ports.iter().skip(i + 1).find(|(_, p)| p == port) {
                return fail(format!("the {name} and {other} ports are both {port}"));
            }
        }
        Ok(())
    }
}

/// An address family: which restore tool applies the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4: `iptables-restore`.
    V4,
    /// IPv6: `ip6tables-restore`.
    V6,
}

impl Family {
    /// The restore tool for this family.
    #[must_use]
    pub const fn restore_binary(self) -> &'static str {
        match self {
            Self::V4 => "iptables-restore",
            Self::V6 => "ip6tables-restore",
        }
    }

    /// The save tool for this family.
    #[must_use]
    pub const fn save_binary(self) -> &'static str {
        match self {
            Self::V4 => "iptables-save",
            Self::V6 => "ip6tables-save",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_channels::session_gid;

    const AGENT_GID: u32 = 1000;

    fn sessions() -> Vec<u32> {
        (1..=MAX_SESSIONS)
            .map(|k| session_gid(k, AGENT_GID))
            .collect()
    }

    fn good() -> Plan {
        Plan::with_channel_ports(999, 998, sessions(), PreservedNat::default())
    }

    #[test]
    fn channel_plan_passes_its_check() {
        good().check().unwrap();
        // No sessions at all is a plan too (nothing rewritten).
        Plan {
            session_gids: Vec::new(),
            ..good()
        }
        .check()
        .unwrap();
    }

    #[test]
    fn sessions_pair_each_gid_with_its_address_and_never_wrap() {
        let plan = good();
        let all: Vec<(u32, Ipv4Addr)> = plan.sessions().collect();
        assert_eq!(all.len(), usize::from(MAX_SESSIONS));
        assert_eq!(all[0], (AGENT_GID, Ipv4Addr::new(127, 77, 0, 1)));
        assert_eq!(all[1], (61_002, Ipv4Addr::new(127, 77, 0, 2)));
        assert_eq!(all[63], (61_064, Ipv4Addr::new(127, 77, 0, 64)));
        // An over-long list (refused by check) still renders no wrapped-around address.
        let long = Plan {
            session_gids: (1..=300).collect(),
            ..good()
        };
        assert_eq!(long.sessions().count(), usize::from(MAX_SESSIONS));
    }

    fn refused(plan: &Plan, needle: &str) {
        match plan.check() {
            Err(FirewallError::CheckPlan { reason }) => {
                assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            }
            other => panic!("{plan:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn attack_plans_that_would_open_the_firewall_are_refused() {
        let good = good();
        let root = Plan {
            proxy_uid: 0,
            ..good.clone()
        };
        let loop53 = Plan {
            dns_port: 53,
            ..good.clone()
        };
        let clash = Plan {
            transparent_port: good.explicit_port,
            ..good.clone()
        };
        let zero = Plan {
            git_service_port: 0,
            ..good
        };
        for plan in [root, loop53, clash, zero] {
            assert!(
                matches!(plan.check(), Err(FirewallError::CheckPlan { .. })),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn attack_session_gids_that_would_let_one_identity_pass_for_another_are_refused() {
        let with = |edit: &dyn Fn(&mut Vec<u32>)| {
            let mut plan = good();
            edit(&mut plan.session_gids);
            plan
        };
        // Root's group: everything root runs (PID 1, dockerd's forwarder) would be session 5.
        refused(
            &with(&|g| g[4] = 0),
            "session 5's gid must not be root's group",
        );
        refused(&with(&|g| g[0] = 0), "session 1's gid");
        // The git API's group as a session's: the git API would be taken for session 3.
        refused(
            &with(&|g| g[2] = 998),
            "session 3's gid 998 is the git API's group",
        );
        // Two sessions sharing a gid: the second would be seen as the first.
        refused(
            &with(&|g| g[63] = AGENT_GID),
            "sessions 1 and 64 share gid 1000",
        );
        refused(&with(&|g| g[9] = g[8]), "sessions 9 and 10 share gid 61009");
        // More sessions than there are addresses.
        refused(
            &with(&|g| g.push(70_000)),
            "65 session gids, more than the 64",
        );
    }
}
