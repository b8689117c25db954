#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;

fn ts(ms: u64) -> Timestamp {
    Timestamp(1_800_000_000_000 + ms)
}

fn host(i: u64) -> String {
    format!("h{i}.example")
}

fn deny(f: &mut Folds, h: &str, port: u16, at: u64) -> bool {
    f.admit(
        Kind::Connect,
        Reason::BlockedByPolicy,
        Some(h),
        Some(port),
        ts(at),
    )
}

fn report(f: &mut Folds) -> Vec<Summary> {
    let mut out = Vec::new();
    f.report(&mut out);
    out
}

/// Each destination's first lines are whole, the rest counted for it alone: a flood to one
/// host does not hide a denial to another, and the report says how many went where and when.
#[test]
fn each_destination_has_its_first_lines_then_its_own_count() {
    let mut f = Folds::new(3, 64);
    let mut whole = Vec::new();
    for i in 0..1000 {
        if deny(&mut f, "flood.example", 443, i) {
            whole.push(i);
        }
        if i == 500 {
            assert!(
                deny(&mut f, "quiet.example", 443, i),
                "another host is written"
            );
        }
    }
    assert_eq!(whole, [0, 1, 2]);
    let r = report(&mut f);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (r[0].host.as_deref(), r[0].port, r[0].count),
        (Some("flood.example"), Some(443), 997)
    );
    assert_eq!((r[0].since, r[0].until), (ts(3), ts(999)));
    assert!(!r[0].overflow);
    // Counts start again after a report; the destination stays (it was busy).
    deny(&mut f, "flood.example", 443, 2000);
    let r = report(&mut f);
    assert_eq!((r[0].count, r[0].since), (1, ts(2000)));
}

/// The attack that hid 30 of 95 hosts behind one line naming the last: every one of 95
/// destinations denied many times is named, with its own count.
#[test]
fn ninety_five_destinations_are_ninety_five_records() {
    let mut f = Folds::new(2, 1024);
    let mut whole = std::collections::HashMap::<String, u64>::new();
    for round in 0..10 {
        for i in 0..95 {
            if deny(&mut f, &host(i), 443, round * 100 + i) {
                *whole.entry(host(i)).or_default() += 1;
            }
        }
    }
    assert_eq!(whole.len(), 95);
    assert!(whole.values().all(|n| *n == 2));
    let r = report(&mut f);
    assert_eq!(r.len(), 95);
    for s in &r {
        assert_eq!(s.count, 8, "{s:?}");
    }
    let named: std::collections::HashSet<_> = r.iter().filter_map(|s| s.host.clone()).collect();
    assert_eq!(named.len(), 95);
}

/// The table holds at most its capacity: destinations past it are counted in their kind's
/// overflow, which names the first and the last; nothing is lost from the count.
#[test]
fn the_table_is_bounded_and_its_overflow_counted() {
    let mut f = Folds::new(1, 8);
    let mut whole = 0;
    for i in 0..100 {
        if deny(&mut f, &host(i), 443, i) {
            whole += 1;
        }
        assert!(f.len() <= 8, "the table outgrew its bound");
    }
    assert_eq!(whole, 8);
    // A destination already in the table is still folded as its own.
    assert!(!deny(&mut f, &host(3), 443, 200));
    let r = report(&mut f);
    let over: Vec<_> = r.iter().filter(|s| s.overflow).collect();
    assert_eq!(over.len(), 1, "{r:?}");
    assert_eq!(over[0].count, 92);
    assert_eq!(over[0].first_host.as_deref(), Some("h8.example"));
    assert_eq!(over[0].host.as_deref(), Some("h99.example"));
    assert_eq!((over[0].since, over[0].until), (ts(8), ts(99)));
    let own: Vec<_> = r.iter().filter(|s| !s.overflow).collect();
    assert_eq!(own.len(), 1);
    assert_eq!(
        (own[0].host.as_deref(), own[0].count),
        (Some("h3.example"), 1)
    );
    // 8 whole + 92 overflow + 1 folded: every denial is accounted for.
    assert_eq!(whole + over[0].count + own[0].count, 101);
}

/// A million distinct hosts: the table never grows past its bound (memory), each report
/// names the first and last of the overflow, and the counts add up to every denial.
#[test]
fn a_million_distinct_hosts_stay_within_the_bound() {
    let mut f = Folds::new(2, 1024);
    let (mut whole, mut counted) = (0u64, 0u64);
    for i in 0..1_000_000u64 {
        if deny(&mut f, &host(i), 443, i) {
            whole += 1;
        }
        if i % 100_000 == 99_999 {
            assert!(f.len() <= 1024);
            counted += report(&mut f).iter().map(|s| s.count).sum::<u64>();
        }
    }
    counted += report(&mut f).iter().map(|s| s.count).sum::<u64>();
    assert_eq!(whole + counted, 1_000_000);
}

/// A destination that saw nothing since the last report leaves the table: its next denial
/// is written whole again, and the room it left takes a new destination.
#[test]
fn idle_destinations_leave_the_table() {
    let mut f = Folds::new(1, 2);
    assert!(deny(&mut f, "a.example", 443, 0));
    assert!(deny(&mut f, "b.example", 443, 1));
    assert!(!deny(&mut f, "c.example", 443, 2), "full: overflow");
    report(&mut f); // both were hit: they stay
    assert_eq!(f.len(), 2);
    assert!(!deny(&mut f, "a.example", 443, 3));
    report(&mut f); // b idle: it leaves
    assert_eq!(f.len(), 1);
    assert!(
        deny(&mut f, "c.example", 443, 4),
        "room for a new destination"
    );
    report(&mut f);
    report(&mut f);
    assert!(f.is_empty());
    assert!(deny(&mut f, "a.example", 443, 5), "written whole again");
}

/// The port is part of the destination, a missing host is one destination of its own, and
/// kinds (listener, reason) never share a count.
#[test]
fn ports_hosts_and_kinds_are_distinct_destinations() {
    let mut f = Folds::new(1, 64);
    assert!(deny(&mut f, "h.example", 443, 0));
    assert!(deny(&mut f, "h.example", 22, 0));
    assert!(!deny(&mut f, "h.example", 22, 1));
    assert!(f.admit(Kind::Dns, Reason::TooManyConnections, None, None, ts(0)));
    assert!(!f.admit(Kind::Dns, Reason::TooManyConnections, None, None, ts(1)));
    assert!(f.admit(
        Kind::Http,
        Reason::BlockedByPolicy,
        Some("h.example"),
        Some(443),
        ts(0)
    ));
    let r = report(&mut f);
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(r.iter().any(|s| s.port == Some(22) && s.count == 1));
    assert!(
        r.iter()
            .any(|s| s.kind == Kind::Dns && s.host.is_none() && s.count == 1)
    );
}

/// `admits` says what `admit` would do, and changes nothing.
#[test]
fn admits_agrees_with_admit() {
    let mut f = Folds::new(2, 1);
    let k = (Kind::Dns, Reason::TooManyConnections);
    for i in 0..5 {
        let would = f.admits(k.0, k.1, None, None);
        assert_eq!(would, f.admit(k.0, k.1, None, None, ts(i)), "denial {i}");
    }
    assert!(!f.admits(k.0, k.1, Some("other.example"), None), "full");
}

/// A host longer than any valid name is cut to its key (at a character boundary).
#[test]
fn a_huge_host_takes_a_bounded_key() {
    let mut f = Folds::new(1, 4);
    let long = "é".repeat(10_000);
    assert!(deny(&mut f, &long, 443, 0));
    assert!(!deny(&mut f, &long, 443, 1));
    let r = report(&mut f);
    assert!(r[0].host.as_ref().unwrap().len() <= HOST_KEY_MAX);
}
