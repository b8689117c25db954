//! The workspace's own secrets as exact needles (issue 21 item 2).
//!
//! At start, before the agent runs, PID 1 (root) reads the workspace's obvious secret
//! files and hands every secret value in them to the proxy
//! ([`airlock_handoff::WorkspaceSecret`]), which refuses each one on its way to any
//! host (`foreign-secret`, detector `workspace:<file>`; redacted on the LLM API hosts), in
//! whatever format it is: a database password is caught as exactly as an AWS key.
//!
//! **Which files** (names, case-sensitive): `.env*` (`.env`, `.env.local`, `.envrc`, ...),
//! `*.pem`, `*.key`, `credentials*.json`, `.npmrc`, `.pypirc`, `.netrc`, and `credentials`
//! in a `.aws` directory. The walk never follows a symlinked directory; it skips
//! [`SKIPPED_DIRS`] (dependencies, caches and build output, whose fixtures are not the
//! project's secrets) and is bounded: [`MAX_DEPTH`] directory levels, [`MAX_ENTRIES`]
//! directory entries, [`MAX_FILES`] secret files of at most [`MAX_FILE_BYTES`] each.
//!
//! **Which values**:
//! - `KEY=value` (also `export KEY=value`, `key = value`, `key: value`; quotes and
//!   trailing ` # comments` removed) whose name looks secret ([`secret_name`]: a word
//!   such as `key`, `token`, `secret`, `password`, `pass`, `pwd`, `credentials`, not
//!   `public`/`publishable`, not ending in `path`/`file`/`dir`); JSON string fields of
//!   `credentials*.json` by the same rule; a `.netrc`'s `password` and `account`;
//! - every value the detectors ([`airlock_policy::detect`]: the built-in ones as the
//!   policy changes them, the proxy's own set) recognise, whatever its name, and every
//!   detector hit elsewhere in these files that is a single token; such a value may still
//!   go to that format's provider hosts (a GitHub token to `api.github.com`);
//! - every line of a PEM private key (`-----BEGIN ... PRIVATE KEY-----`), in a file or in
//!   a value; certificates and public keys are not secrets;
//! - the password of a URL with credentials (`postgres://app:pw@db/app`), whatever the
//!   name; a URL without one is not a secret, even under a secret-looking name.
//!
//! A value becomes a needle only if [`Formats::needle_refusal`] allows it
//! (at least 8 bytes, not a common value such as `true` or `localhost`, not a reference
//! like `${VAR}`, not one repeated character, not a documented example, the policy's
//! `[secrets] allow` included), and a value
//! found only by its name must not look like a word: one of lowercase letters and `-_.`
//! only, shorter than 16 bytes (`created_at`, `us-east-1`), is taken for a setting. Those
//! refused are named in the report with the reason.
//!
//! **Report**: one line at start (names and files, never values) and the same lines in
//! [`REPORT_FILE`] in the run directory (`cat /run/airlock/workspace-secrets` in the
//! sandbox). A file that cannot be used (unreadable, over the size limit, binary, a
//! symlink out of the workspace, not a regular file, past the file limit) gets one line
//! saying what was not read and why; start-up goes on (its values are simply not needles).
//!
//! **Rescan**: a file the agent writes after start is read only when the operator asks:
//! SIGHUP to the container (`airlock rescan <name>`) runs the same [`scan`] as the agent
//! and adds the new needles to the proxy's ([`crate::rescan`]); a needle is never taken
//! away before the container stops. Until that rescan, a secret the agent wrote itself is
//! refused only if a detector recognises it.
//!
//! Not done here: rescanning on its own (a file watch). The encoded forms of each value
//! (percent, JSON, base64) are the proxy's (`airlock_proxy::detect`), not this module's.

use airlock_handoff::{Secret, WorkspaceSecret};
use airlock_policy::detect::Formats;
use airlock_policy::secrets::Secrets;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Directory levels below the workspace searched (the workspace itself is level 0).
pub const MAX_DEPTH: usize = 8;
/// Directory entries looked at, in all: the walk stops there.
pub const MAX_ENTRIES: usize = 200_000;
/// Secret files read.
pub const MAX_FILES: usize = 64;
/// Size of one secret file read.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Directories never searched.
pub const SKIPPED_DIRS: &[&str] = &[
    ".git",
    "node_modules",
    ".venv",
    "venv",
    ".tox",
    "__pycache__",
    "target",
    ".cache",
];
/// The report in the run directory (names and files, never values), mode 0644.
pub const REPORT_FILE: &str = "workspace-secrets";
/// Lines of a quoted value that spans lines (a PEM in `.env`), at most.
const MAX_VALUE_LINES: usize = 200;

/// One value found (the needle) and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// File, relative to the workspace.
    pub file: String,
    /// What it is called there.
    pub name: String,
    /// The format (detector) that recognised it.
    pub detector: Option<String>,
    value: String,
}

/// What the scan found and could not do.
#[derive(Debug, Default)]
pub struct Scan {
    /// The needles.
    pub found: Vec<Found>,
    /// Secret-looking values that are not needles: (file, name, why).
    pub refused: Vec<(String, String, &'static str)>,
    /// Files read (relative), in order.
    pub read: Vec<String>,
    /// One line per thing not read, and why.
    pub problems: Vec<String>,
    /// Directory entries looked at.
    pub entries: usize,
    /// Time the scan took.
    pub elapsed: Duration,
}

/// The one call at start: scan `workdir` with the detectors as `policy` changes them (the
/// proxy's set), print the report when it has something to say (one line, plus one per
/// problem), write it to `run_dir/`[`REPORT_FILE`] and return the needles for the hand-off.
/// Never fails: a problem is a line, start-up goes on.
pub fn at_start(workdir: &Path, run_dir: &Path, policy: &Secrets) -> Vec<WorkspaceSecret> {
    let scan = match Formats::with_policy(policy) {
        Ok(formats) => scan(workdir, &formats),
        Err(e) => Scan {
            problems: vec![format!("workspace secrets not read: {e}")],
            ..Scan::default()
        },
    };
    let lines = report(&scan);
    // Nothing found and nothing unread: the report file says so, the terminal stays quiet
    // (a refused start keeps its one line; an interactive agent's screen its output).
    if !scan.found.is_empty() || !scan.problems.is_empty() {
        for line in &lines {
            crate::console::info(line);
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    let written = std::fs::create_dir_all(run_dir)
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            crate::proxy_state::write_atomic(run_dir, REPORT_FILE, text.as_bytes(), 0o644, None)
        });
    if let Err(e) = written {
        crate::console::info(&format!("workspace secrets: no report file: {e:#}"));
    }
    needles(scan.found)
}

/// The hand-off's form of the values found.
#[must_use]
pub fn needles(found: Vec<Found>) -> Vec<WorkspaceSecret> {
    found
        .into_iter()
        .map(|f| WorkspaceSecret {
            file: f.file,
            name: f.name,
            detector: f.detector,
            value: Secret::new(f.value),
        })
        .collect()
}

/// The report's lines: the summary first, then one per problem.
pub fn report(scan: &Scan) -> Vec<String> {
    let ms = scan.elapsed.as_millis();
    let mut by_file: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for f in &scan.found {
        let label = match f.detector.as_deref() {
            Some(d) if d != "private-key" && !f.name.contains(d) => format!("{} ({d})", f.name),
            _ => f.name.clone(),
        };
        let names = by_file.entry(&f.file).or_default();
        if !names.contains(&label) {
            names.push(label);
        }
    }
    let mut lines = Vec::new();
    let mut summary = if scan.found.is_empty() {
        format!(
            "workspace secrets: none found ({} secret files read, {} entries in {ms} ms)",
            scan.read.len(),
            scan.entries
        )
    } else {
        let files: Vec<String> = by_file
            .iter()
            .map(|(file, names)| format!("{file}: {}", names.join(", ")))
            .collect();
        format!(
            "workspace secrets: {} from {}: refused to any host but their provider's (detector workspace:<file>): {} ({} secret files read, {} entries in {ms} ms)",
            plural(scan.found.len(), "value"),
            plural(by_file.len(), "file"),
            files.join("; "),
            scan.read.len(),
            scan.entries
        )
    };
    if !scan.refused.is_empty() {
        let list: Vec<String> = scan
            .refused
            .iter()
            .map(|(file, name, why)| format!("{file}: {name} ({why})"))
            .collect();
        let _ = write!(summary, "; not needles: {}", list.join(", "));
    }
    lines.push(summary);
    lines.extend(scan.problems.iter().cloned());
    lines
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Whether a file name is one of the obvious secret files.
#[must_use]
pub fn secret_file(name: &str, parent: &str) -> bool {
    name.starts_with(".env")
        || name.ends_with(".pem")
        || name.ends_with(".key")
        || (name.starts_with("credentials") && name.ends_with(".json"))
        || matches!(name, ".npmrc" | ".pypirc" | ".netrc")
        || (name == "credentials" && parent == ".aws")
}

/// A file to read: its name in the report and the path read.
struct Candidate {
    shown: String,
    path: PathBuf,
}

/// Walks `root` and reads its secret files (see the module docs).
pub fn scan(root: &Path, formats: &Formats) -> Scan {
    let t0 = Instant::now();
    let mut out = Scan::default();
    let Ok(root) = std::fs::canonicalize(root) else {
        out.problems.push(format!(
            "workspace secrets not read: no workspace at {}",
            root.display()
        ));
        return out;
    };
    let candidates = walk(&root, &mut out);
    let mut seen = HashSet::new();
    let mut over = Vec::new();
    for c in candidates {
        if !seen.insert(c.path.clone()) {
            continue; // a symlink's target also found by name
        }
        if out.read.len() >= MAX_FILES {
            over.push(c.shown);
            continue;
        }
        match read_text(&c.path) {
            Ok(text) => {
                extract(&c.shown, &text, formats, &mut out);
                out.read.push(c.shown);
            }
            Err(why) => out.problems.push(not_read(&c.shown, &why)),
        }
    }
    if !over.is_empty() {
        let first: Vec<&str> = over.iter().take(5).map(String::as_str).collect();
        out.problems.push(format!(
            "workspace secrets: {} more secret files not read: over the limit of {MAX_FILES} files ({}{}); their values are not needles",
            over.len(),
            first.join(", "),
            if over.len() > first.len() { ", ..." } else { "" }
        ));
    }
    out.elapsed = t0.elapsed();
    out
}

fn not_read(file: &str, why: &str) -> String {
    format!("workspace secret file {file} not read: {why}; its values are not needles")
}

/// The secret files under `root`, in a stable order (sorted per directory, breadth-first).
fn walk(root: &Path, out: &mut Scan) -> Vec<Candidate> {
    let mut found = Vec::new();
    let mut queue = std::collections::VecDeque::from([(root.to_path_buf(), 0usize)]);
    let mut too_deep = Vec::new();
    let mut stopped = false;
    'walk: while let Some((dir, depth)) = queue.pop_front() {
        let rel_dir = rel(root, &dir);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                out.problems.push(format!(
                    "workspace secrets: directory {} not searched: {e}",
                    if rel_dir.is_empty() { "." } else { &rel_dir }
                ));
                continue;
            }
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let parent = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        for entry in entries {
            out.entries += 1;
            if out.entries > MAX_ENTRIES {
                stopped = true;
                break 'walk;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue; // not UTF-8: none of the names we look for
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                if SKIPPED_DIRS.contains(&name) {
                    continue;
                }
                if depth + 1 > MAX_DEPTH {
                    too_deep.push(rel(root, &path));
                } else {
                    queue.push_back((path, depth + 1));
                }
                continue;
            }
            if !secret_file(name, parent) {
                continue;
            }
            let shown = rel(root, &path);
            if kind.is_symlink() {
                match std::fs::canonicalize(&path) {
                    Ok(target) if target.starts_with(root) && target.is_file() => {
                        found.push(Candidate {
                            shown,
                            path: target,
                        });
                    }
                    Ok(target) if target.starts_with(root) => out.problems.push(not_read(
                        &shown,
                        "a symlink to something that is not a file",
                    )),
                    Ok(_) => out.problems.push(not_read(
                        &shown,
                        "a symlink pointing outside the workspace (never followed)",
                    )),
                    Err(_) => out.problems.push(not_read(&shown, "a dangling symlink")),
                }
            } else if kind.is_file() {
                found.push(Candidate { shown, path });
            } else {
                let what = if kind.is_fifo() {
                    "a named pipe"
                } else if kind.is_socket() {
                    "a socket"
                } else {
                    "a device"
                };
                out.problems
                    .push(not_read(&shown, &format!("{what}, not a regular file")));
            }
        }
    }
    if !too_deep.is_empty() {
        out.problems.push(format!(
            "workspace secrets: {} directories deeper than {MAX_DEPTH} levels not searched (first: {})",
            too_deep.len(),
            too_deep[0]
        ));
    }
    if stopped {
        out.problems.push(format!(
            "workspace secrets: the walk stopped after {MAX_ENTRIES} directory entries: secret files further in are not read"
        ));
    }
    found
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Reads a secret file: a regular file (never through a symlink), at most
/// [`MAX_FILE_BYTES`], UTF-8 text.
fn read_text(path: &Path) -> Result<String, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{} bytes, over the {} KiB limit",
            meta.len(),
            MAX_FILE_BYTES / 1024
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("over the {} KiB limit", MAX_FILE_BYTES / 1024));
    }
    if bytes.contains(&0) {
        return Err("binary (it holds NUL bytes)".into());
    }
    String::from_utf8(bytes).map_err(|_| "binary (not UTF-8 text)".to_owned())
}

/// Every needle of one file's text.
fn extract(file: &str, text: &str, formats: &Formats, out: &mut Scan) {
    let mut values: Vec<(String, String)> = Vec::new();
    let is_json = file.ends_with(".json");
    let is_netrc = file.rsplit('/').next() == Some(".netrc");
    if is_json {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => json_values("", &v, &mut values),
            Err(e) => {
                out.problems.push(format!(
                    "workspace secret file {file}: not valid JSON ({e}): read as lines instead"
                ));
                values.extend(assignments(text));
            }
        }
    } else if is_netrc {
        values.extend(netrc_values(text));
    } else {
        values.extend(assignments(text));
    }
    let hits: Vec<(&str, &str)> = formats
        .find(text.as_bytes())
        .into_iter()
        .map(|h| (formats.get(h.format).name.as_ref(), &text[h.range]))
        .collect();
    let mut sink = Sink {
        file,
        formats,
        hits: &hits,
        out,
        values: HashSet::new(),
    };
    for (name, value) in values {
        sink.value(&name, &value);
    }
    // Private keys anywhere in the text.
    for (label, lines) in pem_private_keys(text) {
        sink.pem(&label, &lines);
    }
    // A single-line `.key` file that is not PEM: the line is the key.
    if file.ends_with(".key") && sink.out.found.iter().all(|f| f.file != file) {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        if let (Some(line), None) = (lines.next(), lines.next())
            && !line.contains('=')
        {
            sink.push("key", line, None, true);
        }
    }
    // Detector hits outside any value read above (a token on a line of its own).
    for (name, token) in &hits {
        let single = !token
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b"\"'=:".contains(&b));
        if single && !sink.values.iter().any(|v| v.contains(token)) {
            sink.push(name, token, Some(name), true);
        }
    }
}

/// Where one file's values go: the scan, without duplicates.
struct Sink<'a> {
    file: &'a str,
    formats: &'a Formats,
    /// The formats' hits in the whole file: a value inside one is that format's (the
    /// id and the secret of an AWS key pair, each on its own line).
    hits: &'a [(&'a str, &'a str)],
    out: &'a mut Scan,
    values: HashSet<String>,
}

impl Sink<'_> {
    /// One `name = value`: a needle if a format recognises it or its name looks secret; a
    /// URL's password whatever the name.
    fn value(&mut self, name: &str, value: &str) {
        let value = value.trim();
        if value.is_empty() {
            return;
        }
        if let Some(label) = pem_label(value) {
            for (_, lines) in pem_private_keys(value) {
                self.pem(&format!("{name} ({label})"), &lines);
            }
            return;
        }
        let formats = self.formats;
        if let Some(hit) = formats.find(value.as_bytes()).first() {
            let format = formats.get(hit.format).name.as_ref();
            self.push(name, value, Some(format), true);
            return;
        }
        if let Some(password) = url_password(value) {
            self.push(&format!("{name} (URL password)"), &password, None, false);
            return;
        }
        if value.contains("://") {
            return; // a URL without credentials is not a secret
        }
        if let Some((format, _)) = self.hits.iter().find(|(_, hit)| hit.contains(value)) {
            self.push(name, value, Some(format), true);
            return;
        }
        if secret_name(name) {
            self.push(name, value, None, false);
        }
    }

    fn pem(&mut self, label: &str, lines: &[&str]) {
        let mut n = 0;
        for line in lines {
            if self.formats.needle_refusal(line).is_none() && self.values.insert((*line).to_owned())
            {
                self.out.found.push(Found {
                    file: self.file.to_owned(),
                    name: label.to_owned(),
                    detector: Some("private-key".to_owned()),
                    value: (*line).to_owned(),
                });
                n += 1;
            }
        }
        if n == 0 {
            self.out.refused.push((
                self.file.to_owned(),
                label.to_owned(),
                "no line long enough",
            ));
        }
    }

    /// A needle unless the rule refuses it (`by_format`: a format or the file's kind vouches
    /// for it; else it was only its name, and it must not look like a word).
    fn push(&mut self, name: &str, value: &str, detector: Option<&str>, by_format: bool) {
        let why = self.formats.needle_refusal(value).or_else(|| {
            (!by_format && looks_like_word(value)).then_some("looks like a word, not a secret")
        });
        if let Some(why) = why {
            self.out
                .refused
                .push((self.file.to_owned(), name.to_owned(), why));
            return;
        }
        if self.values.insert(value.to_owned()) {
            self.out.found.push(Found {
                file: self.file.to_owned(),
                name: name.to_owned(),
                detector: detector.map(str::to_owned),
                value: value.to_owned(),
            });
        }
    }
}

/// Lowercase letters, digits-free, `-_.` only, shorter than 16 bytes: a setting's word.
fn looks_like_word(value: &str) -> bool {
    value.len() < 16
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b"-_.".contains(&b))
}

/// Whether a variable or key name looks like it holds a secret (see the module docs).
#[must_use]
pub fn secret_name(name: &str) -> bool {
    let words = words(name);
    if words
        .iter()
        .any(|w| matches!(w.as_str(), "public" | "publishable" | "pub"))
    {
        return false;
    }
    if words.last().is_some_and(|w| {
        matches!(
            w.as_str(),
            "path" | "file" | "dir" | "filename" | "location"
        )
    }) {
        return false;
    }
    const WORDS: &[&str] = &[
        "key",
        "keys",
        "pass",
        "pwd",
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "token",
        "tokens",
        "credential",
        "credentials",
        "creds",
        "apikey",
        "privkey",
        "auth",
        "pat",
    ];
    const JOINED: &[&str] = &[
        "secret",
        "password",
        "passwd",
        "passphrase",
        "token",
        "apikey",
        "accesskey",
        "privatekey",
        "secretkey",
        "credential",
        "authkey",
        "signingkey",
        "encryptionkey",
        "masterkey",
    ];
    let joined: String = words.concat();
    words.iter().enumerate().any(|(i, w)| {
        let last = i + 1 == words.len();
        match w.as_str() {
            // `_auth` (npm), `GH_PAT`: only as the last word, not `AUTH_PROVIDER`.
            "auth" | "pat" => last,
            w => WORDS.contains(&w),
        }
    }) || JOINED.iter().any(|j| joined.contains(j))
}

/// Lowercase words of a name: split at every non-alphanumeric and at camelCase humps.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `KEY=value` (and `export KEY=value`, `key = value`, `key: value`) lines; a quoted value
/// may span lines (up to [`MAX_VALUE_LINES`]).
fn assignments(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.is_empty()
            || line.starts_with('#')
            || line.starts_with(';')
            || line.starts_with('[')
        {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let split = line
            .split_once('=')
            .filter(|(k, _)| !k.trim().contains(' '))
            .or_else(|| {
                line.split_once(": ")
                    .filter(|(k, _)| !k.is_empty() && !k.contains(' ') && !k.contains('/'))
            });
        let Some((key, rest)) = split else {
            continue;
        };
        let (key, rest) = (key.trim(), rest.trim());
        if key.is_empty() {
            continue;
        }
        let value = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let mut body = rest[1..].to_owned();
                let mut taken = 0;
                while !closes(&body, q) && taken < MAX_VALUE_LINES {
                    match lines.next() {
                        Some(next) => {
                            body.push('\n');
                            body.push_str(next);
                            taken += 1;
                        }
                        None => break,
                    }
                }
                let end = closing(&body, q).unwrap_or(body.len());
                let inner = &body[..end];
                if q == '"' {
                    inner.replace("\\n", "\n").replace("\\\"", "\"")
                } else {
                    inner.to_owned()
                }
            }
            _ => match rest.find(" #") {
                Some(i) => rest[..i].trim().to_owned(),
                None => rest.to_owned(),
            },
        };
        out.push((key.to_owned(), value));
    }
    out
}

fn closing(body: &str, q: char) -> Option<usize> {
    let bytes = body.as_bytes();
    (0..bytes.len())
        .find(|&i| bytes[i] == q as u8 && (q == '\'' || i == 0 || bytes[i - 1] != b'\\'))
}

fn closes(body: &str, q: char) -> bool {
    closing(body, q).is_some()
}

/// Every string of a JSON document, named by its key path (`installed.client_secret`).
fn json_values(path: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::String(s) => out.push((path.to_owned(), s.clone())),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                json_values(&p, v, out);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                json_values(&format!("{path}[{i}]"), v, out);
            }
        }
        _ => {}
    }
}

/// A `.netrc`'s `password` and `account` tokens, named with their machine.
fn netrc_values(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut machine = String::from("default");
    let mut tokens = text.split_whitespace();
    while let Some(t) = tokens.next() {
        match t {
            "machine" => machine = tokens.next().unwrap_or("").to_owned(),
            "default" => machine = "default".into(),
            "password" | "account" => {
                if let Some(v) = tokens.next() {
                    // `password` is secret by name; say which machine it is for.
                    out.push((format!("{t} (machine {machine})"), v.to_owned()));
                }
            }
            _ => {}
        }
    }
    out
}

/// The label of a PEM private key in `text` (`RSA PRIVATE KEY`), if one begins there.
fn pem_label(text: &str) -> Option<&str> {
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let label = &text[start..start + text[start..].find("-----")?];
    label.contains("PRIVATE KEY").then_some(label)
}

/// Every PEM private key block in `text`: its label and its body lines (headers such as
/// `Proc-Type:` left out).
fn pem_private_keys(text: &str) -> Vec<(String, Vec<&str>)> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("-----BEGIN ") {
            let label = rest.trim_end_matches('-').to_owned();
            current = label.contains("PRIVATE KEY").then(|| (label, Vec::new()));
            continue;
        }
        if line.starts_with("-----END ") {
            if let Some(block) = current.take() {
                out.push(block);
            }
            continue;
        }
        if let Some((_, lines)) = current.as_mut()
            && !line.is_empty()
            && !line.contains(':')
        {
            lines.push(line);
        }
    }
    out
}

/// The password of a URL with credentials (`scheme://user:password@host/...`),
/// percent-decoded.
fn url_password(value: &str) -> Option<String> {
    let rest = &value[value.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    let password = userinfo.split_once(':')?.1;
    let decoded = airlock_policy::path::percent_decode(password.as_bytes());
    String::from_utf8(decoded).ok().filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn formats() -> Formats {
        Formats::builtin().unwrap()
    }

    fn values(scan: &Scan) -> Vec<(&str, &str, &str)> {
        scan.found
            .iter()
            .map(|f| (f.file.as_str(), f.name.as_str(), f.value.as_str()))
            .collect()
    }

    const AWS_ID: &str = "AKIA2Z3Y4X5W6V7U2T3S";
    const AWS_SECRET: &str = "abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB";
    const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEAx1b2c3d4e5f6g7h8i9j0kLmNoPqRsTuVwXyZ0123456789ab\nZ2h1aTJrM2w0bTVuNm83cDhxOXIwczF0MnUzdjR3NXg2eTd6OEE5QjBDMUQy\nAB==\n-----END RSA PRIVATE KEY-----\n";

    /// The policy's detectors classify the workspace's values as the proxy will: a value of
    /// its own format under an innocent name is that detector's, an allowed example value
    /// is no needle.
    #[test]
    fn the_policys_detectors_and_allowed_values_classify_the_workspace() {
        let policy = airlock_policy::Policy::parse(
            "[sandbox]\nname = \"t\"\n[secrets]\nallow = [\"acme_EXAMPLEEXAMPLEEXAMPLEEXAMPLE0000\"]\n\
             [[detectors]]\nname = \"acme-token\"\npattern = 'acme_[A-Za-z0-9]{32}'\n",
            Path::new("p.toml"),
        )
        .unwrap();
        let f = Formats::with_policy(&policy.secrets).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "BUILD_LABEL=acme_0123456789abcdefghijABCDEFGHIJkl\nAPI_TOKEN=acme_EXAMPLEEXAMPLEEXAMPLEEXAMPLE0000\n",
        )
        .unwrap();
        let found = scan(dir.path(), &f);
        let acme: Vec<_> = found
            .found
            .iter()
            .map(|x| (x.name.as_str(), x.detector.as_deref()))
            .collect();
        assert_eq!(acme, [("BUILD_LABEL", Some("acme-token"))]);
        assert!(
            found
                .refused
                .iter()
                .any(|(_, n, why)| n == "API_TOKEN" && *why == "a documented example value"),
            "{:?}",
            found.refused
        );
        // Without the policy: BUILD_LABEL's name is no secret's, API_TOKEN's is.
        let builtin = scan(dir.path(), &formats());
        let names: Vec<_> = builtin.found.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["API_TOKEN"]);
    }

    /// The bad input in one workspace: a `.env`, a private key, a certificate, a
    /// huge file, a binary, a symlink out of the workspace, a pipe; each a line, the good
    /// values needles, nothing read through the symlink.
    #[test]
    fn a_workspace_with_good_and_bad_secret_files() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(ws.join("deploy")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(
            ws.join(".env"),
            format!(
                "# settings\nexport AWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY=\"{AWS_SECRET}\"\nDB_PASSWORD=hunter2-correct-horse # the db\nDB_HOST=localhost\nDEBUG=true\nAPI_TOKEN=short\nSORT_KEY=created_at\nDATABASE_URL=postgres://app:pw%40ssw0rd-1@db:5432/app\nAUTH_URL=https://auth.example.com/login\nNEXT_PUBLIC_API_KEY=pk_public_123456789\nGH={}\n",
                format_args!("ghp_{}", "a1B2".repeat(9))
            ),
        )
        .unwrap();
        std::fs::write(ws.join("deploy/id.pem"), PEM).unwrap();
        std::fs::write(ws.join("deploy/cert.pem"), "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n").unwrap();
        std::fs::write(ws.join("huge.key"), vec![b'a'; 200 * 1024]).unwrap();
        std::fs::write(ws.join("deploy/bin.key"), [0x30u8, 0x82, 0, 1, 2]).unwrap();
        std::fs::write(
            outside.join("secret.env"),
            "STOLEN_PASSWORD=outside-value-123\n",
        )
        .unwrap();
        symlink(outside.join("secret.env"), ws.join(".env.link")).unwrap();
        symlink(ws.join(".env"), ws.join(".env.inside")).unwrap();
        nix::unistd::mkfifo(&ws.join(".env.pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let scan = scan(&ws, &formats());
        let v = values(&scan);
        for (file, name, value) in [
            (".env", "AWS_ACCESS_KEY_ID", AWS_ID),
            (".env", "AWS_SECRET_ACCESS_KEY", AWS_SECRET),
            (".env", "DB_PASSWORD", "hunter2-correct-horse"),
            (".env", "DATABASE_URL (URL password)", "pw@ssw0rd-1"),
            ("deploy/id.pem", "RSA PRIVATE KEY", "AB==x"),
        ] {
            if value == "AB==x" {
                assert!(v.iter().any(|(f, n, _)| *f == file && *n == name), "{v:?}");
                continue;
            }
            assert!(v.contains(&(file, name, value)), "{file} {name}: {v:?}");
        }
        let gh = v.iter().find(|(_, n, _)| *n == "GH").unwrap();
        assert!(gh.2.starts_with("ghp_"));
        assert_eq!(
            scan.found
                .iter()
                .find(|f| f.name == "GH")
                .unwrap()
                .detector
                .as_deref(),
            Some("github-token")
        );
        // Two body lines of the key (the short last line and the header are not needles).
        assert_eq!(
            v.iter().filter(|(f, _, _)| *f == "deploy/id.pem").count(),
            2
        );
        for not in [
            "localhost",
            "true",
            "short",
            "created_at",
            "outside-value-123",
            "https://auth.example.com/login",
            "pk_public_123456789",
        ] {
            assert!(!v.iter().any(|(_, _, x)| *x == not), "{not} is a needle");
        }
        assert!(
            scan.refused
                .iter()
                .any(|(_, n, why)| n == "API_TOKEN" && *why == "shorter than 8 bytes")
        );
        assert!(
            scan.refused
                .iter()
                .any(|(_, n, why)| n == "SORT_KEY" && why.contains("word"))
        );
        // The symlink inside the workspace is its target, read once.
        assert_eq!(
            scan.read.iter().filter(|f| f.starts_with(".env")).count(),
            1
        );
        let problems = scan.problems.join("\n");
        for (file, why) in [
            ("huge.key", "over the 64 KiB limit"),
            ("deploy/bin.key", "binary"),
            (".env.link", "outside the workspace (never followed)"),
            (".env.pipe", "a named pipe"),
        ] {
            assert!(
                scan.problems
                    .iter()
                    .any(|p| p.contains(&format!("{file} not read")) && p.contains(why)),
                "{file}: {problems}"
            );
        }
        assert_eq!(scan.problems.len(), 4, "{problems}");
        // The report names names and files, never a value.
        let text = report(&scan).join("\n");
        assert!(
            text.contains(".env: AWS_ACCESS_KEY_ID (aws-access-key), AWS_SECRET_ACCESS_KEY (aws-access-key), DB_PASSWORD, DATABASE_URL (URL password), GH (github-token)"),
            "{text}"
        );
        assert!(text.contains("deploy/id.pem: RSA PRIVATE KEY"), "{text}");
        for f in &scan.found {
            assert!(
                !text.contains(&f.value),
                "{} leaked into the report",
                f.name
            );
        }
    }

    #[test]
    fn too_many_files_and_too_deep_are_said() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..(MAX_FILES + 3) {
            std::fs::write(
                dir.path().join(format!("s{i:03}.key")),
                format!("KEY_{i}=value-{i}-Abcdefgh\n"),
            )
            .unwrap();
        }
        let mut deep = dir.path().to_path_buf();
        for i in 0..=MAX_DEPTH {
            deep = deep.join(format!("d{i}"));
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join(".env"), "PASSWORD=deep-down-value-1\n").unwrap();
        let scan = scan(dir.path(), &formats());
        assert_eq!(scan.read.len(), MAX_FILES);
        assert!(
            scan.problems
                .iter()
                .any(|p| p.contains("3 more secret files not read: over the limit of 64")),
            "{:?}",
            scan.problems
        );
        assert!(
            scan.problems
                .iter()
                .any(|p| p.contains("1 directories deeper than 8 levels")),
            "{:?}",
            scan.problems
        );
        assert!(!scan.found.iter().any(|f| f.value == "deep-down-value-1"));
    }

    #[test]
    fn npmrc_pypirc_netrc_and_credentials_json() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let npm = format!("npm_{}", "k".repeat(36));
        std::fs::write(
            d.join(".npmrc"),
            format!(
                "registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={npm}\n"
            ),
        )
        .unwrap();
        std::fs::write(d.join(".pypirc"), "[distutils]\nindex-servers = pypi\n[pypi]\nusername: __token__\npassword: pypi-s3cr3t-Value-99\n").unwrap();
        std::fs::write(
            d.join(".netrc"),
            "machine example.com login bob password n3trc-Passw0rd\n",
        )
        .unwrap();
        std::fs::write(
            d.join("credentials.json"),
            serde_json::json!({
                "type": "service_account",
                "project_id": "my-project-123",
                "private_key_id": "0f".repeat(20),
                "private_key": PEM,
                "client_email": "svc@my-project-123.iam.gserviceaccount.com",
                "token_uri": "https://oauth2.googleapis.com/token",
                "installed": {"client_secret": "GOCSPX-abcdefgh12345"}
            })
            .to_string(),
        )
        .unwrap();
        let scan = scan(d, &formats());
        let v = values(&scan);
        assert!(
            v.contains(&(".npmrc", "//registry.npmjs.org/:_authToken", npm.as_str())),
            "{v:?}"
        );
        assert!(
            v.contains(&(".pypirc", "password", "pypi-s3cr3t-Value-99")),
            "{v:?}"
        );
        assert!(
            v.contains(&(".netrc", "password (machine example.com)", "n3trc-Passw0rd")),
            "{v:?}"
        );
        assert!(
            v.contains(&(
                "credentials.json",
                "installed.client_secret",
                "GOCSPX-abcdefgh12345"
            )),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|(f, n, _)| *f == "credentials.json" && n.starts_with("private_key (")),
            "{v:?}"
        );
        for not in [
            "my-project-123",
            "https://oauth2.googleapis.com/token",
            "bob",
            "__token__",
        ] {
            assert!(!v.iter().any(|(_, _, x)| *x == not), "{not}");
        }
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    }

    #[test]
    fn secret_looking_names() {
        for yes in [
            "DB_PASSWORD",
            "AWS_ACCESS_KEY_ID",
            "_authToken",
            "_auth",
            "SECRET_KEY_BASE",
            "apiKey",
            "GH_PAT",
            "client_secret",
            "STRIPE_SECRETKEY",
            "privateKey",
            "credentials",
        ] {
            assert!(secret_name(yes), "{yes}");
        }
        for no in [
            "DB_HOST",
            "KEYBOARD",
            "AUTH_PROVIDER",
            "NEXT_PUBLIC_API_KEY",
            "STRIPE_PUBLISHABLE_KEY",
            "SSH_KEY_PATH",
            "PATH",
            "MONKEY",
            "username",
        ] {
            assert!(!secret_name(no), "{no}");
        }
    }

    /// A fixture-heavy repository: thousands of files, some secret files among them, and a
    /// dependency directory the walk leaves alone. Every secret file is read, nothing under
    /// `node_modules`; the scan's time is printed (`--nocapture`), never asserted.
    #[test]
    fn scan_of_a_fixture_heavy_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = 0;
        for a in 0..50 {
            for b in 0..10 {
                let d = dir.path().join(format!("pkg{a}/src/mod{b}"));
                std::fs::create_dir_all(&d).unwrap();
                for c in 0..20 {
                    std::fs::write(d.join(format!("f{c}.rs")), "fn main() {}\n").unwrap();
                    files += 1;
                }
                if b == 0 {
                    std::fs::write(d.join(".env.test"), "API_KEY=fixture-value-Abc123\n").unwrap();
                    files += 1;
                }
            }
            let nm = dir.path().join(format!("pkg{a}/node_modules/x"));
            std::fs::create_dir_all(&nm).unwrap();
            for c in 0..100 {
                std::fs::write(nm.join(format!("m{c}.js")), "x\n").unwrap();
                files += 1;
            }
        }
        let t0 = Instant::now();
        let f = formats();
        let compile = t0.elapsed();
        let last = scan(dir.path(), &f);
        println!(
            "workspace scan: {files} files, {} entries looked at, {} secret files read, {} needles in {:?}; compiling the detectors {compile:?}",
            last.entries,
            last.read.len(),
            last.found.len(),
            last.elapsed,
        );
        assert_eq!(last.read.len(), 50, "every .env.test, nothing else");
        assert!(
            !last.found.is_empty(),
            "the fixtures' API_KEY values are needles"
        );
        assert!(last.problems.is_empty(), "{:?}", last.problems);
        assert!(
            last.entries < files,
            "node_modules is not walked: {} entries for {files} files",
            last.entries
        );
    }
}
