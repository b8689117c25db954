//! What a line is worth keeping, read from the line itself, and the account of lines that
//! leave the log: the pure core of retention (the files are [`super::files`]).
//!
//! A line is one of three classes:
//! - **allowed**: the line of a request the proxy let through (`decision` `allow`, `report`
//!   or `abandoned`: its `open` line and its final line);
//! - **first**: the first denial line to each destination (listener, reason, host and port)
//!   in the file being aged, an `overflow` count (it names hosts no other line names), the
//!   log's own lines (`kind: audit`) but this session's `rotated` ones, and any line that
//!   does not read as an audit line (kept rather than judged);
//! - **flood**: every other line: a further denial line to a destination already recorded
//!   in that file, the per-destination `suppressed` counts, and this session's `rotated`
//!   lines (each counts everything the session dropped before it, so the one written when
//!   this sort ends accounts for them too).
//!
//! Classes are read from the lines, not remembered from when they were written, so a file
//! written before the proxy (re)started is sorted the same way.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::BuildHasher;

use airlock_audit_schema::{Dropped, DroppedHost, Part, Rotated, Timestamp, Total, Verdict, Who};
use serde::Deserialize;

/// Destinations named per entry of a `rotated` line's `dropped` (the first met); the lines of
/// the others are counted together.
pub const DROPPED_HOSTS: usize = 16;
/// Entries of a `rotated` line's `dropped` (kind, event, decision, reason) at most; lines
/// past them are counted in `unlisted`. The writers' closed sets stay far below it.
pub const DROPPED_ENTRIES: usize = 128;

/// The fields of a line that retention reads (everything else is skipped unread).
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct Peek<'a> {
    #[serde(default)]
    pub ts: Option<Timestamp>,
    #[serde(borrow, default)]
    pub session: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub event: Option<Cow<'a, str>>,
    #[serde(default)]
    pub decision: Option<Verdict>,
    #[serde(borrow, default)]
    pub reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub host: Option<Cow<'a, str>>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub count: Option<u64>,
    #[serde(default)]
    pub overflow: bool,
}

impl<'a> Peek<'a> {
    /// `line` (without its newline) read, or `None` when it is not a JSON object.
    #[must_use]
    pub fn read(line: &'a [u8]) -> Option<Self> {
        flat(line).or_else(|| serde_json::from_slice(line).ok())
    }

    fn suppressed(&self) -> bool {
        self.event.as_deref() == Some("suppressed")
    }
}

/// A line as the proxy's writers write it (one flat object, no whitespace, the fields read
/// here free of escapes) read without serde: every value it does not need is skipped, the
/// ones it needs are taken as they stand. A quarter of serde_json's time per line, which
/// matters because every line of an aged-out file is read. `None` for anything else (the
/// caller then asks serde_json, which reads it the same way or not at all).
fn flat(line: &[u8]) -> Option<Peek<'_>> {
    let mut p = Peek::default();
    let mut at = 1;
    // A request's record (it has a `path`) holds nothing retention reads after `reason`.
    let mut record = false;
    if line.first() != Some(&b'{') {
        return None;
    }
    loop {
        let key = string(line, &mut at)?;
        if line.get(at) != Some(&b':') {
            return None;
        }
        at += 1;
        let start = at;
        skip_value(line, &mut at)?;
        let raw = &line[start..at];
        match key {
            b"ts" => p.ts = Some(Timestamp::parse(text(raw)?)?),
            b"session" => p.session = opt_text(raw)?.map(Cow::Borrowed),
            b"kind" => p.kind = opt_text(raw)?.map(Cow::Borrowed),
            b"event" => p.event = opt_text(raw)?.map(Cow::Borrowed),
            b"path" => record = true,
            b"reason" => {
                p.reason = opt_text(raw)?.map(Cow::Borrowed);
                if record {
                    return Some(p);
                }
            }
            b"host" => p.host = opt_text(raw)?.map(Cow::Borrowed),
            b"decision" => {
                p.decision = match opt_text(raw)? {
                    None => None,
                    Some("allow") => Some(Verdict::Allow),
                    Some("deny") => Some(Verdict::Deny),
                    Some("report") => Some(Verdict::Report),
                    Some("abandoned") => Some(Verdict::Abandoned),
                    Some(_) => return None,
                }
            }
            b"port" => p.port = opt_number(raw)?.map(u16::try_from).transpose().ok()?,
            b"count" => p.count = opt_number(raw)?,
            b"overflow" => {
                p.overflow = match raw {
                    b"true" => true,
                    b"false" => false,
                    _ => return None,
                }
            }
            _ => {}
        }
        match line.get(at)? {
            b',' => at += 1,
            b'}' if at + 1 == line.len() => return Some(p),
            _ => return None,
        }
    }
}

/// The key at `at` (a string without escapes), `at` moved past it.
fn string<'l>(line: &'l [u8], at: &mut usize) -> Option<&'l [u8]> {
    if line.get(*at) != Some(&b'"') {
        return None;
    }
    let start = *at + 1;
    let len = line
        .get(start..)?
        .iter()
        .position(|b| *b == b'"' || *b == b'\\')?;
    if line[start + len] != b'"' {
        return None;
    }
    *at = start + len + 1;
    Some(&line[start..start + len])
}

/// Moves `at` past the JSON value there (nested ones included, strings with their escapes).
fn skip_value(line: &[u8], at: &mut usize) -> Option<()> {
    let mut depth = 0_usize;
    loop {
        match *line.get(*at)? {
            b'"' => {
                *at += 1;
                skip_string(line, at)?;
            }
            b'{' | b'[' => {
                depth += 1;
                *at += 1;
                continue;
            }
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                *at += 1;
            }
            b',' | b':' if depth > 0 => {
                *at += 1;
                continue;
            }
            b'-' | b'0'..=b'9' | b'a'..=b'z' => {
                let len = line[*at..]
                    .iter()
                    .position(
                        |b| !matches!(b, b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E'),
                    )
                    .unwrap_or(line.len() - *at);
                *at += len;
            }
            _ => return None,
        }
        if depth == 0 {
            return Some(());
        }
    }
}

/// Moves `at` (just past a string's opening quote) past its closing quote: the first quote
/// not escaped (an even number of backslashes right before it).
fn skip_string(line: &[u8], at: &mut usize) -> Option<()> {
    loop {
        let rest = line.get(*at..)?;
        let end = *at + rest.iter().position(|b| *b == b'"')?;
        let slashes = line[*at..end]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        *at = end + 1;
        if slashes % 2 == 0 {
            return Some(());
        }
    }
}

/// A string value without escapes, as text.
fn text(raw: &[u8]) -> Option<&str> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.contains(&b'\\') {
        return None;
    }
    std::str::from_utf8(inner).ok()
}

/// `null` or a string value without escapes.
fn opt_text(raw: &[u8]) -> Option<Option<&str>> {
    if raw == b"null" {
        return Some(None);
    }
    text(raw).map(Some)
}

/// `null` or a whole number.
fn opt_number(raw: &[u8]) -> Option<Option<u64>> {
    if raw == b"null" {
        return Some(None);
    }
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok().map(Some)
}

/// What a line is worth keeping (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Allowed,
    First,
    Flood,
}

/// The destinations already recorded in the file being aged: bounded; past the bound every
/// new one is kept (the memory is bounded, the record is not cut).
pub struct Seen {
    keys: HashSet<u64>,
    hasher: std::collections::hash_map::RandomState,
    max: usize,
}

impl Seen {
    /// Room for `max` destinations.
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            keys: HashSet::new(),
            hasher: std::collections::hash_map::RandomState::new(),
            max,
        }
    }

    /// Whether this is the first denial line to its destination (and notes it).
    fn first(&mut self, p: &Peek<'_>) -> bool {
        // A keyed 64-bit hash: the agent cannot aim two destinations at one key.
        let h = self.hasher.hash_one((&p.kind, &p.reason, &p.host, p.port));
        if self.keys.contains(&h) {
            return false;
        }
        if self.keys.len() < self.max {
            self.keys.insert(h);
        }
        true
    }
}

/// The class of a line (`None`: it did not read as an audit line), `session` being the
/// session this proxy writes.
pub fn classify(peek: Option<&Peek<'_>>, seen: &mut Seen, session: &str) -> Class {
    let Some(p) = peek else {
        return Class::First;
    };
    if p.kind.as_deref() == Some("audit") {
        let superseded =
            p.event.as_deref() == Some("rotated") && p.session.as_deref() == Some(session);
        return if superseded {
            Class::Flood
        } else {
            Class::First
        };
    }
    if p.suppressed() {
        return if p.overflow {
            Class::First
        } else {
            Class::Flood
        };
    }
    match p.decision {
        Some(Verdict::Allow | Verdict::Report | Verdict::Abandoned) => Class::Allowed,
        Some(Verdict::Deny) if !seen.first(p) => Class::Flood,
        _ => Class::First,
    }
}

/// The account of lines that left (or will leave) the log: counts, span, and what they were.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub lines: u64,
    pub bytes: u64,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub entries: Vec<Dropped>,
    pub unlisted: u64,
}

fn widen(
    since: &mut Option<Timestamp>,
    until: &mut Option<Timestamp>,
    from: Option<Timestamp>,
    to: Option<Timestamp>,
) {
    if let Some(t) = from {
        *since = Some(since.map_or(t, |s| s.min(t)));
    }
    if let Some(t) = to {
        *until = Some(until.map_or(t, |u| u.max(t)));
    }
}

/// Adds `lines`/`folded` to `host`:`port` in `hosts`, or past it when it is full.
fn count_host(e: &mut Dropped, host: Option<&str>, port: Option<u16>, lines: u64, folded: u64) {
    if let Some(h) = e
        .hosts
        .iter_mut()
        .find(|h| h.host.as_deref() == host && h.port == port)
    {
        h.lines += lines;
        h.folded += folded;
    } else if e.hosts.len() < DROPPED_HOSTS {
        e.hosts.push(DroppedHost {
            host: host.map(str::to_owned),
            port,
            lines,
            folded,
        });
    } else {
        e.other_lines += lines;
        e.other_folded += folded;
    }
}

impl Tally {
    /// The entry for these values, made if there is room.
    fn entry(
        &mut self,
        kind: &str,
        event: Option<&str>,
        decision: Option<Verdict>,
        reason: Option<&str>,
    ) -> Option<&mut Dropped> {
        let i = match self.entries.iter().position(|e| {
            e.kind == kind
                && e.decision == decision
                && e.event.as_deref() == event
                && e.reason.as_deref() == reason
        }) {
            Some(i) => i,
            None if self.entries.len() < DROPPED_ENTRIES => {
                self.entries.push(Dropped {
                    kind: kind.to_owned(),
                    event: event.map(str::to_owned),
                    decision,
                    reason: reason.map(str::to_owned),
                    lines: 0,
                    bytes: 0,
                    folded: 0,
                    since: None,
                    until: None,
                    hosts: Vec::new(),
                    other_lines: 0,
                    other_folded: 0,
                });
                self.entries.len() - 1
            }
            None => return None,
        };
        Some(&mut self.entries[i])
    }

    /// Counts `lines` lines of `bytes` bytes that were not read (the allowed archive's),
    /// from `since` to `until`: in the entry of kind `*`, their destinations unknown.
    pub fn add_unread(
        &mut self,
        lines: u64,
        bytes: u64,
        since: Option<Timestamp>,
        until: Option<Timestamp>,
    ) {
        self.lines += lines;
        self.bytes += bytes;
        widen(&mut self.since, &mut self.until, since, until);
        let Some(e) = self.entry("*", None, None, None) else {
            self.unlisted += lines;
            return;
        };
        e.lines += lines;
        e.bytes += bytes;
        e.other_lines += lines;
        widen(&mut e.since, &mut e.until, since, until);
    }

    /// Counts one line of `bytes` bytes (newline included), read as `peek`.
    pub fn add(&mut self, bytes: usize, peek: Option<&Peek<'_>>) {
        let bytes = bytes as u64;
        self.lines += 1;
        self.bytes += bytes;
        let Some(p) = peek else {
            self.unlisted += 1;
            return;
        };
        widen(&mut self.since, &mut self.until, p.ts, p.ts);
        let kind = p.kind.as_deref().unwrap_or("");
        let Some(e) = self.entry(kind, p.event.as_deref(), p.decision, p.reason.as_deref()) else {
            self.unlisted += 1;
            return;
        };
        let folded = if p.suppressed() {
            p.count.unwrap_or(0)
        } else {
            0
        };
        e.lines += 1;
        e.bytes += bytes;
        e.folded += folded;
        widen(&mut e.since, &mut e.until, p.ts, p.ts);
        if kind != "audit" {
            count_host(e, p.host.as_deref(), p.port, 1, folded);
        }
    }

    /// Adds everything `other` counted.
    pub fn merge(&mut self, other: &Tally) {
        self.lines += other.lines;
        self.bytes += other.bytes;
        self.unlisted += other.unlisted;
        widen(&mut self.since, &mut self.until, other.since, other.until);
        for o in &other.entries {
            let Some(e) = self.entry(&o.kind, o.event.as_deref(), o.decision, o.reason.as_deref())
            else {
                self.unlisted += o.lines;
                continue;
            };
            e.lines += o.lines;
            e.bytes += o.bytes;
            e.folded += o.folded;
            widen(&mut e.since, &mut e.until, o.since, o.until);
            for h in &o.hosts {
                count_host(e, h.host.as_deref(), h.port, h.lines, h.folded);
            }
            e.other_lines += o.other_lines;
            e.other_folded += o.other_folded;
        }
    }

    fn total(&self) -> Total {
        Total {
            lines: self.lines,
            bytes: self.bytes,
            since: self.since,
            until: self.until,
            dropped: self.entries.clone(),
            unlisted: self.unlisted,
        }
    }
}

/// The `rotated` line for `dropped` leaving `part` just now (`to_allowed`/`to_first`: lines
/// the stream moved to the archives instead), `total` being everything the session dropped,
/// these included; `after`: the `chain` of the last line of the stream's file that aged out.
#[must_use]
pub fn rotated(
    who: &Who,
    part: Part,
    dropped: &Tally,
    to_allowed: u64,
    to_first: u64,
    total: &Tally,
    after: Option<airlock_audit_schema::ChainHash>,
) -> Rotated {
    Rotated {
        ts: Timestamp::now(),
        session: who.session.clone(),
        sandbox: who.sandbox.clone(),
        container: who.container.clone(),
        kind: airlock_audit_schema::AuditKind::Audit,
        event: airlock_audit_schema::RotatedEvent::Rotated,
        part,
        lines: dropped.lines,
        bytes: dropped.bytes,
        since: dropped.since,
        until: dropped.until,
        to_allowed,
        to_first,
        total: total.total(),
        after,
        chain: None,
    }
}

#[cfg(test)]
#[path = "retain_tests.rs"]
mod tests;
