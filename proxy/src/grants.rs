//! The operator's grants file: the standing answers (`approve --always`, `deny --always`)
//! kept next to the audit log ([`airlock_channels::GRANTS_FILE`]), so they outlive the
//! container wherever the audit log does (the CLI's sandbox directory, a Docker volume, a
//! pod's volume). The directory is the proxy user's own (0700) and the file 0600: the agent
//! can neither read nor change it.
//!
//! A file that is there but does not load stops the start (the operator fixes or removes it;
//! grants are never dropped silently). It is written whole, synced, then renamed over the old
//! one, before the revision that applies it is in force.
//!
//! What the grants mean is [`airlock_policy::overlay`]; when they change is
//! [`crate::revision::Revisions::regrant`].

use std::path::{Path, PathBuf};

use airlock_policy::overlay::Overlay;

/// The file's version: a newer one is refused, not misread.
const VERSION: u32 = 1;

/// Why the grants file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GrantsError {
    #[error("cannot read the grants file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the grants file {path} does not load: {why} (fix it, or move it away to drop every grant in it)"
    )]
    Parse { path: PathBuf, why: String },
    #[error("cannot write the grants file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    version: u32,
    #[serde(flatten)]
    overlay: Overlay,
}

/// The grants file of the audit log `audit` (its directory's [`airlock_channels::GRANTS_FILE`]).
#[must_use]
pub fn path_beside(audit: &Path) -> PathBuf {
    audit
        .parent()
        .unwrap_or(Path::new("."))
        .join(airlock_channels::GRANTS_FILE)
}

/// The grants kept at `path`: none when there is no file.
///
/// # Errors
/// [`GrantsError`]: unreadable, or not a grants file of this version.
pub fn load(path: &Path) -> Result<Overlay, GrantsError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Overlay::default()),
        Err(source) => {
            return Err(GrantsError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let parse = |why: String| GrantsError::Parse {
        path: path.to_owned(),
        why,
    };
    let file: File = serde_json::from_slice(&bytes).map_err(|e| parse(e.to_string()))?;
    if file.version != VERSION {
        return Err(parse(format!(
            "version {} (this proxy reads version {VERSION})",
            file.version
        )));
    }
    Ok(file.overlay)
}

/// Keeps `overlay` at `path`, replacing what is there ([`crate::replace::private`]).
///
/// # Errors
/// [`GrantsError::Write`]: the old file stays.
pub fn store(path: &Path, overlay: &Overlay) -> Result<(), GrantsError> {
    let write = |source| GrantsError::Write {
        path: path.to_owned(),
        source,
    };
    let body = serde_json::to_vec_pretty(&File {
        version: VERSION,
        overlay: overlay.clone(),
    })
    .map_err(|e| write(std::io::Error::other(e)))?;
    crate::replace::private(path, &body).map_err(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::overlay::Grant;

    #[test]
    fn grants_round_trip_private_and_a_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        assert_eq!(load(&path).unwrap(), Overlay::default());
        let o = Overlay::default().with(Grant {
            id: "0a0b0c0d".into(),
            allow: true,
            host: "new.example".into(),
            port: 443,
            by: 1000,
            at: "2026-11-29T04:00:00.000Z".into(),
            why: Some("docs".into()),
        });
        store(&path, &o).unwrap();
        assert_eq!(load(&path).unwrap(), o);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_broken_or_newer_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        std::fs::write(&path, "{\"version\": 1, \"grants\": [").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("grants.json does not load"), "{e}");
        std::fs::write(&path, "{\"version\": 2, \"grants\": []}").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
    }
}
