#![allow(clippy::unwrap_used, clippy::panic)]

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::echo::Human;
use super::sink::AWAKE_TICKS;
use super::*;

#[test]
fn event_strings_are_stable_and_distinct() {
    // These strings are an interface (the log's readers): this test pins them.
    let pinned = [
        "open",
        "close",
        "close-error",
        "close-idle",
        "close-shutdown",
        "client-gone",
        "secret-redacted",
        "leak-in-body",
        "resolve-failed",
        "dropped-overload",
        "parse-error",
        "header-timeout",
        "no-original-destination",
        "redirect-loop",
        "suppressed",
        "close-revoked",
        "close-budget",
        "llm-tokens-warning",
        "llm-tokens-spent",
        "approval-answered",
    ];
    let written: Vec<&str> = Event::ALL.iter().map(|e| e.as_str()).collect();
    assert_eq!(written, pinned);
}

fn who() -> Who {
    Who::new("s1", "demo", Some("c0ffee"))
}
use std::os::unix::fs::PermissionsExt;

fn rec(i: u64) -> Record {
    let mut r = Record::new(&who(), SystemTime::now(), Kind::Connect, None);
    r.bytes_up = i;
    r
}

/// The proxy's lines (its reason type included) are written byte for byte as serde
/// writes them, for every refusal code.
#[test]
fn the_line_writer_writes_every_reason_as_serde_does() {
    for reason in Reason::ALL {
        let mut r = rec(1);
        r.reason = Some(reason);
        let mut fast = Vec::new();
        r.write_json(&mut fast).unwrap();
        assert_eq!(fast, serde_json::to_vec(&r).unwrap(), "{reason:?}");
    }
}

/// A reload of the rules is one line of its own, in counts: taken effect (`allow`,
/// no error) or refused (`deny`, why); readers read it as a `Line::Reload`.
#[tokio::test]
async fn a_reload_is_audited_whether_it_took_effect_or_not() {
    let v = Volume::new(1 << 20);
    let (audit, writer) = on_volume(&v);
    let change = crate::audit::Change {
        needles: 3,
        files: 2,
        added: 1,
        dropped: 0,
    };
    audit.reload(&change, None).unwrap();
    let kept = crate::audit::Change { added: 0, ..change };
    audit
        .reload(&kept, Some("malformed hand-off".into()))
        .unwrap();
    // In an outage the line waits and follows the outage line; no request counted.
    v.set_cap(0);
    assert_eq!(audit.reload(&kept, None), Err(Unavailable));
    v.set_cap(1 << 20);
    audit.commit(&rec(9)).unwrap();
    writer.finish().await.unwrap_err(); // the outage's error, reported at the end
    let lines = v.lines();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(
        (&lines[2]["event"], &lines[2]["refused"]),
        (&"outage".into(), &0.into())
    );
    assert_eq!(
        (&lines[3]["event"], &lines[4]["bytes_up"]),
        (&"reload".into(), &9.into())
    );
    assert_eq!(v.verified().lines, 5);
    for (l, decision, added, error) in [
        (&lines[0], "allow", 1, serde_json::Value::Null),
        (&lines[1], "deny", 0, "malformed hand-off".into()),
    ] {
        assert_eq!(
            (&l["kind"], &l["event"], &l["decision"]),
            (&"audit".into(), &"reload".into(), &decision.into())
        );
        assert_eq!((&l["needles"], &l["added"]), (&3.into(), &added.into()));
        assert_eq!(l["error"], error);
        let read: airlock_audit_schema::Line = serde_json::from_value(l.clone()).unwrap();
        assert!(matches!(read, airlock_audit_schema::Line::Reload(_)), "{l}");
    }
}

/// The human echo's line, pinned: people read it in `docker logs` and grep it.
#[test]
fn the_human_line_says_decision_kind_target_reason_and_counts() {
    let mut r = rec(512);
    r.decision = Verdict::Deny;
    r.kind = Kind::Http;
    r.event = Some(Event::LeakInBody);
    r.method = Some("POST".into());
    r.host = Some("paste.example".into());
    r.port = Some(443);
    r.path = Some("/up".into());
    r.reason = Some(Reason::EncodedBlob);
    r.credential = Some("github".into());
    r.bytes_down = 7;
    r.duration_ms = 3;
    r.signals = vec![airlock_audit_schema::Signal::EncodedBlob {
        alphabet: airlock_audit_schema::Alphabet::Base64,
        run: 4096,
    }];
    assert_eq!(
        Human(&r).to_string(),
        "deny http/leak-in-body POST paste.example:443/up encoded-blob credential=github \
         up=512 down=7 3ms [signal encoded-blob: base64 run of 4096 bytes]"
    );
    let bare = rec(0);
    assert_eq!(
        Human(&bare).to_string(),
        "deny connect - -:0 - up=0 down=0 0ms"
    );
}

#[tokio::test]
async fn nothing_is_lost_from_many_producers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (audit, writer) = open(&path, who(), Bounds::default()).unwrap();
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let a = audit.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..250u64 {
                a.emit(rec(t * 1000 + i)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    writer.finish().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 2000);
    let mut seen: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["bytes_up"]
                .as_u64()
                .unwrap()
        })
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 2000, "every record exactly once");
}

#[tokio::test]
async fn file_is_private_and_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::fs::write(&path, "old\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (audit, writer) = open(&path, who(), Bounds::default()).unwrap();
    audit.emit(rec(1)).await;
    audit.flush().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("old\n"), "appends, never truncates");
    assert_eq!(text.lines().count(), 2);
    writer.finish().await.unwrap();

    let fresh = dir.path().join("new.jsonl");
    let (_a, w) = open(&fresh, who(), Bounds::default()).unwrap();
    w.finish().await.unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[tokio::test]
async fn symlinked_audit_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "").unwrap();
    let link = dir.path().join("audit.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        open(&link, who(), Bounds::default()),
        Err(AuditError::Open { .. })
    ));
}

/// A volume of `cap` bytes in memory: a write past it stores what fits and fails with
/// `ENOSPC`, as a full filesystem does.
#[derive(Clone)]
struct Volume {
    data: Arc<Mutex<Vec<u8>>>,
    cap: Arc<Mutex<usize>>,
}

impl Volume {
    fn new(cap: usize) -> Self {
        Self {
            data: Arc::default(),
            cap: Arc::new(Mutex::new(cap)),
        }
    }
    fn set_cap(&self, cap: usize) {
        *self.cap.lock().unwrap() = cap;
    }
    /// The volume's lines verify as one hash chain: every line sealed after the one it
    /// follows in the file, whatever order the writer sealed them in (an outage line put
    /// before lines that waited for it).
    fn verified(&self) -> airlock_audit_schema::chain::Intact {
        let data = self.data.lock().unwrap().clone();
        let names = ["audit.jsonl".to_owned()];
        airlock_audit_schema::chain::verify(&names, |_| Ok(io::Cursor::new(data.clone())))
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&data)))
    }
    fn lines(&self) -> Vec<serde_json::Value> {
        let data = self.data.lock().unwrap().clone();
        let text = String::from_utf8(data).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "a cut line: {text:?}"
        );
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }
}

impl LogFile for Volume {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let cap = *self.cap.lock().unwrap();
        let mut data = self.data.lock().unwrap();
        let room = cap.saturating_sub(data.len());
        if buf.len() > room {
            data.extend_from_slice(&buf[..room]);
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        data.extend_from_slice(buf);
        Ok(())
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.data
            .lock()
            .unwrap()
            .truncate(usize::try_from(len).unwrap());
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn rotate(&mut self) -> io::Result<()> {
        Err(io::Error::other("the fake volume does not rotate"))
    }
}

fn on_volume(v: &Volume) -> (Audit, AuditWriter) {
    on_volume_with(v, Bounds::default())
}

fn on_volume_with(v: &Volume, bounds: Bounds) -> (Audit, AuditWriter) {
    start(
        Path::new("/fake/audit.jsonl"),
        Box::new(v.clone()),
        0,
        who(),
        bounds,
    )
    .unwrap()
}

fn denial(i: u64, reason: Reason) -> Record {
    let mut r = rec(i);
    r.reason = Some(reason);
    r.host = Some(format!("h{i}.example"));
    r
}

/// The agent floods one destination: its first `first` lines are written as they come, the
/// rest are counted and reported in one `suppressed` line naming it; a denial of another
/// kind, or to another host, in the middle of the flood is still written at once.
#[tokio::test]
async fn a_flood_to_one_destination_is_folded_into_its_counted_line() {
    let v = Volume::new(1 << 20);
    let bounds = Bounds {
        first: 5,
        ..Bounds::default()
    };
    let (audit, writer) = on_volume_with(&v, bounds);
    for i in 0..100 {
        let mut d = denial(i, Reason::BlockedByPolicy);
        d.host = Some("flood.example".into());
        d.port = Some(443);
        audit.commit(&d).unwrap();
    }
    audit.commit(&denial(1000, Reason::CredentialLeak)).unwrap();
    audit
        .commit(&denial(1001, Reason::BlockedByPolicy))
        .unwrap();
    assert_eq!(v.lines().len(), 7, "five of the flood and the two others");
    writer.finish().await.unwrap();
    let lines = v.lines();
    let folded: Vec<_> = lines
        .iter()
        .filter(|l| l["event"] == "suppressed")
        .collect();
    assert_eq!(folded.len(), 1, "{lines:?}");
    let f = folded[0];
    assert_eq!(
        (&f["count"], &f["host"], &f["port"]),
        (&95.into(), &"flood.example".into(), &443.into())
    );
    assert_eq!(
        (&f["reason"], &f["kind"]),
        (&"blocked-by-policy".into(), &"connect".into())
    );
    assert_eq!(
        (&f["overflow"], &f["sandbox"]),
        (&false.into(), &"demo".into())
    );
    assert!(f["since"].as_str() <= f["until"].as_str(), "{f}");
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "credential-leak" && l["bytes_up"] == 1000)
    );
    assert!(lines.iter().any(|l| l["host"] == "h1001.example"));
}

/// Bytes of every file of the log in `dir` (stream, aging, archives).
fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        // A file renamed or deleted by the helper meanwhile counts where it went.
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// The log's files never take more than the cap: the stream's current file is rotated when
/// the next write would pass its part, only `keep` rotated files stay, what ages out is
/// sorted into the archives, which stay within theirs; nothing is left aging at the end.
#[tokio::test]
async fn rotation_keeps_the_log_within_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let bounds = Bounds {
        cap: 60_000,
        keep: 2,
        ..Bounds::default()
    };
    let (audit, writer) = open(&path, who(), bounds).unwrap();
    let mut last = 0;
    let mut most = 0;
    for i in 0..2000 {
        let mut r = rec(i);
        r.decision = Verdict::Allow;
        r.path = Some("/p".repeat(100));
        audit.commit_open(&mut r).unwrap();
        last = i;
        most = most.max(log_bytes(dir.path()));
    }
    writer.finish().await.unwrap();
    assert!(most <= bounds.cap + 600, "the log took {most} bytes");
    for (name, max) in [
        ("audit.jsonl", bounds.file_max()),
        ("audit.jsonl.1", bounds.file_max()),
        ("audit.jsonl.2", bounds.file_max()),
        ("audit.jsonl.allowed", bounds.allowed_share() / 3),
        ("audit.jsonl.allowed.2", bounds.allowed_share() / 3),
    ] {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(text.ends_with('\n'), "{name}");
        assert!(text.len() as u64 <= max + 600, "{name}: {}", text.len());
    }
    for gone in [
        "audit.jsonl.3",
        "audit.jsonl.aging",
        "audit.jsonl.allowed.4",
    ] {
        assert!(!dir.path().join(gone).exists(), "{gone}");
    }
    // The newest line is in the stream's newest files (a last `rotated` line may have
    // rotated the current file once more).
    let stream = [path.clone(), dir.path().join("audit.jsonl.1")]
        .iter()
        .rev()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<String>();
    let newest = stream
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["event"] == "open")
        .unwrap();
    assert_eq!(newest["bytes_up"], last);
}

/// The volume fills up: the line that does not fit is refused (the caller refuses its
/// request), no cut line stays in the file, every later request is refused while it is
/// full, and once there is room again the log first says how many were refused.
#[tokio::test]
async fn a_full_volume_refuses_every_request_and_the_recovery_is_recorded() {
    let v = Volume::new(10_000);
    let (audit, writer) = on_volume(&v);
    let mut served = 0;
    while audit.commit(&rec(served)).is_ok() {
        served += 1;
    }
    assert!(served > 5, "{served}");
    assert!(!audit.available());
    for i in 0..7 {
        let mut r = rec(1000 + i);
        assert_eq!(audit.commit_open(&mut r), Err(Unavailable));
    }
    assert_eq!(
        v.lines().len(),
        usize::try_from(served).unwrap(),
        "whole lines only"
    );
    v.set_cap(1 << 20);
    audit.commit(&rec(5000)).unwrap();
    assert!(audit.available());
    let lines = v.lines();
    let outage = &lines[usize::try_from(served).unwrap()];
    assert_eq!(outage["kind"], "audit", "{outage}");
    assert_eq!(outage["event"], "outage");
    assert_eq!(outage["reason"], "audit-unavailable");
    assert_eq!(
        outage["refused"], 8,
        "the first refusal and seven more: {outage}"
    );
    assert_eq!(outage["session"], "s1");
    assert_eq!(outage["sandbox"], "demo");
    assert_eq!(outage["container"], "c0ffee");
    assert!(
        outage["error"].as_str().unwrap().contains("No space"),
        "{outage}"
    );
    assert_eq!(lines.last().unwrap()["bytes_up"], 5000);
    assert_eq!(v.verified().lines, lines.len() as u64);
    writer.finish().await.unwrap_err();
}

/// Final lines wait for the next line written at once and go out with it, in order, in
/// one write; alone they go out after the linger.
#[tokio::test]
async fn final_lines_ride_with_the_next_commit_or_leave_after_the_linger() {
    let v = Volume::new(1 << 20);
    let (audit, writer) = on_volume(&v);
    audit.emit(rec(1)).await;
    audit.emit(rec(2)).await;
    audit.commit(&rec(3)).unwrap();
    let seen: Vec<_> = v.lines().iter().map(|l| l["bytes_up"].clone()).collect();
    assert_eq!(seen, [1, 2, 3]);
    assert_eq!(v.verified().lines, 3);
    audit.emit(rec(4)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while v.lines().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the lingering line never left"
        );
        tokio::time::sleep(LINGER).await;
    }
    writer.finish().await.unwrap();
}

/// A final line leaves on its own within a few lingers whether the helper thread is
/// awake (ticking) or has gone to sleep after a quiet spell (then the line wakes it),
/// and the helper is not woken per line while awake.
#[tokio::test]
async fn a_lone_final_line_leaves_whether_the_helper_is_awake_or_asleep() {
    let v = Volume::new(1 << 20);
    let (audit, writer) = on_volume(&v);
    // Three times the ticks it takes to fall asleep: a loaded machine oversleeps ticks.
    let quiet = LINGER * AWAKE_TICKS * 3;
    for (i, pause) in [(1, LINGER), (2, quiet), (3, quiet)] {
        tokio::time::sleep(pause).await;
        let asleep = audit.sink.lock().asleep;
        assert_eq!(asleep, pause >= quiet, "after {pause:?}");
        audit.emit(rec(i)).await;
        let deadline = std::time::Instant::now() + LINGER * 50;
        while v.lines().len() < usize::try_from(i).unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "line {i} never left (pause {pause:?})"
            );
            tokio::time::sleep(LINGER / 2).await;
        }
    }
    writer.finish().await.unwrap();
}

/// Final lines that cannot be written while the volume is full wait (bounded), and are
/// written after the outage line once there is room.
#[tokio::test]
async fn final_lines_queued_in_an_outage_are_written_after_it() {
    let v = Volume::new(0);
    let (audit, writer) = on_volume(&v);
    audit.emit(rec(1)).await;
    assert_eq!(audit.commit(&rec(2)), Err(Unavailable));
    v.set_cap(1 << 20);
    audit.commit(&rec(3)).unwrap();
    let lines = v.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["event"], "outage");
    assert_eq!(lines[0]["refused"], 1);
    assert_eq!(lines[1]["bytes_up"], 1);
    assert_eq!(lines[2]["bytes_up"], 3);
    assert_eq!(v.verified().lines, 3);
    writer.finish().await.unwrap_err();
}

#[test]
fn the_open_line_is_the_record_with_event_open() {
    let v = Volume::new(1 << 20);
    let (audit, _writer) = on_volume(&v);
    let mut r = rec(9);
    r.event = Some(Event::Close);
    audit.commit_open(&mut r).unwrap();
    assert_eq!(r.event, Some(Event::Close), "the record is left as it was");
    let lines = v.lines();
    assert_eq!(lines[0]["event"], "open");
    assert_eq!(lines[0]["bytes_up"], 9);
}

#[test]
fn schema_has_every_field() {
    let r = rec(7);
    let v = serde_json::to_value(&r).unwrap();
    for f in [
        "ts",
        "session",
        "sandbox",
        "container",
        "uid",
        "client",
        "kind",
        "event",
        "method",
        "host",
        "port",
        "path",
        "decision",
        "rule",
        "reason",
        "upstream",
        "upstream_local_port",
        "intercepted",
        "credential",
        "status",
        "bytes_up",
        "bytes_down",
        "duration_ms",
        "signals",
    ] {
        assert!(v.get(f).is_some(), "missing {f}");
    }
    assert_eq!(v["kind"], "connect");
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["uid"], serde_json::Value::Null);
}
