//! The audit log: one JSON line per decision, written by a single writer.
//!
//! Producers (connection tasks) hand [`Record`]s to an [`Audit`] handle, which feeds a
//! **bounded** channel; a full channel makes the producer wait (backpressure), it never drops
//! a line. One dedicated writer thread drains the channel in batches and writes each batch to
//! the file with one `write(2)`: the first line after a quiet spell is written at once, then
//! the writer lingers [`LINGER`] so that a busy proxy's lines go out together (one wake-up
//! and one write per batch instead of per request). There is no user-space buffer that
//! outlives a batch. On [`AuditWriter::finish`] everything queued before the close is
//! written and `fsync`ed.
//!
//! Each record is also echoed as one compact human line on stderr (at the `info` level of
//! `AIRLOCK_PROXY_LOG`), by the writer, one `write(2)` per batch.
//!
//! Schema (every field is always present; unknown values are `null`):
//! `ts` (RFC 3339 UTC, ms, when the request arrived), `session`, `uid` (client uid, `null`
//! until identity lands), `client` (peer `ip:port`), `kind` (`connect`|`http`|`transparent`|
//! `dns`), `event` (`open` for the optional line at tunnel open, `close` for its final line,
//! `null` for single-line decisions), `method`, `host`, `port`, `path` (path only: the query
//! string is never logged, it may carry secrets), `decision` (`allow`|`deny`|`report`), `rule`,
//! `reason`, `upstream` (`ip:port` connected to), `upstream_local_port` (the proxy's source
//! port of that upstream connection), `intercepted` (the TLS was terminated and each request
//! judged and logged on its own line), `credential` (names of the credentials injected into
//! the request, comma-separated), `status` (the upstream's response status, when the
//! proxy read it), `bytes_up`, `bytes_down`, `duration_ms`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::clock;

/// How many records may wait for the writer before producers are made to wait.
pub const DEFAULT_QUEUE: usize = 4096;
/// Largest batch the writer takes from the queue at once.
const BATCH: usize = 512;
/// How long the writer waits after a write before taking the next batch.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// Failures of the audit log itself (never of a request).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The audit file could not be opened or created.
    #[error("cannot open audit log {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// The writer thread could not be started.
    #[error("cannot start the audit writer thread: {0}")]
    Spawn(io::Error),
    /// Writing or syncing the file failed.
    #[error("cannot write audit log {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    /// The writer thread panicked.
    #[error("the audit writer thread died")]
    WriterDied,
}

/// Which listener produced the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `CONNECT host:port` on the explicit proxy.
    Connect,
    /// Absolute-form plain HTTP on the explicit proxy.
    Http,
    /// A redirected connection on the transparent listener.
    Transparent,
    /// A query on the DNS filter.
    Dns,
    /// A request on the git service port (the git API's only way out).
    #[serde(rename = "git-service")]
    GitService,
}

/// The outcome recorded for a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Allowed by a rule.
    Allow,
    /// Refused.
    Deny,
    /// Would have been refused, but the sandbox is in report mode: it passed.
    Report,
}

impl Verdict {
    /// The stable string written to the log.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Report => "report",
        }
    }
}

/// One audit line. Build it with [`Record::new`] and fill what is known.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// When the request arrived (written RFC 3339 UTC with ms; formatted by the writer).
    #[serde(serialize_with = "ser_ts")]
    pub ts: SystemTime,
    #[serde(serialize_with = "ser_arc_str")]
    pub session: Arc<str>,
    pub uid: Option<u32>,
    pub client: Option<SocketAddr>,
    pub kind: Kind,
    pub event: Option<&'static str>,
    pub method: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub path: Option<String>,
    pub decision: Verdict,
    pub rule: Option<String>,
    pub reason: Option<&'static str>,
    pub upstream: Option<SocketAddr>,
    pub upstream_local_port: Option<u16>,
    pub intercepted: bool,
    pub credential: Option<String>,
    pub status: Option<u16>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

fn ser_ts<S: serde::Serializer>(v: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&clock::rfc3339_ms(*v))
}

fn ser_arc_str<S: serde::Serializer>(v: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}

impl Record {
    /// A record stamped with `started` (when the request arrived), everything else empty.
    #[must_use]
    pub fn new(
        session: Arc<str>,
        started: SystemTime,
        kind: Kind,
        client: Option<SocketAddr>,
    ) -> Self {
        Self {
            ts: started,
            session,
            uid: None,
            client,
            kind,
            event: None,
            method: None,
            host: None,
            port: None,
            path: None,
            decision: Verdict::Deny,
            rule: None,
            reason: None,
            upstream: None,
            upstream_local_port: None,
            intercepted: false,
            credential: None,
            status: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }
    }

    /// The compact human line.
    fn human(&self) -> String {
        let kind = match self.kind {
            Kind::Connect => "connect",
            Kind::Http => "http",
            Kind::Transparent => "transparent",
            Kind::Dns => "dns",
            Kind::GitService => "git-service",
        };
        let host = self.host.as_deref().unwrap_or("-");
        let port = self.port.unwrap_or(0);
        let reason = self.reason.unwrap_or("-");
        let method = self.method.as_deref().unwrap_or("-");
        let event = self.event.unwrap_or("");
        let path = self.path.as_deref().unwrap_or("");
        let cred = self.credential.as_deref().unwrap_or("");
        format!(
            "{} {kind}{}{event} {method} {host}:{port}{path} {reason}{}{cred} up={} down={} {}ms",
            self.decision.as_str(),
            if event.is_empty() { "" } else { "/" },
            if cred.is_empty() { "" } else { " credential=" },
            self.bytes_up,
            self.bytes_down,
            self.duration_ms
        )
    }

    /// The human line through `tracing` (records that never reach the writer).
    fn log_human(&self) {
        tracing::info!("{}", self.human());
    }
}

enum Msg {
    Record(Box<Record>),
    Flush(oneshot::Sender<()>),
    Close,
}

/// Cloneable producer handle.
#[derive(Debug, Clone)]
pub struct Audit {
    tx: mpsc::Sender<Msg>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Record(_) => "Record",
            Self::Flush(_) => "Flush",
            Self::Close => "Close",
        })
    }
}

impl Audit {
    /// Queues `rec`, waiting while the queue is full. A record sent after the writer has
    /// closed is reported on stderr (it cannot reach the file any more).
    pub async fn emit(&self, rec: Record) {
        if let Err(mpsc::error::SendError(Msg::Record(rec))) =
            self.tx.send(Msg::Record(Box::new(rec))).await
        {
            rec.log_human();
            tracing::error!("audit writer already closed: a record reached stderr only");
        }
    }

    /// Queues `rec` from a context that cannot await (a `Drop`): tries at once, and when the
    /// queue is full hands the wait to a new task on the current runtime, so the line is
    /// still not dropped.
    pub fn emit_detached(&self, rec: Record) {
        match self.tx.try_send(Msg::Record(Box::new(rec))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => {
                let tx = self.tx.clone();
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        let _ = tx.send(msg).await;
                    });
                } else {
                    let _ = tx.blocking_send(msg);
                }
            }
            Err(mpsc::error::TrySendError::Closed(msg)) => {
                if let Msg::Record(rec) = msg {
                    rec.log_human();
                }
                tracing::error!("audit writer already closed: a record reached stderr only");
            }
        }
    }

    /// Guards `rec` until it is written ([`Pending`]).
    #[must_use]
    pub fn pending(&self, rec: Record) -> Pending {
        Pending::new(rec, self.clone())
    }

    /// Waits until every record queued before this call has been written to the file.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// The `event` of a request line written because the request was abandoned before its
/// outcome was logged: the client hung up while the proxy was still working on it (resolving,
/// connecting, waiting for the response head), so hyper dropped the request.
pub const EVENT_CLIENT_GONE: &str = "client-gone";

/// A request's record while its outcome is not yet logged. Written exactly once: by
/// [`emit`](Self::emit), by whoever [`into_record`](Self::into_record) hands it to, or, when
/// it is dropped first (the client hung up and hyper dropped the request), by its `Drop`,
/// with `event: client-gone`. So an abandoned request still leaves its line.
pub struct Pending {
    rec: Option<Record>,
    audit: Audit,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Pending").field(&self.rec).finish()
    }
}

impl Pending {
    /// Guards `rec`.
    #[must_use]
    pub const fn new(rec: Record, audit: Audit) -> Self {
        Self {
            rec: Some(rec),
            audit,
        }
    }

    /// Queues the record (waiting while the queue is full). If this wait is abandoned, the
    /// record is still written, by `Drop`.
    pub async fn emit(mut self) {
        match self.audit.tx.reserve().await {
            Ok(permit) => {
                if let Some(rec) = self.rec.take() {
                    permit.send(Msg::Record(Box::new(rec)));
                }
            }
            Err(_) => {
                if let Some(rec) = self.rec.take() {
                    rec.log_human();
                }
                tracing::error!("audit writer already closed: a record reached stderr only");
            }
        }
    }

    /// The record, for another owner that writes it (a response body's guard).
    #[must_use]
    pub fn into_record(mut self) -> Record {
        self.rec
            .take()
            .unwrap_or_else(|| unreachable!("a Pending holds its record until consumed"))
    }
}

impl std::ops::Deref for Pending {
    type Target = Record;

    fn deref(&self) -> &Record {
        self.rec
            .as_ref()
            .unwrap_or_else(|| unreachable!("a Pending holds its record until consumed"))
    }
}

impl std::ops::DerefMut for Pending {
    fn deref_mut(&mut self) -> &mut Record {
        self.rec
            .as_mut()
            .unwrap_or_else(|| unreachable!("a Pending holds its record until consumed"))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut rec) = self.rec.take() {
            rec.event.get_or_insert(EVENT_CLIENT_GONE);
            self.audit.emit_detached(rec);
        }
    }
}

/// The writer thread; [`finish`](Self::finish) closes the log.
#[derive(Debug)]
pub struct AuditWriter {
    tx: mpsc::Sender<Msg>,
    thread: JoinHandle<Result<(), AuditError>>,
}

/// Opens (append, create `0600`, no symlink following) `path` and starts the writer.
///
/// # Errors
/// [`AuditError::Open`] when the file cannot be opened, [`AuditError::Spawn`] when the
/// thread cannot be started.
pub fn open(path: &Path, queue: usize) -> Result<(Audit, AuditWriter), AuditError> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| AuditError::Open {
            path: path.to_owned(),
            source,
        })?;
    let (tx, rx) = mpsc::channel(queue.max(1));
    let owned = path.to_owned();
    let thread = std::thread::Builder::new()
        .name("audit-writer".into())
        .stack_size(64 * 1024)
        .spawn(move || write_loop(file, &owned, rx))
        .map_err(AuditError::Spawn)?;
    Ok((Audit { tx: tx.clone() }, AuditWriter { tx, thread }))
}

impl AuditWriter {
    /// Writes everything queued so far, syncs the file and stops the writer. Records queued
    /// after this are reported on stderr only.
    ///
    /// # Errors
    /// The first write error the writer met, or [`AuditError::WriterDied`].
    pub async fn finish(self) -> Result<(), AuditError> {
        let _ = self.tx.send(Msg::Close).await;
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(|_| AuditError::WriterDied)?
            .map_err(|_| AuditError::WriterDied)?
    }
}

fn write_loop(mut file: File, path: &Path, mut rx: mpsc::Receiver<Msg>) -> Result<(), AuditError> {
    let mut batch = Vec::with_capacity(16);
    let mut out = Vec::with_capacity(4096);
    let mut first_err: Option<io::Error> = None;
    let mut human = String::new();
    loop {
        batch.clear();
        if rx.blocking_recv_many(&mut batch, BATCH) == 0 {
            break; // every sender dropped
        }
        let mut closing = false;
        let mut waiters = Vec::new();
        for msg in batch.drain(..) {
            match msg {
                Msg::Record(rec) => {
                    if serde_json::to_writer(&mut out, &*rec).is_ok() {
                        out.push(b'\n');
                    }
                    add_human(&mut human, &rec);
                }
                Msg::Flush(w) => waiters.push(w),
                Msg::Close => closing = true,
            }
        }
        if !out.is_empty() {
            if let Err(e) = file.write_all(&out) {
                tracing::error!("audit write failed: {e}");
                first_err.get_or_insert(e);
            }
            out.clear();
            if out.capacity() > 1 << 20 {
                out.shrink_to(4096);
            }
        }
        write_human(&mut human);
        for w in waiters {
            let _ = w.send(());
        }
        if closing {
            break;
        }
        // Records already waiting (a saturated queue): no lingering, take them now.
        if rx.is_empty() {
            std::thread::sleep(LINGER);
        }
    }
    rx.close();
    // Anything that raced the close is still written: nothing queued is lost.
    while let Ok(msg) = rx.try_recv() {
        if let Msg::Record(rec) = msg {
            if serde_json::to_writer(&mut out, &*rec).is_ok() {
                out.push(b'\n');
            }
            add_human(&mut human, &rec);
        }
    }
    write_human(&mut human);
    if !out.is_empty()
        && let Err(e) = file.write_all(&out)
    {
        first_err.get_or_insert(e);
    }
    if let Err(e) = file.sync_data() {
        first_err.get_or_insert(e);
    }
    match first_err {
        None => Ok(()),
        Some(source) => Err(AuditError::Write {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Appends `rec`'s human line (when `info` is enabled), in the subscriber's style.
fn add_human(out: &mut String, rec: &Record) {
    if tracing::enabled!(tracing::Level::INFO) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "{}  INFO audit: {}",
            clock::rfc3339_ms(SystemTime::now()),
            rec.human()
        );
    }
}

/// One `write(2)` to stderr for the batch's human lines.
fn write_human(out: &mut String) {
    if !out.is_empty() {
        let _ = io::stderr().lock().write_all(out.as_bytes());
        out.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn rec(i: u64) -> Record {
        let mut r = Record::new(Arc::from("s1"), SystemTime::now(), Kind::Connect, None);
        r.bytes_up = i;
        r
    }

    #[tokio::test]
    async fn nothing_is_lost_under_backpressure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        // A queue of 2 forces producers to wait on the writer most of the time.
        let (audit, writer) = open(&path, 2).unwrap();
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let a = audit.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..250u64 {
                    a.emit(rec(t * 1000 + i)).await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        writer.finish().await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2000);
        let mut seen: Vec<u64> = lines
            .iter()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["bytes_up"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 2000, "every record exactly once");
    }

    #[tokio::test]
    async fn file_is_private_and_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, "old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (audit, writer) = open(&path, 8).unwrap();
        audit.emit(rec(1)).await;
        audit.flush().await;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("old\n"), "appends, never truncates");
        assert_eq!(text.lines().count(), 2);
        writer.finish().await.unwrap();

        let fresh = dir.path().join("new.jsonl");
        let (_a, w) = open(&fresh, 8).unwrap();
        w.finish().await.unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[tokio::test]
    async fn symlinked_audit_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(open(&link, 8), Err(AuditError::Open { .. })));
    }

    #[test]
    fn schema_has_every_field() {
        let r = rec(7);
        let v = serde_json::to_value(&r).unwrap();
        for f in [
            "ts",
            "session",
            "uid",
            "client",
            "kind",
            "event",
            "method",
            "host",
            "port",
            "path",
            "decision",
            "rule",
            "reason",
            "upstream",
            "upstream_local_port",
            "intercepted",
            "credential",
            "status",
            "bytes_up",
            "bytes_down",
            "duration_ms",
        ] {
            assert!(v.get(f).is_some(), "missing {f}");
        }
        assert_eq!(v["kind"], "connect");
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["uid"], serde_json::Value::Null);
    }
}
