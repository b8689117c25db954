//! Representative lines of both logs, as the writers write them: each reads into its type,
//! and writes back byte for byte (serialize → deserialize → equal, and the same bytes).

// Test helpers outside `#[test]` fns are test code too (clippy.toml only sees `#[test]`).
#![allow(clippy::unwrap_used, clippy::panic)]

use airlock_audit_schema::{
    Event, GitApiEvent, GitApiRecord, Kind, Line, Record, SCHEMA_VERSION, Signal, Verdict,
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

const ALLOWED: &str = r#"{"ts":"2026-11-25T10:46:54.811Z","session":"sess-1","sandbox":"t","container":"c0ffee00","uid":1000,"client":"127.0.0.1:56940","kind":"connect","event":null,"method":"CONNECT","host":"api.example.com","port":443,"path":null,"decision":"allow","rule":"api.example.com","reason":null,"upstream":"203.0.113.10:443","upstream_local_port":40123,"intercepted":true,"credential":"github","status":null,"bytes_up":512,"bytes_down":2097152,"duration_ms":73,"signals":[]}"#;

const SIGNALLED: &str = r#"{"ts":"2026-11-25T10:46:54.811Z","session":"sess-1","sandbox":"t","container":null,"uid":null,"client":"[::1]:5000","kind":"http","event":"open","method":"POST","host":"paste.example","port":80,"path":"/upload","decision":"report","rule":"paste.example","reason":"encoded-blob","upstream":null,"upstream_local_port":null,"intercepted":false,"credential":null,"status":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"signals":[{"signal":"encoded-blob","alphabet":"base64","run":4096},{"signal":"high-entropy","bits":7.93,"bytes":65536}]}"#;

const ABANDONED: &str = r#"{"ts":"2026-11-25T10:46:54.811Z","session":"sess-1","sandbox":"t","container":"c0ffee00","uid":0,"client":"127.0.0.1:56940","kind":"http","event":"client-gone","method":"GET","host":"hang.test","port":80,"path":"/never-sent","decision":"abandoned","rule":"hang.test","reason":null,"upstream":null,"upstream_local_port":null,"intercepted":false,"credential":null,"status":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"signals":[]}"#;

const SUPPRESSED: &str = r#"{"ts":"2026-11-25T10:47:00.000Z","session":"s1","sandbox":"demo","container":"c0ffee","kind":"connect","event":"suppressed","decision":"deny","reason":"blocked-by-policy","since":"2026-11-25T10:46:59.500Z","count":95,"host":"h99.example"}"#;

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
        (OUTAGE, "outage"),
        (RELOADED, "reload"),
        (RELOAD_REFUSED, "reload refused"),
    ] {
        let line: Line = round_trip(text);
        let got = match line {
            Line::Record(_) => "record",
            Line::Suppressed(s) => {
                assert_eq!((s.count, s.event), (95, Event::Suppressed));
                "suppressed"
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
    assert_eq!(SCHEMA_VERSION, 2, "version 2: the reload line");
}
