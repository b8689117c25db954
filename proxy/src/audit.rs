//! The audit log: one JSON line per decision, written **before** the decision takes effect.
//!
//! - A request the proxy lets through has its line written (`write(2)` returned) before its
//!   first byte goes upstream: [`Pending::open`] writes it with `event: open`. The line with
//!   what happened (status, bytes, duration) follows when the request is over; those final
//!   lines are queued in memory and go out together with the next line that must be written
//!   at once, or after at most [`LINGER`] (group commit: one `write(2)` carries every line
//!   that is ready). A killed proxy therefore loses at most the final lines of the last
//!   [`LINGER`], never the record of a request it served. Nothing is `fsync`ed per line: the
//!   lines survive the proxy's death (they are in the kernel), not a crash of the host
//!   before the kernel writes them back (the file is synced at shutdown).
//! - A refusal has its line written before the agent sees the refusal
//!   ([`Pending::commit`], [`Audit::commit`]).
//! - **Fail closed**: when a line cannot be written (a full volume, an I/O error), the
//!   write is undone (the file is cut back to its last whole line, so a truncated line
//!   never remains) and the caller refuses the request with `audit-unavailable`; every
//!   request is refused that way until a write works again. The state change is said once
//!   on stderr each way, the health answer shows it ([`Audit::available`]), and on recovery
//!   the log first gets one `kind: audit`, `event: outage` line with the window and the
//!   count of refused requests (and of final lines lost, when the queue of waiting final
//!   lines outgrew [`QUEUED_MAX`] during the outage).
//!
//! Writes happen on the caller's thread under one lock (appending to a page-cached file
//! takes microseconds); a helper thread only flushes lingering final lines and writes the
//! human echo. While lines keep coming the helper looks for them every [`LINGER`] on its
//! own, so a request never pays a wake-up of another thread (a futex call) for its final
//! line; after a quiet spell it sleeps until a line wakes it. Each record is also echoed as one compact human line on stderr (at the
//! `info` level of `AIRLOCK_PROXY_LOG`), one `write(2)` per batch.
//!
//! Schema (the types: `airlock-audit-schema`, which readers deserialize with; every field is
//! always present; unknown values are `null`):
//! `ts` (RFC 3339 UTC, ms, when the request arrived), `session`, `sandbox`, `container`
//! (the container's id, `null` when unknown), `uid` (client uid, `null`
//! until identity lands), `client` (peer `ip:port`), `kind` (`connect`|`http`|`transparent`|
//! `dns`|`git-service`), `event` (`open` for the line written before anything went upstream,
//! `close` (or `close-*`) for a tunnel's final line, `null` for a request's final line or a
//! single-line decision), `method`, `host`, `port`, `path` (path only: the query
//! string is never logged, it may carry secrets), `decision` (`allow`|`deny`|`report`|
//! `abandoned`: allowed, but the client left before anything went upstream), `rule`,
//! `reason`, `upstream` (`ip:port` connected to), `upstream_local_port` (the proxy's source
//! port of that upstream connection), `intercepted` (the TLS was terminated and each request
//! judged and logged on its own line), `credential` (names of the credentials injected into
//! the request, comma-separated), `status` (the upstream's response status, when the
//! proxy read it), `bytes_up`, `bytes_down`, `duration_ms`.
//!
//! The reload line ([`Audit::reload`]): `ts`, `session`, `sandbox`, `container`, `kind:
//! audit`, `event: reload`, `decision` (`allow`: the new rules are in force; `deny`: they
//! were refused and `error` says why), `needles`, `files`, `added`, `dropped` (counts).
//!
//! The outage line: `ts` (when writing worked again), `session`, `sandbox`, `container`,
//! `kind: audit`,
//! `event: outage`, `decision: deny`, `reason: audit-unavailable`, `since` (the first failed
//! write), `error`, `refused` (requests refused meanwhile), `lost` (final lines dropped).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::SystemTime;

use airlock_audit_schema::Timestamp;
use airlock_policy::reason::Reason;

use crate::clock;

/// How long a final line may wait for company before the helper thread writes it.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(2);
/// Bytes of final lines that may wait while the log cannot be written; past this they are
/// dropped and counted (`lost` in the outage line).
pub const QUEUED_MAX: usize = 1 << 20;
/// How often held-back denials are reported (their `suppressed` line) when the flood goes
/// on.
const FOLD_REPORT: std::time::Duration = std::time::Duration::from_secs(1);

/// Failures of the audit log itself (never of a request).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The audit file could not be opened or created.
    #[error("cannot open audit log {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// The helper thread could not be started.
    #[error("cannot start the audit writer thread: {0}")]
    Spawn(io::Error),
    /// Writing or syncing the file failed.
    #[error("cannot write audit log {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    /// The helper thread panicked.
    #[error("the audit writer thread died")]
    WriterDied,
}

/// The line could not be written: the request it describes must be refused
/// (`audit-unavailable`). Already counted in the outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

// The schema of the log's lines (one definition for every writer and reader):
// `airlock-audit-schema`. The writer, rotation, folding and `Pending` stay here.
pub use airlock_audit_schema::{Event, Kind, SCHEMA_VERSION, Verdict, Who};

/// One audit line, its refusal code typed. Build it with [`Record::new`] and fill what is
/// known.
pub type Record = airlock_audit_schema::Record<Reason>;

impl From<crate::tunnel::End> for Event {
    fn from(end: crate::tunnel::End) -> Self {
        match end {
            crate::tunnel::End::Closed => Self::Close,
            crate::tunnel::End::Error => Self::CloseError,
            crate::tunnel::End::Idle => Self::CloseIdle,
            crate::tunnel::End::Shutdown => Self::CloseShutdown,
        }
    }
}

/// The compact human line of a record, written straight into the echo (no `String` of its
/// own: the echo is on by default, once per final line). Piece by piece rather than one
/// `write!` of a dozen arguments: the format machinery was most of the line's cost.
struct Human<'a>(&'a Record);

impl std::fmt::Display for Human<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rec = self.0;
        let mut n = itoa::Buffer::new();
        let event = rec.event.map_or("", Event::as_str);
        let cred = rec.credential.as_deref().unwrap_or("");
        for piece in [
            rec.decision.as_str(),
            " ",
            rec.kind.as_str(),
            if event.is_empty() { "" } else { "/" },
            event,
            " ",
            rec.method.as_deref().unwrap_or("-"),
            " ",
            rec.host.as_deref().unwrap_or("-"),
            ":",
        ] {
            f.write_str(piece)?;
        }
        f.write_str(n.format(rec.port.unwrap_or(0)))?;
        for piece in [
            rec.path.as_deref().unwrap_or(""),
            " ",
            rec.reason.map_or("-", |r| r.as_str()),
            if cred.is_empty() { "" } else { " credential=" },
            cred,
            " up=",
        ] {
            f.write_str(piece)?;
        }
        f.write_str(n.format(rec.bytes_up))?;
        f.write_str(" down=")?;
        f.write_str(n.format(rec.bytes_down))?;
        f.write_str(" ")?;
        f.write_str(n.format(rec.duration_ms))?;
        f.write_str("ms")?;
        for s in &rec.signals {
            f.write_str(" [")?;
            f.write_str(&s.describe())?;
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// The human line through `tracing` (records that never reach the writer).
fn log_human(rec: &Record) {
    tracing::info!("{}", Human(rec));
}

/// The log file as the writer uses it: the one seam between the audit logic and the disk,
/// so that a full volume can be played in a unit test.
pub trait LogFile: Send {
    /// Appends all of `buf` (a short write is an error).
    ///
    /// # Errors
    /// The I/O error (`ENOSPC` for a full volume).
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    ///
    /// # Errors
    /// The I/O error.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Makes what was written durable.
    ///
    /// # Errors
    /// The I/O error.
    fn sync(&mut self) -> io::Result<()>;
    /// Moves the current file aside (the oldest kept one is deleted) and starts an empty
    /// one.
    ///
    /// # Errors
    /// The I/O error; the current file is then still the one written.
    fn rotate(&mut self) -> io::Result<()>;
}

/// The log on disk: `path`, and `path.1` … `path.<keep>` rotated, newest first.
struct Rotating {
    path: PathBuf,
    file: File,
    keep: u32,
}

/// Opens `path` for appending: created `0600`, symlinks refused.
fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// `path` with `.n` appended.
fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{n}"));
    PathBuf::from(p)
}

impl LogFile for Rotating {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        for n in (1..self.keep).rev() {
            match std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))?;
        self.file = open_append(&self.path)?;
        Ok(())
    }
}

/// How much disk the log may take, and how repeated denials are folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes the log's files may take together: the current file and `keep` rotated ones
    /// (each at most `cap / (keep + 1)`, plus one write).
    pub cap: u64,
    /// Rotated files kept (`audit.jsonl.1` … `audit.jsonl.<keep>`, newest first); at least 1.
    pub keep: u32,
    /// Denial lines of one kind (listener and reason) written as they come before folding.
    pub burst: u32,
    /// Then at most this many per second; the rest are counted and written as one
    /// `event: suppressed` line with the count.
    pub per_second: u32,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            cap: airlock_channels::DEFAULT_AUDIT_CAP,
            keep: 4,
            burst: 64,
            per_second: 8,
        }
    }
}

impl Bounds {
    /// The size past which the current file is rotated.
    #[must_use]
    pub fn file_max(&self) -> u64 {
        self.cap / u64::from(self.keep.max(1) + 1)
    }
}

/// One kind of denial being folded: a token bucket, and what it held back.
struct Fold {
    tokens: f64,
    last: std::time::Instant,
    suppressed: u64,
    since: Timestamp,
    host: Option<String>,
}

/// What the lock guards: the file and the lines waiting for it.
struct State {
    file: Box<dyn LogFile>,
    /// Length of the file after the last whole line this process wrote.
    len: u64,
    /// Final lines waiting for the next write.
    queued: Vec<u8>,
    /// Scratch for the line being written at once.
    line: Vec<u8>,
    /// Human echo waiting for the helper thread.
    human: String,
    outage: Option<Outage>,
    /// The first write error met (reported by [`AuditWriter::finish`]).
    first_err: Option<io::Error>,
    closed: bool,
    /// The helper thread waits without a deadline: only a notify wakes it (cleared by
    /// whoever notifies). Awake, it looks for lines every [`LINGER`] on its own.
    asleep: bool,
    bounds: Bounds,
    /// Denials folded per (listener, reason).
    folds: std::collections::HashMap<(Kind, Reason), Fold>,
    /// Who the lines that describe no one request speak for.
    who: Who,
}

/// A window in which the log could not be written.
struct Outage {
    since: SystemTime,
    error: String,
    refused: u64,
    lost: u64,
}

struct Sink {
    path: PathBuf,
    state: Mutex<State>,
    /// Wakes the helper thread when something waits for it.
    wake: Condvar,
    available: AtomicBool,
}

impl Sink {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves whole lines only (every write is undone on
        // error), so the state is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes everything queued, then `st.line` when `with_line`, in one go; on failure cuts
    /// the file back to its last whole line and enters (or stays in) the outage.
    fn write_out(&self, st: &mut State, with_line: bool) -> Result<(), Unavailable> {
        let incoming = st.queued.len() as u64 + if with_line { st.line.len() as u64 } else { 0 };
        if st.len > 0 && st.len + incoming > st.bounds.file_max() {
            match st.file.rotate() {
                Ok(()) => st.len = 0,
                Err(e) => return Err(self.failed(st, e)),
            }
        }
        let result = if let Some(o) = &st.outage {
            // Recovering: the outage line first, then what waited, then this line.
            let mut buf = Vec::new();
            let who = &st.who;
            let line = airlock_audit_schema::Outage {
                ts: Timestamp::now(),
                session: Arc::clone(&who.session),
                sandbox: Arc::clone(&who.sandbox),
                container: who.container.clone(),
                kind: airlock_audit_schema::AuditKind::Audit,
                event: airlock_audit_schema::OutageEvent::Outage,
                decision: Verdict::Deny,
                reason: Reason::AuditUnavailable,
                since: Timestamp::from(o.since),
                error: o.error.clone(),
                refused: o.refused,
                lost: o.lost,
            };
            if serde_json::to_writer(&mut buf, &line).is_ok() {
                buf.push(b'\n');
            }
            buf.extend_from_slice(&st.queued);
            if with_line {
                buf.extend_from_slice(&st.line);
            }
            st.file.append(&buf).map(|()| buf.len())
        } else if with_line && st.queued.is_empty() {
            st.file.append(&st.line).map(|()| st.line.len())
        } else {
            let base = st.queued.len();
            if with_line {
                st.queued.extend_from_slice(&st.line);
            }
            let r = st.file.append(&st.queued).map(|()| st.queued.len());
            if r.is_err() {
                st.queued.truncate(base);
            }
            r
        };
        match result {
            Ok(written) => {
                st.len += written as u64;
                st.queued.clear();
                if st.queued.capacity() > QUEUED_MAX {
                    st.queued.shrink_to(64 * 1024);
                }
                if let Some(o) = st.outage.take() {
                    self.available.store(true, Ordering::Release);
                    notice(
                        &mut st.human,
                        "WARN",
                        &format!(
                            "audit log {} is written again; {} requests were refused while it was not",
                            self.path.display(),
                            o.refused
                        ),
                    );
                }
                Ok(())
            }
            Err(e) => {
                // Whole lines or nothing: cut back what part of this write reached the file.
                let _ = st.file.truncate(st.len);
                Err(self.failed(st, e))
            }
        }
    }

    /// Enters (or stays in) the outage after a failed write or rotation.
    fn failed(&self, st: &mut State, e: io::Error) -> Unavailable {
        if st.outage.is_none() {
            self.available.store(false, Ordering::Release);
            notice(
                &mut st.human,
                "ERROR",
                &format!(
                    "cannot write the audit log {}: {e}; refusing every request (audit-unavailable) until it can be written",
                    self.path.display()
                ),
            );
            st.outage = Some(Outage {
                since: SystemTime::now(),
                error: e.to_string(),
                refused: 0,
                lost: 0,
            });
        }
        if st.queued.len() > QUEUED_MAX
            && let Some(o) = &mut st.outage
        {
            o.lost += count_lines(&st.queued);
            st.queued.clear();
        }
        st.first_err.get_or_insert(e);
        Unavailable
    }

    /// Whether a denial of `rec`'s kind may be written now (its bucket has a token); when
    /// not, it is counted for the kind's `suppressed` line. A line that says how many were
    /// held back is queued first when the bucket allows writing again.
    fn admit_denial(&self, st: &mut State, rec: &Record) -> bool {
        let Some(reason) = rec.reason else {
            return true;
        };
        let bounds = st.bounds;
        let now = std::time::Instant::now();
        let fold = st.folds.entry((rec.kind, reason)).or_insert_with(|| Fold {
            tokens: f64::from(bounds.burst),
            last: now,
            suppressed: 0,
            since: rec.ts,
            host: None,
        });
        let refill = now.duration_since(fold.last).as_secs_f64() * f64::from(bounds.per_second);
        fold.tokens = (fold.tokens + refill).min(f64::from(bounds.burst));
        fold.last = now;
        if fold.tokens < 1.0 {
            if fold.suppressed == 0 {
                fold.since = rec.ts;
            }
            fold.suppressed += 1;
            fold.host.clone_from(&rec.host);
            return false;
        }
        fold.tokens -= 1.0;
        if fold.suppressed > 0 {
            let (since, count, host) = (fold.since, fold.suppressed, fold.host.take());
            fold.suppressed = 0;
            queue_fold(st, rec.kind, reason, since, count, host);
        }
        true
    }

    /// Whether a denial of this kind would be written now rather than folded (its bucket
    /// has a token); nothing is taken.
    fn admits(&self, kind: Kind, reason: Reason) -> bool {
        let st = self.lock();
        let Some(fold) = st.folds.get(&(kind, reason)) else {
            return true;
        };
        let waited = std::time::Instant::now().duration_since(fold.last);
        fold.tokens + waited.as_secs_f64() * f64::from(st.bounds.per_second) >= 1.0
    }

    /// Queues the `suppressed` line of every kind that has held denials back.
    fn flush_folds(&self) {
        let mut st = self.lock();
        let st = &mut *st;
        let held: Vec<_> = st
            .folds
            .iter_mut()
            .filter(|(_, f)| f.suppressed > 0)
            .map(|(k, f)| {
                let out = (*k, f.since, f.suppressed, f.host.take());
                f.suppressed = 0;
                out
            })
            .collect();
        for ((kind, reason), since, count, host) in held {
            queue_fold(st, kind, reason, since, count, host);
        }
    }

    /// Writes `rec` now (with the lines queued before it).
    fn commit(&self, rec: &Record) -> Result<(), Unavailable> {
        let mut st = self.lock();
        let st = &mut *st;
        if rec.decision == Verdict::Deny && !self.admit_denial(st, rec) {
            return Ok(()); // counted: its kind's `suppressed` line says how many
        }
        st.line.clear();
        if rec.write_json(&mut st.line).is_err() {
            return Err(Unavailable);
        }
        st.line.push(b'\n');
        // The echo is of decisions as they end: an open line's request echoes its final one.
        if rec.event != Some(Event::Open) {
            add_human(&mut st.human, rec);
        }
        let r = self.write_out(st, true);
        if r.is_err()
            && let Some(o) = &mut st.outage
        {
            o.refused += 1;
        }
        if !st.human.is_empty() && std::mem::take(&mut st.asleep) {
            self.wake.notify_one();
        }
        r
    }

    /// Writes the reload line now (with the lines queued before it).
    fn commit_reload(
        &self,
        change: &crate::snapshot::Change,
        refused: Option<String>,
    ) -> Result<(), Unavailable> {
        let mut st = self.lock();
        let st = &mut *st;
        let line = airlock_audit_schema::Reload {
            ts: Timestamp::now(),
            session: Arc::clone(&st.who.session),
            sandbox: Arc::clone(&st.who.sandbox),
            container: st.who.container.clone(),
            kind: airlock_audit_schema::AuditKind::Audit,
            event: airlock_audit_schema::ReloadEvent::Reload,
            decision: if refused.is_none() {
                Verdict::Allow
            } else {
                Verdict::Deny
            },
            needles: change.needles,
            files: change.files,
            added: change.added,
            dropped: change.dropped,
            error: refused,
        };
        st.line.clear();
        if serde_json::to_writer(&mut st.line, &line).is_err() {
            return Err(Unavailable);
        }
        st.line.push(b'\n');
        let r = self.write_out(st, true);
        if r.is_err() {
            // Not a request to refuse: the line waits, and follows the outage line.
            let line = std::mem::take(&mut st.line);
            st.queued.extend_from_slice(&line);
            st.line = line;
        }
        r
    }

    /// Queues `rec` for the next write (at the latest after [`LINGER`]).
    fn queue(&self, rec: &Record) {
        let mut st = self.lock();
        if st.closed {
            drop(st);
            log_human(rec);
            tracing::error!("audit log already closed: a record reached stderr only");
            return;
        }
        let whole = st.queued.len();
        if rec.write_json(&mut st.queued).is_ok() {
            st.queued.push(b'\n');
        } else {
            st.queued.truncate(whole); // whole lines only
        }
        add_human(&mut st.human, rec);
        // A helper awake ticks every LINGER and finds the line itself: no wake per line.
        let wake = std::mem::take(&mut st.asleep);
        drop(st);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Writes what is queued (nothing to do when the queue is empty).
    fn flush(&self) -> Result<(), Unavailable> {
        let mut st = self.lock();
        if st.queued.is_empty() {
            return Ok(());
        }
        self.write_out(&mut st, false)
    }
}

/// Queues one `event: suppressed` line.
fn queue_fold(
    st: &mut State,
    kind: Kind,
    reason: Reason,
    since: Timestamp,
    count: u64,
    host: Option<String>,
) {
    let line = airlock_audit_schema::Suppressed {
        ts: Timestamp::now(),
        session: Arc::clone(&st.who.session),
        sandbox: Arc::clone(&st.who.sandbox),
        container: st.who.container.clone(),
        kind,
        event: Event::Suppressed,
        decision: Verdict::Deny,
        reason,
        since,
        count,
        host,
    };
    if serde_json::to_writer(&mut st.queued, &line).is_ok() {
        st.queued.push(b'\n');
    }
}

fn count_lines(b: &[u8]) -> u64 {
    b.iter().filter(|c| **c == b'\n').count() as u64
}

/// Cloneable producer handle.
#[derive(Clone)]
pub struct Audit {
    sink: Arc<Sink>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("path", &self.sink.path)
            .field("available", &self.available())
            .finish()
    }
}

impl Audit {
    /// Writes `rec` now, before the decision it records takes effect (a refusal is sent,
    /// a connection is dropped). `Err`: the log cannot be written (see the module docs).
    ///
    /// # Errors
    /// [`Unavailable`].
    pub fn commit(&self, rec: &Record) -> Result<(), Unavailable> {
        self.sink.commit(rec)
    }

    /// Writes the line of a reload of the rules in force now (`kind: audit`, `event:
    /// reload`): `refused` is `None` when the new rules took effect (`change` is what they
    /// changed), else why they were refused (`change` is then what stays in force).
    ///
    /// # Errors
    /// [`Unavailable`]: the log cannot be written now; the line waits with the final lines
    /// and follows the outage line when writing works again.
    pub fn reload(
        &self,
        change: &crate::snapshot::Change,
        refused: Option<String>,
    ) -> Result<(), Unavailable> {
        self.sink.commit_reload(change, refused)
    }

    /// Writes `rec` as its `event: open` line now, before anything goes upstream; `rec`
    /// is left as it was.
    ///
    /// # Errors
    /// [`Unavailable`]: the request must be refused (`audit-unavailable`).
    pub fn commit_open(&self, rec: &mut Record) -> Result<(), Unavailable> {
        let event = rec.event.replace(Event::Open);
        let r = self.sink.commit(rec);
        rec.event = event;
        r
    }

    /// Queues a final line (what happened after an `open` line, or a line no decision waits
    /// for): written with the next line that must go out at once, or after [`LINGER`].
    pub async fn emit(&self, rec: Record) {
        self.sink.queue(&rec);
    }

    /// As [`emit`](Self::emit), from a context that cannot await (a `Drop`).
    pub fn emit_detached(&self, rec: Record) {
        self.sink.queue(&rec);
    }

    /// Guards `rec` until it is written ([`Pending`]).
    #[must_use]
    pub fn pending(&self, rec: Record) -> Pending {
        Pending::new(rec, self.clone())
    }

    /// Writes every line queued before this call.
    pub async fn flush(&self) {
        let _ = self.sink.flush();
    }

    /// Whether a denial of `kind` with `reason` would have its own line now, rather than be
    /// folded into its kind's counted `suppressed` line (nothing is taken from the
    /// budget). For work worth doing only for a line that is written (a uid lookup).
    #[must_use]
    pub fn admits_denial(&self, kind: Kind, reason: Reason) -> bool {
        self.sink.admits(kind, reason)
    }

    /// Whether the log can be written (false from a failed write until one works again).
    #[must_use]
    pub fn available(&self) -> bool {
        self.sink.available.load(Ordering::Acquire)
    }
}

/// A request's record while its outcome is not yet logged. Written exactly once: by
/// [`emit`](Self::emit) or [`commit`](Self::commit), by whoever
/// [`into_record`](Self::into_record) hands it to, or, when it is dropped first (the client
/// hung up and hyper dropped the request), by its `Drop`, with `event: client-gone`. So an
/// abandoned request still leaves its line; one dropped before it was
/// [`forwarded`](Self::forwarded) says `decision: abandoned` (it never went upstream).
pub struct Pending {
    rec: Option<Record>,
    audit: Audit,
    /// Something of the request went upstream ([`forwarded`](Self::forwarded)): dropped
    /// before that, its line says `abandoned`, not the `allow` it was decided.
    forwarded: bool,
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
            forwarded: false,
        }
    }

    /// The request is about to go upstream (its head is being sent, or its tunnel is
    /// granted): from now on a client that leaves has left a forwarded request.
    pub fn forwarded(&mut self) {
        self.forwarded = true;
    }

    /// Queues the final line (see [`Audit::emit`]).
    pub async fn emit(mut self) {
        if let Some(rec) = self.rec.take() {
            self.audit.sink.queue(&rec);
        }
    }

    /// Writes the record now, as a final line (a refusal, before the agent sees it).
    ///
    /// # Errors
    /// [`Unavailable`]: nothing was written (the refusal is counted in the outage).
    pub fn commit(mut self) -> Result<(), Unavailable> {
        match self.rec.take() {
            Some(rec) => self.audit.commit(&rec),
            None => Ok(()),
        }
    }

    /// Writes the record's `event: open` line now, before anything goes upstream, and keeps
    /// guarding it for its final line.
    ///
    /// # Errors
    /// [`Unavailable`]: nothing was written and the record is dropped unwritten (counted as
    /// refused): the caller refuses the request with `audit-unavailable`.
    pub fn open(mut self) -> Result<Self, Unavailable> {
        let Some(rec) = self.rec.as_mut() else {
            return Ok(self);
        };
        match self.audit.commit_open(rec) {
            Ok(()) => Ok(self),
            Err(e) => {
                self.rec = None;
                Err(e)
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
            rec.event.get_or_insert(Event::ClientGone);
            if !self.forwarded {
                abandoned(&mut rec);
            }
            self.audit.emit_detached(rec);
        }
    }
}

/// `rec` was allowed but its client left before anything of its went upstream: its line
/// says `abandoned`, not `allow` (the rule that allowed it stays named). A denial stays a
/// denial, and a `report` stays a report: what the policy would have refused is the signal
/// report mode exists for, whether or not the client stayed.
pub fn abandoned(rec: &mut Record) {
    if rec.decision == Verdict::Allow {
        rec.decision = Verdict::Abandoned;
    }
}

/// The helper thread; [`finish`](Self::finish) closes the log.
#[derive(Debug)]
pub struct AuditWriter {
    audit: Audit,
    thread: JoinHandle<()>,
}

/// Opens (append, create `0600`, no symlink following) `path` and starts the helper thread.
/// `session` is written on the lines that describe no one request (outage, suppressed).
///
/// # Errors
/// [`AuditError::Open`] when the file cannot be opened, [`AuditError::Spawn`] when the
/// thread cannot be started.
pub fn open(path: &Path, who: Who, bounds: Bounds) -> Result<(Audit, AuditWriter), AuditError> {
    let open_err = |source| AuditError::Open {
        path: path.to_owned(),
        source,
    };
    let file = open_append(path).map_err(open_err)?;
    let len = file.metadata().map_err(open_err)?.len();
    let file = Rotating {
        path: path.to_owned(),
        file,
        keep: bounds.keep.max(1),
    };
    start(path, Box::new(file), len, who, bounds)
}

/// The log on `file` (already `len` bytes long), reported as `path`.
///
/// # Errors
/// [`AuditError::Spawn`] when the helper thread cannot be started.
pub fn start(
    path: &Path,
    file: Box<dyn LogFile>,
    len: u64,
    who: Who,
    bounds: Bounds,
) -> Result<(Audit, AuditWriter), AuditError> {
    let sink = Arc::new(Sink {
        path: path.to_owned(),
        state: Mutex::new(State {
            file,
            len,
            queued: Vec::with_capacity(4096),
            line: Vec::with_capacity(1024),
            human: String::new(),
            outage: None,
            first_err: None,
            closed: false,
            asleep: false,
            bounds,
            folds: std::collections::HashMap::new(),
            who,
        }),
        wake: Condvar::new(),
        available: AtomicBool::new(true),
    });
    let helper = Arc::clone(&sink);
    let thread = std::thread::Builder::new()
        .name("audit-writer".into())
        .stack_size(64 * 1024)
        .spawn(move || helper_loop(&helper))
        .map_err(AuditError::Spawn)?;
    let audit = Audit { sink };
    Ok((audit.clone(), AuditWriter { audit, thread }))
}

impl AuditWriter {
    /// Writes everything queued so far, syncs the file and stops the helper thread. Lines
    /// queued after this are reported on stderr only.
    ///
    /// # Errors
    /// The first write error met, or [`AuditError::WriterDied`].
    pub async fn finish(self) -> Result<(), AuditError> {
        let sink = Arc::clone(&self.audit.sink);
        {
            let mut st = sink.lock();
            st.closed = true;
        }
        sink.wake.notify_one();
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(|_| AuditError::WriterDied)?
            .map_err(|_| AuditError::WriterDied)?;
        sink.flush_folds();
        let _ = sink.flush();
        let mut st = sink.lock();
        if let Err(e) = st.file.sync() {
            st.first_err.get_or_insert(e);
        }
        write_human(&mut st.human);
        match st.first_err.take() {
            None => Ok(()),
            Some(source) => Err(AuditError::Write {
                path: sink.path.clone(),
                source,
            }),
        }
    }
}

/// Ticks of [`LINGER`] with nothing to write after which the helper thread sleeps until a
/// line wakes it (an idle proxy costs no wakes; a busy one no notify per line).
const AWAKE_TICKS: u32 = 64;

/// Waits for queued lines, lets them linger, writes them and the human echo. While lines
/// keep coming it ticks every [`LINGER`] and writes what no commit carried; after
/// [`AWAKE_TICKS`] idle ticks it sleeps until a producer wakes it (then the line lingers
/// for company first).
fn helper_loop(sink: &Sink) {
    let mut folds_reported = std::time::Instant::now();
    loop {
        let woken = {
            let mut st = sink.lock();
            let (mut idle, mut woken) = (0, false);
            while st.queued.is_empty() && st.human.is_empty() && !st.closed {
                let held = st.folds.values().any(|f| f.suppressed > 0);
                if held && folds_reported.elapsed() >= FOLD_REPORT {
                    break;
                }
                st.asleep = idle >= AWAKE_TICKS;
                let wait = if st.asleep { FOLD_REPORT } else { LINGER };
                let (next, _) = sink
                    .wake
                    .wait_timeout(st, wait)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                st = next;
                // A producer that woke a sleeping helper cleared the flag.
                woken = idle >= AWAKE_TICKS && !st.asleep;
                st.asleep = false;
                idle += 1;
            }
            if st.closed {
                return;
            }
            woken
        };
        if folds_reported.elapsed() >= FOLD_REPORT {
            sink.flush_folds();
            folds_reported = std::time::Instant::now();
        }
        if woken {
            std::thread::sleep(LINGER);
        }
        let _ = sink.flush();
        let mut human = {
            let mut st = sink.lock();
            std::mem::take(&mut st.human)
        };
        write_human(&mut human);
    }
}

/// The human echo waiting for the helper thread is dropped past this size (stderr is not
/// being read): the log itself never waits for stderr.
const HUMAN_MAX: usize = 1 << 20;

/// Appends a state change of the log to the human echo, in the subscriber's style (never
/// through `tracing` under the lock: a blocked stderr must not stop the log).
fn notice(out: &mut String, level: &str, text: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "{} {level:>5} audit: {text}",
        clock::rfc3339_ms(SystemTime::now())
    );
}

/// Appends `rec`'s human line (when `info` is enabled), in the subscriber's style. Returns
/// whether it did.
fn add_human(out: &mut String, rec: &Record) -> bool {
    if out.len() > HUMAN_MAX {
        return false;
    }
    if tracing::enabled!(tracing::Level::INFO) {
        use std::fmt::Write as _;
        let _ = write!(out, "{}", Timestamp::now());
        out.push_str("  INFO audit: ");
        let _ = write!(out, "{}", Human(rec));
        out.push('\n');
        return true;
    }
    false
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

    #[test]
    fn event_strings_are_stable_and_distinct() {
        // These strings are an interface (the log's readers): this test pins them.
        let pinned = [
            "open",
            "close",
            "close-error",
            "close-idle",
            "close-shutdown",
            "client-gone",
            "secret-redacted",
            "leak-in-body",
            "resolve-failed",
            "dropped-overload",
            "parse-error",
            "header-timeout",
            "no-original-destination",
            "redirect-loop",
            "suppressed",
        ];
        let written: Vec<&str> = Event::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(written, pinned);
    }

    fn who() -> Who {
        Who::new("s1", "demo", Some("c0ffee"))
    }
    use std::os::unix::fs::PermissionsExt;

    fn rec(i: u64) -> Record {
        let mut r = Record::new(&who(), SystemTime::now(), Kind::Connect, None);
        r.bytes_up = i;
        r
    }

    /// The proxy's lines (its reason type included) are written byte for byte as serde
    /// writes them, for every refusal code.
    #[test]
    fn the_line_writer_writes_every_reason_as_serde_does() {
        for reason in Reason::ALL {
            let mut r = rec(1);
            r.reason = Some(reason);
            let mut fast = Vec::new();
            r.write_json(&mut fast).unwrap();
            assert_eq!(fast, serde_json::to_vec(&r).unwrap(), "{reason:?}");
        }
    }

    /// A reload of the rules is one line of its own, in counts: taken effect (`allow`,
    /// no error) or refused (`deny`, why); readers read it as a `Line::Reload`.
    #[tokio::test]
    async fn a_reload_is_audited_whether_it_took_effect_or_not() {
        let v = Volume::new(1 << 20);
        let (audit, writer) = on_volume(&v);
        let change = crate::snapshot::Change {
            needles: 3,
            files: 2,
            added: 1,
            dropped: 0,
        };
        audit.reload(&change, None).unwrap();
        let kept = crate::snapshot::Change { added: 0, ..change };
        audit
            .reload(&kept, Some("malformed hand-off".into()))
            .unwrap();
        // In an outage the line waits and follows the outage line; no request counted.
        v.set_cap(0);
        assert_eq!(audit.reload(&kept, None), Err(Unavailable));
        v.set_cap(1 << 20);
        audit.commit(&rec(9)).unwrap();
        writer.finish().await.unwrap_err(); // the outage's error, reported at the end
        let lines = v.lines();
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert_eq!(
            (&lines[2]["event"], &lines[2]["refused"]),
            (&"outage".into(), &0.into())
        );
        assert_eq!(
            (&lines[3]["event"], &lines[4]["bytes_up"]),
            (&"reload".into(), &9.into())
        );
        for (l, decision, added, error) in [
            (&lines[0], "allow", 1, serde_json::Value::Null),
            (&lines[1], "deny", 0, "malformed hand-off".into()),
        ] {
            assert_eq!(
                (&l["kind"], &l["event"], &l["decision"]),
                (&"audit".into(), &"reload".into(), &decision.into())
            );
            assert_eq!((&l["needles"], &l["added"]), (&3.into(), &added.into()));
            assert_eq!(l["error"], error);
            let read: airlock_audit_schema::Line = serde_json::from_value(l.clone()).unwrap();
            assert!(matches!(read, airlock_audit_schema::Line::Reload(_)), "{l}");
        }
    }

    /// The human echo's line, pinned: people read it in `docker logs` and grep it.
    #[test]
    fn the_human_line_says_decision_kind_target_reason_and_counts() {
        let mut r = rec(512);
        r.decision = Verdict::Deny;
        r.kind = Kind::Http;
        r.event = Some(Event::LeakInBody);
        r.method = Some("POST".into());
        r.host = Some("paste.example".into());
        r.port = Some(443);
        r.path = Some("/up".into());
        r.reason = Some(Reason::EncodedBlob);
        r.credential = Some("github".into());
        r.bytes_down = 7;
        r.duration_ms = 3;
        r.signals = vec![airlock_audit_schema::Signal::EncodedBlob {
            alphabet: airlock_audit_schema::Alphabet::Base64,
            run: 4096,
        }];
        assert_eq!(
            Human(&r).to_string(),
            "deny http/leak-in-body POST paste.example:443/up encoded-blob credential=github \
             up=512 down=7 3ms [signal encoded-blob: base64 run of 4096 bytes]"
        );
        let bare = rec(0);
        assert_eq!(
            Human(&bare).to_string(),
            "deny connect - -:0 - up=0 down=0 0ms"
        );
    }

    #[tokio::test]
    async fn nothing_is_lost_from_many_producers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (audit, writer) = open(&path, who(), Bounds::default()).unwrap();
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
        let (audit, writer) = open(&path, who(), Bounds::default()).unwrap();
        audit.emit(rec(1)).await;
        audit.flush().await;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("old\n"), "appends, never truncates");
        assert_eq!(text.lines().count(), 2);
        writer.finish().await.unwrap();

        let fresh = dir.path().join("new.jsonl");
        let (_a, w) = open(&fresh, who(), Bounds::default()).unwrap();
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
        assert!(matches!(
            open(&link, who(), Bounds::default()),
            Err(AuditError::Open { .. })
        ));
    }

    /// A volume of `cap` bytes in memory: a write past it stores what fits and fails with
    /// `ENOSPC`, as a full filesystem does.
    #[derive(Clone)]
    struct Volume {
        data: Arc<Mutex<Vec<u8>>>,
        cap: Arc<Mutex<usize>>,
    }

    impl Volume {
        fn new(cap: usize) -> Self {
            Self {
                data: Arc::default(),
                cap: Arc::new(Mutex::new(cap)),
            }
        }
        fn set_cap(&self, cap: usize) {
            *self.cap.lock().unwrap() = cap;
        }
        fn lines(&self) -> Vec<serde_json::Value> {
            let data = self.data.lock().unwrap().clone();
            let text = String::from_utf8(data).unwrap();
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "a cut line: {text:?}"
            );
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
                .collect()
        }
    }

    impl LogFile for Volume {
        fn append(&mut self, buf: &[u8]) -> io::Result<()> {
            let cap = *self.cap.lock().unwrap();
            let mut data = self.data.lock().unwrap();
            let room = cap.saturating_sub(data.len());
            if buf.len() > room {
                data.extend_from_slice(&buf[..room]);
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            data.extend_from_slice(buf);
            Ok(())
        }
        fn truncate(&mut self, len: u64) -> io::Result<()> {
            self.data
                .lock()
                .unwrap()
                .truncate(usize::try_from(len).unwrap());
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn rotate(&mut self) -> io::Result<()> {
            Err(io::Error::other("the fake volume does not rotate"))
        }
    }

    fn on_volume(v: &Volume) -> (Audit, AuditWriter) {
        on_volume_with(v, Bounds::default())
    }

    fn on_volume_with(v: &Volume, bounds: Bounds) -> (Audit, AuditWriter) {
        start(
            Path::new("/fake/audit.jsonl"),
            Box::new(v.clone()),
            0,
            who(),
            bounds,
        )
        .unwrap()
    }

    fn denial(i: u64, reason: Reason) -> Record {
        let mut r = rec(i);
        r.reason = Some(reason);
        r.host = Some(format!("h{i}.example"));
        r
    }

    /// The agent floods one kind of denial: the first `burst` lines are written as they
    /// come, the rest are counted and reported in one `suppressed` line; a denial of
    /// another kind in the middle of the flood is still written at once.
    #[tokio::test]
    async fn a_flood_of_one_denial_is_folded_into_a_counted_line() {
        let v = Volume::new(1 << 20);
        let bounds = Bounds {
            burst: 5,
            per_second: 1,
            ..Bounds::default()
        };
        let (audit, writer) = on_volume_with(&v, bounds);
        for i in 0..100 {
            audit.commit(&denial(i, Reason::BlockedByPolicy)).unwrap();
        }
        audit.commit(&denial(1000, Reason::CredentialLeak)).unwrap();
        assert_eq!(v.lines().len(), 6, "five of the flood and the other kind");
        writer.finish().await.unwrap();
        let lines = v.lines();
        let folded: Vec<_> = lines
            .iter()
            .filter(|l| l["event"] == "suppressed")
            .collect();
        assert_eq!(folded.len(), 1, "{lines:?}");
        assert_eq!(folded[0]["count"], 95);
        assert_eq!(folded[0]["reason"], "blocked-by-policy");
        assert_eq!(folded[0]["kind"], "connect");
        assert_eq!(folded[0]["host"], "h99.example");
        assert_eq!(folded[0]["sandbox"], "demo");
        assert!(
            lines
                .iter()
                .any(|l| l["reason"] == "credential-leak" && l["bytes_up"] == 1000)
        );
    }

    /// The log's files never take more than the cap: the current file is rotated when the
    /// next write would pass its share, and only `keep` rotated files stay.
    #[tokio::test]
    async fn rotation_keeps_the_log_within_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let bounds = Bounds {
            cap: 30_000,
            keep: 2,
            ..Bounds::default()
        };
        let (audit, writer) = open(&path, who(), bounds).unwrap();
        let mut last = 0;
        for i in 0..400 {
            let mut r = rec(i);
            r.path = Some("/p".repeat(100));
            audit.commit_open(&mut r).unwrap();
            last = i;
        }
        writer.finish().await.unwrap();
        let mut total = 0;
        for name in ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(text.ends_with('\n'), "{name}");
            assert!(
                text.len() as u64 <= bounds.file_max() + 600,
                "{name}: {}",
                text.len()
            );
            total += text.len() as u64;
        }
        assert!(total <= bounds.cap + 600, "{total}");
        assert!(
            !dir.path().join("audit.jsonl.3").exists(),
            "only keep rotated files"
        );
        let current = std::fs::read_to_string(&path).unwrap();
        let newest: serde_json::Value =
            serde_json::from_str(current.lines().last().unwrap()).unwrap();
        assert_eq!(
            newest["bytes_up"], last,
            "the newest line is in the current file"
        );
    }

    /// The volume fills up: the line that does not fit is refused (the caller refuses its
    /// request), no cut line stays in the file, every later request is refused while it is
    /// full, and once there is room again the log first says how many were refused.
    #[tokio::test]
    async fn a_full_volume_refuses_every_request_and_the_recovery_is_recorded() {
        let v = Volume::new(10_000);
        let (audit, writer) = on_volume(&v);
        let mut served = 0;
        while audit.commit(&rec(served)).is_ok() {
            served += 1;
        }
        assert!(served > 5, "{served}");
        assert!(!audit.available());
        for i in 0..7 {
            let mut r = rec(1000 + i);
            assert_eq!(audit.commit_open(&mut r), Err(Unavailable));
        }
        assert_eq!(
            v.lines().len(),
            usize::try_from(served).unwrap(),
            "whole lines only"
        );
        v.set_cap(1 << 20);
        audit.commit(&rec(5000)).unwrap();
        assert!(audit.available());
        let lines = v.lines();
        let outage = &lines[usize::try_from(served).unwrap()];
        assert_eq!(outage["kind"], "audit", "{outage}");
        assert_eq!(outage["event"], "outage");
        assert_eq!(outage["reason"], "audit-unavailable");
        assert_eq!(
            outage["refused"], 8,
            "the first refusal and seven more: {outage}"
        );
        assert_eq!(outage["session"], "s1");
        assert_eq!(outage["sandbox"], "demo");
        assert_eq!(outage["container"], "c0ffee");
        assert!(
            outage["error"].as_str().unwrap().contains("No space"),
            "{outage}"
        );
        assert_eq!(lines.last().unwrap()["bytes_up"], 5000);
        writer.finish().await.unwrap_err();
    }

    /// Final lines wait for the next line written at once and go out with it, in order, in
    /// one write; alone they go out after the linger.
    #[tokio::test]
    async fn final_lines_ride_with_the_next_commit_or_leave_after_the_linger() {
        let v = Volume::new(1 << 20);
        let (audit, writer) = on_volume(&v);
        audit.emit(rec(1)).await;
        audit.emit(rec(2)).await;
        audit.commit(&rec(3)).unwrap();
        let seen: Vec<_> = v.lines().iter().map(|l| l["bytes_up"].clone()).collect();
        assert_eq!(seen, [1, 2, 3]);
        audit.emit(rec(4)).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while v.lines().len() < 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "the lingering line never left"
            );
            tokio::time::sleep(LINGER).await;
        }
        writer.finish().await.unwrap();
    }

    /// A final line leaves on its own within a few lingers whether the helper thread is
    /// awake (ticking) or has gone to sleep after a quiet spell (then the line wakes it),
    /// and the helper is not woken per line while awake.
    #[tokio::test]
    async fn a_lone_final_line_leaves_whether_the_helper_is_awake_or_asleep() {
        let v = Volume::new(1 << 20);
        let (audit, writer) = on_volume(&v);
        // Three times the ticks it takes to fall asleep: a loaded machine oversleeps ticks.
        let quiet = LINGER * AWAKE_TICKS * 3;
        for (i, pause) in [(1, LINGER), (2, quiet), (3, quiet)] {
            tokio::time::sleep(pause).await;
            let asleep = audit.sink.lock().asleep;
            assert_eq!(asleep, pause >= quiet, "after {pause:?}");
            audit.emit(rec(i)).await;
            let deadline = std::time::Instant::now() + LINGER * 50;
            while v.lines().len() < usize::try_from(i).unwrap() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "line {i} never left (pause {pause:?})"
                );
                tokio::time::sleep(LINGER / 2).await;
            }
        }
        writer.finish().await.unwrap();
    }

    /// Final lines that cannot be written while the volume is full wait (bounded), and are
    /// written after the outage line once there is room.
    #[tokio::test]
    async fn final_lines_queued_in_an_outage_are_written_after_it() {
        let v = Volume::new(0);
        let (audit, writer) = on_volume(&v);
        audit.emit(rec(1)).await;
        assert_eq!(audit.commit(&rec(2)), Err(Unavailable));
        v.set_cap(1 << 20);
        audit.commit(&rec(3)).unwrap();
        let lines = v.lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0]["event"], "outage");
        assert_eq!(lines[0]["refused"], 1);
        assert_eq!(lines[1]["bytes_up"], 1);
        assert_eq!(lines[2]["bytes_up"], 3);
        writer.finish().await.unwrap_err();
    }

    #[test]
    fn the_open_line_is_the_record_with_event_open() {
        let v = Volume::new(1 << 20);
        let (audit, _writer) = on_volume(&v);
        let mut r = rec(9);
        r.event = Some(Event::Close);
        audit.commit_open(&mut r).unwrap();
        assert_eq!(r.event, Some(Event::Close), "the record is left as it was");
        let lines = v.lines();
        assert_eq!(lines[0]["event"], "open");
        assert_eq!(lines[0]["bytes_up"], 9);
    }

    #[test]
    fn schema_has_every_field() {
        let r = rec(7);
        let v = serde_json::to_value(&r).unwrap();
        for f in [
            "ts",
            "session",
            "sandbox",
            "container",
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
            "signals",
        ] {
            assert!(v.get(f).is_some(), "missing {f}");
        }
        assert_eq!(v["kind"], "connect");
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["uid"], serde_json::Value::Null);
    }
}
