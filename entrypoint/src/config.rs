//! Command line and environment of the entrypoint. Every option has an `AIRLOCK_*` variable so
//! compose files and `docker run -e` can set it; defaults are the image's layout.

use airlock_channels as ch;
use airlock_control::env;
use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;

/// Where the image expects the repository's `.git` (a bind mount; the parent is
/// `root:airlock-git 0710` in the image): the contract's hidden git dir.
pub const DEFAULT_GIT_DIR: &str = airlock_control::paths::HIDDEN_GIT_DIR;

/// PID 1 of the airlock appliance: validate, start the proxy, apply the firewall, drop to the
/// agent user, self-test, then run COMMAND (default: the agent user's shell) and supervise.
#[derive(Debug, Parser)]
#[command(name = "airlock-entrypoint", version)]
pub struct Cli {
    /// Policy file (read-only mount).
    #[arg(long, env = env::POLICY, default_value = ch::DEFAULT_POLICY_PATH)]
    pub policy: PathBuf,
    /// Runtime directory for sockets and per-start state (tmpfs).
    #[arg(long, env = env::RUN_DIR, default_value = ch::RUN_DIR)]
    pub run_dir: PathBuf,
    /// Directory of the audit log (a volume; owned by the proxy user, unreadable by the agent).
    #[arg(long, env = env::AUDIT_DIR, default_value = ch::DEFAULT_AUDIT_DIR)]
    pub audit_dir: PathBuf,
    /// Bytes the proxy's audit log may take on the audit volume (the current file and its
    /// rotated ones together; default 256 MiB); the git API's log gets a quarter of it more.
    /// Keep it well under the volume's size: past the cap the oldest rotated file is
    /// deleted, while a full volume refuses every request.
    #[arg(long, env = env::AUDIT_CAP)]
    pub audit_cap: Option<u64>,
    /// The sandbox's name for this start (its branches are `sandbox/<name>/…`), instead of
    /// the policy's `[sandbox] name`: one policy file for many sandboxes.
    #[arg(long, env = env::SANDBOX)]
    pub sandbox: Option<String>,
    /// User that runs the agent.
    #[arg(long, env = env::AGENT_USER, default_value = ch::AGENT_USER)]
    pub agent_user: String,
    /// Uid (and gid) the agent runs as: `auto` (the owner of the workspace, so the user's
    /// files stay theirs; the image's agent user when the workspace is root's or absent),
    /// `image` (the agent user's own ids), `UID` or `UID:GID`.
    #[arg(long, env = env::AGENT_UID, default_value = "auto")]
    pub agent_uid: crate::identity::AgentIds,
    /// Proxy binary (default: `airlock-proxy` next to this executable).
    #[arg(long, env = "AIRLOCK_PROXY_BIN")]
    pub proxy_bin: Option<PathBuf>,
    /// Working directory of the agent (falls back to its home if absent).
    #[arg(long, env = env::WORKDIR, default_value = airlock_control::paths::WORKSPACE)]
    pub workdir: PathBuf,
    /// The workspace's real `.git`, mounted where the agent cannot reach it (see
    /// docs/docker.md); absent with no `.git` in the workspace = no git in the sandbox.
    #[arg(long, env = env::GIT_DIR, default_value = DEFAULT_GIT_DIR)]
    pub git_dir: PathBuf,
    /// Git API binary (default: `airlock-git-api` next to this executable).
    #[arg(long, env = "AIRLOCK_GIT_API_BIN")]
    pub git_api_bin: Option<PathBuf>,
    /// Operator CA certificate (PEM) the proxy intercepts with instead of generating one.
    #[arg(long, env = env::CA_CERT, requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The operator CA's private key (PEM; root-owned, not readable by the agent).
    #[arg(long, env = env::CA_KEY, requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Extra roots (PEM) the proxy trusts for upstream TLS: a test CA or a corporate
    /// TLS-inspecting CA. The agent never trusts them.
    #[arg(long, env = env::UPSTREAM_CA)]
    pub upstream_ca: Option<PathBuf>,
    /// The operator's extra CA (PEM certificates: a corporate TLS-inspecting proxy's root, a
    /// private mirror's CA): the proxy verifies upstreams with it, and the agent's CA bundle
    /// trusts it too, for the hosts it reaches through a tunnel (`network.passthrough`).
    /// Default: /etc/airlock/extra-ca.pem when that file exists.
    #[arg(long, env = env::EXTRA_CA)]
    pub extra_ca: Option<PathBuf>,
    /// Validate the policy and the environment, print the firewall that would be applied, exit.
    #[arg(long)]
    pub check: bool,
    /// Wait, holding no secret and starting nothing, until this file holds the claim that
    /// makes the start a session (a warm pod of a Kubernetes pool): the session id, session
    /// key, placeholders and CA are minted only then.
    #[arg(long, env = env::WAIT_FOR_CLAIM)]
    pub wait_for_claim: Option<PathBuf>,
    /// Say whether this container's start is ready, from the readiness record in its
    /// control directory and the proxy's admin status, and exit 0 if it is (1 if not yet,
    /// 78 if refused): a Kubernetes readiness probe. Starts nothing.
    #[arg(long, conflicts_with = "check")]
    pub ready: bool,
    /// The agent command and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}
