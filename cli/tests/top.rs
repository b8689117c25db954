//! `airlock top` in a real terminal (tmux), over a sandbox whose admin API is a fake served
//! by this test on the sandbox's control socket: the screen lists it with its counters,
//! shows a denial as the stream carries it, shows the sandbox alone on Enter with how to
//! allow it, and quits on q leaving the terminal as it was. No engine, no image: the real
//! proxy's API is the smoke test's (tests/smoke/cli-admin.sh).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::fake;
use airlock_audit_schema::{Kind, Record, Verdict, Who};
use airlock_control::admin::{Cursor, Event, Log, StreamLine};
use bytes::Bytes;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// A tmux server of its own, killed on drop.
pub struct Tmux {
    pub socket: PathBuf,
}

impl Tmux {
    pub fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux is required: apt-get install tmux")
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    pub fn wait_for(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if want(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the screen never showed {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn denial() -> String {
    let who = Who::new("1764300000-a1b2c3d4e5f6", "topbox", None);
    let mut r: Record = Record::new(
        &who,
        UNIX_EPOCH + Duration::from_millis(1_764_300_000_123),
        Kind::Connect,
        None,
    );
    r.decision = Verdict::Deny;
    r.reason = Some("blocked-by-policy".into());
    r.host = Some("exfil.example".into());
    r.port = Some(443);
    serde_json::to_string(&r).unwrap()
}

#[test]
fn top_lists_a_running_sandbox_shows_a_denial_as_it_happens_and_quits_on_q() {
    let dir = tempfile::tempdir().unwrap();
    let (data, fake) = fake::sandbox(dir.path(), "topbox");

    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
    };
    let rc = dir.path().join("rc");
    let script = format!(
        "env AIRLOCK_DATA_DIR={} AIRLOCK_CONFIG_DIR={} {} top --interval 0.2; echo rc=$? > {}; sleep 60",
        data.display(),
        dir.path().join("config").display(),
        env!("CARGO_BIN_EXE_airlock"),
        rc.display()
    );
    let o = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "150",
        "-y",
        "40",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        o.status.success(),
        "tmux: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // It starts and lists the sandbox with its counters and policy revision.
    let s = tmux.wait_for("the sandbox's row with its counters", |s| {
        s.lines()
            .any(|l| l.contains("topbox") && l.contains("ready") && l.contains("r7 feedface0123"))
    });
    assert!(s.contains("none yet"), "no denial yet:\n{s}");

    // A denial happens: the stream carries it, the screen shows it and the count.
    fake.denied.fetch_add(1, Ordering::SeqCst);
    let line = StreamLine::Record(Event {
        cursor: Cursor("s:1".into()),
        log: Log::Audit,
        record: serde_json::from_str::<serde_json::Value>(&denial()).unwrap(),
    });
    let mut bytes = serde_json::to_vec(&line).unwrap();
    bytes.push(b'\n');
    let start = Instant::now();
    let followers = loop {
        let f = fake.followers.lock().unwrap().clone();
        if !f.is_empty() {
            break f;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "top never opened the event stream"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let q = fake.queries.lock().unwrap().first().cloned();
    assert_eq!(
        q.and_then(|q| q.decision).as_deref(),
        Some("deny"),
        "top asks the stream for denials"
    );
    for f in followers {
        f.blocking_send(Bytes::from(bytes.clone())).unwrap();
    }
    let s = tmux.wait_for("the denial", |s| {
        s.contains("CONNECT exfil.example:443  blocked-by-policy")
    });
    assert!(
        s.lines()
            .any(|l| l.starts_with("topbox") && l.contains("exfil.example")),
        "the denial names its sandbox:\n{s}"
    );
    tmux.wait_for("the denied count", |s| {
        s.lines()
            .any(|l| l.contains("topbox") && l.contains("     41 ") && l.contains("      1 "))
    });

    // Enter: the sandbox alone, the denial with how to allow it.
    tmux.cmd(&["send-keys", "-t", "top", "Enter"]);
    let s = tmux.wait_for("the detail", |s| s.contains("airlock top > topbox"));
    tmux.wait_for("how to allow it", |s| {
        s.contains("to allow: add \"exfil.example\" to [network] allow in the policy")
    });
    assert!(s.contains("policy      revision 7"), "{s}");

    // q quits with 0 and leaves the alternate screen.
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let start = Instant::now();
    while !rc.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "top did not quit on q:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "rc=0");
    let s = tmux.screen();
    assert!(
        !s.contains("airlock top"),
        "the screen is left as it was:\n{s}"
    );
}

#[test]
fn top_without_a_terminal_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["top"])
        .env("AIRLOCK_DATA_DIR", dir.path().join("data"))
        .env("AIRLOCK_CONFIG_DIR", dir.path().join("config"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("airlock top needs a terminal"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
