//! The fixed shape of the fake internet: addresses, names, interface names, the zone and
//! the listeners fakenet serves, plus the `ip -batch` scripts that build it.
//!
//! Everything here is pure (constants and string rendering); `netns` runs the scripts.
//!
//! ```text
//!   sandbox netns alk-s-<id>             upstream netns alk-u-<id>
//!   +--------------------------+         +------------------------------------------+
//!   | lo 127.0.0.1, ::1        |         | alk-u<id> 198.51.100.1/24                |
//!   | eth0 198.51.100.2/24     |--veth---|           2001:db8:100::1/64             |
//!   |      2001:db8:100::2/64  |         | lo: the service addresses (/32, /128)    |
//!   | default via .1 and ::1   |         |   203.0.113.10  allowed.test             |
//!   +--------------------------+         |   203.0.113.11  blocked.test             |
//!                                        |   203.0.113.12  other.test               |
//!                                        |   203.0.113.53  DNS (sandbox resolver)   |
//!                                        |   203.0.113.54  "foreign" DNS            |
//!                                        |   2001:db8:113::10  allowed.test, v6.test|
//!                                        |   203.0.113.20  github.com (git HTTPS)   |
//!                                        |   169.254.169.254  fake metadata         |
//!                                        +------------------------------------------+
//! ```
//!
//! The service addresses live on the upstream namespace's `lo` (this kernel has no `dummy`
//! driver): the upstream namespace accepts them as local, so no namespace forwards anything.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use crate::fakenet::{Config, Listen, TlsListen};

/// Prefix of every namespace, veth and temp directory this harness creates.
pub const PREFIX: &str = "alk-";

/// Upstream-side (gateway) address of the veth pair.
pub const UPSTREAM_GW_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// The sandbox's own IPv4 address.
pub const SANDBOX_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// Upstream-side (gateway) IPv6 address of the veth pair.
pub const UPSTREAM_GW_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// The sandbox's own IPv6 address.
pub const SANDBOX_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 2);

/// `allowed.test` (HTTP 80 and 8080, HTTPS 443 and 8443, a UDP sink on 443).
pub const ALLOWED_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// `blocked.test` (HTTP 80, HTTPS 443).
pub const BLOCKED_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 11);
/// `other.test` (HTTP 80, HTTPS 443, HTTPS 8443 with a certificate for another name).
pub const OTHER_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 12);
/// The DNS server the sandbox's `/etc/resolv.conf` names.
pub const DNS_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 53);
/// A second, "foreign" DNS server with the same zone: reaching it is a bypass.
pub const FOREIGN_DNS_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 54);
/// `allowed.test`'s and `v6.test`'s IPv6 address (HTTP 80, HTTPS 443, DNS 53).
pub const ALLOWED_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x113, 0, 0, 0, 0, 0x10);
/// `github.com`: git smart HTTP over HTTPS 443 (`git http-backend`, see
/// [`crate::fakenet::git`]).
pub const GITHUB_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// The fake cloud metadata server (HTTP 80).
pub const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// Name resolving to [`ALLOWED_V4`] and [`ALLOWED_V6`].
pub const ALLOWED_HOST: &str = "allowed.test";
/// Name resolving to [`BLOCKED_V4`].
pub const BLOCKED_HOST: &str = "blocked.test";
/// Name resolving to [`OTHER_V4`].
pub const OTHER_HOST: &str = "other.test";
/// Name resolving only to [`ALLOWED_V6`] (AAAA, no A).
pub const V6_HOST: &str = "v6.test";
/// Name resolving to 127.0.0.1 (DNS rebinding to loopback).
pub const REBIND_HOST: &str = "rebind.test";
/// Name resolving to [`METADATA_V4`].
pub const META_HOST: &str = "meta.test";
/// Name resolving to [`GITHUB_V4`]: the fake forge.
pub const GITHUB_HOST: &str = "github.com";
/// Also [`GITHUB_V4`]: the forge's API (the echo; the GitHub L7 preset applies to it).
pub const GITHUB_API_HOST: &str = "api.github.com";
/// The only name on the certificate of `other.test:8443` (a wrong-name upstream).
pub const WRONG_CERT_NAME: &str = "wrong.test";
/// The token the fake forge wants for a push (`x-access-token` basic auth). Only the proxy
/// is given it; the tests hunt for it everywhere the agent can look.
pub const GITHUB_TOKEN: &str = "ghp_REALTOKEN0fakenet0git0push0c1e9a";

/// Name of the sandbox-side veth inside the sandbox namespace (looks like a container's).
pub const SANDBOX_IFACE: &str = "eth0";
/// MAC address of the sandbox-side veth: every frame with this source came from the sandbox.
pub const SANDBOX_MAC: [u8; 6] = [0x02, 0xa1, 0x0c, 0x00, 0x00, 0x02];
/// MAC address of the upstream-side veth.
pub const UPSTREAM_MAC: [u8; 6] = [0x02, 0xa1, 0x0c, 0x00, 0x00, 0x01];

/// Uid (and gid of the same-named group) of the proxy user inside the sandbox.
pub const PROXY_UID: u32 = 64101;
/// Uid (and gid of the same-named group) of the git API user inside the sandbox.
pub const GIT_UID: u32 = 64102;
/// Uid (and gid of the same-named group) of the agent inside the sandbox.
pub const AGENT_UID: u32 = 64103;

/// The identity of one World: creator pid and a per-process sequence number.
///
/// Rendered as `<pid base36>-<seq base36>` (at most 5 + 1 + 4 characters) so that
/// `alk-u<id>` fits the kernel's 15-character interface name limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldId {
    /// Pid of the process that created the World (stale detection).
    pub pid: u32,
    /// Sequence number within that process.
    pub seq: u32,
}

impl WorldId {
    /// Parses the id part of a name (`<pid36>-<seq36>`).
    #[must_use]
    pub fn parse(s: &str) -> Option<WorldId> {
        let (pid, seq) = s.split_once('-')?;
        Some(WorldId {
            pid: from_base36(pid)?,
            seq: from_base36(seq)?,
        })
    }

    /// Recognises a name this harness created (`alk-u-<id>`, `alk-s-<id>` or `alk-<id>`) and
    /// returns its id.
    #[must_use]
    pub fn from_name(name: &str) -> Option<WorldId> {
        let rest = name.strip_prefix(PREFIX)?;
        let rest = rest
            .strip_prefix("u-")
            .or_else(|| rest.strip_prefix("s-"))
            .unwrap_or(rest);
        WorldId::parse(rest)
    }

    /// Upstream namespace name.
    #[must_use]
    pub fn upstream_ns(self) -> String {
        format!("{PREFIX}u-{self}")
    }

    /// Sandbox namespace name.
    #[must_use]
    pub fn sandbox_ns(self) -> String {
        format!("{PREFIX}s-{self}")
    }

    /// Name of the upstream-side veth (inside the upstream namespace; tcpdump listens here).
    #[must_use]
    pub fn upstream_veth(self) -> String {
        format!("{PREFIX}u{self}")
    }

    /// Name of the World's directory under the temp dir.
    #[must_use]
    pub fn dir_name(self) -> String {
        format!("{PREFIX}{self}")
    }
}

impl fmt::Display for WorldId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", to_base36(self.pid), to_base36(self.seq))
    }
}

fn to_base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

fn from_base36(s: &str) -> Option<u32> {
    if s.is_empty()
        || s.len() > 7
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    {
        return None;
    }
    u32::from_str_radix(s, 36).ok()
}

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `ip -batch` script run in the root namespace: both namespaces and the veth pair, each end
/// created directly inside its namespace (nothing of a World ever lives in the root namespace).
#[must_use]
pub fn create_script(id: WorldId) -> String {
    format!(
        "netns add {up}\nnetns add {sb}\n\
         link add {veth} netns {up} address {umac} type veth peer name {SANDBOX_IFACE} netns {sb} address {smac}\n",
        up = id.upstream_ns(),
        sb = id.sandbox_ns(),
        veth = id.upstream_veth(),
        umac = mac(UPSTREAM_MAC),
        smac = mac(SANDBOX_MAC),
    )
}

/// All service addresses of the upstream namespace.
#[must_use]
pub fn service_addrs() -> Vec<IpAddr> {
    vec![
        ALLOWED_V4.into(),
        BLOCKED_V4.into(),
        OTHER_V4.into(),
        GITHUB_V4.into(),
        DNS_V4.into(),
        FOREIGN_DNS_V4.into(),
        METADATA_V4.into(),
        ALLOWED_V6.into(),
    ]
}

/// `ip -n <upstream> -batch` script: loopback with the service addresses, the gateway side of
/// the veth. IPv6 addresses are added `nodad` so they are usable at once.
#[must_use]
pub fn upstream_script(id: WorldId) -> String {
    let veth = id.upstream_veth();
    let mut s = String::from("link set lo up\n");
    for addr in service_addrs() {
        match addr {
            IpAddr::V4(a) => s.push_str(&format!("addr add {a}/32 dev lo\n")),
            IpAddr::V6(a) => s.push_str(&format!("addr add {a}/128 dev lo nodad\n")),
        }
    }
    s.push_str(&format!("addr add {UPSTREAM_GW_V4}/24 dev {veth}\n"));
    s.push_str(&format!("addr add {UPSTREAM_GW_V6}/64 dev {veth} nodad\n"));
    s.push_str(&format!("link set {veth} up\n"));
    s
}

/// `ip -n <sandbox> -batch` script: loopback, the sandbox side of the veth, default routes for
/// both families via the upstream side.
#[must_use]
pub fn sandbox_script() -> String {
    format!(
        "link set lo up\n\
         addr add {SANDBOX_V4}/24 dev {SANDBOX_IFACE}\n\
         addr add {SANDBOX_V6}/64 dev {SANDBOX_IFACE} nodad\n\
         link set {SANDBOX_IFACE} up\n\
         route add default via {UPSTREAM_GW_V4}\n\
         route add default via {UPSTREAM_GW_V6}\n"
    )
}

/// The zone fakenet's DNS servers answer from.
#[must_use]
pub fn zone() -> BTreeMap<String, Vec<IpAddr>> {
    let mut z = BTreeMap::new();
    z.insert(
        ALLOWED_HOST.to_owned(),
        vec![ALLOWED_V4.into(), ALLOWED_V6.into()],
    );
    z.insert(BLOCKED_HOST.to_owned(), vec![BLOCKED_V4.into()]);
    z.insert(OTHER_HOST.to_owned(), vec![OTHER_V4.into()]);
    z.insert(V6_HOST.to_owned(), vec![ALLOWED_V6.into()]);
    z.insert(REBIND_HOST.to_owned(), vec![Ipv4Addr::LOCALHOST.into()]);
    z.insert(META_HOST.to_owned(), vec![METADATA_V4.into()]);
    z.insert(GITHUB_HOST.to_owned(), vec![GITHUB_V4.into()]);
    z.insert(GITHUB_API_HOST.to_owned(), vec![GITHUB_V4.into()]);
    z
}

fn listen(ip: impl Into<IpAddr>, port: u16) -> Listen {
    Listen {
        ip: ip.into(),
        port,
    }
}

fn tls(ip: impl Into<IpAddr>, port: u16, names: &[&str]) -> TlsListen {
    TlsListen {
        ip: ip.into(),
        port,
        names: names.iter().map(|n| (*n).to_owned()).collect(),
    }
}

/// The fakenet configuration of a World.
#[must_use]
pub fn fakenet_config(ca_cert_pem: String, ca_key_pem: String, log: &Path) -> Config {
    Config {
        ca_cert_pem,
        ca_key_pem,
        log: log.to_path_buf(),
        http: vec![
            listen(ALLOWED_V4, 80),
            listen(ALLOWED_V4, 8080),
            listen(BLOCKED_V4, 80),
            listen(OTHER_V4, 80),
            listen(ALLOWED_V6, 80),
            listen(METADATA_V4, 80),
        ],
        https: vec![
            tls(ALLOWED_V4, 443, &[ALLOWED_HOST]),
            tls(ALLOWED_V4, 8443, &[ALLOWED_HOST]),
            tls(BLOCKED_V4, 443, &[BLOCKED_HOST]),
            tls(OTHER_V4, 443, &[OTHER_HOST]),
            tls(ALLOWED_V6, 443, &[ALLOWED_HOST, V6_HOST]),
            tls(GITHUB_V4, 443, &[GITHUB_HOST, GITHUB_API_HOST]),
            // A certificate for another name (verification must fail for other.test).
            tls(OTHER_V4, 8443, &[WRONG_CERT_NAME]),
        ],
        dns: vec![
            listen(DNS_V4, 53),
            listen(FOREIGN_DNS_V4, 53),
            listen(ALLOWED_V6, 53),
        ],
        udp: vec![listen(ALLOWED_V4, 443)],
        zone: zone(),
        git: None,
    }
}

/// `/etc/resolv.conf` of the sandbox.
#[must_use]
pub fn resolv_conf() -> String {
    format!("nameserver {DNS_V4}\n")
}

/// `/etc/hosts` of the sandbox: loopback names only, everything else goes to DNS.
#[must_use]
pub fn hosts() -> String {
    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_fit_interface_names() {
        for (pid, seq) in [(1, 0), (4_194_304, 0), (4_194_304, 1_679_615), (12345, 7)] {
            let id = WorldId { pid, seq };
            assert!(id.upstream_veth().len() <= 15, "{}", id.upstream_veth());
            assert_eq!(WorldId::from_name(&id.upstream_ns()), Some(id));
            assert_eq!(WorldId::from_name(&id.sandbox_ns()), Some(id));
            assert_eq!(WorldId::from_name(&id.dir_name()), Some(id));
        }
    }

    #[test]
    fn foreign_names_are_not_ours() {
        for name in [
            "alk-",
            "alk-u-",
            "alk-u-x",
            "alk-u-AB-1",
            "docker0",
            "alk-u-1-",
            "cni-1234",
        ] {
            assert_eq!(WorldId::from_name(name), None, "{name}");
        }
    }

    #[test]
    fn scripts_name_the_world() {
        let id = WorldId { pid: 99, seq: 3 };
        let c = create_script(id);
        assert!(c.contains("netns add alk-u-2r-3") && c.contains("netns add alk-s-2r-3"));
        assert!(c.contains("link add alk-u2r-3 netns alk-u-2r-3"));
        let u = upstream_script(id);
        assert!(u.contains("addr add 169.254.169.254/32 dev lo"));
        assert!(u.contains("addr add 2001:db8:113::10/128 dev lo nodad"));
        assert!(sandbox_script().contains("route add default via 2001:db8:100::1"));
    }

    #[test]
    fn zone_matches_the_brief() {
        let z = zone();
        assert_eq!(z["v6.test"], vec![IpAddr::from(ALLOWED_V6)]);
        assert_eq!(z["rebind.test"], vec![IpAddr::from(Ipv4Addr::LOCALHOST)]);
        assert_eq!(z["meta.test"], vec![IpAddr::from(METADATA_V4)]);
    }
}
