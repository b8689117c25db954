//! CA trust: which roots the proxy verifies upstreams with, which CA it intercepts with, and
//! the bundle every tool of the agent trusts.
//!
//! - An operator CA (`AIRLOCK_CA_CERT` + `AIRLOCK_CA_KEY`, both or neither) is copied into
//!   the proxy's private state directory before the proxy starts; without one the proxy
//!   generates its own there. The key must not be readable by the agent where it is mounted,
//!   and after the copy only the proxy user can read it.
//! - The operator's extra CA (`AIRLOCK_EXTRA_CA`, default [`EXTRA_CA_MOUNT`] when present;
//!   `EXTRA_CA_FILE=` for scripts/docker-run): PEM certificates of a corporate
//!   TLS-inspecting proxy or a private mirror. Validated before anything starts (read as the
//!   proxy reads roots; a private key in the file is refused), copied into the proxy's state
//!   directory and passed as `--upstream-ca`, *and* put into the agent's bundle, so that a
//!   host the agent reaches through a tunnel (`network.passthrough`) verifies too.
//! - Upstream roots for the proxy alone (`AIRLOCK_UPSTREAM_CA`, a PEM file: the test
//!   configuration's fake internet) are copied next to it and passed as `--upstream-ca`;
//!   the agent never trusts them.
//! - Once the proxy answers, its exported CA certificate is appended to the system roots (and
//!   the extra CA) in a bundle on tmpfs, and [`agent_vars`] points every common tool at it.
//!   In the image, Debian's system bundle path is a symlink to that bundle (see the
//!   Dockerfile), so tools that read only the system path trust it too.
//! - git (the agent's and the git API's) is also given an empty CA directory
//!   ([`EMPTY_CA_DIR`]) in place of libcurl-gnutls's built-in `/etc/ssl/certs`, which it
//!   otherwise reads and parses in full, every file, on each HTTPS connection (about 130 ms
//!   per push in the image) for roots the bundle already holds.
//!
//! It does not generate certificates (the proxy does) and never reads the CA key itself
//! beyond copying the operator's file.

use crate::identity::Identity;
use crate::proxy_state;
use anyhow::{Context, Result, bail};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the image keeps Debian's CA roots (moved there at build time, because the system
/// path becomes a symlink to the agent's bundle).
pub const IMAGE_SYSTEM_ROOTS: &str = "/usr/share/airlock/system-roots.pem";
/// Debian's system bundle (used for the roots outside the image, e.g. namespace tests).
pub const DEBIAN_SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// File name of copied extra upstream roots inside the proxy state directory.
pub const UPSTREAM_CA_FILE: &str = "upstream-ca.pem";
/// Where the image looks for the operator's extra CA when `AIRLOCK_EXTRA_CA` is not set
/// (scripts/docker-run mounts `EXTRA_CA_FILE` there).
pub const EXTRA_CA_MOUNT: &str = "/etc/airlock/extra-ca.pem";
/// File name of the copied extra CA inside the proxy state directory.
pub const EXTRA_CA_FILE: &str = "extra-ca.pem";
/// File name of the agent's bundle inside the runtime directory.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";
/// File name of the exported CA (in the proxy's public directory, and the entrypoint's
/// root-owned copy in the runtime directory).
pub const EXPORT_FILE: &str = "ca.pem";
/// The empty CA directory inside the runtime directory (`root 0555`): git's `http.sslCAPath`
/// and the agent's `GIT_SSL_CAPATH`, so git trusts exactly its CA file.
pub const EMPTY_CA_DIR: &str = "empty-ca-dir";

const PEM_CERT: &str = "-----BEGIN CERTIFICATE-----";
const PEM_CERT_END: &str = "-----END CERTIFICATE-----";

/// The operator's CA, as configured.
#[derive(Debug, Clone)]
pub struct OperatorCa {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The operator's extra CA, validated: its certificates only, as PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraCa {
    /// The file it was read from (inside the container).
    pub path: PathBuf,
    /// Every certificate of the file (PEM blocks, nothing else of it).
    pub pem: String,
    /// How many certificates.
    pub count: usize,
}

/// What the operator configured about trust: the interception CA and the extra CA.
#[derive(Debug, Clone, Default)]
pub struct OperatorTrust {
    pub ca: Option<OperatorCa>,
    pub extra: Option<ExtraCa>,
}

/// The operator CA ([`operator_ca`]) and the extra CA ([`extra_ca`]), every problem of
/// both in one refusal.
pub fn operator_trust(
    cert: Option<&Path>,
    key: Option<&Path>,
    extra: Option<&Path>,
    knobs: &crate::problems::Knobs,
) -> Result<OperatorTrust> {
    let mut problems = crate::problems::Problems::default();
    let ca = problems.take(operator_ca(cert, key));
    let extra = problems.take(extra_ca(extra, Path::new(EXTRA_CA_MOUNT), knobs));
    problems.finish()?;
    Ok(OperatorTrust {
        ca: ca.flatten(),
        extra: extra.flatten(),
    })
}

/// The extra CA: `configured` (`AIRLOCK_EXTRA_CA`), which must be there, else `mount` when
/// a file is there. Its certificates must all parse as trust anchors (as the proxy reads
/// them); a private key in the file is refused (the file is for the bundle every tool of
/// the agent reads).
pub fn extra_ca(
    configured: Option<&Path>,
    mount: &Path,
    knobs: &crate::problems::Knobs,
) -> Result<Option<ExtraCa>> {
    let path = match configured {
        Some(p) => p,
        None if mount.exists() => mount,
        None => return Ok(None),
    };
    let name = knobs.extra_ca_file(path);
    let bytes = std::fs::read(path).with_context(|| {
        format!("the extra CA {name}: cannot read it (mount the PEM file of the CA certificate)")
    })?;
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("PRIVATE KEY-----") {
        bail!(
            "the extra CA {name} holds a private key: give only the CA's certificate (PEM), the agent's tools read this file"
        );
    }
    use rustls_pki_types::pem::PemObject;
    let ders = rustls_pki_types::CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("the extra CA {name} is not a PEM certificate file ({e})"))?;
    if ders.is_empty() {
        bail!("the extra CA {name} holds no PEM certificate ({PEM_CERT})");
    }
    for (i, der) in ders.iter().enumerate() {
        webpki::anchor_from_trusted_cert(der).map_err(|e| {
            anyhow::anyhow!(
                "the extra CA {name}: certificate {} of {} does not parse as an X.509 certificate ({e:?})",
                i + 1,
                ders.len()
            )
        })?;
    }
    let pem = pem_blocks(&text);
    if pem.matches(PEM_CERT).count() != ders.len() {
        bail!("the extra CA {name}: its PEM blocks could not be separated");
    }
    Ok(Some(ExtraCa {
        path: path.to_owned(),
        pem,
        count: ders.len(),
    }))
}

/// Every `CERTIFICATE` block of `text`, nothing else (comments, other blocks).
fn pem_blocks(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line == PEM_CERT {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if line == PEM_CERT_END {
            inside = false;
        }
    }
    out
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

/// Copy the operator CA, the extra CA and extra upstream roots into the proxy's state
/// directory (which must exist, owned by the proxy). Returns the proxy's `--upstream-ca`
/// arguments.
pub fn install_proxy_files(
    state_dir: &Path,
    proxy: &Identity,
    agent: &Identity,
    operator: &OperatorTrust,
    upstream_ca: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    if let Some(ca) = &operator.ca {
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
    if let Some(extra) = &operator.extra {
        args.push(proxy_state::install(
            state_dir,
            EXTRA_CA_FILE,
            extra.pem.as_bytes(),
            0o400,
            proxy,
        )?);
    }
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

/// System roots, then the operator's extra CA (if any), then the appliance CA. Pure.
pub fn bundle(system_roots: &[u8], extra: Option<&ExtraCa>, appliance_ca: &str) -> Result<Vec<u8>> {
    let ca = appliance_ca.trim();
    if !ca.starts_with(PEM_CERT) || !ca.ends_with(PEM_CERT_END) {
        bail!("the proxy's exported CA is not one PEM certificate");
    }
    let extra_len = extra.map_or(0, |e| e.pem.len());
    let mut out = Vec::with_capacity(system_roots.len() + extra_len + ca.len() + 128);
    out.extend_from_slice(system_roots);
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    if let Some(extra) = extra {
        out.extend_from_slice(
            format!(
                "# the operator's extra CA (AIRLOCK_EXTRA_CA, {})\n",
                extra.path.display()
            )
            .as_bytes(),
        );
        out.extend_from_slice(extra.pem.as_bytes());
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
    remove_earlier(&dir)?;
    proxy_state::ensure_dir_mode(&dir, proxy, 0o755)?;
    Ok(dir.join(EXPORT_FILE))
}

/// Read the CA the proxy exported (`export`), publish a root-owned copy as
/// `run_dir/ca.pem` (what the git API trusts) and write the agent's bundle next to it
/// (root-owned, 0644, each replaced atomically), with the operator's `extra` CA. Returns
/// the bundle's path.
pub fn write_bundle(run_dir: &Path, export: &Path, extra: Option<&ExtraCa>) -> Result<PathBuf> {
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
    let bytes = bundle(&system_roots()?, extra, &ca)?;
    proxy_state::write_atomic(run_dir, EXPORT_FILE, ca.as_bytes(), 0o644, None)?;
    proxy_state::write_atomic(run_dir, BUNDLE_FILE, &bytes, 0o644, None)
}

/// The empty CA directory ([`EMPTY_CA_DIR`] in `run_dir`), made fresh before any process
/// starts: root's, 0555 and empty, so nobody can add a root to it.
pub fn empty_ca_dir(run_dir: &Path) -> Result<PathBuf> {
    let dir = run_dir.join(EMPTY_CA_DIR);
    remove_earlier(&dir)?;
    std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555))
        .with_context(|| format!("cannot set the mode of {}", dir.display()))?;
    Ok(dir)
}

/// Removes whatever an earlier start left at `path` (a directory with its contents, a file
/// or a symlink, never following it), so the caller makes it fresh.
fn remove_earlier(path: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    removed.with_context(|| format!("cannot clear {}", path.display()))
}

/// Variables that make the common tools trust `bundle` (and Node use the proxy variables);
/// git reads `empty_dir` as its CA directory ([`EMPTY_CA_DIR`]).
pub fn agent_vars(bundle: &Path, empty_dir: &Path) -> Vec<(&'static str, String)> {
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
    vars.push(("GIT_SSL_CAPATH", empty_dir.to_string_lossy().into_owned()));
    // Node >= 24 honours HTTP(S)_PROXY for fetch only when asked to.
    vars.push(("NODE_USE_ENV_PROXY", "1".to_owned()));
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_dir_is_made_empty_and_closed_even_where_a_root_was_planted() {
        let run = tempfile::tempdir().unwrap();
        let planted = run.path().join(EMPTY_CA_DIR);
        std::fs::create_dir(&planted).unwrap();
        std::fs::write(
            planted.join("evil-root.pem"),
            "-----BEGIN CERTIFICATE-----\n",
        )
        .unwrap();
        let dir = empty_ca_dir(run.path()).unwrap();
        assert_eq!(dir, planted);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the directory is empty"
        );
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o555);
    }

    #[test]
    fn the_ca_dir_replaces_a_file_or_a_symlink_left_in_its_place() {
        let run = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("evil-root.pem"), "x").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), run.path().join(EMPTY_CA_DIR)).unwrap();
        let dir = empty_ca_dir(run.path()).unwrap();
        assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(
            elsewhere.path().join("evil-root.pem").exists(),
            "the symlink was removed, not followed"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        std::fs::write(&dir, "a file").unwrap();
        let dir = empty_ca_dir(run.path()).unwrap();
        assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
    }

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_bundle_is_the_system_roots_then_the_appliance_ca() {
        let b = bundle(
            b"-----BEGIN CERTIFICATE-----\nSYS\n-----END CERTIFICATE-----",
            None,
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
            assert!(bundle(b"", None, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_tool_points_at_the_bundle() {
        let vars = agent_vars(
            Path::new("/run/airlock/ca-bundle.pem"),
            Path::new("/run/airlock/empty-ca-dir"),
        );
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
        assert!(vars.contains(&("GIT_SSL_CAPATH", "/run/airlock/empty-ca-dir".to_owned())));
    }

    /// A real CA certificate (P-256, self-signed, valid until 2126): the extra CA's checks
    /// parse it as the proxy does.
    const EXTRA: &str = "-----BEGIN CERTIFICATE-----\nMIIBlzCCAT2gAwIBAgIUMUc9vTwFmKe+dC3ZZ7oYXjAw7+8wCgYIKoZIzj0EAwIw\nIDEeMBwGA1UEAwwVYWlybG9jayB0ZXN0IGV4dHJhIENBMCAXDTI2MTEyNTA3MzUy\nN1oYDzIxMjYxMTAxMDczNTI3WjAgMR4wHAYDVQQDDBVhaXJsb2NrIHRlc3QgZXh0\ncmEgQ0EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASVK6fzCLRnLpw1/P04HdwF\nj7eHsnG3e964AxHguj8WamiohKfFGBqLYgyISGlAyAYBsL/fCWcVbJillD96D5tA\no1MwUTAdBgNVHQ4EFgQU2sW1a4AjhJUJ8guvP9vCCfeIjecwHwYDVR0jBBgwFoAU\n2sW1a4AjhJUJ8guvP9vCCfeIjecwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQD\nAgNIADBFAiEA6IZJuMgnjtvnUNmYoMtBnplnT361W9pSSJhF4pn9RlMCIHdPb5cs\nmiLD/VufaB4neO1rlaXGbu578Lb/2Xci/Syv\n-----END CERTIFICATE-----\n";

    fn knobs() -> crate::problems::Knobs {
        crate::problems::Knobs::default()
    }

    #[test]
    fn the_extra_ca_is_read_from_its_variable_or_the_mount() {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("extra-ca.pem");
        // Nothing configured, nothing mounted: no extra CA.
        assert_eq!(extra_ca(None, &mount, &knobs()).unwrap(), None);
        // Comments and another PEM block around the certificate are left out of the bundle.
        let text =
            format!("# corp root\n{EXTRA}-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
        std::fs::write(&mount, &text).unwrap();
        let got = extra_ca(None, &mount, &knobs()).unwrap().unwrap();
        assert_eq!((got.pem.as_str(), got.count), (EXTRA, 1));
        assert_eq!(got.path, mount);
        // The variable wins over the mount and must name a file that is there.
        let other = dir.path().join("two.pem");
        std::fs::write(&other, format!("{EXTRA}{EXTRA}")).unwrap();
        let got = extra_ca(Some(&other), &mount, &knobs()).unwrap().unwrap();
        assert_eq!(got.count, 2);
        let absent = dir.path().join("absent.pem");
        let err = extra_ca(Some(&absent), &mount, &knobs()).unwrap_err();
        assert!(format!("{err:#}").contains("cannot read it"), "{err:#}");
    }

    #[test]
    fn an_extra_ca_that_is_not_a_pem_certificate_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("extra-ca.pem");
        let k = crate::problems::Knobs::from_env(|v| {
            (v == "AIRLOCK_HOST_EXTRA_CA").then(|| "/home/me/corp.pem".to_owned())
        });
        let broken = EXTRA.replace("MIIBlz", "MIIBl!");
        let truncated: String = EXTRA
            .lines()
            .filter(|l| !l.starts_with("o1MwUTAd"))
            .collect::<Vec<_>>()
            .join("\n");
        for (content, says) in [
            ("hello\n", "holds no PEM certificate"),
            ("", "holds no PEM certificate"),
            (broken.as_str(), "not a PEM certificate file"),
            (truncated.as_str(), "does not parse as an X.509 certificate"),
            (
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                "holds a private key",
            ),
        ] {
            std::fs::write(&path, content).unwrap();
            let err = extra_ca(Some(&path), Path::new("/nonexistent"), &k).unwrap_err();
            let line = format!("{err:#}");
            assert!(line.contains(says), "{content:?}: {line}");
            assert!(line.contains("/home/me/corp.pem (EXTRA_CA_FILE"), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        // With a half operator CA beside it: both problems in one refusal.
        let err = operator_trust(Some(Path::new("/x")), None, Some(&path), &k).unwrap_err();
        assert_eq!(
            err.downcast_ref::<crate::problems::Refused>()
                .unwrap()
                .0
                .len(),
            2
        );
    }

    #[test]
    fn the_bundle_trusts_the_extra_ca_before_the_appliance_ca() {
        let extra = ExtraCa {
            path: PathBuf::from("/etc/airlock/extra-ca.pem"),
            pem: EXTRA.to_owned(),
            count: 1,
        };
        let b = String::from_utf8(bundle(b"SYSTEM\n", Some(&extra), CA).unwrap()).unwrap();
        let (sys, ex, ours) = (
            b.find("SYSTEM").unwrap(),
            b.find("MIIBlz").unwrap(),
            b.find("MIIB\n").unwrap(),
        );
        assert!(sys < ex && ex < ours, "{b}");
        assert!(
            b.contains("# the operator's extra CA (AIRLOCK_EXTRA_CA, /etc/airlock/extra-ca.pem)")
        );
    }

    #[test]
    fn the_extra_ca_is_a_root_of_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let me = Identity {
            name: "root".into(),
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            groups: vec![],
            home: "/".into(),
            shell: "/bin/sh".into(),
        };
        let operator = OperatorTrust {
            ca: None,
            extra: Some(ExtraCa {
                path: PathBuf::from("/e.pem"),
                pem: EXTRA.to_owned(),
                count: 1,
            }),
        };
        let args = install_proxy_files(dir.path(), &me, &me, &operator, None).unwrap();
        assert_eq!(args, vec![dir.path().join(EXTRA_CA_FILE)]);
        assert_eq!(std::fs::read_to_string(&args[0]).unwrap(), EXTRA);
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
