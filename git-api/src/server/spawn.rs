//! Spawning git: its stdin fed from the request, its stdout and stderr streamed back as
//! frames; a read-only git stops when nobody reads any more.

use super::Server;
use crate::argv::Refusal;
use airlock_wire::frame::{CHUNK, write_frame, write_json};
use airlock_wire::{Exit, FrameKind, Invocation, Reason};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One request's runs of git: where their output goes, what the agent sent (environment,
/// standard input, terminal width), where they run, and the configuration the server adds
/// (`color.ui`, a remote's transport).
pub(super) struct Job<'a> {
    /// The agent's connection.
    pub(super) stream: &'a mut UnixStream,
    /// The request.
    pub(super) inv: &'a Invocation,
    /// The working directory, inside the work tree.
    pub(super) cwd: &'a Path,
    /// `-c key=value` pairs git runs with (after the protected ones, before the agent's).
    pub(super) config: Vec<String>,
    /// git's global configuration (`GIT_CONFIG_GLOBAL`): the layer made from the agent's
    /// `~/.gitconfig`, or the copy a `git config --global` edits (`crate::global`); `None`:
    /// none (`/dev/null`).
    pub(super) global: Option<PathBuf>,
}

impl Job<'_> {
    /// A git command of this job (see [`crate::run::GitEnv::command`]) with its global
    /// configuration.
    pub(super) fn command(&self, server: &Server, args: &[String]) -> std::process::Command {
        let mut cmd = server
            .env
            .command(self.cwd, &self.inv.env, &self.config, args);
        if let Some(g) = &self.global {
            cmd.env("GIT_CONFIG_GLOBAL", g);
        }
        cmd
    }
}

impl Server {
    /// Run git and stream its output as frames; returns the exit code sent.
    pub(super) fn stream_git(
        &self,
        job: &mut Job<'_>,
        args: &[String],
        read_only: bool,
    ) -> Result<i32, Refusal> {
        let code = self.run_streamed(job, args, read_only)?;
        let _ = write_json(job.stream, FrameKind::Exit, &Exit { code }, "exit");
        Ok(code)
    }

    /// Run git and stream its stdout and stderr as frames (no exit frame); its exit code.
    pub(super) fn run_streamed(
        &self,
        job: &mut Job<'_>,
        args: &[String],
        read_only: bool,
    ) -> Result<i32, Refusal> {
        let mut cmd = job.command(self, args);
        let (stream, inv) = (&mut *job.stream, job.inv);
        if let Some(w) = inv.term_width {
            cmd.env("COLUMNS", w.to_string());
        }
        if read_only {
            cmd.env("GIT_OPTIONAL_LOCKS", "0");
        }
        cmd.stdin(if inv.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            Refusal::new(
                Reason::Internal,
                format!("starting {}: {e}", self.env.git.display()),
            )
        })?;
        let pid = child.id();
        let out = Mutex::new(
            stream
                .try_clone()
                .map_err(|e| Refusal::new(Reason::Internal, e.to_string()))?,
        );
        let gone = AtomicBool::new(false);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let status = std::thread::scope(|s| {
            if let (Some(mut w), Some(data)) = (stdin, inv.stdin.as_deref()) {
                s.spawn(move || {
                    let _ = w.write_all(data);
                });
            }
            let pump = |r: Option<Box<dyn Read + Send>>, kind: FrameKind| {
                let (out, gone) = (&out, &gone);
                move || {
                    let Some(mut r) = r else { return };
                    let mut buf = vec![0u8; CHUNK];
                    loop {
                        let n = match r.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if gone.load(Ordering::Relaxed) {
                            continue;
                        }
                        let ok = out
                            .lock()
                            .is_ok_and(|mut w| write_frame(&mut *w, kind, &buf[..n]).is_ok());
                        if !ok {
                            gone.store(true, Ordering::Relaxed);
                            if read_only {
                                // Nobody reads any more; a read-only git can stop. A writing
                                // git always finishes (a push the upstream took is never cut).
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(pid as i32),
                                    nix::sys::signal::Signal::SIGTERM,
                                );
                            }
                        }
                    }
                }
            };
            s.spawn(pump(
                stdout.map(|r| Box::new(r) as Box<dyn Read + Send>),
                FrameKind::Stdout,
            ));
            s.spawn(pump(
                stderr.map(|r| Box::new(r) as Box<dyn Read + Send>),
                FrameKind::Stderr,
            ));
            child.wait()
        });
        let status =
            status.map_err(|e| Refusal::new(Reason::Internal, format!("waiting for git: {e}")))?;
        Ok(status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }
}
