//! Someone who can reach the audit files but not the writer's chain edits a line, drops one,
//! swaps two, cuts the log's beginning off, removes a whole file or adds a line of their
//! own: `airlock audit verify`'s check names the first bad line each time. The log is the
//! real writer's, on real files, rotated and aged out by a small cap; an intact one, across
//! rotations, ageing and a restart, verifies.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use airlock_audit_schema::chain::{self, Fault, Intact, VerifyError};

use super::*;

fn who() -> Who {
    Who::new("s1", "demo", Some("c0ffee"))
}

/// A cap that ages the stream out every few dozen lines (files of 8 KiB, two rotated).
fn bounds() -> Bounds {
    Bounds {
        cap: 96 * 1024,
        keep: 2,
        ..Bounds::default()
    }
}

/// What the proxy writes for `n` requests: each allowed one's open line before it goes
/// upstream and its final line after, and a denial to a new destination every third.
async fn traffic(audit: &Audit, from: u64, n: u64) {
    for i in from..from + n {
        let mut r = Record::new(&who(), SystemTime::now(), Kind::Http, None);
        r.decision = Verdict::Allow;
        r.method = Some("GET".into());
        r.host = Some("api.example".into());
        r.port = Some(443);
        r.path = Some(format!("/r{i}"));
        audit.commit_open(&mut r).unwrap();
        r.status = Some(200);
        audit.emit(r).await;
        if i % 3 == 0 {
            let mut d = Record::new(&who(), SystemTime::now(), Kind::Connect, None);
            d.reason = Some(Reason::BlockedByPolicy);
            d.host = Some(format!("h{i}.example"));
            d.port = Some(443);
            audit.commit(&d).unwrap();
        }
    }
}

/// A log written by the real writer in `dir` that rotated and aged out.
async fn written(dir: &Path) -> PathBuf {
    let path = dir.join("audit.jsonl");
    let (audit, writer) = open(&path, who(), bounds()).unwrap();
    traffic(&audit, 0, 300).await;
    writer.finish().await.unwrap();
    path
}

/// Every file of the log in `dir`, as `airlock audit verify dir/*` would be given them.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

fn verify(dir: &Path) -> Result<Intact, VerifyError> {
    let (stream, _archives) = chain::order(&files_in(dir));
    chain::verify_paths(&stream)
}

/// The stream's files, oldest first.
fn stream(dir: &Path) -> Vec<PathBuf> {
    chain::order(&files_in(dir)).0
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A copy of the log in `dir` to tamper with.
fn copy(dir: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for f in files_in(dir) {
        std::fs::copy(&f, to.path().join(f.file_name().unwrap())).unwrap();
    }
    to
}

/// The first bad line `verify` names, and what it says is wrong.
fn named(dir: &Path) -> (String, Fault) {
    match verify(dir) {
        Err(VerifyError::Broken(b)) => (b.at.to_string(), b.fault),
        other => panic!("tampering not found: {other:?}"),
    }
}

fn at(path: &Path, line: usize) -> String {
    format!("{}:{line}", path.display())
}

#[tokio::test]
async fn an_intact_log_verifies_across_rotation_ageing_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path()).await;
    let stream_files = stream(dir.path());
    assert_eq!(stream_files.len(), 3, "{stream_files:?}");
    assert!(
        files::with_suffix(&path, "allowed").exists(),
        "the stream aged out into the archives"
    );
    let intact = verify(dir.path()).unwrap();
    // The oldest kept file follows a line that left: a rotated line of the stream says so.
    let after = intact.after.clone().expect("anchored by a rotated line");
    assert!(after.file.starts_with(&dir.path().display().to_string()));
    assert_eq!(intact.unchained, 0);
    // Every line of the stream is chained, the last one is the head.
    let all: usize = stream_files.iter().map(|f| lines_of(f).len()).sum();
    assert_eq!(intact.lines, all as u64);
    let last = lines_of(&path).pop().unwrap();
    assert_eq!(chain::last(last.as_bytes()), Some(intact.head));
    // Every line still reads as an audit line, the chain included.
    for f in &stream_files {
        for l in lines_of(f) {
            let _: airlock_audit_schema::Line = serde_json::from_str(&l).unwrap();
        }
    }

    // A restart continues the chain from the last line.
    let (audit, writer) = open(&path, who(), bounds()).unwrap();
    traffic(&audit, 1000, 5).await;
    writer.finish().await.unwrap();
    let again = verify(dir.path()).unwrap();
    assert!(again.lines > 0 && again.head != intact.head);
}

#[tokio::test]
async fn attack_every_edit_drop_swap_cut_and_forgery_is_named_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path()).await;
    let oldest = stream(dir.path())[0].clone();
    let name = oldest.file_name().unwrap().to_owned();
    assert!(lines_of(&oldest).len() >= 6);

    // A field edited: the agent's request made to look harmless.
    let t = copy(dir.path());
    let f = t.path().join(&name);
    let mut lines = lines_of(&f);
    let k = 1 + lines[1..]
        .iter()
        .position(|l| l.contains("\"path\":\"/r"))
        .unwrap();
    lines[k] = lines[k].replacen("\"path\":\"/r", "\"path\":\"/harmless", 1);
    write_lines(&f, &lines);
    assert_eq!(named(t.path()), (at(&f, k + 1), Fault::EditedOrDropped));

    // A denial's decision flipped to allow.
    let t = copy(dir.path());
    let f = t.path().join(&name);
    let mut lines = lines_of(&f);
    let k = 3;
    lines[k] = lines[k].replacen("\"decision\":\"", "\"decision\":\"x", 1);
    write_lines(&f, &lines);
    assert_eq!(named(t.path()).0, at(&f, k + 1));

    // A line dropped: the line after it is named.
    let t = copy(dir.path());
    let f = t.path().join(&name);
    let mut lines = lines_of(&f);
    lines.remove(2);
    write_lines(&f, &lines);
    assert_eq!(named(t.path()), (at(&f, 3), Fault::EditedOrDropped));

    // Two lines swapped.
    let t = copy(dir.path());
    let f = t.path().join(&name);
    let mut lines = lines_of(&f);
    lines.swap(3, 4);
    write_lines(&f, &lines);
    assert_eq!(named(t.path()), (at(&f, 4), Fault::Moved));

    // The head cut off: the first lines of the oldest file removed.
    let t = copy(dir.path());
    let f = t.path().join(&name);
    let lines = lines_of(&f);
    write_lines(&f, &lines[3..]);
    assert_eq!(named(t.path()), (at(&f, 1), Fault::Unanchored));

    // The oldest file removed whole: the next one's first line follows nothing kept.
    let t = copy(dir.path());
    std::fs::remove_file(t.path().join(&name)).unwrap();
    let next = stream(t.path())[0].clone();
    assert_eq!(named(t.path()), (at(&next, 1), Fault::Unanchored));

    // A middle file removed: the line after the gap is named.
    let t = copy(dir.path());
    let files = stream(t.path());
    std::fs::remove_file(&files[1]).unwrap();
    assert_eq!(named(t.path()).0, at(&files[2], 1));

    // A line added at the end by someone without the chain: a copy of a real line, and a
    // line with a chain made up.
    let t = copy(dir.path());
    let f = t.path().join(path.file_name().unwrap());
    let mut lines = lines_of(&f);
    let n = lines.len();
    lines.push(lines[n - 2].replacen("\"path\":\"/r", "\"path\":\"/forged", 1));
    write_lines(&f, &lines);
    assert_eq!(named(t.path()), (at(&f, n + 1), Fault::Forged));
    let t = copy(dir.path());
    let f = t.path().join(path.file_name().unwrap());
    let mut lines = lines_of(&f);
    let n = lines.len();
    let forged = lines[n - 1].clone();
    let (body, _) = chain::split(forged.as_bytes()).unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    lines.push(format!(
        "{body},\"chain\":\"0123456789abcdef0123456789abcdef\"}}"
    ));
    write_lines(&f, &lines);
    assert_eq!(named(t.path()), (at(&f, n + 1), Fault::Forged));

    // A line without a chain slipped in.
    let t = copy(dir.path());
    let f = t.path().join(path.file_name().unwrap());
    let mut lines = lines_of(&f);
    lines.insert(1, r#"{"kind":"audit","event":"note"}"#.to_owned());
    write_lines(&f, &lines);
    assert_eq!(named(t.path()), (at(&f, 2), Fault::Unchained));

    // The untouched log still verifies.
    verify(dir.path()).unwrap();
}
