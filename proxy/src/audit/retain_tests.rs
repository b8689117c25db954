#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::time::SystemTime;

use airlock_audit_schema::{Kind, Record, Suppressed};
use airlock_policy::reason::Reason;

use super::*;

fn who() -> Who {
    Who::new("s1", "demo", None)
}

fn line(r: &Record<Reason>) -> Vec<u8> {
    let mut out = Vec::new();
    r.write_json(&mut out).unwrap();
    out
}

fn record(decision: Verdict, host: &str, port: u16) -> Record<Reason> {
    let mut r = Record::new(&who(), SystemTime::now(), Kind::Connect, None);
    r.decision = decision;
    r.host = Some(host.into());
    r.port = Some(port);
    if decision == Verdict::Deny {
        r.reason = Some(Reason::BlockedByPolicy);
    }
    r
}

fn suppressed(host: &str, count: u64, overflow: bool) -> Vec<u8> {
    let s = Suppressed {
        ts: Timestamp(1000),
        session: Arc::from("s1"),
        sandbox: Arc::from("demo"),
        container: None,
        kind: Kind::Connect,
        event: airlock_audit_schema::Event::Suppressed,
        decision: Verdict::Deny,
        reason: Reason::BlockedByPolicy,
        since: Timestamp(900),
        count,
        host: Some(host.into()),
        port: Some(443),
        until: Some(Timestamp(990)),
        overflow,
        first_host: overflow.then(|| "first.example".into()),
        chain: None,
    };
    serde_json::to_vec(&s).unwrap()
}

fn class(bytes: &[u8], seen: &mut Seen, session: &str) -> Class {
    classify(Peek::read(bytes).as_ref(), seen, session)
}

/// Each line is sorted by what it says: what was let through is allowed; the first denial
/// to each destination, overflow counts and the log's own lines are first; further denials
/// to a destination and its counts are flood.
#[test]
fn lines_are_sorted_by_what_they_record() {
    let mut seen = Seen::new(16);
    for d in [Verdict::Allow, Verdict::Report, Verdict::Abandoned] {
        assert_eq!(
            class(&line(&record(d, "a.example", 443)), &mut seen, "s1"),
            Class::Allowed
        );
    }
    let deny = line(&record(Verdict::Deny, "d.example", 443));
    assert_eq!(class(&deny, &mut seen, "s1"), Class::First);
    assert_eq!(
        class(&deny, &mut seen, "s1"),
        Class::Flood,
        "a second line to it"
    );
    let other_port = line(&record(Verdict::Deny, "d.example", 22));
    assert_eq!(class(&other_port, &mut seen, "s1"), Class::First);
    assert_eq!(
        class(&suppressed("d.example", 5, false), &mut seen, "s1"),
        Class::Flood
    );
    assert_eq!(
        class(&suppressed("x.example", 5, true), &mut seen, "s1"),
        Class::First
    );
    let outage = br#"{"ts":"2026-11-25T10:48:00.000Z","session":"s1","sandbox":"demo","container":null,"kind":"audit","event":"outage","decision":"deny","reason":"audit-unavailable","since":"2026-11-25T10:47:30.250Z","error":"x","refused":8,"lost":0}"#;
    assert_eq!(class(outage, &mut seen, "s1"), Class::First);
    let note =
        br#"{"ts":"2026-11-25T10:48:00.000Z","session":"s1","kind":"audit","event":"rotated"}"#;
    assert_eq!(
        class(note, &mut seen, "s1"),
        Class::Flood,
        "superseded by the next"
    );
    assert_eq!(
        class(note, &mut seen, "s2"),
        Class::First,
        "an earlier session's"
    );
    assert_eq!(
        class(b"old", &mut seen, "s1"),
        Class::First,
        "unreadable: kept"
    );
}

/// The destinations a sort remembers are bounded; past the bound a new destination is kept
/// (the memory is bounded, not the record).
#[test]
fn past_its_bound_seen_keeps_rather_than_drops() {
    let mut seen = Seen::new(2);
    for i in 0..10 {
        let l = line(&record(Verdict::Deny, &format!("h{i}.example"), 443));
        assert_eq!(class(&l, &mut seen, "s1"), Class::First, "{i}");
    }
    let l = line(&record(Verdict::Deny, "h0.example", 443));
    assert_eq!(class(&l, &mut seen, "s1"), Class::Flood, "remembered");
}

/// The account: lines, bytes, folded denials per destination, the first destinations
/// named and the rest counted, merged without loss.
#[test]
fn the_account_counts_every_line_and_denial() {
    let mut t = Tally::default();
    for i in 0..20 {
        let s = suppressed(&format!("h{i}.example"), 10, false);
        t.add(s.len() + 1, Peek::read(&s).as_ref());
    }
    let d = line(&record(Verdict::Deny, "h0.example", 443));
    t.add(d.len() + 1, Peek::read(&d).as_ref());
    t.add(4, None);
    assert_eq!(t.lines, 22);
    assert_eq!(t.unlisted, 1);
    assert_eq!(t.entries.len(), 2);
    let s = t
        .entries
        .iter()
        .find(|e| e.event.as_deref() == Some("suppressed"))
        .unwrap();
    assert_eq!((s.lines, s.folded), (20, 200));
    assert_eq!(s.hosts.len(), DROPPED_HOSTS);
    assert_eq!((s.other_lines, s.other_folded), (4, 40));
    assert_eq!(
        (s.since, s.until),
        (Some(Timestamp(1000)), Some(Timestamp(1000)))
    );
    let mut total = Tally::default();
    total.merge(&t);
    total.merge(&t);
    assert_eq!(
        (total.lines, total.bytes, total.unlisted),
        (44, t.bytes * 2, 2)
    );
    let s = total
        .entries
        .iter()
        .find(|e| e.event.as_deref() == Some("suppressed"))
        .unwrap();
    assert_eq!((s.folded, s.other_folded), (400, 80));
    let n = rotated(&who(), Part::Stream, &t, 1, 2, &total, None);
    assert_eq!(
        (n.lines, n.total.lines, n.to_allowed, n.to_first),
        (22, 44, 1, 2)
    );
    let text = serde_json::to_string(&n).unwrap();
    let back: airlock_audit_schema::Line = serde_json::from_str(&text).unwrap();
    assert!(
        matches!(back, airlock_audit_schema::Line::Rotated(_)),
        "{text}"
    );
}

/// Entries are bounded too: lines past them are counted, never lost from the total.
#[test]
fn entries_past_their_bound_are_unlisted() {
    let mut t = Tally::default();
    for i in 0..(DROPPED_ENTRIES + 10) {
        let l = format!(r#"{{"kind":"connect","decision":"deny","reason":"r{i}"}}"#);
        t.add(l.len(), Peek::read(l.as_bytes()).as_ref());
    }
    assert_eq!(t.entries.len(), DROPPED_ENTRIES);
    assert_eq!(t.unlisted, 10);
    assert_eq!(t.lines, DROPPED_ENTRIES as u64 + 10);
}

/// The fast reader reads every line the proxy writes as serde_json does, or declines (and
/// serde_json reads it): records with every field set, escapes in what the agent chose,
/// every line of the log's own, nested values.
#[test]
fn the_fast_reader_reads_as_serde_does_or_declines() {
    let mut full = record(Verdict::Deny, "h.example", 443);
    full.uid = Some(1000);
    full.client = Some("127.0.0.1:5000".parse().unwrap());
    full.method = Some("POST".into());
    full.path = Some("/a,\"kind\":\"audit\",\"x".into());
    full.rule = Some("r".into());
    full.signals = vec![airlock_audit_schema::Signal::HighEntropy {
        centibits: 793,
        bytes: 9,
    }];
    let mut escaped = record(Verdict::Deny, "h\"x.example", 443);
    escaped.event = Some(airlock_audit_schema::Event::LeakInBody);
    let mut plain = record(Verdict::Allow, "a.example", 80);
    plain.event = Some(airlock_audit_schema::Event::Open);
    let mut slashed = record(Verdict::Allow, "a.example", 80);
    slashed.path = Some("/ends\\in\\".into());
    let mut hostless = record(Verdict::Deny, "x", 1);
    hostless.host = None;
    hostless.port = None;
    let mut total = Tally::default();
    let sup = suppressed("h.example", 3, false);
    total.add(sup.len(), Peek::read(&sup).as_ref());
    let note =
        serde_json::to_vec(&rotated(&who(), Part::Allowed, &total, 0, 0, &total, None)).unwrap();
    let lines: Vec<(Vec<u8>, bool)> = vec![
        (line(&full), true),
        (line(&plain), true),
        (line(&hostless), true),
        (line(&slashed), true),
        (line(&escaped), false),
        (sup, true),
        (suppressed("o.example", 7, true), true),
        (note, true),
        (br#"{"ts":"2026-11-25T10:49:00.000Z","session":"s1","sandbox":"demo","container":"c0ffee","kind":"audit","event":"reload","decision":"allow","needles":3,"files":2,"added":1,"dropped":0,"error":null}"#.to_vec(), true),
        (br#"{"ts":"2026-11-25T10:48:00.000Z","session":"s1","kind":"audit","event":"outage","refused":-8,"x":1.5e3,"y":[true,{"a":[null]}]}"#.to_vec(), true),
        (br#"{ "kind": "connect" }"#.to_vec(), false),
        (br#"{"kind":"connect","port":70000}"#.to_vec(), false),
    ];
    for (l, fast) in &lines {
        let text = String::from_utf8_lossy(l);
        let by_serde: Option<Peek<'_>> = serde_json::from_slice(l).ok();
        match flat(l) {
            Some(p) => {
                assert!(fast, "read fast: {text}");
                assert_eq!(Some(p), by_serde, "{text}");
            }
            None => assert!(!fast, "declined: {text}"),
        }
        assert_eq!(Peek::read(l), by_serde, "{text}");
    }
    let full = line(&full);
    let p = flat(&full).unwrap();
    assert_eq!(
        (p.kind.as_deref(), p.host.as_deref(), p.port),
        (Some("connect"), Some("h.example"), Some(443))
    );
    assert_eq!(
        (p.decision, p.reason.as_deref()),
        (Some(Verdict::Deny), Some("blocked-by-policy"))
    );
    for bad in [
        &b""[..],
        b"{",
        b"{\"a\"",
        b"{\"a\":",
        b"{\"a\":\"x",
        b"{\"a\":[",
        b"{\"a\":1}x",
        b"[]",
    ] {
        assert_eq!(flat(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

/// Lines counted unread go to the `*` entry: counted, their span kept, nothing named.
#[test]
fn unread_lines_are_counted_in_their_own_entry() {
    let mut t = Tally::default();
    t.add_unread(10, 4000, Some(Timestamp(5)), Some(Timestamp(9)));
    t.add_unread(2, 800, Some(Timestamp(1)), None);
    assert_eq!(
        (t.lines, t.bytes, t.since, t.until),
        (12, 4800, Some(Timestamp(1)), Some(Timestamp(9)))
    );
    let e = &t.entries[0];
    assert_eq!(
        (e.kind.as_str(), e.lines, e.other_lines, e.hosts.len()),
        ("*", 12, 12, 0)
    );
}
