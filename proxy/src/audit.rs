//! The audit log: one JSON line per decision, written **before** the decision takes effect,
//! kept within its cap so that the agent can neither fill the volume nor erase its record.
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
//! takes microseconds); a helper thread flushes lingering final lines, writes the human
//! echo, reports folded denials and sorts aged-out files. While lines keep coming the helper
//! looks for them every [`LINGER`] on its own, so a request never pays a wake-up of another
//! thread (a futex call) for its final line; after a quiet spell it sleeps until a line
//! wakes it. Each record is also echoed as one compact human line on stderr (at the `info`
//! level of `AIRLOCK_PROXY_LOG`), one `write(2)` per batch.
//!
//! # Folding (`fold`)
//!
//! Denials are folded per **destination** (listener, reason, host and port): the first
//! [`Bounds::first`] lines to each are written whole; later ones to it are counted, and once
//! a second each destination with a count gets its own `event: suppressed` line (`host`,
//! `port`, `count`, `since`..`until`). The table of destinations holds at most
//! [`Bounds::destinations`]; a destination met while it is full is counted in its kind's
//! overflow line (`overflow: true`, the `count`, the `first_host` and the last `host`). A
//! destination that saw no denial for a report's second leaves the table. So every denied
//! destination is named in the log, each with every denial to it counted, unless more than
//! [`Bounds::destinations`] are busy at once; then the ones past it are counted, and the
//! first and last of them named.
//!
//! # Retention (`files`, `retain`)
//!
//! The cap ([`Bounds::cap`], `AIRLOCK_AUDIT_CAP`) is shared by three parts, each bounded on
//! its own: the **stream** (`audit.jsonl` and its rotated files: every line in the order
//! written; half the cap), the **allowed archive** (`audit.jsonl.allowed…`: a quarter) and
//! the **first archive** (`audit.jsonl.first…`: a quarter). When the stream's oldest file
//! ages out, its lines are sorted by what they are: the lines of requests let through move
//! to the allowed archive; the first denial line to each destination in that file, the
//! overflow counts and the log's own lines move to the first archive; the rest (further
//! lines to a destination already recorded there, and per-destination counts) are dropped.
//! An archive past its share deletes its oldest file. Whatever leaves the log is said by a
//! `kind: audit`, `event: rotated` line: from which part, how many lines and bytes, their
//! time span, and, for all the session dropped so far, per kind, event, decision and reason
//! their lines, folded denials and destinations (the allowed archive's lines, copied unread
//! to keep a flood of allowed requests cheap, are counted under kind `*`). This runs on the
//! helper thread, off the request path: the writer only notes which lines it let through.
//!
//! **The invariant**: *a line leaves the log only for newer lines of its own class* — a
//! flood line for newer lines of any kind (the stream's half of the cap), an allowed line
//! only for newer allowed lines, a first line only for newer first lines — *and never
//! unsaid*: every line dropped is counted in a `rotated` line. So no number of denials can
//! push out the record of an allowed request or of the first attempt on a destination, and
//! no number of allowed requests the first attempt on a destination; what the agent's own
//! flood can push out is only more of its flood, and the log says how much.
//!
//! # Hash chain
//!
//! Every line ends with `chain`, the hash of the line and of the `chain` of the line before
//! it (`airlock_audit_schema::chain`): the writer seals each line as it joins the queue or
//! is written at once, under the lock, after the last one queued, so the lines are chained
//! in the order they reach the file (an outage line put before lines that waited is sealed
//! with them again). A start continues from the stream's last line (`files::last_chain`);
//! the `rotated` line of an aged-out stream file names its last line's `chain` (`after`),
//! which the oldest kept file follows. `airlock audit verify` checks it.
//!
//! # Schema
//!
//! The types are `airlock-audit-schema`'s, which readers deserialize with; every field is
//! always present; unknown values are `null`.
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
//! The suppressed line: `ts`, `session`, `sandbox`, `container`, `kind`, `event:
//! suppressed`, `decision: deny`, `reason`, `since`, `count`, `host`, `port`, `until`,
//! `overflow`, `first_host` (see Folding).
//!
//! The reload line ([`Audit::reload`]): `ts`, `session`, `sandbox`, `container`, `kind:
//! audit`, `event: reload`, `decision` (`allow`: the new rules are in force; `deny`: they
//! were refused and `error` says why), `needles`, `files`, `added`, `dropped` (counts).
//!
//! The outage line: `ts` (when writing worked again), `session`, `sandbox`, `container`,
//! `kind: audit`,
//! `event: outage`, `decision: deny`, `reason: audit-unavailable`, `since` (the first failed
//! write), `error`, `refused` (requests refused meanwhile), `lost` (final lines dropped).
//!
//! The rotated line: `ts`, `session`, `sandbox`, `container`, `kind: audit`, `event:
//! rotated`, `part` (`stream`|`allowed`|`first`: where lines just left), `lines`, `bytes`,
//! `since`, `until` (of the lines just dropped), `to_allowed`, `to_first` (lines the stream
//! moved instead), and `total`: everything this session's log dropped so far, these lines
//! included (`lines`, `bytes`, `since`, `until`, `unlisted`, and `dropped`: per kind, event,
//! decision and reason, `lines`, `bytes`, `folded`, `since`, `until`, `hosts` with their
//! lines and folded counts, the first 16 met, and `other_lines`/`other_folded` past them).
//! So the newest rotated line of a session accounts for all it dropped; an older one of the
//! same session is itself a line the stream may drop (the line that drops it counts it).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use airlock_audit_schema::chain::GENESIS;
use airlock_policy::reason::Reason;

mod echo;
mod files;
mod fold;
mod retain;
mod sink;

pub use files::LogFile;
use sink::Sink;

/// How long a final line may wait for company before the helper thread writes it.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(2);
/// Bytes of final lines that may wait while the log cannot be written; past this they are
/// dropped and counted (`lost` in the outage line).
pub const QUEUED_MAX: usize = 1 << 20;
/// How often folded denials are reported (their `suppressed` lines), and idle destinations
/// leave the table.
pub const FOLD_REPORT: std::time::Duration = std::time::Duration::from_secs(1);

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
// `airlock-audit-schema`. The writer, retention, folding and `Pending` stay here.
pub use airlock_audit_schema::{Event, Kind, SCHEMA_VERSION, Verdict, Who};

/// One audit line, its refusal code typed. Build it with [`Record::new`] and fill what is
/// known.
pub type Record = airlock_audit_schema::Record<Reason>;

/// What a reload of the rules changed, in counts (never values): what the reload line
/// ([`Audit::reload`]) records. `snapshot::Rules::change` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// Workspace needles in force afterwards.
    pub needles: u64,
    /// Files they were found in.
    pub files: u64,
    /// Needles the reload added.
    pub added: u64,
    /// Needles it dropped.
    pub dropped: u64,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "workspace secrets reloaded: {} needles from {} files ({} new, {} gone)",
            self.needles, self.files, self.added, self.dropped
        )
    }
}

impl From<crate::tunnel::End> for Event {
    fn from(end: crate::tunnel::End) -> Self {
        match end {
            crate::tunnel::End::Closed => Self::Close,
            crate::tunnel::End::Error => Self::CloseError,
            crate::tunnel::End::Idle => Self::CloseIdle,
            crate::tunnel::End::Shutdown => Self::CloseShutdown,
            crate::tunnel::End::Revoked => Self::CloseRevoked,
        }
    }
}

/// How much disk the log may take, and how repeated denials are folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes the log's files may take together (plus one write): half for the stream, a
    /// quarter for each archive (see the module docs).
    pub cap: u64,
    /// Rotated stream files kept (`audit.jsonl.1` … `audit.jsonl.<keep>`, newest first); at
    /// least 1.
    pub keep: u32,
    /// Denial lines to one destination written whole before the rest are counted; at least 1.
    pub first: u32,
    /// Destinations the fold table holds at most (all kinds together).
    pub destinations: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            cap: airlock_channels::DEFAULT_AUDIT_CAP,
            keep: 4,
            first: 64,
            destinations: 1024,
        }
    }
}

impl Bounds {
    /// The stream's share of the cap: half.
    #[must_use]
    pub fn stream_share(&self) -> u64 {
        self.cap / 2
    }

    /// The allowed archive's share: a quarter.
    #[must_use]
    pub fn allowed_share(&self) -> u64 {
        self.cap / 4
    }

    /// The first archive's share: the rest (a quarter).
    #[must_use]
    pub fn first_share(&self) -> u64 {
        self.cap - self.stream_share() - self.allowed_share()
    }

    /// The size past which the stream's current file is rotated: its share over its current
    /// file, `keep` rotated ones and the one being sorted, and never more than an archive's
    /// file (so that one stream file's allowed lines fit in one).
    #[must_use]
    pub fn file_max(&self) -> u64 {
        let archive = u64::from(files::ARCHIVE_FILES);
        (self.stream_share() / u64::from(self.keep.max(1) + 2))
            .min(self.allowed_share() / archive)
            .min(self.first_share() / archive)
    }
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
    pub fn reload(&self, change: &Change, refused: Option<String>) -> Result<(), Unavailable> {
        self.sink.commit_reload(change, None, refused)
    }

    /// Writes the line of a policy reload now, before any decision under the new revision
    /// (`kind: audit`, `event: reload`, with `revision`, `hash`, `previous_hash`, `origin`
    /// and `closed`): as [`reload`](Self::reload), and `refused` when the new policy was not
    /// loaded (`policy` then names the revision that stays).
    ///
    /// # Errors
    /// [`Unavailable`]: the log cannot be written now; the caller must not load the new
    /// revision (a change the log cannot record does not take effect).
    pub fn policy_reload(
        &self,
        change: &Change,
        policy: airlock_audit_schema::PolicyReload,
        refused: Option<String>,
    ) -> Result<(), Unavailable> {
        self.sink.commit_reload(change, Some(policy), refused)
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

    /// Whether a denial of `kind` with `reason` to no known host (a dropped DNS datagram)
    /// would have its own line now, rather than be folded into that destination's counted
    /// `suppressed` line (nothing changes). For work worth doing only for a line that is
    /// written (a uid lookup).
    #[must_use]
    pub fn admits_denial(&self, kind: Kind, reason: Reason) -> bool {
        self.sink.admits(kind, reason)
    }

    /// Feeds `metrics` every record handed to the log and `hub` every line written to it,
    /// from now on (the proxy's admin API reads both). Once: a second call changes nothing
    /// and returns `false`.
    pub fn observe(
        &self,
        hub: Arc<crate::events::Hub>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> bool {
        self.sink
            .observers
            .set(sink::Observers { hub, metrics })
            .is_ok()
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

/// Opens (append, create `0600`, no symlink following) `path` and its archives, and starts
/// the helper thread (which first sorts a file an earlier start left aging). `who` is written
/// on the lines that describe no one request (outage, suppressed, rotated).
///
/// # Errors
/// [`AuditError::Open`] when the file cannot be opened, [`AuditError::Spawn`] when the
/// thread cannot be started.
pub fn open(path: &Path, who: Who, bounds: Bounds) -> Result<(Audit, AuditWriter), AuditError> {
    let open_err = |source| AuditError::Open {
        path: path.to_owned(),
        source,
    };
    let file = files::open_append(path).map_err(open_err)?;
    let len = file.metadata().map_err(open_err)?.len();
    let ageing = Arc::new(
        files::Ageing::new(
            path,
            who.clone(),
            bounds.allowed_share(),
            bounds.first_share(),
            bounds.destinations.saturating_mul(4),
        )
        .map_err(open_err)?,
    );
    // The chain goes on from the stream's last line (a new one starts on an empty stream).
    let head = files::last_chain(path, bounds.keep)
        .map_err(open_err)?
        .unwrap_or(GENESIS);
    let file = files::Rotating::new(path, file, len, bounds.keep, Arc::clone(&ageing));
    launch(Sink::new(
        path.to_owned(),
        Box::new(file),
        len,
        who,
        bounds,
        Some(ageing),
        head,
    ))
}

/// The log on a `file` of the caller's own (already `len` bytes long), reported as `path`:
/// no archives; what its [`LogFile::rotate`] keeps is all that is kept. Its hash chain
/// starts anew (the file's earlier lines are not read).
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
    launch(Sink::new(
        path.to_owned(),
        file,
        len,
        who,
        bounds,
        None,
        GENESIS,
    ))
}

fn launch(sink: Sink) -> Result<(Audit, AuditWriter), AuditError> {
    let sink = Arc::new(sink);
    let helper = Arc::clone(&sink);
    let thread = std::thread::Builder::new()
        .name("audit-writer".into())
        // Sorting reads lines with serde_json (shallow lines, its own depth limit).
        .stack_size(256 * 1024)
        .spawn(move || sink::helper_loop(&helper))
        .map_err(AuditError::Spawn)?;
    let audit = Audit { sink };
    Ok((audit.clone(), AuditWriter { audit, thread }))
}

impl AuditWriter {
    /// Reports folded denials, finishes a sort in progress, writes everything queued so far,
    /// syncs the file and stops the helper thread. Lines queued after this are reported on
    /// stderr only.
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
        let drained = Arc::clone(&sink);
        tokio::task::spawn_blocking(move || drained.drain())
            .await
            .map_err(|_| AuditError::WriterDied)?;
        let mut st = sink.lock();
        if let Err(e) = st.file.sync() {
            st.first_err.get_or_insert(e);
        }
        echo::write_human(&mut st.human);
        match st.first_err.take() {
            None => Ok(()),
            Some(source) => Err(AuditError::Write {
                path: sink.path.clone(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod attack_tests;

#[cfg(test)]
mod chain_tests;
