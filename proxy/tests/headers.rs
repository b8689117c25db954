//! Headers only a proxy may set: identity and routing headers an upstream or a gateway in
//! front of it trusts (who the client is, where the request came from, which route it
//! takes) are the proxy's alone. The agent's copies never reach the upstream, on plain
//! HTTP or intercepted TLS, and the policy adds its own (`network.strip_headers`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use airlock_proxy::limits::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What an agent would set to speak for a proxy, a CDN or a gateway.
const CLAIMS: [&str; 32] = [
    "x-sandbox-id",
    "x-internal",
    "x-proxy-bypass",
    "x-smokescreen-role",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-client-cert",
    "x-forwarded-user",
    "forwarded",
    "via",
    "x-real-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "fastly-client-ip",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-envoy-internal",
    "x-envoy-original-path",
    "x-amzn-oidc-identity",
    "x-amzn-oidc-data",
    "x-goog-authenticated-user-email",
    "x-goog-iap-jwt-assertion",
    "x-ms-client-principal-name",
    "x-auth-request-user",
    "x-remote-user",
    "x-webauth-user",
    "x-ssl-client-cert",
    "x-airlock-credential",
];

/// Headers an honest client sends that look alike: they stay.
const KEPT: [&str; 6] = [
    "x-amz-date",
    "x-amz-content-sha256",
    "x-request-id",
    "x-forwarded",
    "x-github-api-version",
    "user-agent",
];

fn request_with(target: &str, host: &str) -> String {
    let mut raw = format!("GET {target} HTTP/1.1\r\nhost: {host}\r\n");
    for h in CLAIMS.iter().chain(&KEPT) {
        raw.push_str(&format!("{h}: from-the-agent\r\n"));
    }
    raw.push_str("X-Corp-User: admin\r\nx-tenant-id: other\r\nx-tenantless: kept\r\n\r\n");
    raw
}

fn check(head: &str) {
    let head = head.to_ascii_lowercase();
    for h in CLAIMS {
        assert!(
            !head.contains(&format!("\r\n{h}:")),
            "{h} reached the upstream: {head}"
        );
    }
    for h in KEPT {
        assert!(
            head.contains(&format!("\r\n{h}: from-the-agent\r\n")),
            "{h} was removed: {head}"
        );
    }
    assert!(
        !head.contains("x-corp-user"),
        "the policy's own list: {head}"
    );
    assert!(!head.contains("x-tenant-id"), "the policy's prefix: {head}");
    assert!(head.contains("x-tenantless: kept"), "{head}");
}

#[tokio::test]
async fn attack_identity_headers_the_agent_sets_never_reach_the_upstream() {
    let (up, mut heads) = http_server().await;
    let (tls, root, got) = tls_recorder("allowed.test").await;
    let extra = Extra {
        policy: "strip_headers = [\"x-corp-user\", \"X-Tenant-*\"]\n".into(),
        upstream_roots: vec![root],
        ..Extra::default()
    };
    let mut h = Harness::start_extra(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP])],
        &[route(ALLOWED_IP, 80, up), route(ALLOWED_IP, 443, tls)],
        Limits::default(),
        &extra,
    )
    .await;
    // Plain HTTP through the explicit port.
    let (_s, r) = request(
        h.addr,
        &request_with("http://allowed.test/x", "allowed.test"),
    )
    .await;
    assert_eq!(r.status, 200);
    check(&heads.recv().await.unwrap());
    // Intercepted TLS.
    let mut t = intercepted(&h, "allowed.test").await;
    t.write_all(request_with("/y", "allowed.test").as_bytes())
        .await
        .unwrap();
    let mut resp = [0u8; 12];
    t.read_exact(&mut resp).await.unwrap();
    assert_eq!(&resp, b"HTTP/1.1 200");
    let sent = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    check(&sent);
    drop(t);
    h.finish().await;
}
