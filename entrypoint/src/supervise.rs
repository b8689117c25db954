//! PID 1 after set-up: reap every child, forward signals to the agent's process group, keep
//! the proxy and the git API alive (a crash; the agent can signal neither: other real and
//! saved uids), and when the agent exits let the proxy flush its audit log before the
//! container stops with the agent's status.
//!
//! Which signal does what ([`route`]): SIGCHLD reaps; **SIGHUP is the operator's
//! workspace-secrets rescan** (`docker kill -s HUP <container>`, `airlock rescan <name>`:
//! [`crate::rescan`]) and is not forwarded, so the agent never sees it (a terminal hang-up
//! does not reach PID 1 of a container); every other handled signal goes to the agent's
//! process group, which decides how to exit. The agent cannot send PID 1 a signal (other
//! uid), so only the operator starts a rescan.
//!
//! A stop (`docker stop`, `airlock stop`: SIGTERM) of an agent that has a terminal is also
//! the terminal going away, so the agent's group gets SIGHUP after the SIGTERM
//! ([`forwarded`]): an interactive shell ignores SIGTERM and would hold the container for the
//! engine's whole grace period before SIGKILL (the proxy's audit flush lost with it), while a
//! hang-up ends it, and its jobs, at once.

use crate::git::ApiSpec;
use crate::proxy_ctl::ProxySpec;
use anyhow::{Context, Result, bail};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Signals PID 1 handles synchronously (blocked, then taken with `sigwait`).
pub fn handled_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGWINCH,
    ] {
        set.add(sig);
    }
    set
}

/// Block the handled signals in PID 1 (children unblock them before `exec`).
pub fn block_signals() -> Result<()> {
    handled_signals()
        .thread_block()
        .context("blocking signals in PID 1")
}

/// What PID 1 does with a signal it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Reap exited children.
    Reap,
    /// Rescan the workspace's secret files ([`crate::rescan`]).
    Rescan,
    /// Forward it to the agent's process group.
    Forward,
}

/// The [`Route`] of `sig`. Pure.
#[must_use]
pub fn route(sig: Signal) -> Route {
    match sig {
        Signal::SIGCHLD => Route::Reap,
        Signal::SIGHUP => Route::Rescan,
        _ => Route::Forward,
    }
}

/// The signals the agent's group gets for a forwarded `sig`: `sig`, and after a SIGTERM
/// SIGHUP too when the agent has a terminal (`tty`). Pure.
#[must_use]
pub fn forwarded(sig: Signal, tty: bool) -> Vec<Signal> {
    if sig == Signal::SIGTERM && tty {
        vec![Signal::SIGTERM, Signal::SIGHUP]
    } else {
        vec![sig]
    }
}

/// More proxy deaths than this within [`RESTART_WINDOW`] stops the container.
const MAX_RESTARTS: usize = 5;
const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// Time the proxy gets to flush its audit log after SIGTERM.
const PROXY_STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Supervisor {
    pub agent: Pid,
    pub proxy: Pid,
    pub proxy_spec: ProxySpec,
    restarts: VecDeque<Instant>,
    /// The git API, when git runs, and its own restart history.
    git: Option<(Pid, ApiSpec, VecDeque<Instant>)>,
    /// The workspace-secrets rescan SIGHUP runs (none: SIGHUP is ignored).
    rescan: Option<crate::rescan::Rescan>,
}

/// The container's exit status for a waited child: its code, or 128 + signal.
fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

impl Supervisor {
    pub fn new(agent: Pid, proxy: Pid, proxy_spec: ProxySpec) -> Self {
        Supervisor {
            agent,
            proxy,
            proxy_spec,
            restarts: VecDeque::new(),
            git: None,
            rescan: None,
        }
    }

    /// Run `rescan` on SIGHUP.
    pub fn with_rescan(mut self, rescan: crate::rescan::Rescan) -> Self {
        self.rescan = Some(rescan);
        self
    }

    /// Also keep the git API alive (restarted like the proxy, same budget).
    pub fn with_git(mut self, pid: Pid, spec: ApiSpec) -> Self {
        self.git = Some((pid, spec, VecDeque::new()));
        self
    }

    /// Run until the agent exits; returns the container's exit status.
    pub fn run(mut self) -> Result<i32> {
        let signals = handled_signals();
        loop {
            let sig = signals.wait().context("waiting for signals")?;
            match route(sig) {
                Route::Forward => {
                    // The agent's group decides how to exit.
                    let tty = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
                    for s in forwarded(sig, tty) {
                        let _ = killpg(self.agent, s);
                    }
                    continue;
                }
                Route::Rescan => {
                    // Its children are waited for by pid; their SIGCHLD is taken next.
                    if let Some(rescan) = &self.rescan {
                        rescan.run(self.proxy);
                    }
                    continue;
                }
                Route::Reap => {}
            }
            if let Some(code) = self.reap()? {
                if let Some((pid, ..)) = &self.git {
                    let _ = kill(*pid, Signal::SIGTERM);
                }
                self.stop_proxy();
                return Ok(code);
            }
        }
    }

    /// Reap every exited child. Returns the agent's status once it has exited.
    fn reap(&mut self) -> Result<Option<i32>> {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(None),
                Ok(status) => {
                    let pid = status.pid();
                    if pid == Some(self.agent) {
                        if let Some(code) = exit_code(status) {
                            return Ok(Some(code));
                        }
                    } else if pid == Some(self.proxy) && exit_code(status).is_some() {
                        self.restart_proxy(status)?;
                    } else if pid.is_some()
                        && pid == self.git.as_ref().map(|g| g.0)
                        && exit_code(status).is_some()
                    {
                        self.restart_git(status)?;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e).context("reaping children"),
            }
        }
    }

    fn restart_proxy(&mut self, status: WaitStatus) -> Result<()> {
        let now = Instant::now();
        self.restarts
            .retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if self.restarts.len() >= MAX_RESTARTS {
            let _ = killpg(self.agent, Signal::SIGKILL);
            bail!(
                "the proxy died {} times within {}s (last: {status:?}); stopping the container rather than run the agent without it",
                MAX_RESTARTS + 1,
                RESTART_WINDOW.as_secs()
            );
        }
        self.restarts.push_back(now);
        crate::console::info(&format!("the proxy exited ({status:?}); restarting it"));
        let child = self.proxy_spec.start().context("restarting the proxy")?;
        self.proxy = Pid::from_raw(child.id() as i32);
        Ok(())
    }

    fn restart_git(&mut self, status: WaitStatus) -> Result<()> {
        let Some((pid, spec, restarts)) = self.git.as_mut() else {
            return Ok(());
        };
        let now = Instant::now();
        restarts.retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if restarts.len() >= MAX_RESTARTS {
            let _ = killpg(self.agent, Signal::SIGKILL);
            bail!(
                "the git API died {} times within {}s (last: {status:?}); stopping the container",
                MAX_RESTARTS + 1,
                RESTART_WINDOW.as_secs()
            );
        }
        restarts.push_back(now);
        crate::console::info(&format!("the git API exited ({status:?}); restarting it"));
        let child = spec.start().context("restarting the git API")?;
        *pid = Pid::from_raw(child.id() as i32);
        Ok(())
    }

    /// SIGTERM the proxy and wait for it to flush; SIGKILL after the grace period.
    fn stop_proxy(&mut self) {
        if kill(self.proxy, Signal::SIGTERM).is_err() {
            return;
        }
        let deadline = Instant::now() + PROXY_STOP_GRACE;
        while Instant::now() < deadline {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(status) if status.pid() == Some(self.proxy) => return,
                Err(Errno::ECHILD) => return,
                Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(5)),
                _ => {}
            }
        }
        crate::console::info(&format!(
            "the proxy did not stop within {}s; killing it",
            PROXY_STOP_GRACE.as_secs()
        ));
        let _ = kill(self.proxy, Signal::SIGKILL);
        let _ = waitpid(self.proxy, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sighup_rescans_sigchld_reaps_and_the_rest_reach_the_agent() {
        assert_eq!(route(Signal::SIGHUP), Route::Rescan);
        assert_eq!(route(Signal::SIGCHLD), Route::Reap);
        for sig in handled_signals().iter() {
            if sig != Signal::SIGHUP && sig != Signal::SIGCHLD {
                assert_eq!(route(sig), Route::Forward, "{sig}");
            }
        }
    }

    #[test]
    fn a_stop_hangs_up_an_agent_with_a_terminal() {
        assert_eq!(
            forwarded(Signal::SIGTERM, true),
            [Signal::SIGTERM, Signal::SIGHUP]
        );
        assert_eq!(forwarded(Signal::SIGTERM, false), [Signal::SIGTERM]);
        assert_eq!(forwarded(Signal::SIGINT, true), [Signal::SIGINT]);
    }

    #[test]
    fn exit_status_follows_the_shell_convention() {
        let pid = Pid::from_raw(7);
        assert_eq!(exit_code(WaitStatus::Exited(pid, 3)), Some(3));
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
            Some(137)
        );
        assert_eq!(exit_code(WaitStatus::StillAlive), None);
    }
}
