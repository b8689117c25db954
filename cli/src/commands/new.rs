//! `airlock new`: claim the name, make the checkout, create and start the container, wait
//! for the entrypoint to say it is ready. Anything that fails after the claim is undone
//! (container, checkout, row), so nothing half-made is left behind; a killed `new` leaves a
//! `creating` row that `gc` removes. `run` shares the steps up to the container's creation
//! ([`Plan`], [`claim`], [`create`], [`undo`]).

use super::{Ctx, container_name, now};
use airlock_cli::checkout::{self, Checkout, Operator};
use airlock_cli::cli::NewArgs;
use airlock_cli::engine::volumes;
use airlock_cli::engine::{EngineError, LABEL_DATA, LABEL_ONESHOT, LABEL_SANDBOX, Role, RootFile};
use airlock_cli::flags::{DEFAULT_IMAGE, Layout, POLICY, RunSpec, Source};
use airlock_cli::lock::NameLock;
use airlock_cli::names;
use airlock_cli::paths::Paths;
use airlock_cli::registry::{RegistryError, Sandbox, State};
use airlock_cli::secrets;
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the entrypoint may take to write its ready record.
const READY_LIMIT: Duration = Duration::from_secs(90);

/// Everything a new sandbox is made from, checked before anything is made.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub repo: PathBuf,
    pub branch: String,
    pub agent: String,
    pub image: String,
    pub ttl: i64,
    pub secrets: Vec<(String, PathBuf)>,
    pub policy: Option<PathBuf>,
    pub policy_hash: String,
    pub command: Vec<String>,
    pub tty: bool,
    /// Made by `run`: one session, then fetched back and removed.
    pub oneshot: bool,
    /// Build the image first when it is missing (`--build-missing`).
    pub build_missing: bool,
    /// Where the container is placed: its network, resolvers, an extra upstream CA.
    pub place: Placement,
}

/// Where a sandbox's container goes, beyond the one definition of the run flags: a network
/// of the engine, its DNS servers, extra CAs (`--network`, `--dns`, `--extra-ca`,
/// `--upstream-ca`).
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub network: Option<String>,
    pub dns: Vec<String>,
    pub upstream_ca: Option<PathBuf>,
    pub extra_ca: Option<PathBuf>,
}

/// The parts of `new` and `run` a [`Plan`] is made from.
#[derive(Debug)]
pub struct Wants<'a> {
    pub name: &'a str,
    pub repo: &'a Path,
    pub branch: Option<&'a str>,
    pub agent: &'a str,
    pub ttl: i64,
    pub secrets: &'a [String],
    pub policy: Option<&'a Path>,
    pub command: &'a [String],
    pub tty: bool,
    pub oneshot: bool,
    pub build_missing: bool,
    pub network: Option<&'a str>,
    pub dns: &'a [String],
    pub upstream_ca: Option<&'a Path>,
    pub extra_ca: Option<&'a Path>,
}

impl Plan {
    /// Check every input; nothing is made yet.
    pub fn check(ctx: &Ctx, w: &Wants) -> Result<Plan> {
        names::validate_name(w.name)?;
        let branch = w
            .branch
            .map_or_else(|| names::default_branch(w.name), str::to_string);
        names::validate_branch(&branch)?;
        let (image, command) = agent_image(&ctx.image, w.agent, w.command)?;
        let secrets = parse_secrets(&ctx.paths, w.secrets)?;
        let policy = w
            .policy
            .map(|p| {
                std::fs::canonicalize(p)
                    .with_context(|| format!("cannot read the policy {}", p.display()))
            })
            .transpose()?;
        let policy_hash = match &policy {
            Some(p) => {
                hex::encode(Sha256::digest(std::fs::read(p).with_context(|| {
                    format!("cannot read the policy {}", p.display())
                })?))
            }
            None => String::new(),
        };
        for d in w.dns {
            if d.parse::<std::net::IpAddr>().is_err() {
                return Err(airlock_cli::exit::Failure::new(
                    airlock_cli::exit::Code::Usage,
                    format!("--dns {d:?} is not an IP address: give the resolver's address (e.g. 192.0.2.53)"),
                )
                .into());
            }
        }
        let file = |p: Option<&Path>, what: &str| {
            p.map(|p| {
                std::fs::canonicalize(p)
                    .with_context(|| format!("cannot read the {what} {}", p.display()))
            })
            .transpose()
        };
        let upstream_ca = file(w.upstream_ca, "upstream CA")?;
        let extra_ca = file(w.extra_ca, "extra CA")?;
        // A host policy is known now: a secret it does not read is refused before anything
        // is made (the image's own policy is read once the container exists, in `create`).
        if let (Some(p), false) = (&policy, secrets.is_empty()) {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the policy {}", p.display()))?;
            refuse_unbound(&text, p, &secrets)?;
        }
        Ok(Plan {
            name: w.name.into(),
            repo: w.repo.into(),
            branch,
            agent: w.agent.into(),
            image,
            ttl: w.ttl,
            secrets,
            policy,
            policy_hash,
            command: command.to_vec(),
            tty: w.tty,
            oneshot: w.oneshot,
            build_missing: w.build_missing,
            place: Placement {
                network: w.network.map(str::to_string),
                dns: w.dns.to_vec(),
                upstream_ca,
                extra_ca,
            },
        })
    }
}

/// An agent with a profile (`agents/<agent>.toml`, e.g. claude) runs in its own image,
/// `airlock:<agent>` (`airlock build --agent <agent>`), and is the default command, as in
/// `scripts/docker-run`; `shell` is the base image's shell. An explicit `--image` wins.
pub fn agent_image(image: &str, agent: &str, command: &[String]) -> Result<(String, Vec<String>)> {
    let ok = !agent.is_empty()
        && agent.len() <= 32
        && agent
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        return Err(airlock_cli::exit::Failure::new(
            airlock_cli::exit::Code::Usage,
            format!("--agent {agent:?} is not an agent name: use lowercase letters, digits and '-' (e.g. claude, or shell)"),
        )
        .into());
    }
    if agent == "shell" {
        return Ok((image.to_string(), command.to_vec()));
    }
    let image = if image == DEFAULT_IMAGE {
        format!("airlock:{agent}")
    } else {
        image.to_string()
    };
    let command = if command.is_empty() {
        vec![agent.to_string()]
    } else {
        command.to_vec()
    };
    Ok((image, command))
}

pub async fn run(ctx: &Ctx, a: &NewArgs) -> Result<i32> {
    let plan = Plan::check(
        ctx,
        &Wants {
            name: &a.name,
            repo: &a.repo,
            branch: a.branch.as_deref(),
            agent: &a.agent,
            ttl: a.ttl,
            secrets: &a.secrets,
            policy: a.policy.as_deref(),
            command: &a.command,
            // A detached sandbox keeps a TTY and open stdin so an interactive agent (a
            // shell) waits for `attach` instead of reading end-of-file.
            tty: true,
            oneshot: false,
            build_missing: a.place.build_missing,
            network: a.place.network.as_deref(),
            dns: &a.place.dns,
            upstream_ca: a.place.upstream_ca.as_deref(),
            extra_ca: a.place.extra_ca.as_deref(),
        },
    )?;
    super::gc::opportunistic(ctx).await;
    let claimed = claim(ctx, &plan).await?;
    let made = async {
        let id = create(ctx, &plan, &claimed.op, &claimed.row).await?;
        start_ready(ctx, &plan.name, &id).await
    };
    match made.await {
        Ok(ready) => {
            // The sandbox is whole: the name's lock (held against `gc`) is released.
            drop(claimed.lock);
            report(ctx, &a.name, a.json, ready)?;
            Ok(0)
        }
        Err(e) => {
            undo(ctx, &a.name, claimed.lock).await;
            Err(e)
        }
    }
}

/// A registered name: the operator's repository, the row, and this process's hold on the
/// name (`gc` leaves alone a sandbox whose lock is held).
#[derive(Debug)]
pub struct Claimed {
    pub op: Operator,
    pub row: Sandbox,
    pub lock: NameLock,
}

/// Read the operator's repository and the image (built first with `--build-missing`), then
/// take the name's lock and register the name (`creating`).
pub async fn claim(ctx: &Ctx, plan: &Plan) -> Result<Claimed> {
    let op = checkout::operator(&plan.repo)?;
    if !op.left_out.is_empty() {
        eprintln!(
            "airlock: warning: the sandbox starts from your last commit ({}); not in it: {}; commit what the agent needs, or copy it into the sandbox's checkout (`airlock status NAME` shows where)",
            &op.head[..12.min(op.head.len())],
            op.left_out.describe(4)
        );
    }
    let digest = match ctx.engine.image_id(&plan.image).await {
        Err(EngineError::ImageMissing { .. }) if plan.build_missing => {
            super::build::missing(ctx, &plan.image, &plan.agent)?;
            ctx.engine.image_id(&plan.image).await?
        }
        other => other?,
    };
    let taken = || RegistryError::Taken {
        name: plan.name.clone(),
    };
    let lock = NameLock::try_take(&ctx.paths.data, &plan.name)
        .with_context(|| format!("cannot lock the name {:?}", plan.name))?
        .ok_or_else(taken)?;
    let t = now();
    let row = Sandbox {
        name: plan.name.clone(),
        repository: op.top.display().to_string(),
        branch: plan.branch.clone(),
        base: op.head.clone(),
        agent: plan.agent.clone(),
        image: plan.image.clone(),
        image_digest: digest,
        policy_hash: plan.policy_hash.clone(),
        container_id: String::new(),
        created: t,
        last_seen: t,
        ttl_seconds: plan.ttl,
        state: State::Creating,
        oneshot: plan.oneshot,
    };
    ctx.registry.claim(&row)?;
    Ok(Claimed { op, row, lock })
}

/// Make the checkout, the agent's home and the secrets, and create (not start) the
/// container; returns its id.
pub async fn create(ctx: &Ctx, plan: &Plan, op: &Operator, row: &Sandbox) -> Result<String> {
    let ck = ctx.checkout(&plan.name);
    if ck.dir.exists() {
        bail!(
            "{} exists without a registered sandbox (left by an interrupted run): `airlock gc` removes it",
            ck.dir.display()
        );
    }
    // The store of the base: made (or found) and linked under the stores' lock, so `gc`
    // never removes it in between.
    let stores = ctx.stores();
    let chain = {
        let _held = stores.lock()?;
        let chain = stores.acquire(&op.top, &row.base)?;
        ck.create(&chain[0], &row.branch, &row.base)?;
        chain
    };
    // The operator's remotes: fetch, pull and push of its own branch as in the repository
    // (the git API judges each under the policy).
    let remotes = checkout::remotes::of_operator(&op.top)?;
    ck.set_remotes(&remotes, &plan.name, &row.branch)?;
    let data = ctx.paths.data.display().to_string();
    // The agent's home survives `stop`/`start` in a volume of the sandbox's own.
    let home = ctx
        .engine
        .create_volume(&data, &plan.name, Role::Home)
        .await?;
    let secrets = place_secrets(ctx, plan).await?;
    let spec = spec_of(ctx, plan, op, &ck, &chain, Some(home), secrets);
    let id = ctx
        .engine
        .create(&container_name(&plan.name), &spec)
        .await?;
    ctx.registry
        .set_container(&plan.name, &id, &row.image_digest)?;
    Ok(id)
}

/// The secrets of the sandbox: every `--secret`, and each secret of the store (`airlock
/// secret set`) that a credential of its policy reads from `/run/secrets/<name>` (the
/// agent's profile's credentials are in its image's policy), written into the sandbox's
/// secrets volume as root's 0400 files by the engine ([`airlock_cli::engine::volumes`]).
/// A `--secret` no credential reads is refused. `None`: the sandbox has no secret.
async fn place_secrets(ctx: &Ctx, plan: &Plan) -> Result<Option<String>> {
    let store = ctx.paths.secrets().ok();
    let stored = match &store {
        Some(s) => s.list()?,
        None => Vec::new(),
    };
    if plan.secrets.is_empty() && stored.is_empty() {
        return Ok(None);
    }
    let data = ctx.paths.data.display().to_string();
    let volume = ctx
        .engine
        .create_volume(&data, &plan.name, Role::Secrets)
        .await?;
    let setup = ctx
        .engine
        .setup_container(&data, &plan.name, &plan.image, Some(&volume))
        .await;
    let placed = match setup {
        Ok(setup) => {
            let placed = fill_secrets(ctx, plan, &setup, store.as_ref(), &stored).await;
            let _ = ctx.engine.remove(&setup).await;
            placed
        }
        Err(e) => Err(e.into()),
    };
    match placed {
        Ok(true) => Ok(Some(volume)),
        other => {
            let _ = ctx.engine.remove_volume(&volume).await;
            other.map(|_| None)
        }
    }
}

/// Decide the secrets (see [`place_secrets`]) and write them through the set-up container
/// `setup`; whether there was any.
async fn fill_secrets(
    ctx: &Ctx,
    plan: &Plan,
    setup: &str,
    store: Option<&secrets::Store>,
    stored: &[String],
) -> Result<bool> {
    let (text, origin) = match &plan.policy {
        Some(p) => (
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the policy {}", p.display()))?,
            p.clone(),
        ),
        None => image_policy(ctx, setup, &plan.image).await?,
    };
    refuse_unbound(&text, &origin, &plan.secrets)?;
    let mut chosen = plan.secrets.clone();
    if let Some(store) = store {
        let read = secrets::read_by(&text, &origin)
            .with_context(|| format!("cannot read the policy {}", origin.display()))?;
        for name in read {
            if stored.contains(&name) && !chosen.iter().any(|(n, _)| *n == name) {
                let file = store.existing(&name)?;
                chosen.push((name, file));
            }
        }
    }
    if chosen.is_empty() {
        return Ok(false);
    }
    let mut files = Vec::new();
    for (name, file) in &chosen {
        files.push(RootFile {
            name: name.clone(),
            content: secrets::read_value(file)?,
        });
    }
    ctx.engine
        .put_files(setup, volumes::SETUP_SECRETS, &files)
        .await?;
    Ok(true)
}

/// The image's own policy (`AIRLOCK_POLICY` of the image, else [`POLICY`]), read from the
/// created container `id`; with its origin for messages (`image:path`).
async fn image_policy(ctx: &Ctx, id: &str, image: &str) -> Result<(String, PathBuf)> {
    let path = ctx
        .engine
        .image_env(image)
        .await?
        .iter()
        .find_map(|kv| kv.strip_prefix("AIRLOCK_POLICY=").map(str::to_string))
        .unwrap_or_else(|| POLICY.to_string());
    let text = ctx
        .engine
        .read_file(id, &path)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the image {image} has no policy at {path}"))?;
    Ok((
        String::from_utf8_lossy(&text).into_owned(),
        PathBuf::from(format!("{image}:{path}")),
    ))
}

/// Refuse the secrets no credential of the policy `text` reads (one line naming them all).
fn refuse_unbound(text: &str, origin: &Path, given: &[(String, PathBuf)]) -> Result<()> {
    let names: Vec<String> = given.iter().map(|(n, _)| n.clone()).collect();
    let unbound = secrets::unbound(text, origin, &names)
        .with_context(|| format!("cannot read the policy {}", origin.display()))?;
    if unbound.is_empty() {
        return Ok(());
    }
    let files: Vec<String> = unbound.iter().map(|n| secrets::mount_path(n)).collect();
    Err(airlock_cli::exit::Failure::new(
        airlock_cli::exit::Code::Usage,
        format!(
            "--secret {}: no credential of the policy {} reads {}, so the sandbox would hold it unused; bind it in the policy ([[credentials]] ... source = {{ file = \"{}\" }}) or leave it out",
            unbound.join(", --secret "),
            origin.display(),
            files.join(", "),
            files[0]
        ),
    )
    .into())
}

/// The run flags of this sandbox: the one definition on its layout (its store `chain`,
/// nearest first), with its labels.
pub fn spec_of(
    ctx: &Ctx,
    plan: &Plan,
    op: &Operator,
    ck: &Checkout,
    chain: &[PathBuf],
    home: Option<String>,
    secrets: Option<String>,
) -> RunSpec {
    let layout = Layout {
        work_tree: ck.work_tree(),
        git_dir: Some(ck.git_dir()),
        shared_objects: chain.first().map(|s| s.join("objects")),
        chained_stores: chain.iter().skip(1).cloned().collect(),
        audit: Source::Host(ck.audit()),
        secrets: Vec::new(),
        secrets_volume: secrets.map(Source::Volume),
        policy: plan.policy.clone(),
        upstream_ca: plan.place.upstream_ca.clone(),
        extra_ca: plan.place.extra_ca.clone(),
        home: home.map(Source::Volume),
        control: Some(ck.control()),
    };
    let mut spec = RunSpec::documented(&plan.image, &layout);
    spec.labels.push((LABEL_SANDBOX.into(), plan.name.clone()));
    spec.labels
        .push((LABEL_DATA.into(), ctx.paths.data.display().to_string()));
    if plan.oneshot {
        spec.labels.push((LABEL_ONESHOT.into(), "true".into()));
    }
    spec.network = plan.place.network.clone();
    spec.dns = plan.place.dns.clone();
    // The entrypoint's fixes for a missing credential then speak of `airlock secret set` and
    // `--secret`, not of scripts/docker-run's variables.
    spec.env.push(("AIRLOCK_LAUNCHER".into(), "cli".into()));
    // The sandbox's name is its policy's name for this start: every audit line names it, and
    // its branch namespace upstream is sandbox/<name>/... (as scripts/docker-run's
    // AIRLOCK_SANDBOX).
    spec.env.push(("AIRLOCK_SANDBOX".into(), plan.name.clone()));
    // The operator's git identity is the agent's default commit identity (the agent's own
    // config still wins), as with scripts/docker-run; AIRLOCK_GIT_USER_NAME/EMAIL override.
    let (name, email) = checkout::identity(&op.top);
    for (var, found) in [
        ("AIRLOCK_GIT_USER_NAME", name),
        ("AIRLOCK_GIT_USER_EMAIL", email),
    ] {
        if let Some(v) = std::env::var(var).ok().filter(|v| !v.is_empty()).or(found) {
            spec.env.push((var.into(), v));
        }
    }
    spec.command = plan.command.clone();
    spec.tty = plan.tty;
    spec
}

/// Start the container and wait for the entrypoint's ready record; record the session.
async fn start_ready(ctx: &Ctx, name: &str, id: &str) -> Result<Duration> {
    ctx.engine.start(id).await?;
    let control = ctx.checkout(name).control();
    let (ready, _) = ctx.engine.wait_ready(id, &control, READY_LIMIT).await?;
    record_start(ctx, name, id).await?;
    Ok(ready)
}

/// The container runs: its session and the `running` state.
pub async fn record_start(ctx: &Ctx, name: &str, id: &str) -> Result<()> {
    if let Some(seen) = ctx.engine.inspect(id).await? {
        ctx.registry.add_session(name, &seen.started_at, now())?;
    }
    ctx.registry.set_state(name, State::Running, now())?;
    Ok(())
}

/// Undo a failed `new`; each step is best effort, the first failure is already reported.
pub async fn undo(ctx: &Ctx, name: &str, lock: NameLock) {
    let _ = ctx.engine.remove(&container_name(name)).await;
    let _ = ctx.engine.remove(&volumes::setup_name(name)).await;
    for role in [Role::Home, Role::Secrets] {
        let _ = ctx.engine.remove_volume(&role.volume(name)).await;
    }
    if let Err(e) = ctx.checkout(name).remove() {
        eprintln!("airlock: warning: {e}");
    }
    let _ = ctx.registry.remove(name);
    lock.remove();
}

fn report(ctx: &Ctx, name: &str, json: bool, ready: Duration) -> Result<()> {
    let row = ctx.sandbox(name)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&row)?);
    } else {
        println!(
            "sandbox {name} ready in {} ms on branch {} (checkout {}); `airlock attach {name}`",
            ready.as_millis(),
            row.branch,
            ctx.checkout(name).work_tree().display()
        );
    }
    Ok(())
}

/// `--secret` values: `NAME` (from the secret store, `airlock secret set NAME`) or
/// `NAME=FILE` (a host file holding the value); never the value itself.
pub fn parse_secrets(paths: &Paths, specs: &[String]) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for s in specs {
        let (name, path) = match s.split_once('=') {
            None => {
                let store = paths.secrets()?;
                (s.as_str(), store.existing(s)?)
            }
            Some((name, file)) => {
                airlock_cli::secrets::validate(name)?;
                let path = std::fs::canonicalize(file)
                    .with_context(|| format!("--secret {name}: cannot read the file {file}"))?;
                if !path.is_file() {
                    bail!("--secret {name}: {} is not a regular file", path.display());
                }
                (name, path)
            }
        };
        if out.iter().any(|(n, _): &(String, PathBuf)| n == name) {
            bail!("--secret {name} is given twice: give each secret once");
        }
        out.push((name.to_string(), path));
    }
    Ok(out)
}
