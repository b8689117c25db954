//! The git service (docs/design.md §5): the per-start session key, the hidden git dir, and the git
//! API started with its split identity.
//!
//! Layout (docs/docker.md): the repository's `.git` is bind-mounted at the hidden git dir
//! (`--git-dir`, default [`crate::config::DEFAULT_GIT_DIR`]) whose parent is
//! `root:airlock-git 0710`, and `<workspace>/.git` is covered by an empty read-only mount
//! (`--tmpfs /workspace/.git:ro`).
//! [`inspect`] reads what is there and [`decide`] (pure) turns it into one of:
//!
//! - **enabled**: the cover and the parent are as required and the repository belongs to the
//!   agent's uid; the git API runs ([`ApiSpec::start`]);
//! - **unavailable**: the workspace has no repository at all (no `.git`, nothing handed
//!   over); the agent's `git` says so in the workspace (`AIRLOCK_GIT_UNAVAILABLE`) and works
//!   natively elsewhere;
//! - **refused**: anything in between (a visible `.git`, a cover without a repository behind
//!   it, a repository without a cover, a `.git` file, a parent the agent can traverse or
//!   rename): the container stops with one line naming the missing mount.
//!
//! The session key ([`write_key`]) is written whether or not git runs: `git-credential-airlock`
//! derives the placeholder for plain git from it. It is identity, not authorization (the agent
//! reads it; every decision is made by the git API on what git would do).
//!
//! It does not decide what git may do (the git API does), holds no credential, and never
//! changes the modes of the operator's directories: it only checks them.

use crate::identity::{Identity, Users};
use crate::spawn::{RunAs, Session as TtySession};
use crate::status::{self, Expected};
use crate::trust;
use airlock_wire::SessionKey;
use anyhow::{Context, Result, anyhow, bail};
use nix::unistd::{Gid, Uid, chown};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The session key file inside the runtime directory (`root:<agent group> 0440`).
pub const KEY_FILE: &str = "session.key";
/// Directory of the git API's socket inside the runtime directory (`root:airlock-git 0771`:
/// the git API creates its socket there, the agent can only reach it by name).
pub const SOCKET_SUBDIR: &str = "git";
/// The git API's socket file name.
pub const SOCKET_FILE: &str = "git.sock";
/// The git API's private directory inside the runtime directory (`root:airlock-git 2770`:
/// the git API edits a copy of the agent's `~/.gitconfig` there for `git config --global`;
/// the agent cannot even reach it, so nothing there is a link it planted).
pub const SCRATCH_SUBDIR: &str = "git-scratch";
/// The git API's decision log inside the audit directory (one JSON line per request).
pub const LOG_FILE: &str = airlock_channels::GIT_LOG_FILE;
/// Where the git API's log rotates to (`git-api.jsonl.1`).
pub const LOG_PREVIOUS: &str = airlock_channels::GIT_LOG_PREVIOUS;

/// The real git (the shim's `AIRLOCK_REAL_GIT`, the git API's `--git`).
pub const REAL_GIT: &str = "/usr/bin/git";
/// How long the git API gets to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a path is, as root sees it (`lstat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub kind: Kind,
}

/// File type of a [`Meta`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

impl Meta {
    fn of(path: &Path) -> Option<Meta> {
        let m = std::fs::symlink_metadata(path).ok()?;
        let t = m.file_type();
        let kind = if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        Some(Meta {
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
            kind,
        })
    }

    /// Whether `uid`/`gid` may create, remove or rename entries in this directory.
    fn writable_by(&self, uid: u32, gid: u32) -> bool {
        self.uid == uid || (self.gid == gid && self.mode & 0o020 != 0) || self.mode & 0o002 != 0
    }
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone)]
pub struct Facts {
    pub workspace: PathBuf,
    pub git_dir: PathBuf,
    pub workspace_exists: bool,
    /// `<workspace>/.git`.
    pub cover: Option<Meta>,
    /// `<workspace>/.git` is a directory with no entries.
    pub cover_empty: bool,
    /// `Some(read_only)` when `<workspace>/.git` is a mount point.
    pub cover_mount: Option<bool>,
    /// The hidden git dir (following symlinks is never done: a symlink is not a git dir).
    pub hidden: Option<Meta>,
    /// It has a `HEAD` file and an `objects` directory.
    pub hidden_is_repo: bool,
    /// The hidden git dir's parent.
    pub parent: Option<Meta>,
    /// The parent's ancestors, nearest first.
    pub ancestors: Vec<(PathBuf, Meta)>,
}

/// The ids the layout is judged against.
#[derive(Debug, Clone, Copy)]
pub struct Ids {
    pub agent_uid: u32,
    pub agent_gid: u32,
    pub git_gid: u32,
}

/// What to do about git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start the git API on the hidden git dir.
    Enabled,
    /// No repository: the shim says why in the workspace.
    Unavailable(String),
}

/// Read the facts from the filesystem and `/proc/self/mountinfo`.
pub fn inspect(workspace: &Path, git_dir: &Path) -> Facts {
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let cover_path = workspace.join(".git");
    let cover = Meta::of(&cover_path);
    let cover_empty = cover.as_ref().is_some_and(|m| m.kind == Kind::Dir)
        && std::fs::read_dir(&cover_path).is_ok_and(|mut d| d.next().is_none());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| crate::procfs::parse_mountinfo(&t))
        .unwrap_or_default();
    let cover_mount = mounts
        .iter()
        .rev()
        .find(|m| m.point == cover_path)
        .map(|m| m.read_only);
    let hidden = Meta::of(git_dir);
    let hidden_is_repo = hidden.as_ref().is_some_and(|m| m.kind == Kind::Dir)
        && Meta::of(&git_dir.join("HEAD")).is_some_and(|m| m.kind == Kind::File)
        && Meta::of(&git_dir.join("objects")).is_some_and(|m| m.kind == Kind::Dir);
    let parent_path = git_dir.parent().unwrap_or(Path::new("/"));
    let parent = Meta::of(parent_path);
    let ancestors = parent_path
        .ancestors()
        .skip(1)
        .filter(|p| !p.as_os_str().is_empty())
        .filter_map(|p| Meta::of(p).map(|m| (p.to_path_buf(), m)))
        .collect();
    Facts {
        workspace_exists: workspace.is_dir(),
        workspace,
        git_dir: git_dir.to_path_buf(),
        cover,
        cover_empty,
        cover_mount,
        hidden,
        hidden_is_repo,
        parent,
        ancestors,
    }
}

/// The layout's verdict: enabled, unavailable, or the one-line refusal. Pure.
pub fn decide(f: &Facts, ids: Ids) -> Result<Decision, String> {
    let ws = f.workspace.display();
    let gd = f.git_dir.display();
    let cover_flag = format!("--tmpfs {ws}/.git:ro");
    let handover = format!("-v \"$PWD/.git:{gd}\"");
    if !f.workspace_exists {
        return Ok(Decision::Unavailable(format!(
            "there is no workspace at {ws}"
        )));
    }
    if let Some(c) = &f.cover
        && c.kind != Kind::Dir
    {
        return Err(format!(
            "{ws}/.git is not a directory (a git worktree or submodule checkout, or a link the agent controls): airlock needs a checkout whose .git is a directory, handed over with {handover} and hidden with {cover_flag} (docs/docker.md)"
        ));
    }
    if !f.hidden_is_repo {
        return match (&f.cover, f.cover_empty, f.cover_mount) {
            (None, ..) | (Some(_), true, None) => Ok(Decision::Unavailable(format!(
                "the workspace {ws} is not a git repository (start airlock on a git checkout to use git here)"
            ))),
            (Some(_), true, Some(_)) => Err(format!(
                "{ws}/.git is hidden but the git service has no repository at {gd}: add {handover} (docs/docker.md)"
            )),
            (Some(_), false, _) => Err(format!(
                "{ws}/.git is visible to the agent and the git service has no repository at {gd}: add {handover} {cover_flag} (docs/docker.md)"
            )),
        };
    }
    match (&f.cover, f.cover_mount) {
        (None, _) => {
            return Err(format!(
                "{ws}/.git does not exist, so the agent could create one in the checkout: add {cover_flag} (an empty read-only mount over it; docs/docker.md)"
            ));
        }
        (Some(_), None) => {
            return Err(format!(
                "{ws}/.git is visible to the agent (no mount covers it): add {cover_flag} (docs/docker.md)"
            ));
        }
        (Some(c), Some(read_only)) => {
            if !f.cover_empty {
                return Err(format!(
                    "the mount over {ws}/.git is not empty: cover it with an empty one, {cover_flag}"
                ));
            }
            if !read_only && c.writable_by(ids.agent_uid, ids.agent_gid) {
                return Err(format!(
                    "the mount over {ws}/.git is writable by the agent: make it read-only, {cover_flag}"
                ));
            }
        }
    }
    let parent_path = f.git_dir.parent().unwrap_or(Path::new("/")).display();
    let Some(p) = &f.parent else {
        return Err(format!("cannot stat {parent_path}"));
    };
    if p.kind != Kind::Dir || p.uid != 0 || p.gid != ids.git_gid || p.mode != 0o710 {
        return Err(format!(
            "{parent_path} must be root:airlock-git mode 0710 so that only the git service can traverse it (found {}:{} mode {:o}); the image has it, or fix it with chown root:airlock-git and chmod 0710",
            p.uid, p.gid, p.mode
        ));
    }
    for (path, m) in &f.ancestors {
        let sticky = m.mode & 0o1000 != 0 && m.uid != ids.agent_uid;
        if m.writable_by(ids.agent_uid, ids.agent_gid) && !sticky {
            return Err(format!(
                "{} is writable by the agent, which could swap {parent_path} for its own directory: put the git dir under root-owned directories",
                path.display()
            ));
        }
    }
    if let Some(h) = &f.hidden
        && h.uid != ids.agent_uid
    {
        return Err(format!(
            "the repository {gd} belongs to uid {}, but the agent (and the git service on its behalf) runs as uid {} (the workspace's owner, or AIRLOCK_AGENT_UID): give the checkout and its .git one owner (on the host: sudo chown -R \"$(id -u):$(id -g)\" REPO), or set AIRLOCK_AGENT_UID={}",
            h.uid, ids.agent_uid, h.uid
        ));
    }
    Ok(Decision::Enabled)
}

/// Inspect and judge the layout for this start (one line on refusal).
pub fn plan(workspace: &Path, git_dir: &Path, users: &Users) -> Result<Decision> {
    let ids = Ids {
        agent_uid: users.agent.uid,
        agent_gid: users.agent.gid,
        git_gid: users.git_gid,
    };
    decide(&inspect(workspace, git_dir), ids).map_err(|e| anyhow!("git: {e}"))
}

/// The git API binary: `configured`, else `airlock-git-api` next to the entrypoint.
pub fn binary(configured: Option<&Path>) -> Result<PathBuf> {
    let bin = match configured {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot locate the entrypoint binary")?
            .with_file_name("airlock-git-api"),
    };
    if !bin.is_file() {
        bail!(
            "git API binary {} not found: install airlock-git-api next to the entrypoint or set AIRLOCK_GIT_API_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

/// Generate the session key and write it to `<run_dir>/session.key`, `root:<agent gid>
/// 0440`: the agent's shims and the git API (effective gid the agent's) read it.
pub fn write_key(run_dir: &Path, agent: &Identity, key: &SessionKey) -> Result<PathBuf> {
    let path = run_dir.join(KEY_FILE);
    let tmp = run_dir.join(format!(".{KEY_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(format!("{}\n", key.to_hex()).as_bytes())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    chown(&tmp, Some(Uid::from_raw(0)), Some(Gid::from_raw(agent.gid)))
        .with_context(|| format!("cannot hand {} to the agent's group", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o440))
        .with_context(|| format!("cannot set the mode of {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot install {}", path.display()))?;
    Ok(path)
}

/// The agent's git variables (see `airlock_git_shim::env`). `socket` is `None` when git is
/// unavailable, and `why` then says why.
pub fn agent_vars(
    key_file: &Path,
    workspace: &Path,
    socket: Option<&Path>,
    why: Option<&str>,
) -> Vec<(String, String)> {
    agent_vars_from(key_file, workspace, socket, why, |k| std::env::var(k).ok())
}

/// [`agent_vars`] with the operator's commit identity read through `env`. Pure.
pub fn agent_vars_from(
    key_file: &Path,
    workspace: &Path,
    socket: Option<&Path>,
    why: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut v = vec![
        (
            "AIRLOCK_SESSION_KEY_FILE".to_owned(),
            key_file.display().to_string(),
        ),
        (
            "AIRLOCK_WORKSPACE".to_owned(),
            workspace.display().to_string(),
        ),
        ("AIRLOCK_REAL_GIT".to_owned(), REAL_GIT.to_owned()),
    ];
    if let Some(s) = socket {
        v.push(("AIRLOCK_GIT_SOCKET".to_owned(), s.display().to_string()));
    }
    if let Some(w) = why {
        v.push(("AIRLOCK_GIT_UNAVAILABLE".to_owned(), w.to_owned()));
    }
    // The operator's default commit identity, for the shim's native git outside the
    // workspace (the git API gets the same two variables).
    for var in ["AIRLOCK_GIT_USER_NAME", "AIRLOCK_GIT_USER_EMAIL"] {
        if let Some(value) = env(var) {
            v.push((var.to_owned(), value));
        }
    }
    v
}

/// Everything needed to (re)start the git API.
#[derive(Debug, Clone)]
pub struct ApiSpec {
    pub bin: PathBuf,
    pub socket: PathBuf,
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
    pub key_file: PathBuf,
    pub policy: PathBuf,
    /// The CA git trusts on the proxy's service port (where every connection is intercepted).
    pub ca_file: PathBuf,
    /// The empty CA directory git reads instead of the system's ([`trust::EMPTY_CA_DIR`],
    /// made by [`trust::empty_ca_dir`] before any process starts).
    pub ca_dir: PathBuf,
    pub run_as: RunAs,
    /// The airlock-git user's uid (the real uid).
    pub git_uid: u32,
    /// Its stderr: the decision log, opened once by PID 1 (the audit directory is closed to
    /// PID 1 after set-up), readable so that the git API can rotate it.
    pub log: Arc<File>,
    pub log_path: PathBuf,
    /// `git-api.jsonl.1`, what the log rotates into (inherited under its own number).
    pub previous_log: Arc<File>,
    /// Bytes both files may take together (a quarter of `AIRLOCK_AUDIT_CAP`).
    pub log_cap: u64,
    /// The branch checked out at this start, fixed for every restart (else the agent could
    /// check out another sandbox's branch, kill the git API and have it allowed).
    pub start_branch: Option<String>,
    /// This start's session id, on every line of the git API's log.
    pub session: String,
    /// The agent's home: its `.gitconfig` is git's global configuration in the workspace
    /// too (`--agent-home`).
    pub agent_home: PathBuf,
    /// The git API's private directory ([`SCRATCH_SUBDIR`], `--scratch-dir`).
    pub scratch_dir: PathBuf,
    /// The git service port's key ([`ApiSpec::with_service_key`]): handed to every start
    /// of the git API on a pipe ([`ApiSpec::spawn`]), never in a file, argv or environment.
    pub service_key: Option<airlock_ticket::ServiceKey>,
}

/// The four paths the git API is started on, by name (all of the same type, so never by
/// position).
#[derive(Debug, Clone)]
pub struct ApiPaths {
    /// The hidden git dir (`--git-dir`).
    pub git_dir: PathBuf,
    /// The workspace (`--work-tree`).
    pub work_tree: PathBuf,
    /// The session key file ([`KEY_FILE`] in the runtime directory).
    pub key_file: PathBuf,
    /// The effective policy.
    pub policy: PathBuf,
}

impl ApiSpec {
    /// The spec for this start; creates the socket directory and opens the log.
    pub fn new(
        bin: PathBuf,
        run_dir: &Path,
        audit_dir: &Path,
        users: &Users,
        paths: ApiPaths,
        session: &str,
        audit_cap: Option<u64>,
    ) -> Result<ApiSpec> {
        let git_uid = git_user_uid()?;
        let sock_dir = socket_dir(run_dir, users.git_gid)?;
        let scratch_dir = private_dir(&run_dir.join(SCRATCH_SUBDIR), users.git_gid)?;
        let log_path = audit_dir.join(LOG_FILE);
        let log = open_log(&log_path, true)?;
        let previous_log = open_log(&audit_dir.join(LOG_PREVIOUS), false)?;
        let agent = &users.agent;
        let ApiPaths {
            git_dir,
            work_tree,
            key_file,
            policy,
        } = paths;
        let start_branch = start_branch(&git_dir);
        Ok(ApiSpec {
            bin,
            socket: sock_dir.join(SOCKET_FILE),
            git_dir,
            work_tree,
            key_file,
            policy,
            ca_file: run_dir.join(
                Path::new(airlock_channels::CA_EXPORT_PATH)
                    .file_name()
                    .unwrap_or_default(),
            ),
            ca_dir: run_dir.join(trust::EMPTY_CA_DIR),
            run_as: RunAs {
                identity: Identity {
                    name: airlock_channels::GIT_USER.to_owned(),
                    uid: agent.uid,
                    gid: agent.gid,
                    groups: vec![users.git_gid],
                    home: PathBuf::from("/nonexistent"),
                    shell: PathBuf::from("/usr/sbin/nologin"),
                },
                filters: None,
                session: TtySession::Detached,
                real_uid: Some(git_uid),
            },
            git_uid,
            log: Arc::new(log),
            log_path,
            previous_log: Arc::new(previous_log),
            log_cap: airlock_channels::git_log_cap(
                audit_cap.unwrap_or(airlock_channels::DEFAULT_AUDIT_CAP),
            ),
            start_branch,
            session: session.to_owned(),
            agent_home: agent.home.clone(),
            scratch_dir,
            service_key: None,
        })
    }

    /// The same spec handing `key` (the git service port's) to the git API.
    #[must_use]
    pub fn with_service_key(mut self, key: airlock_ticket::ServiceKey) -> ApiSpec {
        self.service_key = Some(key);
        self
    }

    /// Spawn the git API, wait until it listens on its socket, and verify its identity from
    /// `/proc/<pid>/status`.
    pub fn start(&self) -> Result<Child> {
        let mut child = self.spawn()?;
        self.wait_ready(&mut child)?;
        Ok(child)
    }

    /// Spawn the git API without waiting: the first start waits with [`ApiSpec::wait_ready`]
    /// after the proxy and the firewall came up meanwhile.
    pub fn spawn(&self) -> Result<Child> {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_owned(), "/usr/bin:/bin".to_owned());
        // The operator's default commit identity (scripts/docker-run), read by the git API.
        for var in ["AIRLOCK_GIT_USER_NAME", "AIRLOCK_GIT_USER_EMAIL"] {
            if let Ok(v) = std::env::var(var) {
                env.insert(var.to_owned(), v);
            }
        }
        let stderr = self
            .log
            .try_clone()
            .context("cannot duplicate the git API's log")?;
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = self.run_as.command(&self.bin, &env, Path::new("/"));
        cmd.arg("--socket")
            .arg(&self.socket)
            .arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            .arg("--agent-uid")
            .arg(self.run_as.identity.uid.to_string())
            .arg("--key-file")
            .arg(&self.key_file)
            .arg("--policy")
            .arg(&self.policy)
            .arg("--ca-file")
            .arg(&self.ca_file)
            .arg("--ca-dir")
            .arg(&self.ca_dir)
            .arg("--git")
            .arg(REAL_GIT)
            .arg("--start-branch")
            .arg(self.start_branch.as_deref().unwrap_or(""))
            .arg("--session")
            .arg(&self.session)
            .arg("--previous-log-fd")
            .arg(self.previous_log.as_raw_fd().to_string())
            .arg("--log-cap")
            .arg(self.log_cap.to_string())
            .arg("--agent-home")
            .arg(&self.agent_home)
            .arg("--scratch-dir")
            .arg(&self.scratch_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr));
        let previous = self.previous_log.as_raw_fd();
        // The key on a pipe the git API reads once and closes: written whole before the
        // spawn (65 bytes, far below a pipe's buffer), our copy of the read end closed
        // right after it.
        let key_pipe = match &self.service_key {
            Some(key) => Some(key_pipe(key)?),
            None => None,
        };
        let key_fd = key_pipe.as_ref().map(AsRawFd::as_raw_fd);
        if let Some(fd) = key_fd {
            cmd.arg("--service-key-fd").arg(fd.to_string());
        }
        // SAFETY: runs in the child between fork and exec, after the privilege drop; it makes
        // async-signal-safe system calls on descriptors the child inherited.
        unsafe {
            cmd.pre_exec(move || {
                keep_across_exec(previous)?;
                key_fd.map_or(Ok(()), keep_across_exec)
            });
        }
        let child = cmd.spawn();
        drop(key_pipe);
        child.with_context(|| {
            format!(
                "cannot start the git API {} as {} (real) / uid {} (effective)",
                self.bin.display(),
                airlock_channels::GIT_USER,
                self.run_as.identity.uid
            )
        })
    }

    /// Wait until the spawned git API answers with the split identity; kill it when it does
    /// not.
    pub fn wait_ready(&self, child: &mut Child) -> Result<()> {
        let ready = self.check_ready(child);
        if ready.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        ready
    }

    fn check_ready(&self, child: &mut Child) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().context("waiting for the git API")? {
                bail!(
                    "the git API exited during start-up ({status}): {}",
                    last_line(&self.log_path)
                );
            }
            if probe(&self.socket) {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the git API did not answer on {} within {}s: {}",
                    self.socket.display(),
                    READY_TIMEOUT.as_secs(),
                    last_line(&self.log_path)
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let pid = child.id();
        let status_text = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("cannot read /proc/{pid}/status of the git API"))?;
        let id = &self.run_as.identity;
        status::verify(
            &status_text,
            &Expected {
                uid: id.uid,
                real_uid: self.git_uid,
                // Pinned by the git API before it listens: the agent cannot signal it.
                saved_uid: self.git_uid,
                gid: id.gid,
                groups: &id.groups,
                seccomp: false,
            },
        )
        .map_err(|m| anyhow!("the git API's identity is not the split one (real and saved uid airlock-git, effective the workspace owner): {m}"))?;
        // The kernel hands the files of /proc/<pid> (not the directory itself) of a process
        // that is not dumpable to root.
        let owner = std::fs::metadata(format!("/proc/{pid}/environ"))
            .with_context(|| format!("cannot stat /proc/{pid}/environ"))?
            .uid();
        if owner != 0 {
            bail!(
                "the git API (pid {pid}) is dumpable (/proc/{pid}/environ belongs to uid {owner}): the agent could inspect it"
            );
        }
        Ok(())
    }
}

/// The uid of the git user (the git API's real uid).
fn git_user_uid() -> Result<u32> {
    let git_user = nix::unistd::User::from_name(airlock_channels::GIT_USER)
        .context("cannot read the user database")?
        .with_context(|| {
            format!(
                "git user {:?} does not exist: create it in the image (see the Dockerfile)",
                airlock_channels::GIT_USER
            )
        })?;
    Ok(git_user.uid.as_raw())
}

/// The socket's directory, `root:<git gid> 0771`: the git API creates its socket there, the
/// agent can only reach it by name.
fn socket_dir(run_dir: &Path, git_gid: u32) -> Result<PathBuf> {
    let sock_dir = run_dir.join(SOCKET_SUBDIR);
    std::fs::create_dir_all(&sock_dir)
        .with_context(|| format!("cannot create {}", sock_dir.display()))?;
    chown(
        &sock_dir,
        Some(Uid::from_raw(0)),
        Some(Gid::from_raw(git_gid)),
    )
    .with_context(|| format!("cannot hand {} to the git group", sock_dir.display()))?;
    std::fs::set_permissions(&sock_dir, std::fs::Permissions::from_mode(0o771))
        .with_context(|| format!("cannot set the mode of {}", sock_dir.display()))?;
    Ok(sock_dir)
}

/// The git API's private directory, empty: `root:<git group> 2770`, so the git API (the git
/// group) creates files there and the agent (not in the group) cannot reach them; the
/// setgid bit gives them the git group, so git's own `access(2)` checks (made with the real
/// uid, `airlock-git`) pass too. Whatever a previous start left is removed (it is never a
/// link: the directory is made anew).
fn private_dir(dir: &Path, git_gid: u32) -> Result<PathBuf> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir),
        Ok(_) => std::fs::remove_file(dir),
        Err(_) => Ok(()),
    }
    .with_context(|| format!("cannot clear {}", dir.display()))?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    chown(dir, Some(Uid::from_raw(0)), Some(Gid::from_raw(git_gid)))
        .with_context(|| format!("cannot hand {} to the git group", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2770))
        .with_context(|| format!("cannot set the mode of {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// One of the git API's two log files (0600 when created, never through a link): `append`
/// for the current one, read-write without truncating for the one it rotates into.
fn open_log(path: &Path, append: bool) -> Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options
        .read(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    if append {
        options.append(true);
    } else {
        options.write(true).truncate(false);
    }
    options
        .open(path)
        .with_context(|| format!("cannot open the git API's log {}", path.display()))
}

/// A pipe holding `key` (64 hex digits and a newline), its write end closed: the read end,
/// close-on-exec (the git API's spawn keeps it across its own exec only).
fn key_pipe(key: &airlock_ticket::ServiceKey) -> Result<std::os::fd::OwnedFd> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .context("cannot make the pipe that hands the git API its service key")?;
    File::from(write)
        .write_all(format!("{}\n", key.to_hex()).as_bytes())
        .context("cannot write the git API's service key into its pipe")?;
    Ok(read)
}

/// The branch the sandbox starts on: what the hidden git dir's `HEAD` names (`None`:
/// detached or unreadable). Read once per start: the git API and the proxy get the same.
#[must_use]
pub fn start_branch(git_dir: &Path) -> Option<String> {
    std::fs::read_to_string(git_dir.join("HEAD"))
        .ok()
        .and_then(|h| head_branch(&h))
}

/// In a child before `exec`: keep `fd` open across `exec` under its own number (never
/// `dup2` onto a fixed one, which could be the descriptor `std` reports exec errors on).
pub(crate) fn keep_across_exec(fd: i32) -> std::io::Result<()> {
    // SAFETY: F_SETFD with 0 only clears close-on-exec on a descriptor this process holds.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the git API listens on its socket yet, read from the kernel's list of listening
/// sockets. PID 1 never connects: the git API serves only the agent and would log PID 1's
/// connection as a `peer_not_agent` denial at every start. Who listens is proved by the
/// identity check that follows (`/proc/<pid>/status`), and nobody else can bind in the
/// socket directory before the agent starts (`root:airlock-git 0771`).
fn probe(socket: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    listening(&table, socket)
}

/// Whether `/proc/net/unix` lists a listening socket (`__SO_ACCEPTCON`) bound to `path`.
fn listening(table: &str, path: &Path) -> bool {
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8 && f[3] == "00010000" && Path::new(f[7]) == path
    })
}

/// The branch `HEAD` names (`ref: refs/heads/<branch>`), or `None` when detached.
#[must_use]
pub fn head_branch(head: &str) -> Option<String> {
    head.trim()
        .strip_prefix("ref: refs/heads/")
        .filter(|b| !b.is_empty())
        .map(str::to_owned)
}

fn last_line(path: &Path) -> String {
    let mut text = String::new();
    let _ = File::open(path).and_then(|mut f| f.read_to_string(&mut text));
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map_or_else(
            || format!("see {}", path.display()),
            |l| l.trim().to_owned(),
        )
}

/// Kills the git API if set-up fails after it started.
#[derive(Debug)]
pub struct ApiGuard(pub Option<Child>);

impl Drop for ApiGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: Ids = Ids {
        agent_uid: 1000,
        agent_gid: 1000,
        git_gid: 998,
    };

    fn dir(uid: u32, gid: u32, mode: u32) -> Meta {
        Meta {
            uid,
            gid,
            mode,
            kind: Kind::Dir,
        }
    }

    /// The documented layout: enabled.
    fn good() -> Facts {
        Facts {
            workspace: "/workspace".into(),
            git_dir: crate::config::DEFAULT_GIT_DIR.into(),
            workspace_exists: true,
            cover: Some(dir(0, 0, 0o755)),
            cover_empty: true,
            cover_mount: Some(true),
            hidden: Some(dir(1000, 1000, 0o755)),
            hidden_is_repo: true,
            parent: Some(dir(0, 998, 0o710)),
            ancestors: vec![
                ("/var/lib/airlock".into(), dir(0, 0, 0o755)),
                ("/var/lib".into(), dir(0, 0, 0o755)),
                ("/var".into(), dir(0, 0, 0o755)),
                ("/".into(), dir(0, 0, 0o755)),
            ],
        }
    }

    fn refused(f: &Facts) -> String {
        decide(f, IDS).unwrap_err()
    }

    #[test]
    fn the_documented_layout_enables_git() {
        assert_eq!(decide(&good(), IDS), Ok(Decision::Enabled));
    }

    #[test]
    fn no_repository_at_all_means_unavailable() {
        let mut f = good();
        f.hidden = None;
        f.hidden_is_repo = false;
        f.cover = None;
        f.cover_mount = None;
        assert!(
            matches!(decide(&f, IDS), Ok(Decision::Unavailable(w)) if w.contains("not a git repository"))
        );
        f.workspace_exists = false;
        assert!(matches!(decide(&f, IDS), Ok(Decision::Unavailable(_))));
    }

    #[test]
    fn a_visible_git_dir_without_the_hand_over_is_refused() {
        let mut f = good();
        f.hidden_is_repo = false;
        f.cover_empty = false;
        f.cover_mount = None;
        let e = refused(&f);
        assert!(
            e.contains("visible to the agent") && e.contains("-v \"$PWD/.git:"),
            "{e}"
        );
        // A cover without a repository behind it: the hand-over was forgotten.
        let mut f = good();
        f.hidden_is_repo = false;
        assert!(refused(&f).contains("has no repository"));
    }

    #[test]
    fn a_repository_without_a_cover_is_refused_naming_the_tmpfs() {
        let mut f = good();
        f.cover_mount = None;
        assert!(refused(&f).contains("--tmpfs /workspace/.git:ro"));
        f.cover = None;
        assert!(refused(&f).contains("could create one"));
        let mut f = good();
        f.cover_empty = false;
        assert!(refused(&f).contains("not empty"));
        let mut f = good();
        f.cover_mount = Some(false);
        f.cover = Some(dir(0, 0, 0o1777));
        assert!(refused(&f).contains("writable by the agent"));
        // A writable mount the agent cannot write (root-owned 0755) is fine.
        f.cover = Some(dir(0, 0, 0o755));
        assert_eq!(decide(&f, IDS), Ok(Decision::Enabled));
    }

    #[test]
    fn a_git_file_or_link_is_refused() {
        for kind in [Kind::File, Kind::Symlink] {
            let mut f = good();
            f.cover = Some(Meta {
                kind,
                ..dir(1000, 1000, 0o644)
            });
            assert!(refused(&f).contains("not a directory"));
            f.hidden_is_repo = false;
            assert!(refused(&f).contains("not a directory"));
        }
    }

    #[test]
    fn the_parent_must_be_root_git_0710_and_its_ancestors_safe() {
        for p in [
            dir(0, 998, 0o711),
            dir(0, 998, 0o750),
            dir(0, 0, 0o710),
            dir(1000, 998, 0o710),
            dir(0, 998, 0o770),
        ] {
            let mut f = good();
            f.parent = Some(p.clone());
            assert!(refused(&f).contains("must be root:airlock-git"), "{p:?}");
        }
        let mut f = good();
        f.ancestors[1] = ("/var/lib".into(), dir(1000, 1000, 0o755));
        assert!(refused(&f).contains("/var/lib is writable by the agent"));
        // /tmp-like sticky directories cannot be used to rename others' entries.
        f.ancestors[1] = ("/tmp".into(), dir(0, 0, 0o1777));
        assert_eq!(decide(&f, IDS), Ok(Decision::Enabled));
    }

    #[test]
    fn a_repository_of_another_uid_is_refused() {
        let mut f = good();
        f.hidden = Some(dir(1001, 1001, 0o755));
        assert!(refused(&f).contains("belongs to uid 1001"));
    }

    #[test]
    fn the_start_branch_comes_from_head_and_detached_is_none() {
        assert_eq!(
            head_branch("ref: refs/heads/main\n").as_deref(),
            Some("main")
        );
        assert_eq!(
            head_branch("ref: refs/heads/sandbox/demo/x").as_deref(),
            Some("sandbox/demo/x")
        );
        assert_eq!(
            head_branch("4b825dc642cb6eb9a060e54bf8d69288fbee4904\n"),
            None
        );
        assert_eq!(head_branch("ref: refs/heads/\n"), None);
    }

    #[test]
    fn a_listening_socket_is_found_by_path() {
        let t = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                 0000000031ab535d: 00000002 00000000 00010000 0001 01  3730 /run/airlock/git/git.sock\n\
                 0000000031ab535e: 00000002 00000000 00000000 0001 03  3731 /run/x.sock\n";
        assert!(listening(t, Path::new("/run/airlock/git/git.sock")));
        assert!(!listening(t, Path::new("/run/x.sock")));
        assert!(!listening(t, Path::new("/run/airlock/git")));
    }

    #[test]
    fn agent_vars_name_the_socket_or_say_why_not() {
        let v = agent_vars(
            Path::new("/run/airlock/session.key"),
            Path::new("/workspace"),
            Some(Path::new("/run/airlock/git/git.sock")),
            None,
        );
        assert!(v.iter().any(|(k, _)| k == "AIRLOCK_GIT_SOCKET"));
        assert!(!v.iter().any(|(k, _)| k == "AIRLOCK_GIT_UNAVAILABLE"));
        let v = agent_vars(Path::new("/k"), Path::new("/w"), None, Some("not a repo"));
        assert!(!v.iter().any(|(k, _)| k == "AIRLOCK_GIT_SOCKET"));
        assert!(v.contains(&(
            "AIRLOCK_GIT_UNAVAILABLE".to_owned(),
            "not a repo".to_owned()
        )));
    }
}
