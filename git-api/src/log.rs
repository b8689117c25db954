//! The git API's log: one JSON object per line on stderr, which the entrypoint appends to
//! `git-api.jsonl` in the audit directory. Nothing else is ever written there: the start-up
//! line, a fatal error and a panic are records too.
//!
//! Every record carries `ts` (RFC 3339, UTC, milliseconds), `session` (the per-start session
//! id when the git API was given one, else `null`), `component` and `event`. The agent
//! chooses most of what a decision record holds (its argv, and refusal messages that quote
//! it), so every string is cut to a budget measured in JSON-escaped bytes, with an explicit
//! marker (`…[truncated N bytes]`, `…[N more arguments]`) and `"truncated": true` on the
//! record: a decision line is at most [`MAX_LINE`] bytes whatever the agent sends.
//!
//! Refusals of requests that never authenticated (wrong uid, malformed, forged, stale,
//! replayed, rate limited, busy) cost the agent nothing to send, so at most
//! [`UNAUTHENTICATED_PER_SECOND`] of them are logged a second, plus the first of each
//! refusal code in that second (a flood of one code hides no other); the next one logged
//! says how many were left out (`suppressed`).
//!
//! The files are bounded too ([`Rotating`]): `git-api.jsonl` and the previous
//! `git-api.jsonl.1` together stay within the cap the entrypoint passes (a quarter of
//! `AIRLOCK_AUDIT_CAP`), whatever the agent sends and however often the git API restarts.
//! A flood cannot rotate the record away: each rotation carries the git commands that ran,
//! the first refusal of each kind (code and subcommand) and the git API's own lines over
//! into `git-api.jsonl.1`, within a reserve of its own (newest first), and writes one
//! `rotated` record saying what it dropped (lines, bytes, time span, per kind).

use airlock_audit_schema::{
    Component, GitApiDropped, GitApiEvent, GitApiRecord, Timestamp, Verdict,
};
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Budget of one argv element (JSON-escaped bytes).
pub const MAX_ARG: usize = 1024;
/// Argv elements logged at most; the rest are counted.
pub const MAX_ARGS: usize = 32;
/// Budget of the whole argv (JSON-escaped bytes).
pub const MAX_ARGV: usize = 4096;
/// Budget of a message, the session id, a branch name (JSON-escaped bytes).
pub const MAX_TEXT: usize = 1024;
/// An upper bound on the length of a decision line (newline included).
pub const MAX_LINE: usize = 8 * 1024;
/// Refusals before authentication logged per second at most.
pub const UNAUTHENTICATED_PER_SECOND: u32 = 20;

/// Where lines go and what every record carries. `Debug` omits the sink.
pub struct Log {
    session: Option<String>,
    /// Shared with [`Log::share`]d logs: one file, one size count.
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
    throttle: Mutex<Throttle>,
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Log {
    /// A log on stderr.
    #[must_use]
    pub fn stderr(session: Option<String>) -> Log {
        Log::to(session, Box::new(std::io::stderr()))
    }

    /// A log into `sink` (tests: [`Capture`]).
    #[must_use]
    pub fn to(session: Option<String>, sink: Box<dyn Write + Send>) -> Log {
        Log {
            session,
            sink: Arc::new(Mutex::new(sink)),
            throttle: Mutex::new(Throttle::new(UNAUTHENTICATED_PER_SECOND)),
        }
    }

    /// Another log into the same sink (a [`Rotating`] file counts every line once), with
    /// this one's session and a throttle of its own.
    #[must_use]
    pub fn share(&self) -> Log {
        Log {
            session: self.session.clone(),
            sink: Arc::clone(&self.sink),
            throttle: Mutex::new(Throttle::new(UNAUTHENTICATED_PER_SECOND)),
        }
    }

    /// The session id records carry.
    #[must_use]
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Write one record (`ts`, `session` and `component` added, strings bounded).
    pub fn write(&self, event: GitApiEvent) {
        let line = render(SystemTime::now(), self.session.as_deref(), event);
        if let Ok(mut sink) = self.sink.lock() {
            // One write per line: lines from concurrent connections never interleave.
            let _ = sink.write_all(line.as_bytes());
            let _ = sink.flush();
        }
    }

    /// One decision.
    pub fn decision(&self, d: &Decision<'_>) {
        self.write(d.event(None));
    }

    /// A refusal before the request authenticated: logged unless over this second's budget
    /// and not the first of its code this second.
    pub fn unauthenticated(&self, d: &Decision<'_>) {
        let suppressed = match self.throttle.lock() {
            Ok(mut t) => t.admit(Instant::now(), d.reason.unwrap_or("")),
            Err(_) => Some(0),
        };
        let Some(suppressed) = suppressed else {
            return;
        };
        self.write(d.event((suppressed > 0).then_some(suppressed)));
    }
}

/// What one decision record says.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    /// The peer's uid (`SO_PEERCRED`).
    pub uid: Option<u32>,
    /// git's arguments as the agent sent them (empty before the body was read).
    pub argv: &'a [String],
    /// `allow` or `deny`.
    pub decision: Verdict,
    /// The refusal's stable code.
    pub reason: Option<&'a str>,
    /// The refusal's message.
    pub message: Option<&'a str>,
    /// git's exit status.
    pub exit: Option<i32>,
}

impl Decision<'_> {
    /// The record, unbounded yet ([`render`] bounds it).
    fn event(&self, suppressed: Option<u64>) -> GitApiEvent {
        GitApiEvent::Decision {
            argv: self.argv.to_vec(),
            decision: self.decision,
            exit: self.exit,
            message: self.message.map(str::to_owned),
            reason: self.reason.map(str::to_owned),
            suppressed,
            truncated: false,
            uid: self.uid,
        }
    }
}

/// A record as one line: common fields first, every string bounded (`truncated` set when
/// one was cut), `\n` at the end.
#[must_use]
pub fn render(ts: SystemTime, session: Option<&str>, mut event: GitApiEvent) -> String {
    let mut cut = false;
    let session = session.map(|s| bound_text(s, MAX_TEXT, &mut cut));
    let text = |s: &mut String, cut: &mut bool| *s = bound_text(s, MAX_TEXT, cut);
    match &mut event {
        GitApiEvent::Start {
            socket,
            start_branch,
            truncated,
            ..
        } => {
            text(socket, &mut cut);
            if let Some(b) = start_branch {
                text(b, &mut cut);
            }
            *truncated |= cut;
        }
        GitApiEvent::Decision {
            argv,
            message,
            reason,
            truncated,
            ..
        } => {
            *argv = bound_argv(argv, &mut cut);
            for s in [message, reason].into_iter().flatten() {
                text(s, &mut cut);
            }
            *truncated |= cut;
        }
        GitApiEvent::Fatal { message, truncated } | GitApiEvent::Panic { message, truncated } => {
            text(message, &mut cut);
            *truncated |= cut;
        }
        // Written by the log itself: codes and subcommands, already bounded when logged.
        GitApiEvent::Rotated { .. } => {}
    }
    let record = GitApiRecord {
        ts: Timestamp::from(ts),
        session,
        component: Component::GitApi,
        event,
    };
    // Strings, numbers and booleans always serialize; were it ever not to, the line would
    // still be JSON.
    let mut line = serde_json::to_string(&record)
        .unwrap_or_else(|_| r#"{"component":"git-api","event":"unserializable"}"#.to_owned());
    line.push('\n');
    line
}

/// The argv, each element within [`MAX_ARG`], all within [`MAX_ARGV`] and [`MAX_ARGS`].
fn bound_argv(items: &[String], truncated: &mut bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = 0;
    for (i, item) in items.iter().enumerate() {
        let left = MAX_ARGV.saturating_sub(used);
        if i >= MAX_ARGS || left < 64 {
            *truncated = true;
            out.push(format!("…[{} more arguments]", items.len() - i));
            break;
        }
        let text = bound_text(item, MAX_ARG.min(left), truncated);
        used += escaped_len(&text);
        out.push(text);
    }
    out
}

/// `s` whole if its JSON-escaped form fits `budget` bytes, else its longest prefix that
/// fits with the marker `…[truncated N bytes]` (N: bytes of `s` left out).
#[must_use]
pub fn bound(s: &str, budget: usize) -> std::borrow::Cow<'_, str> {
    if escaped_len(s) <= budget {
        return std::borrow::Cow::Borrowed(s);
    }
    // The marker is at most 40 bytes ("…[truncated 18446744073709551615 bytes]").
    let room = budget.saturating_sub(40);
    let mut used = 0;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        let n = escaped_char_len(c);
        if used + n > room {
            break;
        }
        used += n;
        end = i + c.len_utf8();
    }
    std::borrow::Cow::Owned(format!("{}…[truncated {} bytes]", &s[..end], s.len() - end))
}

fn bound_text(s: &str, budget: usize, truncated: &mut bool) -> String {
    let b = bound(s, budget);
    if matches!(b, std::borrow::Cow::Owned(_)) {
        *truncated = true;
    }
    b.into_owned()
}

/// Bytes of `s` inside a JSON string as serde_json writes it.
fn escaped_len(s: &str) -> usize {
    s.chars().map(escaped_char_len).sum()
}

fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if c < ' ' => 6,
        c => c.len_utf8(),
    }
}

/// Refusal codes remembered per window (the codes are a closed set far below it).
const CODES_PER_WINDOW: usize = 64;

/// Counts refusals per one-second window; over the budget they are counted, not logged,
/// unless they are the first of their code in the window.
#[derive(Debug)]
struct Throttle {
    per_second: u32,
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
    /// Codes logged in this window.
    codes: HashSet<String>,
}

impl Throttle {
    fn new(per_second: u32) -> Throttle {
        Throttle {
            per_second,
            start: None,
            logged: 0,
            suppressed: 0,
            codes: HashSet::new(),
        }
    }

    /// `Some(left out since the last logged one)` to log this one, `None` to leave it out.
    fn admit(&mut self, now: Instant, code: &str) -> Option<u64> {
        if self
            .start
            .is_none_or(|s| now.saturating_duration_since(s) >= Duration::from_secs(1))
        {
            self.start = Some(now);
            self.logged = 0;
            self.codes.clear();
        }
        let new_code = !self.codes.contains(code) && self.codes.len() < CODES_PER_WINDOW;
        if self.logged >= self.per_second && !new_code {
            self.suppressed += 1;
            return None;
        }
        if new_code {
            self.codes.insert(code.to_owned());
        }
        self.logged += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`; times before the epoch clamp to it: the one format of both
/// audit logs (`airlock_audit_schema::Timestamp`).
#[must_use]
pub fn rfc3339_ms(t: SystemTime) -> String {
    airlock_audit_schema::rfc3339_ms(t)
}

/// `git-api.jsonl` bounded: the current file and the previous one. Before a line that
/// would take the current file past three eighths of the cap, the previous file is
/// rewritten as what it keeps of itself ([`carry`]: the git commands that ran and the first
/// refusal of each kind, each within a sixteenth of the cap, newest first, and the git API's
/// own lines), one `rotated` record of what it dropped, and then the current file's lines;
/// the current file is emptied. So the newest lines are in the current file, the ones
/// before them in the previous file, and the record of what ran and of each kind of refusal
/// outlives any flood of other lines; the two files stay within the cap.
///
/// Both files are descriptors PID 1 opened (the git API cannot enter the audit directory,
/// the proxy user's `0700`, so it cannot rename): rotation copies instead of renaming, one
/// byte copied per byte logged. Readers see the current file truncated (`tail -F` follows).
/// A line is never split between the files, and a line alone longer than the current
/// file's bound (none is: [`MAX_LINE`]) would still be written whole.
#[derive(Debug)]
pub struct Rotating {
    current: std::fs::File,
    previous: std::fs::File,
    /// Bytes in the current file.
    len: u64,
    /// Three eighths of the cap.
    file_max: u64,
    /// What the previous file carries over, per class (a sixteenth of the cap each).
    reserve: u64,
    /// The last byte written ended a line.
    at_line_start: bool,
}

impl Rotating {
    /// `current` readable and appended to (`git-api.jsonl`), `previous` readable and
    /// writable without `O_APPEND` (`git-api.jsonl.1`), `cap` bytes for both together.
    ///
    /// # Errors
    /// The current file's size cannot be read.
    pub fn new(
        current: std::fs::File,
        previous: std::fs::File,
        cap: u64,
    ) -> std::io::Result<Rotating> {
        let len = current.metadata()?.len();
        Ok(Rotating {
            current,
            previous,
            len,
            file_max: (cap / 8 * 3).max(1),
            reserve: cap / 16,
            at_line_start: true,
        })
    }

    /// Rewrites the previous file as what it carries over, the record of what it drops and
    /// the current file's lines, and empties the current file. `next` is the line about to
    /// be written (its `session` goes on the record).
    fn rotate(&mut self, next: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let (mut out, dropped) = carry(&self.previous, self.reserve)?;
        if dropped.lines > 0 {
            let session = serde_json::from_slice::<SessionOf<'_>>(trim(next))
                .ok()
                .and_then(|s| s.session.map(Cow::into_owned));
            out.extend_from_slice(
                render(SystemTime::now(), session.as_deref(), dropped.event()).as_bytes(),
            );
        }
        self.previous.set_len(0)?;
        self.previous.write_all_at(&out, 0)?;
        let base = out.len() as u64;
        let mut buf = vec![0u8; 64 << 10];
        let mut at = 0u64;
        loop {
            let n = self.current.read_at(&mut buf, at)?;
            if n == 0 {
                break;
            }
            self.previous.write_all_at(&buf[..n], base + at)?;
            at += n as u64;
        }
        self.previous.set_len(base + at)?;
        self.current.set_len(0)?;
        self.len = 0;
        Ok(())
    }
}

/// Calls `each` with every line of `file` (its newline included; a last line without one
/// as it is), reading 64 KiB at a time.
fn each_line(
    file: &std::fs::File,
    mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 64 << 10];
    let (mut at, mut held) = (0u64, 0usize);
    loop {
        if held == buf.len() {
            buf.resize(buf.len() * 2, 0); // one line longer than the buffer
        }
        let n = file.read_at(&mut buf[held..], at)?;
        at += n as u64;
        held += n;
        let whole = if n == 0 {
            held
        } else {
            buf[..held]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1)
        };
        for line in buf[..whole].split_inclusive(|b| *b == b'\n') {
            each(line)?;
        }
        buf.copy_within(whole..held, 0);
        held -= whole;
        if n == 0 {
            return Ok(());
        }
    }
}

fn trim(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

#[derive(serde::Deserialize)]
struct SessionOf<'a> {
    #[serde(borrow, default)]
    session: Option<Cow<'a, str>>,
}

/// The fields of a line that decide whether it is carried over.
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default)]
    ts: Option<Timestamp>,
    #[serde(borrow, default)]
    event: Option<Cow<'a, str>>,
    #[serde(default)]
    decision: Option<Verdict>,
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    argv: Vec<Cow<'a, str>>,
}

/// What a line is, for carrying it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A git command that ran (`decision: allow`).
    Ran,
    /// The first refusal of its kind in the file, the git API's own lines, or a line that
    /// does not read as a record (kept rather than judged).
    First,
    /// Any other refusal.
    Flood,
}

/// Kinds a `rotated` record lists one by one; lines of any further kind are counted as
/// one kind, `other`.
const MAX_KINDS: usize = 32;
/// Budget of a subcommand in a `rotated` record (JSON-escaped bytes).
const MAX_SUBCOMMAND: usize = 64;

/// What a rotation dropped.
#[derive(Debug, Default)]
struct Drop {
    lines: u64,
    bytes: u64,
    carried: u64,
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    kinds: Vec<GitApiDropped>,
}

impl Drop {
    fn add(&mut self, line: &[u8], p: Option<&Peek<'_>>) {
        self.lines += 1;
        self.bytes += line.len() as u64;
        let Some(p) = p else {
            return self.count("unreadable", None, None, None);
        };
        if let Some(t) = p.ts {
            self.since = Some(self.since.map_or(t, |s| s.min(t)));
            self.until = Some(self.until.map_or(t, |u| u.max(t)));
        }
        self.count(
            p.event.as_deref().unwrap_or(""),
            p.decision,
            p.reason.as_deref(),
            p.argv.first().map(|a| a.as_ref()),
        );
    }

    fn count(
        &mut self,
        event: &str,
        decision: Option<Verdict>,
        reason: Option<&str>,
        subcommand: Option<&str>,
    ) {
        // The agent chooses the subcommand: cut, and the kinds bounded (the rest are one).
        let subcommand = subcommand.map(|s| bound(s, MAX_SUBCOMMAND));
        let subcommand = subcommand.as_deref();
        let (event, decision, reason, subcommand) = if self.kinds.len() < MAX_KINDS
            || self.kinds.iter().any(|k| {
                k.event == event
                    && k.decision == decision
                    && k.reason.as_deref() == reason
                    && k.subcommand.as_deref() == subcommand
            }) {
            (event, decision, reason, subcommand)
        } else {
            ("other", None, None, None)
        };
        if let Some(k) = self.kinds.iter_mut().find(|k| {
            k.event == event
                && k.decision == decision
                && k.reason.as_deref() == reason
                && k.subcommand.as_deref() == subcommand
        }) {
            k.lines += 1;
        } else {
            self.kinds.push(GitApiDropped {
                decision,
                event: event.to_owned(),
                lines: 1,
                reason: reason.map(str::to_owned),
                subcommand: subcommand.map(str::to_owned),
            });
        }
    }

    fn event(self) -> GitApiEvent {
        GitApiEvent::Rotated {
            bytes: self.bytes,
            carried: self.carried,
            dropped: self.kinds,
            lines: self.lines,
            since: self.since,
            until: self.until,
        }
    }
}

/// `line` read (without its newline), or `None` when it is not a record.
fn peek(line: &[u8]) -> Option<Peek<'_>> {
    serde_json::from_slice(trim(line)).ok()
}

/// What the previous file keeps of its lines (`previous`, in order) and what it drops: the
/// git commands that ran and the first refusal of each kind (reason and subcommand), each
/// class within `reserve` bytes, newest first; the git API's own lines (start, fatal,
/// panic, rotated) and unreadable lines count in the refusals' reserve. Everything else is
/// dropped and counted. Two passes over the file; only the kept lines are held.
fn carry(previous: &std::fs::File, reserve: u64) -> std::io::Result<(Vec<u8>, Drop)> {
    // Pass 1: each line's class and size (the first of each kind is the earliest).
    let mut seen = HashSet::new();
    let mut lines: Vec<(Class, u64)> = Vec::new();
    each_line(previous, |line| {
        let class = match peek(line) {
            None => Class::First,
            Some(p) => match (p.event.as_deref(), p.decision) {
                (Some("decision"), Some(Verdict::Allow)) => Class::Ran,
                (Some("decision"), _) => {
                    let key = (
                        p.reason.map(Cow::into_owned),
                        p.argv.into_iter().next().map(Cow::into_owned),
                    );
                    if seen.insert(key) {
                        Class::First
                    } else {
                        Class::Flood
                    }
                }
                _ => Class::First,
            },
        };
        lines.push((class, line.len() as u64));
        Ok(())
    })?;
    // The newest of each class within its reserve.
    let mut keep = vec![false; lines.len()];
    let (mut ran, mut first) = (0u64, 0u64);
    for (i, (class, len)) in lines.iter().enumerate().rev() {
        let budget = match class {
            Class::Ran => &mut ran,
            Class::First => &mut first,
            Class::Flood => continue,
        };
        if *budget + len <= reserve {
            *budget += len;
            keep[i] = true;
        }
    }
    // Pass 2: the kept lines, and the account of the rest.
    let mut out = Vec::new();
    let mut dropped = Drop::default();
    let mut i = 0;
    each_line(previous, |line| {
        if keep.get(i).copied().unwrap_or(false) {
            out.extend_from_slice(line);
            if !line.ends_with(b"\n") {
                out.push(b'\n');
            }
            dropped.carried += 1;
        } else {
            dropped.add(line, peek(line).as_ref());
        }
        i += 1;
        Ok(())
    })?;
    Ok((out, dropped))
}

impl Write for Rotating {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.at_line_start && self.len > 0 && self.len + buf.len() as u64 > self.file_max {
            self.rotate(buf)?;
        }
        let n = self.current.write(buf)?;
        self.len += n as u64;
        if n > 0 {
            self.at_line_start = buf[n - 1] == b'\n';
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.current.flush()
    }
}

/// A sink that keeps what is written (tests read the lines back).
#[derive(Debug, Clone, Default)]
pub struct Capture(pub Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// Everything written so far, as text.
    #[must_use]
    pub fn text(&self) -> String {
        self.0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::time::UNIX_EPOCH;

    fn lines(text: &str) -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    fn decision_line(argv: &[String], message: &str) -> String {
        let cap = Capture::default();
        let log = Log::to(Some("sess-1".into()), Box::new(cap.clone()));
        log.decision(&Decision {
            uid: Some(1000),
            argv,
            decision: Verdict::Deny,
            reason: Some("push_form_not_supported"),
            message: Some(message),
            exit: None,
        });
        cap.text()
    }

    /// Issue 14: a signed push with a 1 MB refspec wrote a 2 MB line (the argv, then again
    /// in the message).
    #[test]
    fn a_megabyte_argument_is_cut_with_a_marker() {
        let refspec = format!("HEAD:{}", "a".repeat(1_048_576));
        let argv = vec!["push".to_owned(), "origin".to_owned(), refspec.clone()];
        let text = decision_line(&argv, &format!("{refspec} is not a valid ref name"));
        assert_eq!(text.lines().count(), 1);
        assert!(text.len() < 4096, "{} bytes", text.len());
        let v = &lines(&text)[0];
        assert_eq!(v["truncated"], true);
        assert_eq!(v["argv"][0], "push");
        assert_eq!(v["argv"][1], "origin");
        let cut = v["argv"][2].as_str().unwrap();
        assert!(cut.starts_with("HEAD:aaaa"), "{cut}");
        assert!(cut.len() <= MAX_ARG, "{}", cut.len());
        let (kept, marker) = cut.split_once('…').unwrap();
        let dropped: usize = marker
            .strip_prefix("[truncated ")
            .and_then(|m| m.strip_suffix(" bytes]"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(kept.len() + dropped, refspec.len());
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.len() <= MAX_TEXT && msg.contains("…[truncated "),
            "{msg}"
        );
        // The common fields.
        assert_eq!(v["session"], "sess-1");
        assert_eq!(v["component"], "git-api");
        assert_eq!(v["event"], "decision");
        assert_eq!(v["reason"], "push_form_not_supported");
    }

    #[test]
    fn short_records_are_untouched_and_say_nothing_of_truncation() {
        let argv = vec!["status".to_owned(), "--short".to_owned()];
        let v = &lines(&decision_line(&argv, "fine"))[0];
        assert_eq!(v["argv"], json!(["status", "--short"]));
        assert_eq!(v["message"], "fine");
        assert!(v.get("truncated").is_none());
    }

    #[test]
    fn many_arguments_and_escapes_stay_within_the_line_bound() {
        // Every way to make a line long: many elements, each at the budget, each made of
        // characters JSON escapes six-fold, quotes, multi-byte characters.
        for unit in ["\u{1}", "\"", "é", "€", "😀", "a"] {
            let argv: Vec<String> = (0..10_000).map(|_| unit.repeat(5_000)).collect();
            let text = decision_line(&argv, &unit.repeat(100_000));
            assert!(text.len() <= MAX_LINE, "{unit:?}: {} bytes", text.len());
            let v = &lines(&text)[0];
            let shown = v["argv"].as_array().unwrap();
            assert!(shown.len() <= MAX_ARGS + 1);
            let last = shown.last().unwrap().as_str().unwrap();
            assert!(last.ends_with("more arguments]"), "{unit:?}: {last}");
            assert_eq!(v["truncated"], true);
        }
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let s = "€".repeat(1000);
        let b = bound(&s, 100);
        assert!(b.len() <= 100, "{b}");
        assert!(b.starts_with("€€"));
        assert!(b.ends_with(" bytes]"));
        assert_eq!(bound("short", 100), "short");
    }

    #[test]
    fn every_record_is_one_json_line_with_ts_and_session() {
        let cap = Capture::default();
        let log = Log::to(None, Box::new(cap.clone()));
        log.write(GitApiEvent::Fatal {
            message: "line one\nline two".into(),
            truncated: false,
        });
        log.decision(&Decision {
            uid: None,
            argv: &[],
            decision: Verdict::Deny,
            reason: Some("peer_not_agent"),
            message: Some("no"),
            exit: None,
        });
        let text = cap.text();
        assert_eq!(text.lines().count(), 2, "{text}");
        for l in text.lines() {
            assert!(
                l.starts_with(r#"{"ts":""#)
                    && l.contains(r#"Z","session":null,"component":"git-api","event":""#),
                "{l}"
            );
        }
        for v in lines(&text) {
            let ts = v["ts"].as_str().unwrap();
            assert_eq!(ts.len(), "2026-01-01T00:00:00.000Z".len(), "{ts}");
            assert!(ts.ends_with('Z'));
            assert!(v.get("session").is_some_and(Value::is_null));
            assert_eq!(v["component"], "git-api");
        }
    }

    #[test]
    fn unauthenticated_refusals_are_throttled_and_counted() {
        let mut t = Throttle::new(3);
        let t0 = Instant::now();
        let c = "rate_limited";
        assert_eq!(t.admit(t0, c), Some(0));
        assert_eq!(t.admit(t0, c), Some(0));
        assert_eq!(t.admit(t0, c), Some(0));
        assert_eq!(t.admit(t0, c), None);
        assert_eq!(t.admit(t0 + Duration::from_millis(999), c), None);
        // The next second's first line says how many were left out.
        assert_eq!(t.admit(t0 + Duration::from_secs(1), c), Some(2));
        assert_eq!(t.admit(t0 + Duration::from_secs(1), c), Some(0));
    }

    /// A flood of one refusal code does not hide the first of another in the same second:
    /// it is logged past the budget, and says how many were left out before it.
    #[test]
    fn a_flood_of_one_code_hides_no_other() {
        let mut t = Throttle::new(2);
        let t0 = Instant::now();
        for _ in 0..2 {
            assert!(t.admit(t0, "rate_limited").is_some());
        }
        for _ in 0..100 {
            assert_eq!(t.admit(t0, "rate_limited"), None);
        }
        assert_eq!(t.admit(t0, "forged"), Some(100));
        assert_eq!(t.admit(t0, "forged"), None, "only its first");
        assert_eq!(t.admit(t0, "stale"), Some(1));
    }

    fn open_pair(dir: &std::path::Path) -> (std::fs::File, std::fs::File) {
        use std::fs::OpenOptions;
        let cur = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(dir.join("git-api.jsonl"))
            .unwrap();
        let prev = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("git-api.jsonl.1"))
            .unwrap();
        (cur, prev)
    }

    fn refusal(log: &Log, reason: &str, argv: &[&str], message: &str) {
        let argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
        log.decision(&Decision {
            uid: Some(1000),
            argv: &argv,
            decision: Verdict::Deny,
            reason: Some(reason),
            message: Some(message),
            exit: None,
        });
    }

    /// Issue 13: `git-api.jsonl` rotates like the proxy's audit log. Written far past the
    /// cap (and reopened as a restart would), the two files stay within it, hold whole JSON
    /// lines only, and keep the newest records in order, the current file after the
    /// previous (after what the previous file carried over and its `rotated` record).
    #[test]
    fn the_log_rotates_and_stays_within_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let cap: u64 = 64 * 1024;
        let mut n = 0u64;
        // Two runs of the git API on the same files: the second continues the first's size.
        for _run in 0..2 {
            let (cur, prev) = open_pair(dir.path());
            let log = Log::to(
                Some("s".into()),
                Box::new(Rotating::new(cur, prev, cap).unwrap()),
            );
            for _ in 0..300 {
                // Up to a whole MAX_LINE per record, as a flood of long refspecs would write;
                // the record's number leads its message.
                let long = "x".repeat(usize::try_from(n % 7).unwrap() * 1000 + 100);
                refusal(
                    &log,
                    "push_form_not_supported",
                    &["push", &long],
                    &format!("{n} no"),
                );
                n += 1;
            }
        }
        let cur = std::fs::read_to_string(dir.path().join("git-api.jsonl")).unwrap();
        let prev = std::fs::read_to_string(dir.path().join("git-api.jsonl.1")).unwrap();
        assert!(!prev.is_empty(), "nothing was rotated");
        let (cl, pl) = (cur.len() as u64, prev.len() as u64);
        assert!(cl <= cap / 8 * 3, "current {cl} bytes for a cap of {cap}");
        assert!(
            cl + pl <= cap,
            "current {cl} + previous {pl} bytes for a cap of {cap}"
        );
        assert!(cl + pl > cap / 4, "rotation kept too little: {cl} + {pl}");
        let prev_lines = lines(&prev);
        let rotated = prev_lines
            .iter()
            .rposition(|v| v["event"] == "rotated")
            .expect("the previous file says what it dropped");
        let seq: Vec<u64> = prev_lines[rotated + 1..]
            .iter()
            .chain(lines(&cur).iter())
            .map(|v| {
                let message = v["message"].as_str().unwrap();
                message.split(' ').next().unwrap().parse::<u64>().unwrap()
            })
            .collect();
        // Contiguous, ending with the last record: the previous file's lines come right before
        // the current file's, and only the oldest are gone.
        assert_eq!(*seq.last().unwrap(), n - 1);
        assert!(seq.windows(2).all(|w| w[1] == w[0] + 1), "{seq:?}");
        assert!(seq[0] > 0, "nothing was dropped for {n} records");
        assert!(cur.ends_with('\n') && prev.ends_with('\n'));
    }

    /// The agent floods one refusal (a long, rate-limit-paced push) to rotate its earlier
    /// record away: the git commands that ran, the first refusal of each other kind, the
    /// start line and the flood's own first line are still in the files after dozens of
    /// rotations, and the `rotated` records account for every flood line that left.
    #[test]
    fn attack_a_refusal_flood_cannot_rotate_away_what_ran_or_the_first_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let cap: u64 = 256 * 1024;
        let (cur, prev) = open_pair(dir.path());
        let log = Log::to(
            Some("s".into()),
            Box::new(Rotating::new(cur, prev, cap).unwrap()),
        );
        log.write(GitApiEvent::Start {
            agent_uid: 1000,
            default_identity: true,
            max_connections: 16,
            rate_burst: 20,
            rate_per_second: 10,
            socket: "/run/airlock/git/git.sock".into(),
            start_branch: Some("main".into()),
            truncated: false,
        });
        for sub in ["commit", "push", "fetch"] {
            log.decision(&Decision {
                uid: Some(1000),
                argv: &[sub.to_owned()],
                decision: Verdict::Allow,
                reason: None,
                message: None,
                exit: Some(0),
            });
        }
        refusal(
            &log,
            "branch_protected",
            &["push", "origin", "HEAD:main"],
            "early-1",
        );
        refusal(&log, "option_not_allowed", &["push", "--force"], "early-2");
        refusal(
            &log,
            "config_key_not_writable",
            &["config", "core.hooksPath", "x"],
            "early-3",
        );
        let flood = 5000;
        let long = "y".repeat(300);
        for i in 0..flood {
            refusal(
                &log,
                "push_form_not_supported",
                &["push", &long],
                &format!("flood-{i}"),
            );
        }
        let cur = std::fs::read_to_string(dir.path().join("git-api.jsonl")).unwrap();
        let prev = std::fs::read_to_string(dir.path().join("git-api.jsonl.1")).unwrap();
        assert!(cur.len() + prev.len() <= usize::try_from(cap).unwrap());
        let all: Vec<Value> = lines(&prev).into_iter().chain(lines(&cur)).collect();
        assert!(
            all.iter().any(|l| l["event"] == "start"),
            "the start line is gone"
        );
        for sub in ["commit", "push", "fetch"] {
            assert!(
                all.iter()
                    .any(|l| l["decision"] == "allow" && l["argv"][0] == sub),
                "the {sub} that ran is gone"
            );
        }
        for early in ["early-1", "early-2", "early-3", "flood-0"] {
            assert!(all.iter().any(|l| l["message"] == early), "{early} is gone");
        }
        let present = all
            .iter()
            .filter(|l| l["reason"] == "push_form_not_supported")
            .count() as u64;
        let records: Vec<&Value> = all.iter().filter(|l| l["event"] == "rotated").collect();
        assert!(records.len() > 5, "{} rotations", records.len());
        let dropped: u64 = records
            .iter()
            .flat_map(|r| r["dropped"].as_array().unwrap())
            .filter(|k| k["reason"] == "push_form_not_supported")
            .map(|k| k["lines"].as_u64().unwrap())
            .sum();
        assert_eq!(
            present + dropped,
            flood,
            "every flood line: there or counted"
        );
        for r in &records {
            let back: GitApiRecord = serde_json::from_value((*r).clone()).unwrap();
            assert!(matches!(back.event, GitApiEvent::Rotated { .. }));
        }
    }

    /// The rotation reads its file line by line: a line longer than the buffer, many
    /// buffers' worth of short ones, a last line without its newline.
    #[test]
    fn each_line_reads_every_line_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut text = Vec::new();
        let long = vec![b'x'; 200_000];
        text.extend_from_slice(&long);
        text.push(b'\n');
        for i in 0..30_000 {
            text.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        text.extend_from_slice(b"last");
        std::fs::write(&path, &text).unwrap();
        let mut got = Vec::new();
        each_line(&std::fs::File::open(&path).unwrap(), |l| {
            got.push(l.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 30_002);
        assert_eq!(got[0].len(), 200_001);
        assert_eq!(got[1], b"line 0\n");
        assert_eq!(got.last().unwrap(), b"last");
        assert_eq!(got.concat(), text);
    }

    /// The lines are the schema's records (`airlock_audit_schema::GitApiRecord`): they read
    /// back as one and write back byte for byte, in the order the ad-hoc JSON had (common
    /// fields, then the event's fields alphabetically, `truncated` among them).
    #[test]
    fn lines_are_schema_records_and_keep_their_bytes() {
        let argv = vec!["push".to_owned(), "x".repeat(5000)];
        let deny = Decision {
            uid: Some(1000),
            argv: &argv,
            decision: Verdict::Deny,
            reason: Some("push_form_not_supported"),
            message: Some("no"),
            exit: None,
        };
        let line = render(UNIX_EPOCH, Some("s"), deny.event(Some(2)));
        let kept = bound(&argv[1], MAX_ARG);
        assert_eq!(
            line,
            format!(
                "{{\"ts\":\"1970-01-01T00:00:00.000Z\",\"session\":\"s\",\"component\":\"git-api\",\"event\":\"decision\",\"argv\":[\"push\",\"{kept}\"],\"decision\":\"deny\",\"exit\":null,\"message\":\"no\",\"reason\":\"push_form_not_supported\",\"suppressed\":2,\"truncated\":true,\"uid\":1000}}\n"
            )
        );
        let start = GitApiEvent::Start {
            agent_uid: 1000,
            default_identity: false,
            max_connections: 16,
            rate_burst: 20,
            rate_per_second: 10,
            socket: "/run/airlock/git/git.sock".into(),
            start_branch: None,
            truncated: false,
        };
        for line in [line, render(UNIX_EPOCH, None, start)] {
            let record: GitApiRecord = serde_json::from_str(&line).unwrap();
            assert_eq!(serde_json::to_string(&record).unwrap() + "\n", line);
            assert_eq!(record.component, Component::GitApi);
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_milliseconds() {
        assert_eq!(rfc3339_ms(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(rfc3339_ms(t), "2000-02-29T12:34:56.789Z");
        let t = UNIX_EPOCH + Duration::from_secs(4_107_542_400);
        assert_eq!(rfc3339_ms(t), "2100-03-01T00:00:00.000Z");
    }
}
