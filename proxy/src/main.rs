//! `airlock-proxy`: wires the real resolver, connector and audit file to the library.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use airlock_proxy::ca::Ca;
use airlock_proxy::config::Args;
use airlock_proxy::identity::{NoIdentity, PeerIdentity, SockDiag};
use airlock_proxy::intercept::Interception;
use airlock_proxy::limits::Limits;
use airlock_proxy::snapshot::Rules;
use airlock_proxy::transparent::SoOriginalDst;
use airlock_proxy::upstream::{SystemResolver, TcpConnect, Upstreams};
use airlock_proxy::{Proxy, audit, shutdown};

fn main() -> anyhow::Result<()> {
    // A SIGHUP (the entrypoint's workspace-secrets rescan) that comes while the proxy reads
    // its files, before `Signals::install` takes it, must not kill it: ignored until then.
    // SAFETY: SIG_IGN installs no handler code; no other thread exists yet.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGHUP,
            nix::sys::signal::SigHandler::SigIgn,
        )
    };
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AIRLOCK_PROXY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    // A policy that cannot be used is a refused start like any other (78, one line), not
    // a crash: the entrypoint reports it as the configuration problem it is.
    let policy_text = match std::fs::read_to_string(&args.policy) {
        Ok(t) => t,
        Err(e) => refuse(&format!(
            "loading policy {}: cannot read it: {e}",
            args.policy.display()
        )),
    };
    let policy = match airlock_policy::Policy::parse(&policy_text, &args.policy) {
        Ok(p) => p,
        Err(e) => {
            refuse(&format!("loading policy {}: {e}", args.policy.display()));
        }
    };
    // A restart of the proxy within a start resumes the revision an operator loaded (kept
    // in the state directory); one that no longer loads is said and the start's policy used.
    let resumed = airlock_proxy::revision::Saved::load(&args.state_dir).and_then(
        |saved| match saved.policy(&policy) {
            Ok(p) => Some((saved, p)),
            Err(e) => {
                tracing::warn!(
                    "the kept policy revision {} does not load, the start's policy is used: {e}",
                    saved.revision
                );
                None
            }
        },
    );
    let policy = match &resumed {
        Some((saved, p)) => {
            tracing::warn!(
                "resuming policy revision {} from {} (loaded before this proxy restarted)",
                saved.revision,
                saved.origin
            );
            p.clone()
        }
        None => policy,
    };
    let resumed = resumed.map(|(saved, _)| saved);
    // The operator's standing grants, kept beside the audit log: over whichever policy is
    // in force. A grants file that does not load stops the start (never a grant dropped
    // silently).
    let grants_file = airlock_proxy::grants::path_beside(&args.audit);
    let overlay = match airlock_proxy::grants::load(&grants_file) {
        Ok(o) => o,
        Err(e) => refuse(&e.to_string()),
    };
    let base = policy.clone();
    let policy = match policy.with_overlay(&overlay) {
        Ok(p) => p,
        Err(e) => refuse(&format!(
            "the grants file {} does not apply: {e} (fix it, or move it away to drop every grant in it)",
            grants_file.display()
        )),
    };
    if !overlay.grants.is_empty() {
        tracing::info!(
            "{} operator grants from {} apply",
            overlay.grants.len(),
            grants_file.display()
        );
    }
    // The admin socket is taken before anything else can open a descriptor over its number.
    let admin_listener = match admin_listener(&args) {
        Ok(l) => l,
        Err(e) => refuse(&format!("{e:#}")),
    };
    // Credentials, CA and upstream roots: any problem is a refusal to start (exit 78, one
    // line), never a proxy that runs without what the policy asked for.
    let (rules, interception) = match setup_interception(&args, policy) {
        Ok(i) => i,
        Err(e) => {
            refuse(&format!("{e:#}"));
        }
    };
    // One thread: the proxy's work is small per byte and the client saturates first on a
    // 2-core machine; a single runtime thread keeps start-up and idle RSS minimal.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .thread_keep_alive(Duration::from_secs(1))
        .build()
        .context("building the tokio runtime")?;
    rt.block_on(run(
        args,
        rules,
        interception,
        admin_listener.map(|listener| AdminStart {
            listener,
            policy_text,
            resumed,
            grants_file,
            base,
            overlay,
        }),
    ))
}

/// The admin API's socket: the inherited one (`--admin-fd`), one bound here
/// (`--admin-socket`), or none.
fn admin_listener(args: &Args) -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    use std::os::fd::{FromRawFd as _, OwnedFd};
    if let Some(fd) = args.admin_fd {
        // Only a listening Unix stream socket is taken over; anything else is refused.
        let sock_type = nix::sys::socket::getsockopt(
            // SAFETY: `fd` is only borrowed for this call; a number that is not open fails
            // with EBADF, which is reported.
            &unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
            nix::sys::socket::sockopt::SockType,
        )
        .with_context(|| format!("--admin-fd {fd} is not an open socket"))?;
        anyhow::ensure!(
            sock_type == nix::sys::socket::SockType::Stream,
            "--admin-fd {fd} is not a stream socket"
        );
        // SAFETY: the descriptor was handed to this process for it alone (PID 1 dups it to
        // this number for the proxy's exec); it is owned from here on and closed on exec.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        nix::fcntl::fcntl(
            &owned,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .context("marking the admin socket close-on-exec")?;
        return Ok(Some(std::os::unix::net::UnixListener::from(owned)));
    }
    if let Some(path) = &args.admin_socket {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::remove_file(path);
        let l = std::os::unix::net::UnixListener::bind(path)
            .with_context(|| format!("binding the admin socket {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
        return Ok(Some(l));
    }
    Ok(None)
}

/// `EX_CONFIG`: the entrypoint reports it as a refused start.
const EXIT_CONFIG: i32 = airlock_channels::EXIT_REFUSED as i32;

/// A refused start: one line, written whole (one `write(2)`, where `eprintln!` makes three
/// that the git API's lines on the same stderr could land between; the entrypoint reads
/// this line back as the reason), then [`EXIT_CONFIG`].
fn refuse(line: &str) -> ! {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("airlock-proxy: {line}\n").as_bytes());
    std::process::exit(EXIT_CONFIG);
}

fn setup_interception(
    args: &Args,
    policy: airlock_policy::Policy,
) -> anyhow::Result<(Rules, Interception)> {
    let rules = Rules::reload(
        &policy,
        &args.state_dir.join(airlock_channels::CREDENTIALS_FILE),
    )?;
    let ca = Ca::load_or_generate(&args.state_dir)?;
    let mut roots = Vec::new();
    for path in &args.upstream_ca {
        roots.extend(Interception::read_roots(path)?);
    }
    // Exported before the health check answers: the entrypoint reads it once ready.
    ca.export(&args.ca_export)?;
    Ok((rules, Interception::new(ca, roots)?))
}

/// What the admin API starts from, read before the runtime: its socket, the policy's text,
/// a revision kept by an earlier run of the proxy in this start, and the operator's grants
/// (their file, and the policy in force before them).
struct AdminStart {
    listener: std::os::unix::net::UnixListener,
    policy_text: String,
    resumed: Option<airlock_proxy::revision::Saved>,
    grants_file: std::path::PathBuf,
    base: airlock_policy::Policy,
    overlay: airlock_policy::overlay::Overlay,
}

async fn run(
    args: Args,
    rules: Rules,
    interception: Interception,
    admin: Option<AdminStart>,
) -> anyhow::Result<()> {
    // Before the listeners answer: a SIGHUP must never meet the default action (exit).
    let mut signals = shutdown::Signals::install().context("installing signal handlers")?;
    let limits = Limits::default();
    let resolver = SystemResolver::from_resolv_conf(&args.resolv_conf)
        .context("building the proxy's resolver")?;
    let upstreams = Upstreams::new(
        Arc::new(resolver),
        Arc::new(TcpConnect),
        limits.connect_timeout,
    );
    let who = audit::Who::new(
        &args.session,
        &rules.policy.sandbox.name,
        args.container.as_deref(),
    );
    let (audit, writer) = audit::open(&args.audit, who.clone(), args.audit_bounds())
        .with_context(|| format!("opening audit log {}", args.audit.display()))?;
    let identity: Arc<dyn PeerIdentity> = match SockDiag::open() {
        Ok(d) => Arc::new(d),
        Err(e) => {
            tracing::warn!(
                "no sock_diag ({e}): audit uid will be null, per-client caps by address"
            );
            Arc::new(NoIdentity)
        }
    };
    let proxy = Proxy {
        rules,
        who,
        upstreams,
        audit: audit.clone(),
        limits,
        explicit_addr: airlock_channels::explicit_addr(),
        transparent_addr: Some(airlock_channels::transparent_addr()),
        dns_addr: Some(airlock_channels::dns_addr()),
        identity,
        agent_uid: args.agent_uid,
        original_dst: Arc::new(SoOriginalDst),
        interception: Arc::new(interception),
        git_service_addr: Some(airlock_channels::git_service_addr()),
        admin: admin.map(|a| airlock_proxy::AdminSetup {
            listener: a.listener,
            operators: airlock_proxy::admin::peer::Operators {
                uids: args.admin_operator_uid.clone(),
            },
            status_dir: args.status_dir.clone(),
            revisions: airlock_proxy::revision::Revisions::new(
                &args.policy,
                &a.policy_text,
                &args.state_dir.join(airlock_channels::CREDENTIALS_FILE),
            )
            .kept_in(&args.state_dir, a.resumed.as_ref())
            .with_grants(&a.grants_file, a.base, a.overlay),
        }),
    };
    let running = proxy.start().await.context("binding the proxy listeners")?;
    tracing::info!("airlock-proxy ready on {}", running.explicit_addr);
    let handoff = args.state_dir.join(airlock_channels::CREDENTIALS_FILE);
    let sig = loop {
        match signals.next().await {
            shutdown::Asked::Stop(sig) => break sig,
            // The entrypoint's rescan rewrote the hand-off: the same policy with the
            // hand-off's needles (the credentials are the same); a hand-off that cannot be
            // used keeps the rules in force. Either way one audit line (`event: reload`,
            // counts only) and one stderr line.
            shutdown::Asked::Reload => {
                // The policy in force: the start's, or the revision an operator loaded.
                let policy = running.rules().policy.clone();
                let (change, refused) = match Rules::reload(&policy, &handoff) {
                    Ok(new) => {
                        let before = running.replace_rules(new);
                        let change = running
                            .rules()
                            .change(before.credentials.workspace_secrets());
                        tracing::info!("SIGHUP: {change}");
                        (change, None)
                    }
                    Err(e) => {
                        tracing::warn!(
                            "SIGHUP: workspace secrets not reloaded, the needles loaded before stay: {e}"
                        );
                        (running.rules().unchanged(), Some(e.to_string()))
                    }
                };
                // A log that cannot be written says so itself (stderr, health, outage line).
                let _ = audit.reload(&change, refused);
            }
        }
    };
    tracing::info!("{sig}: draining");
    running.stop().await;
    writer.finish().await.context("flushing the audit log")?;
    Ok(())
}
