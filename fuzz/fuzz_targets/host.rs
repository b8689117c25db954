//! Host normalisation (`Host::parse`, `split_host_port`) and the proxy's authority
//! parsers built on it (CONNECT authority, base-URL path).
//!
//! Invariants: never panics; the canonical form re-parses to itself (and so does its
//! `authority(port)` through `split_host_port`); it contains no control, whitespace or
//! URL-significant character, only `[a-z0-9._-]` for a name (at most 253 characters,
//! labels 1..=63) or an IP address's own text; an IP literal's text is that address;
//! IPv4-mapped IPv6 never survives; a port is never 0; a strict subdomain of `example.com`
//! really ends in `.example.com`.
#![no_main]

use std::net::IpAddr;

use airlock_policy::{Host, split_host_port};
use airlock_proxy::decide::{base_url_target, connect_target};
use libfuzzer_sys::fuzz_target;

fn check(h: &Host) {
    let s = h.as_str();
    assert!(!s.is_empty());
    assert!(
        !s.chars()
            .any(|c| c.is_control() || c.is_whitespace() || "%/@\\[]".contains(c)),
        "{s:?}"
    );
    assert_eq!(
        Host::parse(s).as_ref(),
        Ok(h),
        "canonical form does not re-parse to itself"
    );
    match h.ip() {
        Some(ip) => {
            assert_eq!(s.parse::<IpAddr>().ok(), Some(ip), "{s:?}");
            if let IpAddr::V6(v6) = ip {
                assert!(
                    v6.to_ipv4_mapped().is_none(),
                    "mapped address survived: {s}"
                );
            }
        }
        None => {
            assert!(s.len() <= 253, "{s:?}");
            assert!(
                s.bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-')),
                "{s:?}"
            );
            for label in s.split('.') {
                assert!((1..=63).contains(&label.len()), "{s:?}");
            }
        }
    }
    for port in [1u16, 443, 65535] {
        assert_eq!(
            split_host_port(&h.authority(port), 80),
            Ok((h.clone(), port))
        );
    }
    let apex = Host::parse("example.com").unwrap_or_else(|e| panic!("{e}"));
    if h.is_strict_subdomain_of(&apex) {
        assert!(
            s.ends_with(".example.com") && s.len() > ".example.com".len(),
            "{s}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(h) = Host::parse(text) {
        check(&h);
        // Case and one trailing dot never matter for a name.
        if h.ip().is_none() {
            let upper = text.to_ascii_uppercase();
            assert_eq!(
                Host::parse(&upper).as_ref(),
                Ok(&h),
                "{text:?} vs {upper:?}"
            );
        }
    }
    for default in [80u16, 443] {
        if let Ok((h, port)) = split_host_port(text, default) {
            assert_ne!(port, 0);
            check(&h);
        }
    }
    if let Ok(t) = connect_target(text) {
        assert_ne!(t.port, 0);
        check(&t.host);
    }
    let path = format!("/https/{text}");
    if let Ok((t, rest)) = base_url_target(&path) {
        assert_ne!(t.port, 0);
        assert!(rest.starts_with('/'));
        check(&t.host);
    }
});
