//! Pure decisions: request target → host, policy verdict, address checks.
//!
//! Nothing here does I/O. The effects (resolving, connecting, answering) live in
//! `upstream`, `explicit` and `tunnel`, and only act on what these functions return.

use std::net::IpAddr;

use airlock_policy::address::hard_deny;
use airlock_policy::host::{Host, HostError, split_host_port};
use airlock_policy::reason::Reason;
use airlock_policy::{HostDecision, Mode, Policy};
use http::Uri;

use crate::audit::Verdict;
use crate::sniff::Sniff;

/// Where a request wants to go, canonicalised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

/// A refusal before any policy lookup: the request itself is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub reason: Reason,
    /// What the client sent as the host, for the error body (may be empty).
    pub raw_host: String,
}

/// Outcome of the policy step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    /// Why it was denied (or would have been, in report mode).
    pub reason: Option<Reason>,
    /// The rule that matched, if any.
    pub rule: Option<String>,
}

/// Longest authority accepted (a DNS name is at most 253 bytes, plus `:port` and brackets).
const MAX_AUTHORITY: usize = 300;

fn reject(reason: Reason, raw: &str) -> Rejected {
    let mut raw_host: String = raw.chars().take(MAX_AUTHORITY).collect();
    raw_host.retain(|c| !c.is_control());
    Rejected { reason, raw_host }
}

/// Parses a `CONNECT` authority (`host:port`, `[v6]:port`).
///
/// # Errors
/// `malformed-request` for a syntactically unusable authority (userinfo, oversize, no
/// port), `invalid-host` when the host does not canonicalise.
pub fn connect_target(authority: &str) -> Result<Target, Rejected> {
    if authority.is_empty() || authority.len() > MAX_AUTHORITY || authority.contains(['@', '/']) {
        return Err(reject(Reason::MalformedRequest, authority));
    }
    // CONNECT requires an explicit port (RFC 9110 §9.3.6).
    if !has_port(authority) {
        return Err(reject(Reason::MalformedRequest, authority));
    }
    split(authority, 443)
}

/// Parses an absolute-form request target (`http://host[:port]/path`). Returns the target
/// and the path (without the query, which is never logged).
///
/// # Errors
/// `malformed-request` for anything but an `http` absolute URI with a plain authority,
/// `invalid-host` when the host does not canonicalise.
pub fn http_target(uri: &Uri) -> Result<(Target, String), Rejected> {
    let Some(authority) = uri.authority() else {
        return Err(reject(Reason::MalformedRequest, ""));
    };
    let raw = authority.as_str();
    if uri.scheme_str() != Some("http") {
        return Err(reject(Reason::MalformedRequest, raw));
    }
    if raw.is_empty() || raw.len() > MAX_AUTHORITY || raw.contains('@') {
        return Err(reject(Reason::MalformedRequest, raw));
    }
    let target = split(raw, 80)?;
    Ok((target, uri.path().to_owned()))
}

/// Base-URL mode: the path `/https/<host>[:port]/<rest>` names `https://<host>[:port]`.
/// Returns the target (default port 443) and the upstream path `/<rest>` (at least `/`).
///
/// # Errors
/// `malformed-request` without a host (or with userinfo, an oversize authority or port 0),
/// `invalid-host` when the host does not canonicalise.
pub fn base_url_target(path: &str) -> Result<(Target, String), Rejected> {
    let Some(rest) = path.strip_prefix(airlock_channels::BASE_URL_PREFIX) else {
        return Err(reject(Reason::MalformedRequest, ""));
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.len() > MAX_AUTHORITY || authority.contains(['@', '%']) {
        return Err(reject(Reason::MalformedRequest, authority));
    }
    let target = split(authority, 443)?;
    Ok((target, tail.to_owned()))
}

fn has_port(authority: &str) -> bool {
    match authority.rfind(':') {
        None => false,
        Some(i) => {
            // `[::1]` has colons but no port; a port follows the closing bracket.
            let after = &authority[i + 1..];
            !after.is_empty()
                && after.bytes().all(|b| b.is_ascii_digit())
                && (!authority.starts_with('[') || authority[..i].ends_with(']'))
        }
    }
}

fn split(authority: &str, default_port: u16) -> Result<Target, Rejected> {
    match split_host_port(authority, default_port) {
        Ok((host, port)) if port != 0 => Ok(Target { host, port }),
        Ok(_) | Err(HostError::InvalidPort) => Err(reject(Reason::MalformedRequest, authority)),
        Err(_) => Err(reject(Reason::InvalidHost, authority)),
    }
}

/// Hard denies are never overridable: not by an allow rule, not by an approval and not by
/// report mode (documented in the README's report-mode section). Report mode exists to discover which ordinary hosts an agent needs; it must
/// not become a way to reach the metadata service, private ranges or raw IP literals, whose
/// whole point is that no configuration opens them.
#[must_use]
pub const fn is_hard(reason: Reason) -> bool {
    // Only "no rule allows this name/port" is a matter of configuration. Address hard
    // denies (`Reason::is_hard_deny`), IP literals (docs/design.md §4 lists "IP literals unless
    // listed" among the hard denies) and protocol violations (invalid host, fronting) stay
    // denied.
    !matches!(
        reason,
        Reason::BlockedByPolicy | Reason::BlockedPort | Reason::DeniedByRule
    )
}

/// The policy step for a canonical target: asked only by [`crate::admission`].
#[must_use]
pub(crate) fn decide(policy: &Policy, target: &Target) -> Decision {
    match policy.decide(&target.host, target.port) {
        HostDecision::Allow { rule } => Decision {
            verdict: Verdict::Allow,
            reason: None,
            rule: Some(rule),
        },
        HostDecision::Deny { reason, rule } => {
            let verdict = if matches!(policy.sandbox.mode, Mode::Report) && !is_hard(reason) {
                Verdict::Report
            } else {
                Verdict::Deny
            };
            Decision {
                verdict,
                reason: Some(reason),
                rule,
            }
        }
    }
}

/// Checks **every** resolved address: one hard-denied address denies the whole name.
///
/// Picking "the first good one" instead would let a name that mixes a public address with
/// 127.0.0.1 or 169.254.169.254 steer us to the bad one whenever the good one fails to
/// connect, and such a mix is itself the signature of a rebinding attempt.
///
/// # Errors
/// The first address's hard-deny reason, or `resolve-failed` for an empty set.
pub fn check_addresses(addrs: &[IpAddr]) -> Result<(), Reason> {
    if addrs.is_empty() {
        return Err(Reason::ResolveFailed);
    }
    for ip in addrs {
        if let Some(reason) = hard_deny(*ip) {
            return Err(reason);
        }
    }
    Ok(())
}

/// Inside a `CONNECT` tunnel: the TLS server name or the HTTP `Host` the client sends must
/// name the host it asked the proxy for (no domain fronting). A ClientHello without SNI and
/// protocols that are neither TLS nor HTTP pass (there is no second name to disagree).
///
/// # Errors
/// `sni-mismatch`, `host-mismatch`, or `malformed-request` for a broken TLS/HTTP start.
pub fn check_inner_host(target: &Target, sniffed: &Sniff) -> Result<(), Reason> {
    match sniffed {
        Sniff::Tls(Some(sni)) => match Host::parse(sni) {
            Ok(h) if h == target.host => Ok(()),
            _ => Err(Reason::SniMismatch),
        },
        Sniff::Http(Some(value)) => match split_host_port(value, target.port) {
            Ok((h, port)) if h == target.host && port == target.port => Ok(()),
            _ => Err(Reason::HostMismatch),
        },
        Sniff::Invalid => Err(Reason::MalformedRequest),
        // Inside a tunnel nobody decrypts, the outer name may be a front for another host.
        Sniff::TlsEch(_) => Err(Reason::EchRefused),
        Sniff::Tls(None) | Sniff::Http(None) | Sniff::Other | Sniff::NeedMore => Ok(()),
    }
}

/// On the transparent listener the host comes only from the client's first bytes; the port
/// is the original destination's.
///
/// # Errors
/// `unknown-host` when there is no name to check, `malformed-request` for a broken start,
/// `invalid-host` for a name that does not canonicalise, `host-mismatch` when the `Host`
/// header names another port than the connection's.
pub fn transparent_target(sniffed: &Sniff, orig_port: u16) -> Result<Target, Reason> {
    match sniffed {
        Sniff::Tls(Some(sni)) | Sniff::TlsEch(Some(sni)) => {
            let host = Host::parse(sni).map_err(|_| Reason::InvalidHost)?;
            Ok(Target {
                host,
                port: orig_port,
            })
        }
        Sniff::Http(Some(value)) => {
            let (host, port) =
                split_host_port(value, orig_port).map_err(|_| Reason::InvalidHost)?;
            if port == orig_port {
                Ok(Target { host, port })
            } else {
                Err(Reason::HostMismatch)
            }
        }
        Sniff::Invalid => Err(Reason::MalformedRequest),
        Sniff::Tls(None)
        | Sniff::TlsEch(None)
        | Sniff::Http(None)
        | Sniff::Other
        | Sniff::NeedMore => Err(Reason::UnknownHost),
    }
}

/// The transparent listener may only connect where the agent was going, and only if that
/// address is one the named host resolves to (no fronting by IP: `SNI allowed.com` sent to
/// an arbitrary address is refused).
///
/// # Errors
/// `sni-mismatch` (TLS) or `host-mismatch` (HTTP) when `orig` is not among `resolved`.
pub fn check_original_destination(
    orig: IpAddr,
    resolved: &[IpAddr],
    sniffed: &Sniff,
) -> Result<(), Reason> {
    let orig = orig.to_canonical();
    if resolved.iter().any(|ip| ip.to_canonical() == orig) {
        Ok(())
    } else if matches!(sniffed, Sniff::Tls(_) | Sniff::TlsEch(_)) {
        Err(Reason::SniMismatch)
    } else {
        Err(Reason::HostMismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connect_authority_forms() {
        let t = connect_target("Example.COM.:443").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("example.com", 443));
        let t = connect_target("[2001:db8::1]:8443").unwrap();
        assert_eq!(t.port, 8443);
        assert!(t.host.ip().is_some());
        // Legacy IPv4 spellings canonicalise (and are then judged as the address they are).
        let t = connect_target("0x7f.1:80").unwrap();
        assert_eq!(t.host.ip(), Some(ip("127.0.0.1")));
    }

    #[test]
    fn connect_attacks_are_rejected_with_the_right_reason() {
        for (input, reason) in [
            ("", Reason::MalformedRequest),
            ("example.com", Reason::MalformedRequest), // no port
            ("example.com:", Reason::MalformedRequest),
            ("example.com:0", Reason::MalformedRequest),
            ("example.com:99999", Reason::MalformedRequest),
            ("allowed.com@evil.com:443", Reason::MalformedRequest),
            ("evil.com/allowed.com:443", Reason::MalformedRequest),
            ("ex\u{0}ample.com:443", Reason::InvalidHost),
            ("bad_host!.com:443", Reason::InvalidHost),
            ("[::1:443", Reason::MalformedRequest),
        ] {
            let err = connect_target(input).unwrap_err();
            assert_eq!(err.reason, reason, "{input:?}");
            assert!(!err.raw_host.chars().any(char::is_control), "{input:?}");
        }
        let long = format!("{}.com:443", "a".repeat(400));
        assert_eq!(
            connect_target(&long).unwrap_err().reason,
            Reason::MalformedRequest
        );
    }

    #[test]
    fn absolute_form_targets() {
        let uri: Uri = "http://Example.com/a/b?token=secret".parse().unwrap();
        let (t, path) = http_target(&uri).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("example.com", 80));
        assert_eq!(path, "/a/b", "the query is never kept for the log");
        let uri: Uri = "http://example.com:8080/".parse().unwrap();
        assert_eq!(http_target(&uri).unwrap().0.port, 8080);
        for bad in [
            "https://example.com/",
            "ftp://example.com/",
            "/relative",
            "http://u:p@example.com/",
        ] {
            let uri: Uri = bad.parse().unwrap();
            assert_eq!(
                http_target(&uri).unwrap_err().reason,
                Reason::MalformedRequest,
                "{bad}"
            );
        }
    }

    #[test]
    fn base_url_paths() {
        let (t, p) = base_url_target("/https/API.Anthropic.com/v1/messages").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, p.as_str()),
            ("api.anthropic.com", 443, "/v1/messages")
        );
        let (t, p) = base_url_target("/https/example.com:8443").unwrap();
        assert_eq!((t.port, p.as_str()), (8443, "/"));
        for (bad, reason) in [
            ("/https/", Reason::MalformedRequest),
            ("/https//x", Reason::MalformedRequest),
            ("/https/u@example.com/x", Reason::MalformedRequest),
            ("/https/example.com%2Fevil.com/x", Reason::MalformedRequest),
            ("/https/example.com:0/x", Reason::MalformedRequest),
            ("/https/bad_host!/x", Reason::InvalidHost),
            ("/http/example.com/x", Reason::MalformedRequest),
        ] {
            assert_eq!(base_url_target(bad).unwrap_err().reason, reason, "{bad}");
        }
    }

    #[test]
    fn one_bad_address_denies_the_whole_name() {
        assert!(check_addresses(&[ip("203.0.113.5"), ip("2001:db8::5")]).is_ok());
        assert_eq!(
            check_addresses(&[ip("203.0.113.5"), ip("127.0.0.1")]),
            Err(Reason::BlockedPrivateAddress)
        );
        assert_eq!(
            check_addresses(&[ip("169.254.169.254"), ip("203.0.113.5")]),
            Err(Reason::BlockedMetadataAddress)
        );
        assert_eq!(
            check_addresses(&[ip("::ffff:10.0.0.1")]),
            Err(Reason::BlockedPrivateAddress)
        );
        assert_eq!(check_addresses(&[]), Err(Reason::ResolveFailed));
    }

    #[test]
    fn report_mode_never_opens_hard_denies() {
        for r in Reason::ALL {
            if r.is_hard_deny() {
                assert!(is_hard(r), "{r}");
            }
        }
        assert!(is_hard(Reason::BlockedIpLiteral));
        assert!(is_hard(Reason::InvalidHost));
        assert!(is_hard(Reason::SniMismatch));
        assert!(!is_hard(Reason::BlockedByPolicy));
    }
}

#[cfg(test)]
mod inner_host_tests {
    use super::*;

    fn target(a: &str) -> Target {
        connect_target(a).unwrap()
    }

    #[test]
    fn fronting_inside_connect_is_refused() {
        let t = target("allowed.com:443");
        assert_eq!(
            check_inner_host(&t, &Sniff::Tls(Some("ALLOWED.com.".into()))),
            Ok(())
        );
        assert_eq!(
            check_inner_host(&t, &Sniff::Tls(Some("evil.com".into()))),
            Err(Reason::SniMismatch)
        );
        assert_eq!(
            check_inner_host(&t, &Sniff::Tls(Some("bad\0name".into()))),
            Err(Reason::SniMismatch)
        );
        assert_eq!(check_inner_host(&t, &Sniff::Tls(None)), Ok(()));
        assert_eq!(
            check_inner_host(&t, &Sniff::Http(Some("allowed.com:443".into()))),
            Ok(())
        );
        assert_eq!(
            check_inner_host(&t, &Sniff::Http(Some("allowed.com".into()))),
            Ok(())
        );
        assert_eq!(
            check_inner_host(&t, &Sniff::Http(Some("allowed.com:80".into()))),
            Err(Reason::HostMismatch)
        );
        assert_eq!(
            check_inner_host(&t, &Sniff::Http(Some("evil.com".into()))),
            Err(Reason::HostMismatch)
        );
        assert_eq!(
            check_inner_host(&t, &Sniff::Invalid),
            Err(Reason::MalformedRequest)
        );
        assert_eq!(check_inner_host(&t, &Sniff::Other), Ok(()));
    }

    #[test]
    fn transparent_needs_a_name_and_the_right_address() {
        let t = transparent_target(&Sniff::Tls(Some("Api.Example.com".into())), 443).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("api.example.com", 443));
        assert_eq!(
            transparent_target(&Sniff::Tls(None), 443).unwrap_err(),
            Reason::UnknownHost
        );
        assert_eq!(
            transparent_target(&Sniff::Other, 22).unwrap_err(),
            Reason::UnknownHost
        );
        assert_eq!(
            transparent_target(&Sniff::Http(Some("a.com:8080".into())), 80).unwrap_err(),
            Reason::HostMismatch
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let resolved = [ip("203.0.113.1"), ip("2001:db8::1")];
        let tls = Sniff::Tls(Some("a.com".into()));
        assert_eq!(
            check_original_destination(ip("203.0.113.1"), &resolved, &tls),
            Ok(())
        );
        assert_eq!(
            check_original_destination(ip("::ffff:203.0.113.1"), &resolved, &tls),
            Ok(())
        );
        assert_eq!(
            check_original_destination(ip("198.51.100.9"), &resolved, &tls),
            Err(Reason::SniMismatch)
        );
        let http = Sniff::Http(Some("a.com".into()));
        assert_eq!(
            check_original_destination(ip("198.51.100.9"), &resolved, &http),
            Err(Reason::HostMismatch)
        );
    }
}
