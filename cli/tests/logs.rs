//! `airlock logs NAME --audit -f` against a fake admin API (no engine): the history comes
//! from the files, what follows from the event stream, a record both have is printed once,
//! the filters go into the stream's query.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::fake;
use airlock_audit_schema::{Kind, Record, Verdict, Who};
use airlock_control::admin::{Cursor, Event, Log, StreamLine};
use bytes::Bytes;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, UNIX_EPOCH};

fn denial(host: &str, ms: u64) -> String {
    let who = Who::new("1764300000-a1b2c3d4e5f6", "logbox", None);
    let mut r: Record = Record::new(
        &who,
        UNIX_EPOCH + Duration::from_millis(ms),
        Kind::Connect,
        None,
    );
    r.decision = Verdict::Deny;
    r.reason = Some("blocked-by-policy".into());
    r.host = Some(host.into());
    r.port = Some(443);
    serde_json::to_string(&r).unwrap()
}

fn streamed(raw: &str, n: u64) -> Bytes {
    let line = StreamLine::Record(Event {
        cursor: Cursor(format!("s:{n}")),
        log: Log::Audit,
        record: serde_json::from_str::<serde_json::Value>(raw).unwrap(),
    });
    let mut v = serde_json::to_vec(&line).unwrap();
    v.push(b'\n');
    Bytes::from(v)
}

#[test]
fn follow_reads_the_stream_after_the_files_and_prints_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let (data, fake) = fake::sandbox(dir.path(), "logbox");
    let audit = data.join("sandboxes/logbox/audit");
    std::fs::create_dir_all(&audit).unwrap();
    let old = denial("old.example", 1_764_300_000_000);
    std::fs::write(audit.join("audit.jsonl"), format!("{old}\n")).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "logs",
            "logbox",
            "--audit",
            "-f",
            "--denied",
            "--session",
            "a1b2c3",
        ])
        .env("AIRLOCK_DATA_DIR", &data)
        .env("AIRLOCK_CONFIG_DIR", data.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || rx.recv_timeout(Duration::from_secs(10)).expect("no line");
    let first = next();
    assert!(
        first.contains("CONNECT old.example:443  blocked-by-policy"),
        "{first}"
    );
    assert!(next().contains("to allow: add \"old.example\""));

    let start = Instant::now();
    let follower = loop {
        if let Some(f) = fake.followers.lock().unwrap().first().cloned() {
            break f;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "logs -f never opened the stream"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The filters are the stream's query (the session as its whole id, asked of the API's
    // sessions: the fake has none, so it is filtered here only).
    let q = fake.queries.lock().unwrap()[0].clone();
    assert_eq!(q.decision.as_deref(), Some("deny"));
    assert!(q.follow);
    // The stream starts with what the proxy holds, which the file had: not printed again.
    follower.blocking_send(streamed(&old, 1)).unwrap();
    let new = denial("new.example", 1_764_300_005_000);
    follower.blocking_send(streamed(&new, 2)).unwrap();
    let line = next();
    assert!(
        line.contains("CONNECT new.example:443  blocked-by-policy"),
        "{line}"
    );
    assert!(next().contains("to allow: add \"new.example\""));
    // Another session's denial: left out by --session.
    let other = denial("other.example", 1_764_300_006_000).replace("a1b2c3d4e5f6", "ffffffffffff");
    follower.blocking_send(streamed(&other, 3)).unwrap();
    let last = denial("last.example", 1_764_300_007_000);
    follower.blocking_send(streamed(&last, 4)).unwrap();
    let line = next();
    assert!(line.contains("last.example"), "{line}");
    let _ = child.kill();
    let _ = child.wait();
}
