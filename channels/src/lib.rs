//! The one place where airlock's channels are named and numbered.
//!
//! Every process of the appliance (entrypoint, proxy, git API, shims, tests) must agree on
//! which user owns what, which loopback port carries which traffic and where the sockets and
//! state live. Those facts live here and nowhere else, so that the firewall the entrypoint
//! renders and the listeners the proxy binds can never drift apart.
//!
//! This crate holds constants and tiny value types only: no I/O, no policy, no parsing;
//! and the one generator of stable refusal codes ([`stable_codes!`]).

mod codes;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// System user that runs the proxy: the only uid allowed to leave the container.
pub const PROXY_USER: &str = "airlock";
/// System user (and group) that runs the git API.
pub const GIT_USER: &str = "airlock-git";
/// Default user that runs the agent and everything it spawns.
pub const AGENT_USER: &str = "agent";

/// Loopback address every proxy listener binds to.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Explicit HTTP proxy (`HTTP_PROXY` / `HTTPS_PROXY`).
pub const EXPLICIT_PORT: u16 = 3128;
/// Transparent listener: receives the agent's other outbound TCP via `nat OUTPUT REDIRECT`.
pub const TRANSPARENT_PORT: u16 = 15001;
/// DNS filter: receives all of the agent's port-53 traffic (UDP and TCP) by redirect.
pub const DNS_PORT: u16 = 15353;
/// Service port the firewall opens only to the git API's group.
pub const GIT_SERVICE_PORT: u16 = 15002;

/// How many sessions one start can hold at once: the agent's first process is session 1,
/// each second session (`airlock exec`, `docker exec … airlock-session`) takes the lowest
/// free number of `2..=MAX_SESSIONS`.
pub const MAX_SESSIONS: u16 = 64;

/// Session `k >= 2` runs with `SESSION_GID_BASE + k` as its real, effective and saved gid
/// (session 1 keeps the agent's own gid). A session differs from every other one in its
/// gids, so the kernel lets none of them ptrace another, open its `/proc/<pid>/mem` or take
/// its file descriptors; its files keep the agent's uid, so every session can use them.
pub const SESSION_GID_BASE: u32 = 61_000;

/// The first three octets of the loopback addresses the proxy sees sessions come from: the
/// firewall rewrites the source of session `k`'s connections to the proxy to
/// `127.77.0.k` (by its gid), so the address names the session and no session can take
/// another's (a source it binds itself is rewritten too).
pub const SESSION_NET: [u8; 3] = [127, 77, 0];

/// The address session `k` reaches the proxy from.
#[must_use]
pub const fn session_addr(k: u16) -> Ipv4Addr {
    let [a, b, c] = SESSION_NET;
    // Session numbers never exceed MAX_SESSIONS (< 256).
    #[allow(clippy::cast_possible_truncation)]
    Ipv4Addr::new(a, b, c, k as u8)
}

/// The session a peer address names, if it is one of [`session_addr`]'s.
#[must_use]
pub fn session_of(ip: std::net::IpAddr) -> Option<u16> {
    let v4 = match ip {
        std::net::IpAddr::V4(v4) => v4,
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped()?,
    };
    let [a, b, c, d] = v4.octets();
    let k = u16::from(d);
    ([a, b, c] == SESSION_NET && (1..=MAX_SESSIONS).contains(&k)).then_some(k)
}

/// The gid session `k` runs with: `agent_gid` for session 1, [`SESSION_GID_BASE`]` + k`
/// for the others.
#[must_use]
pub const fn session_gid(k: u16, agent_gid: u32) -> u32 {
    if k <= 1 {
        agent_gid
    } else {
        SESSION_GID_BASE + k as u32
    }
}

/// Path the proxy answers on itself (origin-form request to the explicit port) to prove
/// it is up. Used by the entrypoint's readiness wait and the agent-side self-test.
pub const HEALTH_PATH: &str = "/__airlock/health";

/// The host the explicit proxy answers the agent's own API on (`http://airlock.local/v1/…`:
/// its rules, and asking the operator for a host with a reason). Never resolved, never
/// forwarded: the proxy is the only one who answers it.
pub const AGENT_API_HOST: &str = "airlock.local";

/// Response header that carries a denial's reason code to the agent.
pub const ERROR_HEADER: &str = "x-airlock-error";

/// Runtime directory (tmpfs in the image): sockets and per-start state.
pub const RUN_DIR: &str = "/run/airlock";
/// Exit status of a refused start (`EX_CONFIG` of sysexits.h): the entrypoint, the proxy and
/// the git API exit with it when their configuration cannot be used, and the entrypoint
/// reports a child's 78 as a refused start, not a crash.
pub const EXIT_REFUSED: u8 = 78;

/// Default location of the policy file inside the image.
pub const DEFAULT_POLICY_PATH: &str = "/etc/airlock/policy.toml";
/// Default directory of the audit log.
pub const DEFAULT_AUDIT_DIR: &str = "/var/log/airlock";
/// Audit log file name inside the audit directory.
pub const AUDIT_FILE: &str = "audit.jsonl";
/// The operator's standing grants (`approve --always`, `deny --always`) inside the audit
/// directory: the proxy's own, kept with the audit log across restarts.
pub const GRANTS_FILE: &str = "grants.json";
/// Default of `AIRLOCK_AUDIT_CAP`: bytes the proxy's audit log (`audit.jsonl` and its rotated
/// files) may take on the audit volume. The git API's log gets a quarter of the cap
/// ([`git_log_cap`]).
pub const DEFAULT_AUDIT_CAP: u64 = 256 << 20;
/// The git API's decision log inside the audit directory (one JSON line per record).
pub const GIT_LOG_FILE: &str = "git-api.jsonl";
/// The git API's previous log file (`git-api.jsonl.1`), what rotation moved aside.
pub const GIT_LOG_PREVIOUS: &str = "git-api.jsonl.1";

/// Bytes the git API's two log files may take together for an audit cap of `audit_cap`: a
/// quarter of it (git decisions are rarer than requests), never less than 64 KiB.
#[must_use]
pub const fn git_log_cap(audit_cap: u64) -> u64 {
    let quarter = audit_cap / 4;
    if quarter < 64 << 10 {
        64 << 10
    } else {
        quarter
    }
}

/// Directory inside the runtime directory that only the proxy user can enter: the
/// credential hand-off and the proxy's per-start state.
pub const PROXY_STATE_SUBDIR: &str = "proxy";
/// The credential hand-off file inside the proxy's state directory.
pub const CREDENTIALS_FILE: &str = "credentials.json";

/// The appliance CA's certificate inside the proxy's state directory (an operator CA is
/// placed here by the entrypoint; otherwise the proxy generates one).
pub const CA_CERT_FILE: &str = "ca.pem";
/// The appliance CA's private key inside the proxy's state directory (0600, proxy user).
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// Directory inside the runtime directory that the proxy user owns (0755) and exports
/// public files to: the proxy cannot write the root-owned runtime directory itself.
pub const PROXY_PUBLIC_SUBDIR: &str = "proxy-public";
/// Where the proxy exports the CA's public certificate (0644) for the entrypoint.
pub const CA_PROXY_EXPORT_PATH: &str = "/run/airlock/proxy-public/ca.pem";
/// The appliance CA certificate as the entrypoint publishes it (root-owned copy of the
/// proxy's export, 0644): what the git API trusts on the service port.
pub const CA_EXPORT_PATH: &str = "/run/airlock/ca.pem";
/// The agent's CA bundle (system roots + the appliance CA), built by the entrypoint.
pub const CA_BUNDLE_PATH: &str = "/run/airlock/ca-bundle.pem";
/// Base-URL mode: `http://127.0.0.1:3128/https/<host>[:port]/<path>` is forwarded to
/// `https://<host>[:port]/<path>` over verified TLS, with the host's credential injected.
pub const BASE_URL_PREFIX: &str = "/https/";

/// The explicit proxy's socket address.
#[must_use]
pub const fn explicit_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, EXPLICIT_PORT))
}

/// The transparent listener's socket address.
#[must_use]
pub const fn transparent_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, TRANSPARENT_PORT))
}

/// The DNS filter's socket address.
#[must_use]
pub const fn dns_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, DNS_PORT))
}

/// The git service port's socket address (the git API's `http.proxy`).
#[must_use]
pub const fn git_service_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(LOOPBACK, GIT_SERVICE_PORT))
}

/// The proxy URL given to the agent in `HTTP_PROXY` and friends.
#[must_use]
pub fn proxy_url() -> String {
    format!("http://{LOOPBACK}:{EXPLICIT_PORT}")
}

/// The git API's Unix socket (inside `RUN_DIR/git`, root:airlock-git 0771): the agent's `git`
/// shim sends each invocation in the workspace here. The entrypoint also sets it in
/// `AIRLOCK_GIT_SOCKET`.
pub const GIT_SOCKET: &str = "/run/airlock/git/git.sock";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_address_names_its_session_and_nothing_else_does() {
        use std::net::IpAddr;
        for k in [1, 2, MAX_SESSIONS] {
            assert_eq!(session_of(IpAddr::V4(session_addr(k))), Some(k));
        }
        assert_eq!(session_of(IpAddr::V4(Ipv4Addr::new(127, 77, 0, 0))), None);
        assert_eq!(session_of(IpAddr::V4(Ipv4Addr::new(127, 77, 0, 65))), None);
        assert_eq!(session_of(IpAddr::V4(Ipv4Addr::LOCALHOST)), None);
        assert_eq!(session_of("::ffff:127.77.0.3".parse().unwrap()), Some(3));
        assert_eq!(session_gid(1, 1000), 1000);
        assert_eq!(session_gid(2, 1000), 61_002);
    }

    #[test]
    fn the_git_log_gets_a_quarter_of_the_audit_cap_and_at_least_64_kib() {
        assert_eq!(git_log_cap(DEFAULT_AUDIT_CAP), 64 << 20);
        assert_eq!(git_log_cap(1_000_000), 250_000);
        assert_eq!(git_log_cap(1000), 64 << 10);
        assert_eq!(git_log_cap(0), 64 << 10);
    }

    #[test]
    fn ports_are_distinct() {
        let mut ports = [EXPLICIT_PORT, TRANSPARENT_PORT, DNS_PORT, GIT_SERVICE_PORT];
        ports.sort_unstable();
        assert!(ports.windows(2).all(|w| w[0] != w[1]));
        assert!(
            ports.iter().all(|p| *p != 53),
            "redirect targets must not be port 53"
        );
    }

    #[test]
    fn proxy_url_names_the_explicit_port() {
        assert_eq!(proxy_url(), "http://127.0.0.1:3128");
    }
}
