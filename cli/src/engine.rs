//! The container engine through the Docker Engine API (bollard): `DOCKER_HOST` is honoured
//! (a unix socket, Podman's compatible one, or `tcp://`), the API version is negotiated so an
//! older engine works, and nothing scrapes the `docker` CLI's output.

use crate::flags::RunSpec;
use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, KillContainerOptions, ListContainersOptions,
    LogsOptions, RemoveContainerOptions, StartContainerOptions, StopContainerOptions,
};
use futures_util::StreamExt;
use std::time::Duration;
use thiserror::Error;

mod archive;
mod io;
mod probe;
pub mod ready;
pub mod volumes;
pub use io::{Attached, DETACH_KEYS, Ended, Link, SESSION};
pub use probe::Facts;
pub use volumes::{LABEL_ROLE, Role, RootFile};

/// The label every container the CLI creates carries: its sandbox name.
pub const LABEL_SANDBOX: &str = "dev.airlock.sandbox";
/// The label naming the registry (data directory) that owns the container.
pub const LABEL_DATA: &str = "dev.airlock.data";
/// The label of a `run`'s one-shot container (`true`): its branch is fetched back and the
/// sandbox removed when its session ends, by `run` or, if `run` was killed, by `gc`.
pub const LABEL_ONESHOT: &str = "dev.airlock.oneshot";

/// A failed engine operation, naming the engine, image or container.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The engine did not answer.
    #[error(
        "cannot reach the container engine at {host} ({source}): start Docker (systemctl start docker) or point DOCKER_HOST at a running engine"
    )]
    Connect {
        /// `DOCKER_HOST` or the default socket.
        host: String,
        /// Why.
        source: bollard::errors::Error,
    },
    /// The image is not in the engine's store.
    #[error("the image {image} is missing: build it with `airlock build` (scripts/build-image)")]
    ImageMissing {
        /// The image reference.
        image: String,
    },
    /// Any other call.
    #[error("the engine could not {op} {name}: {source}")]
    Call {
        /// What was being done.
        op: &'static str,
        /// The container or image.
        name: String,
        /// Why.
        source: bollard::errors::Error,
    },
    /// The create body did not fit the API's types (a bug in the rendering).
    #[error("the create body for {name} is not a valid Engine API body: {source}")]
    Body {
        /// The container.
        name: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The operator's terminal could not be switched to raw mode.
    #[error("{0}")]
    Terminal(crate::term::TermError),
    /// A tar stream for the engine could not be made.
    #[error("cannot make the archive for {name}: {why}")]
    Archive {
        /// The container.
        name: String,
        /// Why.
        why: String,
    },
    /// The container stopped, or took too long, before its readiness record said ready.
    #[error(
        "sandbox container {name} did not become ready: {why} (exit {code:?}); its last output:\n{tail}"
    )]
    NotReady {
        /// The container.
        name: String,
        /// What happened instead.
        why: String,
        /// Its exit code, if it exited.
        code: Option<i64>,
        /// Its last lines.
        tail: String,
    },
    /// The container's readiness record says the start was refused.
    #[error("sandbox container {name} refused to start: {reason}")]
    Refused {
        /// The container.
        name: String,
        /// The entrypoint's line: what is wrong and how to fix it.
        reason: String,
    },
    /// The readiness record in the sandbox's control directory could not be read or cleared.
    #[error("the sandbox's control directory {dir}: {source}")]
    Readiness {
        /// The host directory.
        dir: String,
        /// Why.
        source: airlock_control::status::StatusError,
    },
}

fn call(op: &'static str, name: &str) -> impl FnOnce(bollard::errors::Error) -> EngineError {
    let name = name.to_string();
    move |source| EngineError::Call { op, name, source }
}

fn is_404(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// What the engine says about one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Whether it runs.
    pub running: bool,
    /// `State.StartedAt`: unique per start, the session id.
    pub started_at: String,
    /// Its exit code when stopped.
    pub exit_code: Option<i64>,
    /// `State.FinishedAt` in Unix seconds, when it has stopped.
    pub finished: Option<i64>,
}

/// Unix seconds of an RFC 3339 UTC time as the engine writes it
/// (`2026-11-25T02:56:24.418833506Z`); `None` for the zero time or anything else.
pub fn unix_seconds(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.strip_suffix('Z')?;
    let mut t = time
        .split('.')
        .next()?
        .splitn(3, ':')
        .map(|p| p.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    if y < 1970 || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let yy = if m <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + sec)
}

/// A connected engine.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: Docker,
    /// Where it is (for messages).
    pub host: String,
}

impl Engine {
    /// Connect (honouring `DOCKER_HOST`), negotiate the API version and ping.
    pub async fn connect() -> Result<Engine, EngineError> {
        let host = std::env::var("DOCKER_HOST")
            .unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string());
        let err = |source| EngineError::Connect {
            host: host.clone(),
            source,
        };
        let docker = Docker::connect_with_defaults().map_err(err)?;
        let docker = docker.negotiate_version().await.map_err(err)?;
        docker.ping().await.map_err(err)?;
        Ok(Engine { docker, host })
    }

    /// The engine's version string and API version.
    pub async fn version(&self) -> Result<(String, String), EngineError> {
        let v = self
            .docker
            .version()
            .await
            .map_err(call("report the version of", &self.host))?;
        Ok((
            v.version.unwrap_or_default(),
            v.api_version.unwrap_or_default(),
        ))
    }

    /// The image's id, or [`EngineError::ImageMissing`].
    pub async fn image_id(&self, image: &str) -> Result<String, EngineError> {
        match self.docker.inspect_image(image).await {
            Ok(i) => Ok(i.id.unwrap_or_default()),
            Err(e) if is_404(&e) => Err(EngineError::ImageMissing {
                image: image.into(),
            }),
            Err(e) => Err(call("inspect the image", image)(e)),
        }
    }

    /// Create the container `name` from `spec`; returns its id.
    pub async fn create(&self, name: &str, spec: &RunSpec) -> Result<String, EngineError> {
        let body: ContainerCreateBody =
            serde_json::from_value(spec.engine_body()).map_err(|source| EngineError::Body {
                name: name.into(),
                source,
            })?;
        let opts = CreateContainerOptions {
            name: Some(name.into()),
            platform: String::new(),
        };
        let r = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(call("create", name))?;
        Ok(r.id)
    }

    /// The ids and sandbox names of every container labelled with the data directory `data`.
    pub async fn labelled(&self, data: &str) -> Result<Vec<(String, String)>, EngineError> {
        let filter = format!("{LABEL_DATA}={data}");
        let opts = ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec![filter],
            )])),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(call("list the containers of", data))?;
        Ok(found
            .into_iter()
            .map(|c| {
                let name = c
                    .labels
                    .and_then(|l| l.get(LABEL_SANDBOX).cloned())
                    .unwrap_or_default();
                (c.id.unwrap_or_default(), name)
            })
            .collect())
    }

    /// Start a created or stopped container.
    pub async fn start(&self, id: &str) -> Result<(), EngineError> {
        self.docker
            .start_container(id, None::<StartContainerOptions>)
            .await
            .map_err(call("start", id))
    }

    /// Its state, or `None` if the engine does not have it.
    pub async fn inspect(&self, id: &str) -> Result<Option<Observed>, EngineError> {
        match self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => {
                let s = c.state.unwrap_or_default();
                Ok(Some(Observed {
                    running: s.running.unwrap_or(false),
                    started_at: s.started_at.unwrap_or_default(),
                    exit_code: s.exit_code,
                    finished: s.finished_at.as_deref().and_then(unix_seconds),
                }))
            }
            Err(e) if is_404(&e) => Ok(None),
            Err(e) => Err(call("inspect", id)(e)),
        }
    }

    /// Stop it (SIGTERM to the entrypoint, then SIGKILL after `grace`).
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
        let opts = StopContainerOptions {
            signal: None,
            t: Some(grace.as_secs() as i32),
        };
        match self.docker.stop_container(id, Some(opts)).await {
            Err(e) if !is_404(&e) => Err(call("stop", id)(e)),
            _ => Ok(()),
        }
    }

    /// Send `signal` (`SIGHUP`) to its PID 1.
    pub async fn signal(&self, id: &str, signal: &str) -> Result<(), EngineError> {
        let opts = KillContainerOptions {
            signal: signal.to_owned(),
        };
        self.docker
            .kill_container(id, Some(opts))
            .await
            .map_err(call("kill", id))
    }

    /// Remove it with its anonymous volumes; a container already gone is fine.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        let opts = RemoveContainerOptions {
            v: true,
            force: true,
            link: false,
        };
        match self.docker.remove_container(id, Some(opts)).await {
            Err(e) if !is_404(&e) => Err(call("remove", id)(e)),
            _ => Ok(()),
        }
    }

    /// Its output so far (stdout and stderr, in order), the last `tail` lines if given.
    pub async fn logs(&self, id: &str, tail: Option<u32>) -> Result<Vec<u8>, EngineError> {
        let opts = LogsOptions {
            stdout: true,
            stderr: true,
            tail: tail.map_or_else(|| "all".to_string(), |n| n.to_string()),
            ..Default::default()
        };
        let mut stream = self.docker.logs(id, Some(opts));
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => out.extend_from_slice(&c.into_bytes()),
                // A TTY's output ending without a newline (a prompt): the decoder reports the
                // unfinished line at the end of the stream; what came before is complete.
                Err(bollard::errors::Error::IOError { err })
                    if err.to_string().contains("bytes remaining on stream") =>
                {
                    break;
                }
                Err(e) => return Err(call("read the logs of", id)(e)),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::unix_seconds;

    #[test]
    fn engine_times_parse_to_unix_seconds() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            unix_seconds("2026-11-25T02:56:24.418833506Z"),
            Some(1_795_575_384)
        );
        assert_eq!(unix_seconds("2000-02-29T12:00:00Z"), Some(951_825_600));
        assert_eq!(unix_seconds("0001-01-01T00:00:00Z"), None);
        assert_eq!(unix_seconds("garbage"), None);
    }
}
