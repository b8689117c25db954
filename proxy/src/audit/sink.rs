//! The writer: one lock over the stream's current file and the lines waiting for it, the
//! fold table, and the helper thread that flushes lingering lines, reports folded denials
//! and sorts the stream's aged-out file (see the parent module's docs for the guarantees).

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use airlock_audit_schema::Timestamp;
use airlock_audit_schema::chain::{self, ChainHash};
use airlock_policy::reason::Reason;

use crate::events::Hub;
use crate::metrics::Metrics;

use super::echo::{add_human, notice, write_human};
use super::files::{Ageing, Classes, LogFile};
use super::fold::{Folds, Summary};
use super::{
    Bounds, Event, FOLD_REPORT, Kind, LINGER, QUEUED_MAX, Record, Unavailable, Verdict, Who,
};

/// What the lock guards: the file and the lines waiting for it.
pub(super) struct State {
    pub(super) file: Box<dyn LogFile>,
    /// Length of the file after the last whole line this process wrote.
    len: u64,
    /// Final lines waiting for the next write.
    pub(super) queued: Vec<u8>,
    /// What they are (allowed or not), for the sort of the file they go into.
    pending: Classes,
    /// Scratch for what one write held (its room kept).
    written: Classes,
    /// Scratch for the line being written at once.
    line: Vec<u8>,
    /// Human echo waiting for the helper thread.
    pub(super) human: String,
    outage: Option<Outage>,
    /// The first write error met (reported by [`super::AuditWriter::finish`]).
    pub(super) first_err: Option<io::Error>,
    pub(super) closed: bool,
    /// The helper thread waits without a deadline: only a notify wakes it (cleared by
    /// whoever notifies). Awake, it looks for lines every [`LINGER`] on its own.
    pub(super) asleep: bool,
    bounds: Bounds,
    /// Denials folded per destination.
    pub(super) folds: Folds,
    /// Who the lines that describe no one request speak for.
    who: Who,
    /// The `chain` of the last line in the file (see `airlock_audit_schema::chain`).
    head: ChainHash,
    /// The `chain` of the last line queued (`head` when none waits): every line is sealed
    /// as it joins the queue or is written at once, after this one.
    tail: ChainHash,
    /// The `chain` of the line in `line`.
    line_chain: ChainHash,
}

/// The write that ends an outage: its line (sealed after the file's last line), then what
/// waited and `st.line` when `with_line`, resealed after it. Returns the bytes, where the
/// lines after the outage line start, and the chain of the last line.
fn outage_batch(st: &State, o: &Outage, with_line: bool) -> (Vec<u8>, usize, ChainHash) {
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
        chain: None,
    };
    let mut head = st.head;
    if serde_json::to_writer(&mut buf, &line).is_ok() {
        head = chain::seal(&mut buf, 0, &head).unwrap_or(head);
        buf.push(b'\n');
    }
    let at = buf.len();
    buf.extend_from_slice(&st.queued);
    if with_line {
        buf.extend_from_slice(&st.line);
    }
    // What waited was sealed after the file's last line: it now follows this one.
    let last = chain::reseal(&mut buf[at..], &head);
    (buf, at, last)
}

/// A window in which the log could not be written.
struct Outage {
    since: SystemTime,
    error: String,
    refused: u64,
    lost: u64,
}

pub(super) struct Sink {
    pub(super) path: PathBuf,
    state: Mutex<State>,
    /// Wakes the helper thread when something waits for it.
    pub(super) wake: Condvar,
    pub(super) available: AtomicBool,
    /// The archives and the sort of the stream's aged-out file (`None`: a log file of the
    /// caller's own, which keeps what its `rotate` keeps).
    pub(super) ageing: Option<Arc<Ageing>>,
    /// Who is told of each record and each line written (set once, by the proxy).
    pub(super) observers: OnceLock<Observers>,
}

/// The counters fed from every record handed over, and the hub fed every line written.
#[derive(Debug)]
pub(super) struct Observers {
    pub(super) hub: Arc<Hub>,
    pub(super) metrics: Arc<Metrics>,
}

impl Sink {
    pub(super) fn new(
        path: PathBuf,
        file: Box<dyn LogFile>,
        len: u64,
        who: Who,
        bounds: Bounds,
        ageing: Option<Arc<Ageing>>,
        head: ChainHash,
    ) -> Self {
        Self {
            path,
            state: Mutex::new(State {
                file,
                len,
                queued: Vec::with_capacity(4096),
                pending: Classes::default(),
                written: Classes::default(),
                line: Vec::with_capacity(1024),
                human: String::new(),
                outage: None,
                first_err: None,
                closed: false,
                asleep: false,
                bounds,
                folds: Folds::new(bounds.first, bounds.destinations),
                who,
                head,
                tail: head,
                line_chain: head,
            }),
            wake: Condvar::new(),
            available: AtomicBool::new(true),
            ageing,
            observers: OnceLock::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves whole lines only (every write is undone on
        // error), so the state is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes everything queued, then `st.line` when `with_line` (`rec`'s, when it is a
    /// request's line), in one go; on failure cuts the file back to its last whole line and
    /// enters (or stays in) the outage.
    fn write_out(
        &self,
        st: &mut State,
        with_line: bool,
        rec: Option<&Record>,
    ) -> Result<(), Unavailable> {
        let incoming = st.queued.len() as u64 + if with_line { st.line.len() as u64 } else { 0 };
        if st.len > 0 && st.len + incoming > st.bounds.file_max() {
            match st.file.rotate() {
                Ok(()) => st.len = 0,
                Err(e) => return Err(self.failed(st, e)),
            }
            if let Some(a) = &self.ageing {
                // A sort it had to finish may have dropped lines: say so with this write.
                take_notes(a, st);
                if with_line {
                    // The line now follows those notes.
                    st.line_chain = chain::reseal(&mut st.line, &st.tail);
                }
                if std::mem::take(&mut st.asleep) {
                    self.wake.notify_one(); // the new sort is the helper's
                }
            }
        }
        let mut outage_line = 0;
        let new_head;
        let result = if let Some(o) = &st.outage {
            // Recovering: the outage line first, then what waited, then this line.
            let (buf, at, head) = outage_batch(st, o, with_line);
            outage_line = at;
            new_head = head;
            st.file.append(&buf).map(|()| {
                self.published(&buf);
                buf.len()
            })
        } else if with_line && st.queued.is_empty() {
            new_head = st.line_chain;
            st.file.append(&st.line).map(|()| {
                self.published(&st.line);
                st.line.len()
            })
        } else {
            new_head = if with_line { st.line_chain } else { st.tail };
            let base = st.queued.len();
            if with_line {
                st.queued.extend_from_slice(&st.line);
            }
            let r = st.file.append(&st.queued).map(|()| {
                self.published(&st.queued);
                st.queued.len()
            });
            if r.is_err() {
                st.queued.truncate(base);
            }
            r
        };
        match result {
            Ok(written) => {
                st.len += written as u64;
                st.head = new_head;
                st.tail = new_head;
                let mut classes = std::mem::take(&mut st.written);
                classes.push(false, outage_line);
                classes.append(&mut st.pending);
                if with_line {
                    classes.push(rec.is_some_and(allowed), st.line.len());
                }
                st.file.written(&mut classes);
                classes.clear();
                st.written = classes;
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

    /// `lines` are in the file now: the event stream's hub gets them.
    fn published(&self, lines: &[u8]) {
        if let Some(o) = self.observers.get() {
            o.hub.publish(lines);
        }
    }

    /// `rec` is handed to the log (written, queued or folded): counted.
    fn counted(&self, rec: &Record) {
        if let Some(o) = self.observers.get() {
            o.metrics.record(rec);
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
            st.pending.clear();
            st.tail = st.head;
        }
        st.first_err.get_or_insert(e);
        Unavailable
    }

    /// Whether a denial of this kind to no known host would be written now rather than
    /// folded; nothing changes.
    pub(super) fn admits(&self, kind: Kind, reason: Reason) -> bool {
        self.lock().folds.admits(kind, reason, None, None)
    }

    /// Queues the `suppressed` line of every destination with folded denials (and of every
    /// overflow), and lets idle destinations leave the table.
    pub(super) fn flush_folds(&self) {
        let mut out = Vec::new();
        let mut st = self.lock();
        st.folds.report(&mut out);
        for s in out {
            queue_summary(&mut st, s);
        }
    }

    /// Writes `rec` now (with the lines queued before it).
    pub(super) fn commit(&self, rec: &Record) -> Result<(), Unavailable> {
        self.counted(rec);
        let mut st = self.lock();
        let st = &mut *st;
        if rec.decision == Verdict::Deny
            && let Some(reason) = rec.reason
            && !st
                .folds
                .admit(rec.kind, reason, rec.host.as_deref(), rec.port, rec.ts)
        {
            return Ok(()); // counted: its destination's `suppressed` line says how many
        }
        st.line.clear();
        if rec.write_json(&mut st.line).is_err() {
            return Err(Unavailable);
        }
        seal_line(st);
        // The echo is of decisions as they end: an open line's request echoes its final one.
        if rec.event != Some(Event::Open) {
            add_human(&mut st.human, rec);
        }
        let r = self.write_out(st, true, Some(rec));
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
    pub(super) fn commit_reload(
        &self,
        change: &super::Change,
        policy: Option<airlock_audit_schema::PolicyReload>,
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
            policy,
            chain: None,
        };
        st.line.clear();
        if serde_json::to_writer(&mut st.line, &line).is_err() {
            return Err(Unavailable);
        }
        seal_line(st);
        let r = self.write_out(st, true, None);
        if r.is_err() {
            // Not a request to refuse: the line waits, and follows the outage line.
            let mut line = std::mem::take(&mut st.line);
            // After what waits now (a failure may have dropped the queue).
            st.tail = chain::reseal(&mut line, &st.tail);
            st.queued.extend_from_slice(&line);
            st.pending.push(false, line.len());
            st.line = line;
        }
        r
    }

    /// Queues `rec` for the next write (at the latest after [`LINGER`]).
    pub(super) fn queue(&self, rec: &Record) {
        self.counted(rec);
        let mut st = self.lock();
        if st.closed {
            drop(st);
            super::echo::log_human(rec);
            tracing::error!("audit log already closed: a record reached stderr only");
            return;
        }
        let whole = st.queued.len();
        if rec.write_json(&mut st.queued).is_ok() {
            seal_queued(&mut st, whole);
            st.queued.push(b'\n');
            let n = st.queued.len() - whole;
            st.pending.push(allowed(rec), n);
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
    pub(super) fn flush(&self) -> Result<(), Unavailable> {
        let mut st = self.lock();
        if st.queued.is_empty() {
            return Ok(());
        }
        self.write_out(&mut st, false, None)
    }

    /// Queues the `rotated` lines the sort noted.
    fn take_notes(&self) {
        if let Some(a) = &self.ageing
            && a.noted()
        {
            take_notes(a, &mut self.lock());
        }
    }

    /// Finishes the sort in progress and writes everything waiting, until nothing does (a
    /// last write may rotate and start another sort).
    pub(super) fn drain(&self) {
        loop {
            self.flush_folds();
            if let Some(a) = &self.ageing
                && let Err(e) = a.finish()
            {
                self.lock().first_err.get_or_insert(e);
                self.take_notes();
                let _ = self.flush();
                return;
            }
            self.take_notes();
            let _ = self.flush();
            if !self
                .ageing
                .as_ref()
                .is_some_and(|a| a.pending() || a.noted())
            {
                return;
            }
        }
    }
}

/// Whether the sort counts `rec`'s line as allowed (it let something through).
fn allowed(rec: &Record) -> bool {
    rec.decision != Verdict::Deny
}

/// Queues the `rotated` lines `ageing` noted.
fn take_notes(ageing: &Ageing, st: &mut State) {
    let mut notes = Vec::new();
    ageing.take_notes(&mut notes);
    let before = st.queued.len();
    for line in notes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let start = st.queued.len();
        st.queued.extend_from_slice(line);
        seal_queued(st, start);
        st.queued.push(b'\n');
    }
    st.pending.push(false, st.queued.len() - before);
}

/// Seals the line at `st.queued[start..]` (no newline yet) after the last one queued.
fn seal_queued(st: &mut State, start: usize) {
    if let Some(c) = chain::seal(&mut st.queued, start, &st.tail) {
        st.tail = c;
    }
}

/// Seals the line in `st.line` (no newline yet) after the last one queued, and ends it.
fn seal_line(st: &mut State) {
    st.line_chain = chain::seal(&mut st.line, 0, &st.tail).unwrap_or(st.tail);
    st.line.push(b'\n');
}

/// Queues one `event: suppressed` line.
fn queue_summary(st: &mut State, s: Summary) {
    let line = airlock_audit_schema::Suppressed {
        ts: Timestamp::now(),
        session: Arc::clone(&st.who.session),
        sandbox: Arc::clone(&st.who.sandbox),
        container: st.who.container.clone(),
        kind: s.kind,
        event: Event::Suppressed,
        decision: Verdict::Deny,
        reason: s.reason,
        since: s.since,
        count: s.count,
        host: s.host,
        port: s.port,
        until: Some(s.until),
        overflow: s.overflow,
        first_host: s.first_host,
        chain: None,
    };
    let before = st.queued.len();
    if serde_json::to_writer(&mut st.queued, &line).is_ok() {
        seal_queued(st, before);
        st.queued.push(b'\n');
        st.pending.push(false, st.queued.len() - before);
    } else {
        st.queued.truncate(before);
    }
}

fn count_lines(b: &[u8]) -> u64 {
    b.iter().filter(|c| **c == b'\n').count() as u64
}

/// Ticks of [`LINGER`] with nothing to write after which the helper thread sleeps until a
/// line wakes it (an idle proxy costs no wakes; a busy one no notify per line).
pub(super) const AWAKE_TICKS: u32 = 64;

/// Waits for queued lines, lets them linger, writes them and the human echo. While lines
/// keep coming it ticks every [`LINGER`] and writes what no commit carried; after
/// [`AWAKE_TICKS`] idle ticks it sleeps until a producer wakes it (then the line lingers
/// for company first). Between writes it sorts the stream's aged-out file a step at a time
/// (a step that fails is tried again after [`FOLD_REPORT`]), and once a second it reports
/// folded denials.
pub(super) fn helper_loop(sink: &Sink) {
    let mut folds_reported = Instant::now();
    let mut next_step = Instant::now();
    let ageing_due = |next_step: Instant| {
        sink.ageing
            .as_ref()
            .is_some_and(|a| a.noted() || (a.pending() && Instant::now() >= next_step))
    };
    loop {
        let woken = {
            let mut st = sink.lock();
            let (mut idle, mut woken) = (0, false);
            while st.queued.is_empty()
                && st.human.is_empty()
                && !st.closed
                && !ageing_due(next_step)
            {
                if !st.folds.is_empty() && folds_reported.elapsed() >= FOLD_REPORT {
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
            folds_reported = Instant::now();
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
        if let Some(a) = &sink.ageing {
            if a.pending() && Instant::now() >= next_step && a.step().is_err() {
                next_step = Instant::now() + retry_after();
            }
            if a.noted() {
                // At once: the lines it accounts for are already gone from the disk.
                sink.take_notes();
                let _ = sink.flush();
            }
        }
    }
}

/// How long a failed sort step waits before it is tried again.
const fn retry_after() -> Duration {
    FOLD_REPORT
}
