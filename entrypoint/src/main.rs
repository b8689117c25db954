//! `airlock-entrypoint`: PID 1 of the airlock appliance.
//!
//! One job: bring the container from "root with NET_ADMIN" to "the agent runs behind a
//! verified firewall with no privileges", in the order of design §3, and then stay as a small
//! supervisor. Validate the policy and environment → per-start session → scrub credentials
//! from what the agent inherits → start the proxy as its user and wait until it answers →
//! apply the firewall atomically (IPv4 and IPv6) → drop to the agent user (caps, groups,
//! uids, `no_new_privs`, seccomp, verified from `/proc/self/status`) → self-test as the agent
//! → run the agent command → reap, forward signals, keep the proxy alive, let it flush on exit.
//!
//! It does not proxy, filter or decide anything itself, holds no credentials after set-up,
//! and never touches the network except for the self-test's probes (sent as the agent).
//! Every failed step stops the container with one line: what failed and how to fix it.

mod agent_env;
mod config;
mod console;
mod credentials;
mod effective;
mod git;
mod identity;
mod netinfo;
mod preflight;
mod problems;
mod proxy_ctl;
mod proxy_state;
mod seccomp;
mod second;
mod selftest;
mod session;
mod setup;
mod spawn;
mod status;
mod supervise;
mod sys;
mod trust;
mod workspace_secrets;

use crate::agent_env::AgentEnvInput;
use crate::config::Cli;
use crate::identity::Users;
use crate::problems::{Knobs, Problems};
use crate::proxy_ctl::ProxySpec;
use crate::spawn::{RunAs, Session as TtySession};
use airlock_channels as ch;
use airlock_policy::Policy;
use anyhow::{Context, Result, anyhow};
use clap::Parser;
use nix::unistd::Pid;
use std::ffi::{OsStr, OsString};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// Hidden first argument: run the self-test probes (as the agent, spawned by ourselves).
const SELF_TEST_ARG: &str = "__self-test";
/// Exit status when the container refuses to start.
const EXIT_REFUSED: u8 = airlock_channels::EXIT_REFUSED;

fn main() -> ExitCode {
    if std::env::args_os().nth(1).as_deref() == Some(OsStr::new(SELF_TEST_ARG)) {
        return self_test_main();
    }
    let argv0 = std::env::args_os().next().map(PathBuf::from);
    let as_session = argv0
        .as_deref()
        .and_then(Path::file_name)
        .is_some_and(|n| n == second::PROGRAM);
    if as_session || std::env::args_os().nth(1).as_deref() == Some(OsStr::new(second::ARG)) {
        let skip = if as_session { 1 } else { 2 };
        let args: Vec<OsString> = std::env::args_os().skip(skip).collect();
        let err = second::main(&args).err();
        eprintln!(
            "airlock: {:#}",
            err.unwrap_or_else(|| anyhow!("the session did not start"))
        );
        return ExitCode::from(EXIT_REFUSED);
    }
    let cli = Cli::parse();
    match start(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            match err.downcast_ref::<problems::Refused>() {
                Some(problems::Refused(lines)) => lines.iter().for_each(|l| console::fatal(l)),
                None => console::fatal(&format!("{err:#}")),
            }
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

/// Kills the proxy if set-up fails after it started, so nothing outlives a refused start.
struct ProxyGuard(Option<Child>);

impl Drop for ProxyGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the checks before start-up produced, every one of them passed.
struct Checked {
    policy: Policy,
    users: Users,
    proxy_bin: PathBuf,
    git_plan: git::Decision,
    git_api_bin: Option<PathBuf>,
    session: session::Session,
    session_key: airlock_wire::SessionKey,
    creds: credentials::Resolved,
    operator_ca: trust::OperatorTrust,
    agent_env: agent_env::AgentEnv,
    /// Held until PID 1 exits: no second sandbox on this checkout meanwhile.
    workspace: setup::WorkspaceLock,
}

/// Run every check that needs nothing started, collect every problem, and refuse with all of
/// them at once (see `problems`). Root comes first and alone: without it every other check
/// would fail for that one reason.
fn check_all(cli: &Cli) -> Result<Checked> {
    identity::require_root()?;
    let mut problems = Problems::default();
    let knobs = Knobs::from_env(|k| std::env::var(k).ok());
    let policy = problems.take(
        Policy::load(&cli.policy)
            .map_err(|e| anyhow!("invalid policy {}: {e}", knobs.policy_file(&cli.policy))),
    );
    problems.take(preflight::check(cli));
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
    let operator_ca = problems.take(trust::operator_trust(
        cli.ca_cert.as_deref(),
        cli.ca_key.as_deref(),
        cli.extra_ca.as_deref(),
        &knobs,
    ));
    let session = session::Session::new()?;
    let session_key = airlock_wire::SessionKey::generate()?;
    let creds = match (&policy, &users) {
        (Some(policy), Some(users)) => problems.take(credentials::resolve(
            policy,
            &session.id,
            &users.agent,
            |k| std::env::var(k).ok(),
            session::nonce,
        )),
        _ => None,
    };
    let trust_vars = trust::agent_vars(&cli.run_dir.join(trust::BUNDLE_FILE));
    let agent_env = match (&users, &creds) {
        (Some(users), Some(creds)) => problems.take(agent_env::build(
            std::env::vars(),
            &AgentEnvInput {
                agent: &users.agent,
                session: &session.id,
                proxy_url: &ch::proxy_url(),
                secret_names: &creds.secret_env_names,
                placeholders: &creds.agent_vars,
                trust: &trust_vars,
            },
        )),
        _ => None,
    };
    problems.finish()?;
    match (
        policy,
        users,
        proxy_bin,
        git_plan,
        git_api_bin,
        creds,
        operator_ca,
        agent_env,
        workspace,
    ) {
        (
            Some(policy),
            Some(users),
            Some(proxy_bin),
            Some(git_plan),
            Some(git_api_bin),
            Some(creds),
            Some(operator_ca),
            Some(agent_env),
            Some(workspace),
        ) => Ok(Checked {
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
        }),
        _ => Err(anyhow!("a start-up check failed without saying why")),
    }
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

/// `--check`: validate the policy and say so.
fn check_only(cli: &Cli) -> Result<i32> {
    let policy = Policy::load(&cli.policy).map_err(|e| anyhow!("invalid policy: {e}"))?;
    println!(
        "policy {} is valid (sandbox {:?})",
        cli.policy.display(),
        policy.sandbox.name
    );
    Ok(0)
}

/// One warning per forced variable: the agent can read it and send it anywhere allowed.
fn warn_forced(forced: &[String]) {
    for name in forced {
        eprintln!(
            "airlock: warning: {} hands {name} to the agent as it is: the agent can read it and send it to any host the policy allows",
            agent_env::FORCE_VAR
        );
    }
}

/// The one ready line, with the time each start-up step took.
fn ready_line(session_id: &str, t0: Instant, steps: [std::time::Duration; 4]) -> String {
    let [validate, proxy, firewall, selftest] = steps;
    format!(
        "session {session_id} ready in {} ms (validate {} ms, proxy {} ms, firewall {} ms, self-test {} ms)",
        t0.elapsed().as_millis(),
        validate.as_millis(),
        (proxy - validate).as_millis(),
        (firewall - proxy).as_millis(),
        (selftest - firewall).as_millis(),
    )
}

/// The policy the proxy and the git API read: the operator's, with the sandbox name and
/// (when the policy lists no repository) the workspace's origin filled in.
fn effective_policy(
    cli: &Cli,
    policy: &Policy,
    git_plan: &git::Decision,
) -> Result<std::path::PathBuf> {
    let overrides = effective::Overrides {
        name: cli.sandbox.clone(),
        origin: match git_plan {
            git::Decision::Enabled => effective::workspace_origin(&cli.git_dir),
            git::Decision::Unavailable(_) => None,
        },
    };
    effective::install(&cli.policy, &cli.run_dir, policy, &overrides)
}

fn start(cli: Cli) -> Result<i32> {
    let t0 = Instant::now();
    if cli.check {
        return check_only(&cli);
    }
    let Checked {
        policy,
        users,
        proxy_bin,
        git_plan,
        git_api_bin,
        session,
        session_key,
        mut creds,
        operator_ca,
        agent_env:
            agent_env::AgentEnv {
                vars: mut agent_env,
                forced,
            },
        workspace: _workspace,
    } = check_all(&cli)?;
    setup::give_home(&users.agent)?;
    creds.handoff.git_placeholder = Some(airlock_wire::placeholder::placeholder(
        &session_key,
        &session.id,
    ));
    warn_forced(&forced);
    credentials::warn_missing(&creds);
    let key_file = cli.run_dir.join(git::KEY_FILE);
    let git_socket = cli.run_dir.join(git::SOCKET_SUBDIR).join(git::SOCKET_FILE);
    agent_env.extend(git::agent_vars(
        &key_file,
        &cli.workdir,
        git_api_bin.as_ref().map(|_| git_socket.as_path()),
        match &git_plan {
            git::Decision::Unavailable(why) => Some(why.as_str()),
            git::Decision::Enabled => None,
        },
    ));
    let state_dir = cli.run_dir.join(ch::PROXY_STATE_SUBDIR);
    creds.handoff.workspace_secrets = workspace_secrets::at_start(&cli.workdir, &cli.run_dir);
    credentials::write_handoff(&state_dir, &creds.handoff, &users.proxy)?;
    drop(creds);
    let upstream_ca = trust::install_proxy_files(
        &state_dir,
        &users.proxy,
        &users.agent,
        &operator_ca,
        cli.upstream_ca.as_deref(),
    )?;
    let audit_file = setup::prepare_dirs(&cli, &users)?;
    let policy_file = effective_policy(&cli, &policy, &git_plan)?;
    let route = console::Route::detect();
    console::open(&route, &cli.audit_dir)?;
    git::write_key(&cli.run_dir, &users.agent, &session_key)?;
    let git_spec = match git_api_bin {
        Some(bin) => Some(git::ApiSpec::new(
            bin,
            &cli.run_dir,
            &cli.audit_dir,
            &users,
            (&cli.git_dir, &cli.workdir, &key_file, &policy_file),
            &session.id,
            cli.audit_cap,
        )?),
        None => None,
    };
    let t_validate = t0.elapsed();

    supervise::block_signals()?;
    let proxy_spec = ProxySpec {
        bin: proxy_bin,
        policy: policy_file.clone(),
        audit_file,
        session: session.id.clone(),
        state_dir,
        ca_export: trust::prepare_export_dir(&cli.run_dir, &users.proxy)?,
        upstream_ca,
        audit_cap: cli.audit_cap,
        container: proxy_ctl::own_container(),
        log_filter: route.proxy_filter.clone(),
        run_as: RunAs::detached(users.proxy.clone()),
    };
    let mut proxy = ProxyGuard(Some(proxy_spec.start()?));
    trust::write_bundle(
        &cli.run_dir,
        &proxy_spec.ca_export,
        operator_ca.extra.as_ref(),
    )?;
    // The git API after the proxy (its pushes go through the service port), before the firewall.
    let mut git_api = git::ApiGuard(git_spec.as_ref().map(git::ApiSpec::start).transpose()?);
    let t_proxy = t0.elapsed();

    setup::apply_firewall(&users)?;
    let t_firewall = t0.elapsed();

    let filters = Arc::new(seccomp::agent_filters()?);
    self_test_as_agent(&users, &filters, selftest::Mode::of(policy.sandbox.mode))?;
    let t_selftest = t0.elapsed();

    setup::reduce_pid1_caps()?;
    let ready = ready_line(
        &session.id,
        t0,
        [t_validate, t_proxy, t_firewall, t_selftest],
    );
    let child = spawn_agent(&cli, &users, filters, &agent_env, &ready)?;
    supervise_until_exit(&child, &mut proxy, proxy_spec, &mut git_api, git_spec)
}

/// PID 1's last job: the agent, the proxy and the git API supervised until the agent exits
/// (its status is the container's).
fn supervise_until_exit(
    agent: &std::process::Child,
    proxy: &mut ProxyGuard,
    proxy_spec: ProxySpec,
    git_api: &mut git::ApiGuard,
    git_spec: Option<git::ApiSpec>,
) -> Result<i32> {
    let proxy_pid = Pid::from_raw(
        proxy
            .0
            .take()
            .map(|c| c.id())
            .context("proxy handle lost")? as i32,
    );
    let mut supervisor =
        supervise::Supervisor::new(Pid::from_raw(agent.id() as i32), proxy_pid, proxy_spec);
    if let (Some(api), Some(spec)) = (git_api.0.take(), git_spec) {
        supervisor = supervisor.with_git(Pid::from_raw(api.id() as i32), spec);
    }
    supervisor.run()
}

/// Start the agent command as the agent (full confinement) in the workspace, after the one
/// ready line: before the agent's first byte, so on a terminal it is the line above the
/// agent's own output (and what `docker logs` shows the host CLI).
fn spawn_agent(
    cli: &Cli,
    users: &Users,
    filters: Arc<Vec<seccompiler::BpfProgram>>,
    env: &std::collections::BTreeMap<String, String>,
    ready: &str,
) -> Result<Child> {
    let agent = RunAs {
        identity: users.agent.clone(),
        filters: Some(filters),
        session: TtySession::ForegroundGroup,
        real_uid: None,
    };
    let command: Vec<OsString> = if cli.command.is_empty() {
        vec![users.agent.shell.clone().into_os_string()]
    } else {
        cli.command.clone()
    };
    let cwd = if cli.workdir.is_dir() {
        cli.workdir.clone()
    } else {
        users.agent.home.clone()
    };
    let (program, args) = command.split_first().context("empty agent command")?;
    second::save(&cli.run_dir, &users.agent, &cwd, env)?;
    console::banner(ready);
    agent
        .command(Path::new(program), env, &cwd)
        .args(args)
        .spawn()
        .with_context(|| {
            format!(
                "cannot start the agent command {:?} as {}",
                program, users.agent.name
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

/// The self-test, run as the agent under the agent's own seccomp filter.
fn self_test_as_agent(
    users: &Users,
    filters: &Arc<Vec<seccompiler::BpfProgram>>,
    mode: selftest::Mode,
) -> Result<()> {
    let run_as = RunAs {
        identity: users.agent.clone(),
        filters: Some(Arc::clone(filters)),
        session: TtySession::Inherit,
        real_uid: None,
    };
    run_self_test(&run_as, mode)
}

fn run_self_test(run_as: &RunAs, mode: selftest::Mode) -> Result<()> {
    let exe =
        std::env::current_exe().context("cannot locate the entrypoint binary for the self-test")?;
    let out = run_as
        .command(&exe, &Default::default(), Path::new("/"))
        .arg(SELF_TEST_ARG)
        .arg(mode.as_arg())
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run the self-test as {}", run_as.identity.name))?;
    if out.status.success() {
        return Ok(());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stdout
        .lines()
        .find(|l| l.starts_with("FAIL"))
        .or_else(|| stderr.lines().next())
        .unwrap_or("no output")
        .to_owned();
    Err(anyhow!(
        "self-test as the agent failed, refusing to start: {first}"
    ))
}

/// The probes, computed by the agent-side process from what it can read itself.
fn self_test_probes(mode: selftest::Mode) -> Vec<selftest::Probe> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let gw4 = netinfo::default_gateway_v4(&read("/proc/net/route"))
        .unwrap_or(Ipv4Addr::new(192, 0, 2, 1));
    let gw6 = netinfo::default_gateway_v6(&read("/proc/net/ipv6_route"))
        .unwrap_or(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let resolver = netinfo::nameservers(&read("/etc/resolv.conf"))
        .into_iter()
        .next();
    selftest::plan(mode, gw4, gw6, resolver)
}

fn self_test_main() -> ExitCode {
    let arg = std::env::args().nth(2);
    let failures = selftest::run_all(&self_test_probes(selftest::Mode::from_arg(arg.as_deref())));
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
