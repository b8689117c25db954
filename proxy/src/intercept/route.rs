//! Where a request goes ([`Route`], [`Leg`]) and what its `Host` must say.

use std::net::IpAddr;

use airlock_policy::reason::Reason;
use http::Request;
use http::header::{self, HeaderValue};
use hyper::body::Incoming;

use crate::decide::Target;

/// How a route reaches its upstream, and what the request's `Host` must say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leg {
    /// The agent's own TLS terminated here (CONNECT, transparent): TLS to the upstream, and
    /// `Host` must name the target.
    Intercepted,
    /// Base-URL mode (`http://127.0.0.1:3128/https/<host>/...`): TLS to the upstream;
    /// `Host` names the proxy, not the target.
    BaseUrl,
    /// Plain HTTP forwarded from an absolute-form request: the target is the URL's.
    Plain,
}

/// Where one request goes.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub target: Target,
    /// The checked addresses (or the pinned original destination).
    pub addrs: Vec<IpAddr>,
    /// TLS to the upstream (intercepted, base-URL, service port) or plain HTTP.
    pub tls: bool,
    /// `Host` must agree with the target (false in base-URL mode, where it names us).
    pub check_host: bool,
    /// The `Host` header sent upstream (computed once per route, not per request).
    pub(super) host_header: Option<HeaderValue>,
}

impl Route {
    pub fn new(target: Target, addrs: Vec<IpAddr>, leg: Leg) -> Self {
        let tls = leg != Leg::Plain;
        let check_host = leg == Leg::Intercepted;
        let host_header = HeaderValue::from_str(&host_value(&target, tls)).ok();
        Self {
            target,
            addrs,
            tls,
            check_host,
            host_header,
        }
    }
}

/// `Host` value for `target` (default port omitted).
fn host_value(target: &Target, tls: bool) -> String {
    let host = match target.host.ip() {
        Some(IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => target.host.as_str().to_owned(),
    };
    let default = if tls { 443 } else { 80 };
    if target.port == default {
        host
    } else {
        format!("{host}:{}", target.port)
    }
}

/// Whether every `Host` header (at most one) and an absolute-form authority name the
/// route's target.
pub(super) fn host_agrees(req: &Request<Incoming>, route: &Route) -> Result<(), Reason> {
    let target = &route.target;
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(Reason::MalformedRequest);
    }
    let same = |raw: &str| {
        airlock_policy::host::split_host_port(raw, target.port)
            .is_ok_and(|(h, p)| h == target.host && p == target.port)
    };
    // The usual case costs a byte comparison: the value is exactly the one we send
    // upstream, the target's own rendering (which reads back as the target); anything
    // else is parsed and compared.
    if let Some(v) = first
        && route.host_header.as_ref() != Some(v)
    {
        let ok = v.to_str().is_ok_and(same);
        if !ok {
            return Err(Reason::HostMismatch);
        }
    }
    if let Some(a) = req.uri().authority()
        && !same(a.as_str())
    {
        return Err(Reason::HostMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::Host;

    /// `host_agrees`' shortcut (a `Host` byte-equal to the route's own value agrees) holds
    /// only if that value reads back as the target: names, IPv4 and IPv6 literals, default
    /// and other ports, both schemes.
    #[test]
    fn the_host_value_sent_upstream_reads_back_as_the_target() {
        for host in ["api.example.com", "203.0.113.7", "2001:db8::1"] {
            for port in [80, 443, 8443] {
                for tls in [false, true] {
                    let target = Target {
                        host: Host::parse(host).unwrap(),
                        port,
                    };
                    let value = host_value(&target, tls);
                    let back = airlock_policy::host::split_host_port(&value, port).unwrap();
                    assert_eq!(back, (target.host.clone(), port), "{value}");
                    let leg = if tls { Leg::Intercepted } else { Leg::Plain };
                    let route = Route::new(target, Vec::new(), leg);
                    assert!(route.host_header.is_some(), "{value}");
                }
            }
        }
    }
}
