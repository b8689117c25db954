//! The appliance CA: the issuer of the leaf certificates the proxy shows the agent on
//! intercepted connections.
//!
//! At start the proxy looks in its state directory (`channels::PROXY_STATE_SUBDIR`, 0700,
//! proxy-owned): when both `ca.pem` and `ca-key.pem` are there (an operator CA placed by the
//! entrypoint, or a restarted proxy's own) they are used, after checking that the key really
//! signs for the certificate; when neither is, a fresh ECDSA P-256 CA is generated and the
//! key written `0600` (created exclusively, symlinks refused), the certificate `0644`. One of
//! the two alone is an error: a half-written state is never completed by guessing.
//!
//! The public certificate is exported (`--ca-export`, atomically, `0644`) for the entrypoint
//! to add to the agent's trust. The key never leaves this process's memory and that file.
//!
//! Signing is the CA's: [`mint`] makes a leaf (its own key, signed with the CA's) for a host;
//! the load check mints one too. The per-host cache of leaves is `leaf`.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_channels::{CA_CERT_FILE, CA_KEY_FILE};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// Common name of a generated appliance CA.
pub const CA_COMMON_NAME: &str = "airlock appliance CA";
/// Lifetime of a generated CA. The state directory is a tmpfs: a new container start makes a
/// new CA, so this only has to outlive one (long) session.
const CA_LIFETIME: Duration = Duration::from_secs(366 * 24 * 3600);

/// Loading, generating or exporting the CA failed.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A CA file could not be read.
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A CA file could not be written.
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    /// Only one of the certificate and the key exists.
    #[error(
        "{present} exists but {missing} does not: remove both to generate a new CA, or provide both"
    )]
    HalfPresent { present: PathBuf, missing: PathBuf },
    /// The key file does not hold a usable private key.
    #[error(
        "{path}: not a usable private key (PKCS#8 ECDSA P-256/P-384, Ed25519 or RSA PEM): {detail}"
    )]
    Key { path: PathBuf, detail: String },
    /// The certificate file does not hold a usable CA certificate.
    #[error("{path}: not a usable CA certificate: {detail}")]
    Cert { path: PathBuf, detail: String },
    /// The key does not sign for the certificate.
    #[error("{key} does not belong to the certificate {cert}: {detail}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        detail: String,
    },
    /// Generating the CA failed.
    #[error("cannot generate the appliance CA: {0}")]
    Generate(String),
}

/// The CA: an issuer (its name and key) and its certificate.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A fresh in-memory CA (nothing written).
    ///
    /// # Errors
    /// [`CaError::Generate`] when key generation or self-signing fails.
    pub fn generate() -> Result<Self, CaError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|e| CaError::Generate(e.to_string()))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, CA_COMMON_NAME);
        dn.push(DnType::OrganizationName, "airlock");
        params.distinguished_name = dn;
        // Leaves only: no intermediate may be minted under it.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = (now - Duration::from_secs(3600)).into();
        params.not_after = (now + CA_LIFETIME).into();
        let cert = params
            .self_signed(&key)
            .map_err(|e| CaError::Generate(e.to_string()))?;
        let cert_der = cert.der().clone();
        let cert_pem = cert.pem();
        Ok(Self {
            issuer: Issuer::new(params, key),
            cert_der,
            cert_pem,
        })
    }

    /// Uses `<dir>/ca.pem` + `<dir>/ca-key.pem` when both exist; generates and writes them
    /// when neither does.
    ///
    /// # Errors
    /// See [`CaError`]: unreadable, half present, unusable or mismatched files, or a write
    /// failure.
    pub fn load_or_generate(dir: &Path) -> Result<Self, CaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let cert_exists = exists(&cert_path)?;
        let key_exists = exists(&key_path)?;
        match (cert_exists, key_exists) {
            (true, true) => Self::load(&cert_path, &key_path),
            (false, false) => {
                let ca = Self::generate()?;
                // The key first, exclusively: a concurrent or stale writer makes us fail, never
                // share a key file someone else created.
                write_new(&key_path, ca.issuer.key().serialize_pem().as_bytes(), 0o600)?;
                write_new(&cert_path, ca.cert_pem.as_bytes(), 0o644)?;
                Ok(ca)
            }
            (true, false) => Err(CaError::HalfPresent {
                present: cert_path,
                missing: key_path,
            }),
            (false, true) => Err(CaError::HalfPresent {
                present: key_path,
                missing: cert_path,
            }),
        }
    }

    /// Loads a CA from its two PEM files and proves the key signs for the certificate (a
    /// leaf minted with the key must verify against the certificate as trust anchor).
    ///
    /// # Errors
    /// See [`CaError`].
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, CaError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| CaError::Read {
                path: p.to_owned(),
                source,
            })
        };
        let cert_pem = read(cert_path)?;
        let key_pem = read(key_path)?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| CaError::Key {
            path: key_path.to_owned(),
            detail: e.to_string(),
        })?;
        let cert_der =
            CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| CaError::Cert {
                path: cert_path.to_owned(),
                detail: e.to_string(),
            })?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(|e| CaError::Cert {
            path: cert_path.to_owned(),
            detail: e.to_string(),
        })?;
        let ca = Self {
            issuer,
            cert_der,
            cert_pem,
        };
        ca.self_check().map_err(|detail| CaError::Mismatch {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
            detail,
        })?;
        Ok(ca)
    }

    /// Mints a throwaway leaf and verifies it against the certificate with webpki.
    fn self_check(&self) -> Result<(), String> {
        let leaf = mint(self, "airlock-self-check.invalid", SystemTime::now())
            .map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.cert_der.clone())
            .map_err(|e| format!("the certificate is not a usable trust anchor: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| e.to_string())?;
        let name = rustls::pki_types::ServerName::try_from("airlock-self-check.invalid")
            .map_err(|e| e.to_string())?;
        let end_entity = leaf.cert.first().ok_or("no leaf certificate")?;
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            end_entity,
            &[],
            &name,
            &[],
            rustls::pki_types::UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| format!("a leaf signed with the key does not verify: {e}"))
    }

    /// The issuer (name + key) leaves are signed with.
    pub(crate) const fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }

    /// The CA certificate (DER), sent as the second element of every leaf chain.
    #[must_use]
    pub const fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA certificate (PEM).
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes the certificate to `path`, `0644`, atomically (a temporary file in the same
    /// directory, then `rename`), so a reader never sees half a certificate.
    ///
    /// # Errors
    /// [`CaError::Write`].
    pub fn export(&self, path: &Path) -> Result<(), CaError> {
        let name = path
            .file_name()
            .map_or_else(|| "ca.pem".into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        write_new(&tmp, self.cert_pem.as_bytes(), 0o644)?;
        std::fs::rename(&tmp, path).map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            CaError::Write {
                path: path.to_owned(),
                source,
            }
        })
    }
}

/// How long a leaf certificate is valid.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// How far back a leaf's validity starts (client clock skew).
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Minting a leaf failed.
#[derive(Debug, thiserror::Error)]
pub enum LeafError {
    /// Key generation or signing failed.
    #[error("cannot mint a certificate for {host}: {detail}")]
    Mint { host: String, detail: String },
}

/// A fresh leaf for `host` (a canonical host name or IP literal), valid from `now - BACKDATE`
/// for [`LEAF_LIFETIME`], with its own key, chained to the CA.
///
/// # Errors
/// [`LeafError::Mint`].
pub fn mint(ca: &Ca, host: &str, now: SystemTime) -> Result<CertifiedKey, LeafError> {
    let err = |detail: String| LeafError::Mint {
        host: host.to_owned(),
        detail,
    };
    // The key: made as PKCS#8 and parsed once, into the signer the handshakes use; the
    // certificate only needs its public half, read back from that signer. (rcgen's
    // `KeyPair::generate_for` would parse the PKCS#8 a second time, and each parse
    // recomputes the public key: a P-256 multiplication per new host.)
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &ring::rand::SystemRandom::new(),
    )
    .map_err(|e| err(format!("key generation: {e}")))?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.as_ref().to_vec()));
    let signing =
        rustls::crypto::ring::sign::any_ecdsa_type(&der).map_err(|e| err(e.to_string()))?;
    let spki = signing
        .public_key()
        .ok_or_else(|| err("the new key has no public key".to_owned()))?;
    let public =
        rcgen::SubjectPublicKeyInfo::from_der(spki.as_ref()).map_err(|e| err(e.to_string()))?;
    // `new` makes an IP address SAN for an IP literal, a DNS name otherwise.
    let mut params =
        CertificateParams::new(vec![host.to_owned()]).map_err(|e| err(e.to_string()))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, host);
    params.distinguished_name = dn;
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + LEAF_LIFETIME).into();
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .signed_by(&public, ca.issuer())
        .map_err(|e| err(e.to_string()))?;
    Ok(CertifiedKey::new(
        vec![cert.der().clone(), ca.cert_der().clone()],
        signing,
    ))
}

fn exists(path: &Path) -> Result<bool, CaError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(CaError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Creates `path` exclusively (no symlink following, never an existing file) with `mode`
/// (the umask cannot widen it; it is set explicitly), writes `data` and syncs.
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<(), CaError> {
    let err = |source| CaError::Write {
        path: path.to_owned(),
        source,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(err)?;
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn generated_once_then_reloaded_with_private_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::load_or_generate(dir.path()).unwrap();
        let key = dir.path().join(CA_KEY_FILE);
        let cert = dir.path().join(CA_CERT_FILE);
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&cert), 0o644);
        let again = Ca::load_or_generate(dir.path()).unwrap();
        assert_eq!(again.cert_der(), ca.cert_der(), "a restart keeps the CA");
        assert!(
            std::fs::read_to_string(&key)
                .unwrap()
                .contains("PRIVATE KEY")
        );

        let out = dir.path().join("export.pem");
        ca.export(&out).unwrap();
        assert_eq!(mode(&out), 0o644);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), ca.cert_pem());
        ca.export(&out).unwrap(); // replaced atomically, not refused
    }

    #[test]
    fn half_a_ca_or_a_foreign_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::load_or_generate(dir.path()).unwrap();
        std::fs::remove_file(dir.path().join(CA_KEY_FILE)).unwrap();
        assert!(matches!(
            Ca::load_or_generate(dir.path()),
            Err(CaError::HalfPresent { .. })
        ));
        // Another CA's key next to this certificate: the self-check catches it.
        let other = Ca::generate().unwrap();
        std::fs::write(
            dir.path().join(CA_KEY_FILE),
            other.issuer().key().serialize_pem(),
        )
        .unwrap();
        assert!(matches!(
            Ca::load_or_generate(dir.path()),
            Err(CaError::Mismatch { .. })
        ));
        drop(ca);
        std::fs::write(dir.path().join(CA_KEY_FILE), "not a key").unwrap();
        assert!(matches!(
            Ca::load_or_generate(dir.path()),
            Err(CaError::Key { .. })
        ));
    }

    #[test]
    fn an_operator_ca_is_used_as_is() {
        let dir = tempfile::tempdir().unwrap();
        let op = Ca::generate().unwrap();
        std::fs::write(dir.path().join(CA_CERT_FILE), op.cert_pem()).unwrap();
        std::fs::write(
            dir.path().join(CA_KEY_FILE),
            op.issuer().key().serialize_pem(),
        )
        .unwrap();
        let loaded = Ca::load_or_generate(dir.path()).unwrap();
        assert_eq!(loaded.cert_der(), op.cert_der());
    }

    #[test]
    fn a_symlinked_key_path_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, dir.path().join(CA_KEY_FILE)).unwrap();
        // A dangling link counts as present: half a CA, refused, nothing written through it.
        assert!(Ca::load_or_generate(dir.path()).is_err());
        assert!(!elsewhere.exists());
    }
}
