//! The Unix-socket server: authenticate, decide, run, stream.
//!
//! By job: `listen` accepts connections under the cap, `auth` authenticates them, `execute`
//! decides and dispatches by class, `remote` reads and checks remotes, `fetch` and
//! `push` orchestrate the commands that talk to one (each with a `ticket` of the git
//! service port), `rewrite` reshapes the argv git runs, `spawn` runs git and streams its
//! output, and `audit` is the log record of the outcome.

mod audit;
mod auth;
mod execute;
mod fetch;
mod listen;
mod push;
mod remote;
mod rewrite;
mod spawn;
mod ticket;

use crate::argv::Refusal;
use crate::log::Log;
use crate::push::PushRules;
use crate::run::GitEnv;
use crate::visible::Visibility;
use airlock_wire::{Reason, Verifier};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

/// Everything a connection handler needs.
#[derive(Debug)]
pub struct Server {
    /// How git runs.
    pub env: GitEnv,
    /// The only uid allowed to connect.
    pub agent_uid: u32,
    /// Push rules.
    pub rules: PushRules,
    /// Which remote branches this sandbox sees.
    pub vis: Visibility,
    /// HMAC verification and the nonce cache.
    pub verifier: Mutex<Verifier>,
    /// Serialises operations that write the repository.
    pub write_lock: Mutex<()>,
    /// Concurrent connections at most.
    pub max_connections: usize,
    /// The decision log.
    pub log: Log,
    /// The agent's home, whose `~/.gitconfig` is git's global configuration in the
    /// workspace too ([`crate::global`]); `None`: git there reads none.
    home: Option<crate::global::AgentHome>,
    /// The policy, for its `[network]` table: a read-only remote's host must be allowed.
    /// `None`: no read-only remote.
    network: Option<airlock_policy::Policy>,
    /// The git service port's key (from the entrypoint): every network git command gets a
    /// ticket sealed with it. `None` (tests, local upstreams): none do.
    service_key: Option<airlock_ticket::ServiceKey>,
    active: AtomicUsize,
    /// Whether this git's `bisect` is the shell script of git < 2.40 (read once).
    bisect_script: std::sync::OnceLock<bool>,
}

impl Server {
    /// A server; see the fields.
    #[must_use]
    pub fn new(
        env: GitEnv,
        agent_uid: u32,
        rules: PushRules,
        vis: Visibility,
        verifier: Verifier,
        max_connections: usize,
    ) -> Server {
        Server {
            env,
            agent_uid,
            rules,
            vis,
            verifier: Mutex::new(verifier),
            write_lock: Mutex::new(()),
            max_connections,
            log: Log::stderr(None),
            home: None,
            network: None,
            service_key: None,
            active: AtomicUsize::new(0),
            bisect_script: std::sync::OnceLock::new(),
        }
    }

    /// The same server logging to `log` (default: stderr, without a session id).
    #[must_use]
    pub fn with_log(mut self, log: Log) -> Server {
        self.log = log;
        self
    }

    /// The same server reading (and, for `git config --global`, writing) the agent's
    /// `~/.gitconfig` in `home` ([`crate::global`]).
    #[must_use]
    pub fn with_agent_home(mut self, home: crate::global::AgentHome) -> Server {
        self.home = Some(home);
        self
    }

    /// The same server letting fetches through to read-only remotes on the hosts `policy`'s
    /// `[network]` table allows (see `remote`).
    #[must_use]
    pub fn with_network(mut self, policy: airlock_policy::Policy) -> Server {
        self.network = Some(policy);
        self
    }

    /// The same server sealing a ticket of the git service port with `key` for every
    /// network git command (see `airlock_ticket`).
    #[must_use]
    pub fn with_service_key(mut self, key: airlock_ticket::ServiceKey) -> Server {
        self.service_key = Some(key);
        self
    }
}

/// The working directory: relative, no `..`, and inside the work tree after symlinks.
pub fn resolve_cwd(work_tree: &Path, rel: &str) -> Result<PathBuf, Refusal> {
    let outside = || {
        Refusal::new(
            Reason::OutsideWorkspace,
            format!("working directory {rel:?} is not inside the workspace"),
        )
    };
    let p = Path::new(rel);
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(outside());
    }
    let joined = work_tree.join(p);
    let real = joined.canonicalize().map_err(|_| outside())?;
    if !real.starts_with(work_tree) || !real.is_dir() {
        return Err(outside());
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_must_stay_inside_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let wt = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(wt.join("src/a")).unwrap();
        std::os::unix::fs::symlink("/etc", wt.join("link")).unwrap();
        assert_eq!(resolve_cwd(&wt, "").unwrap(), wt);
        assert_eq!(resolve_cwd(&wt, "src/a").unwrap(), wt.join("src/a"));
        for bad in [
            "..",
            "src/../..",
            "/etc",
            "link",
            "missing",
            "src/a/../../..",
        ] {
            assert_eq!(
                resolve_cwd(&wt, bad).unwrap_err().reason,
                Reason::OutsideWorkspace,
                "{bad}"
            );
        }
    }
}
