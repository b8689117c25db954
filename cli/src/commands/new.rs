//! `airlock new`: claim the name, make the checkout, create and start the container, wait
//! for the entrypoint to say it is ready. Anything that fails after the claim is undone
//! (container, checkout, row), so nothing half-made is left behind; a killed `new` leaves a
//! `creating` row that `gc` removes.

use super::{Ctx, container_name, now};
use airlock_cli::checkout::{self, Checkout, Operator};
use airlock_cli::cli::NewArgs;
use airlock_cli::engine::{LABEL_DATA, LABEL_SANDBOX};
use airlock_cli::flags::{Layout, RunSpec, Source};
use airlock_cli::names;
use airlock_cli::registry::{Sandbox, State};
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Duration;

/// How long the entrypoint may take to say `ready in`.
const READY_LIMIT: Duration = Duration::from_secs(90);

pub async fn run(ctx: &Ctx, a: &NewArgs) -> Result<i32> {
    names::validate_name(&a.name)?;
    let branch = a
        .branch
        .clone()
        .unwrap_or_else(|| names::default_branch(&a.name));
    names::validate_branch(&branch)?;
    let secrets = parse_secrets(&a.secrets)?;
    let policy = a
        .policy
        .as_ref()
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
    let op = checkout::operator(&a.repo)?;
    if op.dirty {
        eprintln!(
            "airlock: warning: {} has uncommitted changes; the sandbox starts from the last commit ({}), commit first to include them",
            op.top.display(),
            &op.head[..12.min(op.head.len())]
        );
    }
    let digest = ctx.engine.image_id(&ctx.image).await?;
    let t = now();
    let row = Sandbox {
        name: a.name.clone(),
        repository: op.top.display().to_string(),
        branch: branch.clone(),
        base: op.head.clone(),
        agent: a.agent.clone(),
        image: ctx.image.clone(),
        image_digest: digest.clone(),
        policy_hash,
        container_id: String::new(),
        created: t,
        last_seen: t,
        ttl_seconds: a.ttl,
        state: State::Creating,
    };
    ctx.registry.claim(&row)?;
    let ck = ctx.checkout(&a.name);
    match make(ctx, a, &op, &ck, &row, secrets, policy).await {
        Ok(ready) => {
            report(ctx, &a.name, a.json, ready)?;
            Ok(0)
        }
        Err(e) => {
            undo(ctx, &a.name, &ck).await;
            Err(e)
        }
    }
}

async fn make(
    ctx: &Ctx,
    a: &NewArgs,
    op: &Operator,
    ck: &Checkout,
    row: &Sandbox,
    secrets: Vec<(String, PathBuf)>,
    policy: Option<PathBuf>,
) -> Result<Duration> {
    if ck.dir.exists() {
        bail!(
            "{} exists without a registered sandbox (left by an interrupted run): `airlock gc` removes it",
            ck.dir.display()
        );
    }
    ck.create(op, &row.branch, &row.base)?;
    let layout = Layout {
        work_tree: ck.work_tree(),
        git_dir: Some(ck.git_dir()),
        shared_objects: Some(op.git_dir.join("objects")),
        audit: Source::Host(ck.audit()),
        secrets,
        policy,
    };
    let mut spec = RunSpec::documented(&ctx.image, &layout);
    spec.labels.push((LABEL_SANDBOX.into(), a.name.clone()));
    spec.labels
        .push((LABEL_DATA.into(), ctx.paths.data.display().to_string()));
    spec.command = a.command.clone();
    // A detached sandbox keeps a TTY and open stdin so an interactive agent (a shell) waits
    // for `attach` instead of reading end-of-file.
    spec.tty = true;
    let id = ctx.engine.create(&container_name(&a.name), &spec).await?;
    ctx.registry
        .set_container(&a.name, &id, &row.image_digest)?;
    ctx.engine.start(&id).await?;
    let ready = ctx.engine.wait_ready(&id, 1, READY_LIMIT).await?;
    if let Some(seen) = ctx.engine.inspect(&id).await? {
        ctx.registry.add_session(&a.name, &seen.started_at, now())?;
    }
    ctx.registry.set_state(&a.name, State::Running, now())?;
    Ok(ready)
}

/// Undo a failed `new`; each step is best effort, the first failure is already reported.
async fn undo(ctx: &Ctx, name: &str, ck: &Checkout) {
    let _ = ctx.engine.remove(&container_name(name)).await;
    if let Err(e) = ck.remove() {
        eprintln!("airlock: warning: {e}");
    }
    let _ = ctx.registry.remove(name);
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

/// `NAME=FILE` pairs: a lowercase name, an existing regular file (never a value).
fn parse_secrets(specs: &[String]) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for s in specs {
        let Some((name, file)) = s.split_once('=') else {
            bail!(
                "--secret {s:?} is not NAME=FILE: give the name and a host file holding the value (never the value itself)"
            );
        };
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            bail!(
                "--secret name {name:?} is not allowed: use lowercase letters, digits and '_' (e.g. github_token)"
            );
        }
        let path = std::fs::canonicalize(file)
            .with_context(|| format!("--secret {name}: cannot read the file {file}"))?;
        if !path.is_file() {
            bail!("--secret {name}: {} is not a regular file", path.display());
        }
        out.push((name.to_string(), path));
    }
    Ok(out)
}
