//! Streams between the operator's terminal and a sandbox: `attach` to the agent's terminal,
//! an `exec` that becomes a confined session (`airlock-entrypoint __session`), and waiting for
//! a container to exit.
//!
//! With a terminal on our side the sandbox gets a TTY of the same size (resized on
//! `SIGWINCH`) and our terminal is raw while attached; without one, stdout and stderr stay
//! apart and stdin (a pipe or a file) is forwarded up to its end.

use super::{Engine, EngineError, call};
use crate::term::{self, Size};
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{
    AttachContainerOptions, ResizeContainerTTYOptions, ResizeExecOptions, WaitContainerOptions,
};
use futures_util::{Stream, StreamExt};
use std::io::{Read, Write};
use std::pin::Pin;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The in-container program that turns an exec into the agent (entrypoint/src/second.rs).
pub const SESSION: [&str; 2] = ["/usr/local/bin/airlock-entrypoint", "__session"];

/// The detach sequence of `attach` (the engine's own default).
pub const DETACH_KEYS: &str = "ctrl-p,ctrl-q";

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// An open attachment to a container.
pub struct Attached {
    output: Output,
    input: Input,
    link: Link,
    id: String,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Attached({})", self.id)
    }
}

/// Why an attachment's output ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The container's output closed: it stopped (or is stopping).
    Closed,
    /// The operator typed the detach sequence ([`DETACH_KEYS`]): it keeps running.
    Detached,
}

/// ctrl-p ctrl-q, the bytes of [`DETACH_KEYS`].
const DETACH_BYTES: [u8; 2] = [0x10, 0x11];

impl Attached {
    /// Copy the streams until the container's output ends (it stopped, or a detach).
    pub async fn pump(self, engine: &Engine) -> Result<Ended, EngineError> {
        engine
            .pump(
                self.output,
                self.input,
                self.link,
                Target::Container(self.id),
            )
            .await
    }
}

/// What a TTY resize applies to.
#[derive(Debug, Clone)]
enum Target {
    Container(String),
    Exec(String),
}

/// How the operator's side is connected.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Our terminal's size when both stdin and stdout are terminals (the sandbox side gets
    /// a TTY); `None` for pipes and files.
    pub tty: Option<Size>,
    /// Forward our stdin.
    pub stdin: bool,
}

impl Link {
    /// A TTY when we have one; stdin forwarded either way.
    pub fn detect() -> Link {
        let tty = if term::interactive() {
            Some(term::size().unwrap_or(Size { rows: 24, cols: 80 }))
        } else {
            None
        };
        Link { tty, stdin: true }
    }
}

/// Our stdin, read on its own thread (a blocking read that may never end must not hold the
/// runtime); `None` once it reaches its end.
fn stdin_chunks() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

fn write_out(item: LogOutput) {
    match item {
        LogOutput::StdErr { message } => {
            let mut e = std::io::stderr();
            let _ = e.write_all(&message);
            let _ = e.flush();
        }
        other => {
            let mut o = std::io::stdout();
            let _ = o.write_all(&other.into_bytes());
            let _ = o.flush();
        }
    }
}

impl Engine {
    async fn resize(&self, target: &Target, size: Size) {
        let (h, w) = (i32::from(size.rows), i32::from(size.cols));
        // A resize racing the process's exit fails harmlessly: nothing to report.
        let _ = match target {
            Target::Container(id) => {
                self.docker
                    .resize_container_tty(id, ResizeContainerTTYOptions { h, w })
                    .await
            }
            Target::Exec(id) => {
                self.docker
                    .resize_exec(id, ResizeExecOptions { h, w })
                    .await
            }
        };
    }

    /// Copy the sandbox's output to ours and our stdin to it until its output ends; keep
    /// its TTY the size of ours. The output ending right after we sent the detach sequence
    /// is a detach (the engine closes the stream; the container runs on), so the caller need
    /// not wait to see whether the container stops.
    async fn pump(
        &self,
        mut output: Output,
        mut input: Input,
        link: Link,
        target: Target,
    ) -> Result<Ended, EngineError> {
        let _raw = match link.tty {
            Some(size) => {
                self.resize(&target, size).await;
                Some(term::RawGuard::enter().map_err(EngineError::Terminal)?)
            }
            None => None,
        };
        let mut stdin = link.stdin.then(stdin_chunks);
        // The last two bytes sent: the detach sequence, or not.
        let mut sent = [0u8; 2];
        let mut winch =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
        loop {
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(item)) => write_out(item),
                    Some(Err(e)) => return Err(call("read the output of", &target_name(&target))(e)),
                    None if sent == DETACH_BYTES && matches!(target, Target::Container(_)) => {
                        return Ok(Ended::Detached);
                    }
                    None => return Ok(Ended::Closed),
                },
                chunk = recv(&mut stdin) => match chunk {
                    Some(bytes) => {
                        match bytes.as_slice() {
                            [] => {}
                            [one] => sent = [sent[1], *one],
                            [.., a, b] => sent = [*a, *b],
                        }
                        if input.write_all(&bytes).await.is_err() {
                            stdin = None;
                        }
                        let _ = input.flush().await;
                    }
                    None => {
                        stdin = None;
                        // A pipe's end: an exec'd process reads end-of-file (a TTY keeps
                        // going). An attachment stays open: closing it would end the copy
                        // of the agent's output too.
                        if link.tty.is_none() && matches!(target, Target::Exec(_)) {
                            let _ = input.shutdown().await;
                        }
                    }
                },
                _ = winch_recv(&mut winch), if link.tty.is_some() => {
                    if let Some(size) = term::size() {
                        self.resize(&target, size).await;
                    }
                }
            }
        }
    }

    /// Attach to the container's terminal (or its output) until it exits or the operator
    /// detaches with [`DETACH_KEYS`].
    pub async fn attach(&self, id: &str, link: Link) -> Result<Ended, EngineError> {
        self.attach_open(id, link).await?.pump(self).await
    }

    /// Open the attachment (the streams exist once this returns: a container started after
    /// it loses none of its output); [`Attached::pump`] copies them.
    pub async fn attach_open(&self, id: &str, link: Link) -> Result<Attached, EngineError> {
        let opts = AttachContainerOptions {
            stream: true,
            stdin: link.stdin,
            stdout: true,
            stderr: true,
            logs: false,
            detach_keys: Some(DETACH_KEYS.into()),
        };
        let a = self
            .docker
            .attach_container(id, Some(opts))
            .await
            .map_err(call("attach to", id))?;
        Ok(Attached {
            output: a.output,
            input: a.input,
            link,
            id: id.into(),
        })
    }

    /// Run `cmd` as a confined session of the agent (the entrypoint's `__session` mode: the
    /// agent's uid, no capabilities, `no_new_privs`, seccomp, the proxy); returns its status.
    pub async fn session(&self, id: &str, cmd: &[String], link: Link) -> Result<i64, EngineError> {
        let mut argv: Vec<String> = SESSION.iter().map(|s| s.to_string()).collect();
        argv.push("--".into());
        argv.extend(cmd.iter().cloned());
        let opts = CreateExecOptions {
            attach_stdin: Some(link.stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(link.tty.is_some()),
            // Root, the engine's default: the session drops to the agent itself.
            user: Some("0:0".to_string()),
            cmd: Some(argv),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(id, opts)
            .await
            .map_err(call("exec in", id))?;
        let start = StartExecOptions {
            detach: false,
            tty: link.tty.is_some(),
            output_capacity: None,
        };
        let started = self
            .docker
            .start_exec(&created.id, Some(start))
            .await
            .map_err(call("exec in", id))?;
        if let StartExecResults::Attached { output, input } = started {
            self.pump(output, input, link, Target::Exec(created.id.clone()))
                .await?;
        }
        let done = self
            .docker
            .inspect_exec(&created.id)
            .await
            .map_err(call("inspect an exec in", id))?;
        Ok(done.exit_code.unwrap_or(-1))
    }

    /// Wait for the container to stop; its exit code.
    pub async fn wait_exit(&self, id: &str) -> Result<i64, EngineError> {
        let opts = WaitContainerOptions {
            condition: "not-running".into(),
        };
        let mut s = self.docker.wait_container(id, Some(opts));
        match s.next().await {
            Some(Ok(r)) => Ok(r.status_code),
            // A non-zero exit is reported as an error by the client, with the code in it.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(call("wait for", id)(e)),
            None => Ok(self
                .inspect(id)
                .await?
                .and_then(|o| o.exit_code)
                .unwrap_or(-1)),
        }
    }
}

fn target_name(t: &Target) -> String {
    match t {
        Target::Container(id) | Target::Exec(id) => id.clone(),
    }
}

async fn recv(rx: &mut Option<mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn winch_recv(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}
