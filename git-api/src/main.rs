//! `airlock-git-api`: the git API server binary. See the crate docs of `airlock_git_api`.
//!
//! Started by the entrypoint with real uid `airlock-git`, effective uid = the workspace
//! owner, groups = [airlock-git]; its first act makes the saved uid `airlock-git` too, so the
//! agent (same effective uid) cannot signal it ([`pin_saved_uid`]):
//!
//! ```text
//! airlock-git-api --socket /run/airlock/git/git.sock --git-dir <hidden>/.git \
//!     --work-tree /workspace --agent-uid 1000 --key-file <session key file> \
//!     --policy /etc/airlock/policy.toml --ca-file <proxy CA> --start-branch <branch or ""> \
//!     [--session <session id>] [--service-key-fd N] \
//!     [--agent-home /home/agent --scratch-dir /run/airlock/git-scratch]
//! ```
//!
//! `--service-key-fd` names an inherited pipe holding the git service port's key (64 hex
//! digits): read once, closed, then only in this process's memory ([`read_service_key`]).
//!
//! Its stderr is its log (`git-api.jsonl`): JSON lines only ([`airlock_git_api::log`]). With
//! `--previous-log-fd N --log-cap BYTES` (the entrypoint passes both) it rotates into the
//! inherited `git-api.jsonl.1` within the cap.

use airlock_audit_schema::GitApiEvent;
use airlock_git_api::global::AgentHome;
use airlock_git_api::identity::DefaultIdentity;
use airlock_git_api::log::{Log, Rotating};
use airlock_git_api::push::PushRules;
use airlock_git_api::run::GitEnv;
use airlock_git_api::server::Server;
use airlock_git_api::visible::Visibility;
use airlock_wire::{SessionKey, Verifier};
use anyhow::{Context, Result, bail};
use clap::Parser;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;

/// Runs git on the agent's behalf under airlock's policy.
#[derive(Debug, Parser)]
#[command(name = "airlock-git-api", version)]
struct Cli {
    /// Unix socket to listen on (replaced if it exists).
    #[arg(long, default_value = airlock_channels::GIT_SOCKET)]
    socket: PathBuf,
    /// The hidden git dir.
    #[arg(long)]
    git_dir: PathBuf,
    /// The workspace (work tree).
    #[arg(long, default_value = "/workspace")]
    work_tree: PathBuf,
    /// The only uid allowed to connect (SO_PEERCRED).
    #[arg(long)]
    agent_uid: u32,
    /// File holding the session key (64 hex digits).
    #[arg(long)]
    key_file: PathBuf,
    /// The policy file (`[sandbox]` name and `[git]`).
    #[arg(long, default_value = airlock_channels::DEFAULT_POLICY_PATH)]
    policy: PathBuf,
    /// CA bundle git trusts for the proxy's interception on the service port.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// An empty directory git reads as its CA directory instead of the system's (root-owned:
    /// nothing the agent could add a root to).
    #[arg(long)]
    ca_dir: Option<PathBuf>,
    /// The real git.
    #[arg(long, default_value = "/usr/bin/git")]
    git: PathBuf,
    /// HOME for git (should be empty; it is never written).
    #[arg(long, default_value = "/nonexistent")]
    home: PathBuf,
    /// The agent's home: its `.gitconfig`, kept to the keys the agent may write, is git's
    /// global configuration in the workspace too, and `git config --global` there writes it.
    /// Without it git in the workspace reads no global configuration.
    #[arg(long)]
    agent_home: Option<PathBuf>,
    /// A directory only the git API reaches (root:airlock-git 2770): `git config --global`
    /// edits a copy of the agent's `.gitconfig` there. Without it those writes are refused.
    #[arg(long)]
    scratch_dir: Option<PathBuf>,
    /// The branch the sandbox started on (pushable); default: the checked-out branch. An
    /// empty value means none (the sandbox started detached): the entrypoint fixes it for
    /// every restart, so that the agent cannot choose it by checking out and killing us.
    #[arg(long)]
    start_branch: Option<String>,
    /// Concurrent connections at most.
    #[arg(long, default_value_t = 16)]
    max_connections: usize,
    /// The per-start session id, carried on every log record (`session`).
    #[arg(long)]
    session: Option<String>,
    /// The operator's name: the default commit identity (the repository's and the agent's
    /// own `user.name` win). scripts/docker-run passes the host user's.
    #[arg(long, env = "AIRLOCK_GIT_USER_NAME")]
    default_name: Option<String>,
    /// The operator's email: the default commit identity, as `--default-name`.
    #[arg(long, env = "AIRLOCK_GIT_USER_EMAIL")]
    default_email: Option<String>,
    /// An inherited descriptor of `git-api.jsonl.1`, readable and writable: with it the log
    /// (stderr, then readable too) rotates into it within `--log-cap`. Without it the log is
    /// stderr as it is.
    #[arg(long)]
    previous_log_fd: Option<i32>,
    /// An inherited descriptor (a pipe) holding the git service port's key, 64 hex digits:
    /// read to its end and closed at start. Without it, network git commands carry no
    /// ticket and the proxy refuses them.
    #[arg(long)]
    service_key_fd: Option<i32>,
    /// Bytes both log files may take together (with `--previous-log-fd`).
    #[arg(long, default_value_t = airlock_channels::git_log_cap(airlock_channels::DEFAULT_AUDIT_CAP))]
    log_cap: u64,
    /// TEST ONLY, absent from release builds: `host/owner/repo=/path/to/bare.git` serves
    /// that repository from a local bare repository (file://, otherwise refused).
    #[cfg(debug_assertions)]
    #[arg(long, hide = true)]
    test_upstream: Vec<String>,
}

fn main() {
    // stderr is the decision log (`git-api.jsonl`): even a usage error, a fatal error or a
    // panic is one JSON record there, never a plain-text line.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            fatal(&Log::stderr(None), &e.render().to_string(), 2);
        }
        // --help and --version, on stdout.
        Err(e) => e.exit(),
    };
    let log = match cli.previous_log_fd {
        None => Log::stderr(cli.session.clone()),
        Some(fd) => match rotating_log(fd, cli.log_cap) {
            Ok(sink) => Log::to(cli.session.clone(), Box::new(sink)),
            Err(e) => fatal(
                &Log::stderr(cli.session.clone()),
                &format!("{e:#}"),
                EXIT_REFUSED,
            ),
        },
    };
    let log = Arc::new(log);
    let hook_log = Arc::clone(&log);
    std::panic::set_hook(Box::new(move |info| {
        hook_log.write(GitApiEvent::Panic {
            message: info.to_string(),
            truncated: false,
        });
    }));
    if let Err(e) = run(cli, &log) {
        fatal(&log, &format!("{e:#}"), EXIT_REFUSED);
    }
}

/// The log sink over stderr (`git-api.jsonl`) and the inherited `fd` (`git-api.jsonl.1`).
fn rotating_log(fd: i32, cap: u64) -> Result<Rotating> {
    use std::os::fd::AsFd;
    let previous = std::fs::File::from(inherited(fd, "--previous-log-fd")?);
    let kind = previous
        .metadata()
        .with_context(|| format!("--previous-log-fd {fd}"))?
        .file_type();
    if !kind.is_file() {
        bail!("--previous-log-fd {fd} is not a regular file");
    }
    let current = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating stderr (the log)")?;
    Rotating::new(std::fs::File::from(current), previous, cap).context("reading the log's size")
}

/// Takes ownership of the descriptor `fd` the entrypoint handed down (named `flag`), marked
/// close-on-exec: no git this process starts inherits it (a program git runs could write
/// the log's previous file, or read the service key's pipe).
fn inherited(fd: i32, flag: &str) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd <= 2 {
        bail!("{flag} {fd} is a standard descriptor");
    }
    nix::fcntl::fcntl(
        // SAFETY: borrowed only for this call; F_GETFD reads the flags of whatever `fd` is
        // and fails with EBADF when it is not open.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_GETFD,
    )
    .with_context(|| format!("{flag} {fd} is not an open descriptor"))?;
    // SAFETY: `fd` is open (checked above) and was handed to this process by the entrypoint
    // for this use alone; nothing else in the process owns or closes it.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .with_context(|| format!("{flag} {fd}: setting close-on-exec"))?;
    Ok(owned)
}

/// The git service port's key from the pipe `fd` (64 hex digits and a newline), read to
/// its end; the pipe is closed when this returns.
fn read_service_key(fd: i32) -> Result<airlock_ticket::ServiceKey> {
    use std::io::Read;
    let pipe = std::fs::File::from(inherited(fd, "--service-key-fd")?);
    let mut text = String::new();
    pipe.take(128)
        .read_to_string(&mut text)
        .with_context(|| format!("--service-key-fd {fd}: reading the service key"))?;
    airlock_ticket::ServiceKey::from_hex(&text, "--service-key-fd").map_err(Into::into)
}

/// Make the saved uid the real one (`airlock-git`) before anything else runs.
///
/// The entrypoint starts us with real uid `airlock-git` and effective uid the workspace
/// owner's (the agent's), and `execve` sets the saved uid to the effective one. `kill(2)`
/// (and `pidfd_send_signal`, `SIGIO` owners, `prlimit`) let a sender through when its real or
/// effective uid equals the target's *real or saved* uid, never its effective one: with both
/// `airlock-git`, the agent cannot signal us. The effective uid (files in the workspace and
/// the hidden git dir stay the owner's, as do those git creates) is unchanged, and so are our
/// git children's (`execve` gives them the saved uid = effective again: they are the agent's
/// own requests). Without a split identity (tests running us directly) this changes nothing.
/// The entrypoint checks the result in `/proc/<pid>/status` before the agent starts.
fn pin_saved_uid() -> Result<()> {
    use nix::unistd::{getresuid, setresuid};
    let ids = getresuid().context("reading our uids")?;
    if ids.saved != ids.real {
        setresuid(ids.real, ids.effective, ids.real)
            .context("setting the saved uid to the real one (airlock-git)")?;
        let now = getresuid().context("reading our uids")?;
        if now.saved != ids.real || now.effective != ids.effective {
            bail!(
                "the saved uid is {} after setting it to {}",
                now.saved,
                ids.real
            );
        }
    }
    Ok(())
}

/// A refused start (`airlock_channels::EXIT_REFUSED`).
const EXIT_REFUSED: i32 = airlock_channels::EXIT_REFUSED as i32;

fn fatal(log: &Log, message: &str, code: i32) -> ! {
    log.write(GitApiEvent::Fatal {
        message: message.to_owned(),
        truncated: false,
    });
    std::process::exit(code);
}

fn run(cli: Cli, log: &Log) -> Result<()> {
    pin_saved_uid()?;
    // Not dumpable: the agent (same effective uid) may not ptrace us or read our /proc.
    nix::sys::prctl::set_dumpable(false).context("making the process non-dumpable")?;
    let policy = airlock_policy::Policy::load(&cli.policy)
        .with_context(|| format!("loading policy {}", cli.policy.display()))?;
    let key = SessionKey::read_file(&cli.key_file).context("reading the session key")?;
    let service_key = cli.service_key_fd.map(read_service_key).transpose()?;
    let work_tree = cli
        .work_tree
        .canonicalize()
        .with_context(|| format!("work tree {}", cli.work_tree.display()))?;
    #[cfg(debug_assertions)]
    let test_upstreams = cli
        .test_upstream
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(id, p)| (id.to_owned(), PathBuf::from(p)))
                .with_context(|| format!("--test-upstream {s}: want host/owner/repo=/path"))
        })
        .collect::<Result<Vec<_>>>()?;
    #[cfg(not(debug_assertions))]
    let test_upstreams = Vec::new();
    // Lives as long as the server: its descriptor is the layer every git child reads.
    let identity = DefaultIdentity::new(cli.default_name.as_deref(), cli.default_email.as_deref())
        .map_err(|e| anyhow::anyhow!("the default commit identity: {e}"))?;
    let env = GitEnv {
        git: cli.git.clone(),
        git_dir: cli.git_dir.clone(),
        work_tree,
        home: cli.home.clone(),
        proxy_url: format!(
            "http://{}:{}",
            airlock_channels::LOOPBACK,
            airlock_channels::GIT_SERVICE_PORT
        ),
        ca_file: cli.ca_file.clone(),
        ca_dir: cli.ca_dir.clone(),
        test_upstreams,
        system_config: identity.as_ref().map(DefaultIdentity::path),
    };
    let start_branch = match cli.start_branch.clone() {
        Some(b) if b.is_empty() => None,
        Some(b) => Some(b),
        None => env
            .query(&["symbolic-ref", "-q", "--short", "HEAD"])
            .context("reading the start branch")?
            .line(),
    };
    if !env
        .query(&["rev-parse", "--git-dir"])
        .context("running git")?
        .ok
    {
        bail!("{} is not a git dir git can open", cli.git_dir.display());
    }
    let rules = PushRules::new(&policy.git, start_branch.as_deref())
        .context("compiling the [git] globs")?;
    let vis = Visibility::new(&policy.git, &policy.sandbox.name, start_branch.as_deref())
        .context("compiling the [git] globs")?;
    if cli.socket.exists() {
        std::fs::remove_file(&cli.socket)
            .with_context(|| format!("removing stale {}", cli.socket.display()))?;
    }
    let listener = UnixListener::bind(&cli.socket)
        .with_context(|| format!("binding {}", cli.socket.display()))?;
    std::fs::set_permissions(&cli.socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", cli.socket.display()))?;
    let verifier = Verifier::new(key);
    log.write(GitApiEvent::Start {
        agent_uid: cli.agent_uid,
        default_identity: identity.is_some(),
        max_connections: cli.max_connections,
        rate_burst: verifier.rate().burst,
        rate_per_second: verifier.rate().per_second,
        socket: cli.socket.display().to_string(),
        start_branch: start_branch.clone(),
        truncated: false,
    });
    let mut server = Server::new(
        env,
        cli.agent_uid,
        rules,
        vis,
        verifier,
        cli.max_connections,
    )
    .with_log(log.share());
    if let Some(k) = service_key {
        server = server.with_service_key(k);
    }
    server = server.with_network(policy);
    if let Some(dir) = cli.agent_home.clone() {
        let mut home = AgentHome::new(dir, cli.agent_uid, cli.git.clone());
        if let Some(scratch) = cli.scratch_dir.clone() {
            home = home.with_scratch(scratch);
        }
        server = server.with_agent_home(home);
    }
    let server = Arc::new(server);
    // The operator's clone may hold other sandboxes' branches as remote-tracking refs.
    server
        .hide_existing()
        .map_err(|r| anyhow::anyhow!("hiding other sandboxes' branches: {}", r.message))?;
    server.serve(&listener).context("accepting connections")
}
