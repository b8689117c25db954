//! PID 1's start, after the checks: the effects in their order (docs/design.md §3), then
//! supervision until the agent exits. The proxy and the git API come up while the firewall is
//! applied; the agent starts only after all three.

use crate::checks::{self, Checked};
use crate::config::Cli;
use crate::identity::Users;
use crate::plan::{self, Plan};
use crate::proxy_ctl::{self, ProxySpec};
use crate::spawn::{RunAs, Session as TtySession};
use crate::{
    agent_env, console, credentials, effective, git, readiness, rescan, seccomp, second, selftest,
    setup, supervise, trust, workspace_secrets,
};
use airlock_policy::Policy;
use anyhow::{Context, Result, anyhow};
use nix::unistd::Pid;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        console::stderr_line(&format!(
            "warning: {} hands {name} to the agent as it is: the agent can read it and send it to any host the policy allows",
            agent_env::FORCE_VAR
        ));
    }
}

/// The one ready line, with the time each start-up step took. The proxy (with the git API)
/// and the firewall start at once, so their two times overlap; the five numbers keep their
/// order (total, validate, proxy, firewall, self-test) for `scripts/bench-startup`.
fn ready_line(session_id: &str, total: Duration, steps: &Steps) -> String {
    format!(
        "session {session_id} ready in {} ms (validate {} ms, proxy {} ms beside firewall {} ms, self-test {} ms)",
        total.as_millis(),
        steps.validate.as_millis(),
        steps.services.as_millis(),
        steps.firewall.as_millis(),
        steps.self_test.as_millis(),
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

/// How long each start-up step took, for the ready line.
#[derive(Debug, Default)]
struct Steps {
    /// The checks and the files prepared before any process starts.
    validate: Duration,
    /// From the proxy's and the git API's spawn until both answer (the firewall meanwhile).
    services: Duration,
    /// The firewall's own time, inside `services`.
    firewall: Duration,
    /// The self-test as the agent.
    self_test: Duration,
}

/// The start-up's clock: when the current step began, and the steps so far.
#[derive(Debug)]
struct Clock {
    t0: Instant,
    step: Instant,
    steps: Steps,
}

impl Clock {
    fn start() -> Clock {
        let now = Instant::now();
        Clock {
            t0: now,
            step: now,
            steps: Steps::default(),
        }
    }

    /// The time since the last lap, and a new lap begins.
    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let lap = now - self.step;
        self.step = now;
        lap
    }

    /// The one ready line.
    fn ready_line(&self, session_id: &str) -> String {
        ready_line(session_id, self.t0.elapsed(), &self.steps)
    }

    /// The steps so far, as the readiness record carries them.
    fn record(&self) -> airlock_control::Steps {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        airlock_control::Steps {
            total_ms: ms(self.t0.elapsed()),
            validate_ms: ms(self.steps.validate),
            services_ms: ms(self.steps.services),
            firewall_ms: ms(self.steps.firewall),
            self_test_ms: ms(self.steps.self_test),
        }
    }
}

/// PID 1's start: `--check`, `--ready`, or the checks, set-up and supervision; the agent's
/// exit status. The start's readiness record says `starting` at once, then `ready` or
/// `refused` (with the line).
pub fn run(cli: Cli) -> Result<i32> {
    let clock = Clock::start();
    if cli.check {
        return check_only(&cli);
    }
    if cli.ready {
        let (code, line) = readiness::probe(&cli.run_dir);
        println!("{line}");
        return Ok(code);
    }
    let mut record = readiness::Record::begin(&cli.run_dir);
    // A warm pod: nothing that belongs to a session exists before its claim.
    if let Some(file) = &cli.wait_for_claim {
        let claim = crate::claim::wait(file)?;
        eprintln!("airlock: claimed ({claim}): starting");
    }
    let clock = if cli.wait_for_claim.is_some() {
        Clock::start()
    } else {
        clock
    };
    let started = start(cli, clock, &mut record);
    if let Err(e) = &started {
        record.refused(&readiness::reason(e));
    }
    started
}

/// The checks, set-up and supervision.
fn start(cli: Cli, mut clock: Clock, record: &mut readiness::Record) -> Result<i32> {
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
        agent_env,
        workspace: _workspace,
    } = checks::check_all(&cli)?;
    let found = plan::Found {
        agent: &users.agent,
        git: &git_plan,
        git_api: git_api_bin.is_some(),
        agent_env,
        mode: policy.sandbox.mode,
        workdir_is_dir: cli.workdir.is_dir(),
    };
    let plan = Plan::new(&cli, found, |k| std::env::var(k).ok());
    record.known(
        &session.id,
        cli.sandbox.as_deref().unwrap_or(&policy.sandbox.name),
    );

    setup::give_home(&users.agent)?;
    warn_forced(&plan.forced);
    credentials::warn_missing(&creds);
    // The git service port's proof: a key of this start for the proxy (the hand-off) and
    // the git API (a pipe at every start of it), in no other process.
    let service_key = match &git_api_bin {
        Some(_) => Some(
            airlock_ticket::ServiceKey::generate()
                .context("cannot generate the git service port's key")?,
        ),
        None => None,
    };
    creds.handoff.git_service = service_key.as_ref().map(|k| airlock_handoff::GitService {
        key: airlock_handoff::Secret::new(k.to_hex()),
        start_branch: git::start_branch(&cli.git_dir),
    });
    hand_off_credentials(
        &cli,
        &plan,
        creds,
        &session_key,
        &session.id,
        &users,
        &policy,
    )?;
    let files = prepare_files(&cli, &plan, &users, &operator_ca, &policy, &git_plan)?;
    git::write_key(&cli.run_dir, &users.agent, &session_key)?;
    let git_spec = match (git_api_bin, service_key) {
        (Some(bin), Some(key)) => {
            Some(git_api_spec(&cli, &plan, bin, &users, &files, &session.id)?.with_service_key(key))
        }
        _ => None,
    };
    clock.steps.validate = clock.lap();

    supervise::block_signals()?;
    // The proxy and the git API start while PID 1 applies the firewall: the three are
    // independent (the git API needs the proxy and the CA bundle only when a push comes),
    // and nothing runs as the agent until all three are done. Both services are spawned
    // before the firewall's threads exist, so no fork happens beside another thread.
    // The operator's channel: bound here, served by the proxy (and by every restart of it).
    let admin = crate::admin_socket::AdminSocket::bind(&record.dir())?;
    record.mirror(&plan.state_dir);
    let (mut proxy, proxy_spec) =
        spawn_proxy(&cli, &plan, proxy_bin, files, (&session.id, admin), &users)?;
    let mut git_api = git::ApiGuard(git_spec.as_ref().map(git::ApiSpec::spawn).transpose()?);
    let firewall = Instant::now();
    setup::apply_firewall(&users)?;
    clock.steps.firewall = firewall.elapsed();
    if let Some(child) = proxy.0.as_mut() {
        proxy_ctl::wait_ready(child)?;
    }
    trust::write_bundle(
        &cli.run_dir,
        &proxy_spec.ca_export,
        operator_ca.extra.as_ref(),
    )?;
    if let (Some(child), Some(spec)) = (git_api.0.as_mut(), git_spec.as_ref()) {
        spec.wait_ready(child)?;
    }
    clock.steps.services = clock.lap();

    let filters = Arc::new(seccomp::agent_filters()?);
    self_test_as_agent(&users, &filters, plan.self_test)?;
    clock.steps.self_test = clock.lap();

    let ready = clock.ready_line(&session.id);
    // Before PID 1 gives up CAP_DAC_OVERRIDE: the host's control directory is not root's.
    record.ready(clock.record())?;
    setup::reduce_pid1_caps()?;
    let rescan = rescan_spec(&cli, &users, &filters, &proxy_spec);
    let child = spawn_agent(&cli, &plan, &users, filters, &ready)?;
    supervise_until_exit(
        &child,
        &mut proxy,
        proxy_spec,
        &mut git_api,
        git_spec,
        rescan,
    )
}

/// What SIGHUP's workspace-secrets rescan runs: the scan as the agent (its seccomp
/// filters too), the hand-off rewrite as the proxy user.
fn rescan_spec(
    cli: &Cli,
    users: &Users,
    filters: &Arc<Vec<seccompiler::BpfProgram>>,
    proxy: &ProxySpec,
) -> rescan::Rescan {
    rescan::Rescan {
        agent: RunAs {
            identity: users.agent.clone(),
            filters: Some(Arc::clone(filters)),
            session: TtySession::Inherit,
            real_uid: None,
        },
        proxy: RunAs {
            identity: users.proxy.clone(),
            filters: None,
            session: TtySession::Inherit,
            real_uid: None,
        },
        workdir: cli.workdir.clone(),
        policy: proxy.policy.clone(),
        state_dir: proxy.state_dir.clone(),
        run_dir: cli.run_dir.clone(),
    }
}

/// The proxy's credential hand-off: the resolved credentials, the git placeholder of this
/// session and the workspace's own secrets (classified by the detectors as `policy` changes
/// them, the proxy's set), written for the proxy user; then dropped.
fn hand_off_credentials(
    cli: &Cli,
    plan: &Plan,
    mut creds: credentials::Resolved,
    session_key: &airlock_wire::SessionKey,
    session_id: &str,
    users: &Users,
    policy: &Policy,
) -> Result<()> {
    creds.handoff.git_placeholder = Some(airlock_wire::placeholder::placeholder(
        session_key,
        session_id,
    ));
    creds.handoff.workspace_secrets =
        workspace_secrets::at_start(&cli.workdir, &cli.run_dir, &policy.secrets);
    credentials::write_handoff(&plan.state_dir, &creds.handoff, &users.proxy)?;
    Ok(())
}

/// The files and directories set up before any process starts.
#[derive(Debug)]
struct Files {
    upstream_ca: Vec<std::path::PathBuf>,
    audit_file: std::path::PathBuf,
    policy_file: std::path::PathBuf,
    route: console::Route,
}

/// The proxy's trust files, the runtime and audit directories, the effective policy and
/// PID 1's own log.
fn prepare_files(
    cli: &Cli,
    plan: &Plan,
    users: &Users,
    operator_ca: &trust::OperatorTrust,
    policy: &Policy,
    git_plan: &git::Decision,
) -> Result<Files> {
    let upstream_ca = trust::install_proxy_files(
        &plan.state_dir,
        &users.proxy,
        &users.agent,
        operator_ca,
        cli.upstream_ca.as_deref(),
    )?;
    let audit_file = setup::prepare_dirs(cli, users)?;
    trust::empty_ca_dir(&cli.run_dir)?;
    let policy_file = effective_policy(cli, policy, git_plan)?;
    let route = console::Route::detect();
    console::open(&route, &cli.audit_dir)?;
    Ok(Files {
        upstream_ca,
        audit_file,
        policy_file,
        route,
    })
}

/// The git API's spec for this start (socket directory and logs created).
fn git_api_spec(
    cli: &Cli,
    plan: &Plan,
    bin: std::path::PathBuf,
    users: &Users,
    files: &Files,
    session_id: &str,
) -> Result<git::ApiSpec> {
    git::ApiSpec::new(
        bin,
        &cli.run_dir,
        &cli.audit_dir,
        users,
        git::ApiPaths {
            git_dir: cli.git_dir.clone(),
            work_tree: cli.workdir.clone(),
            key_file: plan.key_file.clone(),
            policy: files.policy_file.clone(),
        },
        session_id,
        cli.audit_cap,
    )
}

/// Spawn the proxy as its user (its readiness is awaited by the caller).
fn spawn_proxy(
    cli: &Cli,
    plan: &Plan,
    bin: std::path::PathBuf,
    files: Files,
    (session_id, admin): (&str, crate::admin_socket::AdminSocket),
    users: &Users,
) -> Result<(ProxyGuard, ProxySpec)> {
    let spec = ProxySpec {
        bin,
        policy: files.policy_file,
        audit_file: files.audit_file,
        session: session_id.to_owned(),
        state_dir: plan.state_dir.clone(),
        ca_export: trust::prepare_export_dir(&cli.run_dir, &users.proxy)?,
        upstream_ca: files.upstream_ca,
        audit_cap: cli.audit_cap,
        container: proxy_ctl::own_container(),
        log_filter: files.route.proxy_filter.clone(),
        admin: Some(admin),
        status_dir: Some(plan.state_dir.clone()),
        agent_uid: Some(users.agent.uid),
        run_as: RunAs::detached(users.proxy.clone()),
    };
    let proxy = ProxyGuard(Some(spec.spawn()?));
    Ok((proxy, spec))
}

/// PID 1's last job: the agent, the proxy and the git API supervised until the agent exits
/// (its status is the container's).
fn supervise_until_exit(
    agent: &std::process::Child,
    proxy: &mut ProxyGuard,
    proxy_spec: ProxySpec,
    git_api: &mut git::ApiGuard,
    git_spec: Option<git::ApiSpec>,
    rescan: rescan::Rescan,
) -> Result<i32> {
    let proxy_pid = Pid::from_raw(
        proxy
            .0
            .take()
            .map(|c| c.id())
            .context("proxy handle lost")? as i32,
    );
    let mut supervisor =
        supervise::Supervisor::new(Pid::from_raw(agent.id() as i32), proxy_pid, proxy_spec)
            .with_rescan(rescan);
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
    plan: &Plan,
    users: &Users,
    filters: Arc<Vec<seccompiler::BpfProgram>>,
    ready: &str,
) -> Result<Child> {
    let agent = RunAs {
        identity: users.agent.clone(),
        filters: Some(filters),
        session: TtySession::ForegroundGroup,
        real_uid: None,
    };
    let (program, args) = plan.command.split_first().context("empty agent command")?;
    let (env, cwd) = (&plan.agent_env, &plan.cwd);
    second::save(&cli.run_dir, &users.agent, cwd, env)?;
    console::banner(ready);
    agent
        .command(Path::new(program), env, cwd)
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
        .arg(selftest::ARG)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_keeps_its_five_numbers_in_order() {
        let ms = Duration::from_millis;
        let steps = Steps {
            validate: ms(6),
            services: ms(41),
            firewall: ms(38),
            self_test: ms(8),
        };
        let line = ready_line("s1", ms(55), &steps);
        assert_eq!(
            line,
            "session s1 ready in 55 ms (validate 6 ms, proxy 41 ms beside firewall 38 ms, self-test 8 ms)"
        );
        // scripts/bench-startup reads the numbers before each " ms" in this order.
        let numbers: Vec<&str> = line
            .split(" ms")
            .filter_map(|part| part.rsplit(' ').next())
            .filter(|n| n.parse::<u32>().is_ok())
            .collect();
        assert_eq!(numbers, ["55", "6", "41", "38", "8"]);
    }
}
