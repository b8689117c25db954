//! Host normalisation: one canonical form for every host a request names or a rule lists.
//!
//! Matching is only as good as normalisation. [`Host::parse`] turns whatever a client sent
//! (an HTTP `Host` header, a CONNECT authority, a TLS SNI, a DNS question) into the single
//! form the policy is matched against and the proxy then resolves, so that no spelling of a
//! host (case, trailing dot, Unicode look-alikes, legacy IPv4 encodings, IPv4-mapped IPv6)
//! can slip past a rule written for another spelling of the same host.
//!
//! The canonical form:
//! - a DNS name: lowercase ASCII (IDNA UTS-46 mapping and punycode, as browsers and curl do),
//!   no trailing dot, labels of 1..=63 characters from `[a-z0-9_-]`, at most 253 characters;
//! - an IPv4 address: dotted quad, whatever `inet_aton` form it was written in
//!   (`0x7f.1`, `0177.0.0.1`, `2130706433`, `127.1` are all `127.0.0.1`);
//! - an IPv6 address: compressed lowercase without brackets (`2001:db8::1`); an
//!   IPv4-mapped address (`::ffff:127.0.0.1`) becomes the IPv4 address.
//!
//! A name whose last label looks numeric (decimal, or `0x` hex) must be a valid IPv4
//! address or it is refused, exactly as the WHATWG URL standard does: `1.2.3.4.5` and
//! `0x1g.0.0.1` are errors, not names that a resolver might later treat as an address.
//!
//! This module does no I/O and never resolves anything.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};

/// Longest input [`Host::parse`] looks at, in bytes. Unicode input may shrink under IDNA
/// mapping, so this is larger than [`MAX_HOST_LEN`], but it bounds the work per request.
pub const MAX_INPUT_LEN: usize = 1024;
/// Longest canonical DNS name, in characters (without the trailing dot).
pub const MAX_HOST_LEN: usize = 253;
/// Longest DNS label, in characters.
pub const MAX_LABEL_LEN: usize = 63;

/// Why a host (or an authority) was refused.
///
/// The variants carry no copy of the input: hosts arrive from the agent on every request,
/// may be large or hostile, and the caller already holds them (and logs them escaped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing left to parse (empty input, or only a dot).
    #[error("empty host")]
    Empty,
    /// Longer than [`MAX_HOST_LEN`] (or [`MAX_INPUT_LEN`] before normalisation).
    #[error("host is longer than {MAX_HOST_LEN} characters")]
    TooLong,
    /// A character that can never be part of a host: control, whitespace, `%`, `/`, `@`,
    /// `\`, or (after normalisation) anything outside `[a-z0-9._-]`.
    #[error("forbidden character {0:?}")]
    ForbiddenChar(char),
    /// Two dots in a row, or a leading dot.
    #[error("empty label")]
    EmptyLabel,
    /// A label longer than [`MAX_LABEL_LEN`].
    #[error("label longer than {MAX_LABEL_LEN} characters")]
    LabelTooLong,
    /// The IDNA (UTS-46) conversion to ASCII failed (disallowed code point, bad punycode).
    #[error("not a valid international domain name (UTS-46)")]
    Idna,
    /// The last label looks numeric but the whole is not a valid IPv4 address.
    #[error("looks like an IPv4 address but is not a valid one")]
    InvalidIpv4,
    /// Brackets or colons, but not a valid IPv6 address.
    #[error("not a valid IPv6 address")]
    InvalidIpv6,
    /// IPv6 without brackets where a port may follow (an authority or a rule).
    #[error("an IPv6 address must be written in brackets, e.g. [2001:db8::1]:443")]
    UnbracketedIpv6,
    /// The port is not a number in 1..=65535.
    #[error("port must be a number in 1..=65535")]
    InvalidPort,
}

/// A host in canonical form (see the module docs). Two hosts are equal exactly when their
/// canonical forms are equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host {
    text: Box<str>,
    ip: Option<IpAddr>,
}

impl Host {
    /// Normalise a host as a client wrote it (no port; IPv6 with or without brackets).
    ///
    /// # Errors
    /// A [`HostError`] naming the first reason the input cannot be a host.
    pub fn parse(input: &str) -> Result<Host, HostError> {
        if input.is_empty() {
            return Err(HostError::Empty);
        }
        if input.len() > MAX_INPUT_LEN {
            return Err(HostError::TooLong);
        }
        if let Some(c) = input.chars().find(|c| is_forbidden(*c)) {
            return Err(HostError::ForbiddenChar(c));
        }
        if let Some(inner) = input.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or(HostError::InvalidIpv6)?;
            let v6: Ipv6Addr = inner.parse().map_err(|_| HostError::InvalidIpv6)?;
            return Ok(Host::from_ip(IpAddr::V6(v6)));
        }
        if input.contains([':', '[', ']']) {
            return parse_bare_ipv6(input);
        }

        let mapped: Cow<'_, str> = if is_canonical_ascii(input) {
            Cow::Borrowed(input)
        } else {
            Uts46::new()
                .to_ascii(
                    input.as_bytes(),
                    AsciiDenyList::URL,
                    Hyphens::Allow,
                    DnsLength::Ignore,
                )
                .map_err(|_| HostError::Idna)?
        };
        let name = mapped.strip_suffix('.').unwrap_or(&mapped);
        if name.is_empty() {
            return Err(HostError::Empty);
        }
        if let Some(b) = name
            .bytes()
            .find(|b| !matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.'))
        {
            return Err(HostError::ForbiddenChar(char::from(b)));
        }
        if ends_in_number(name) {
            let v4 = parse_ipv4(name).ok_or(HostError::InvalidIpv4)?;
            return Ok(Host::from_ip(IpAddr::V4(v4)));
        }
        if name.len() > MAX_HOST_LEN {
            return Err(HostError::TooLong);
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err(HostError::EmptyLabel);
            }
            if label.len() > MAX_LABEL_LEN {
                return Err(HostError::LabelTooLong);
            }
        }
        Ok(Host {
            text: name.into(),
            ip: None,
        })
    }

    /// The canonical host for an address (an IPv4-mapped IPv6 address becomes IPv4).
    /// Used for the original destination of a transparently redirected connection.
    #[must_use]
    pub fn from_ip(ip: IpAddr) -> Host {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        Host {
            text: ip.to_string().into_boxed_str(),
            ip: Some(ip),
        }
    }

    /// The canonical form (IPv6 without brackets).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The address, when the host is an IP literal.
    #[must_use]
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// `host:port`, with brackets around an IPv6 address: for request targets and logs.
    #[must_use]
    pub fn authority(&self, port: u16) -> String {
        match self.ip {
            Some(IpAddr::V6(_)) => format!("[{}]:{port}", self.text),
            _ => format!("{}:{port}", self.text),
        }
    }

    /// True when `self` is a strict subdomain of `suffix` (`a.example.com` and
    /// `a.b.example.com` of `example.com`; never `example.com` itself, never
    /// `evilexample.com`). IP literals are nobody's subdomain.
    #[must_use]
    pub fn is_strict_subdomain_of(&self, suffix: &Host) -> bool {
        if self.ip.is_some() || suffix.ip.is_some() {
            return false;
        }
        let (me, sfx) = (self.text.as_bytes(), suffix.text.as_bytes());
        me.len() > sfx.len() + 1
            && me.ends_with(sfx)
            && me.get(me.len() - sfx.len() - 1) == Some(&b'.')
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl serde::Serialize for Host {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// Split an authority (`example.com:443`, `[::1]:8080`, `example.com`) into a canonical
/// host and a port; `default_port` applies when no port is written. An IPv6 address must
/// be in brackets (otherwise its last group and a port cannot be told apart).
///
/// # Errors
/// [`HostError::InvalidPort`] for a missing, zero, non-numeric or too large port after a
/// colon, [`HostError::UnbracketedIpv6`], or any error of [`Host::parse`].
pub fn split_host_port(authority: &str, default_port: u16) -> Result<(Host, u16), HostError> {
    let (host, port) = split_authority(authority)?;
    let port = match port {
        Some(p) => parse_port(p).ok_or(HostError::InvalidPort)?,
        None => default_port,
    };
    Ok((Host::parse(host)?, port))
}

/// Split an authority into its host part (brackets kept) and its port text, without
/// judging either. Shared with rule parsing.
pub(crate) fn split_authority(authority: &str) -> Result<(&str, Option<&str>), HostError> {
    if authority.starts_with('[') {
        let close = authority.find(']').ok_or(HostError::InvalidIpv6)?;
        let (host, rest) = authority.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(HostError::InvalidIpv6),
            },
        };
    }
    match authority.rsplit_once(':') {
        None => Ok((authority, None)),
        Some((host, _)) if host.contains(':') => Err(HostError::UnbracketedIpv6),
        Some((host, port)) => Ok((host, Some(port))),
    }
}

/// A port as written in an authority or rule: 1 to 5 ASCII digits, value 1..=65535.
pub(crate) fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => None,
        Ok(p) => Some(p),
    }
}

/// Characters that are never part of a host, checked before any mapping (so that IDNA
/// cannot map them away, and so that URL-significant characters fail loudly).
fn is_forbidden(c: char) -> bool {
    c.is_control() || c.is_whitespace() || matches!(c, '%' | '/' | '@' | '\\')
}

/// Already canonical ASCII: lowercase LDH/underscore, and no punycode label that IDNA
/// would need to validate. Such input skips the IDNA pass (the common case, and fast).
fn is_canonical_ascii(input: &str) -> bool {
    input
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.'))
        && !input.split('.').any(|label| label.starts_with("xn--"))
}

fn parse_bare_ipv6(input: &str) -> Result<Host, HostError> {
    if let Ok(v6) = input.parse::<Ipv6Addr>() {
        return Ok(Host::from_ip(IpAddr::V6(v6)));
    }
    let looks_v6 = input
        .chars()
        .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    if looks_v6 {
        Err(HostError::InvalidIpv6)
    } else {
        // `example.com:443` given where a bare host was expected, or a stray bracket.
        let c = input.chars().find(|c| matches!(c, ':' | '[' | ']'));
        Err(HostError::ForbiddenChar(c.unwrap_or(':')))
    }
}

/// The WHATWG URL "ends in a number" test: the last label is all decimal digits, or `0x`
/// followed by hex digits. Such a host must be an IPv4 address.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// IPv4 in any form `inet_aton` accepts: 1 to 4 parts, each decimal, octal (leading `0`)
/// or hex (`0x`); every part but the last is one byte, the last fills the remaining bytes.
fn parse_ipv4(name: &str) -> Option<Ipv4Addr> {
    let mut parts = [0u64; 4];
    let mut count = 0usize;
    for text in name.split('.') {
        let slot = parts.get_mut(count)?;
        *slot = parse_ipv4_number(text)?;
        count += 1;
    }
    let (head, last) = match parts.get(..count)? {
        [head @ .., last] => (head, *last),
        [] => return None,
    };
    if head.iter().any(|p| *p > 255) {
        return None;
    }
    let last_bits = 8 * (5 - count as u32);
    if last >= 1u64 << last_bits {
        return None;
    }
    let value = head
        .iter()
        .enumerate()
        .fold(last, |acc, (i, p)| acc | (p << (24 - 8 * i as u32)));
    Some(Ipv4Addr::from(u32::try_from(value).ok()?))
}

/// One part of an `inet_aton` address; `None` for anything else or above `u32::MAX`.
fn parse_ipv4_number(text: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = text.strip_prefix("0x") {
        (hex, 16)
    } else if text.len() > 1 && text.starts_with('0') {
        (&text[1..], 8)
    } else if text.is_empty() {
        return None;
    } else {
        (text, 10)
    };
    let mut value: u64 = 0;
    for c in digits.chars() {
        let d = u64::from(c.to_digit(radix)?);
        value = value.checked_mul(u64::from(radix))?.checked_add(d)?;
        if value > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(input: &str) -> String {
        match Host::parse(input) {
            Ok(h) => h.as_str().to_owned(),
            Err(e) => panic!("{input:?} should parse: {e}"),
        }
    }

    #[test]
    fn case_and_trailing_dot_normalise() {
        assert_eq!(canon("EXAMPLE.com."), "example.com");
        assert_eq!(canon("Api.Anthropic.COM"), "api.anthropic.com");
        assert_eq!(Host::parse("example.com.."), Err(HostError::EmptyLabel));
        assert_eq!(Host::parse("."), Err(HostError::Empty));
        assert_eq!(Host::parse(".example.com"), Err(HostError::EmptyLabel));
        assert_eq!(Host::parse("a..b"), Err(HostError::EmptyLabel));
    }

    #[test]
    fn idna_homograph_forms_normalise() {
        // Full-width letters and a full-width dot are the same host as their ASCII forms.
        assert_eq!(canon("ＥＸＡＭＰＬＥ.com"), "example.com");
        assert_eq!(canon("example\u{ff0e}com"), "example.com");
        assert_eq!(canon("bücher.de"), "xn--bcher-kva.de");
        assert_eq!(canon("BÜCHER.de"), "xn--bcher-kva.de");
        assert_eq!(canon("xn--bcher-kva.de"), "xn--bcher-kva.de");
        // A soft hyphen is mapped away by UTS-46: same host, not a different one.
        assert_eq!(canon("exam\u{ad}ple.com"), "example.com");
        // Cyrillic "а" is a different host from Latin "a": it must not fold into it.
        assert_ne!(canon("ex\u{430}mple.com"), "example.com");
        // Invalid punycode is refused, not passed through.
        assert_eq!(Host::parse("xn--a.com"), Err(HostError::Idna));
    }

    #[test]
    fn attack_nul_crlf_and_url_characters_are_rejected() {
        for bad in [
            "example.com\0.evil.com",
            "example.com\r\nx-evil: 1",
            "example.com\n",
            "exa mple.com",
            "example.com\t",
            "example.com%2f",
            "user@example.com",
            "example.com/path",
            "example.com\\evil",
            "example.com\u{3000}",
            "example.com\u{85}",
        ] {
            assert!(
                matches!(Host::parse(bad), Err(HostError::ForbiddenChar(_))),
                "{bad:?} must be refused"
            );
        }
        // Characters IDNA lets through but no DNS name contains.
        for bad in ["exa*mple.com", "a!b.com", "a$b.com", "a'b.com"] {
            assert!(Host::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert_eq!(Host::parse(""), Err(HostError::Empty));
    }

    #[test]
    fn lengths_are_bounded() {
        let label63 = "a".repeat(63);
        assert!(Host::parse(&format!("{label63}.com")).is_ok());
        assert_eq!(
            Host::parse(&format!("{}.com", "a".repeat(64))),
            Err(HostError::LabelTooLong)
        );
        let long = [label63.as_str(); 4].join(".");
        assert_eq!(long.len(), 255);
        assert_eq!(Host::parse(&long), Err(HostError::TooLong));
        assert_eq!(Host::parse(&"a".repeat(5000)), Err(HostError::TooLong));
    }

    #[test]
    fn every_inet_aton_form_of_loopback_is_one_address() {
        for form in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "0x7f000001",
            "0X7F000001",
            "0x7f.1",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "0177.1",
            "017700000001",
            "127.0.0.1.",
            "0x7f.0x0.0x0.0x1",
            "127.0x0.00.1",
            "１２７.０.０.１",
            "０ｘ７ｆ.１",
            "[::ffff:127.0.0.1]",
            "::ffff:127.0.0.1",
            "::FFFF:7f00:1",
        ] {
            let host = Host::parse(form).unwrap_or_else(|e| panic!("{form:?}: {e}"));
            assert_eq!(host.as_str(), "127.0.0.1", "{form:?}");
            assert_eq!(host.ip(), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), "{form:?}");
        }
    }

    #[test]
    fn numeric_looking_names_are_errors_not_names() {
        for bad in [
            "1.2.3.4.5",
            "0x1g.0.0.1",
            "256.0.0.1",
            "1.2.3.256",
            "1.2.65536",
            "1.16777216",
            "4294967296",
            "09.0.0.1",
            "08",
            "example.123",
            "1..1",
            "0x100000000",
        ] {
            assert_eq!(Host::parse(bad), Err(HostError::InvalidIpv4), "{bad:?}");
        }
        assert_eq!(Host::parse("+1.0.0.1"), Err(HostError::ForbiddenChar('+')));
        // Numeric-looking labels are fine when the last label is not a number.
        assert_eq!(canon("0x7f.1.example"), "0x7f.1.example");
        assert_eq!(canon("1e100.net"), "1e100.net");
        assert_eq!(canon("0x.0.0.1"), "0.0.0.1");
    }

    #[test]
    fn ipv6_has_one_form() {
        assert_eq!(canon("[2001:DB8:0:0:0:0:0:1]"), "2001:db8::1");
        assert_eq!(canon("2001:db8::1"), "2001:db8::1");
        assert_eq!(canon("[::1]"), "::1");
        assert_eq!(Host::parse("[::1"), Err(HostError::InvalidIpv6));
        assert_eq!(
            Host::parse("[fe80::1%eth0]"),
            Err(HostError::ForbiddenChar('%'))
        );
        assert_eq!(Host::parse("[127.0.0.1]"), Err(HostError::InvalidIpv6));
        assert_eq!(Host::parse("[example.com]"), Err(HostError::InvalidIpv6));
        assert_eq!(Host::parse("1:2:3"), Err(HostError::InvalidIpv6));
        assert_eq!(
            Host::parse("example.com:443"),
            Err(HostError::ForbiddenChar(':'))
        );
        let h = Host::parse("[2001:db8::1]").unwrap();
        assert_eq!(h.authority(443), "[2001:db8::1]:443");
        assert_eq!(h.to_string(), "2001:db8::1");
    }

    #[test]
    fn split_host_port_forms() {
        let (h, p) = split_host_port("Example.com:8443", 80).unwrap();
        assert_eq!((h.as_str(), p), ("example.com", 8443));
        let (h, p) = split_host_port("example.com", 443).unwrap();
        assert_eq!((h.as_str(), p), ("example.com", 443));
        let (h, p) = split_host_port("[::1]:8080", 443).unwrap();
        assert_eq!((h.as_str(), p), ("::1", 8080));
        let (h, p) = split_host_port("[2001:db8::1]", 443).unwrap();
        assert_eq!((h.as_str(), p), ("2001:db8::1", 443));
        assert_eq!(
            split_host_port("2001:db8::1", 443),
            Err(HostError::UnbracketedIpv6)
        );
        for bad in [
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:+443",
            "example.com:44 3",
            "[::1]x",
            "[::1]:",
        ] {
            assert!(split_host_port(bad, 443).is_err(), "{bad:?}");
        }
        assert_eq!(
            split_host_port("example.com:443\r\n", 443),
            Err(HostError::InvalidPort)
        );
    }

    #[test]
    fn strict_subdomains_only() {
        let apex = Host::parse("example.com").unwrap();
        let sub = |s: &str| Host::parse(s).unwrap().is_strict_subdomain_of(&apex);
        assert!(sub("a.example.com"));
        assert!(sub("a.b.example.com"));
        assert!(!sub("example.com"));
        assert!(!sub("evilexample.com"));
        assert!(!sub("example.com.evil.net"));
        assert!(!sub("aexample.com"));
    }

    #[test]
    fn serializes_as_canonical_text() {
        let h = Host::parse("[2001:DB8::1]").unwrap();
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"2001:db8::1\"");
        let h = Host::parse("Example.COM.").unwrap();
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"example.com\"");
    }

    #[test]
    fn from_ip_unmaps_ipv4_mapped() {
        let h = Host::from_ip("::ffff:169.254.169.254".parse().unwrap());
        assert_eq!(h.as_str(), "169.254.169.254");
        assert!(matches!(h.ip(), Some(IpAddr::V4(_))));
    }
}
