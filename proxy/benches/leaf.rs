//! What a new intercepted host costs the proxy before its first byte: minting its leaf
//! (key, certificate signed by the appliance CA) and building its TLS server
//! configuration, and what a cached host costs. Then the public-key operations a new
//! intercepted connection cannot avoid, with the provider the proxy uses, and their sums:
//! the cryptographic floor of a new connection with a pooled upstream and of one to a new
//! host (`bench/run.sh`'s "new conn" and "leaf minted" figures sit on top of these, with
//! the kernel's TCP work and the HTTP exchange). Prints tables (µs, median of rounds).
//! Run: `cargo bench -p airlock-proxy --bench leaf`.

#![allow(clippy::expect_used)] // a bench that cannot mint has nothing to measure

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use airlock_proxy::ca::{Ca, mint};
use airlock_proxy::leaf::Leaves;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{ServerName, UnixTime};
use rustls::{NamedGroup, SignatureScheme};

const HOSTS: usize = 200;
const ROUNDS: usize = 7;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6 / HOSTS as f64
}

fn rounds(mut f: impl FnMut(usize)) -> f64 {
    let mut times = Vec::with_capacity(ROUNDS);
    for r in 0..ROUNDS {
        let t = Instant::now();
        for i in 0..HOSTS {
            f(r * HOSTS + i);
        }
        times.push(t.elapsed());
    }
    median(times)
}

fn main() {
    let ca = Arc::new(Ca::generate().expect("CA"));
    let now = SystemTime::now();
    let mint_us = rounds(|i| {
        mint(&ca, &format!("h{i}.bench.test"), now).expect("mint");
    });
    let leaves = Leaves::new(Arc::clone(&ca), 1 << 20);
    let new_host_us = rounds(|i| {
        leaves
            .server_config(&format!("n{i}.bench.test"))
            .expect("config");
    });
    let cached_us = rounds(|i| {
        leaves
            .server_config(&format!("n{}.bench.test", i % HOSTS))
            .expect("config");
    });
    println!("| step (per host, median of {ROUNDS} rounds of {HOSTS}) | µs |");
    println!("|---|---|");
    println!("| mint: leaf key + certificate signed by the CA | {mint_us:.1} |");
    println!("| new host: mint + TLS server configuration, cached | {new_host_us:.1} |");
    println!("| cached host: configuration from the cache | {cached_us:.2} |");
    println!();
    floor(&ca, now, new_host_us);
}

/// The public-key operations of a new intercepted connection, one at a time, and their sums.
fn floor(ca: &Arc<Ca>, now: SystemTime, new_host_us: f64) {
    let provider = airlock_proxy::crypto::provider();
    let x25519 = *provider
        .kx_groups
        .iter()
        .find(|g| g.name() == NamedGroup::X25519)
        .expect("X25519 in the provider");
    let peer = x25519.start().expect("peer key share");
    let peer_share = peer.pub_key().to_vec();
    // One side of an X25519 exchange: our key share, then the shared secret.
    let kx_us = rounds(|_| {
        let ours = x25519.start().expect("key share");
        std::hint::black_box(ours.pub_key());
        std::hint::black_box(ours.complete(&peer_share).expect("shared secret"));
    });
    // The leaf's CertificateVerify signature (a full handshake; a resumed one has none).
    let leaf = mint(ca, "sign.bench.test", now).expect("mint");
    let signer = leaf
        .key
        .choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
        .expect("a P-256 signer");
    let transcript = [0x20u8; 130];
    let sign_us = rounds(|_| {
        std::hint::black_box(signer.sign(&transcript).expect("signature"));
    });
    // Upstream: the server's chain (here a leaf of a CA, as the bench upstream has; one
    // signature, parsing and path building), then its CertificateVerify (one signature).
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der().clone()).expect("root");
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()
    .expect("verifier");
    let upstream = mint(ca, "upstream.bench.test", now).expect("mint");
    let name = ServerName::try_from("upstream.bench.test").expect("name");
    let at = UnixTime::since_unix_epoch(now.duration_since(SystemTime::UNIX_EPOCH).expect("clock"));
    let chain_us = rounds(|_| {
        verifier
            .verify_server_cert(&upstream.cert[0], &upstream.cert[1..], &name, &[], at)
            .expect("chain verifies");
    });
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let upstream_signer = rustls::crypto::ring::sign::any_ecdsa_type(&der)
        .expect("signing key")
        .choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
        .expect("a P-256 signer");
    let signature = upstream_signer.sign(&transcript).expect("signature");
    let algorithm = provider
        .signature_verification_algorithms
        .mapping
        .iter()
        .find(|(s, _)| *s == SignatureScheme::ECDSA_NISTP256_SHA256)
        .and_then(|(_, algs)| algs.first())
        .expect("a P-256 verifier");
    let public = key.public_key_raw().to_vec();
    let verify_us = rounds(|_| {
        algorithm
            .verify_signature(&public, &transcript, &signature)
            .expect("signature verifies");
    });
    let pooled = kx_us + sign_us;
    let fresh = 2.0 * kx_us + sign_us + chain_us + verify_us + new_host_us;
    println!("| public-key operation (median of {ROUNDS} rounds of {HOSTS}) | µs |");
    println!("|---|---|");
    println!("| X25519, one side (key share + shared secret) | {kx_us:.1} |");
    println!("| ECDSA P-256 signature (the leaf's CertificateVerify) | {sign_us:.1} |");
    println!("| upstream chain verified (one signature, parsing, path) | {chain_us:.1} |");
    println!("| ECDSA P-256 verification (the upstream's CertificateVerify) | {verify_us:.1} |");
    println!(
        "| floor, new connection, pooled upstream: X25519 + signature (a resumed handshake: X25519 only, {kx_us:.1}) | {pooled:.1} |"
    );
    println!(
        "| floor, new host: 2 × X25519 + signature + chain + verification + new leaf | {fresh:.1} |"
    );
}
