//! Where the CLI keeps its state: the XDG data directory (`$XDG_DATA_HOME/airlock`, else
//! `~/.local/share/airlock`), or `--data-dir` / `AIRLOCK_DATA_DIR`.
//!
//! ```text
//! <data>/registry.sqlite          the registry
//! <data>/sandboxes/<name>/repo.git   the sandbox's git dir (objects borrowed from its store)
//! <data>/sandboxes/<name>/work/      its work tree (mounted at /workspace)
//! <data>/sandboxes/<name>/audit/     its audit log
//! <data>/sandboxes/<name>/control/   its control directory: the start's readiness record
//! <data>/sandboxes/<name>/host.git   the CLI's own git dir for reading the sandbox
//! <data>/audit/<name>-<created>/  a removed sandbox's audit logs (kept 30 days)
//! <data>/stores/<base>.git           the objects a base commit reaches (checkout::store)
//! <data>/locks/<name>             held (flock) by a live `new` or `run` of that sandbox
//! ```
//!
//! A sandbox's agent home and secrets are volumes of the engine (`airlock-home-<name>`,
//! `airlock-secrets-<name>`, [`crate::engine::volumes`]), never host directories.
//!
//! Configuration (the secret store, [`crate::secrets`]) lives in the XDG config directory:
//! `$XDG_CONFIG_HOME/airlock`, else `~/.config/airlock`, or `AIRLOCK_CONFIG_DIR`.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// The data directory could not be chosen.
#[derive(Debug, Error)]
pub enum PathsError {
    /// Neither `--data-dir`, `XDG_DATA_HOME` nor `HOME` is set.
    #[error("no data directory: set --data-dir, AIRLOCK_DATA_DIR, XDG_DATA_HOME or HOME")]
    NoDataDir,
    /// Neither `AIRLOCK_CONFIG_DIR`, `XDG_CONFIG_HOME` nor `HOME` is set.
    #[error(
        "no config directory for the secret store: set AIRLOCK_CONFIG_DIR, XDG_CONFIG_HOME or HOME"
    )]
    NoConfigDir,
}

/// The resolved directories.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The data directory.
    pub data: PathBuf,
    /// The config directory (`None` when neither it nor `HOME` can be found: only the
    /// secret commands need it, and they say so).
    pub config: Option<PathBuf>,
}

impl Paths {
    /// `explicit`, else `$XDG_DATA_HOME/airlock`, else `$HOME/.local/share/airlock`.
    pub fn resolve(explicit: Option<&Path>) -> Result<Paths, PathsError> {
        let data = match explicit {
            Some(p) => p.to_path_buf(),
            None => match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
                Some(x) => PathBuf::from(x).join("airlock"),
                None => std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".local/share/airlock"))
                    .ok_or(PathsError::NoDataDir)?,
            },
        };
        let config = match std::env::var_os("AIRLOCK_CONFIG_DIR").filter(|v| !v.is_empty()) {
            Some(c) => Some(PathBuf::from(c)),
            None => match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
                Some(x) => Some(PathBuf::from(x).join("airlock")),
                None => std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".config/airlock")),
            },
        };
        Ok(Paths { data, config })
    }

    /// The secret store, or [`PathsError::NoConfigDir`].
    pub fn secrets(&self) -> Result<crate::secrets::Store, PathsError> {
        self.config
            .as_deref()
            .map(crate::secrets::Store::new)
            .ok_or(PathsError::NoConfigDir)
    }

    /// The registry file.
    pub fn registry(&self) -> PathBuf {
        self.data.join("registry.sqlite")
    }

    /// One sandbox's directory.
    pub fn sandbox(&self, name: &str) -> PathBuf {
        self.data.join("sandboxes").join(name)
    }
}
