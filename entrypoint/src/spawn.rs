//! The privilege-drop seam: build a `Command` whose child becomes another user before `exec`.
//!
//! Between `fork` and `exec` the child: unblocks signals (PID 1 blocks them for `sigwait`),
//! optionally starts its own session or process group, clears the capability bounding set,
//! sets exactly the target's groups, gid and uid (all of real/effective/saved; or, for the
//! git API's split identity, a different real uid: see [`RunAs::real_uid`]), clears the
//! inheritable and ambient sets, sets `no_new_privs`, installs the seccomp filters, and then
//! reads `/proc/self/status` and refuses to `exec` unless the kernel reports exactly that.

use crate::identity::Identity;
use crate::status::{self, Expected};
use caps::CapSet;
use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
use nix::unistd::{Gid, Pid, Uid, setgroups, setpgid, setresgid, setresuid, setsid, tcsetpgrp};
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
        let id = &self.identity;
        match self.session {
            Session::Detached => {
                setsid()?;
            }
            Session::ForegroundGroup => {
                setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
                // Taking the terminal from a background group raises SIGTTOU: keep it blocked.
                let mut ttou = SigSet::empty();
                ttou.add(nix::sys::signal::Signal::SIGTTOU);
                sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None)?;
                let stdin = std::io::stdin();
                if nix::unistd::isatty(&stdin).unwrap_or(false) {
                    let _ = tcsetpgrp(&stdin, nix::unistd::getpid());
                }
            }
            Session::Inherit => {}
        }
        sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;

        for cap in caps::all() {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| fail(format!("clearing bounding capability {cap}: {e}")))?;
        }
        let groups: Vec<Gid> = id.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        setgroups(&groups)?;
        let gid = Gid::from_raw(id.gid);
        setresgid(gid, gid, gid)?;
        let uid = Uid::from_raw(id.uid);
        let real = Uid::from_raw(self.real_uid.unwrap_or(id.uid));
        setresuid(real, uid, uid)?;
        for set in [
            CapSet::Inheritable,
            CapSet::Ambient,
            CapSet::Effective,
            CapSet::Permitted,
        ] {
            caps::clear(None, set)
                .map_err(|e| fail(format!("clearing {set:?} capabilities: {e}")))?;
        }
        nix::sys::prctl::set_no_new_privs()?;
        if let Some(filters) = &self.filters {
            crate::seccomp::install(filters)
                .map_err(|e| fail(format!("installing seccomp filter: {e}")))?;
        }
        std::env::set_current_dir(cwd)
            .map_err(|e| fail(format!("{} cannot enter {}: {e}", id.name, cwd.display())))?;
        let text = std::fs::read_to_string("/proc/self/status")?;
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
        status::verify(&text, &want)
            .map_err(|m| fail(format!("privilege drop to {} not verified: {m}", id.name)))?;
        Ok(())
    }
}

/// Report a child-side failure: `Command::spawn` only carries errno back to the parent, so
/// the reason is written to stderr first (one line), then an error is returned.
fn fail(msg: String) -> io::Error {
    let _ = writeln!(io::stderr(), "airlock: {msg}");
    io::Error::from_raw_os_error(libc::EPERM)
}
