//! `airlock gc`: remove what nobody will come back for, never unfetched work silently.
//!
//! - a `creating` row older than [`STALE_CREATING`] seconds (a `new` that was killed) is removed with
//!   whatever it made;
//! - a stopped or missing sandbox past its TTL is removed if its branch holds no commit the
//!   operator's repository lacks, and kept (with the reason) otherwise;
//! - a container labelled with this data directory, and a sandbox directory, with no row
//!   are removed (left by a `new` killed part-way: the engine finishes a create whose client
//!   has gone, so such a container may appear just after a `gc`; the next one removes it).

use super::lifecycle::{remove_all, unfetched};
use super::view::reconcile;
use super::{Ctx, now};
use airlock_cli::checkout::Checkout;
use airlock_cli::registry::{State, expired};
use anyhow::Result;
use serde::Serialize;

/// How old a `creating` row must be before `gc` takes it for an interrupted `new`
/// (`AIRLOCK_GC_CREATING_GRACE` seconds overrides it; the tests use 0).
pub const STALE_CREATING: i64 = 600;

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

pub async fn run(ctx: &Ctx, dry_run: bool, as_json: bool) -> Result<i32> {
    // Directories first: one made after this listing has its row in the next one.
    let dirs = sandbox_dirs(ctx);
    let mut out = Outcome::default();
    let t = now();
    for row in ctx.registry.list()? {
        let row = reconcile(ctx, row).await?;
        let item = |reason: String| Item {
            name: row.name.clone(),
            reason,
        };
        if row.state == State::Creating {
            if t - row.created >= creating_grace() {
                out.removed.push(item("an interrupted `new`".into()));
                if !dry_run {
                    remove_all(ctx, &row).await?;
                }
            }
            continue;
        }
        if !expired(&row, t) {
            continue;
        }
        match unfetched(&row, ctx) {
            Some(0) => {
                out.removed.push(item(format!("{} past its TTL", row.state.as_str())));
                if !dry_run {
                    remove_all(ctx, &row).await?;
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
            if !dry_run {
                ctx.engine.remove(&id).await?;
            }
        }
    }
    for dir in dirs {
        if ctx.registry.get(&dir)?.is_none() {
            out.removed.push(Item {
                name: dir.clone(),
                reason: "a checkout with no sandbox".into(),
            });
            if !dry_run {
                Checkout {
                    dir: ctx.paths.sandbox(&dir),
                }
                .remove()?;
            }
        }
    }
    print(&out, dry_run, as_json)?;
    Ok(0)
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
