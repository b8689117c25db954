//! Hard-deny address ranges: addresses no policy, rule or approval can ever reach.
//!
//! [`hard_deny`] is checked on IP-literal hosts before any rule (see `Policy::decide`) and,
//! by the proxy, on every address a name resolves to before it connects. It answers for
//! the address alone; it knows nothing about the policy.
//!
//! IPv6 forms that embed an IPv4 address are judged by the embedded address, so that
//! `::ffff:169.254.169.254` is a metadata address, not an anonymous IPv6 one. Beyond that:
//! - IPv4-mapped (`::ffff:0:0/96`) reaches exactly the embedded IPv4 address, so it gets
//!   the embedded address's verdict and nothing more.
//! - Every other embedding is a *translation* form: the packet goes to a translator, relay
//!   or tunnel endpoint that forwards it to the embedded IPv4 (NAT64 `64:ff9b::/96` and
//!   `64:ff9b:1::/48`, SIIT `::ffff:0:0:0/96`, deprecated IPv4-compatible `::/96`, 6to4
//!   `2002::/16`, Teredo `2001::/32`). Where the translator sits, and what it can reach,
//!   is invisible from here (a NAT64 gateway or 6to4 relay is often inside the very network
//!   we must keep the agent out of, and Teredo hides the client address XOR-ed), so the
//!   real destination cannot be policed: these forms are denied outright. No public API
//!   host is published under them; a dual-stack host also has a native address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::reason::Reason;

/// Cloud metadata endpoints (AWS/GCP/Azure/OpenStack, AWS ECS task metadata, Alibaba).
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
];
/// AWS's IPv6 instance metadata endpoint (`fd00:ec2::254`).
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254)];

/// `Some(reason)` when `ip` must never be reached, `None` when only the policy decides.
///
/// Documentation ranges (`192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`,
/// `2001:db8::/32`) are deliberately *not* denied: the test network uses them.
#[must_use]
pub fn hard_deny(ip: IpAddr) -> Option<Reason> {
    match ip {
        IpAddr::V4(v4) => hard_deny_v4(v4),
        IpAddr::V6(v6) => hard_deny_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

fn hard_deny_v4(ip: Ipv4Addr) -> Option<Reason> {
    if METADATA_V4.contains(&ip) {
        return Some(Reason::BlockedMetadataAddress);
    }
    const PRIVATE: [([u8; 4], u32); 12] = [
        ([0, 0, 0, 0], 8),      // "this network", incl. unspecified 0.0.0.0
        ([10, 0, 0, 0], 8),     // RFC 1918
        ([100, 64, 0, 0], 10),  // CGNAT (RFC 6598)
        ([127, 0, 0, 0], 8),    // loopback
        ([169, 254, 0, 0], 16), // link-local
        ([172, 16, 0, 0], 12),  // RFC 1918
        ([192, 0, 0, 0], 24),   // IETF protocol assignments
        ([192, 168, 0, 0], 16), // RFC 1918
        ([198, 18, 0, 0], 15),  // benchmarking
        ([224, 0, 0, 0], 4),    // multicast
        ([240, 0, 0, 0], 4),    // reserved, incl. broadcast 255.255.255.255
        ([192, 88, 99, 0], 24), // 6to4 relay anycast (deprecated): a translator
    ];
    PRIVATE
        .iter()
        .any(|(net, len)| in_v4(ip, *net, *len))
        .then_some(Reason::BlockedPrivateAddress)
}

/// The verdict for a translation form: the embedded address's reason if it has one
/// (metadata stays metadata), private otherwise.
fn translation(embedded: Ipv4Addr) -> Option<Reason> {
    Some(hard_deny_v4(embedded).unwrap_or(Reason::BlockedPrivateAddress))
}

fn low32(ip: Ipv6Addr) -> Ipv4Addr {
    Ipv4Addr::from((u128::from(ip) & 0xffff_ffff) as u32)
}

fn hard_deny_v6(ip: Ipv6Addr) -> Option<Reason> {
    if METADATA_V6.contains(&ip) {
        return Some(Reason::BlockedMetadataAddress);
    }
    let bits = u128::from(ip);
    // IPv4-mapped: reaches exactly the embedded IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return hard_deny_v4(v4);
    }
    let v6 = |a, b, c| Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0);
    // IPv4-compatible ::/96 (also covers :: and ::1), SIIT ::ffff:0:0:0/96, NAT64.
    if in_v6(ip, Ipv6Addr::UNSPECIFIED, 96)
        || in_v6(ip, Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96)
        || in_v6(ip, v6(0x64, 0xff9b, 0), 96)
    {
        return translation(low32(ip));
    }
    if in_v6(ip, v6(0x64, 0xff9b, 1), 48) {
        // RFC 8215 local-use NAT64: the IPv4 position depends on the prefix length the
        // operator chose; judge the common /96 position, deny in any case.
        return translation(low32(ip));
    }
    // 6to4: 2002:AABB:CCDD::/48 embeds AA.BB.CC.DD.
    if in_v6(ip, v6(0x2002, 0, 0), 16) {
        return translation(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    // Teredo: 2001:0::/32, the client's IPv4 is the last 32 bits XOR-ed with all ones.
    if in_v6(ip, v6(0x2001, 0, 0), 32) {
        return translation(Ipv4Addr::from(!((bits & 0xffff_ffff) as u32)));
    }
    const PRIVATE: [(Ipv6Addr, u32); 6] = [
        (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64), // discard-only
        (Ipv6Addr::new(0x2001, 0x2, 0, 0, 0, 0, 0, 0), 48), // benchmarking
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local (deprecated)
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
    ];
    PRIVATE
        .iter()
        .any(|(net, len)| in_v6(ip, *net, *len))
        .then_some(Reason::BlockedPrivateAddress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;

    fn deny(text: &str) -> Option<Reason> {
        let host = Host::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        hard_deny(host.ip().unwrap_or_else(|| panic!("{text:?} is not an IP")))
    }
    const META: Option<Reason> = Some(Reason::BlockedMetadataAddress);
    const PRIV: Option<Reason> = Some(Reason::BlockedPrivateAddress);

    #[test]
    fn attack_every_encoding_of_loopback_and_metadata_is_denied() {
        for form in [
            "127.0.0.1",
            "127.1",
            "2130706433",
            "0x7f000001",
            "0x7f.1",
            "0177.0.0.1",
            "0177.0.1",
            "::ffff:127.0.0.1",
            "[::ffff:7f00:1]",
            "[::1]",
            "::127.0.0.1",
            "64:ff9b::127.0.0.1",
            "2002:7f00:1::",
            "127.255.255.254",
        ] {
            assert_eq!(deny(form), PRIV, "{form:?}");
        }
        for form in [
            "169.254.169.254",
            "0xa9.0xfe.0xa9.0xfe",
            "0xa9fea9fe",
            "2852039166",
            "0251.0376.0251.0376",
            "169.254.43518",
            "169.16689662",
            "0xa9.16689662",
            "::ffff:169.254.169.254",
            "[::ffff:a9fe:a9fe]",
            "::169.254.169.254",
            "64:ff9b::169.254.169.254",
            "64:ff9b:1::a9fe:a9fe",
            "::ffff:0:169.254.169.254",
            "2002:a9fe:a9fe::1",
            // Teredo with client 169.254.169.254 (XOR-ed): 0x5601:0x5601.
            "2001:0:4136:e378:8000:63bf:5601:5601",
            "169.254.170.2",
            "100.100.100.200",
            "fd00:ec2::254",
            "[FD00:0EC2:0000::0254]",
        ] {
            assert_eq!(deny(form), META, "{form:?}");
        }
    }

    #[test]
    fn private_and_reserved_ranges_are_denied() {
        for addr in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "fc00::1",
            "fdff::1",
            "ff02::1",
            "ff05::1:3",
            "64:ff9b::8.8.8.8",
            "64:ff9b:1::1",
            "100::1",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "::8.8.8.8",
            "::ffff:0:8.8.8.8",
            "::ffff:10.0.0.1",
            "2001:2::1",
        ] {
            assert_eq!(deny(addr), PRIV, "{addr:?}");
        }
    }

    #[test]
    fn public_and_documentation_addresses_are_left_to_the_policy() {
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.7",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "192.0.1.255",
            "2001:db8::1",
            "2001:db8:ffff::1",
            "2606:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "101::1",
            "100:0:0:1::1",
            "64:ff9b:2::1",
            "2001:1::1",
        ] {
            assert_eq!(deny(addr), None, "{addr:?}");
        }
    }
}
