//! Leaf certificates for intercepted hosts, minted from the appliance CA ([`mint`]) and
//! cached.
//!
//! Each host gets its **own** ECDSA P-256 key (never the CA's), a certificate valid for
//! [`LEAF_LIFETIME`] and backdated by [`BACKDATE`](crate::ca::BACKDATE) (a client clock
//! slightly behind ours still accepts it), with the host as its only subject alternative name (a DNS name, or an IP
//! address for a listed IP literal). The result is cached as a ready rustls
//! [`ServerConfig`] per host, so a repeat handshake does no key generation and no signing;
//! the cache is bounded ([`DEFAULT_CAPACITY`] hosts, least recently used evicted) and an
//! entry is re-minted an hour before its certificate expires.
//!
//! The certificate resolver of each cached configuration always answers the leaf of the
//! host it was built for: the host is the **checked target** (CONNECT authority, or the
//! transparent SNI), and the client's SNI was compared with it before the handshake started
//! (`intercept`), so a client cannot make us mint for a name it was not admitted to. A
//! client that sends no SNI (an IP literal target) gets the target's certificate too.
//!
//! ALPN offered to the agent: `http/1.1` only (the proxy serves intercepted traffic with an
//! HTTP/1.1 server; a client that offers only `h2` fails the handshake, audited
//! `client-tls-failed`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::sign::{CertifiedKey, SingleCertAndKey};

use crate::ca::{Ca, LEAF_LIFETIME, LeafError, mint};

/// A cached leaf is replaced this long before it expires.
const REFRESH_BEFORE: Duration = Duration::from_secs(3600);
/// Hosts kept in the cache.
pub const DEFAULT_CAPACITY: usize = 1024;

struct Entry {
    config: Arc<ServerConfig>,
    refresh_at: SystemTime,
    used: u64,
}

struct Cache {
    map: HashMap<Box<str>, Entry>,
    tick: u64,
}

/// The per-host server configurations, minted on first use and cached.
pub struct Leaves {
    ca: Arc<Ca>,
    provider: Arc<CryptoProvider>,
    capacity: usize,
    cache: Mutex<Cache>,
    minted: AtomicU64,
}

impl std::fmt::Debug for Leaves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaves")
            .field("capacity", &self.capacity)
            .field("minted", &self.minted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Leaves {
    /// A cache of at most `capacity` hosts (at least 1) under `ca`.
    #[must_use]
    pub fn new(ca: Arc<Ca>, capacity: usize) -> Self {
        Self {
            ca,
            provider: crate::crypto::provider(),
            capacity: capacity.max(1),
            cache: Mutex::new(Cache {
                map: HashMap::new(),
                tick: 0,
            }),
            minted: AtomicU64::new(0),
        }
    }

    /// The CA the leaves chain to.
    #[must_use]
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// How many leaves were minted so far (a cache hit mints none).
    #[must_use]
    pub fn minted(&self) -> u64 {
        self.minted.load(Ordering::Relaxed)
    }

    /// Hosts currently cached.
    #[must_use]
    pub fn len(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.map.len())
    }

    /// True when nothing is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The server configuration presenting `host`'s leaf (the checked target, canonical).
    ///
    /// # Errors
    /// [`LeafError::Mint`] when a new leaf cannot be made.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, LeafError> {
        self.server_config_at(host, SystemTime::now())
    }

    fn server_config_at(
        &self,
        host: &str,
        now: SystemTime,
    ) -> Result<Arc<ServerConfig>, LeafError> {
        if let Ok(mut cache) = self.cache.lock() {
            cache.tick += 1;
            let tick = cache.tick;
            if let Some(e) = cache.map.get_mut(host)
                && now < e.refresh_at
            {
                e.used = tick;
                return Ok(Arc::clone(&e.config));
            }
        }
        let certified = mint(&self.ca, host, now)?;
        self.minted.fetch_add(1, Ordering::Relaxed);
        let config = self.build(certified, host)?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.map.len() >= self.capacity && !cache.map.contains_key(host) {
                // Least recently used out: a scan, only on a miss with a full cache.
                let oldest = cache
                    .map
                    .iter()
                    .min_by_key(|(_, e)| e.used)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    cache.map.remove(&k);
                }
            }
            let used = cache.tick;
            cache.map.insert(
                host.into(),
                Entry {
                    config: Arc::clone(&config),
                    refresh_at: now + LEAF_LIFETIME - REFRESH_BEFORE,
                    used,
                },
            );
        }
        Ok(config)
    }

    fn build(&self, certified: CertifiedKey, host: &str) -> Result<Arc<ServerConfig>, LeafError> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| LeafError::Mint {
                host: host.to_owned(),
                detail: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        // One resumption ticket per connection is enough for a client that reconnects.
        config.send_tls13_tickets = 1;
        // Our suite order (AES-128-GCM first, `crypto`), not the client's.
        config.ignore_client_order = true;
        // Full records exactly 16 KiB on the wire (`crypto`).
        config.max_fragment_size = Some(crate::crypto::MAX_FRAGMENT_SIZE);
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::BACKDATE;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    fn verifier(ca: &Ca) -> Arc<rustls::client::WebPkiServerVerifier> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der().clone()).unwrap();
        rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
    }

    fn verify(ca: &Ca, leaf: &CertifiedKey, name: &str, at: SystemTime) -> Result<(), String> {
        verifier(ca)
            .verify_server_cert(
                &leaf.cert[0],
                &leaf.cert[1..],
                &ServerName::try_from(name.to_owned()).unwrap(),
                &[],
                UnixTime::since_unix_epoch(at.duration_since(SystemTime::UNIX_EPOCH).unwrap()),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_leaf_names_only_its_host_and_lives_a_day() {
        let ca = Ca::generate().unwrap();
        let now = SystemTime::now();
        let leaf = mint(&ca, "api.example.com", now).unwrap();
        assert!(verify(&ca, &leaf, "api.example.com", now).is_ok());
        assert!(verify(&ca, &leaf, "evil.example.com", now).is_err());
        assert!(
            verify(&ca, &leaf, "api.example.com", now - Duration::from_secs(60)).is_ok(),
            "backdated"
        );
        assert!(
            verify(
                &ca,
                &leaf,
                "api.example.com",
                now + LEAF_LIFETIME + BACKDATE
            )
            .is_err()
        );
        let ip = mint(&ca, "203.0.113.7", now).unwrap();
        assert!(verify(&ca, &ip, "203.0.113.7", now).is_ok());
        // Another CA does not vouch for it.
        let other = Ca::generate().unwrap();
        assert!(verify(&other, &leaf, "api.example.com", now).is_err());
    }

    #[test]
    fn every_host_has_its_own_key_never_the_cas() {
        let ca = Ca::generate().unwrap();
        let now = SystemTime::now();
        let a = mint(&ca, "a.example", now).unwrap();
        let b = mint(&ca, "b.example", now).unwrap();
        let spki = |k: &CertifiedKey| k.key.public_key().unwrap().as_ref().to_vec();
        assert_ne!(spki(&a), spki(&b));
        let ca_spki = rcgen::PublicKeyData::subject_public_key_info(ca.issuer().key());
        assert_ne!(spki(&a), ca_spki);
        // The certificate names the very key the handshakes sign with.
        for leaf in [&a, &b] {
            leaf.keys_match()
                .expect("the certificate's key is the signer's");
        }
    }

    #[test]
    fn the_cache_mints_once_per_host_and_stays_bounded() {
        let leaves = Leaves::new(Arc::new(Ca::generate().unwrap()), 3);
        let first = leaves.server_config("a.example").unwrap();
        let again = leaves.server_config("a.example").unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "a repeat handshake does no signing"
        );
        assert_eq!(leaves.minted(), 1);
        for h in ["b.example", "c.example"] {
            leaves.server_config(h).unwrap();
        }
        leaves.server_config("a.example").unwrap(); // a is now the most recent
        leaves.server_config("d.example").unwrap(); // evicts b, the least recent
        assert_eq!(leaves.len(), 3);
        assert_eq!(leaves.minted(), 4);
        leaves.server_config("a.example").unwrap();
        assert_eq!(leaves.minted(), 4, "a survived the eviction");
        leaves.server_config("b.example").unwrap();
        assert_eq!(leaves.minted(), 5, "b was evicted");
    }

    #[test]
    fn a_leaf_near_expiry_is_replaced() {
        let leaves = Leaves::new(Arc::new(Ca::generate().unwrap()), 8);
        let now = SystemTime::now();
        let first = leaves.server_config_at("a.example", now).unwrap();
        let later = now + LEAF_LIFETIME - REFRESH_BEFORE + Duration::from_secs(1);
        let second = leaves.server_config_at("a.example", later).unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(leaves.minted(), 2);
        assert_eq!(leaves.len(), 1);
    }

    #[test]
    fn only_http11_is_offered() {
        let leaves = Leaves::new(Arc::new(Ca::generate().unwrap()), 8);
        let c = leaves.server_config("a.example").unwrap();
        assert_eq!(c.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
