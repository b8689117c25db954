//! Facts about the container's network read from `/proc` and `/etc`: default gateways and
//! the original resolvers. Parsing is pure; reading is one call each.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Default IPv4 gateway from the text of `/proc/net/route`.
pub fn default_gateway_v4(route: &str) -> Option<Ipv4Addr> {
    route.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (dest, gw, mask) = (cols.get(1)?, cols.get(2)?, cols.get(7)?);
        if *dest != "00000000" || *mask != "00000000" {
            return None;
        }
        let raw = u32::from_str_radix(gw, 16).ok()?;
        // /proc/net/route prints the address in host byte order of a little-endian load.
        let ip = Ipv4Addr::from(raw.to_le_bytes());
        (!ip.is_unspecified()).then_some(ip)
    })
}

/// Default IPv6 gateway from the text of `/proc/net/ipv6_route`.
pub fn default_gateway_v6(route: &str) -> Option<Ipv6Addr> {
    route.lines().find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (dest, plen, next_hop) = (cols.first()?, cols.get(1)?, cols.get(4)?);
        if dest.chars().any(|c| c != '0') || *plen != "00" {
            return None;
        }
        let raw = u128::from_str_radix(next_hop, 16).ok()?;
        let ip = Ipv6Addr::from(raw);
        (!ip.is_unspecified()).then_some(ip)
    })
}

/// Nameservers listed in the text of `/etc/resolv.conf`, in order.
pub fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver")
                .then(|| words.next()?.split('%').next()?.parse().ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_v4_default_gateway() {
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\neth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(
            default_gateway_v4(route),
            Some(Ipv4Addr::new(172, 17, 0, 1))
        );
        assert_eq!(default_gateway_v4("Iface\tDestination\n"), None);
    }

    #[test]
    fn finds_the_v6_default_gateway() {
        let route = "20010db8010000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n00000000000000000000000000000000 00 00000000000000000000000000000000 00 20010db8010000000000000000000001 00000400 00000001 00000000 00000003     eth0\n";
        assert_eq!(
            default_gateway_v6(route),
            Some("2001:db8:100::1".parse().unwrap())
        );
    }

    #[test]
    fn reads_nameservers() {
        let conf = "# comment\nsearch x\nnameserver 127.0.0.11\nnameserver fe80::1%eth0\noptions ndots:0\n";
        assert_eq!(
            nameservers(conf),
            vec![IpAddr::from([127, 0, 0, 11]), "fe80::1".parse().unwrap()]
        );
    }
}
