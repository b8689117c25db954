//! `list`, `status`, `logs`: the registry reconciled with what the engine really has.

use super::{Ctx, container_name, now};
use airlock_cli::admin::{self, Client};
use airlock_cli::checkout;
use airlock_cli::registry::{Sandbox, State};
use anyhow::Result;
use serde_json::{Value, json};
use std::io::Write;

/// Bring one row in line with the engine: a container gone behind our back is `missing`, a
/// running one is seen now, and a start the registry has not recorded is a new session
/// (a restart, by the engine or by hand).
pub async fn reconcile(ctx: &Ctx, row: Sandbox) -> Result<Sandbox> {
    if row.state == State::Creating {
        return Ok(row);
    }
    let id = if row.container_id.is_empty() {
        container_name(&row.name)
    } else {
        row.container_id.clone()
    };
    // When it was last seen running: now if it runs, when it stopped if it has.
    let (state, seen_at) = match ctx.engine.inspect(&id).await? {
        None => (State::Missing, now()),
        Some(seen) => {
            if !seen.started_at.is_empty() && !seen.started_at.starts_with("0001-") {
                ctx.registry
                    .add_session(&row.name, &seen.started_at, now())?;
            }
            if seen.running {
                (State::Running, now())
            } else {
                (State::Stopped, seen.finished.unwrap_or_else(now))
            }
        }
    };
    if state != row.state || state == State::Running {
        ctx.registry.set_state(&row.name, state, seen_at)?;
    }
    Ok(ctx.registry.get(&row.name)?.unwrap_or(row))
}

fn row_json(ctx: &Ctx, row: &Sandbox) -> Result<Value> {
    let mut v = serde_json::to_value(row)?;
    v["sessions"] = json!(ctx.registry.sessions(&row.name)?.len());
    Ok(v)
}

pub async fn list(ctx: &Ctx, as_json: bool) -> Result<i32> {
    let mut rows = Vec::new();
    for row in ctx.registry.list()? {
        rows.push(reconcile(ctx, row).await?);
    }
    let mut out = std::io::stdout().lock();
    if as_json {
        let v: Vec<Value> = rows
            .iter()
            .map(|r| row_json(ctx, r))
            .collect::<Result<_>>()?;
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "{:<20} {:<9} {:<28} {:>8}  REPOSITORY",
        "NAME", "STATE", "BRANCH", "SESSIONS"
    )?;
    for r in &rows {
        let sessions = ctx.registry.sessions(&r.name)?.len();
        writeln!(
            out,
            "{:<20} {:<9} {:<28} {:>8}  {}",
            r.name,
            r.state.as_str(),
            r.branch,
            sessions,
            r.repository
        )?;
    }
    Ok(0)
}

pub async fn status(ctx: &Ctx, name: &str, as_json: bool) -> Result<i32> {
    let row = reconcile(ctx, ctx.sandbox(name)?).await?;
    let ck = ctx.checkout(name);
    let top = std::path::Path::new(&row.repository);
    // Unfetched work: the sandbox's tip under the hidden ref, counted against every
    // branch, tag and remote-tracking ref of the operator's repository.
    let ahead = checkout::fetch(top, &ck, name, &row.branch, None)
        .and_then(|tip| checkout::ahead(top, &tip))
        .ok();
    let sessions = ctx.registry.sessions(name)?;
    // While it runs, what its proxy says; an image older than the admin API has no socket.
    let live = if row.state == State::Running {
        Some(admin::live::gather(&Client::new(name, &ck.control())).await)
    } else {
        None
    };
    if as_json {
        let mut v = row_json(ctx, &row)?;
        v["session_list"] = serde_json::to_value(&sessions)?;
        v["ahead"] = json!(ahead);
        v["admin"] = match &live {
            Some(Ok(l)) => serde_json::to_value(l)?,
            _ => Value::Null,
        };
        v["admin_error"] = match &live {
            Some(Err(e)) => json!(e.to_string()),
            _ => Value::Null,
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("name        {}", row.name);
    println!("state       {}", row.state.as_str());
    println!("repository  {}", row.repository);
    println!(
        "branch      {} (from {})",
        row.branch,
        &row.base[..12.min(row.base.len())]
    );
    println!("checkout    {}", ck.work_tree().display());
    println!("image       {} ({})", row.image, row.image_digest);
    println!("container   {}", row.container_id);
    match ahead {
        Some(n) => println!("unfetched   {n} commit(s)"),
        None => println!("unfetched   unknown (the sandbox's branch cannot be read)"),
    }
    println!(
        "sessions    {}{}",
        sessions.len(),
        if sessions.len() > 1 {
            " (restarted)"
        } else {
            ""
        }
    );
    for s in &sessions {
        println!("  {}", s.id);
    }
    match live {
        Some(Ok(l)) => {
            for line in admin::live::lines(&l) {
                println!("{line}");
            }
        }
        Some(Err(e)) => println!("admin       unavailable: {e}"),
        None => {}
    }
    Ok(0)
}

pub async fn logs(ctx: &Ctx, name: &str, tail: Option<u32>) -> Result<i32> {
    let row = ctx.sandbox(name)?;
    let bytes = ctx.engine.logs(&row.container_id, tail).await?;
    std::io::stdout().write_all(&bytes)?;
    Ok(0)
}
