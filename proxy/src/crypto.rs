//! The one crypto provider both TLS sides of an intercepted connection use: rustls's
//! **ring** provider (never aws-lc), with AES-128-GCM suites preferred.
//!
//! Why AES-128 first: the key exchange (X25519 or P-256) and the leaf's P-256 signature give
//! 128-bit security, so AES-256 adds no strength to the connection; AES-128-GCM is TLS 1.3's
//! mandatory suite, has four fewer rounds per block, and its SHA-256 key schedule runs on
//! the CPU's SHA extensions where SHA-384 (the AES-256 suite's hash) runs in software. On
//! the agent side the proxy's order is applied (`ignore_client_order`); upstream it is the
//! order offered. No suite is removed: a peer that only speaks another still connects.
//!
//! Both sides also cap records at [`MAX_FRAGMENT_SIZE`], so a full TLS 1.3 record is exactly
//! 16 KiB on the wire.

use std::sync::Arc;

use rustls::CipherSuite;
use rustls::crypto::CryptoProvider;

/// `max_fragment_size` for both TLS sides (rustls counts the 5-byte header): a full TLS 1.3
/// record carries 16 362 bytes of data and is exactly 16 384 bytes on the wire (header,
/// data, content type, 16-byte tag), where the default makes it 16 406.
///
/// Why: every record the proxy sends is copied by the kernel into its page fragments, and
/// on CPUs whose `rep movsb` collapses when the destination sits a few bytes past the source
/// modulo 4 KiB (AMD Zen 3 and 4, the reason for the entrypoint's `PROXY_GLIBC_TUNABLES`)
/// that copy's speed depends on where the destination lands. The likely mechanism: each
/// 16 406-byte record moves the next destination 22 bytes on and keeps finding that window,
/// 16 KiB records keep the destinations page-aligned. What was measured, A/B on the dev
/// machine (intercepted 1 MiB downloads, 8 alternating runs each): with 16 406-byte records
/// half the runs fell into a slow mode (proxy CPU 1.13-1.17 ms per MiB instead of 0.90,
/// 770-800 MiB/s), with 16 KiB records none did (863-923 MiB/s). The cost is one more
/// record (22 bytes of overhead) per 11.6 MiB.
pub const MAX_FRAGMENT_SIZE: usize = 16_367;

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
