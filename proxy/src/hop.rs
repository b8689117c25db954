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
    for name in HOP_BY_HOP {
        if headers.contains_key(&name) {
            headers.remove(name);
        }
    }
    if headers.contains_key("keep-alive") {
        headers.remove("keep-alive");
    }
    // The settings of an `h2c` upgrade (RFC 7540 §3.2.1): meaningless without the upgrade,
    // which is never relayed.
    if headers.contains_key("http2-settings") {
        headers.remove("http2-settings");
    }
    if headers.keys().any(|k| k.as_str().starts_with("proxy-")) {
        let proxy: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("proxy-"))
            .cloned()
            .collect();
        for name in proxy {
            headers.remove(name);
        }
    }
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
}
