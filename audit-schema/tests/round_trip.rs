//! Representative lines of both logs, as the writers write them: each reads into its type,
//! and writes back byte for byte (serialize → deserialize → equal, and the same bytes).

// Test helpers outside `#[test]` fns are test code too (clippy.toml only sees `#[test]`).
#![allow(clippy::unwrap_used, clippy::panic)]

use airlock_audit_schema::{
    Event, GitApiEvent, GitApiRecord, Kind, Line, Part, Record, SCHEMA_VERSION, Signal, Suppressed,
    Timestamp, Verdict,
};

/// Reads `line` as `T` and writes it back: the same value, the same bytes.
fn round_trip<T>(line: &str) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let v: T = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let back = serde_json::to_string(&v).unwrap();
    assert_eq!(back, line, "written back differently");
    let again: T = serde_json::from_str(&back).unwrap();
    assert_eq!(again, v);
    v
}

const ALLOWED: &str = r#"{"ts":"2026-11-25T10:46:54.811Z","session":"sess-1","sandbox":"t","container":"c0ffee00","uid":1000,"agent_session":2,"client":"127.77.0.2:56940","kind":"connect","event":null,"method":"CONNECT","host":"api.example.com","port":443,"path":null,"decision":"allow","rule":"api.example.com","reason":null,"upstream":"203.0.113.10:443","upstream_local_port":40123,"intercepted":true,"credential":"github","status":null,"bytes_up":512,"bytes_down":2097152,"duration_ms":73,"signals":[],"chain":"5f0c6e1f0d8e4b2a9c3d7e6f1a2b3c4d"}"#;

/// A line written before the chain existed (no `chain`): still read.
const SIGNALLED: &str = r#"{"ts":"2026-11-25T10:46:54.811Z","session":"sess-1","sandbox":"t","container":null,"uid":null,"client":"[::1]:5000","kind":"http","event":"open","method":"POST","host":"paste.example","port":80,"path":"/upload","decision":"report","rule":"paste.example","reason":"encoded-blob","upstream":null,"upstream_local_port":null,"intercepted":false,"credential":null,"status":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"signals":[{"signal":"encoded-blob","alphabet":"base64","run":4096},{"signal":"high-entropy","bits":7.93,"bytes":65536}]}"#;

const ABANDONED: &str = r#"{"ts":"2026-11-25T10:46:54.811Z","session":"sess-1","sandbox":"t","container":"c0ffee00","uid":0,"client":"127.0.0.1:56940","kind":"http","event":"client-gone","method":"GET","host":"hang.test","port":80,"path":"/never-sent","decision":"abandoned","rule":"hang.test","reason":null,"upstream":null,"upstream_local_port":null,"intercepted":false,"credential":null,"status":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"signals":[]}"#;

/// A version-2 `suppressed` line (one kind, the last host): still read.
const SUPPRESSED_V2: &str = r#"{"ts":"2026-11-25T10:47:00.000Z","session":"s1","sandbox":"demo","container":"c0ffee","kind":"connect","event":"suppressed","decision":"deny","reason":"blocked-by-policy","since":"2026-11-25T10:46:59.500Z","count":95,"host":"h99.example"}"#;

/// Denials to one destination folded after its first lines.
const SUPPRESSED: &str = r#"{"ts":"2026-11-25T10:47:00.000Z","session":"s1","sandbox":"demo","container":"c0ffee","kind":"connect","event":"suppressed","decision":"deny","reason":"blocked-by-policy","since":"2026-11-25T10:46:59.500Z","count":95,"host":"flood.example","port":443,"until":"2026-11-25T10:46:59.980Z","overflow":false,"first_host":null}"#;

/// Denials to destinations past the full table: counted, the first and last named.
const OVERFLOW: &str = r#"{"ts":"2026-11-25T10:47:00.000Z","session":"s1","sandbox":"demo","container":null,"kind":"dns","event":"suppressed","decision":"deny","reason":"blocked-by-policy","since":"2026-11-25T10:46:59.100Z","count":95,"host":"h99.example","port":null,"until":"2026-11-25T10:46:59.900Z","overflow":true,"first_host":"h5.example"}"#;

/// The stream's oldest file aged out: its allowed and first lines moved, the flood dropped;
/// what the session dropped so far (this and an earlier ageing).
const ROTATED: &str = r#"{"ts":"2026-11-25T10:50:00.000Z","session":"s1","sandbox":"demo","container":"c0ffee","kind":"audit","event":"rotated","part":"stream","lines":500,"bytes":125000,"since":"2026-11-25T10:43:00.000Z","until":"2026-11-25T10:45:00.000Z","to_allowed":2,"to_first":4,"total":{"lines":1002,"bytes":250000,"since":"2026-11-25T10:40:00.000Z","until":"2026-11-25T10:45:00.000Z","dropped":[{"kind":"connect","event":"suppressed","decision":"deny","reason":"blocked-by-policy","lines":1000,"bytes":249000,"folded":999000,"since":"2026-11-25T10:40:01.000Z","until":"2026-11-25T10:45:00.000Z","hosts":[{"host":"flood.example","port":443,"lines":1000,"folded":999000}],"other_lines":0,"other_folded":0},{"kind":"connect","event":null,"decision":"deny","reason":"blocked-by-policy","lines":2,"bytes":1000,"folded":0,"since":"2026-11-25T10:40:00.000Z","until":"2026-11-25T10:40:00.000Z","hosts":[{"host":"flood.example","port":443,"lines":2,"folded":0}],"other_lines":0,"other_folded":0}],"unlisted":0},"after":"0123456789abcdef0123456789abcdef","chain":"fedcba9876543210fedcba9876543210"}"#;

/// An archive's oldest file was deleted.
const ROTATED_ARCHIVE: &str = r#"{"ts":"2026-11-25T11:00:00.000Z","session":"s1","sandbox":"demo","container":null,"kind":"audit","event":"rotated","part":"allowed","lines":3,"bytes":1200,"since":"2026-11-25T10:40:00.000Z","until":"2026-11-25T10:41:00.000Z","to_allowed":0,"to_first":0,"total":{"lines":3,"bytes":1200,"since":"2026-11-25T10:40:00.000Z","until":"2026-11-25T10:41:00.000Z","dropped":[{"kind":"http","event":"open","decision":"allow","reason":null,"lines":3,"bytes":1200,"folded":0,"since":"2026-11-25T10:40:00.000Z","until":"2026-11-25T10:41:00.000Z","hosts":[],"other_lines":3,"other_folded":0}],"unlisted":0},"after":null,"chain":"00112233445566778899aabbccddeeff"}"#;

/// A rotated line written before the chain existed (no `after`, no `chain`).
const ROTATED_UNCHAINED: &str = r#"{"ts":"2026-11-25T11:00:00.000Z","session":"s1","sandbox":"demo","container":null,"kind":"audit","event":"rotated","part":"first","lines":3,"bytes":1200,"since":null,"until":null,"to_allowed":0,"to_first":0,"total":{"lines":3,"bytes":1200,"since":null,"until":null,"dropped":[],"unlisted":3}}"#;

const OUTAGE: &str = r#"{"ts":"2026-11-25T10:48:00.000Z","session":"s1","sandbox":"demo","container":null,"kind":"audit","event":"outage","decision":"deny","reason":"audit-unavailable","since":"2026-11-25T10:47:30.250Z","error":"No space left on device (os error 28)","refused":8,"lost":0}"#;

const RELOADED: &str = r#"{"ts":"2026-11-25T10:49:00.000Z","session":"s1","sandbox":"demo","container":"c0ffee","kind":"audit","event":"reload","decision":"allow","needles":3,"files":2,"added":1,"dropped":0,"error":null}"#;

const RELOAD_REFUSED: &str = r#"{"ts":"2026-11-25T10:49:30.000Z","session":"s1","sandbox":"demo","container":null,"kind":"audit","event":"reload","decision":"deny","needles":3,"files":2,"added":0,"dropped":0,"error":"cannot read /run/airlock/state/credentials.json: Permission denied (os error 13)"}"#;

#[test]
fn proxy_lines_read_and_write_back_unchanged() {
    let r: Record = round_trip(ALLOWED);
    assert_eq!(
        (r.kind, r.decision, r.event),
        (Kind::Connect, Verdict::Allow, None)
    );
    assert_eq!(r.bytes_down, 2_097_152);
    assert_eq!((r.uid, r.agent_session), (Some(1000), Some(2)));
    let r: Record = round_trip(SIGNALLED);
    assert_eq!(r.event, Some(Event::Open));
    assert_eq!(r.reason.as_deref(), Some("encoded-blob"));
    assert_eq!(
        r.signals[1],
        Signal::HighEntropy {
            centibits: 793,
            bytes: 65_536
        }
    );
    let r: Record = round_trip(ABANDONED);
    assert_eq!(r.decision, Verdict::Abandoned);
    assert_eq!(r.event, Some(Event::ClientGone));
}

#[test]
fn every_line_of_the_audit_log_reads_as_a_line() {
    for (text, what) in [
        (ALLOWED, "record"),
        (SIGNALLED, "record"),
        (ABANDONED, "record"),
        (SUPPRESSED, "suppressed"),
        (OVERFLOW, "overflow"),
        (OUTAGE, "outage"),
        (ROTATED, "rotated"),
        (ROTATED_ARCHIVE, "rotated"),
        (RELOADED, "reload"),
        (RELOAD_REFUSED, "reload refused"),
    ] {
        let line: Line = round_trip(text);
        let got = match line {
            Line::Record(_) => "record",
            Line::Suppressed(s) => {
                assert_eq!((s.count, s.event), (95, Event::Suppressed));
                assert!(s.until.is_some_and(|u| u >= s.since), "{text}");
                if s.overflow {
                    assert_eq!(s.first_host.as_deref(), Some("h5.example"));
                    "overflow"
                } else {
                    assert_eq!(
                        (s.host.as_deref(), s.port),
                        (Some("flood.example"), Some(443))
                    );
                    "suppressed"
                }
            }
            Line::Rotated(r) => {
                let t = &r.total;
                let listed: u64 = t.dropped.iter().map(|d| d.lines).sum();
                assert_eq!(listed + t.unlisted, t.lines, "{text}");
                assert!(r.lines <= t.lines && r.bytes <= t.bytes, "{text}");
                "rotated"
            }
            Line::Outage(o) => {
                assert_eq!(o.refused, 8);
                "outage"
            }
            Line::Reload(r) => {
                assert_eq!((r.needles, r.files), (3, 2));
                match r.decision {
                    Verdict::Allow if r.error.is_none() => "reload",
                    Verdict::Deny if r.error.is_some() => "reload refused",
                    _ => "a reload that contradicts itself",
                }
            }
        };
        assert_eq!(got, what, "{text}");
    }
}

/// A version-2 reader's `suppressed` line still reads, its new fields empty.
#[test]
fn a_version_2_suppressed_line_reads_with_its_new_fields_empty() {
    let s: Suppressed = serde_json::from_str(SUPPRESSED_V2).unwrap();
    assert_eq!((s.count, s.host.as_deref()), (95, Some("h99.example")));
    assert_eq!(
        (s.port, s.until, s.overflow, s.first_host),
        (None, None, false, None)
    );
    assert!(matches!(
        serde_json::from_str::<Line>(SUPPRESSED_V2).unwrap(),
        Line::Suppressed(_)
    ));
}

/// The rotated line's numbers add up: the stream's ageing moved some lines and dropped the
/// rest, and every denial the session dropped is in an entry (whole lines and folded counts).
#[test]
fn a_rotated_line_says_what_left_and_from_where() {
    let Line::Rotated(r) = serde_json::from_str::<Line>(ROTATED).unwrap() else {
        panic!("not a rotated line")
    };
    assert_eq!(r.part, Part::Stream);
    assert_eq!((r.to_allowed, r.to_first), (2, 4));
    // The denials these lines recorded: a whole line is one, a suppressed line its count.
    let flood: u64 = r
        .total
        .dropped
        .iter()
        .flat_map(|d| {
            let suppressed = d.event.as_deref() == Some("suppressed");
            d.hosts.iter().map(move |h| (suppressed, h))
        })
        .filter(|(_, h)| h.host.as_deref() == Some("flood.example"))
        .map(|(suppressed, h)| if suppressed { h.folded } else { h.lines })
        .sum();
    assert_eq!(flood, 999_000 + 2);
    assert!(r.since <= r.until && r.total.since <= r.since);
    assert_eq!(r.total.since, Timestamp::parse("2026-11-25T10:40:00.000Z"));
}

#[test]
fn a_value_outside_the_closed_sets_is_refused() {
    for (field, bad) in [
        ("\"decision\":\"allow\"", "\"decision\":\"maybe\""),
        ("\"kind\":\"connect\"", "\"kind\":\"ftp\""),
        ("\"event\":null", "\"event\":\"vanished\""),
    ] {
        let text = ALLOWED.replace(field, bad);
        assert!(serde_json::from_str::<Record>(&text).is_err(), "{text}");
    }
}

#[test]
fn event_strings_are_the_pinned_ones() {
    let written: Vec<String> = Event::ALL
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    let named: Vec<String> = Event::ALL
        .iter()
        .map(|e| format!("\"{}\"", e.as_str()))
        .collect();
    assert_eq!(written, named, "serde and as_str agree");
}

const GIT_START: &str = r#"{"ts":"2026-11-25T10:00:00.000Z","session":"sess-1","component":"git-api","event":"start","agent_uid":1000,"default_identity":true,"max_connections":16,"rate_burst":20,"rate_per_second":10,"socket":"/run/airlock/git/git.sock","start_branch":"main"}"#;

const GIT_ALLOW: &str = r#"{"ts":"2026-11-25T10:00:01.000Z","session":"sess-1","component":"git-api","event":"decision","argv":["push","origin","HEAD:refs/heads/feature"],"decision":"allow","exit":0,"message":null,"reason":null,"uid":1000}"#;

const GIT_DENY: &str = r#"{"ts":"2026-11-25T10:00:02.000Z","session":null,"component":"git-api","event":"decision","argv":[],"decision":"deny","exit":null,"message":"no","reason":"peer_not_agent","suppressed":3,"truncated":true,"uid":null}"#;

const GIT_FATAL: &str = r#"{"ts":"2026-11-25T10:00:03.000Z","session":null,"component":"git-api","event":"fatal","message":"binding /run/airlock/git/git.sock: Address in use"}"#;

const GIT_ROTATED: &str = r#"{"ts":"2026-11-25T10:05:00.000Z","session":"sess-1","component":"git-api","event":"rotated","bytes":120000,"carried":7,"dropped":[{"decision":"deny","event":"decision","lines":299,"reason":"push_form_not_supported","subcommand":"push"},{"decision":null,"event":"rotated","lines":1,"reason":null,"subcommand":null}],"lines":300,"since":"2026-11-25T10:00:02.000Z","until":"2026-11-25T10:04:00.000Z"}"#;

#[test]
fn git_api_lines_read_and_write_back_unchanged() {
    let r: GitApiRecord = round_trip(GIT_START);
    assert!(matches!(
        r.event,
        GitApiEvent::Start {
            agent_uid: 1000,
            ..
        }
    ));
    let r: GitApiRecord = round_trip(GIT_ALLOW);
    let GitApiEvent::Decision { decision, exit, .. } = r.event else {
        panic!("{r:?}")
    };
    assert_eq!((decision, exit), (Verdict::Allow, Some(0)));
    let r: GitApiRecord = round_trip(GIT_DENY);
    assert!(matches!(
        r.event,
        GitApiEvent::Decision {
            suppressed: Some(3),
            truncated: true,
            ..
        }
    ));
    round_trip::<GitApiRecord>(GIT_FATAL);
    let r: GitApiRecord = round_trip(GIT_ROTATED);
    let GitApiEvent::Rotated { lines, dropped, .. } = r.event else {
        panic!("{r:?}")
    };
    assert_eq!(lines, dropped.iter().map(|d| d.lines).sum::<u64>());
    assert_eq!(
        SCHEMA_VERSION, 3,
        "version 3: the rotated line (and the chain, a field older readers ignore)"
    );
}

/// Lines written before the chain existed read with `chain` and `after` null; a chained
/// line's `chain` reads as written (and is written back last).
#[test]
fn the_chain_is_a_field_older_lines_read_without() {
    let r: Record = serde_json::from_str(SIGNALLED).unwrap();
    assert_eq!(r.chain, None);
    let r: Record = round_trip(ALLOWED);
    assert_eq!(
        r.chain.map(|c| c.to_string()).as_deref(),
        Some("5f0c6e1f0d8e4b2a9c3d7e6f1a2b3c4d")
    );
    let Line::Rotated(old) = serde_json::from_str::<Line>(ROTATED_UNCHAINED).unwrap() else {
        panic!("not a rotated line")
    };
    assert_eq!((old.after, old.chain), (None, None));
    let Line::Rotated(r) = serde_json::from_str::<Line>(ROTATED).unwrap() else {
        panic!("not a rotated line")
    };
    assert!(r.after.is_some() && r.chain.is_some());
    // The chain field's place and form are what a verifier reads without parsing.
    let (body, chain) = airlock_audit_schema::chain::split(ROTATED.as_bytes()).unwrap();
    assert_eq!(Some(chain), r.chain);
    assert!(body.ends_with(br#""after":"0123456789abcdef0123456789abcdef""#));
    for line in [SIGNALLED, ABANDONED, SUPPRESSED_V2, OUTAGE, RELOADED] {
        assert_eq!(airlock_audit_schema::chain::split(line.as_bytes()), None);
    }
}

/// The representative lines as the writer chains them: every one stays readable as its
/// type, and the files verify; an edit anywhere is named.
#[test]
fn the_lines_chained_as_the_writer_chains_them_verify() {
    use airlock_audit_schema::chain::{self, GENESIS, seal};
    let mut log = Vec::new();
    let mut head = GENESIS;
    for line in [
        SIGNALLED,
        ABANDONED,
        SUPPRESSED,
        OVERFLOW,
        OUTAGE,
        RELOADED,
        RELOAD_REFUSED,
    ] {
        let start = log.len();
        log.extend_from_slice(line.as_bytes());
        head = seal(&mut log, start, &head).unwrap();
        let _: Line = serde_json::from_slice(&log[start..]).unwrap();
        log.push(b'\n');
    }
    let names = ["audit.jsonl".to_owned()];
    let intact = chain::verify(&names, |_| Ok(std::io::Cursor::new(log.clone()))).unwrap();
    assert_eq!((intact.lines, intact.head), (7, head));
    let edited = String::from_utf8(log.clone())
        .unwrap()
        .replacen("\"count\":95", "\"count\":1", 1);
    let err = chain::verify(&names, |_| Ok(std::io::Cursor::new(edited.clone()))).unwrap_err();
    assert!(err.to_string().starts_with("audit.jsonl:3: "), "{err}");
}
