//! Whether a started container is ready: the readiness record PID 1 writes into the
//! sandbox's control directory (a host directory the container mounts at
//! [`airlock_control::paths::CONTROL_DIR`]), read here on the host; the engine is asked only
//! whether the container still runs, and for its last lines when it stopped.
//!
//! No log is read to decide: the agent's own output can say anything, the record only PID 1
//! writes (its directory is root's 0700 inside the container).

use super::{Engine, EngineError};
use airlock_control::status::{self, State, Status};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the record is read while waiting (a read of one small file).
const POLL: Duration = Duration::from_millis(25);
/// How often, in polls, the engine is asked whether the container still runs.
const INSPECT_EVERY: u32 = 4;

/// Remove the record of an earlier start from `control`, before the container starts again.
///
/// # Errors
/// [`EngineError::Readiness`] when a record is there and cannot be removed.
pub fn clear(control: &Path) -> Result<(), EngineError> {
    status::clear(control).map_err(|source| EngineError::Readiness {
        dir: control.display().to_string(),
        source,
    })
}

impl Engine {
    /// Wait until the start of container `id` says `ready` in its control directory
    /// `control`: how long the wait took, and the record. A `refused` record, a container
    /// that stops, or `limit` passing fail with what is known (the refusal's line, the
    /// exit status and the last lines of its output).
    pub async fn wait_ready(
        &self,
        id: &str,
        control: &Path,
        limit: Duration,
    ) -> Result<(Duration, Status), EngineError> {
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            let record = status::read(control).map_err(|source| EngineError::Readiness {
                dir: control.display().to_string(),
                source,
            })?;
            match record {
                Some(s) if s.state == State::Ready => return Ok((start.elapsed(), s)),
                Some(s) if s.state == State::Refused => {
                    return Err(EngineError::Refused {
                        name: id.into(),
                        reason: s.reason.unwrap_or_default(),
                    });
                }
                _ => {}
            }
            let timed_out = start.elapsed() > limit;
            if polls.is_multiple_of(INSPECT_EVERY) || timed_out {
                let state = self.inspect(id).await?;
                let stopped = state.as_ref().is_none_or(|s| !s.running);
                if stopped || timed_out {
                    let code = state.and_then(|s| s.exit_code);
                    let why = if stopped {
                        match code.and_then(airlock_control::exit::describe) {
                            Some(what) => format!("it {what}"),
                            None => "it stopped".to_owned(),
                        }
                    } else {
                        format!(
                            "no ready record in {} after {} s (an image older than this CLI writes none: `airlock build`)",
                            control.display(),
                            limit.as_secs()
                        )
                    };
                    return Err(EngineError::NotReady {
                        name: id.into(),
                        why,
                        code,
                        tail: self.tail(id, 5).await,
                    });
                }
            }
            polls = polls.wrapping_add(1);
            tokio::time::sleep(POLL).await;
        }
    }

    /// The last `lines` lines of the container's output, for a message (empty when the
    /// engine cannot give them).
    async fn tail(&self, id: &str, lines: u32) -> String {
        let logs = self.logs(id, Some(lines)).await.unwrap_or_default();
        String::from_utf8_lossy(&logs).trim_end().to_owned()
    }
}
