//! The privilege-drop seam: build a `Command` whose child becomes another user before `exec`.
//!
//! Between `fork` and `exec` the child: optionally starts its own session or process group,
//! unblocks signals (PID 1 blocks them for `sigwait`), then drops privileges through the
//! [`crate::sys`] seam: clears the capability bounding set, sets exactly the target's groups,
//! gid and uid (all of real/effective/saved; or, for the git API's split identity, a
//! different real uid: see [`RunAs::real_uid`]), clears the other capability sets, sets
//! `no_new_privs`, installs the seccomp filters; and then reads `/proc/self/status` and
//! refuses to `exec` unless the kernel reports exactly that. Every failed call writes one
//! line naming itself (`airlock: setresuid(1000): EPERM: ...`) and hands its errno back.

use crate::identity::Identity;
use crate::status::{self, Expected};
use crate::sys::{self, Linux, Target, Uids};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
use nix::unistd::{Pid, setpgid, setsid, tcsetpgrp};
use seccompiler::BpfProgram;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// How the child relates to the terminal and to PID 1's signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// A new session without a terminal (the proxy: terminal signals never reach it).
    Detached,
    /// Its own process group, made the terminal's foreground group when stdin is one (the
    /// agent: Ctrl-C reaches the agent, and PID 1 forwards other signals to the group).
    ForegroundGroup,
    /// Stay in PID 1's group (short-lived helpers such as the self-test).
    Inherit,
}

/// Everything the child needs to become `identity`.
#[derive(Debug, Clone)]
pub struct RunAs {
    pub identity: Identity,
    pub filters: Option<Arc<Vec<BpfProgram>>>,
    pub session: Session,
    /// `Some(uid)`: the real uid is `uid` while effective and saved stay `identity.uid` (the
    /// git API: real `airlock-git`, effective the workspace owner). Real and effective uid
    /// then differ, so the kernel marks the process not dumpable at `exec`: the user of
    /// `identity` may not ptrace it or open its `/proc/<pid>/{cwd,root,fd,environ,mem}`.
    /// (`execve` makes the saved uid the effective one; the git API then makes it its real
    /// one, so that the user of `identity` cannot signal it either.)
    pub real_uid: Option<u32>,
}

impl RunAs {
    /// `identity` in a session of its own, no seccomp filter, no split uid (the proxy).
    pub fn detached(identity: Identity) -> RunAs {
        RunAs {
            identity,
            filters: None,
            session: Session::Detached,
            real_uid: None,
        }
    }

    /// A command for `program` that runs as `self.identity` with exactly `env`.
    /// `cwd` is entered after the drop, so the target user must be able to reach it.
    pub fn command(&self, program: &Path, env: &BTreeMap<String, String>, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear().envs(env);
        let spec = self.clone();
        let cwd = cwd.to_path_buf();
        // SAFETY: the closure runs in the child between fork and exec. The entrypoint is
        // single-threaded (no runtime, no helper threads), so no lock can be held by a thread
        // that does not exist in the child; the closure only makes syscalls, reads one /proc
        // file and formats an error message.
        unsafe {
            cmd.pre_exec(move || spec.in_child(&cwd));
        }
        cmd
    }

    fn in_child(&self, cwd: &Path) -> io::Result<()> {
        self.enter_session()?;
        sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
            .map_err(|e| failed("sigprocmask(SIG_SETMASK, empty)", e))?;
        let id = &self.identity;
        let uid = id.uid;
        let target = Target {
            groups: &id.groups,
            gid: id.gid,
            uids: Uids {
                real: self.real_uid.unwrap_or(uid),
                effective: uid,
                saved: uid,
            },
            filters: self.filters.as_deref().map(Vec::as_slice),
        };
        sys::drop_privileges(&mut Linux, &target)
            .map_err(|e| fail(e.to_string(), e.raw_os_error()))?;
        std::env::set_current_dir(cwd).map_err(|e| {
            fail(
                format!("{} cannot enter {}: {e}", id.name, cwd.display()),
                libc::EPERM,
            )
        })?;
        self.verify_in_child()
    }

    /// The session and terminal of [`Session`].
    fn enter_session(&self) -> io::Result<()> {
        match self.session {
            Session::Detached => {
                setsid().map_err(|e| failed("setsid()", e))?;
            }
            Session::ForegroundGroup => {
                setpgid(Pid::from_raw(0), Pid::from_raw(0))
                    .map_err(|e| failed("setpgid(0, 0)", e))?;
                // Taking the terminal from a background group raises SIGTTOU: keep it blocked.
                let mut ttou = SigSet::empty();
                ttou.add(nix::sys::signal::Signal::SIGTTOU);
                sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None)
                    .map_err(|e| failed("sigprocmask(SIG_BLOCK, SIGTTOU)", e))?;
                let stdin = std::io::stdin();
                if nix::unistd::isatty(&stdin).unwrap_or(false) {
                    let _ = tcsetpgrp(&stdin, nix::unistd::getpid());
                }
            }
            Session::Inherit => {}
        }
        Ok(())
    }

    /// Refuse to `exec` unless `/proc/self/status` reports exactly the drop's result.
    fn verify_in_child(&self) -> io::Result<()> {
        let id = &self.identity;
        let text = std::fs::read_to_string("/proc/self/status").map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            fail(format!("reading /proc/self/status: {e}"), errno)
        })?;
        let want = Expected {
            uid: id.uid,
            real_uid: self.real_uid.unwrap_or(id.uid),
            // `execve` sets the saved uid to the effective one; the git API pins it to its
            // real uid itself, after exec (checked again by `git::ApiSpec::start`).
            saved_uid: id.uid,
            gid: id.gid,
            groups: &id.groups,
            seccomp: self.filters.is_some(),
        };
        status::verify(&text, &want).map_err(|m| {
            fail(
                format!("privilege drop to {} not verified: {m}", id.name),
                libc::EPERM,
            )
        })?;
        Ok(())
    }
}

/// A failed call of the child's own (outside the drop sequence), named with its arguments.
fn failed(call: &str, errno: Errno) -> io::Error {
    fail(format!("{call}: {errno}"), errno as i32)
}

/// Report a child-side failure: `Command::spawn` only carries errno back to the parent, so
/// the reason is written to stderr first (one line), then `errno` is returned.
fn fail(msg: String, errno: i32) -> io::Error {
    let _ = writeln!(io::stderr(), "airlock: {msg}");
    io::Error::from_raw_os_error(errno)
}
