//! `airlock gc`: remove what nobody will come back for, never unfetched work silently.
//!
//! A sandbox whose name lock ([`airlock_cli::lock`]) is held belongs to a live `new` or
//! `run` and is left alone. Of the others:
//!
//! - a `run`'s one-shot sandbox whose container has stopped or gone (the `run` was killed,
//!   or detached) is finished as `run` would have: its branch fetched back into the
//!   operator's repository, then the sandbox removed, or kept, with the reason, when the
//!   branch cannot be fetched or the work tree holds changes the agent did not commit; one
//!   still running is kept (`airlock attach`);
//! - a `creating` row older than [`STALE_CREATING`] seconds (a `new` that was killed) is
//!   removed with whatever it made;
//! - a stopped or missing sandbox past its TTL is removed if its branch holds no commit the
//!   operator's repository lacks, and kept (with the reason) otherwise;
//! - a container labelled with this data directory, and a sandbox directory, with no row
//!   are removed (left by a `new` killed part-way: the engine finishes a create whose client
//!   has gone, so such a container may appear just after a `gc`; the next one removes it).
//!
//! - a volume labelled with this data directory (an agent's home, a sandbox's secrets) with
//!   no row is removed, like such a container;
//! - kept audit logs of removed sandboxes older than 30 days are removed;
//!
//! - an object store of a base (`checkout::store`) that no sandbox links and none was made
//!   on for [`STORE_GRACE`] is removed.
//!
//! `run` and `new` do the same on their way ([`opportunistic`]), but for the `creating` rows
//! and the rowless leftovers, which only an explicit `gc` takes.

use super::lifecycle::{Ending, remove_all, unfetched, wind_up};
use super::view::reconcile;
use super::{Ctx, now};
use airlock_cli::checkout::Checkout;
use airlock_cli::lock::NameLock;
use airlock_cli::registry::{Sandbox, State, expired};
use anyhow::{Context, Result};
use serde::Serialize;

/// How old a `creating` row must be before `gc` takes it for an interrupted `new`
/// (`AIRLOCK_GC_CREATING_GRACE` seconds overrides it; the tests use 0).
pub const STALE_CREATING: i64 = 600;

/// How long an object store no sandbox uses is kept (seconds), so that a `run` after a
/// `run` on the same base finds it (`AIRLOCK_GC_STORE_GRACE` overrides it; the tests use 0).
pub const STORE_GRACE: u64 = 24 * 3600;

fn store_grace() -> std::time::Duration {
    std::time::Duration::from_secs(
        std::env::var("AIRLOCK_GC_STORE_GRACE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(STORE_GRACE),
    )
}

fn creating_grace() -> i64 {
    std::env::var("AIRLOCK_GC_CREATING_GRACE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(STALE_CREATING)
}

#[derive(Debug, Default, Serialize)]
struct Outcome {
    removed: Vec<Item>,
    kept: Vec<Item>,
}

#[derive(Debug, Serialize)]
struct Item {
    name: String,
    reason: String,
}

/// What one pass looks at.
#[derive(Debug, Clone, Copy)]
struct Pass {
    dry_run: bool,
    /// `creating` rows and rowless containers and directories too (explicit `gc` only).
    leftovers: bool,
}

pub async fn run(ctx: &Ctx, dry_run: bool, as_json: bool) -> Result<i32> {
    let out = pass(
        ctx,
        Pass {
            dry_run,
            leftovers: true,
        },
    )
    .await?;
    print(&out, dry_run, as_json)?;
    Ok(0)
}

/// The `gc` that `run` and `new` do first: killed `run`s finished, expired sandboxes
/// removed, one stderr line each; a failure is a warning, never the command's.
pub async fn opportunistic(ctx: &Ctx) {
    let p = Pass {
        dry_run: false,
        leftovers: false,
    };
    match pass(ctx, p).await {
        Ok(out) => {
            for i in &out.removed {
                eprintln!("airlock: gc: removed {}: {}", i.name, i.reason);
            }
        }
        Err(e) => eprintln!("airlock: warning: gc: {e:#}"),
    }
}

async fn pass(ctx: &Ctx, p: Pass) -> Result<Outcome> {
    // Directories first: one made after this listing has its row in the next one.
    let dirs = sandbox_dirs(ctx);
    let mut out = Outcome::default();
    for row in ctx.registry.list()? {
        // A live `new` or `run` holds the name: its sandbox is its own business.
        let Some(lock) = NameLock::try_take(&ctx.paths.data, &row.name)
            .with_context(|| format!("cannot lock the name {:?}", row.name))?
        else {
            continue;
        };
        one(ctx, p, row, lock, &mut out).await?;
    }
    if !p.dry_run {
        sweep_stores(ctx, &mut out)?;
    }
    for name in super::audit::sweep(ctx, p.dry_run) {
        out.removed.push(Item {
            name: format!("audit {name}"),
            reason: format!(
                "the audit logs of a removed sandbox, older than {} days",
                super::audit::KEEP_DAYS
            ),
        });
    }
    if !p.leftovers {
        return Ok(out);
    }
    for (id, name) in ctx
        .engine
        .labelled(&ctx.paths.data.display().to_string())
        .await?
    {
        if ctx.registry.get(&name)?.is_none() {
            out.removed.push(Item {
                name,
                reason: "a container with no sandbox".into(),
            });
            if !p.dry_run {
                ctx.engine.remove(&id).await?;
            }
        }
    }
    for (volume, name) in ctx
        .engine
        .volumes_of(&ctx.paths.data.display().to_string())
        .await?
    {
        if ctx.registry.get(&name)?.is_none() {
            // A container the engine created after the pass above (it finishes the create of
            // a `new` that was killed) may hold it: kept, for the next gc to remove with it.
            if !p.dry_run && !ctx.engine.remove_volume_if_unused(&volume).await? {
                out.kept.push(Item {
                    name: volume,
                    reason: "a volume with no sandbox, in use by a container created meanwhile: the next gc removes both".into(),
                });
                continue;
            }
            out.removed.push(Item {
                name: volume,
                reason: "a volume with no sandbox".into(),
            });
        }
    }
    for dir in dirs {
        // (one whose sandbox this pass removed is gone already)
        if ctx.registry.get(&dir)?.is_none() && ctx.paths.sandbox(&dir).exists() {
            out.removed.push(Item {
                name: dir.clone(),
                reason: "a checkout with no sandbox".into(),
            });
            if !p.dry_run {
                Checkout {
                    dir: ctx.paths.sandbox(&dir),
                }
                .remove()?;
            }
        }
    }
    Ok(out)
}

/// Judge one sandbox whose name lock we hold.
async fn one(ctx: &Ctx, p: Pass, row: Sandbox, lock: NameLock, out: &mut Outcome) -> Result<()> {
    let row = reconcile(ctx, row).await?;
    let item = |reason: String| Item {
        name: row.name.clone(),
        reason,
    };
    if row.state == State::Creating {
        if p.leftovers && now() - row.created >= creating_grace() {
            out.removed.push(item(format!(
                "an interrupted `{}`",
                if row.oneshot { "run" } else { "new" }
            )));
            if !p.dry_run {
                remove_all(ctx, &row).await?;
                lock.remove();
            }
        }
        return Ok(());
    }
    if row.oneshot {
        let how = match row.state {
            State::Running => {
                out.kept.push(item(format!(
                    "a `run` whose session ended without it (killed or detached) while the agent still runs: `airlock attach {}`; once it stops, gc fetches its branch back",
                    row.name
                )));
                return Ok(());
            }
            State::Missing => "its container is gone",
            _ => "its container stopped",
        };
        if p.dry_run {
            out.removed.push(item(format!(
                "an interrupted `run` ({how}): its branch would be fetched back first"
            )));
            return Ok(());
        }
        match wind_up(ctx, &row.name).await? {
            Ending::Removed => {
                out.removed.push(item(format!(
                    "an interrupted `run` ({how}): its branch {} is fetched back",
                    row.branch
                )));
                lock.remove();
            }
            Ending::Kept(why) => {
                out.kept
                    .push(item(format!("an interrupted `run` ({how}): {why}")));
            }
        }
        return Ok(());
    }
    if !expired(&row, now()) {
        return Ok(());
    }
    match unfetched(&row, ctx) {
        Some(0) => {
            out.removed
                .push(item(format!("{} past its TTL", row.state.as_str())));
            if !p.dry_run {
                remove_all(ctx, &row).await?;
                lock.remove();
            }
        }
        Some(n) => out.kept.push(item(format!(
            "past its TTL but holds {n} unfetched commit(s): `airlock fetch {}`",
            row.name
        ))),
        None => out.kept.push(item(format!(
            "past its TTL but its branch cannot be read: check it, then `airlock destroy {} --force`",
            row.name
        ))),
    }
    Ok(())
}

/// Remove the object stores no sandbox links (directly or through a chain) once idle for
/// the grace; under the stores' lock, so no `new` is between making and linking one.
fn sweep_stores(ctx: &Ctx, out: &mut Outcome) -> Result<()> {
    let stores = ctx.stores();
    if !stores.dir.exists() {
        return Ok(());
    }
    let _held = stores.lock()?;
    let live: Vec<_> = sandbox_dirs(ctx)
        .iter()
        .filter_map(|d| ctx.checkout(d).store(&stores))
        .collect();
    for name in stores.sweep(&live, store_grace())? {
        out.removed.push(Item {
            name: format!("store {name}"),
            reason: "an object store no sandbox uses".into(),
        });
    }
    Ok(())
}

fn sandbox_dirs(ctx: &Ctx) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(ctx.paths.data.join("sandboxes")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

fn print(out: &Outcome, dry_run: bool, as_json: bool) -> Result<()> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(out)?);
        return Ok(());
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for i in &out.removed {
        println!("{verb} {}: {}", i.name, i.reason);
    }
    for i in &out.kept {
        println!("kept {}: {}", i.name, i.reason);
    }
    if out.removed.is_empty() && out.kept.is_empty() {
        println!("nothing to collect");
    }
    Ok(())
}
