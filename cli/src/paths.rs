//! Where the CLI keeps its state: the XDG data directory (`$XDG_DATA_HOME/airlock`, else
//! `~/.local/share/airlock`), or `--data-dir` / `AIRLOCK_DATA_DIR`.
//!
//! ```text
//! <data>/registry.sqlite          the registry
//! <data>/sandboxes/<name>/repo.git   the sandbox's git dir (a --shared clone)
//! <data>/sandboxes/<name>/work/      its work tree (mounted at /workspace)
//! <data>/sandboxes/<name>/audit/     its audit log
//! ```

use std::path::{Path, PathBuf};
use thiserror::Error;

/// The data directory could not be chosen.
#[derive(Debug, Error)]
pub enum PathsError {
    /// Neither `--data-dir`, `XDG_DATA_HOME` nor `HOME` is set.
    #[error("no data directory: set --data-dir, AIRLOCK_DATA_DIR, XDG_DATA_HOME or HOME")]
    NoDataDir,
}

/// The resolved directories.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The data directory.
    pub data: PathBuf,
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
        Ok(Paths { data })
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
