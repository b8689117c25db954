//! PID 1's start, after the checks: the effects in their order (design §3), then
//! supervision until the agent exits.

use crate::checks::{self, Checked};
use crate::config::Cli;
use crate::identity::Users;
use crate::proxy_ctl::{self, ProxySpec};
use crate::spawn::{RunAs, Session as TtySession};
use crate::{
    agent_env, console, credentials, effective, git, netinfo, seccomp, second, selftest, setup,
    supervise, trust, workspace_secrets,
};
use airlock_channels as ch;
use airlock_policy::Policy;
use anyhow::{Context, Result, anyhow};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Child, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// Hidden first argument: run the self-test probes (as the agent, spawned by ourselves).
pub const SELF_TEST_ARG: &str = "__self-test";

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

/// PID 1's start: `--check`, or the checks, set-up and supervision; the agent's exit status.
pub fn run(cli: Cli) -> Result<i32> {
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
    } = checks::check_all(&cli)?;
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
            git::ApiPaths {
                git_dir: cli.git_dir.clone(),
                work_tree: cli.workdir.clone(),
                key_file: key_file.clone(),
                policy: policy_file.clone(),
            },
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

/// The agent-side self-test process (`__self-test MODE`): every probe stopped.
pub fn self_test_main(arg: Option<&str>) -> ExitCode {
    let failures = selftest::run_all(&self_test_probes(selftest::Mode::from_arg(arg)));
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
