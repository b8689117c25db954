//! `airlock approvals [NAME]`, `approvals show ID`, `approve ID`, `deny ID`, `revoke ID`: the operator's
//! inbox of asked hosts across the running sandboxes, answered out of band through each
//! sandbox's admin API (never through the agent's terminal).
//!
//! An item is named `ID` (its sandbox found by asking each running one) or `SANDBOX/ID`.

use super::Ctx;
use airlock_cli::admin::Client;
use airlock_cli::admin::live;
use airlock_cli::cli::{ApprovalsArgs, ApprovalsCmd, ApproveArgs, DenyArgs};
use airlock_cli::exit::{Code, Failure};
use airlock_cli::review::escape;
use airlock_control::admin::{AnswerRequest, Approval, ErrorCode};
use anyhow::Result;
use serde_json::{Value, json};

/// `airlock approvals …`.
pub async fn list(ctx: &Ctx, args: &ApprovalsArgs) -> Result<i32> {
    if let Some(ApprovalsCmd::Show { id, json }) = &args.show {
        return show(find(ctx, id).await?, *json).await;
    }
    let clients = || ctx.admins(args.name.as_deref());
    if args.watch {
        return watch(clients, args.notify.as_deref(), args.json).await;
    }
    inbox(clients()?, args.name.is_none(), args.json).await
}

/// How often `--watch` looks for sandboxes that started or stopped.
const WATCH_TICK: std::time::Duration = std::time::Duration::from_secs(2);

/// `approvals --watch [--notify CMD]`: each new pending item of the sandboxes `clients`
/// names (asked again every [`WATCH_TICK`]), printed once and handed to `notify`, until
/// ctrl-c. Items are learnt from each sandbox's event stream (its `approval-required`
/// lines) and from its inbox when it is first seen; each is looked up before it is said,
/// so only items still pending are.
pub async fn watch(
    mut clients: impl FnMut() -> Result<Vec<Client>>,
    notify: Option<&str>,
    as_json: bool,
) -> Result<i32> {
    use std::collections::{HashMap, HashSet};
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Client, String)>(256);
    let mut streams: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut said: HashSet<(String, String)> = HashSet::new();
    let mut ticker = tokio::time::interval(WATCH_TICK);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = ticker.tick() => {
                let now = clients()?;
                streams.retain(|name, task| {
                    let keep = now.iter().any(|c| c.name() == name);
                    if !keep { task.abort(); }
                    keep
                });
                for c in now {
                    if !streams.contains_key(c.name()) {
                        streams.insert(c.name().to_owned(), tokio::spawn(asked(c, tx.clone())));
                    }
                }
            }
            Some((client, id)) = rx.recv() => {
                if !said.insert((client.name().to_owned(), id.clone())) {
                    continue;
                }
                let Ok(a) = client.approval(&id).await else { continue };
                if a.state != "pending" {
                    continue;
                }
                if as_json {
                    println!("{}", serde_json::to_string(&with_sandbox(client.name(), &a))?);
                } else {
                    println!("{}", row(client.name(), &a));
                    details(&a, "    ");
                }
                if let Some(cmd) = notify {
                    run_notify(cmd, client.name(), &a);
                }
            }
        }
    }
    for t in streams.values() {
        t.abort();
    }
    Ok(0)
}

/// The ids of the items `client`'s sandbox files: those pending now, then each one its
/// event stream announces.
async fn asked(client: Client, tx: tokio::sync::mpsc::Sender<(Client, String)>) {
    use airlock_cli::audit_view::stream::{Item, Seen, StreamFollower};
    let since = airlock_audit_schema::Timestamp::now().0;
    if let Ok(items) = client.approvals().await {
        for a in items.into_iter().filter(|a| a.state == "pending") {
            if tx.send((client.clone(), a.id)).await.is_err() {
                return;
            }
        }
    }
    let query = airlock_control::admin::EventsQuery {
        reason: Some("approval-required".to_owned()),
        since_ms: Some(since),
        ..Default::default()
    };
    let mut f = StreamFollower::new(client.clone(), query, Seen::default());
    loop {
        let Item::Record(_, raw) = f.next().await else {
            continue;
        };
        let id = serde_json::from_str::<Value>(&raw)
            .ok()
            .and_then(|v| v["approval"].as_str().map(str::to_owned));
        if let Some(id) = id
            && tx.send((client.clone(), id)).await.is_err()
        {
            return;
        }
    }
}

/// Runs the operator's `--notify` command for item `a` (`sh -c`, on this host), the item
/// in its environment only; a failure is said, not fatal.
fn run_notify(cmd: &str, sandbox: &str, a: &Approval) {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("AIRLOCK_SANDBOX", sandbox)
        .env("AIRLOCK_APPROVAL_ID", &a.id)
        .env("AIRLOCK_SESSION", &a.session)
        .env("AIRLOCK_HOST", &a.host)
        .env("AIRLOCK_PORT", a.port.to_string())
        .env("AIRLOCK_SAID", a.said.as_deref().unwrap_or(""))
        .stdin(std::process::Stdio::null())
        .spawn();
    let id = a.id.clone();
    match child {
        Ok(mut c) => {
            tokio::spawn(async move {
                match c.wait().await {
                    Ok(s) if s.success() => {}
                    Ok(s) => eprintln!("airlock: --notify for {id} exited with {s}"),
                    Err(e) => eprintln!("airlock: --notify for {id}: {e}"),
                }
            });
        }
        Err(e) => eprintln!("airlock: --notify cannot run sh: {e}"),
    }
}

/// The inbox of `clients`' sandboxes (`every`: all the running ones, where one that does
/// not answer is said, not fatal).
pub async fn inbox(clients: Vec<Client>, every: bool, as_json: bool) -> Result<i32> {
    let mut rows: Vec<(String, Approval)> = Vec::new();
    for client in clients {
        let name = client.name().to_owned();
        match client.approvals().await {
            Ok(items) => rows.extend(items.into_iter().map(|a| (name.clone(), a))),
            Err(e) if every => eprintln!("airlock: {name}: {e}"),
            Err(e) => return Err(e.into()),
        }
    }
    if as_json {
        let v: Vec<Value> = rows.iter().map(|(n, a)| with_sandbox(n, a)).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no approvals: nothing asked for in the running sandboxes");
        return Ok(0);
    }
    let pending = rows.iter().filter(|(_, a)| a.state == "pending").count();
    println!("{pending} pending");
    for (name, a) in &rows {
        println!("{}", row(name, a));
        details(a, "    ");
    }
    Ok(0)
}

/// What the agent said it needs the host for (its own words, untrusted) and the notes.
fn details(a: &Approval, indent: &str) {
    for line in live::item_details(a) {
        println!("{indent}{line}");
    }
}

/// One item as a line ([`live::item_line`]).
fn row(name: &str, a: &Approval) -> String {
    live::item_line(name, a)
}

fn with_sandbox(name: &str, a: &Approval) -> Value {
    let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("sandbox".into(), json!(name));
    }
    v
}

/// `approvals show ID`: the item, what approving it lets through, and its token.
pub async fn show((client, a): (Client, Approval), as_json: bool) -> Result<i32> {
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&with_sandbox(client.name(), &a))?
        );
        return Ok(0);
    }
    println!("{}", row(client.name(), &a));
    match &a.rule {
        Some(rule) => println!(
            "  approving lets {} send {}:{} the requests the rule {} matches (--once: the next one; --session: every one)",
            a.session,
            escape(a.host.as_bytes()),
            a.port,
            escape(rule.as_bytes())
        ),
        None => println!(
            "  approving lets {} reach {}:{} (--once: its next connection; --session: every one; --always: every session's, kept until revoked)",
            a.session,
            escape(a.host.as_bytes()),
            a.port
        ),
    }
    details(&a, "  ");
    if let Some(t) = &a.token {
        println!("  token {t}");
    }
    Ok(0)
}

/// `approve ID --once | --session [--for SPAN] [--token T]`, or `approve --all [--sandbox
/// NAME]`.
pub async fn approve(ctx: &Ctx, args: &ApproveArgs) -> Result<i32> {
    let answer = approval(args)?;
    match (&args.id, args.all) {
        (Some(id), false) => respond(find(ctx, id).await?, answer).await,
        _ => approve_all(ctx.admins(args.sandbox.as_deref())?, answer).await,
    }
}

/// What `approve --all` does with an item, decided on the item as it is now (its notes
/// under the policy revision its review token binds).
#[derive(Debug, PartialEq, Eq)]
enum Bulk {
    /// Approved with its token.
    Answer,
    /// Listed and left pending: an item with a security note is approved by its id.
    LeaveForNote,
    /// Answered or gone since the inbox was read.
    Skip,
}

fn bulk(now: &Approval) -> Bulk {
    if now.state != "pending" {
        Bulk::Skip
    } else if !now.notes.is_empty() {
        Bulk::LeaveForNote
    } else {
        Bulk::Answer
    }
}

/// `approve --all`: `answer` to every pending item of `clients`' sandboxes that carries no
/// security note, each against its review token as it stands now; the items with notes are
/// listed and left pending (they are approved one by one, by id). The note is read from
/// the same view as the token: an item that gained a note since the inbox was read (a
/// reload made its host writable) is left, not approved with a fresh token.
pub async fn approve_all(clients: Vec<Client>, answer: AnswerRequest) -> Result<i32> {
    let (mut approved, mut left) = (0usize, 0usize);
    for client in clients {
        let items = match client.approvals().await {
            Ok(items) => items,
            Err(e) => {
                eprintln!("airlock: {}: {e}", client.name());
                continue;
            }
        };
        for a in items.into_iter().filter(|a| a.state == "pending") {
            // The item as it is now, with its token: an item that changes after this is
            // refused, not approved as something else.
            let Ok(shown) = client.approval(&a.id).await else {
                continue;
            };
            match bulk(&shown) {
                Bulk::Skip => continue,
                Bulk::LeaveForNote => {
                    left += 1;
                    println!("{}", row(client.name(), &shown));
                    details(&shown, "    ");
                    println!(
                        "    left pending: an item with a note is approved by its id (airlock approve {}/{} --once|--session)",
                        client.name(),
                        shown.id
                    );
                    continue;
                }
                Bulk::Answer => {}
            }
            let mut one = answer.clone();
            one.id = shown.id.clone();
            one.token = shown.token;
            match client.answer(one).await {
                Ok(done) => {
                    approved += 1;
                    println!("{}", row(client.name(), &done));
                }
                Err(e) => eprintln!("airlock: {}/{}: {e}", client.name(), a.id),
            }
        }
    }
    println!(
        "{approved} approved, {left} with a note left pending{}",
        if approved + left == 0 {
            " (nothing was pending)"
        } else {
            ""
        }
    );
    Ok(0)
}

/// `deny ID --reason R [--for SPAN] [--token T]`.
pub async fn deny(ctx: &Ctx, args: &DenyArgs) -> Result<i32> {
    let answer = denial(args)?;
    respond(find(ctx, &args.id).await?, answer).await
}

/// The answer `approve` sends.
pub fn approval(args: &ApproveArgs) -> Result<AnswerRequest> {
    let scope = if args.once {
        "once"
    } else if args.always {
        "always"
    } else {
        "session"
    };
    Ok(AnswerRequest {
        approve: true,
        scope: Some(scope.to_owned()),
        for_seconds: span(args.for_span.as_deref())?,
        token: args.token.clone(),
        ..AnswerRequest::default()
    })
}

/// The answer `deny` sends.
pub fn denial(args: &DenyArgs) -> Result<AnswerRequest> {
    Ok(AnswerRequest {
        approve: false,
        scope: args.always.then(|| "always".to_owned()),
        reason: Some(args.reason.clone()),
        for_seconds: span(args.for_span.as_deref())?,
        token: args.token.clone(),
        ..AnswerRequest::default()
    })
}

fn span(text: Option<&str>) -> Result<Option<u64>> {
    text.map(|t| {
        airlock_cli::span::parse(t)
            .map(|d| d.as_secs())
            .ok_or_else(|| {
                Failure::new(
                    Code::Usage,
                    format!("--for {t:?} is not a span (90s, 30m, 2h, 7d)"),
                )
                .into()
            })
    })
    .transpose()
}

/// Sends `answer` to the item found; prints the item as it left it.
pub async fn respond((client, item): (Client, Approval), mut answer: AnswerRequest) -> Result<i32> {
    for n in &item.notes {
        eprintln!("airlock: note: {}", escape(n.as_bytes()));
    }
    answer.id = item.id.clone();
    let a = match client.answer(answer).await {
        Ok(a) => a,
        Err(e) if e.code() == Some(ErrorCode::Conflict) => {
            return Err(Failure::new(Code::Refused, e.to_string()).into());
        }
        Err(e) => return Err(e.into()),
    };
    println!("{}", row(client.name(), &a));
    if a.scope.as_deref() == Some("always") {
        println!(
            "  a grant for every session, in the policy now and kept across restarts: `airlock policy show {}` lists it, `airlock revoke {}/{}` takes it back",
            client.name(),
            client.name(),
            a.id
        );
    }
    Ok(0)
}

/// `revoke ID`: the grant taken back in its sandbox (`SANDBOX/ID`), or in the running
/// sandbox that has it.
pub async fn revoke(ctx: &Ctx, id: &str) -> Result<i32> {
    let (clients, bare) = match id.split_once('/') {
        Some((name, bare)) => (ctx.admins(Some(name))?, bare),
        None => (ctx.admins(None)?, id),
    };
    revoke_in(clients, bare, id).await
}

/// Takes back the grant `bare` in the first of `clients`' sandboxes that has it (`id` as
/// the operator wrote it).
pub async fn revoke_in(clients: Vec<Client>, bare: &str, id: &str) -> Result<i32> {
    for client in clients {
        match client.revoke(bare).await {
            Ok(r) => {
                println!(
                    "{}: grant {bare} revoked: policy revision {} ({}); {} open connections it refuses closed",
                    client.name(),
                    r.revision,
                    &r.hash[..r.hash.len().min(12)],
                    r.closed
                );
                return Ok(0);
            }
            Err(e) if e.code() == Some(ErrorCode::NotFound) || e.is_not_running() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Failure::new(
        Code::NotFound,
        format!(
            "no grant {id} in a running sandbox (`airlock policy show NAME` lists the grants with their ids)"
        ),
    )
    .into())
}

/// The item `id` (`ID`, `SANDBOX/ID` or `k8s:NAMESPACE/POD/ID`) and the client of its
/// sandbox.
async fn find(ctx: &Ctx, id: &str) -> Result<(Client, Approval)> {
    let (clients, bare) = match id.split_once('/') {
        Some((name, bare)) => (ctx.admins(Some(name))?, bare),
        None => (ctx.admins(None)?, id),
    };
    find_in(clients, bare, id).await
}

/// The item `bare` among `clients`' sandboxes (`id` as the operator wrote it).
pub async fn find_in(clients: Vec<Client>, bare: &str, id: &str) -> Result<(Client, Approval)> {
    for client in clients {
        match client.approval(bare).await {
            Ok(a) => return Ok((client, a)),
            Err(e) if e.code() == Some(ErrorCode::NotFound) || e.is_not_running() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Failure::new(
        Code::NotFound,
        format!("no approval {id} in a running sandbox (`airlock approvals` lists them)"),
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(state: &str, notes: &[&str]) -> Approval {
        serde_json::from_value(json!({
            "id": "0a0b0c0d", "session": "uid 1000", "host": "api.example", "port": 443,
            "hits": 1, "first_ms": 1, "last_ms": 1, "state": state,
            "notes": notes, "token": "feedface00112233",
        }))
        .unwrap()
    }

    #[test]
    fn approve_all_decides_on_the_item_as_it_is_now() {
        assert_eq!(bulk(&item("pending", &[])), Bulk::Answer);
        // Listed without a note, shown with one (a reload made the host writable): left.
        assert_eq!(
            bulk(&item("pending", &["approving lets the session write"])),
            Bulk::LeaveForNote
        );
        assert_eq!(bulk(&item("approved", &[])), Bulk::Skip);
    }
}
