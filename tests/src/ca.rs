//! The test CA: generated per World by the harness, used by fakenet to sign the leaf
//! certificates of its HTTPS listeners.
//!
//! Both sides build the CA's parameters with [`ca_params`], so fakenet can sign with the key
//! alone (the issuer name and key identifier are derived from the same parameters and key).

use std::net::IpAddr;

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Common name of the test CA.
pub const CA_COMMON_NAME: &str = "airlock fakenet test CA";

/// The parameters of the test CA (deterministic, see the module docs).
#[must_use]
pub fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A freshly generated test CA: `(certificate PEM, private key PEM)`.
pub fn generate_ca() -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate().context("generating the test CA key")?;
    let cert = ca_params()
        .self_signed(&key)
        .context("self-signing the test CA")?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A leaf certificate (DER) and its key (PKCS#8 DER) for `names` and `ip`, signed by the CA
/// whose key is `ca_key_pem`.
pub fn issue_leaf(
    ca_key_pem: &str,
    names: &[String],
    ip: Option<IpAddr>,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let ca_key = KeyPair::from_pem(ca_key_pem).context("parsing the test CA key")?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let mut params = CertificateParams::new(names.to_vec())
        .with_context(|| format!("leaf parameters for {names:?}"))?;
    if let Some(ip) = ip {
        params.subject_alt_names.push(SanType::IpAddress(ip));
    }
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().map_or("fakenet", String::as_str),
    );
    params.distinguished_name = dn;
    let key = KeyPair::generate().context("generating a leaf key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .with_context(|| format!("signing the leaf for {names:?}"))?;
    Ok((cert.der().to_vec(), key.serialize_der()))
}
