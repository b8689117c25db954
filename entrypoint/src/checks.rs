//! The checks before anything starts: each one that needs no process started, every problem
//! collected and refused at once (see `problems`), and what they produced when all passed.

use crate::agent_env::{self, AgentEnvInput};
use crate::config::Cli;
use crate::identity::{self, Users};
use crate::problems::{Knobs, Problems};
use crate::{credentials, effective, git, nested_repos, preflight, session, setup, trust};
use airlock_channels as ch;
use airlock_policy::Policy;
use anyhow::{Context, Result, anyhow};
use std::path::PathBuf;

/// What the checks before start-up produced, every one of them passed.
pub struct Checked {
    pub policy: Policy,
    pub users: Users,
    pub proxy_bin: PathBuf,
    pub git_plan: git::Decision,
    pub git_api_bin: Option<PathBuf>,
    pub session: session::Session,
    pub session_key: airlock_wire::SessionKey,
    pub creds: credentials::Resolved,
    pub operator_ca: trust::OperatorTrust,
    pub agent_env: agent_env::AgentEnv,
    /// Held until PID 1 exits: no second sandbox on this checkout meanwhile.
    pub workspace: setup::WorkspaceLock,
}

impl std::fmt::Debug for Checked {
    /// The identities and decisions only: never the credentials or the session key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("users", &self.users)
            .field("proxy_bin", &self.proxy_bin)
            .field("git_plan", &self.git_plan)
            .field("git_api_bin", &self.git_api_bin)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// Run every check that needs nothing started, collect every problem, and refuse with all of
/// them at once (see `problems`). Root comes first and alone: without it every other check
/// would fail for that one reason.
pub fn check_all(cli: &Cli) -> Result<Checked> {
    identity::require_root()?;
    let mut problems = Problems::default();
    let knobs = Knobs::from_env(|k| std::env::var(k).ok());
    let policy = problems.take(
        Policy::load(&cli.policy)
            .map_err(|e| anyhow!("invalid policy {}: {e}", knobs.policy_file(&cli.policy))),
    );
    problems.take(preflight::check(&preflight::Input {
        workspace: &cli.workdir,
        audit_dir: &cli.audit_dir,
        run_dir: &cli.run_dir,
        agent_user: &cli.agent_user,
    }));
    if let Some(name) = cli.sandbox.as_deref().filter(|n| !effective::valid_name(n)) {
        problems.push(&format!(
            "AIRLOCK_SANDBOX={name:?} is not a sandbox name: 1-40 characters of a-z, 0-9 and -, not starting or ending with -"
        ));
    }
    problems.take(setup::require_tools());
    let users = problems
        .take(Users::lookup(ch::PROXY_USER, ch::GIT_USER, &cli.agent_user))
        .and_then(|u| problems.take(agent_as_owner(u, cli)));
    if let Some(users) = &users {
        problems.take(setup::require_protected(&cli.policy, users, &knobs));
    }
    let workspace = problems.take(setup::claim_workspace(&cli.workdir, knobs.repo.as_deref()));
    let proxy_bin = problems.take(proxy_binary(cli));
    let git_plan = users
        .as_ref()
        .and_then(|u| problems.take(git::plan(&cli.workdir, &cli.git_dir, u)));
    let git_api_bin = match &git_plan {
        Some(git::Decision::Enabled) => problems
            .take(git::binary(cli.git_api_bin.as_deref()))
            .map(Some),
        _ => Some(None),
    };
    if let Some(git::Decision::Enabled) = &git_plan {
        problems.take(nested_repos::check(&cli.workdir));
    }
    let operator_ca = problems.take(trust::operator_trust(
        cli.ca_cert.as_deref(),
        cli.ca_key.as_deref(),
        cli.extra_ca.as_deref(),
        &knobs,
    ));
    let session = session::Session::new()?;
    let session_key = airlock_wire::SessionKey::generate()?;
    let (creds, agent_env) = match (&policy, &users) {
        (Some(policy), Some(users)) => agent_side(cli, policy, users, &session, &mut problems),
        _ => (None, None),
    };
    problems.finish()?;
    let (
        Some(policy),
        Some(users),
        Some(proxy_bin),
        Some(git_plan),
        Some(git_api_bin),
        Some(creds),
        Some(operator_ca),
        Some(agent_env),
        Some(workspace),
    ) = (
        policy,
        users,
        proxy_bin,
        git_plan,
        git_api_bin,
        creds,
        operator_ca,
        agent_env,
        workspace,
    )
    else {
        return Err(anyhow!("a start-up check failed without saying why"));
    };
    Ok(Checked {
        policy,
        users,
        proxy_bin,
        git_plan,
        git_api_bin,
        session,
        session_key,
        creds,
        operator_ca,
        agent_env,
        workspace,
    })
}

/// What the agent gets in place of the credentials: the policy's credentials resolved for
/// this session (real values for the proxy, placeholders for the agent) and the agent's
/// environment built around the placeholders. Problems go to `problems`.
fn agent_side(
    cli: &Cli,
    policy: &Policy,
    users: &Users,
    session: &session::Session,
    problems: &mut Problems,
) -> (Option<credentials::Resolved>, Option<agent_env::AgentEnv>) {
    let creds = problems.take(credentials::resolve(
        policy,
        &session.id,
        &users.agent,
        |k| std::env::var(k).ok(),
        session::nonce,
    ));
    let trust_vars = trust::agent_vars(
        &cli.run_dir.join(trust::BUNDLE_FILE),
        &cli.run_dir.join(trust::EMPTY_CA_DIR),
    );
    let agent_env = creds.as_ref().and_then(|creds| {
        problems.take(agent_env::build(
            std::env::vars(),
            &AgentEnvInput {
                agent: &users.agent,
                session: &session.id,
                proxy_url: &ch::proxy_url(),
                secret_names: &creds.secret_env_names,
                placeholders: &creds.agent_vars,
                trust: &trust_vars,
            },
        ))
    });
    (creds, agent_env)
}

/// The users with the agent's ids chosen by `--agent-uid` (default: the workspace owner's).
fn agent_as_owner(users: Users, cli: &Cli) -> Result<Users> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&cli.workdir)
        .ok()
        .map(|m| (m.uid(), m.gid()));
    let image = (users.agent.uid, users.agent.gid);
    let (uid, gid) = cli.agent_uid.resolve(image, owner);
    if (uid, gid) == image {
        return Ok(users);
    }
    users.with_agent_ids(uid, gid).with_context(|| {
        format!(
            "the workspace {} belongs to uid {uid} (gid {gid}), which airlock cannot run the agent as; set AIRLOCK_AGENT_UID=UID[:GID] (-e in AIRLOCK_DOCKER_ARGS)",
            cli.workdir.display()
        )
    })
}

fn proxy_binary(cli: &Cli) -> Result<PathBuf> {
    let bin = match &cli.proxy_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("cannot locate the entrypoint binary")?
            .with_file_name("airlock-proxy"),
    };
    if !bin.is_file() {
        return Err(anyhow!(
            "proxy binary {} not found: install airlock-proxy next to the entrypoint or set AIRLOCK_PROXY_BIN",
            bin.display()
        ));
    }
    Ok(bin)
}
