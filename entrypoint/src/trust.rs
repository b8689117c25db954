//! CA trust: which roots the proxy verifies upstreams with, which CA it intercepts with, and
//! the bundle every tool of the agent trusts.
//!
//! - An operator CA (`AIRLOCK_CA_CERT` + `AIRLOCK_CA_KEY`, both or neither) is copied into
//!   the proxy's private state directory before the proxy starts; without one the proxy
//!   generates its own there. The key must not be readable by the agent where it is mounted,
//!   and after the copy only the proxy user can read it.
//! - Extra upstream roots (`AIRLOCK_UPSTREAM_CA`, a PEM file: a test CA or a corporate
//!   TLS-inspecting CA) are copied next to it and passed as `--upstream-ca`.
//! - Once the proxy answers, its exported CA certificate is appended to the system roots in
//!   a bundle on tmpfs, and [`agent_vars`] points every common tool at it. In the image,
//!   Debian's system bundle path is a symlink to that bundle (see the Dockerfile), so tools
//!   that read only the system path trust it too.
//!
//! It does not generate certificates (the proxy does) and never reads the CA key itself
//! beyond copying the operator's file.

use crate::identity::Identity;
use crate::proxy_state;
use anyhow::{Context, Result, bail};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the image keeps Debian's CA roots (moved there at build time, because the system
/// path becomes a symlink to the agent's bundle).
pub const IMAGE_SYSTEM_ROOTS: &str = "/usr/share/airlock/system-roots.pem";
/// Debian's system bundle (used for the roots outside the image, e.g. namespace tests).
pub const DEBIAN_SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// File name of copied extra upstream roots inside the proxy state directory.
pub const UPSTREAM_CA_FILE: &str = "upstream-ca.pem";
/// File name of the agent's bundle inside the runtime directory.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";
/// File name of the exported CA (in the proxy's public directory, and the entrypoint's
/// root-owned copy in the runtime directory).
pub const EXPORT_FILE: &str = "ca.pem";

const PEM_CERT: &str = "-----BEGIN CERTIFICATE-----";

/// The operator's CA, as configured.
#[derive(Debug, Clone)]
pub struct OperatorCa {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Both or neither of the CA files.
pub fn operator_ca(cert: Option<&Path>, key: Option<&Path>) -> Result<Option<OperatorCa>> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(OperatorCa {
            cert: cert.to_owned(),
            key: key.to_owned(),
        })),
        (Some(_), None) => {
            bail!(
                "AIRLOCK_CA_CERT is set but AIRLOCK_CA_KEY is not: give both files of the operator CA, or neither"
            )
        }
        (None, Some(_)) => {
            bail!(
                "AIRLOCK_CA_KEY is set but AIRLOCK_CA_CERT is not: give both files of the operator CA, or neither"
            )
        }
    }
}

/// Copy the operator CA and extra upstream roots into the proxy's state directory (which
/// must exist, owned by the proxy). Returns the proxy's `--upstream-ca` arguments.
pub fn install_proxy_files(
    state_dir: &Path,
    proxy: &Identity,
    agent: &Identity,
    ca: Option<&OperatorCa>,
    upstream_ca: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    if let Some(ca) = ca {
        let cert = read_pem_certs("AIRLOCK_CA_CERT", &ca.cert)?;
        let key = read_private_key(&ca.key, agent)?;
        proxy_state::install(
            state_dir,
            airlock_channels::CA_CERT_FILE,
            cert.as_bytes(),
            0o400,
            proxy,
        )?;
        proxy_state::install(
            state_dir,
            airlock_channels::CA_KEY_FILE,
            key.as_bytes(),
            0o400,
            proxy,
        )?;
    }
    let mut args = Vec::new();
    if let Some(path) = upstream_ca {
        let pem = read_pem_certs("AIRLOCK_UPSTREAM_CA", path)?;
        args.push(proxy_state::install(
            state_dir,
            UPSTREAM_CA_FILE,
            pem.as_bytes(),
            0o400,
            proxy,
        )?);
    }
    Ok(args)
}

fn read_pem_certs(var: &str, path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{var}: cannot read {}: mount the PEM file", path.display()))?;
    if !text.contains(PEM_CERT) {
        bail!(
            "{var}: {} holds no PEM certificate ({PEM_CERT})",
            path.display()
        );
    }
    Ok(text)
}

fn read_private_key(path: &Path, agent: &Identity) -> Result<String> {
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "AIRLOCK_CA_KEY: cannot read {}: mount the CA's private key (PEM)",
            path.display()
        )
    })?;
    if agent.can_read(&meta) {
        bail!(
            "AIRLOCK_CA_KEY: {} is readable by the agent (owner {}, mode {:o}): make it root-owned mode 0400",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("AIRLOCK_CA_KEY: cannot read {}", path.display()))?;
    if !text.contains("PRIVATE KEY-----") {
        bail!(
            "AIRLOCK_CA_KEY: {} holds no PEM private key",
            path.display()
        );
    }
    Ok(text)
}

/// The system roots the bundle starts from: the image's copy, else Debian's bundle.
pub fn system_roots() -> Result<Vec<u8>> {
    for path in [IMAGE_SYSTEM_ROOTS, DEBIAN_SYSTEM_BUNDLE] {
        let path = Path::new(path);
        // In the image the Debian path is a symlink to our own bundle: never read it back.
        if path.is_symlink() {
            continue;
        }
        if let Ok(bytes) = std::fs::read(path) {
            return Ok(bytes);
        }
    }
    bail!(
        "no system CA roots at {IMAGE_SYSTEM_ROOTS} or {DEBIAN_SYSTEM_BUNDLE}: install ca-certificates in the image"
    )
}

/// System roots followed by the appliance CA. Pure.
pub fn bundle(system_roots: &[u8], appliance_ca: &str) -> Result<Vec<u8>> {
    let ca = appliance_ca.trim();
    if !ca.starts_with(PEM_CERT) || !ca.ends_with("-----END CERTIFICATE-----") {
        bail!("the proxy's exported CA is not one PEM certificate");
    }
    let mut out = Vec::with_capacity(system_roots.len() + ca.len() + 64);
    out.extend_from_slice(system_roots);
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(b"# airlock appliance CA (this container start)\n");
    out.extend_from_slice(ca.as_bytes());
    out.push(b'\n');
    Ok(out)
}

/// The directory the proxy exports its CA to (owned by the proxy user, 0755), created
/// fresh so that nothing from an earlier start can be mistaken for this proxy's export.
pub fn prepare_export_dir(run_dir: &Path, proxy: &Identity) -> Result<PathBuf> {
    let dir = run_dir.join(airlock_channels::PROXY_PUBLIC_SUBDIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    proxy_state::ensure_dir_mode(&dir, proxy, 0o755)?;
    Ok(dir.join(EXPORT_FILE))
}

/// Read the CA the proxy exported (`export`), publish a root-owned copy as
/// `run_dir/ca.pem` (what the git API trusts) and write the agent's bundle next to it
/// (root-owned, 0644, each replaced atomically). Returns the bundle's path.
pub fn write_bundle(run_dir: &Path, export: &Path) -> Result<PathBuf> {
    let meta = std::fs::symlink_metadata(export).with_context(|| {
        format!(
            "the proxy did not export its CA to {}; its log above says why",
            export.display()
        )
    })?;
    if !meta.file_type().is_file() {
        bail!("{} is not a regular file", export.display());
    }
    let ca = std::fs::read_to_string(export)
        .with_context(|| format!("cannot read the proxy's CA {}", export.display()))?;
    let bytes = bundle(&system_roots()?, &ca)?;
    proxy_state::write_atomic(run_dir, EXPORT_FILE, ca.as_bytes(), 0o644, None)?;
    proxy_state::write_atomic(run_dir, BUNDLE_FILE, &bytes, 0o644, None)
}

/// Variables that make the common tools trust `bundle` (and Node use the proxy variables).
pub fn agent_vars(bundle: &Path) -> Vec<(&'static str, String)> {
    let b = bundle.to_string_lossy().into_owned();
    let mut vars: Vec<(&'static str, String)> = [
        "SSL_CERT_FILE",       // OpenSSL, Go, Python ssl, Ruby
        "REQUESTS_CA_BUNDLE",  // python requests
        "CURL_CA_BUNDLE",      // curl
        "NODE_EXTRA_CA_CERTS", // Node.js (added to its built-in roots)
        "GIT_SSL_CAINFO",      // git outside the workspace
        "PIP_CERT",            // pip
        "CARGO_HTTP_CAINFO",   // cargo
        "npm_config_cafile",   // npm
        "AWS_CA_BUNDLE",       // AWS SDKs and CLI
        "DENO_CERT",           // Deno
    ]
    .into_iter()
    .map(|k| (k, b.clone()))
    .collect();
    // Node >= 24 honours HTTP(S)_PROXY for fetch only when asked to.
    vars.push(("NODE_USE_ENV_PROXY", "1".to_owned()));
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_bundle_is_the_system_roots_then_the_appliance_ca() {
        let b = bundle(
            b"-----BEGIN CERTIFICATE-----\nSYS\n-----END CERTIFICATE-----",
            CA,
        )
        .unwrap();
        let text = String::from_utf8(b).unwrap();
        let sys = text.find("SYS").unwrap();
        let ours = text.find("MIIB").unwrap();
        assert!(sys < ours);
        assert_eq!(text.matches(PEM_CERT).count(), 2);
        assert!(text.ends_with("-----END CERTIFICATE-----\n"));
    }

    #[test]
    fn a_forged_export_is_refused() {
        for bad in [
            "",
            "hello",
            "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----",
        ] {
            assert!(bundle(b"", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_tool_points_at_the_bundle() {
        let vars = agent_vars(Path::new("/run/airlock/ca-bundle.pem"));
        for k in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
            "GIT_SSL_CAINFO",
            "PIP_CERT",
            "CARGO_HTTP_CAINFO",
            "npm_config_cafile",
            "AWS_CA_BUNDLE",
            "DENO_CERT",
        ] {
            assert!(
                vars.iter()
                    .any(|(n, v)| *n == k && v == "/run/airlock/ca-bundle.pem"),
                "{k}"
            );
        }
        assert!(vars.contains(&("NODE_USE_ENV_PROXY", "1".to_owned())));
    }

    #[test]
    fn half_an_operator_ca_is_refused() {
        let p = Path::new("/x");
        assert!(operator_ca(Some(p), None).is_err());
        assert!(operator_ca(None, Some(p)).is_err());
        assert!(operator_ca(None, None).unwrap().is_none());
        assert!(operator_ca(Some(p), Some(p)).unwrap().is_some());
    }

    #[test]
    fn an_agent_readable_ca_key_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("ca-key.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let agent = Identity {
            name: "agent".into(),
            uid: 64103,
            gid: 64103,
            groups: vec![64103],
            home: "/".into(),
            shell: "/bin/sh".into(),
        };
        let err = read_private_key(&key, &agent).unwrap_err();
        assert!(err.to_string().contains("readable by the agent"), "{err}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read_private_key(&key, &agent).is_ok());
    }
}
