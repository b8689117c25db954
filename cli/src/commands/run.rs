//! `airlock run [PATH] [--agent NAME] [-- CMD]`: one session on a new sandbox, like
//! `docker run --rm -it`. A new sandbox on a new branch (`sandbox/<name>`); the operator's
//! terminal attached when there is one (raw, resized with it); at the end the branch is
//! fetched back into the repository at PATH and the sandbox (container, checkout, row) is
//! removed. Only when something would be lost is it kept, saying why: the branch could not be
//! fetched, or the work tree holds changes the agent did not commit.

use super::Ctx;
use super::lifecycle::{fetch_summary, remove_all};
use super::new::{Plan, Wants, claim, create, record_start, undo};
use super::view::reconcile;
use airlock_cli::cli::RunArgs;
use airlock_cli::engine::Link;
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
        },
    )?;
    let (op, row) = claim(ctx, &plan).await?;
    let id = match create(ctx, &plan, &op, &row).await {
        Ok(id) => id,
        Err(e) => {
            undo(ctx, &name).await;
            return Err(e);
        }
    };
    // Without a terminal the container has no stdin (it reads end-of-file), as `docker run`
    // without `-i`.
    let link = Link {
        stdin: link.tty.is_some(),
        ..link
    };
    let code = match session(ctx, &name, &id, link).await {
        Ok(code) => code,
        Err(e) => {
            undo(ctx, &name).await;
            return Err(e);
        }
    };
    finish(ctx, &name).await?;
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

/// Attach, start, copy the terminal until the container stops; its exit code. Ctrl-C
/// without a terminal (with one it is a byte for the agent) stops the container.
async fn session(ctx: &Ctx, name: &str, id: &str, link: Link) -> Result<i64> {
    let attached = ctx.engine.attach_open(id, link).await?;
    ctx.engine.start(id).await?;
    record_start(ctx, name, id).await?;
    tokio::select! {
        r = attached.pump(&ctx.engine) => r?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("airlock: stopping sandbox {name}");
            ctx.engine.stop(id, Duration::from_secs(10)).await?;
        }
    }
    let code = ctx.engine.wait_exit(id).await?;
    Ok(code)
}

/// Bring the branch back, then remove the sandbox unless that would lose something.
async fn finish(ctx: &Ctx, name: &str) -> Result<()> {
    let row = reconcile(ctx, ctx.sandbox(name)?).await?;
    let lines = match fetch_summary(ctx, name) {
        Ok(lines) => lines,
        Err(e) => {
            eprintln!(
                "airlock: sandbox {name} is kept: its branch could not be fetched back ({e:#}); `airlock fetch {name}` retries, `airlock destroy {name}` removes it"
            );
            return Ok(());
        }
    };
    for l in lines {
        eprintln!("airlock: {l}");
    }
    let ck = ctx.checkout(name);
    match ck.uncommitted() {
        Ok(false) => {
            remove_all(ctx, &row).await?;
            Ok(())
        }
        Ok(true) => {
            eprintln!(
                "airlock: sandbox {name} is kept (stopped): {} holds changes the agent did not commit; `airlock start {name}` and commit them, or `airlock destroy {name} --force`",
                ck.work_tree().display()
            );
            Ok(())
        }
        Err(e) => {
            eprintln!(
                "airlock: sandbox {name} is kept (stopped): its work tree cannot be checked ({e}); `airlock destroy {name} --force` removes it"
            );
            Ok(())
        }
    }
}
