//! TLS for fakenet's HTTPS listeners: one leaf per listener, signed by the test CA.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Signs leaf certificates with the test CA.
#[derive(Debug)]
pub struct Issuer {
    ca_cert_der: Vec<u8>,
    ca_key_pem: String,
}

impl Issuer {
    /// Loads the CA certificate (sent as the chain's second element) and key.
    pub fn from_pem(ca_cert_pem: &str, ca_key_pem: &str) -> anyhow::Result<Issuer> {
        let ca_cert_der = CertificateDer::pem_slice_iter(ca_cert_pem.as_bytes())
            .next()
            .context("the CA certificate PEM holds no certificate")?
            .context("parsing the CA certificate PEM")?
            .to_vec();
        Ok(Issuer {
            ca_cert_der,
            ca_key_pem: ca_key_pem.to_owned(),
        })
    }

    /// A rustls server configuration (ring provider, HTTP/1.1 ALPN) presenting a fresh leaf
    /// for `names` plus `ip`.
    pub fn server_config(&self, names: &[String], ip: IpAddr) -> anyhow::Result<Arc<ServerConfig>> {
        let (leaf, key) = crate::ca::issue_leaf(&self.ca_key_pem, names, Some(ip))?;
        let chain = vec![
            CertificateDer::from(leaf),
            CertificateDer::from(self.ca_cert_der.clone()),
        ];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .with_context(|| format!("TLS server certificate for {names:?}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
