//! The agent tries to erase the record of where it went: by folding (many destinations
//! behind one count), and by volume (a flood that rotates its early attempts and the
//! allowed traffic out of the log). Real files in a temporary directory.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use super::*;

fn who() -> Who {
    Who::new("s1", "demo", Some("c0ffee"))
}

/// Every line of every file of the log in `dir`.
fn every_line(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{}",
            path.display()
        );
        for l in text.lines() {
            out.push(serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")));
        }
    }
    out
}

fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        // A file renamed or deleted by the helper meanwhile counts where it went.
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn denial(host: &str, port: u16) -> Record {
    let mut r = Record::new(&who(), SystemTime::now(), Kind::Connect, None);
    r.reason = Some(Reason::BlockedByPolicy);
    r.method = Some("CONNECT".into());
    r.host = Some(host.into());
    r.port = Some(port);
    r
}

/// An allowed request, audited as the proxy does: its open line before it goes upstream,
/// its final line after.
async fn allowed(audit: &Audit, path: &str) {
    let mut r = Record::new(&who(), SystemTime::now(), Kind::Http, None);
    r.decision = Verdict::Allow;
    r.method = Some("GET".into());
    r.host = Some("api.example".into());
    r.port = Some(443);
    r.path = Some(path.into());
    audit.commit_open(&mut r).unwrap();
    r.status = Some(200);
    audit.emit(r).await;
}

/// Denials to `host` (port 443) the log accounts for: lines written whole, the counts of
/// the `suppressed` lines still there, and what the newest `rotated` line says its session
/// dropped of both.
fn accounted(lines: &[Value], host: &str) -> u64 {
    let whole = lines
        .iter()
        .filter(|l| l["decision"] == "deny" && l["event"].is_null() && l["host"] == host)
        .count() as u64;
    let folded: u64 = lines
        .iter()
        .filter(|l| l["event"] == "suppressed" && l["host"] == host && l["overflow"] == false)
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    let dropped = newest_rotated(lines).map_or(0, |r| {
        r["total"]["dropped"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let suppressed = e["event"] == "suppressed";
                e["hosts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|h| h["host"] == host)
                    .map(|h| {
                        if suppressed {
                            h["folded"].as_u64().unwrap()
                        } else {
                            h["lines"].as_u64().unwrap()
                        }
                    })
                    .sum::<u64>()
            })
            .sum()
    });
    whole + folded + dropped
}

/// The session's newest `rotated` line (its total only grows).
fn newest_rotated(lines: &[Value]) -> Option<&Value> {
    lines
        .iter()
        .filter(|l| l["event"] == "rotated" && l["session"] == "s1")
        .max_by_key(|l| l["total"]["lines"].as_u64().unwrap())
}

/// 95 denials to 95 hosts were one line naming `h99.example`: now every host is in the
/// log, and every denial to it is counted.
#[tokio::test]
async fn attack_ninety_five_denials_to_ninety_five_hosts_are_all_recoverable() {
    let dir = tempfile::tempdir().unwrap();
    let (audit, writer) = open(&dir.path().join("audit.jsonl"), who(), Bounds::default()).unwrap();
    for round in 0..20 {
        for i in 0..95 {
            audit
                .commit(&denial(&format!("h{i}.example"), 443))
                .unwrap();
        }
        if round == 9 {
            audit.sink.flush_folds();
        }
    }
    writer.finish().await.unwrap();
    let lines = every_line(dir.path());
    for i in 0..95 {
        let h = format!("h{i}.example");
        assert_eq!(accounted(&lines, &h), 20, "{h}");
    }
}

/// A flood of a million denials to one host, with a few honest allowed requests and a few
/// distinct denials before it (and an allowed request now and then in it), under a cap the
/// flood passes many times over: the early denials and every allowed line are still in the
/// log, the flood's lines that were dropped are said by a `rotated` line, and every one of
/// the million denials is accounted for (a line, a count, or a dropped count).
#[tokio::test]
async fn attack_a_flood_of_a_million_denials_cannot_erase_the_early_record() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        cap: 256 * 1024,
        keep: 2,
        ..Bounds::default()
    };
    let (audit, writer) = open(&dir.path().join("audit.jsonl"), who(), bounds).unwrap();
    for i in 0..3 {
        allowed(&audit, &format!("/honest-{i}")).await;
    }
    for i in 0..5 {
        audit
            .commit(&denial(&format!("early{i}.example"), 443))
            .unwrap();
    }
    let mut most = 0;
    for i in 0..1_000_000u64 {
        audit.commit(&denial("flood.example", 443)).unwrap();
        // A second's report, a thousand times faster than the clock.
        if i % 1000 == 999 {
            audit.sink.flush_folds();
            audit.flush().await;
            most = most.max(log_bytes(dir.path()));
        }
        if i % 100_000 == 50_000 {
            allowed(&audit, &format!("/during-{i}")).await;
        }
    }
    writer.finish().await.unwrap();
    assert!(most <= bounds.cap + 4096, "the log took {most} bytes");
    let lines = every_line(dir.path());
    let paths: HashSet<&str> = lines
        .iter()
        .filter(|l| l["decision"] == "allow")
        .filter_map(|l| l["path"].as_str())
        .collect();
    for p in (0..3).map(|i| format!("/honest-{i}")) {
        assert!(paths.contains(p.as_str()), "{p} was rotated away");
    }
    assert_eq!(paths.len(), 3 + 10, "{paths:?}");
    for i in 0..5 {
        let h = format!("early{i}.example");
        assert!(
            lines
                .iter()
                .any(|l| l["host"] == h.as_str() && l["decision"] == "deny"),
            "{h} was rotated away"
        );
    }
    let rotated = newest_rotated(&lines).expect("the flood rotated: a rotated line says so");
    assert!(
        rotated["total"]["lines"].as_u64().unwrap() > 100,
        "{rotated}"
    );
    assert!(rotated["total"]["since"].is_string(), "{rotated}");
    assert_eq!(accounted(&lines, "flood.example"), 1_000_000);
}

/// The table of destinations is bounded: a million distinct hosts keep it within its size;
/// the ones past it are counted on overflow lines that name their first and last host, and
/// every denial is a line or a count.
#[tokio::test]
async fn attack_the_destination_table_is_bounded_and_its_overflow_counted() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        destinations: 8,
        ..Bounds::default()
    };
    let (audit, writer) = open(&dir.path().join("audit.jsonl"), who(), bounds).unwrap();
    for i in 0..100 {
        audit
            .commit(&denial(&format!("h{i}.example"), 443))
            .unwrap();
        assert!(
            audit.sink.lock().folds.len() <= 8,
            "the table outgrew its bound"
        );
    }
    audit.sink.flush_folds();
    audit.flush().await;
    let lines = every_line(dir.path());
    let whole: Vec<_> = lines
        .iter()
        .filter(|l| l["decision"] == "deny" && l["event"].is_null())
        .collect();
    assert_eq!(whole.len(), 8);
    let over: Vec<_> = lines.iter().filter(|l| l["overflow"] == true).collect();
    assert_eq!(over.len(), 1, "{lines:?}");
    assert_eq!(over[0]["count"], 92);
    assert_eq!(over[0]["first_host"], "h8.example");
    assert_eq!(over[0]["host"], "h99.example");
    for i in 0..1_000_000u64 {
        audit
            .commit(&denial(&format!("x{i}.example"), 443))
            .unwrap();
        if i % 100_000 == 0 {
            assert!(audit.sink.lock().folds.len() <= 8);
            audit.sink.flush_folds();
        }
    }
    writer.finish().await.unwrap();
    let lines = every_line(dir.path());
    let whole = lines
        .iter()
        .filter(|l| l["decision"] == "deny" && l["event"].is_null())
        .count() as u64;
    let counted: u64 = lines
        .iter()
        .filter(|l| l["event"] == "suppressed")
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert_eq!(whole + counted, 1_000_100);
}

/// A flood of allowed requests far past the cap cannot push out the first attempt on a
/// destination: allowed lines only push out older allowed lines, and the log says how many.
#[tokio::test]
async fn attack_an_allowed_flood_cannot_push_out_the_first_denials() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        cap: 128 * 1024,
        keep: 2,
        ..Bounds::default()
    };
    let (audit, writer) = open(&dir.path().join("audit.jsonl"), who(), bounds).unwrap();
    for i in 0..5 {
        audit
            .commit(&denial(&format!("early{i}.example"), 443))
            .unwrap();
    }
    for i in 0..5000 {
        allowed(&audit, &format!("/bulk-{i}")).await;
    }
    writer.finish().await.unwrap();
    assert!(log_bytes(dir.path()) <= bounds.cap + 4096);
    let lines = every_line(dir.path());
    for i in 0..5 {
        let h = format!("early{i}.example");
        assert!(
            lines.iter().any(|l| l["host"] == h.as_str()),
            "{h} was pushed out"
        );
    }
    let paths: HashSet<&str> = lines.iter().filter_map(|l| l["path"].as_str()).collect();
    assert!(
        paths.contains("/bulk-4999"),
        "the newest allowed line is there"
    );
    assert!(
        !paths.contains("/bulk-0"),
        "the oldest allowed lines were dropped"
    );
    let r = newest_rotated(&lines).unwrap();
    // Allowed lines the stream moved are counted unread when the archive drops them.
    let allowed_dropped: u64 = r["total"]["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["decision"] == "allow" || e["kind"] == "*")
        .map(|e| e["lines"].as_u64().unwrap())
        .sum();
    let present = lines.iter().filter(|l| l["decision"] == "allow").count() as u64;
    assert_eq!(
        present + allowed_dropped,
        2 * 5000,
        "every allowed line: there or counted"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "rotated" && l["part"] == "allowed"),
        "the allowed archive's drop is said"
    );
}

/// A flood of denials to ever new destinations (each a first line) far past the cap cannot
/// push out the allowed lines: first lines only push out older first lines.
#[tokio::test]
async fn attack_a_flood_of_new_destinations_cannot_push_out_allowed_lines() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        cap: 128 * 1024,
        keep: 2,
        ..Bounds::default()
    };
    let (audit, writer) = open(&dir.path().join("audit.jsonl"), who(), bounds).unwrap();
    for i in 0..5 {
        allowed(&audit, &format!("/honest-{i}")).await;
    }
    for i in 0..5000 {
        audit
            .commit(&denial(&format!("new{i}.example"), 443))
            .unwrap();
        if i % 500 == 499 {
            audit.sink.flush_folds(); // new destinations leave the table, as the clock would
        }
    }
    writer.finish().await.unwrap();
    assert!(log_bytes(dir.path()) <= bounds.cap + 4096);
    let lines = every_line(dir.path());
    for i in 0..5 {
        let p = format!("/honest-{i}");
        assert_eq!(
            lines.iter().filter(|l| l["path"] == p.as_str()).count(),
            2,
            "{p}: its open and final lines"
        );
    }
    assert!(lines.iter().any(|l| l["host"] == "new4999.example"));
    let r = newest_rotated(&lines).unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "rotated" && l["part"] == "first"),
        "the first archive's drop is said: {r}"
    );
}

/// A sort cut short by a crash (the file left aging) is done by the next start: lines
/// written before are sorted like any other (read from the lines, not remembered).
#[tokio::test]
async fn a_file_left_aging_is_sorted_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut text = Vec::new();
    let mut a = Record::new(
        &Who::new("s0", "demo", None),
        SystemTime::now(),
        Kind::Http,
        None,
    );
    a.decision = Verdict::Allow;
    a.path = Some("/before".into());
    a.write_json(&mut text).unwrap();
    text.push(b'\n');
    for _ in 0..3 {
        denial("old.example", 443).write_json(&mut text).unwrap();
        text.push(b'\n');
    }
    std::fs::write(files::with_suffix(&path, "aging"), &text).unwrap();
    let (_audit, writer) = open(&path, who(), Bounds::default()).unwrap();
    writer.finish().await.unwrap();
    assert!(!files::with_suffix(&path, "aging").exists());
    let allowed = std::fs::read_to_string(files::with_suffix(&path, "allowed")).unwrap();
    assert!(allowed.contains("/before"), "{allowed}");
    let first = std::fs::read_to_string(files::with_suffix(&path, "first")).unwrap();
    assert_eq!(first.lines().count(), 1, "{first}");
    let lines = every_line(dir.path());
    let r = newest_rotated(&lines).unwrap();
    assert_eq!(
        (r["part"].as_str(), r["lines"].as_u64()),
        (Some("stream"), Some(2))
    );
    assert_eq!(accounted(&lines, "old.example"), 3);
}

/// The allowed archive's files are counted unread when deleted: every line, its bytes, and
/// the times of the first and last line.
#[tokio::test]
async fn a_deleted_allowed_file_is_counted_without_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let mut text = Vec::new();
    let mut times = Vec::new();
    for i in 0..5000u64 {
        let mut r = Record::new(&who(), SystemTime::now(), Kind::Http, None);
        r.ts = airlock_audit_schema::Timestamp(1_800_000_000_000 + i);
        r.decision = Verdict::Allow;
        r.path = Some("/x".repeat(usize::try_from(i % 50).unwrap()));
        r.write_json(&mut text).unwrap();
        text.push(b'\n');
        times.push(r.ts);
    }
    std::fs::write(&path, &text).unwrap();
    let t = files::count_lines(&path).unwrap();
    assert_eq!((t.lines, t.bytes), (5000, text.len() as u64));
    assert_eq!(
        (t.since, t.until),
        (times.first().copied(), times.last().copied())
    );
}

/// The archives hold only their class, whatever mix the stream held (allowed lines copied
/// unread on the writer's word, the rest read): no denial hides among the allowed lines, no
/// allowed line among the first ones, and nothing is in two places.
#[tokio::test]
async fn each_archive_holds_only_its_class() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        cap: 96 * 1024,
        keep: 1,
        ..Bounds::default()
    };
    let (audit, writer) = open(&dir.path().join("audit.jsonl"), who(), bounds).unwrap();
    let change = crate::audit::Change {
        needles: 1,
        files: 1,
        added: 0,
        dropped: 0,
    };
    for i in 0..3000u64 {
        match i % 7 {
            0..=2 => allowed(&audit, &format!("/mixed-{i}")).await,
            3 => audit
                .commit(&denial(&format!("d{}.example", i % 40), 443))
                .unwrap(),
            4 => {
                let mut r = Record::new(&who(), SystemTime::now(), Kind::Http, None);
                r.decision = Verdict::Abandoned;
                r.path = Some(format!("/gone-{i}"));
                audit.emit(r).await;
            }
            5 if i % 70 == 5 => audit.reload(&change, None).unwrap(),
            _ => audit.sink.flush_folds(),
        }
    }
    writer.finish().await.unwrap();
    let read = |name: &str| -> Vec<Value> {
        let mut out = Vec::new();
        for n in ["", ".1", ".2"] {
            let p = dir.path().join(format!("audit.jsonl.{name}{n}"));
            if let Ok(text) = std::fs::read_to_string(p) {
                out.extend(
                    text.lines()
                        .map(|l| serde_json::from_str::<Value>(l).unwrap()),
                );
            }
        }
        out
    };
    let allowed_lines = read("allowed");
    let first_lines = read("first");
    assert!(!allowed_lines.is_empty() && !first_lines.is_empty());
    for l in &allowed_lines {
        assert!(
            ["allow", "report", "abandoned"].contains(&l["decision"].as_str().unwrap_or("")),
            "not an allowed line in the allowed archive: {l}"
        );
    }
    for l in &first_lines {
        // The log's own lines (a reload says `allow`) are first lines.
        assert!(
            l["kind"] == "audit"
                || !["allow", "report", "abandoned"]
                    .contains(&l["decision"].as_str().unwrap_or("")),
            "an allowed line in the first archive: {l}"
        );
    }
    assert!(first_lines.iter().any(|l| l["event"] == "reload"));
    let all = every_line(dir.path());
    let mut paths = HashSet::new();
    for l in all
        .iter()
        .filter(|l| l["event"].is_null() && l["path"].is_string())
    {
        assert!(paths.insert(l["path"].as_str().unwrap()), "twice: {l}");
    }
}
