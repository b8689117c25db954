//! Test TLS for the interception rows: a throwaway CA and one server certificate for every
//! address of 198.51.100.0/24 (so "a new host" is a new address), and client/server configs.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Writes `ca.pem`, `cert.pem` and `key.pem` (PKCS#8) into `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<()> {
    let mut ca = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "airlock-bench test CA");
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().context("CA key")?;
    let ca_cert = ca.self_signed(&ca_key).context("self-signing the CA")?;
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(vec!["bench.test".to_owned()])?;
    for i in 1..=254u8 {
        leaf.subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(
                198, 51, 100, i,
            ))));
    }
    let key = KeyPair::generate().context("leaf key")?;
    let cert = leaf.signed_by(&key, &issuer).context("signing the leaf")?;
    std::fs::write(dir.join("ca.pem"), ca_cert.pem())?;
    std::fs::write(dir.join("cert.pem"), cert.pem())?;
    std::fs::write(dir.join("key.pem"), key.serialize_pem())?;
    Ok(())
}

fn certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", path.display()))
}

/// The upstream's TLS configuration from `dir` (written by [`generate`]).
pub fn server(dir: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    server_with(dir, provider())
}

/// [`server`] with another crypto provider (the bare TLS relay's suite order).
pub fn server_with(
    dir: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let chain = certs(&dir.join("cert.pem"))?;
    let pem = std::fs::read(dir.join("key.pem"))?;
    let key = PrivatePkcs8KeyDer::from_pem_slice(&pem).context("no PKCS#8 key in key.pem")?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, PrivateKeyDer::Pkcs8(key))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A client configuration trusting only the CA in `ca` (the proxy's exported CA, or the
/// test CA for direct TLS).
pub fn client(ca: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    client_with(ca, provider())
}

/// [`client`] with another crypto provider (the bare TLS relay's suite order).
pub fn client_with(
    ca: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c)?;
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PEM files `generate` writes load back through rustls-pki-types' `PemObject`
    /// (rustls-pemfile, archived as RUSTSEC-2025-0134, is no longer used).
    #[test]
    fn generated_pem_files_load_as_server_and_client_configs() {
        let dir = std::env::temp_dir().join(format!("airlock-bench-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        generate(&dir).unwrap();
        assert_eq!(certs(&dir.join("cert.pem")).unwrap().len(), 1);
        server(&dir).unwrap();
        client(&dir.join("ca.pem")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
