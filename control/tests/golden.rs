//! The protocol's JSON, pinned (cargo-credential's pattern): each type's example is written
//! exactly as `tests/golden/<name>.json` holds it, and the file reads back as the example.
//! A change to a golden file is a change of the protocol: additive only within a version
//! (see the `admin` module docs). `AIRLOCK_BLESS=1 cargo test -p airlock-control --test
//! golden` rewrites the files after a deliberate change; review the diff.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_control::admin::{
    AnswerRequest, Approval, ApprovalQuery, Approvals, AuditState, BeginSessionRequest, CheckQuery,
    Checked, Counters, Cursor, EffectiveRule, ErrorBody, ErrorCode, Event, EventsQuery, Log, Note,
    NoteCode, PolicyRevision, ReloadRequest, Reloaded, Request, Response, RevokeRequest, Session,
    SessionBegun, SessionKind, Sessions, StreamLine,
};
use airlock_control::{State, Status, Steps};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::path::PathBuf;

fn golden<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, value: &T) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.json"));
    let json = serde_json::to_string(value).unwrap();
    if std::env::var_os("AIRLOCK_BLESS").is_some() {
        std::fs::write(&file, format!("{json}\n")).unwrap();
    }
    let pinned = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (AIRLOCK_BLESS=1 writes it)", file.display()));
    assert_eq!(json, pinned.trim_end(), "{name}: the JSON changed");
    let back: T = serde_json::from_str(&pinned).unwrap();
    assert_eq!(&back, value, "{name}: the file reads back as another value");
}

fn starting() -> Status {
    Status::starting("0.1.0", 1_795_853_089_000)
}

fn ready() -> Status {
    let mut s = starting();
    s.session = Some("1795853089-6e301f0ab6b0".into());
    s.sandbox = Some("fix-login".into());
    s.ready(
        1_795_853_089_137,
        Steps {
            total_ms: 137,
            validate_ms: 17,
            services_ms: 105,
            firewall_ms: 91,
            self_test_ms: 14,
        },
    )
}

#[test]
fn the_readiness_record() {
    golden("status-starting", &starting());
    golden("status-ready", &ready());
    golden(
        "status-refused",
        &starting().refused("the container was not started as documented (docs/docker.md), missing: --read-only (the root filesystem is writable) [missing-read-only]"),
    );
}

#[test]
fn requests() {
    golden("request-status", &Request::Status);
    golden("request-sessions", &Request::Sessions);
    golden("request-policy", &Request::Policy);
    golden("request-counters", &Request::Counters);
    golden("request-metrics", &Request::Metrics);
    golden(
        "request-events",
        &Request::Events(EventsQuery {
            after: Some(Cursor("1795853089-6e301f0ab6b0:42".into())),
            decision: Some("deny".into()),
            host: None,
            session: Some("1795853089-6e301f0ab6b0".into()),
            reason: None,
            since_ms: Some(1_795_853_089_000),
            follow: true,
        }),
    );
    golden(
        "request-check",
        &Request::Check(CheckQuery {
            url: "https://api.github.com/repos/acme/app/pulls".into(),
            method: Some("POST".into()),
        }),
    );
    golden(
        "request-reload",
        &Request::Reload(ReloadRequest {
            text: Some("[sandbox]\nname = \"fix-login\"\n".into()),
            origin: Some("/home/me/app/policy.toml".into()),
        }),
    );
    golden("request-approvals", &Request::Approvals);
    golden(
        "request-approval",
        &Request::Approval(ApprovalQuery {
            id: "3f2a9c1d".into(),
        }),
    );
    golden(
        "request-answer",
        &Request::Answer(AnswerRequest {
            id: "3f2a9c1d".into(),
            approve: false,
            scope: None,
            for_seconds: Some(3600),
            token: Some("0011223344556677".into()),
            reason: Some("use the internal mirror".into()),
        }),
    );
    golden(
        "request-revoke",
        &Request::Revoke(RevokeRequest {
            id: "3f2a9c1d".into(),
        }),
    );
    golden(
        "request-begin-session",
        &Request::BeginSession(BeginSessionRequest { session: 2 }),
    );
}

#[test]
fn responses() {
    golden("response-status", &Response::Status(ready()));
    golden(
        "response-sessions",
        &Response::Sessions(Sessions {
            sessions: vec![
                Session {
                    id: "1795853089-6e301f0ab6b0".into(),
                    kind: SessionKind::Agent,
                    uid: Some(1000),
                    started_at_ms: 1_795_853_089_137,
                    number: 1,
                },
                Session {
                    id: "1795853089-6e301f0ab6b0".into(),
                    kind: SessionKind::Exec,
                    uid: Some(1000),
                    started_at_ms: 1_795_853_212_004,
                    number: 2,
                },
            ],
        }),
    );
    golden(
        "response-session-begun",
        &Response::SessionBegun(SessionBegun {
            session: 2,
            started_at_ms: 1_795_853_212_004,
            dropped_pending: 1,
            dropped_approvals: 2,
            dropped_denials: 0,
        }),
    );
    golden(
        "response-policy",
        &Response::Policy(PolicyRevision {
            revision: 2,
            hash: "9f86d081884c7d65".into(),
            loaded_at_ms: 1_795_853_189_000,
            origin: "/etc/airlock/policy.toml".into(),
            rules: Vec::new(),
        }),
    );
    golden(
        "response-policy-rules",
        &Response::Policy(PolicyRevision {
            revision: 2,
            hash: "9f86d081884c7d65".into(),
            loaded_at_ms: 1_795_853_189_000,
            origin: "/etc/airlock/policy.toml".into(),
            rules: vec![
                EffectiveRule {
                    list: "network.allow".into(),
                    rule: "api.anthropic.com".into(),
                    origin: "file network.allow[0]".into(),
                },
                EffectiveRule {
                    list: "network.allow".into(),
                    rule: "pypi.org".into(),
                    origin: "registry pypi (network.registries[0])".into(),
                },
            ],
        }),
    );
    golden(
        "response-counters",
        &Response::Counters(Counters {
            requests: 12,
            allowed: 9,
            denied: 3,
            denied_by_reason: [("host-not-allowed".to_owned(), 3)].into(),
            bytes_out_by_host: [("api.anthropic.com".to_owned(), 48_213)].into(),
            open_connections: 2,
            open_circuits: Vec::new(),
            budgets: Vec::new(),
            audit: AuditState::Writing,
        }),
    );
    golden(
        "response-reloaded",
        &Response::Reloaded(Reloaded {
            revision: 2,
            hash: "9f86d081884c7d65".into(),
            loaded_at_ms: 1_795_853_189_000,
            changed: true,
            closed: 1,
        }),
    );
    golden(
        "response-checked",
        &Response::Checked(Checked {
            revision: 2,
            decision: "deny".into(),
            stage: "host".into(),
            reason: Some("blocked-by-policy".into()),
            rule: None,
            intercepted: true,
            message: "evil.example:443 is refused (blocked-by-policy): add the host to network.allow in the policy".into(),
        }),
    );
    golden(
        "response-error",
        &Response::Error(ErrorBody {
            code: ErrorCode::InvalidPolicy,
            message: "/home/me/app/policy.toml:4: unknown key `alow` in [network]; revision 1 stays in force".into(),
        }),
    );
    let item = Approval {
        id: "3f2a9c1d".into(),
        session: "uid 1000".into(),
        host: "pypi.example".into(),
        port: 443,
        hits: 3,
        first_ms: 1_795_853_089_137,
        last_ms: 1_795_853_095_000,
        state: "pending".into(),
        scope: None,
        by: None,
        until_ms: None,
        reason: None,
        said: Some("pip install needs the package index".into()),
        rule: None,
        notes: vec![
            "a credential (\"pypi\") is bound to pypi.example: approving sends it there".into(),
        ],
        token: Some("0011223344556677".into()),
    };
    golden("response-approval", &Response::Approval(item.clone()));
    golden(
        "response-approval-rule",
        &Response::Approval(Approval {
            host: "api.example.com".into(),
            port: 443,
            said: None,
            notes: Vec::new(),
            rule: Some("publish".into()),
            ..item.clone()
        }),
    );
    golden(
        "response-approvals",
        &Response::Approvals(Approvals {
            items: vec![
                Approval {
                    token: None,
                    ..item.clone()
                },
                Approval {
                    id: "77aa0001".into(),
                    state: "denied".into(),
                    by: Some(1000),
                    until_ms: Some(1_795_856_689_137),
                    reason: Some("use the internal mirror".into()),
                    notes: Vec::new(),
                    token: None,
                    ..item
                },
            ],
        }),
    );
}

#[test]
fn stream_lines() {
    golden(
        "stream-record",
        &StreamLine::Record(Event {
            cursor: Cursor("1795853089-6e301f0ab6b0:42".into()),
            log: Log::Audit,
            record: serde_json::json!({
                "ts": "2026-11-28T10:00:00.000Z",
                "decision": "deny",
                "host": "evil.example",
                "reason": "host-not-allowed",
            }),
        }),
    );
    golden(
        "stream-note",
        &StreamLine::<serde_json::Value>::Note(Note {
            code: NoteCode::Dropped,
            message: "this follower fell 10000 records behind; resume from the last cursor read"
                .into(),
        }),
    );
}

/// A newer peer's operation, answer, state, code or field: read as `Unknown` or ignored,
/// never a failure to read the rest.
#[test]
fn what_a_newer_peer_adds_is_read_as_unknown() {
    let r: Request = serde_json::from_str(r#"{"op":"approve","id":"a1","scope":"once"}"#).unwrap();
    assert_eq!(r, Request::Unknown);
    let r: Response = serde_json::from_str(r#"{"kind":"grants","pending":[]}"#).unwrap();
    assert_eq!(r, Response::Unknown);
    let s: Status = serde_json::from_str(
        r#"{"api":1,"state":"stopping","version":"0.2.0","started_at_ms":1,"revision":7}"#,
    )
    .unwrap();
    assert_eq!(s.state, State::Unknown);
    assert_eq!(s.session, None);
    let e: ErrorBody =
        serde_json::from_str(r#"{"code":"rate-limited","message":"slow down","retry_ms":50}"#)
            .unwrap();
    assert_eq!(e.code, ErrorCode::Unknown);
    let c: Counters = serde_json::from_str(
        r#"{"requests":1,"allowed":1,"denied":0,"open_connections":0,"audit":"chained","asked":4}"#,
    )
    .unwrap();
    assert_eq!(c.audit, AuditState::Unknown);
    assert!(c.denied_by_reason.is_empty());
    let l: StreamLine = serde_json::from_str(r#"{"kind":"approval","id":"a1"}"#).unwrap();
    assert_eq!(l, StreamLine::Unknown);
    let l: StreamLine =
        serde_json::from_str(r#"{"kind":"record","cursor":"c","log":"budget","record":{}}"#)
            .unwrap();
    assert!(matches!(
        l,
        StreamLine::Record(Event {
            log: Log::Unknown,
            ..
        })
    ));
}

/// An older peer's answer, without a field added since: read, the field at its default.
#[test]
fn what_an_older_peer_leaves_out_reads_as_its_default() {
    let r: Response = serde_json::from_str(
        r#"{"kind":"sessions","sessions":[{"id":"s","kind":"agent","uid":1000,"started_at_ms":1}]}"#,
    )
    .unwrap();
    let Response::Sessions(s) = r else {
        panic!("{r:?}")
    };
    assert_eq!(s.sessions[0].number, 0, "a session's number not said");
}

/// The readiness record on disk is the admin API's status answer without its tag: a
/// reader of either reads both.
#[test]
fn the_record_and_the_status_answer_read_alike() {
    let answer = serde_json::to_string(&Response::Status(ready())).unwrap();
    assert_eq!(Status::parse(answer.as_bytes()).unwrap(), ready());
    let record = ready().to_line();
    let tagged = format!("{{\"kind\":\"status\",{}", &record.trim_end()[1..]);
    let back: Response = serde_json::from_str(&tagged).unwrap();
    assert_eq!(back, Response::Status(ready()));
}
