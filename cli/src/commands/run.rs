//! `airlock run [PATH] [--agent NAME] [-- CMD]`: one session on a new sandbox, like
//! `docker run --rm -it`. A new sandbox on a new branch (`sandbox/<name>`); the operator's
//! terminal attached when there is one (raw, resized with it); at the end the branch is
//! fetched back into the repository at PATH and the sandbox (container, checkout, row) is
//! removed. Only when something would be lost is it kept, saying why: the branch could not be
//! fetched, or the work tree holds changes the agent did not commit.
//!
//! The sandbox is marked one-shot (registry and container label) and this process holds its
//! name's lock ([`airlock_cli::lock`]) to the end; if it is killed, `gc` (also the one
//! `run` and `new` do on their way) finishes its work once the container has stopped or gone:
//! the branch fetched back, then the sandbox removed, or kept when that would lose work.

use super::Ctx;
use super::lifecycle::{Ending, wind_up};
use super::new::{Plan, Wants, claim, create, record_start, undo};
use airlock_cli::cli::RunArgs;
use airlock_cli::engine::{Attached, Ended, Link};
use anyhow::Result;
use std::time::Duration;

pub async fn run(ctx: &Ctx, a: &RunArgs) -> Result<i32> {
    let name = match &a.name {
        Some(n) => n.clone(),
        None => generated_name(&a.agent)?,
    };
    let link = Link::detect();
    let plan = Plan::check(
        ctx,
        &Wants {
            name: &name,
            repo: &a.path,
            branch: None,
            agent: &a.agent,
            ttl: a.ttl,
            secrets: &a.secrets,
            policy: a.policy.as_deref(),
            command: &a.command,
            tty: link.tty.is_some(),
            oneshot: true,
            build_missing: a.place.build_missing,
            network: a.place.network.as_deref(),
            dns: &a.place.dns,
            upstream_ca: a.place.upstream_ca.as_deref(),
            extra_ca: a.place.extra_ca.as_deref(),
        },
    )?;
    super::gc::opportunistic(ctx).await;
    // The name's lock is held until the end: `gc` leaves this sandbox to us while we live,
    // and finishes it (branch back, then removed) if we are killed.
    let claimed = claim(ctx, &plan).await?;
    let id = match create(ctx, &plan, &claimed.op, &claimed.row).await {
        Ok(id) => id,
        Err(e) => {
            undo(ctx, &name, claimed.lock).await;
            return Err(e);
        }
    };
    // Without a terminal the container has no stdin (it reads end-of-file), as `docker run`
    // without `-i`.
    let link = Link {
        stdin: link.tty.is_some(),
        ..link
    };
    let attached = match ctx.engine.attach_open(&id, link).await {
        Ok(a) => a,
        Err(e) => {
            undo(ctx, &name, claimed.lock).await;
            return Err(e.into());
        }
    };
    if let Err(e) = ctx.engine.start(&id).await {
        undo(ctx, &name, claimed.lock).await;
        return Err(e.into());
    }
    // From here the agent may have worked: nothing is undone, a failure leaves the sandbox
    // to `airlock gc` (it fetches the branch back once the container stops).
    let kept = |e: anyhow::Error| {
        e.context(format!(
            "sandbox {name} is kept; once it stops, `airlock gc` fetches its branch back and removes it"
        ))
    };
    let code = match session(ctx, &name, &id, attached).await.map_err(kept)? {
        Some(code) => code,
        None => {
            eprintln!(
                "airlock: detached from {name}; it runs on: `airlock attach {name}`. When it stops, `airlock gc` fetches its branch back and removes it"
            );
            return Ok(0);
        }
    };
    match wind_up(ctx, &name).await.map_err(kept)? {
        Ending::Removed => claimed.lock.remove(),
        Ending::Kept(why) => eprintln!("airlock: sandbox {name} is kept (stopped): {why}"),
    }
    Ok(i32::try_from(code).unwrap_or(1))
}

/// `<agent>-<6 hex>`: a fresh name (the registry still refuses a collision).
fn generated_name(agent: &str) -> Result<String> {
    let mut b = [0u8; 3];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("cannot draw a random name: {e}"))?;
    let head: String = agent
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(20)
        .collect();
    let head = if head.starts_with(|c: char| c.is_ascii_lowercase()) {
        head
    } else {
        "run".into()
    };
    Ok(format!("{head}-{}", hex::encode(b)))
}

/// Record the start, copy the terminal until the container stops; its exit code, or `None`
/// on a detach (ctrl-p ctrl-q: it runs on). Ctrl-C without a terminal (with one it is a byte
/// for the agent) stops the container.
async fn session(ctx: &Ctx, name: &str, id: &str, attached: Attached) -> Result<Option<i64>> {
    record_start(ctx, name, id).await?;
    tokio::select! {
        r = attached.pump(&ctx.engine) => {
            if r? == Ended::Detached {
                return Ok(None);
            }
        }
        _ = tokio::signal::ctrl_c() => {
            eprintln!("airlock: stopping sandbox {name}");
            ctx.engine.stop(id, Duration::from_secs(10)).await?;
        }
    }
    let code = ctx.engine.wait_exit(id).await?;
    Ok(Some(code))
}
