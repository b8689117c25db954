//! The one crypto provider both TLS sides of an intercepted connection use: rustls's
//! **ring** provider (never aws-lc), with AES-128-GCM suites preferred.
//!
//! Why AES-128 first: the key exchange (X25519 or P-256) and the leaf's P-256 signature give
//! 128-bit security, so AES-256 adds no strength to the connection; AES-128-GCM is TLS 1.3's
//! mandatory suite, has four fewer rounds per block, and its SHA-256 key schedule runs on
//! the CPU's SHA extensions where SHA-384 (the AES-256 suite's hash) runs in software. On
//! the agent side the proxy's order is applied (`ignore_client_order`); upstream it is the
//! order offered. No suite is removed: a peer that only speaks another still connects.

use std::sync::Arc;

use rustls::CipherSuite;
use rustls::crypto::CryptoProvider;

/// ring's default provider with the AES-128-GCM suites moved to the front (the rest in
/// ring's order).
#[must_use]
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| !aes_128_gcm(s.suite()));
    Arc::new(provider)
}

const fn aes_128_gcm(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aes_128_gcm_comes_first_and_no_suite_is_lost() {
        let ours = provider();
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(
            ours.cipher_suites[0].suite(),
            CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        let mut a: Vec<_> = ours
            .cipher_suites
            .iter()
            .map(|s| u16::from(s.suite()))
            .collect();
        let mut b: Vec<_> = ring
            .cipher_suites
            .iter()
            .map(|s| u16::from(s.suite()))
            .collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}
