//! The readiness record: what state a start is in, written by PID 1 into the control
//! directory ([`crate::paths::CONTROL_DIR`], file [`FILE`]) and read by the host.
//!
//! PID 1 writes [`State::Starting`] as soon as it runs, [`State::Ready`] once the proxy, the
//! git API, the firewall and the self-test are up (just before the agent starts; the record
//! carries how long each step took), or [`State::Refused`] with the one line that says why
//! it will not start. The CLI waits for `ready` (or `refused`) in its host directory instead
//! of reading the container's log; a Kubernetes readiness probe reads it through
//! `airlock-entrypoint --ready`. The admin API's status answer is the same [`Status`]
//! ([`crate::admin::Response::Status`]), with whatever fields it adds later read as their
//! defaults by older readers.
//!
//! Each write replaces the file whole (a temporary file renamed over it), so a reader sees
//! one complete record or none. The record holds nothing secret: ids, times and the
//! refusal's line.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The record's file name inside the control directory.
pub const FILE: &str = "status.json";

/// The command that asks, inside the container, whether the start is ready: the image's
/// entrypoint with `--ready` reads the record and exits 0 when it says ready (1 not yet, 78
/// refused). A Kubernetes `readinessProbe` runs it.
pub const PROBE: [&str; 2] = ["/usr/local/bin/airlock-entrypoint", "--ready"];

/// The temporary name a record is written under before it replaces [`FILE`].
const TMP_FILE: &str = ".status.json.tmp";

/// The largest record read (a refusal's line is short; anything larger is not a record).
const LIMIT: u64 = 64 << 10;

/// Where a start is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// PID 1 runs its checks and starts the services; the agent does not run yet.
    Starting,
    /// Everything is up and verified; the agent is being started.
    Ready,
    /// The start was refused: [`Status::reason`] says why; the container exits 78.
    Refused,
    /// A state this reader does not know (written by a newer appliance).
    #[serde(other)]
    Unknown,
}

/// How long each start-up step took. The proxy (with the git API) and the firewall start at
/// once, so `services_ms` includes `firewall_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steps {
    /// From PID 1's start until ready.
    pub total_ms: u64,
    /// The checks and the files prepared before any process starts.
    pub validate_ms: u64,
    /// From the proxy's and the git API's spawn until both answer (the firewall meanwhile).
    pub services_ms: u64,
    /// The firewall's own time, inside `services_ms`.
    pub firewall_ms: u64,
    /// The self-test as the agent.
    pub self_test_ms: u64,
}

/// One start's readiness: the record PID 1 writes and the admin API's status serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The admin protocol version of the writer ([`crate::VERSION`]).
    pub api: u32,
    /// Where the start is.
    pub state: State,
    /// The appliance's version (the entrypoint's package version).
    pub version: String,
    /// This start's session id (what every audit line of the start carries), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The sandbox's name for this start, once the policy is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// When PID 1 started, in Unix milliseconds.
    pub started_at_ms: u64,
    /// When the start became ready, in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at_ms: Option<u64>,
    /// How long each step took (ready only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Steps>,
    /// Why the start was refused (refused only): the line PID 1 printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Status {
    /// A start that has just begun.
    #[must_use]
    pub fn starting(version: &str, started_at_ms: u64) -> Status {
        Status {
            api: crate::VERSION,
            state: State::Starting,
            version: version.to_owned(),
            session: None,
            sandbox: None,
            started_at_ms,
            ready_at_ms: None,
            steps: None,
            reason: None,
        }
    }

    /// This start, ready at `at_ms` after `steps`.
    #[must_use]
    pub fn ready(mut self, at_ms: u64, steps: Steps) -> Status {
        self.state = State::Ready;
        self.ready_at_ms = Some(at_ms);
        self.steps = Some(steps);
        self.reason = None;
        self
    }

    /// This start, refused for `reason`.
    #[must_use]
    pub fn refused(mut self, reason: &str) -> Status {
        self.state = State::Refused;
        self.reason = Some(reason.to_owned());
        self
    }

    /// The record as written: one JSON line.
    #[must_use]
    pub fn to_line(&self) -> String {
        // A struct of strings and numbers always serializes.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// A record read back.
    ///
    /// # Errors
    /// [`StatusError::Parse`] when `bytes` is not a record.
    pub fn parse(bytes: &[u8]) -> Result<Status, StatusError> {
        serde_json::from_slice(bytes).map_err(StatusError::Parse)
    }
}

/// A failed read or write of the record.
#[derive(Debug, Error)]
pub enum StatusError {
    /// The file could not be read.
    #[error("cannot read the readiness record {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file could not be written or put in place.
    #[error("cannot write the readiness record {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file could not be removed.
    #[error("cannot remove the readiness record {path}: {source}")]
    Remove {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a record.
    #[error("the readiness record is not valid: {0}")]
    Parse(serde_json::Error),
}

/// The record's path in the control directory `dir`.
#[must_use]
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// The record in the control directory `dir`; `None` when there is none (yet).
///
/// # Errors
/// [`StatusError::Read`] when it exists but cannot be read, [`StatusError::Parse`] when it
/// is not a record.
pub fn read(dir: &Path) -> Result<Option<Status>, StatusError> {
    use std::io::Read as _;
    let file = path(dir);
    let err = |source| StatusError::Read {
        path: file.clone(),
        source,
    };
    let opened = match std::fs::File::open(&file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let mut bytes = Vec::new();
    opened.take(LIMIT).read_to_end(&mut bytes).map_err(err)?;
    Status::parse(&bytes).map(Some)
}

/// Write `status` into the control directory `dir` (mode 0644), replacing any record whole.
///
/// # Errors
/// [`StatusError::Write`] naming the file that could not be written or renamed.
pub fn write(dir: &Path, status: &Status) -> Result<(), StatusError> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let tmp = dir.join(TMP_FILE);
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StatusError::Write { path, source }
    };
    // Created new (`O_EXCL`): never opened through a link left in its place.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(err(&tmp))?;
    // Readable by the host's user whatever PID 1's umask is.
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(err(&tmp))?;
    f.write_all(status.to_line().as_bytes())
        .map_err(err(&tmp))?;
    drop(f);
    let file = path(dir);
    std::fs::rename(&tmp, &file).map_err(err(&file))
}

/// Remove the record from the control directory `dir` (a start's stale one); none is fine.
///
/// # Errors
/// [`StatusError::Remove`] when it exists and cannot be removed.
pub fn clear(dir: &Path) -> Result<(), StatusError> {
    let file = path(dir);
    match std::fs::remove_file(&file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StatusError::Remove {
            path: file,
            source: e,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> Status {
        let mut s = Status::starting("0.1.0", 1_795_853_089_000);
        s.session = Some("1795853089-6e301f0ab6b0".into());
        s.ready(
            1_795_853_089_137,
            Steps {
                total_ms: 137,
                validate_ms: 17,
                services_ms: 105,
                firewall_ms: 91,
                self_test_ms: 14,
            },
        )
    }

    #[test]
    fn a_record_is_written_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        write(dir.path(), &Status::starting("0.1.0", 1)).unwrap();
        assert_eq!(read(dir.path()).unwrap().unwrap().state, State::Starting);
        write(dir.path(), &ready()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(ready()));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE], "no temporary file is left");
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o644);
        }
        clear(dir.path()).unwrap();
        clear(dir.path()).unwrap();
        assert!(read(dir.path()).unwrap().is_none());
    }

    #[test]
    fn what_is_not_a_record_is_an_error_not_a_ready() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "{\"state\":\"ready\"").unwrap();
        assert!(matches!(read(dir.path()), Err(StatusError::Parse(_))));
        std::fs::write(path(dir.path()), vec![b' '; 1 << 20]).unwrap();
        assert!(matches!(read(dir.path()), Err(StatusError::Parse(_))));
    }

    #[test]
    fn a_link_in_place_of_the_temporary_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join(TMP_FILE)).unwrap();
        write(dir.path(), &ready()).unwrap();
        assert!(!target.exists());
        assert_eq!(read(dir.path()).unwrap(), Some(ready()));
    }
}
