//! A second confined session: `docker exec -it NAME airlock-entrypoint __session [-- CMD]`
//! (or `airlock-session [-- CMD]` where the image links that name to the entrypoint).
//!
//! Plain `docker exec NAME bash` is root with the container's capabilities (`NET_ADMIN`
//! included: it can flush the firewall), and `docker exec -u <agent>` has neither the proxy
//! settings nor the shims' variables. This mode turns the exec'd process into the agent the
//! way PID 1 made the first one: empty capability sets, `no_new_privs`, airlock's seccomp
//! filter, all verified from `/proc/self/status` before `exec`, and the same environment
//! (proxy, CA, session, shims, placeholders), in the workspace.
//!
//! Each session has a number (PID 1's agent is session 1) and an identity of its own: the
//! agent's uid (the files it makes are the workspace owner's, usable by every session), but
//! its own gid, [`airlock_channels::session_gid`] (`SESSION_GID_BASE + k`), as real,
//! effective and saved gid, with the agent's gid kept as a supplementary group (the agent's
//! group access to files). A session's gids differ from every other session's, so the kernel
//! lets none of them ptrace another, open its `/proc/<pid>/mem` or take its descriptors; and
//! the firewall rewrites the source of its connections to the proxy to
//! [`airlock_channels::session_addr`] by that gid, so the proxy audits each session's traffic
//! as that session's (`127.77.0.k`), not as one anonymous agent. The number is in the
//! session's environment as `AIRLOCK_AGENT_SESSION` ([`crate::agent_env::SESSION_VAR`]).
//!
//! The number is the lowest of `2..=MAX_SESSIONS` whose gid no live process holds
//! ([`free_session`], from a scan of `/proc/*/status`), taken under an exclusive lock on
//! `sessions.lock` in the runtime directory (root's, 0600) so that two sessions starting at
//! once never take the same one; a number is free again once the last process of its
//! session has exited.
//!
//! PID 1 saves what the drop needs ([`save`]: `agent.json` in the runtime directory, root's
//! 0600: the agent cannot read or change it; it holds placeholders, never a real secret) and
//! this mode reads it back ([`main`]). It `exec`s in place: the session is the `docker exec`
//! process itself, so the terminal, signals and exit status are docker's as usual.

use crate::agent_env::SESSION_VAR;
use crate::identity::Identity;
use crate::spawn::{RunAs, Session as TtySession};
use airlock_channels::{MAX_SESSIONS, session_gid};
use anyhow::{Context, Result, bail};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The program name that selects this mode (a link to the entrypoint: `airlock-session`).
pub const PROGRAM: &str = "airlock-session";
/// Hidden first argument of this mode.
pub const ARG: &str = "__session";
/// The saved agent inside the runtime directory.
pub const FILE: &str = "agent.json";
/// The lock a starting session holds while it takes its number, inside the runtime
/// directory (root's, 0600: the agent can neither open it nor hold it to block sessions).
pub const LOCK_FILE: &str = "sessions.lock";

/// What PID 1 knew about the agent when it started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: PathBuf,
    pub shell: PathBuf,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

impl Saved {
    fn identity(&self) -> Identity {
        Identity {
            name: self.name.clone(),
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            home: self.home.clone(),
            shell: self.shell.clone(),
        }
    }
}

/// Save the agent for later sessions: `<run_dir>/agent.json`, root's, 0600.
pub fn save(
    run_dir: &Path,
    agent: &Identity,
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> Result<()> {
    let saved = Saved {
        name: agent.name.clone(),
        uid: agent.uid,
        gid: agent.gid,
        groups: agent.groups.clone(),
        home: agent.home.clone(),
        shell: agent.shell.clone(),
        cwd: cwd.to_path_buf(),
        env: env.clone(),
    };
    let json = serde_json::to_vec(&saved).context("cannot encode the agent for sessions")?;
    let path = run_dir.join(FILE);
    let tmp = run_dir.join(format!(".{FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(&json)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot install {}", path.display()))
}

/// The command to run: what follows `--` (or the arguments as they are), else the agent's
/// shell. Pure.
pub fn command_of(args: &[OsString], shell: &Path) -> Vec<OsString> {
    let args = match args.first() {
        Some(first) if first == "--" => &args[1..],
        _ => args,
    };
    if args.is_empty() {
        vec![shell.as_os_str().to_owned()]
    } else {
        args.to_vec()
    }
}

/// The number a new second session takes, given every gid a live process holds: the lowest
/// of `2..=MAX_SESSIONS` whose gid is not among them; `None` when all are taken. Pure.
pub fn free_session(in_use: &BTreeSet<u32>, agent_gid: u32) -> Option<u16> {
    (2..=MAX_SESSIONS).find(|&k| !in_use.contains(&session_gid(k, agent_gid)))
}

/// The refusal when every second session's number is taken.
fn all_taken() -> String {
    format!(
        "all {} second sessions are in use: end one (exit its shell) or restart the sandbox",
        MAX_SESSIONS - 1
    )
}

/// Every gid (real, effective, saved or filesystem) a process under `proc` holds, read from
/// each `<proc>/<pid>/status`. A process that exits during the scan is skipped; any other
/// failure to read one fails the scan (a number must never be handed out twice).
pub fn gids_in_use(proc: &Path) -> Result<BTreeSet<u32>> {
    let mut in_use = BTreeSet::new();
    let entries =
        std::fs::read_dir(proc).with_context(|| format!("cannot list {}", proc.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", proc.display()))?;
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            continue;
        }
        let path = entry.path().join("status");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            // Gone between the listing and the read: it holds no gid any more.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let gids = crate::status::gids(&text)
            .with_context(|| format!("{} has no Gid: line of four gids", path.display()))?;
        in_use.extend(gids);
    }
    Ok(in_use)
}

/// The sessions' lock (`<run_dir>/sessions.lock`, created root's 0600), held exclusively.
/// Opened close-on-exec (std always sets `O_CLOEXEC`) and without following a link.
fn lock(run_dir: &Path) -> Result<Flock<std::fs::File>> {
    use std::os::unix::fs::MetadataExt;
    let path = run_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .with_context(|| format!("cannot open the sessions' lock {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        bail!(
            "the sessions' lock {} is not root's 0600 (owner {}, mode {:o}): restart the sandbox",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| errno)
        .with_context(|| format!("cannot lock {}", path.display()))
}

/// The identity and environment of session `k` of the saved agent. Pure.
pub fn session_of(saved: &Saved, k: u16) -> (Identity, BTreeMap<String, String>) {
    let mut env = saved.env.clone();
    env.insert(SESSION_VAR.to_owned(), k.to_string());
    (saved.identity().for_session(k), env)
}

/// Take the lowest free session number, become that session of the agent and `exec` the
/// command; returns only on failure.
pub fn main(args: &[OsString]) -> Result<()> {
    crate::identity::require_root().context(
        "a session starts as root (docker exec's default user) and drops to the agent itself",
    )?;
    let run_dir = std::env::var_os("AIRLOCK_RUN_DIR")
        .map_or_else(|| PathBuf::from(airlock_channels::RUN_DIR), PathBuf::from);
    let path = run_dir.join(FILE);
    let text = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {}: is airlock running in this container (a session needs a started appliance)?",
            path.display()
        )
    })?;
    let saved: Saved = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a saved agent", path.display()))?;
    let command = command_of(args, &saved.shell);
    let Some((program, rest)) = command.split_first() else {
        bail!("no command");
    };
    let filters = Arc::new(crate::seccomp::agent_filters()?);
    // The lock stays held (this binding open) from the scan until `exec`: the drop to the
    // session's gid happens in between (in `exec`'s pre-exec step, in this very process),
    // so a concurrent start that scans after it got the lock sees this process holding the
    // number. The descriptor is close-on-exec: `execve` releases the lock once the drop is
    // done and this process already shows its new gid, and the session's program never
    // holds it. Closing it any earlier would let two starts take the same number.
    let lock = lock(&run_dir)?;
    let in_use = gids_in_use(Path::new("/proc"))?;
    let Some(k) = free_session(&in_use, saved.gid) else {
        bail!("{}", all_taken());
    };
    let (identity, env) = session_of(&saved, k);
    let run_as = RunAs {
        identity,
        filters: Some(filters),
        // docker exec made this process a session leader: it keeps its group and terminal.
        session: TtySession::Inherit,
        real_uid: None,
    };
    let err = run_as
        .command(Path::new(program), &env, &saved.cwd)
        .args(rest)
        .exec();
    drop(lock);
    Err(err).with_context(|| format!("cannot start {program:?} as {} (session {k})", saved.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_what_follows_the_dashes_or_the_shell() {
        let sh = Path::new("/bin/bash");
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(command_of(&[], sh), os(&["/bin/bash"]));
        assert_eq!(command_of(&os(&["--"]), sh), os(&["/bin/bash"]));
        assert_eq!(command_of(&os(&["--", "ls", "-l"]), sh), os(&["ls", "-l"]));
        assert_eq!(command_of(&os(&["ls"]), sh), os(&["ls"]));
    }

    #[test]
    fn a_session_takes_the_lowest_number_no_live_process_holds() {
        use airlock_channels::SESSION_GID_BASE;
        let gids = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
        // Nobody in a session: the first second session is 2 (1 is PID 1's agent).
        assert_eq!(free_session(&gids(&[0, 1000, 101]), 1000), Some(2));
        // 2 and 4 live: the lowest free one is 3, a gap left by a session that ended.
        let live = gids(&[0, 1000, SESSION_GID_BASE + 2, SESSION_GID_BASE + 4]);
        assert_eq!(free_session(&live, 1000), Some(3));
        // The agent's own gid never blocks a number, nor do gids outside the range.
        assert_eq!(
            free_session(&gids(&[SESSION_GID_BASE + 1, SESSION_GID_BASE + 65]), 1000),
            Some(2)
        );
        // Every one of 2..=MAX_SESSIONS taken: none left, and the refusal says what to do.
        let full: BTreeSet<u32> = (2..=MAX_SESSIONS).map(|k| session_gid(k, 1000)).collect();
        assert_eq!(free_session(&full, 1000), None);
        let mut one_gone = full.clone();
        one_gone.remove(&session_gid(MAX_SESSIONS, 1000));
        assert_eq!(free_session(&one_gone, 1000), Some(MAX_SESSIONS));
        assert_eq!(
            all_taken(),
            "all 63 second sessions are in use: end one (exit its shell) or restart the sandbox"
        );
    }

    #[test]
    fn the_scan_reads_every_gid_of_every_process_and_skips_one_that_vanished() {
        let proc = tempfile::tempdir().unwrap();
        let status = |pid: &str, gid: &str| {
            let dir = proc.path().join(pid);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(
                dir.join("status"),
                format!("Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t{gid}\nGroups:\t1000\n"),
            )
            .unwrap();
        };
        status("1", "0\t0\t0\t0");
        status("42", "1000\t1000\t1000\t1000");
        // Any of the four fields counts.
        status("43", "1000\t1000\t61003\t1000");
        status("44", "61002\t61002\t61002\t61002");
        // A process that exited between the listing and the read, and what is not a pid.
        std::fs::create_dir(proc.path().join("45")).unwrap();
        std::fs::create_dir(proc.path().join("self")).unwrap();
        std::fs::write(proc.path().join("uptime"), "1 1").unwrap();
        let in_use = gids_in_use(proc.path()).unwrap();
        assert_eq!(
            in_use.into_iter().collect::<Vec<_>>(),
            vec![0, 1000, 61_002, 61_003]
        );
        // A status without its Gid: line fails the scan rather than freeing a number.
        status("46", "1000");
        assert!(gids_in_use(proc.path()).is_err());
    }

    #[test]
    fn session_k_is_the_agent_with_its_own_gid_and_number() {
        let agent = Identity::test_agent();
        let env = BTreeMap::from([(SESSION_VAR.to_owned(), "1".to_owned())]);
        let saved = Saved {
            name: agent.name.clone(),
            uid: agent.uid,
            gid: agent.gid,
            groups: agent.groups.clone(),
            home: agent.home.clone(),
            shell: agent.shell.clone(),
            cwd: "/workspace".into(),
            env,
        };
        let (id, env) = session_of(&saved, 5);
        assert_eq!(
            (id.uid, id.gid, id.groups),
            (1000, session_gid(5, 1000), vec![1000, session_gid(5, 1000)])
        );
        assert_eq!(env[SESSION_VAR], "5");
        let (first, env) = session_of(&saved, 1);
        assert_eq!((first.gid, first.groups), (1000, vec![1000]));
        assert_eq!(env[SESSION_VAR], "1");
    }

    #[test]
    fn the_sessions_lock_is_created_root_only_and_taken_once_at_a_time() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::Uid::effective().is_root() {
            return; // the lock refuses a file that is not root's
        }
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        let meta = std::fs::metadata(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // A second open file description cannot take it while the first holds it.
        let other = std::fs::File::open(dir.path().join(LOCK_FILE)).unwrap();
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_err());
        drop(held);
        let other = std::fs::File::open(dir.path().join(LOCK_FILE)).unwrap();
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_ok());
        // A lock file someone loosened is refused.
        std::fs::set_permissions(
            dir.path().join(LOCK_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(lock(dir.path()).unwrap_err().to_string().contains("0600"));
    }

    #[test]
    fn the_saved_agent_is_root_only_and_reads_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let agent = Identity::test_agent();
        let env = BTreeMap::from([("HTTP_PROXY".to_owned(), "http://127.0.0.1:3128".to_owned())]);
        save(dir.path(), &agent, Path::new("/workspace"), &env).unwrap();
        let meta = std::fs::metadata(dir.path().join(FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let saved: Saved =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(saved.identity().uid, 1000);
        assert_eq!(saved.env, env);
        assert_eq!(saved.cwd, Path::new("/workspace"));
    }
}
