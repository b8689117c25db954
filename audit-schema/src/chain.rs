//! The hash chain of `audit.jsonl`: every line the proxy writes ends with `"chain"`, a hash of
//! the line itself and of the `chain` of the line before it, so that an edited, dropped,
//! inserted or reordered line is found by reading the files ([`verify`]), with nothing but
//! the files.
//!
//! `chain` is the first 16 bytes of SHA-256 over the previous line's `chain` (32 lowercase
//! hex digits; [`GENESIS`], 32 zeros, for the first line of a log) followed by the line as it
//! reads without its `chain` field (the JSON object up to and including its closing `}`), in
//! 32 lowercase hex digits. It is always the line's last field, written as
//! `,"chain":"<32 hex>"}` at the line's end ([`SUFFIX_LEN`] bytes), so a reader finds it
//! without parsing the line, and a reader that ignores it reads the line as before.
//!
//! The stream (`audit.jsonl` and its rotated files `audit.jsonl.1` …, and
//! `audit.jsonl.aging` while it is sorted) is one chain in the order written, across
//! rotations and restarts (a proxy that starts continues from the last line in the stream).
//! When the stream's oldest file ages out, the `rotated` line that says so names, in
//! `after`, the `chain` of that file's last line: the line the oldest file still kept
//! follows. So [`verify`] accepts a stream that starts at the log's first line
//! ([`GENESIS`]) or right after a line a `rotated` line of the stream says left, and nothing
//! else: a head cut off is found like any other missing line.
//!
//! The archives (`audit.jsonl.allowed…`, `audit.jsonl.first…`) are sorted copies of lines
//! that left the stream: each line keeps the `chain` it had, but its neighbours are not the
//! lines it was written after, so [`verify`] does not check them ([`Role::Archive`]).
//!
//! What the chain proves, and what it does not: it is not keyed. Whoever can read the log
//! and rewrite it from some line to its end can compute a new chain for what they wrote; the
//! chain shows that the files are the lines as written only together with a copy of a
//! recent `chain` kept elsewhere (the `head` that [`verify`] reports). What it does find
//! without one: a line edited or removed by someone who did not rewrite every line after
//! it, lines moved, a line added by someone who cannot read the log (the agent cannot: it
//! has no way into the audit directory), and a log whose beginning was cut off.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// One line's `chain`: the first 16 bytes of a SHA-256 (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainHash(pub [u8; 16]);

/// The `chain` a log's first line follows: 32 zeros.
pub const GENESIS: ChainHash = ChainHash([0; 16]);

/// Bytes the `chain` field adds at a line's end: `,"chain":"` (10), 32 hex digits, `"}` (2),
/// in place of the line's closing `}`.
pub const SUFFIX_LEN: usize = 44;

const KEY: &[u8; 10] = b",\"chain\":\"";
const HEX: &[u8; 16] = b"0123456789abcdef";

impl ChainHash {
    /// The 32 lowercase hex digits.
    #[must_use]
    pub fn hex(&self) -> [u8; 32] {
        let mut out = [0; 32];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        out
    }

    /// Reads 32 lowercase hex digits (nothing else).
    #[must_use]
    pub fn from_hex(hex: &[u8]) -> Option<Self> {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        if hex.len() != 32 {
            return None;
        }
        let mut out = [0; 16];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Some(Self(out))
    }

    /// The `chain` of a line that follows this one and reads `body` (its JSON object up to
    /// and excluding the closing `}`) without its `chain` field.
    #[must_use]
    pub fn next(&self, body: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(self.hex());
        h.update(body);
        h.update(b"}");
        let digest = h.finalize();
        let mut out = [0; 16];
        out.copy_from_slice(&digest[..16]);
        Self(out)
    }
}

impl fmt::Display for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hex digits are ASCII.
        f.write_str(std::str::from_utf8(&self.hex()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChainHash({self})")
    }
}

impl Serialize for ChainHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ChainHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::from_hex(s.as_bytes())
            .ok_or_else(|| serde::de::Error::custom("a chain is 32 lowercase hex digits"))
    }
}

/// Seals the line at `buf[start..]` (a JSON object without its newline): its closing `}`
/// becomes `,"chain":"<hex>"}`, the hash of the line after `prev`. Returns that hash, or
/// `None` (nothing changed) when the line does not end with `}`.
pub fn seal(buf: &mut Vec<u8>, start: usize, prev: &ChainHash) -> Option<ChainHash> {
    let line = buf.get(start..)?;
    let body = line.strip_suffix(b"}")?;
    let chain = prev.next(body);
    buf.pop();
    buf.extend_from_slice(KEY);
    buf.extend_from_slice(&chain.hex());
    buf.extend_from_slice(b"\"}");
    Some(chain)
}

/// Seals again, in place, every sealed line of `buf` (whole lines, each ending in `\n`)
/// as following `prev` and each other, and returns the last one's hash (`prev` when there
/// is none). For lines that were sealed after another line than the one they now follow
/// (the writer puts a line before lines already waiting); a line without a chain is left
/// as it is.
pub fn reseal(buf: &mut [u8], prev: &ChainHash) -> ChainHash {
    let mut head = *prev;
    let mut at = 0;
    while at < buf.len() {
        let end = buf[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(buf.len(), |i| at + i);
        let line = &mut buf[at..end];
        if let Some((body, _)) = split(line) {
            let chain = head.next(body);
            let n = line.len();
            line[n - 34..n - 2].copy_from_slice(&chain.hex());
            head = chain;
        }
        at = end + 1;
    }
    head
}

/// A sealed line (without its newline) as its body (the JSON object before the `chain`
/// field, without the closing `}`) and its `chain`; `None` for a line without one.
#[must_use]
pub fn split(line: &[u8]) -> Option<(&[u8], ChainHash)> {
    let n = line.len();
    if n < SUFFIX_LEN + 1 || !line.ends_with(b"\"}") {
        return None;
    }
    let (body, suffix) = line.split_at(n - SUFFIX_LEN);
    if &suffix[..KEY.len()] != KEY {
        return None;
    }
    let chain = ChainHash::from_hex(&suffix[KEY.len()..KEY.len() + 32])?;
    Some((body, chain))
}

/// The `chain` of the last line of `tail` (the end of a file, whole lines), if that line has
/// one: where a writer that appends to the file continues the chain from.
#[must_use]
pub fn last(tail: &[u8]) -> Option<ChainHash> {
    let body = tail.strip_suffix(b"\n").unwrap_or(tail);
    let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    split(&body[start..]).map(|(_, c)| c)
}

/// What a file given to [`verify`] is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// A file of the stream: `audit.jsonl` (age 0), `audit.jsonl.<n>` (age n),
    /// `audit.jsonl.aging` (older than all). Any other name is a current file (age 0).
    Stream { age: u64 },
    /// `audit.jsonl.allowed…` or `audit.jsonl.first…`: sorted copies, outside the chain.
    Archive,
}

/// The role of the file at `path`, by its name.
#[must_use]
pub fn role(path: &Path) -> Role {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = name.rsplit('.');
    let last = parts.next().unwrap_or("");
    let before = parts.next().unwrap_or("");
    if ["allowed", "first"].contains(&last)
        || (last.bytes().all(|b| b.is_ascii_digit()) && ["allowed", "first"].contains(&before))
    {
        return Role::Archive;
    }
    if last == "aging" {
        return Role::Stream { age: u64::MAX };
    }
    match last.parse::<u64>() {
        Ok(age) if name.contains('.') && name.len() > last.len() + 1 => Role::Stream { age },
        _ => Role::Stream { age: 0 },
    }
}

/// The stream files of `paths`, oldest first (by [`role`]: `aging`, then the highest number
/// down to the current file; files of the same age in the order given), and the archives.
#[must_use]
pub fn order(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut stream = Vec::new();
    let mut archives = Vec::new();
    for p in paths {
        match role(p) {
            Role::Stream { age } => stream.push((age, p.clone())),
            Role::Archive => archives.push(p.clone()),
        }
    }
    stream.sort_by_key(|(age, _)| std::cmp::Reverse(*age));
    (stream.into_iter().map(|(_, p)| p).collect(), archives)
}

/// Where a line is: a file as given and its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    pub file: String,
    pub line: u64,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// What is wrong with the first bad line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Its `chain` is not the hash of its text after the line before it, and the line after
    /// it follows it: it was edited, or the line it was written after is gone (dropped).
    EditedOrDropped,
    /// The line after it follows the line before it: it was moved (lines swapped or
    /// reordered) or inserted.
    Moved,
    /// Its `chain` matches neither, and no line follows it: the log's last line, edited or
    /// added by someone who did not have the line before it.
    Forged,
    /// Neither it nor the line after it follows the line before it.
    Broken,
    /// A line without a `chain` after chained lines: inserted, or its chain cut off.
    Unchained,
    /// The stream's first chained line follows neither [`GENESIS`] nor a line a `rotated`
    /// line says left the log: lines before it were removed (or it was edited).
    Unanchored,
    /// No line has a `chain` (none at all, or all written before the chain existed): nothing
    /// shows that the files are what was written, so they are not reported intact.
    Empty,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EditedOrDropped => {
                "the chain breaks here: this line was edited, or the line written before it was removed"
            }
            Self::Moved => {
                "out of place: the line after it follows the line before it (a line moved, swapped or inserted)"
            }
            Self::Forged => {
                "the last line does not follow the line before it: edited, or added by someone without the log's chain"
            }
            Self::Broken => {
                "the chain breaks here: this line does not follow the line before it (edited, removed, inserted or moved lines)"
            }
            Self::Unchained => {
                "a line without its chain after chained lines: inserted, or its chain cut off"
            }
            Self::Unanchored => {
                "the first line follows neither the log's beginning nor a line a rotated line says left: lines before it were removed, or it was edited (give every file of the stream: audit.jsonl, audit.jsonl.1 ... and audit.jsonl.aging)"
            }
            Self::Empty => {
                "no line has a chain: an empty log (nothing to verify), one written before the chain existed, or not a file of audit.jsonl's stream"
            }
        })
    }
}

/// The first bad line and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {fault}")]
pub struct Broken {
    pub at: At,
    pub fault: Fault,
}

/// An intact stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intact {
    /// Chained lines checked.
    pub lines: u64,
    /// Lines before the first chained one, written before the chain existed (not checked).
    pub unchained: u64,
    /// Where the chain starts: `None` at the log's first line, else the `rotated` line that
    /// says the line before the stream's first one left.
    pub after: Option<At>,
    /// The last line's `chain`: keep it elsewhere to check later that the files still end
    /// with this line.
    pub head: ChainHash,
}

/// Why the files could not be verified.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A file could not be read.
    #[error("cannot read {file}: {source}")]
    Read { file: String, source: io::Error },
    /// The chain is broken.
    #[error(transparent)]
    Broken(#[from] Broken),
}

/// Verifies the stream files `files` (oldest first: see [`order`]), each opened by `open`
/// (read twice: once for the `rotated` lines' `after`, once for the chain). `Ok`: every
/// chained line follows the one before it, the first follows [`GENESIS`] or a line a
/// `rotated` line says left, and no unchained line follows a chained one.
///
/// # Errors
/// [`VerifyError::Broken`] naming the first bad line; [`VerifyError::Read`].
pub fn verify<R: BufRead>(
    files: &[String],
    mut open: impl FnMut(&str) -> io::Result<R>,
) -> Result<Intact, VerifyError> {
    let read = |file: &String, e| VerifyError::Read {
        file: file.clone(),
        source: e,
    };
    let mut anchors: HashMap<ChainHash, At> = HashMap::new();
    let mut line = Vec::new();
    for file in files {
        let mut r = open(file).map_err(|e| read(file, e))?;
        let mut n = 0;
        while next_line(&mut r, &mut line).map_err(|e| read(file, e))? {
            n += 1;
            if let Some(after) = stream_anchor(&line) {
                anchors.entry(after).or_insert(At {
                    file: file.clone(),
                    line: n,
                });
            }
        }
    }
    let mut v = Verifier {
        anchors,
        state: State::Before { unchained: 0 },
        pending: None,
        lines: 0,
        after: None,
    };
    let mut last_at = files.last().map(|f| At {
        file: f.clone(),
        line: 0,
    });
    for file in files {
        let mut r = open(file).map_err(|e| read(file, e))?;
        let mut n = 0;
        while next_line(&mut r, &mut line).map_err(|e| read(file, e))? {
            n += 1;
            let at = At {
                file: file.clone(),
                line: n,
            };
            v.feed(&line, &at)?;
            last_at = Some(at);
        }
    }
    v.end(last_at)
}

/// Verifies the stream files at `paths` (oldest first: see [`order`]).
///
/// # Errors
/// As [`verify`].
pub fn verify_paths(paths: &[PathBuf]) -> Result<Intact, VerifyError> {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    verify(&names, |name| {
        std::fs::File::open(name).map(|f| io::BufReader::with_capacity(256 * 1024, f))
    })
}

/// Reads the next line (without its newline) into `buf`; false at the end.
fn next_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    if r.read_until(b'\n', buf)? == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    Ok(true)
}

/// The `after` of a `rotated` line of the stream (`part: stream`), if `line` is one.
fn stream_anchor(line: &[u8]) -> Option<ChainHash> {
    const EVENT: &[u8] = b"\"event\":\"rotated\"";
    if !line.windows(EVENT.len()).any(|w| w == EVENT) {
        return None;
    }
    #[derive(Deserialize)]
    struct Anchor {
        event: String,
        // A string, not `rotated::Part`: the types name this module, not it them.
        part: String,
        after: Option<ChainHash>,
    }
    let a: Anchor = serde_json::from_slice(line).ok()?;
    (a.event == "rotated" && a.part == "stream")
        .then_some(a.after)
        .flatten()
}

enum State {
    /// No chained line yet.
    Before { unchained: u64 },
    /// The `chain` of the last line.
    In { head: ChainHash, unchained: u64 },
}

/// A line whose `chain` did not match: judged with the line after it.
struct Pending {
    at: At,
    /// What the line before it had.
    expected: ChainHash,
    /// Its own `chain`.
    chain: ChainHash,
}

struct Verifier {
    anchors: HashMap<ChainHash, At>,
    state: State,
    pending: Option<Pending>,
    lines: u64,
    after: Option<At>,
}

impl Verifier {
    fn feed(&mut self, line: &[u8], at: &At) -> Result<(), Broken> {
        let broken = |at: &At, fault| Broken {
            at: at.clone(),
            fault,
        };
        let sealed = split(line);
        if let Some(p) = self.pending.take() {
            let fault = match sealed {
                Some((body, chain)) if p.expected.next(body) == chain => Fault::Moved,
                Some((body, chain)) if p.chain.next(body) == chain => Fault::EditedOrDropped,
                _ => Fault::Broken,
            };
            return Err(broken(&p.at, fault));
        }
        match (&mut self.state, sealed) {
            (State::Before { unchained }, None) => {
                *unchained += 1;
                Ok(())
            }
            (State::In { .. }, None) => Err(broken(at, Fault::Unchained)),
            (State::Before { unchained }, Some((body, chain))) => {
                let unchained = *unchained;
                if GENESIS.next(body) != chain {
                    let anchor = self
                        .anchors
                        .iter()
                        .find(|(after, _)| after.next(body) == chain)
                        .map(|(_, at)| at.clone());
                    match anchor {
                        Some(a) => self.after = Some(a),
                        None => return Err(broken(at, Fault::Unanchored)),
                    }
                }
                self.state = State::In {
                    head: chain,
                    unchained,
                };
                self.lines += 1;
                Ok(())
            }
            (State::In { head, .. }, Some((body, chain))) => {
                if head.next(body) != chain {
                    self.pending = Some(Pending {
                        at: at.clone(),
                        expected: *head,
                        chain,
                    });
                }
                *head = chain;
                self.lines += 1;
                Ok(())
            }
        }
    }

    fn end(self, last: Option<At>) -> Result<Intact, VerifyError> {
        // `last`: the last line read, or the last file's line 0 when there was none.
        if let Some(p) = self.pending {
            return Err(Broken {
                at: p.at,
                fault: Fault::Forged,
            }
            .into());
        }
        match self.state {
            State::Before { .. } => Err(Broken {
                at: last.unwrap_or(At {
                    file: String::new(),
                    line: 0,
                }),
                fault: Fault::Empty,
            }
            .into()),
            State::In { head, unchained } => Ok(Intact {
                lines: self.lines,
                unchained,
                after: self.after,
                head,
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// Lines as the writer writes them, sealed after `prev`.
    fn sealed(prev: ChainHash, bodies: &[&str]) -> (Vec<u8>, ChainHash) {
        let mut buf = Vec::new();
        let mut head = prev;
        for b in bodies {
            let start = buf.len();
            buf.extend_from_slice(b.as_bytes());
            head = seal(&mut buf, start, &head).unwrap();
            buf.push(b'\n');
        }
        (buf, head)
    }

    fn check(files: &[(&str, &[u8])]) -> Result<Intact, VerifyError> {
        let names: Vec<String> = files.iter().map(|(n, _)| (*n).to_owned()).collect();
        verify(&names, |name| {
            let (_, bytes) = files.iter().find(|(n, _)| *n == name).unwrap();
            Ok(io::Cursor::new(bytes.to_vec()))
        })
    }

    fn fault(files: &[(&str, &[u8])]) -> (String, Fault) {
        match check(files) {
            Err(VerifyError::Broken(b)) => (b.at.to_string(), b.fault),
            other => panic!("{other:?}"),
        }
    }

    const LINES: [&str; 4] = [r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":3}"#, r#"{"a":4}"#];

    #[test]
    fn a_sealed_line_reads_back_and_splits() {
        let (buf, head) = sealed(GENESIS, &LINES);
        let text = String::from_utf8(buf.clone()).unwrap();
        let first = text.lines().next().unwrap();
        assert!(first.starts_with(r#"{"a":1,"chain":""#), "{first}");
        assert_eq!(first.len(), r#"{"a":1}"#.len() + SUFFIX_LEN - 1);
        let v: serde_json::Value = serde_json::from_str(first).unwrap();
        assert_eq!(v["a"], 1);
        assert_eq!(last(&buf), Some(head));
        assert_eq!(ChainHash::from_hex(&head.hex()), Some(head));
        assert_eq!(split(br#"{"a":1}"#), None);
        let intact = check(&[("audit.jsonl", &buf)]).unwrap();
        assert_eq!((intact.lines, intact.unchained, intact.head), (4, 0, head));
    }

    #[test]
    fn reseal_makes_waiting_lines_follow_a_line_put_before_them() {
        let (mut waiting, _) = sealed(GENESIS, &LINES[1..]);
        let (mut first, head) = sealed(GENESIS, &LINES[..1]);
        reseal(&mut waiting, &head);
        first.extend_from_slice(&waiting);
        let (whole, _) = sealed(GENESIS, &LINES);
        assert_eq!(first, whole);
    }

    #[test]
    fn every_kind_of_tampering_names_its_line() {
        let (buf, _) = sealed(GENESIS, &LINES);
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let join = |l: &[&str]| l.iter().map(|l| format!("{l}\n")).collect::<String>();
        let edited = join(&[
            lines[0],
            &lines[1].replace("\"a\":2", "\"a\":9"),
            lines[2],
            lines[3],
        ]);
        assert_eq!(
            fault(&[("f", edited.as_bytes())]),
            ("f:2".into(), Fault::EditedOrDropped)
        );
        let dropped = join(&[lines[0], lines[2], lines[3]]);
        assert_eq!(
            fault(&[("f", dropped.as_bytes())]),
            ("f:2".into(), Fault::EditedOrDropped)
        );
        let swapped = join(&[lines[0], lines[2], lines[1], lines[3]]);
        assert_eq!(
            fault(&[("f", swapped.as_bytes())]),
            ("f:2".into(), Fault::Moved)
        );
        let headless = join(&lines[1..]);
        assert_eq!(
            fault(&[("f", headless.as_bytes())]),
            ("f:1".into(), Fault::Unanchored)
        );
        let last_edited = join(&[lines[0], lines[1], lines[2], &lines[3].replace('4', "5")]);
        assert_eq!(
            fault(&[("f", last_edited.as_bytes())]),
            ("f:4".into(), Fault::Forged)
        );
        let unchained = join(&[lines[0], lines[1], r#"{"a":2}"#, lines[2], lines[3]]);
        assert_eq!(
            fault(&[("f", unchained.as_bytes())]),
            ("f:3".into(), Fault::Unchained)
        );
        assert_eq!(
            fault(&[("f", b"{\"a\":1}\n")]),
            ("f:1".into(), Fault::Empty)
        );
    }

    #[test]
    fn lines_before_the_chain_existed_are_counted_not_checked() {
        let (buf, _) = sealed(GENESIS, &LINES);
        let mut log = b"{\"old\":1}\n{\"old\":2}\n".to_vec();
        log.extend_from_slice(&buf);
        let intact = check(&[("f", &log)]).unwrap();
        assert_eq!((intact.lines, intact.unchained), (4, 2));
    }

    #[test]
    fn a_stream_that_starts_after_a_line_that_left_is_anchored_by_its_rotated_line() {
        let (gone, after) = sealed(GENESIS, &LINES[..2]);
        drop(gone);
        let rotated =
            format!(r#"{{"kind":"audit","event":"rotated","part":"stream","after":"{after}"}}"#);
        let (kept, _) = sealed(after, &[LINES[2], LINES[3], &rotated]);
        let intact = check(&[("audit.jsonl.1", &kept)]).unwrap();
        assert_eq!(
            intact.after.map(|a| a.to_string()),
            Some("audit.jsonl.1:3".to_owned())
        );
        // A rotated line of an archive anchors nothing.
        let archive = rotated.replace("\"stream\"", "\"first\"");
        let (kept, _) = sealed(after, &[LINES[2], LINES[3], &archive]);
        assert_eq!(
            fault(&[("audit.jsonl.1", &kept)]),
            ("audit.jsonl.1:1".into(), Fault::Unanchored)
        );
    }

    #[test]
    fn files_are_ordered_oldest_first_and_archives_set_aside() {
        let p = |s: &str| PathBuf::from(format!("/a/{s}"));
        let given: Vec<PathBuf> = [
            "audit.jsonl",
            "audit.jsonl.1",
            "audit.jsonl.10",
            "audit.jsonl.2",
            "audit.jsonl.aging",
            "audit.jsonl.allowed",
            "audit.jsonl.first.2",
        ]
        .iter()
        .map(|s| p(s))
        .collect();
        let (stream, archives) = order(&given);
        let names: Vec<String> = stream
            .iter()
            .map(|s| s.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "audit.jsonl.aging",
                "audit.jsonl.10",
                "audit.jsonl.2",
                "audit.jsonl.1",
                "audit.jsonl"
            ]
        );
        assert_eq!(
            archives,
            [p("audit.jsonl.allowed"), p("audit.jsonl.first.2")]
        );
    }
}
