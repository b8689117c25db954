//! Where airlock's own lines go, so that the agent's terminal and output carry only the
//! agent's output.
//!
//! `docker run -it` gives PID 1 a terminal on stdin, stdout and stderr, and `docker logs`
//! then replays that same terminal; without a terminal (`docker run` in a script, the host
//! CLI's `airlock run` with its output piped, compose `up`, CI) the container's stderr is
//! interleaved with the agent's own output in whatever reads it. There is no second channel
//! either way. So the proxy's log (its stdout and stderr), the git API's and the
//! entrypoint's informational lines always go to [`LOG_FILE`] in the audit directory, and the
//! proxy logs at `warn` unless `AIRLOCK_LOG` says otherwise (every decision is in the audit
//! log anyway; an uncapped `info` stream in the audit volume would let the agent fill it with
//! allowed requests). Refusals to start, warnings about the start itself and the one
//! `session … ready in N ms` line ([`banner`]) still go to stderr: they come before the agent
//! starts, the user must see them, and `docker logs` is where the host CLI waits for the
//! ready line.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// airlock's own log in the audit directory.
pub const LOG_FILE: &str = "airlock.log";
/// The proxy's level when `AIRLOCK_LOG` is not set.
pub const QUIET_LEVEL: &str = "warn";

/// Where the lines go for this start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Into [`LOG_FILE`] (always, once the audit directory is known), else stderr.
    pub to_file: bool,
    /// The proxy's log filter (`AIRLOCK_PROXY_LOG`).
    pub proxy_filter: Option<String>,
}

impl Route {
    /// Pure: from `AIRLOCK_LOG` (a level; unset or blank: [`QUIET_LEVEL`]).
    pub fn for_level(airlock_log: Option<&str>) -> Route {
        let set = airlock_log.filter(|v| !v.trim().is_empty());
        Route {
            to_file: true,
            proxy_filter: Some(set.unwrap_or(QUIET_LEVEL).to_owned()),
        }
    }

    /// This process's route.
    pub fn detect() -> Route {
        Route::for_level(std::env::var("AIRLOCK_LOG").ok().as_deref())
    }
}

/// The open log file, once [`open`] ran on a route that goes to a file.
static LOG: OnceLock<(File, PathBuf)> = OnceLock::new();

/// Open (append, create `0600`) `<audit_dir>/airlock.log` when `route` goes to a file.
/// Called once the audit directory exists; PID 1 keeps the descriptor for the proxy's
/// restarts (the directory is closed to it after set-up).
pub fn open(route: &Route, audit_dir: &Path) -> Result<()> {
    if !route.to_file || LOG.get().is_some() {
        return Ok(());
    }
    let path = audit_dir.join(LOG_FILE);
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open airlock's log {}", path.display()))?;
    let _ = LOG.set((file, path));
    Ok(())
}

/// A descriptor of the log for a child's stdout or stderr; `None`: inherit stderr.
pub fn child_stream() -> Result<Option<File>> {
    LOG.get()
        .map(|(f, _)| f.try_clone().context("cannot duplicate airlock's log"))
        .transpose()
}

/// The log file's path when lines go there.
pub fn log_path() -> Option<&'static Path> {
    LOG.get().map(|(_, p)| p.as_path())
}

/// Writes `airlock: {line}` and its newline in one `write_all` (one `write(2)` for any line
/// shorter than a pipe's atomic size). The proxy and the git API write to the same stderr
/// and log file; `eprintln!` would write the prefix, the line and the newline separately, and
/// a child's line could land in between (seen: `airlock: <a proxy line>` then `session …`).
fn emit(mut out: impl Write, line: &str) {
    let _ = out.write_all(format!("airlock: {line}\n").as_bytes());
}

/// One line (`airlock: ` is prefixed) on stderr only, whole: warnings about the start that
/// the user must see on the terminal.
pub fn stderr_line(line: &str) {
    emit(std::io::stderr(), line);
}

/// One informational line (`airlock: ` is prefixed): into the log on a terminal, else stderr.
pub fn info(line: &str) {
    match LOG.get() {
        Some((file, _)) => emit(file, line),
        None => stderr_line(line),
    }
}

/// The start's one line on stderr even on a terminal (`session … ready in N ms`), printed
/// before the agent starts so that it never lands inside the agent's screen; also in the log.
pub fn banner(line: &str) {
    fatal(line);
}

/// A line that stops the container: on stderr (the user's terminal) and in the log.
pub fn fatal(line: &str) {
    if let Some((file, _)) = LOG.get() {
        emit(file, line);
    }
    stderr_line(line);
}

/// The last non-empty line of the log (a child that died at start wrote its reason there).
pub fn last_line() -> Option<String> {
    let path = log_path()?;
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records each `write` call it is given.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_is_one_write_so_a_childs_line_cannot_split_it() {
        let mut out = Writes::default();
        emit(&mut out, "session s1 ready in 55 ms");
        assert_eq!(
            out.0,
            vec![b"airlock: session s1 ready in 55 ms\n".to_vec()]
        );
    }

    #[test]
    fn lines_go_to_the_file_at_warn_with_or_without_a_terminal() {
        assert_eq!(
            Route::for_level(None),
            Route {
                to_file: true,
                proxy_filter: Some("warn".into())
            }
        );
    }

    #[test]
    fn airlock_log_sets_the_level() {
        assert_eq!(
            Route::for_level(Some("info")).proxy_filter,
            Some("info".into())
        );
        assert_eq!(
            Route::for_level(Some(" ")).proxy_filter,
            Some("warn".into())
        );
    }
}
