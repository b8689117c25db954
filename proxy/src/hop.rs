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

/// Identity and routing headers: what a proxy, a CDN or an authenticating gateway in
/// front of an upstream sets, and what the upstream (or the next gateway) takes on its
/// word. This proxy sets none of them, so an agent-supplied one would reach the upstream as
/// if the proxy, or a gateway it passed, had vouched for it: the client's address, the
/// original host, path or scheme, the proxies passed, an authenticated user, a client
/// certificate, a bypass or role switch. Names compared lowercase (as `http` keeps them).
///
/// - forwarding (RFC 7239 and the de-facto forms): `forwarded`, `via`, every
///   `x-forwarded-*` (`-for`, `-host`, `-proto`, `-port`, `-prefix`, `-server`, and the
///   `-user`/`-email`/`-groups`/`-access-token`/`-client-cert` that oauth2-proxy and Envoy
///   set), `x-real-ip`, `x-client-ip`, `x-cluster-client-ip`, `x-originating-ip`,
///   `x-remote-ip`, `x-remote-addr`, `x-proxyuser-ip`, `client-ip`, `x-host`;
/// - CDNs: `true-client-ip` (Akamai, Cloudflare), `cf-connecting-ip`, `cf-connecting-ipv6`,
///   `cf-ipcountry`, `cf-visitor`, `cf-ray`, `cf-worker`, `cdn-loop`, `fastly-client-ip`,
///   `fastly-ff`, `fastly-ssl`, `akamai-origin-hop`, `x-akamai-edgescape`,
///   `x-azure-clientip`, `x-azure-socketip`, `x-azure-fdid` (the Front Door id origins
///   check), `x-nf-client-connection-ip`, `x-vercel-forwarded-for`, `x-vercel-ip-*`;
/// - rewrites a gateway applies or honours: `x-original-url`, `x-rewrite-url`,
///   `x-original-uri`, `x-original-host`, `x-original-forwarded-for`, `x-envoy-*` (Envoy
///   trusts `x-envoy-internal`, `-original-path`, `-external-address`, ... from a trusted
///   hop), `x-istio-attributes`;
/// - authenticated identity set by a gateway: `x-amzn-oidc-*` and `x-amzn-mtls-*` (AWS
///   ALB), `x-goog-authenticated-user-*`, `x-goog-iap-jwt-assertion` (Google IAP),
///   `x-apigateway-api-userinfo`, `x-endpoint-api-userinfo` (Google API gateways),
///   `x-ms-client-principal*`, `x-ms-token-*` (Azure App Service), `x-arr-clientcert`,
///   `x-arr-ssl`, `x-auth-request-*` (oauth2-proxy), `remote-user`, `x-remote-user`,
///   `x-webauth-user` (Grafana's auth proxy), `x-authenticated-user`,
///   `x-authenticated-userid`, `x-authenticated-groups`, `x-authenticated-scope`,
///   `x-consumer-*`, `x-anonymous-consumer`, `x-credential-identifier`,
///   `x-credential-username`, `x-userinfo` (Kong), `x-ssl-client-*`, `x-client-cert*`,
///   `ssl-client-cert`, `x-client-verify`, `x-client-dn` (TLS-terminating proxies);
/// - sandbox and egress-proxy vocabulary: `x-sandbox-id`, `x-internal`, `x-proxy-bypass`,
///   `x-smokescreen-role`, and airlock's own `x-airlock-*`.
///
/// `x-amz-*` (request signing), `x-amzn-trace-id`, `x-request-id` and other headers
/// clients set for themselves stay. The policy adds names and prefixes of its own
/// (`network.strip_headers`).
const CLAIMS: [&str; 59] = [
    "forwarded",
    "via",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-proxyuser-ip",
    "client-ip",
    "x-host",
    "true-client-ip",
    "cf-connecting-ip",
    "cf-connecting-ipv6",
    "cf-ipcountry",
    "cf-visitor",
    "cf-ray",
    "cf-worker",
    "cdn-loop",
    "fastly-client-ip",
    "fastly-ff",
    "fastly-ssl",
    "akamai-origin-hop",
    "x-akamai-edgescape",
    "x-azure-clientip",
    "x-azure-socketip",
    "x-azure-fdid",
    "x-nf-client-connection-ip",
    "x-vercel-forwarded-for",
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-original-host",
    "x-original-forwarded-for",
    "x-istio-attributes",
    "x-goog-iap-jwt-assertion",
    "x-apigateway-api-userinfo",
    "x-endpoint-api-userinfo",
    "x-arr-clientcert",
    "x-arr-ssl",
    "remote-user",
    "x-remote-user",
    "x-webauth-user",
    "x-authenticated-user",
    "x-authenticated-userid",
    "x-authenticated-groups",
    "x-authenticated-scope",
    "x-anonymous-consumer",
    "x-credential-identifier",
    "x-credential-username",
    "x-userinfo",
    "ssl-client-cert",
    "x-client-verify",
    "x-client-dn",
    "x-sandbox-id",
    "x-internal",
    "x-proxy-bypass",
    "x-smokescreen-role",
    "x-client-cert",
];

/// Prefixes of [`CLAIMS`] families (every name that starts with one is a claim).
const CLAIM_PREFIXES: [&str; 13] = [
    "x-forwarded-",
    "x-envoy-",
    "x-airlock-",
    "x-amzn-oidc-",
    "x-amzn-mtls-",
    "x-goog-authenticated-user-",
    "x-ms-client-principal",
    "x-ms-token-",
    "x-auth-request-",
    "x-ssl-client-",
    "x-client-cert-",
    "x-consumer-",
    "x-vercel-ip-",
];

/// Whether `name` (lowercase) is a header only a proxy may set ([`CLAIMS`],
/// [`CLAIM_PREFIXES`]). Every header of every request the proxy reads is asked, so the
/// lists are split by the name's first byte, and for `x-` names by its third: an honest
/// header is compared with a handful of entries at most.
#[must_use]
pub fn is_claim(name: &str) -> bool {
    let b = name.as_bytes();
    let key = match b {
        [b'x', b'-', c, ..] => usize::from(*c),
        [c, ..] if *c != b'x' => usize::from(*c) + 256,
        _ => return false,
    };
    BUCKETS.get_or_init(buckets).get(key).is_some_and(|bucket| {
        bucket.iter().any(|&(claim, prefix)| {
            if prefix {
                name.starts_with(claim)
            } else {
                name == claim
            }
        })
    })
}

/// [`CLAIMS`] (`false`) and [`CLAIM_PREFIXES`] (`true`) by [`is_claim`]'s key: the third
/// byte of an `x-` name, else 256 plus the first.
type Buckets = Vec<Vec<(&'static str, bool)>>;
static BUCKETS: std::sync::OnceLock<Buckets> = std::sync::OnceLock::new();

fn buckets() -> Buckets {
    let mut out: Buckets = vec![Vec::new(); 512];
    let all = CLAIMS
        .iter()
        .map(|c| (*c, false))
        .chain(CLAIM_PREFIXES.iter().map(|p| (*p, true)));
    for (claim, prefix) in all {
        let b = claim.as_bytes();
        let key = match b {
            [b'x', b'-', c, ..] => usize::from(*c),
            [c, ..] => usize::from(*c) + 256,
            [] => continue,
        };
        out[key].push((claim, prefix));
    }
    out
}

/// Removes from an agent's request what only a proxy may say: the built-in identity and
/// routing headers ([`is_claim`]) and those the policy names (`network.strip_headers`).
pub fn strip_claims(headers: &mut HeaderMap, network: &airlock_policy::Network) {
    if network.strip_headers.is_empty() {
        remove_where(headers, |k| is_claim(k.as_str()));
    } else {
        remove_where(headers, |k| {
            is_claim(k.as_str()) || network.strips_header(k.as_str())
        });
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
        strip_claims(&mut h, &airlock_policy::Network::default());
        let mut left: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["accept", "x-forwarded"]);
    }

    #[test]
    fn every_listed_claim_is_one_and_honest_look_alikes_are_not() {
        for name in CLAIMS {
            assert!(is_claim(name), "{name}");
            assert_eq!(name, name.to_ascii_lowercase(), "{name}");
        }
        for p in CLAIM_PREFIXES {
            assert!(is_claim(&format!("{p}anything")), "{p}");
        }
        for name in [
            "accept",
            "authorization",
            "content-type",
            "user-agent",
            "x-api-key",
            "x-amz-date",
            "x-amz-security-token",
            "x-amzn-trace-id",
            "x-request-id",
            "x-stainless-lang",
            "x-github-api-version",
            "anthropic-version",
            "cookie",
            "traceparent",
            "sec-websocket-key",
            "x-forwarded",
            "x-clientname",
        ] {
            assert!(!is_claim(name), "{name}");
        }
    }
}
