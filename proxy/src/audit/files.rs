//! The log's files: the stream the sink appends to, and the two archives that keep what the
//! stream ages out (the rule that sorts the lines: [`super::retain`]).
//!
//! ```text
//! audit.jsonl, audit.jsonl.1 … .<keep>   the stream: every line, newest file first
//! audit.jsonl.aging                      the stream's oldest file while it is sorted
//! audit.jsonl.allowed, .allowed.1, .2    allowed lines the stream aged out
//! audit.jsonl.first, .first.1, .2        first lines the stream aged out
//! ```
//!
//! Rotating the stream ([`LogFile::rotate`], on the writer's thread under the sink's lock)
//! only renames: its oldest file becomes `audit.jsonl.aging`, and the helper thread sorts it
//! a bounded step at a time ([`Ageing::step`]) outside that lock: allowed and first lines
//! are appended to their archive, the rest only counted. The writer noted which lines it let
//! through ([`Classes`]), so those are copied as they stand, unread, and only the others
//! are read (a file written before this start is read whole). When it is through, the
//! archives are synced, the file is deleted and a `rotated` line says what was dropped. An
//! archive whose current file would pass a third of its share rotates too, deleting its
//! oldest file with a `rotated` line: the first archive's lines by kind, reason and host
//! (read then if this start did not write them), the allowed archive's counted unread
//! (lines, bytes, the first and last line's times). A rotation that finds the previous sort
//! unfinished finishes it first; one that cannot (the archive cannot be written) fails, and
//! the sink refuses requests until it can (nothing is deleted that was not first kept or
//! counted).
//!
//! A crash while sorting leaves `audit.jsonl.aging`, which the next start sorts again: lines
//! it had already moved are then in an archive twice, never missing. The `rotated` line is
//! written by the helper right after the file is deleted (the kept lines are synced before);
//! like a final line, it is lost only if the proxy dies in that moment.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use airlock_audit_schema::chain::{self, ChainHash};
use airlock_audit_schema::{Part, Who};

use super::retain::{Class, Peek, Seen, Tally, classify, rotated};

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
    /// Moves the current file aside (the oldest kept one ages out) and starts an empty one.
    ///
    /// # Errors
    /// The I/O error; the current file is then still the one written.
    fn rotate(&mut self) -> io::Result<()>;
    /// What the last [`append`](Self::append) held, as the writer saw it (taken; a log file
    /// without archives ignores it).
    fn written(&mut self, classes: &mut Classes) {
        classes.clear();
    }
}

/// Lines as the writer saw them: runs of lines it let through (allowed) and of others, in
/// bytes. The sort copies an allowed run into the allowed archive as it stands; it reads
/// only the other lines.
#[derive(Debug, Clone, Default)]
pub struct Classes {
    runs: std::collections::VecDeque<(bool, u64)>,
}

impl Classes {
    /// `bytes` of lines, allowed or not.
    pub fn push(&mut self, allowed: bool, bytes: usize) {
        let bytes = bytes as u64;
        match self.runs.back_mut() {
            Some((a, n)) if *a == allowed => *n += bytes,
            _ => self.runs.push_back((allowed, bytes)),
        }
    }

    /// Moves `other`'s lines after these (`other` keeps its room).
    pub fn append(&mut self, other: &mut Classes) {
        for (a, n) in other.runs.drain(..) {
            self.push(a, usize::try_from(n).unwrap_or(usize::MAX));
        }
    }

    /// Forgets everything (keeping the room).
    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

/// Files each archive keeps: its current one and two rotated.
pub const ARCHIVE_FILES: u32 = 3;
/// Bytes of the aging file read per step of the helper thread (a millisecond or two).
const STEP: usize = 256 * 1024;
/// Archive bytes gathered before a `write(2)`.
const ARCHIVE_BUF: usize = 64 * 1024;

/// Opens `path` for appending: created `0600`, symlinks refused.
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// `path` with `.suffix` appended.
#[must_use]
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".");
    p.push(suffix);
    PathBuf::from(p)
}

/// `path` with `.n` appended (`n` > 0), or `path` itself for 0.
fn numbered(path: &Path, n: u32) -> PathBuf {
    if n == 0 {
        path.to_owned()
    } else {
        with_suffix(path, &n.to_string())
    }
}

/// Renames `path.<n-1>` → `path.<n>` … `path` → `path.1` (a missing one is skipped).
fn shift(path: &Path, last: u32) -> io::Result<()> {
    for n in (0..last).rev() {
        match std::fs::rename(numbered(path, n), numbered(path, n + 1)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The stream on disk: `path`, and `path.1` … `path.<keep>` rotated, newest first.
pub struct Rotating {
    path: PathBuf,
    file: File,
    keep: u32,
    ageing: std::sync::Arc<Ageing>,
    /// What each file holds as the writer saw it, current first (`None`: written before
    /// this start; the sort reads every line).
    classes: std::collections::VecDeque<Option<Classes>>,
}

impl Rotating {
    /// The stream at `path` (opened as `file`, `len` bytes long), keeping `keep` rotated
    /// files, whose oldest ages out through `ageing`.
    #[must_use]
    pub fn new(
        path: &Path,
        file: File,
        len: u64,
        keep: u32,
        ageing: std::sync::Arc<Ageing>,
    ) -> Self {
        let keep = keep.max(1);
        let mut classes: std::collections::VecDeque<_> = (0..=keep).map(|_| None).collect();
        let mut current = Classes::default();
        current.push(false, usize::try_from(len).unwrap_or(usize::MAX)); // read by the sort
        classes[0] = Some(current);
        Self {
            path: path.to_owned(),
            file,
            keep,
            ageing,
            classes,
        }
    }
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
        let oldest = numbered(&self.path, self.keep);
        if exists(&oldest) {
            let classes = self.classes.back_mut().and_then(Option::take);
            if let Err(e) = self.ageing.age(&oldest, classes.clone()) {
                if let Some(slot) = self.classes.back_mut() {
                    *slot = classes;
                }
                return Err(e);
            }
        }
        shift(&self.path, self.keep)?;
        self.file = open_append(&self.path)?;
        self.classes.pop_back();
        self.classes.push_front(Some(Classes::default()));
        Ok(())
    }

    fn written(&mut self, classes: &mut Classes) {
        match self.classes.front_mut() {
            Some(Some(c)) => c.append(classes),
            _ => classes.clear(),
        }
    }
}

/// One archive: a current file and its rotated ones, within a share of the cap.
struct Archive {
    part: Part,
    path: PathBuf,
    /// Opened on the first line kept.
    file: Option<File>,
    /// Bytes in the current file.
    len: u64,
    /// Its size bound: a third of the share.
    max: u64,
    /// Lines waiting for their `write(2)`.
    buf: Vec<u8>,
    /// What each file holds, current first (`None`: written before this start, read when
    /// it is deleted).
    tallies: Vec<Option<Tally>>,
}

impl Archive {
    fn new(part: Part, stream: &Path, share: u64) -> Self {
        let path = with_suffix(stream, part.as_str());
        let len = std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
        let mut tallies = vec![None; ARCHIVE_FILES as usize];
        if len == 0 {
            tallies[0] = Some(Tally::default());
        }
        Self {
            part,
            path,
            file: None,
            len,
            max: (share / u64::from(ARCHIVE_FILES)).max(1),
            buf: Vec::new(),
            tallies,
        }
    }

    /// Adds `line` (newline included), read as `peek`; rotates first when it would take the
    /// current file past its bound.
    ///
    /// # Errors
    /// Writing what waited, or rotating, failed: `line` was not added.
    fn push(&mut self, line: &[u8], peek: Option<&Peek<'_>>, notes: &mut Notes) -> io::Result<()> {
        if self.buf.len() >= ARCHIVE_BUF {
            self.flush()?;
        }
        let held = self.len + self.buf.len() as u64;
        if held > 0 && held + line.len() as u64 > self.max {
            self.flush()?;
            self.rotate(notes)?;
        }
        self.buf.extend_from_slice(line);
        // `None`: the file holds lines of an earlier start, counted when it is deleted.
        if let Some(t) = &mut self.tallies[0] {
            t.add(line.len(), peek);
        }
        Ok(())
    }

    /// Adds whole lines nobody read (an allowed run): the current file's account becomes
    /// unknown (read when it is deleted). Rotates between lines where they would take it past
    /// its bound.
    ///
    /// # Errors
    /// Writing what waited, or rotating, failed: the lines from the returned offset on
    /// were not added (`Err` carries how many bytes were).
    fn append_unread(
        &mut self,
        mut lines: &[u8],
        notes: &mut Notes,
    ) -> Result<(), (usize, io::Error)> {
        let total = lines.len();
        while !lines.is_empty() {
            let done = total - lines.len();
            if self.buf.len() >= ARCHIVE_BUF {
                self.flush().map_err(|e| (done, e))?;
            }
            let held = self.len + self.buf.len() as u64;
            let room = usize::try_from(self.max.saturating_sub(held)).unwrap_or(usize::MAX);
            // The whole lines that fit, or (in an empty file) at least one.
            let mut take = lines[..room.min(lines.len())]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            if take == 0 {
                if held > 0 {
                    self.flush().map_err(|e| (done, e))?;
                    self.rotate(notes).map_err(|e| (done, e))?;
                    continue;
                }
                take = lines
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(lines.len(), |i| i + 1);
            }
            self.buf.extend_from_slice(&lines[..take]);
            self.tallies[0] = None;
            lines = &lines[take..];
        }
        Ok(())
    }

    /// Writes what waits; on failure the file is cut back to its last whole line and the
    /// lines wait on.
    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(open_append(&self.path)?),
        };
        if let Err(e) = file.write_all(&self.buf) {
            let _ = file.set_len(self.len);
            return Err(e);
        }
        self.len += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        match &self.file {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    /// Deletes the oldest file (its account noted) and starts an empty current one.
    fn rotate(&mut self, notes: &mut Notes) -> io::Result<()> {
        let last = ARCHIVE_FILES - 1;
        let oldest = numbered(&self.path, last);
        if exists(&oldest) {
            let tally = match (self.tallies[last as usize].take(), self.part) {
                (Some(t), _) => t,
                // Allowed lines copied unread: counted, not read now either.
                (None, Part::Allowed) => count_lines(&oldest)?,
                (None, _) => read_tally(&oldest)?,
            };
            std::fs::remove_file(&oldest)?;
            notes.add(&tally, self.part, 0, 0, None);
        }
        if let Some(f) = &self.file {
            f.sync_data()?;
        }
        shift(&self.path, last)?;
        self.file = Some(open_append(&self.path)?);
        self.len = 0;
        self.tallies.rotate_right(1);
        self.tallies[0] = Some(Tally::default());
        Ok(())
    }
}

/// The `chain` of the last line of `file` (`None`: empty, or a last line without one).
fn tail_chain(file: &File) -> io::Result<Option<ChainHash>> {
    let len = file.metadata()?.len();
    let mut want = 4096_u64;
    let mut buf = Vec::new();
    loop {
        let from = len.saturating_sub(want);
        buf.resize(usize::try_from(len - from).unwrap_or(usize::MAX), 0);
        file.read_exact_at(&mut buf, from)?;
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        // The last line is whole once a newline before it is in the buffer, or at the start.
        if from == 0 || body.contains(&b'\n') {
            return Ok(chain::last(&buf));
        }
        want *= 4;
    }
}

/// The `chain` of the stream's last line: of the newest of `path`, `path.1` …
/// `path.<keep>` and `path.aging` that holds a line (`None`: the stream is empty, or its
/// last line was written before the chain existed).
///
/// # Errors
/// A file there cannot be opened or read.
pub fn last_chain(path: &Path, keep: u32) -> io::Result<Option<ChainHash>> {
    let candidates = (0..=keep.max(1))
        .map(|n| numbered(path, n))
        .chain(std::iter::once(with_suffix(path, "aging")));
    for p in candidates {
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&p)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if file.metadata()?.len() > 0 {
            return tail_chain(&file);
        }
    }
    Ok(None)
}

/// Every line of `path`, counted (a file written before this start).
fn read_tally(path: &Path) -> io::Result<Tally> {
    let file = File::open(path)?;
    let mut tally = Tally::default();
    let mut at = 0;
    let mut buf = Vec::new();
    loop {
        let (lines, next, eof) = read_lines(&file, at, &mut buf)?;
        for line in lines.split_inclusive(|b| *b == b'\n') {
            tally.add(line.len(), Peek::read(trim(line)).as_ref());
        }
        at = next;
        if eof {
            return Ok(tally);
        }
    }
}

/// The lines of `path` counted unread: their number, bytes, and the times of its first and
/// last line (`None` for a line longer than a step).
pub(super) fn count_lines(path: &Path) -> io::Result<Tally> {
    let file = File::open(path)?;
    let (mut lines, mut bytes) = (0u64, 0u64);
    let mut first = None;
    let mut buf = vec![0u8; STEP];
    loop {
        let n = file.read_at(&mut buf, bytes)?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        if bytes == 0 {
            let end = chunk.iter().position(|b| *b == b'\n').unwrap_or(n);
            first = Peek::read(&chunk[..end]).and_then(|p| p.ts);
        }
        bytes += n as u64;
    }
    // The last line: the tail of the file after its last-but-one newline.
    let tail = bytes.min(STEP as u64);
    let n = file.read_at(
        &mut buf[..usize::try_from(tail).unwrap_or(STEP)],
        bytes - tail,
    )?;
    let body = buf[..n].strip_suffix(b"\n").unwrap_or(&buf[..n]);
    let last = match body.iter().rposition(|b| *b == b'\n') {
        Some(i) => &body[i + 1..],
        None if tail == bytes => body,
        None => &[][..],
    };
    let mut tally = Tally::default();
    tally.add_unread(lines, bytes, first, Peek::read(last).and_then(|p| p.ts));
    Ok(tally)
}

/// Whole lines of `file` from `at`: at least one unless at its end (a last line without its
/// newline counts as whole there). Returns them, the offset after them, and whether the
/// file ends there.
fn read_lines<'b>(file: &File, at: u64, buf: &'b mut Vec<u8>) -> io::Result<(&'b [u8], u64, bool)> {
    let mut want = STEP;
    loop {
        if buf.len() < want {
            buf.resize(want, 0); // once: the buffer is kept between steps
        }
        let mut got = 0;
        while got < want {
            let n = file.read_at(&mut buf[got..want], at + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got < want {
            let next = at + got as u64;
            return Ok((&buf[..got], next, true));
        }
        if let Some(end) = buf[..want].iter().rposition(|b| *b == b'\n') {
            let next = at + end as u64 + 1;
            return Ok((&buf[..=end], next, false));
        }
        want *= 2; // one line longer than the step
    }
}

fn trim(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

/// `rotated` lines waiting to be queued into the log, and what they account for.
struct Notes {
    who: Who,
    lines: Vec<u8>,
    /// Everything this session dropped.
    total: Tally,
}

impl Notes {
    /// Notes `dropped` leaving `part` (and `to_allowed`, `to_first` lines moved instead;
    /// `after`: the `chain` of the last line of the stream's file that aged out).
    fn add(
        &mut self,
        dropped: &Tally,
        part: Part,
        to_allowed: u64,
        to_first: u64,
        after: Option<ChainHash>,
    ) {
        self.total.merge(dropped);
        let line = rotated(
            &self.who,
            part,
            dropped,
            to_allowed,
            to_first,
            &self.total,
            after,
        );
        if serde_json::to_writer(&mut self.lines, &line).is_ok() {
            self.lines.push(b'\n');
        }
    }
}

/// The sort of the stream's aged-out file in progress.
struct Split {
    file: File,
    /// Bytes read and sorted so far.
    at: u64,
    /// The file's lines as the writer saw them, the runs left (`None`: read every line).
    classes: Option<Classes>,
    seen: Seen,
    dropped: Tally,
    to_allowed: u64,
    to_first: u64,
}

impl Split {
    /// The run the next line is in: `Some(true)` allowed, `Some(false)` other, `None` past
    /// the runs (every line read); and its bytes left.
    fn run(&mut self) -> (Option<bool>, u64) {
        let Some(c) = &mut self.classes else {
            return (None, u64::MAX);
        };
        while c.runs.front().is_some_and(|r| r.1 == 0) {
            c.runs.pop_front();
        }
        match c.runs.front() {
            Some(&(allowed, left)) => (Some(allowed), left),
            None => {
                self.classes = None;
                (None, u64::MAX)
            }
        }
    }

    /// `bytes` of the current run were sorted.
    fn consumed(&mut self, bytes: u64) {
        if let Some(c) = &mut self.classes
            && let Some(r) = c.runs.front_mut()
        {
            r.1 = r.1.saturating_sub(bytes);
        }
    }
}

/// What the stream's rotation and the helper thread share: the archives and the sort in
/// progress (see the module docs).
pub struct Ageing {
    /// A sort is in progress.
    pending: AtomicBool,
    /// `rotated` lines wait to be queued.
    noted: AtomicBool,
    inner: Mutex<Inner>,
}

struct Inner {
    aging: PathBuf,
    allowed: Archive,
    first: Archive,
    split: Option<Split>,
    notes: Notes,
    /// Destinations remembered per sort.
    seen_max: usize,
    buf: Vec<u8>,
}

impl Ageing {
    /// The archives of the stream at `stream`, each within its share; `seen_max` bounds the
    /// destinations a sort remembers. A file left aging by an earlier start is sorted first.
    ///
    /// # Errors
    /// That file cannot be opened.
    pub fn new(
        stream: &Path,
        who: Who,
        allowed_share: u64,
        first_share: u64,
        seen_max: usize,
    ) -> io::Result<Self> {
        let aging = with_suffix(stream, "aging");
        let mut inner = Inner {
            allowed: Archive::new(Part::Allowed, stream, allowed_share),
            first: Archive::new(Part::First, stream, first_share),
            split: None,
            notes: Notes {
                who,
                lines: Vec::new(),
                total: Tally::default(),
            },
            seen_max,
            aging,
            buf: Vec::new(),
        };
        let pending = exists(&inner.aging);
        if pending {
            inner.split = Some(inner.open_split()?);
        }
        Ok(Self {
            pending: AtomicBool::new(pending),
            noted: AtomicBool::new(false),
            inner: Mutex::new(inner),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic mid-sort leaves the archives with whole lines (a failed write is cut back)
        // and the aging file in place: the state is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A sort is in progress.
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// `rotated` lines wait for [`take_notes`](Self::take_notes).
    pub fn noted(&self) -> bool {
        self.noted.load(Ordering::Acquire)
    }

    /// Moves the waiting `rotated` lines to the end of `out`.
    pub fn take_notes(&self, out: &mut Vec<u8>) {
        if !self.noted() {
            return;
        }
        let mut inner = self.lock();
        out.extend_from_slice(&inner.notes.lines);
        inner.notes.lines.clear();
        self.noted.store(false, Ordering::Release);
    }

    /// Makes `oldest` (the stream's oldest file, holding `classes` as the writer saw it)
    /// the aging one, after finishing the sort of the previous one.
    fn age(&self, oldest: &Path, classes: Option<Classes>) -> io::Result<()> {
        let mut inner = self.lock();
        self.finish_locked(&mut inner)?;
        std::fs::rename(oldest, &inner.aging)?;
        let mut split = inner.open_split()?;
        split.classes = classes;
        inner.split = Some(split);
        self.pending.store(true, Ordering::Release);
        Ok(())
    }

    /// One bounded step of the sort in progress (the helper thread's).
    ///
    /// # Errors
    /// An archive could not be written; the sort stays where it was, to be tried again.
    pub fn step(&self) -> io::Result<()> {
        let mut inner = self.lock();
        let r = inner.step();
        self.after(&inner);
        r
    }

    /// Finishes the sort in progress, if any.
    ///
    /// # Errors
    /// An archive could not be written; the sort stays where it was.
    pub fn finish(&self) -> io::Result<()> {
        let mut inner = self.lock();
        self.finish_locked(&mut inner)
    }

    fn finish_locked(&self, inner: &mut Inner) -> io::Result<()> {
        let mut r = Ok(());
        while inner.split.is_some() {
            r = inner.step();
            if r.is_err() {
                break;
            }
        }
        self.after(inner);
        r
    }

    fn after(&self, inner: &Inner) {
        self.pending.store(inner.split.is_some(), Ordering::Release);
        if !inner.notes.lines.is_empty() {
            self.noted.store(true, Ordering::Release);
        }
    }
}

impl Inner {
    fn open_split(&self) -> io::Result<Split> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&self.aging)?;
        Ok(Split {
            file,
            at: 0,
            classes: None,
            seen: Seen::new(self.seen_max),
            dropped: Tally::default(),
            to_allowed: 0,
            to_first: 0,
        })
    }

    /// Sorts up to a step's worth of lines; at the end of the file, syncs the archives,
    /// deletes it and notes what was dropped.
    fn step(&mut self) -> io::Result<()> {
        let Self {
            split,
            allowed,
            first,
            notes,
            buf,
            aging,
            ..
        } = self;
        let Some(s) = split.as_mut() else {
            return Ok(());
        };
        let (lines, next, eof) = read_lines(&s.file, s.at, buf)?;
        let mut rest = lines;
        while !rest.is_empty() {
            let (run, left) = s.run();
            if run == Some(true) {
                // Allowed lines, as the writer saw them: copied as they stand, unread.
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                let (run_lines, after) = rest.split_at(take);
                let (done, r) = match allowed.append_unread(run_lines, notes) {
                    Ok(()) => (take, Ok(())),
                    Err((done, e)) => (done, Err(e)),
                };
                s.to_allowed += run_lines[..done].iter().filter(|b| **b == b'\n').count() as u64;
                s.at += done as u64;
                s.consumed(done as u64);
                r?;
                rest = after;
                continue;
            }
            let end = rest
                .iter()
                .position(|b| *b == b'\n')
                .map_or(rest.len(), |i| i + 1);
            let (line, after) = rest.split_at(end);
            let peek = Peek::read(trim(line));
            let class = classify(peek.as_ref(), &mut s.seen, &notes.who.session);
            // A last line without its newline is kept as a whole line.
            let owned;
            let whole = if line.ends_with(b"\n") {
                line
            } else {
                owned = [line, b"\n"].concat();
                &owned
            };
            match class {
                Class::Allowed => {
                    allowed.push(whole, peek.as_ref(), notes)?;
                    s.to_allowed += 1;
                }
                Class::First => {
                    first.push(whole, peek.as_ref(), notes)?;
                    s.to_first += 1;
                }
                Class::Flood => s.dropped.add(whole.len(), peek.as_ref()),
            }
            s.at += line.len() as u64;
            s.consumed(line.len() as u64);
            rest = after;
        }
        debug_assert_eq!(s.at, next);
        if !eof {
            return Ok(());
        }
        for a in [&mut *allowed, &mut *first] {
            a.flush()?;
            a.sync()?;
        }
        // The line the stream's oldest kept file follows: its rotated line names it.
        let after = tail_chain(&s.file)?;
        std::fs::remove_file(&*aging)?;
        if let Some(s) = split.take() {
            notes.add(&s.dropped, Part::Stream, s.to_allowed, s.to_first, after);
        }
        if buf.len() > 4 * STEP {
            *buf = Vec::new(); // a long line's room is not kept
        }
        Ok(())
    }
}
