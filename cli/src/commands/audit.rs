//! A sandbox's audit logs outlive it: when a sandbox is removed (`destroy`, the end of a
//! `run`, `gc`), its audit directory (the proxy's `audit.jsonl`, the git API's
//! `git-api.jsonl`, `airlock.log`, with their rotated files) moves to
//! `<data>/audit/<name>-<created>/`, where `airlock logs NAME --audit` still finds it.
//! `gc` removes kept logs older than [`KEEP_DAYS`] days. `airlock audit verify` checks the
//! proxy's log's hash chain in files, wherever they are (no engine, no container).

use super::Ctx;
use airlock_audit_schema::chain;
use airlock_cli::admin::Client;
use airlock_cli::audit_view::follow::Follower;
use airlock_cli::audit_view::stream::{self, Seen, StreamFollower};
use airlock_cli::audit_view::{self, Source, View};
use airlock_cli::cli::{AuditArgs, AuditCmd, LogsArgs};
use airlock_cli::exit::{Code, Failure};
use airlock_cli::registry::Sandbox;
use airlock_control::admin::{EventsQuery, Log};
use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// How long a removed sandbox's audit logs are kept (days).
pub const KEEP_DAYS: u64 = 30;

/// The directory of the kept audit logs.
fn kept_dir(ctx: &Ctx) -> PathBuf {
    ctx.paths.data.join("audit")
}

/// Move the audit directory of `row` (about to be removed) to the kept logs. A CLI that is
/// not root may not move it (it belongs to the proxy's user): the engine does, as root in
/// a throwaway container of the sandbox's image. A failure is a warning: the removal goes on.
pub async fn keep(ctx: &Ctx, row: &Sandbox) {
    let from = ctx.checkout(&row.name).audit();
    if !from.is_dir() {
        return;
    }
    let kept = format!("{}-{}", row.name, row.created);
    let to = kept_dir(ctx).join(&kept);
    let mut moved = std::fs::create_dir_all(kept_dir(ctx))
        .and_then(|()| std::fs::rename(&from, &to))
        .map_err(|e| e.to_string());
    if moved.is_err() && !nix::unistd::geteuid().is_root() {
        let data = ctx.paths.data.display().to_string();
        let src = format!("/d/sandboxes/{}/audit", row.name);
        let dst = format!("/d/audit/{kept}");
        moved = match ctx
            .engine
            .as_root_in(&data, &row.name, &row.image, &data, &["mv", &src, &dst])
            .await
        {
            Ok(0) => Ok(()),
            Ok(code) => Err(format!("mv in a container of {} exited {code}", row.image)),
            Err(e) => Err(e.to_string()),
        };
    }
    if let Err(e) = moved {
        eprintln!(
            "airlock: warning: the audit logs of {} could not be kept ({e}); they go with the sandbox",
            row.name
        );
    }
}

/// The audit directories of `name`: the live sandbox's first (if any), then the kept ones,
/// newest first.
pub fn dirs_of(ctx: &Ctx, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let live = ctx.checkout(name).audit();
    if live.is_dir() {
        out.push(live);
    }
    let mut kept: Vec<(i64, PathBuf)> = std::fs::read_dir(kept_dir(ctx))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let created = file.strip_prefix(name)?.strip_prefix('-')?.parse().ok()?;
            Some((created, e.path()))
        })
        .collect();
    kept.sort_by_key(|k| std::cmp::Reverse(k.0));
    out.extend(kept.into_iter().map(|(_, p)| p));
    out
}

/// The audit directory of the live sandbox `name`, else the newest kept one of that name.
fn latest_dir(ctx: &Ctx, name: &str) -> Result<PathBuf> {
    dirs_of(ctx, name).into_iter().next().ok_or_else(|| {
        Failure::new(
            Code::NotFound,
            format!(
                "no audit logs of a sandbox named {name:?} (kept {KEEP_DAYS} days after it is removed, in {})",
                kept_dir(ctx).display()
            ),
        )
        .into()
    })
}

/// `airlock logs NAME --audit`: the proxy's and the git API's decisions of the sandbox's
/// latest sessions (the live one, or the kept logs of the last sandbox of that name), one
/// human line per decision ([`airlock_cli::audit_view`]), oldest first: `audit.jsonl.1` and
/// `audit.jsonl`, then `git-api.jsonl.1` and `git-api.jsonl` (the last `tail` lines of each
/// log when given). With `--follow`, then what is written next, until ctrl-c or the
/// sandbox's removal: the proxy's records from its admin API's event stream when it answers
/// ([`stream::StreamFollower`], opened before the files are read; what they had is not
/// printed twice), else by polling the files every 50 ms across their rotation, as the git
/// API's log always is.
pub async fn logs(ctx: &Ctx, args: &LogsArgs) -> Result<i32> {
    let name = &args.name;
    let dir = latest_dir(ctx, name)?;
    let view = View {
        denied: args.denied,
        session: args.session.clone(),
        json: args.json,
        color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let live = ctx.checkout(name).audit();
    let following = args.follow && dir == live;
    // The event stream first: whatever is written while the files are read comes through it.
    let streamer = if following {
        open_stream(ctx, args).await
    } else {
        None
    };
    let mut seen = Seen::default();
    let mut out = std::io::stdout().lock();
    let mut followers = Vec::new();
    for source in [Source::Proxy, Source::GitApi] {
        let file = source.file();
        let old = format!("{file}.1");
        let mut follower = Follower::new(&dir.join(file));
        let read = read_lines(&dir.join(&old)).and_then(|older| {
            // The current file through its follower, so that following goes on where this ends.
            let got = follower.poll()?;
            Ok((older, got))
        });
        let lines: Vec<(String, u64, String)> = match read {
            Ok((older, got)) => older
                .into_iter()
                .enumerate()
                .map(|(i, l)| (old.clone(), i as u64 + 1, l))
                .chain(got.into_iter().map(|g| (file.to_string(), g.n, g.text)))
                .collect(),
            // The files are root's; the proxy's socket is the operator's: its stream has what
            // the proxy holds since its start.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && streamer.is_some() => {
                drop(out);
                eprintln!(
                    "airlock: {} is root's: {}",
                    dir.join(file).display(),
                    match source {
                        Source::Proxy =>
                            "the proxy's decisions since its start only (its event stream)",
                        Source::GitApi => "the git API's decisions are left out (run with sudo)",
                    }
                );
                out = std::io::stdout().lock();
                continue;
            }
            // Not following: what the proxy holds, once, when it answers.
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    && source == Source::Proxy
                    && dir == live =>
            {
                let client = Client::new(name, &ctx.checkout(name).control());
                let query = EventsQuery {
                    decision: args.denied.then(|| "deny".to_owned()),
                    session: full_session(&client, args.session.as_deref()).await,
                    ..EventsQuery::default()
                };
                let Ok(held) = stream::held(&client, query).await else {
                    return Err(read_error(ctx, name, &dir.join(file), e));
                };
                drop(out);
                eprintln!(
                    "airlock: {} is root's: the proxy's decisions since its start only (its event stream)",
                    dir.join(file).display()
                );
                out = std::io::stdout().lock();
                held.into_iter()
                    .enumerate()
                    .map(|(i, l)| ("the event stream".to_owned(), i as u64 + 1, l))
                    .collect()
            }
            Err(e) => return Err(read_error(ctx, name, &dir.join(file), e)),
        };
        if source == Source::Proxy {
            for (_, _, l) in &lines {
                seen.add(l);
            }
        }
        let skip = args
            .tail
            .map_or(0, |n| lines.len().saturating_sub(n as usize));
        for (f, n, l) in &lines[skip..] {
            if !emit(&mut out, source, l, f, *n, &view)? {
                return Ok(0);
            }
        }
        // The proxy's log comes through the stream when there is one.
        if source == Source::GitApi || streamer.is_none() {
            followers.push((source, follower));
        }
    }
    drop(out);
    if !args.follow {
        return Ok(0);
    }
    if !following {
        eprintln!(
            "airlock: {name} was removed: these are its kept logs ({}), nothing more is written to them",
            dir.display()
        );
        return Ok(0);
    }
    follow(ctx, name, &view, (followers, streamer, seen)).await
}

/// `airlock logs k8s:NAMESPACE/POD --audit`: a pod's decisions from its proxy's event stream
/// alone (no files on this host): what the proxy holds since its start, then with
/// `--follow` what it writes next, until ctrl-c.
pub async fn stream_logs(client: Client, args: &LogsArgs) -> Result<i32> {
    let view = View {
        denied: args.denied,
        session: args.session.clone(),
        json: args.json,
        color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let query = EventsQuery {
        decision: args.denied.then(|| "deny".to_owned()),
        session: full_session(&client, args.session.as_deref()).await,
        ..EventsQuery::default()
    };
    let from = "the event stream";
    if !args.follow {
        let held = stream::held(&client, query).await?;
        let skip = args
            .tail
            .map_or(0, |n| held.len().saturating_sub(n as usize));
        let mut out = std::io::stdout().lock();
        for (i, l) in held.iter().enumerate().skip(skip) {
            if !emit(&mut out, Source::Proxy, l, from, i as u64 + 1, &view)? {
                break;
            }
        }
        return Ok(0);
    }
    let mut f = StreamFollower::new(client, query, Seen::default());
    f.open().await?;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(0),
            item = f.next() => match item {
                stream::Item::Say(text) => eprintln!("airlock: {text}"),
                stream::Item::Record(log, raw) => {
                    let source = match log {
                        Log::Audit => Source::Proxy,
                        Log::GitApi => Source::GitApi,
                        Log::Unknown => continue,
                    };
                    n += 1;
                    if !emit(&mut std::io::stdout().lock(), source, &raw, from, n, &view)? {
                        return Ok(0);
                    }
                }
            },
        }
    }
}

/// The proxy's event stream of the sandbox `args` names, filtered as `args` asks; `None`
/// when it does not answer (not running, or an image older than the admin API: the files
/// are followed then).
async fn open_stream(ctx: &Ctx, args: &LogsArgs) -> Option<StreamFollower> {
    let name = &args.name;
    let client = Client::new(name, &ctx.checkout(name).control());
    let query = EventsQuery {
        decision: args.denied.then(|| "deny".to_owned()),
        session: full_session(&client, args.session.as_deref()).await,
        ..EventsQuery::default()
    };
    let mut f = StreamFollower::new(client, query, Seen::default());
    match f.open().await {
        Ok(()) => Some(f),
        Err(e) if e.is_not_running() => None,
        Err(e) => {
            eprintln!("airlock: {e}; following the files instead");
            None
        }
    }
}

/// `-f` after the files were read: the files polled (and their rotations followed) and the
/// event stream's records printed, until ctrl-c, a closed output or the sandbox's removal.
async fn follow(
    ctx: &Ctx,
    name: &str,
    view: &View,
    (mut followers, streamer, seen): (Vec<(Source, Follower)>, Option<StreamFollower>, Seen),
) -> Result<i32> {
    let live = ctx.checkout(name).audit();
    // The stream's records, read by a task of their own (the files are polled meanwhile).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<stream::Item>(256);
    if let Some(mut f) = streamer {
        f.set_seen(seen);
        tokio::spawn(async move {
            loop {
                let item = f.next().await;
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        });
    }
    let git_followed = followers.iter().any(|(s, _)| *s == Source::GitApi);
    let mut n_streamed = 0u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        // Gone first, then read: what was written before the move is read from the open files.
        let gone = !live.is_dir();
        let mut out = std::io::stdout().lock();
        for (source, f) in &mut followers {
            let file = source.file();
            let got = f.poll().map_err(|e| read_error(ctx, name, f.path(), e))?;
            for g in got {
                if !emit(&mut out, *source, &g.text, file, g.n, view)? {
                    return Ok(0);
                }
            }
        }
        drop(out);
        if gone {
            let kept = dirs_of(ctx, name).into_iter().next();
            eprintln!(
                "airlock: {name} was removed{}; following ends",
                kept.map_or(String::new(), |k| format!(
                    ": its audit logs are kept in {}",
                    k.display()
                ))
            );
            return Ok(0);
        }
        let tick = tokio::time::sleep(POLL);
        tokio::pin!(tick);
        loop {
            tokio::select! {
                () = &mut tick => break,
                _ = &mut ctrl_c => return Ok(0),
                Some(item) = rx.recv() => match item {
                    stream::Item::Say(text) => eprintln!("airlock: {text}"),
                    stream::Item::Record(log, raw) => {
                        let source = match log {
                            Log::Audit => Source::Proxy,
                            // Read from its file already when it can be.
                            Log::GitApi if !git_followed => Source::GitApi,
                            Log::GitApi | Log::Unknown => continue,
                        };
                        n_streamed += 1;
                        let mut out = std::io::stdout().lock();
                        if !emit(&mut out, source, &raw, "the event stream", n_streamed, view)? {
                            return Ok(0);
                        }
                    }
                },
            }
        }
    }
}

/// The session id `--session S` names among the proxy's sessions, for the stream's filter
/// (which matches whole ids): the one whose id, or random part, starts with S; `None` when
/// not exactly one does (the lines are filtered here anyway, [`View::session`]).
async fn full_session(client: &Client, want: Option<&str>) -> Option<String> {
    let want = want?;
    let sessions = client.sessions().await.ok()?.sessions;
    let mut found = sessions.into_iter().filter(|s| {
        let random = s.id.split_once('-').map_or(s.id.as_str(), |(_, r)| r);
        s.id.starts_with(want) || random.starts_with(want)
    });
    let one = found.next()?;
    found.next().is_none().then_some(one.id)
}

/// How often `--follow` reads the files: a line is printed within this of being written.
const POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Print one raw line as the view says; `false` when stdout is closed (`| head`): stop.
fn emit(
    out: &mut impl Write,
    source: Source,
    raw: &str,
    file: &str,
    n: u64,
    view: &View,
) -> Result<bool> {
    let Some(text) = audit_view::render(source, raw, file, n, view) else {
        return Ok(true);
    };
    if view.json && audit_view::is_unreadable(&text) {
        eprintln!("airlock: {text}");
        return Ok(true);
    }
    match writeln!(out, "{text}") {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// A file of the audit directory that cannot be read; the proxy's files are its user's
/// (0600 in a 0700 directory): a CLI that is not root is told how to read them.
fn read_error(ctx: &Ctx, name: &str, path: &Path, e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        return anyhow::anyhow!(
            "cannot read {}: permission denied (the audit logs are the proxy user's, readable by root only): run `sudo airlock --data-dir {} logs {name} --audit`",
            path.display(),
            ctx.paths.data.display()
        );
    }
    anyhow::Error::new(e).context(format!("cannot read {}", path.display()))
}

/// Every line of the proxy's audit log of `name` (the live sandbox's, else the kept one of
/// the last sandbox of that name): `audit.jsonl` and its rotated files, in no particular
/// order. A log only root may read, of a live sandbox, is read through its admin API's
/// event stream instead (what the proxy holds since its start), saying so on stderr.
pub async fn proxy_lines(ctx: &Ctx, name: &str) -> Result<Vec<String>> {
    let dir = latest_dir(ctx, name)?;
    let file = Source::Proxy.file();
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n == file
                    || n.strip_prefix(file)
                        .and_then(|s| s.strip_prefix('.'))
                        .is_some_and(|s| {
                            s == "aging" || (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        })
            })
        })
        .collect();
    let mut lines = Vec::new();
    for path in &files {
        match read_lines(path) {
            Ok(mut l) => lines.append(&mut l),
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    && dir == ctx.checkout(name).audit() =>
            {
                let client = Client::new(name, &ctx.checkout(name).control());
                let query = EventsQuery::default();
                let Ok(held) = stream::held(&client, query).await else {
                    return Err(read_error(ctx, name, path, e));
                };
                eprintln!(
                    "airlock: {} is root's: the proxy's decisions since its start only (its event stream)",
                    path.display()
                );
                return Ok(held);
            }
            Err(e) => return Err(read_error(ctx, name, path, e)),
        }
    }
    Ok(lines)
}

fn read_lines(path: &Path) -> std::io::Result<Vec<String>> {
    match std::fs::read(path) {
        Ok(b) => Ok(String::from_utf8_lossy(&b)
            .lines()
            .map(str::to_owned)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Remove kept audit logs older than [`KEEP_DAYS`]; the names removed.
pub fn sweep(ctx: &Ctx, dry_run: bool) -> Vec<String> {
    let limit = std::time::Duration::from_secs(KEEP_DAYS * 24 * 3600);
    let mut removed = Vec::new();
    for e in std::fs::read_dir(kept_dir(ctx))
        .into_iter()
        .flatten()
        .flatten()
    {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > limit);
        if old {
            removed.push(e.file_name().to_string_lossy().into_owned());
            if !dry_run {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    removed
}

/// `airlock audit …`.
pub fn run(args: &AuditArgs) -> Result<i32> {
    match &args.command {
        AuditCmd::Verify { files } => verify(files),
    }
}

/// `airlock audit verify FILE…`: the stream's files verified oldest first; one line on
/// stdout when intact, else the first bad line as the error (exit 7).
fn verify(files: &[PathBuf]) -> Result<i32> {
    let (stream, archives) = chain::order(files);
    if stream.is_empty() {
        return Err(Failure::new(
            Code::Usage,
            "no file of the stream among them: give audit.jsonl and its rotated files (audit.jsonl.1 ..., audit.jsonl.aging); the archives (.allowed, .first) are outside the chain",
        )
        .into());
    }
    let intact = match chain::verify_paths(&stream) {
        Ok(i) => i,
        Err(chain::VerifyError::Broken(b)) => {
            return Err(Failure::new(Code::NotIntact, b.to_string()).into());
        }
        Err(e @ chain::VerifyError::Read { .. }) => return Err(e.into()),
    };
    println!("{}", summary(&intact, stream.len(), &archives));
    Ok(0)
}

/// The line an intact stream is reported with.
fn summary(intact: &chain::Intact, files: usize, archives: &[PathBuf]) -> String {
    let mut out = format!(
        "intact: {} lines in {files} file{}, ",
        intact.lines,
        if files == 1 { "" } else { "s" }
    );
    match &intact.after {
        None => out.push_str("from the log's first line"),
        Some(at) => out.push_str(&format!(
            "from after a line that left the log (said by the rotated line at {at})"
        )),
    }
    out.push_str(&format!("; last chain {}", intact.head));
    if intact.unchained > 0 {
        out.push_str(&format!(
            "; {} earlier lines written before the chain existed, not checked",
            intact.unchained
        ));
    }
    if !archives.is_empty() {
        out.push_str(&format!(
            "; not checked: {} archive file{} (sorted copies, outside the chain)",
            archives.len(),
            if archives.len() == 1 { "" } else { "s" }
        ));
    }
    out
}
