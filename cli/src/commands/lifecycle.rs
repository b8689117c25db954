//! `exec`, `attach`, `stop`, `start`, `destroy`, `fetch`.

use super::view::reconcile;
use super::{Ctx, now};
use airlock_cli::checkout;
use airlock_cli::engine::{Ended, Link, Role, volumes};
use airlock_cli::exit::{Code, Failure};
use airlock_cli::lock::NameLock;
use airlock_cli::registry::{Sandbox, State};
use airlock_cli::review;
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;

async fn running(ctx: &Ctx, name: &str) -> Result<Sandbox> {
    let row = reconcile(ctx, ctx.sandbox(name)?).await?;
    if row.state != State::Running {
        return Err(Failure::new(
            Code::Failure,
            format!(
                "sandbox {name} is {}: `airlock start {name}` first",
                row.state.as_str()
            ),
        )
        .into());
    }
    Ok(row)
}

/// `exec`: a confined session of the agent (`airlock-entrypoint __session`), never a plain
/// engine exec (that would be root with `NET_ADMIN`).
pub async fn exec(ctx: &Ctx, name: &str, cmd: &[String]) -> Result<i32> {
    let row = running(ctx, name).await?;
    let code = ctx
        .engine
        .session(&row.container_id, cmd, Link::detect())
        .await?;
    Ok(i32::try_from(code).unwrap_or(1))
}

/// `attach`: the agent's terminal until it exits or the operator detaches (ctrl-p ctrl-q);
/// exits with the agent's status when it ended, 0 on a detach.
pub async fn attach(ctx: &Ctx, name: &str) -> Result<i32> {
    let row = running(ctx, name).await?;
    let link = Link::detect();
    if link.tty.is_some() {
        eprintln!("airlock: attached to {name}; detach with ctrl-p ctrl-q\r");
    }
    if ctx.engine.attach(&row.container_id, link).await? == Ended::Detached {
        return Ok(0);
    }
    // The output ended without a detach: the agent exited and the container is stopping
    // (or the engine dropped the stream: then it is reported as it is, without waiting).
    let waited = tokio::time::timeout(
        Duration::from_secs(3),
        ctx.engine.wait_exit(&row.container_id),
    )
    .await;
    let code = match waited {
        Ok(code) => code?,
        Err(_) => 0,
    };
    reconcile(ctx, ctx.sandbox(name)?).await?;
    Ok(i32::try_from(code).unwrap_or(1))
}

/// Fetch the sandbox's branch back as the same branch of the operator's repository; print
/// what came back. A branch the operator changed is not overwritten (git's fast-forward rule).
pub async fn fetch(ctx: &Ctx, name: &str) -> Result<i32> {
    for line in fetch_summary(ctx, name)? {
        println!("{line}");
    }
    Ok(0)
}

/// Fetch the branch back; the lines to show: first the paths that can run something on the
/// operator's machine (every one, escaped), then where the branch is.
pub fn fetch_summary(ctx: &Ctx, name: &str) -> Result<Vec<String>> {
    let row = ctx.sandbox(name)?;
    let top = Path::new(&row.repository);
    let ck = ctx.checkout(name);
    // Nothing moved and no branch of that name yet: none is made (the repository already
    // has every commit of it).
    let unmoved = checkout::refs::branch_tip(&ck.git_dir(), &row.branch)? == row.base;
    if unmoved && !checkout::has_branch(top, &row.branch)? {
        return Ok(vec![format!(
            "{name}: no commit since {}, so no branch {} was made",
            short(&row.base),
            row.branch
        )]);
    }
    let tip = checkout::fetch(top, &ck, name, &row.branch, Some(&row.branch))?;
    let (changes, tree) = checkout::range::brought(top, &row.base, &tip).with_context(|| {
        format!(
            "{} came back, but what it brings cannot be listed",
            row.branch
        )
    })?;
    let mut lines = review::lines(&review::review(&changes, &tree));
    let paths: std::collections::BTreeSet<&[u8]> =
        changes.iter().map(|c| c.path.as_slice()).collect();
    lines.push(format!(
        "{}: {} is at {} ({} path(s) changed since {})",
        name,
        row.branch,
        short(&tip),
        paths.len(),
        short(&row.base)
    ));
    Ok(lines)
}

fn short(sha: &str) -> &str {
    &sha[..12.min(sha.len())]
}

pub async fn stop(ctx: &Ctx, name: &str) -> Result<i32> {
    let row = ctx.sandbox(name)?;
    ctx.engine
        .stop(&row.container_id, Duration::from_secs(10))
        .await?;
    ctx.registry.set_state(name, State::Stopped, now())?;
    if let Err(e) = fetch(ctx, name).await {
        eprintln!("airlock: warning: the branch was not fetched back: {e:#}");
    }
    println!("sandbox {name} stopped; its checkout and branch are kept");
    Ok(0)
}

pub async fn start(ctx: &Ctx, name: &str) -> Result<i32> {
    let row = ctx.sandbox(name)?;
    if ctx.engine.inspect(&row.container_id).await?.is_none() {
        return Err(Failure::new(
            Code::Failure,
            format!("the container of sandbox {name} is gone: `airlock destroy {name}` (the checkout holds its work until then)"),
        )
        .into());
    }
    let control = ctx.checkout(name).control();
    if !control.is_dir() {
        return Err(Failure::new(
            Code::Failure,
            format!("sandbox {name} was made by an older airlock, without a control directory ({}): `airlock fetch {name}`, then `airlock destroy {name}` and create it again", control.display()),
        )
        .into());
    }
    // The record of the last start goes first: what is read after the start is this one's.
    airlock_cli::engine::ready::clear(&control)?;
    ctx.engine.start(&row.container_id).await?;
    let (ready, _) = ctx
        .engine
        .wait_ready(&row.container_id, &control, Duration::from_secs(90))
        .await?;
    reconcile(ctx, ctx.sandbox(name)?).await?;
    let sessions = ctx.registry.sessions(name)?.len();
    println!(
        "sandbox {name} ready in {} ms (session {sessions})",
        ready.as_millis()
    );
    Ok(0)
}

/// How many commits only the sandbox has; `None` when its branch cannot be read.
pub fn unfetched(row: &Sandbox, ctx: &Ctx) -> Option<u64> {
    let top = Path::new(&row.repository);
    let tip = checkout::fetch(top, &ctx.checkout(&row.name), &row.name, &row.branch, None).ok()?;
    checkout::ahead(top, &tip).ok()
}

/// Remove container, the agent's home and the secrets (volumes), checkout, hidden ref and
/// row. The audit log is kept ([`super::audit::keep`]).
pub async fn remove_all(ctx: &Ctx, row: &Sandbox) -> Result<()> {
    if !row.container_id.is_empty() {
        ctx.engine.remove(&row.container_id).await?;
    }
    ctx.engine.remove(&super::container_name(&row.name)).await?;
    ctx.engine.remove(&volumes::setup_name(&row.name)).await?;
    for role in [Role::Home, Role::Secrets] {
        let volume = role.volume(&row.name);
        if !ctx.engine.remove_volume_if_unused(&volume).await? {
            // The engine finished the create of a killed `new` after the removal above: its
            // container holds the volume now. Remove it, then the volume.
            ctx.engine.remove(&super::container_name(&row.name)).await?;
            ctx.engine.remove_volume(&volume).await?;
        }
    }
    super::audit::keep(ctx, row).await;
    ctx.checkout(&row.name).remove()?;
    let _ = checkout::drop_tip(Path::new(&row.repository), &row.name);
    ctx.registry.remove(&row.name)?;
    Ok(())
}

/// How a one-shot sandbox's session was wound up.
#[derive(Debug)]
pub enum Ending {
    /// Its branch came back and the sandbox is gone.
    Removed,
    /// It is kept; why, and what to do.
    Kept(String),
}

/// The end of a `run` (or, when the `run` was killed, of `gc`): bring the branch back (the
/// fetch's lines on stderr), then remove the sandbox unless that would lose something: a
/// branch that could not be fetched, or changes the agent did not commit. A kept sandbox is
/// no longer one-shot: from then on it is an ordinary one (`gc` says so once).
pub async fn wind_up(ctx: &Ctx, name: &str) -> Result<Ending> {
    let ending = wind_up_inner(ctx, name).await?;
    if let Ending::Kept(_) = ending {
        ctx.registry.set_oneshot(name, false)?;
    }
    Ok(ending)
}

async fn wind_up_inner(ctx: &Ctx, name: &str) -> Result<Ending> {
    let row = reconcile(ctx, ctx.sandbox(name)?).await?;
    let lines = match fetch_summary(ctx, name) {
        Ok(lines) => lines,
        Err(e) => {
            return Ok(Ending::Kept(format!(
                "its branch could not be fetched back ({e:#}); `airlock fetch {name}` retries, `airlock destroy {name}` removes it"
            )));
        }
    };
    for l in lines {
        eprintln!("airlock: {l}");
    }
    let ck = ctx.checkout(name);
    let then = if row.state == State::Missing {
        format!(
            "copy what you need from {}, then `airlock destroy {name} --force`",
            ck.work_tree().display()
        )
    } else {
        format!("`airlock start {name}` and commit them, or `airlock destroy {name} --force`")
    };
    match ck.uncommitted(&row.branch) {
        Ok(false) => {
            remove_all(ctx, &row).await?;
            Ok(Ending::Removed)
        }
        Ok(true) => Ok(Ending::Kept(format!(
            "{} holds changes the agent did not commit; {then}",
            ck.work_tree().display()
        ))),
        Err(e) => Ok(Ending::Kept(format!(
            "its work tree cannot be checked ({e}); `airlock destroy {name} --force` removes it"
        ))),
    }
}

pub async fn destroy(ctx: &Ctx, name: &str, force: bool) -> Result<i32> {
    let row = ctx.sandbox(name)?;
    if !force {
        let refuse = |why: String| -> anyhow::Error {
            Failure::new(Code::Refused, format!("sandbox {name} {why}: `airlock fetch {name}` brings it back, or `airlock destroy {name} --force` loses it")).into()
        };
        match unfetched(&row, ctx) {
            Some(0) => {}
            Some(n) => {
                return Err(refuse(format!(
                    "holds {n} commit(s) your repository does not have"
                )));
            }
            None => {
                return Err(refuse(
                    "has a branch that cannot be read, so its work cannot be checked".into(),
                ));
            }
        }
    }
    // The name's lock, when no `new` or `run` holds it, goes with the sandbox.
    let lock = NameLock::try_take(&ctx.paths.data, name).ok().flatten();
    remove_all(ctx, &row).await?;
    if let Some(lock) = lock {
        lock.remove();
    }
    println!("sandbox {name} destroyed");
    Ok(0)
}
