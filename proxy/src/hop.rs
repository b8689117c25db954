//! Hop-by-hop header hygiene for forwarded HTTP (RFC 9110 §7.6.1).

use http::HeaderMap;
use http::header::{self, HeaderName};

/// Headers that only make sense on one hop and are never forwarded.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, every header the `Connection` header names, `Keep-Alive`,
/// and every `Proxy-*` header (credentials for this proxy must never travel upstream).
pub fn strip(headers: &mut HeaderMap) {
    // Headers named by `Connection` (collected only when present: usually none).
    let mut named: Vec<HeaderName> = Vec::new();
    for v in headers.get_all(header::CONNECTION) {
        let Ok(v) = v.to_str() else { continue };
        for t in v.split(',').map(str::trim) {
            if let Ok(n) = HeaderName::from_bytes(t.as_bytes())
                && headers.contains_key(&n)
            {
                named.push(n);
            }
        }
    }
    for name in named {
        headers.remove(name);
    }
    // The h2c upgrade's `HTTP2-Settings` (RFC 7540 §3.2.1) is meaningless without the
    // upgrade, which is never relayed.
    remove_where(headers, |k| {
        HOP_BY_HOP.contains(k)
            || matches!(k.as_str(), "keep-alive" | "http2-settings")
            || k.as_str().starts_with("proxy-")
    });
}

/// Removes every header whose name `doomed` picks: one pass over the names, a second only
/// when one is there (a lookup per listed name would hash and, for a `&str`, parse each).
fn remove_where(headers: &mut HeaderMap, doomed: impl Fn(&HeaderName) -> bool) {
    if headers.keys().any(&doomed) {
        let names: Vec<HeaderName> = headers.keys().filter(|k| doomed(k)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
    }
}

/// Headers that claim what a proxy on the way saw (the client's address, the original
/// host or scheme, the proxies passed): this proxy sets none of them, so an agent-supplied
/// one would reach the upstream as if the proxy had vouched for it.
const PROXY_CLAIMS: [&str; 7] = [
    "forwarded",
    "via",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "x-real-ip",
];

/// Removes from an agent's request what only a proxy may say: the [`PROXY_CLAIMS`] headers
/// and every `x-airlock-*` header (airlock's own vocabulary: an upstream must never take
/// one from the agent for the proxy's word).
pub fn strip_claims(headers: &mut HeaderMap) {
    remove_where(headers, |k| {
        PROXY_CLAIMS.contains(&k.as_str()) || k.as_str().starts_with("x-airlock-")
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn proxy_credentials_and_hop_headers_never_travel() {
        let mut h = HeaderMap::new();
        h.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic c2VjcmV0"),
        );
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("proxy-x-anything", HeaderValue::from_static("1"));
        h.insert(
            "connection",
            HeaderValue::from_static("close, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("leak"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer end-to-end"),
        );
        strip(&mut h);
        let left: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(h.contains_key("accept"));
        assert!(
            h.contains_key("authorization"),
            "end-to-end headers are kept"
        );
    }

    #[test]
    fn what_only_a_proxy_may_say_never_travels_from_the_agent() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-forwarded-for", "10.0.0.1"),
            ("X-Forwarded-Host", "internal.example"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-port", "443"),
            ("forwarded", "for=10.0.0.1;host=internal"),
            ("via", "1.1 airlock"),
            ("x-real-ip", "127.0.0.1"),
            ("x-airlock-error", "none"),
            ("x-airlock-credential", "anthropic"),
            ("accept", "*/*"),
            ("x-forwarded", "kept: not a claim of ours"),
        ] {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_static(v),
            );
        }
        strip_claims(&mut h);
        let mut left: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["accept", "x-forwarded"]);
    }
}
