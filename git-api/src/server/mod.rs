//! The Unix-socket server: authenticate, decide, run, stream.
//!
//! By job: `listen` accepts connections under the cap, `auth` authenticates them, this
//! module decides and dispatches by class, `remote` reads and checks remotes, `fetch` and
//! `push` orchestrate the commands that talk to one, `rewrite` reshapes the argv git runs,
//! `spawn` runs git and streams its output, and `audit` is the log record of the outcome.

mod audit;
mod auth;
mod fetch;
mod listen;
mod push;
mod remote;
mod rewrite;
mod spawn;

use crate::argv::{self, Class, Refusal};
use crate::log::Log;
use crate::push::PushRules;
use crate::run::GitEnv;
use crate::visible::Visibility;
use airlock_wire::frame::write_frame;
use airlock_wire::invocation::PASSED_ENV;
use airlock_wire::{FrameKind, Invocation, Reason, Verifier};
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard};

use audit::decision;
use listen::{deny, peer_uid};
use rewrite::{bisect_helper, harden_args, needs_fresh_index};
use spawn::Job;

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

    fn connection(&self, mut stream: UnixStream) {
        let peer = peer_uid(&stream);
        let outcome = self.authenticate(&mut stream, peer);
        let inv = match outcome {
            Ok(inv) => inv,
            Err(r) => {
                // Unsigned, forged, replayed or over the rate: the agent can send these as
                // fast as it likes, so their lines are throttled.
                self.log.unauthenticated(&decision(peer, &[], Err(&r)));
                deny(&mut stream, &r);
                return;
            }
        };
        match self.execute(&mut stream, &inv) {
            Ok(code) => self.log.decision(&decision(peer, &inv.argv, Ok(code))),
            Err(r) => {
                self.log.decision(&decision(peer, &inv.argv, Err(&r)));
                deny(&mut stream, &r);
            }
        }
    }

    fn execute(&self, stream: &mut UnixStream, inv: &Invocation) -> Result<i32, Refusal> {
        for k in inv.env.keys() {
            if !PASSED_ENV.contains(&k.as_str()) {
                return Err(Refusal::new(
                    Reason::EnvNotAllowed,
                    format!("environment variable {k} is not passed to the git API"),
                ));
            }
        }
        if inv.env.values().any(|v| v.contains('\0')) || inv.argv.iter().any(|a| a.contains('\0')) {
            return Err(Refusal::new(
                Reason::MalformedRequest,
                "NUL byte in an argument",
            ));
        }
        let cwd = resolve_cwd(&self.env.work_tree, &inv.cwd)?;
        let checked = argv::check(&inv.argv).map_err(|r| not_installed(r, &inv.argv))?;
        if matches!(checked.subcommand.as_str(), "apply" | "am")
            && let Some(patch) = &inv.stdin
        {
            crate::patch::refuse_git_dir(&checked.subcommand, patch)?;
        }
        let edited;
        let inv = if checked.editor_true {
            // git's prepared message is accepted as is (the shim never passes GIT_EDITOR).
            let mut i = inv.clone();
            i.env.insert("GIT_EDITOR".into(), "true".into());
            edited = i;
            &edited
        } else {
            inv
        };
        let mut config = Vec::new();
        if inv.stdout_tty {
            config.push("color.ui=always".to_owned());
        }
        let mut args = checked.argv.clone();
        harden_args(&checked, &mut args);
        if checked.subcommand == "bisect" && self.bisect_is_script() {
            bisect_helper(&checked, &mut args);
        }
        if let Some(n) = &checked.notice {
            let _ = write_frame(stream, FrameKind::Stderr, n.as_bytes());
        }
        let mut job = Job {
            stream,
            inv,
            cwd: &cwd,
            config,
        };
        match checked.class {
            Class::Read => self.stream_git(&mut job, &args, true),
            Class::Write => {
                let _g = self.write_guard()?;
                if needs_fresh_index(&checked) {
                    // What the agent's last `git status` would have written natively (the
                    // git API's reads take no optional locks, so they never refresh it).
                    let _ = self.query(&["update-index", "-q", "--refresh"]);
                }
                self.stream_git(&mut job, &args, false)
            }
            Class::Fetch => {
                let _g = self.write_guard()?;
                self.fetch(&mut job, &checked)
            }
            Class::ListRemote => self.ls_remote(&mut job, &checked),
            Class::Push => {
                let _g = self.write_guard()?;
                let (args, transport) = self.resolve_push(&checked)?;
                job.config.extend(transport);
                self.stream_git(&mut job, &args, false)
            }
        }
    }

    /// The repository lock: held while a command writes the repository or the work tree.
    fn write_guard(&self) -> Result<MutexGuard<'_, ()>, Refusal> {
        self.write_lock
            .lock()
            .map_err(|_| Refusal::new(Reason::Internal, "lock poisoned"))
    }
}

/// Where git finds `git-<name>` commands (its exec path, then PATH).
const EXEC_DIRS: &[&str] = &[
    "/usr/lib/git-core",
    "/usr/libexec/git-core",
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
];

/// A refused subcommand that git does not know and no `git-<name>` provides is a missing
/// tool (`git lfs` without git-lfs), not a policy decision: say so.
fn not_installed(r: Refusal, argv: &[String]) -> Refusal {
    if r.reason != Reason::SubcommandNotAllowed {
        return r;
    }
    let Some(name) = argv::subcommand_name(argv) else {
        return r;
    };
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !plain
        || argv::known_subcommand(name)
        || EXEC_DIRS
            .iter()
            .any(|d| Path::new(d).join(format!("git-{name}")).exists())
    {
        return r;
    }
    Refusal::new(
        Reason::NotInstalled,
        format!(
            "git {name}: there is no git command {name} and git-{name} is not installed in the \
             sandbox, so there is nothing to run (aliases are not expanded: spell the command \
             out); this is not a policy refusal. If the work needs git-{name}, the operator \
             adds it to the image"
        ),
    )
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
