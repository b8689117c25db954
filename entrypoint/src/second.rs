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
//! Before it drops to the session, still root and still holding the lock, it tells the
//! proxy that session `k` begins ([`announce`]: `POST /v1/sessions/begin` on the admin
//! socket, which only root may call). A number is reused once its session has ended, and
//! the proxy's answers to the ended session (its pending items, its `once` and `session`
//! approvals, its denials) are that session's alone: the proxy drops them before it answers,
//! so the new session inherits none of them. If the proxy cannot be told, the session does
//! not start (one line: what failed and what to do).
//!
//! PID 1 saves what the drop needs ([`save`]: `agent.json` in the runtime directory, root's
//! 0600: the agent cannot read or change it; it holds placeholders, never a real secret) and
//! this mode reads it back ([`main`]). It `exec`s in place: the session is the `docker exec`
//! process itself, so the terminal, signals and exit status are docker's as usual.

use crate::agent_env::SESSION_VAR;
use crate::identity::Identity;
use crate::spawn::{RunAs, Session as TtySession};
use airlock_channels::{MAX_SESSIONS, session_gid};
use airlock_control::admin::{BeginSessionRequest, Request, Response, SessionBegun};
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
use std::time::Duration;

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
    /// What a session needs of `agent`, started in `cwd` with `env`.
    fn of(agent: &Identity, cwd: &Path, env: &BTreeMap<String, String>) -> Saved {
        Saved {
            name: agent.name.clone(),
            uid: agent.uid,
            gid: agent.gid,
            groups: agent.groups.clone(),
            home: agent.home.clone(),
            shell: agent.shell.clone(),
            cwd: cwd.to_path_buf(),
            env: env.clone(),
        }
    }

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
    let saved = Saved::of(agent, cwd, env);
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

/// How long a starting session waits for the proxy to take its begin.
const BEGIN_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest answer to a begin read.
const ANSWER_LIMIT: u64 = 64 << 10;

/// `POST /v1/sessions/begin` for session `k`, as sent on the admin socket: one request,
/// `Connection: close`, its JSON body with its length. Pure.
///
/// # Errors
/// None in practice: the protocol has a route for every begin.
pub fn begin_request(k: u16) -> Result<Vec<u8>, String> {
    let http = Request::BeginSession(BeginSessionRequest { session: k })
        .to_http()
        .ok_or("the admin protocol has no route for a session's begin")?;
    let body = http.body.unwrap_or_default();
    let mut bytes = format!(
        "{} {} HTTP/1.1\r\nHost: airlock-session\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        http.method.as_str(),
        http.target,
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// What the proxy's whole `answer` to [`begin_request`] of session `k` says: the session
/// began, or why not (the proxy's own message when it refused). Pure.
///
/// # Errors
/// One line: the refusal, or what is wrong with the answer.
pub fn begun(answer: &[u8], k: u16) -> Result<SessionBegun, String> {
    let crate::http_answer::Answer { status, body } =
        crate::http_answer::parse(answer).map_err(|e| match e {
            crate::http_answer::Unread::Incomplete => {
                "the proxy's answer broke off (is it restarting?)".to_owned()
            }
            crate::http_answer::Unread::NotHttp(e) => {
                format!("the proxy's answer is not HTTP: {e}")
            }
            crate::http_answer::Unread::NoLength => "the proxy's answer has no length".to_owned(),
        })?;
    match serde_json::from_slice::<Response>(body) {
        Ok(Response::SessionBegun(b)) if status == 200 && b.session == k => Ok(b),
        Ok(Response::Error(e)) => Err(format!(
            "the proxy refused it (HTTP {status}): {}",
            e.message
        )),
        Ok(other) => Err(format!(
            "the proxy answered something else than session {k}'s begin (HTTP {status}): {other:?}"
        )),
        Err(e) => Err(format!(
            "the proxy's answer (HTTP {status}) does not read: {e}"
        )),
    }
}

/// Tells the proxy, on the admin socket at `socket`, that session `k` begins, waiting at
/// most `timeout` for each step; returns once the proxy has dropped what the ended session
/// that had `k` kept, and answered.
///
/// # Errors
/// One line: what failed and what to do (the sandbox is not started, its proxy is
/// restarting, or the proxy refused).
pub fn announce(socket: &Path, k: u16, timeout: Duration) -> Result<SessionBegun, String> {
    use std::io::Read as _;
    let request = begin_request(k)?;
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach the proxy's admin socket {}: {e}: is the sandbox started?",
            socket.display()
        )
    })?;
    let slow = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            format!(
                "the proxy did not answer within {} ms: it may be restarting; try again in a few seconds",
                timeout.as_millis()
            )
        } else {
            format!(
                "the admin socket {} failed: {e}; try again",
                socket.display()
            )
        }
    };
    (stream.set_read_timeout(Some(timeout)))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(slow)?;
    stream.write_all(&request).map_err(slow)?;
    let mut answer = Vec::new();
    (stream.take(ANSWER_LIMIT))
        .read_to_end(&mut answer)
        .map_err(slow)?;
    begun(&answer, k)
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
    // Still root, still holding the lock: the proxy forgets the ended session that had the
    // number before, or this one does not start.
    let socket = airlock_control::paths::control_dir(&run_dir).join(airlock_control::admin::SOCKET);
    announce(&socket, k, BEGIN_TIMEOUT)
        .map_err(|why| anyhow::anyhow!("session {k} did not start: {why}"))?;
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
        let saved = Saved::of(&agent, Path::new("/workspace"), &env);
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

    /// An answer as the proxy writes it: `status`, JSON `body` with its length.
    fn answer(status: u16, body: &Response) -> Vec<u8> {
        let body = serde_json::to_vec(body).unwrap();
        let mut a = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        a.extend_from_slice(&body);
        a
    }

    fn session_begun(k: u16) -> SessionBegun {
        SessionBegun {
            session: k,
            started_at_ms: 1_795_853_212_004,
            dropped_pending: 1,
            dropped_approvals: 2,
            dropped_denials: 0,
        }
    }

    #[test]
    fn the_begin_is_one_request_the_admin_api_routes_to_the_sessions_begin() {
        let bytes = begin_request(7).unwrap();
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut req = httparse::Request::new(&mut headers);
        let start = match req.parse(&bytes).unwrap() {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("partial"),
        };
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| std::str::from_utf8(h.value).unwrap().to_owned())
        };
        let body = &bytes[start..];
        assert_eq!(header("content-length"), Some(body.len().to_string()));
        assert_eq!(header("connection").as_deref(), Some("close"));
        assert_eq!(
            Request::from_http(req.method.unwrap(), req.path.unwrap(), body),
            Ok(Request::BeginSession(BeginSessionRequest { session: 7 }))
        );
    }

    #[test]
    fn only_the_proxys_begin_of_this_very_session_lets_it_start() {
        let error = |code, message: &str| {
            Response::Error(airlock_control::admin::ErrorBody {
                code,
                message: message.into(),
            })
        };
        assert_eq!(
            begun(&answer(200, &Response::SessionBegun(session_begun(3))), 3),
            Ok(session_begun(3))
        );
        // Another session's begin, or another answer, is no begin of this one.
        let e = begun(&answer(200, &Response::SessionBegun(session_begun(4))), 3).unwrap_err();
        assert!(e.contains("something else than session 3's begin"), "{e}");
        assert!(begun(&answer(200, &Response::Sessions(Default::default())), 3).is_err());
        // The proxy's refusal, in its words.
        let forbidden = airlock_control::admin::ErrorCode::Forbidden;
        let e = begun(
            &answer(403, &error(forbidden, "uid 1000 may not begin a session")),
            3,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "the proxy refused it (HTTP 403): uid 1000 may not begin a session"
        );
        // An older proxy, without the operation: refused too (no session it cannot tell apart).
        let not_found = airlock_control::admin::ErrorCode::NotFound;
        assert!(
            begun(
                &answer(404, &error(not_found, "no operation at /v1/sessions/begin")),
                3
            )
            .is_err()
        );
        // Broken answers.
        let whole = answer(200, &Response::SessionBegun(session_begun(3)));
        for cut in [0, 10, whole.len() - 1] {
            let e = begun(&whole[..cut], 3).unwrap_err();
            assert!(e.contains("broke off"), "{cut}: {e}");
        }
        assert!(
            begun(b"SSH-2.0-x\r\n\r\n", 3)
                .unwrap_err()
                .contains("not HTTP")
        );
        assert!(
            begun(b"HTTP/1.1 200 OK\r\n\r\n{}", 3)
                .unwrap_err()
                .contains("no length")
        );
        assert!(
            begun(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", 3)
                .unwrap_err()
                .contains("does not read")
        );
    }

    /// The two ways a session finds the proxy unreachable, as they happen: no socket (the
    /// sandbox is not started), and a socket nobody accepts on (PID 1 holds the listener
    /// while its proxy restarts). Both fail, saying what to do, within the timeout.
    #[test]
    fn a_session_the_proxy_cannot_be_told_of_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(airlock_control::admin::SOCKET);
        let e = announce(&socket, 2, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("is the sandbox started?"), "{e}");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let started = std::time::Instant::now();
        let e = announce(&socket, 2, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("did not answer within 200 ms"), "{e}");
        assert!(e.contains("try again"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(listener);
        // An answer that breaks off (the proxy went away mid-answer).
        let socket = dir.path().join("restarted.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            use std::io::Read as _;
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = vec![0u8; begin_request(2).unwrap().len()];
            conn.read_exact(&mut request).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 90\r\n\r\n{\"kind\"")
                .unwrap();
        });
        let e = announce(&socket, 2, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("broke off"), "{e}");
        server.join().unwrap();
    }

    /// The whole exchange on a socket: the request read whole by the other end, the answer
    /// read to its end (`Connection: close`) and checked.
    #[test]
    fn a_begin_the_proxy_takes_lets_the_session_start() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(airlock_control::admin::SOCKET);
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            use std::io::Read as _;
            let (mut conn, _) = listener.accept().unwrap();
            let want = begin_request(9).unwrap();
            let mut got = vec![0u8; want.len()];
            conn.read_exact(&mut got).unwrap();
            conn.write_all(&answer(200, &Response::SessionBegun(session_begun(9))))
                .unwrap();
            got == want
        });
        assert_eq!(
            announce(&socket, 9, Duration::from_secs(5)),
            Ok(session_begun(9))
        );
        assert!(server.join().unwrap(), "the request arrived as sent");
    }
}
