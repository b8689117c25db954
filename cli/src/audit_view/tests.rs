use super::follow::{Follower, Got};
use super::*;
use airlock_audit_schema::{Timestamp, Who};
use std::io::Write as _;
use std::time::{Duration, UNIX_EPOCH};

const SESSION: &str = "1764300000-a1b2c3d4e5f6";

fn rec(kind: Kind, decision: Verdict, reason: Option<&str>) -> Record {
    let who = Who::new(SESSION, "fix-login", None);
    let mut r = Record::new(
        &who,
        UNIX_EPOCH + Duration::from_millis(1_764_300_000_123),
        kind,
        None,
    );
    r.decision = decision;
    r.reason = reason.map(str::to_string);
    r.host = Some("evil.example".into());
    r.port = Some(443);
    r
}

fn line(r: &Record) -> String {
    serde_json::to_string(r).unwrap()
}

fn human_view() -> View {
    View::default()
}

fn show(raw: &str) -> String {
    render(Source::Proxy, raw, "audit.jsonl", 1, &human_view()).unwrap()
}

#[test]
fn a_denied_connect_is_one_line_then_the_exact_policy_change() {
    let r = rec(Kind::Connect, Verdict::Deny, Some("blocked-by-policy"));
    let text = show(&line(&r));
    assert_eq!(
        text,
        "2025-11-28T03:20:00.123Z a1b2c3 deny      CONNECT evil.example:443  blocked-by-policy\n    \
         to allow: add \"evil.example\" to [network] allow in the policy"
    );
}

#[test]
fn an_allowed_request_is_one_line_with_its_status_and_its_open_line_is_left_out() {
    let mut r = rec(Kind::Http, Verdict::Allow, None);
    r.method = Some("GET".into());
    r.path = Some("/index.html".into());
    r.status = Some(200);
    r.rule = Some("evil.example".into());
    let text = show(&line(&r));
    assert_eq!(
        text,
        "2025-11-28T03:20:00.123Z a1b2c3 allow     GET evil.example:443/index.html  rule \"evil.example\"  200"
    );
    r.event = Some(Event::Open);
    assert_eq!(
        render(Source::Proxy, &line(&r), "audit.jsonl", 1, &human_view()),
        None
    );
    // --json prints every line as written, the open line too.
    let json = View {
        json: true,
        ..View::default()
    };
    assert_eq!(
        render(Source::Proxy, &line(&r), "audit.jsonl", 1, &json),
        Some(line(&r))
    );
}

#[test]
fn each_kind_names_what_was_asked() {
    let mut dns = rec(Kind::Dns, Verdict::Deny, Some("dns-exfil-suspect"));
    dns.method = Some("A".into());
    assert!(show(&line(&dns)).contains(" DNS A evil.example  dns-exfil-suspect"));
    let mut t = rec(Kind::Transparent, Verdict::Deny, Some("unknown-host"));
    t.host = None;
    t.port = Some(80);
    assert!(show(&line(&t)).contains(" transparent ?:80  unknown-host"));
    let mut g = rec(Kind::GitService, Verdict::Deny, Some("git-ticket-missing"));
    g.method = Some("POST".into());
    g.path = Some("/o/r.git/git-receive-pack".into());
    assert!(show(&line(&g)).contains(
        " git-service POST evil.example:443/o/r.git/git-receive-pack  git-ticket-missing"
    ));
    let mut inner = rec(Kind::Connect, Verdict::Deny, Some("read-only-host"));
    inner.method = Some("POST".into());
    inner.path = Some("/upload".into());
    let text = show(&line(&inner));
    assert!(
        text.contains(" POST evil.example:443/upload  read-only-host"),
        "{text}"
    );
    let mut v6 = rec(Kind::Connect, Verdict::Deny, Some("blocked-ip-literal"));
    v6.host = Some("2001:db8::1".into());
    v6.port = Some(8443);
    let text = show(&line(&v6));
    assert!(text.contains("CONNECT [2001:db8::1]:8443"), "{text}");
    assert!(
        text.contains("add \"[2001:db8::1]:8443\" to [network] allow"),
        "{text}"
    );
}

#[test]
fn the_allow_hint_is_the_policy_change_where_one_exists_else_the_reasons_hint() {
    let h = |code, port, m, p| allow_hint(code, Some("h.example"), port, m, p).unwrap();
    assert_eq!(
        h("blocked-by-policy", Some(443), None, None),
        "to allow: add \"h.example\" to [network] allow in the policy"
    );
    assert_eq!(
        h("blocked-by-policy", Some(8080), None, None),
        "to allow: add \"h.example:8080\" to [network] allow in the policy"
    );
    assert_eq!(
        h("blocked-port", Some(22), None, None),
        "to allow: add \"h.example:22\" to [network] allow in the policy"
    );
    assert_eq!(
        h("read-only-host", Some(443), Some("POST"), Some("/upload")),
        "to allow: [network] writable = [\"h.example\"] in the policy (POST /upload only: an action = \"allow\" rule in [[rules]])"
    );
    assert_eq!(
        h("body-on-read", Some(443), None, None),
        "to allow: [network] writable = [\"h.example\"] in the policy"
    );
    assert!(
        h("not-inspectable", Some(22), None, None)
            .contains("[network] passthrough = [\"h.example\"]")
    );
    assert!(
        h("upgrade-denied", Some(443), None, None)
            .contains("[network] websocket = [\"h.example\"]")
    );
    assert!(h("denied-by-rule", Some(443), None, None).contains("[network] deny entry"));
    assert!(h("encoded-blob", Some(443), None, None).contains("encoded_blob = \"log\""));
    assert!(h("high-entropy", Some(443), None, None).contains("high_entropy = \"log\""));
    assert!(
        h("rate-limited", Some(443), None, None).contains("raise [limits] requests_per_second")
    );
    assert!(h("budget-exhausted", Some(443), None, None).contains("raise the [limits] budget"));
    // Hard denies: nothing allows them, and the line says so.
    assert!(h("blocked-metadata-address", Some(80), None, None).starts_with("never allowed: "));
    // No exact change: the proxy's own hint for the reason.
    assert_eq!(
        h("credential-leak", Some(443), None, None),
        format!("hint: {}", Reason::CredentialLeak.hint())
    );
    assert!(
        allow_hint("blocked-by-policy", None, None, None, None)
            .unwrap()
            .starts_with("hint: ")
    );
    // A code of a newer appliance: no hint rather than a wrong one.
    assert_eq!(
        allow_hint("no-such-code", Some("h"), None, None, None),
        None
    );
}

#[test]
fn a_denial_is_red_on_a_terminal_only() {
    let raw = line(&rec(
        Kind::Connect,
        Verdict::Deny,
        Some("blocked-by-policy"),
    ));
    let tty = View {
        color: true,
        ..View::default()
    };
    let text = render(Source::Proxy, &raw, "audit.jsonl", 1, &tty).unwrap();
    assert!(
        text.starts_with("\x1b[1;31m") && text.contains("\x1b[0m\n    to allow"),
        "{text:?}"
    );
    assert!(!show(&raw).contains('\x1b'));
    let allowed = line(&rec(Kind::Connect, Verdict::Allow, None));
    assert!(
        !render(Source::Proxy, &allowed, "audit.jsonl", 1, &tty)
            .unwrap()
            .contains('\x1b')
    );
}

#[test]
fn folded_outage_reload_and_rotated_lines_are_printed_as_counts() {
    let ts = Timestamp(1_764_300_000_123);
    let s = Suppressed::<String> {
        ts,
        session: SESSION.into(),
        sandbox: "fix-login".into(),
        container: None,
        kind: Kind::Connect,
        event: Event::Suppressed,
        decision: Verdict::Deny,
        reason: "blocked-by-policy".into(),
        since: ts,
        count: 937,
        host: Some("evil.example".into()),
        port: Some(443),
        until: Some(ts),
        overflow: false,
        first_host: None,
        chain: None,
    };
    let text = show(&serde_json::to_string(&s).unwrap());
    assert!(
        text.contains("connect evil.example:443  blocked-by-policy: 937 more denials folded"),
        "{text}"
    );
    assert!(text.contains("to allow: add \"evil.example\""), "{text}");
    let over = Suppressed {
        overflow: true,
        port: None,
        first_host: Some("a.example".into()),
        ..s
    };
    let text = show(&serde_json::to_string(&over).unwrap());
    assert!(
        text.contains(
            "937 connect denials folded to hosts past the fold table (a.example .. evil.example)"
        ),
        "{text}"
    );

    let o = serde_json::json!({"ts": "2025-11-28T03:20:00.123Z", "session": SESSION, "sandbox": "s",
        "container": null, "kind": "audit", "event": "outage", "decision": "deny",
        "reason": "audit-unavailable", "since": "2025-11-28T03:19:00.000Z", "error": "disk full",
        "refused": 12, "lost": 0});
    let text = show(&o.to_string());
    assert!(text.contains("audit-unavailable: not writable since 2025-11-28T03:19:00.000Z (disk full); 12 requests refused"), "{text}");

    let rl = serde_json::json!({"ts": "2025-11-28T03:20:00.123Z", "session": SESSION, "sandbox": "s",
        "container": null, "kind": "audit", "event": "reload", "decision": "allow",
        "needles": 4, "files": 2, "added": 1, "dropped": 0, "error": null});
    let text = show(&rl.to_string());
    assert!(
        text.contains(" reload    rules replaced: 4 secrets in 2 files protected (+1 -0)"),
        "{text}"
    );

    // The operator's policy reload: its revision, origin and the connections it closed.
    let mut pr = rl.clone();
    pr["revision"] = 3.into();
    pr["hash"] = "ab".repeat(32).into();
    pr["previous_hash"] = "cd".repeat(32).into();
    pr["origin"] = "/home/me/policy.toml".into();
    pr["closed"] = 2.into();
    let text = show(&pr.to_string());
    assert!(
        text.contains(" reload    policy revision 3 (abababababab) from /home/me/policy.toml: 2 open connections it refuses closed"),
        "{text}"
    );
    pr["decision"] = "deny".into();
    pr["revision"] = 2.into();
    pr["error"] = "/home/me/policy.toml:3:1: expected `=`".into();
    let text = show(&pr.to_string());
    assert!(
        text.contains(" reload    policy from /home/me/policy.toml refused, revision 2 (abababababab) stays: /home/me/policy.toml:3:1: expected `=`"),
        "{text}"
    );

    let rot = serde_json::json!({"ts": "2025-11-28T03:20:00.123Z", "session": SESSION, "sandbox": "s",
        "container": null, "kind": "audit", "event": "rotated", "part": "stream", "lines": 100,
        "bytes": 9000, "since": null, "until": null, "to_allowed": 40, "to_first": 3,
        "total": {"lines": 157, "bytes": 12000, "since": null, "until": null, "dropped": [], "unlisted": 0}});
    let text = show(&rot.to_string());
    assert!(text.contains(" rotated   100 lines (9000 bytes) left the log (stream), 40 moved to the allowed archive, 3 to the first archive; this session: 157 lines dropped"), "{text}");
    // --denied keeps the counts: lines that left may have been refusals.
    let denied = View {
        denied: true,
        ..View::default()
    };
    assert!(render(Source::Proxy, &rot.to_string(), "audit.jsonl", 1, &denied).is_some());
    assert!(render(Source::Proxy, &rl.to_string(), "audit.jsonl", 1, &denied).is_none());
}

#[test]
fn git_api_lines_name_the_git_command() {
    let deny = serde_json::json!({"ts": "2025-11-28T03:20:00.123Z", "session": SESSION,
        "component": "git-api", "event": "decision", "argv": ["push", "origin", "main"],
        "decision": "deny", "exit": null, "message": "main is protected", "reason": "protected_branch", "uid": 1000});
    let text = render(
        Source::GitApi,
        &deny.to_string(),
        "git-api.jsonl",
        1,
        &human_view(),
    )
    .unwrap();
    assert_eq!(
        text,
        "2025-11-28T03:20:00.123Z a1b2c3 deny      git push origin main  protected_branch: main is protected"
    );
    let allow = serde_json::json!({"ts": "2025-11-28T03:20:00.123Z", "session": null,
        "component": "git-api", "event": "decision", "argv": ["fetch"],
        "decision": "allow", "exit": 0, "message": null, "reason": null, "uid": 1000});
    let text = render(
        Source::GitApi,
        &allow.to_string(),
        "git-api.jsonl",
        1,
        &human_view(),
    )
    .unwrap();
    assert_eq!(
        text,
        "2025-11-28T03:20:00.123Z -      allow     git fetch  exit 0"
    );
    let denied = View {
        denied: true,
        ..View::default()
    };
    assert!(
        render(
            Source::GitApi,
            &allow.to_string(),
            "git-api.jsonl",
            1,
            &denied
        )
        .is_none()
    );
    assert!(
        render(
            Source::GitApi,
            &deny.to_string(),
            "git-api.jsonl",
            1,
            &denied
        )
        .is_some()
    );
}

#[test]
fn session_and_denied_filters() {
    let raw = line(&rec(Kind::Connect, Verdict::Allow, None));
    let by = |s: &str, denied| View {
        session: Some(s.into()),
        denied,
        ..View::default()
    };
    for s in [SESSION, "1764300000", "a1b2c3", "a1b2c3d4e5f6"] {
        assert!(
            render(Source::Proxy, &raw, "audit.jsonl", 1, &by(s, false)).is_some(),
            "{s}"
        );
    }
    assert!(render(Source::Proxy, &raw, "audit.jsonl", 1, &by("ffff", false)).is_none());
    assert!(render(Source::Proxy, &raw, "audit.jsonl", 1, &by("a1b2c3", true)).is_none());
    let json = View {
        json: true,
        session: Some("a1b2".into()),
        ..View::default()
    };
    assert_eq!(
        render(Source::Proxy, &raw, "audit.jsonl", 1, &json),
        Some(raw.clone())
    );
}

#[test]
fn garbage_is_an_unreadable_line_never_a_crash() {
    for raw in ["{\"ts\": \"2025-", "not json", "{}", "\u{0}\u{1}"] {
        let text = render(Source::Proxy, raw, "audit.jsonl", 7, &human_view()).unwrap();
        assert_eq!(text, "unreadable line 7 of audit.jsonl");
        assert!(is_unreadable(&text));
    }
    assert_eq!(
        render(Source::Proxy, "", "audit.jsonl", 1, &human_view()),
        None
    );
    assert_eq!(short_session("nodash"), "nodash");
    assert_eq!(short_session(SESSION), "a1b2c3");
}

fn texts(got: Vec<Got>) -> Vec<String> {
    got.into_iter().map(|g| g.text).collect()
}

#[test]
fn a_partial_line_is_printed_once_when_it_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut f = Follower::new(&path);
    assert!(f.poll().unwrap().is_empty(), "absent is not an error");
    let mut w = std::fs::File::create(&path).unwrap();
    w.write_all(b"one\ntw").unwrap();
    assert_eq!(texts(f.poll().unwrap()), ["one"]);
    assert!(f.poll().unwrap().is_empty());
    w.write_all(b"o\nthree").unwrap();
    let got = f.poll().unwrap();
    assert_eq!(
        got,
        [Got {
            n: 2,
            text: "two".into()
        }]
    );
    w.write_all(b"\n").unwrap();
    assert_eq!(texts(f.poll().unwrap()), ["three"]);
    assert!(f.poll().unwrap().is_empty());
}

#[test]
fn a_file_truncated_in_place_is_read_again_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("git-api.jsonl");
    std::fs::write(&path, "a\nb\n").unwrap();
    let mut f = Follower::new(&path);
    assert_eq!(texts(f.poll().unwrap()), ["a", "b"]);
    std::fs::write(&path, "c\n").unwrap(); // truncates, then writes
    assert_eq!(texts(f.poll().unwrap()), ["c"]);
}

/// A writer thread appends numbered lines, in pieces, and rotates the file by renaming it
/// (as the proxy does) every 50 lines; the follower, polled meanwhile, hands out every
/// line once, in order, across every rotation.
#[test]
fn the_follower_hands_out_every_line_once_in_order_across_rotation() {
    const LINES: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut w = std::fs::File::create(&path).unwrap();
            for i in 0..LINES {
                if i > 0 && i % 50 == 0 {
                    let rotated = path.with_extension("jsonl.1");
                    std::fs::rename(&path, &rotated).unwrap();
                    w = std::fs::File::create(&path).unwrap();
                }
                let text = format!("line {i}\n");
                let (a, b) = text.split_at(3);
                w.write_all(a.as_bytes()).unwrap();
                if i % 7 == 0 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                w.write_all(b.as_bytes()).unwrap();
            }
        })
    };
    let mut f = Follower::new(&path);
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < LINES && std::time::Instant::now() < deadline {
        seen.extend(texts(f.poll().unwrap()));
        std::thread::sleep(Duration::from_micros(200));
        if writer.is_finished() {
            seen.extend(texts(f.poll().unwrap()));
        }
    }
    writer.join().unwrap();
    seen.extend(texts(f.poll().unwrap()));
    let want: Vec<String> = (0..LINES).map(|i| format!("line {i}")).collect();
    assert_eq!(seen, want);
}

/// The sandbox's removal moves its audit directory away: the follower reads what was
/// written before the move from the file it holds open, then nothing, without an error.
#[test]
fn a_moved_directory_is_read_to_its_end_then_quiet() {
    let root = tempfile::tempdir().unwrap();
    let live = root.path().join("audit");
    std::fs::create_dir(&live).unwrap();
    let path = live.join("audit.jsonl");
    let mut w = std::fs::File::create(&path).unwrap();
    w.write_all(b"a\n").unwrap();
    let mut f = Follower::new(&path);
    assert_eq!(texts(f.poll().unwrap()), ["a"]);
    w.write_all(b"b\n").unwrap();
    std::fs::rename(&live, root.path().join("kept")).unwrap();
    assert_eq!(texts(f.poll().unwrap()), ["b"]);
    assert!(f.poll().unwrap().is_empty());
}

#[test]
fn an_asked_host_says_how_to_answer_its_item() {
    let mut r = rec(Kind::Connect, Verdict::Deny, Some("approval-required"));
    r.approval = Some("3f2a9c1d".into());
    let text = show(&line(&r));
    assert!(
        text.ends_with(
            "\n    to allow: airlock approve 3f2a9c1d --once (or --session); to refuse: airlock deny 3f2a9c1d --reason \"…\""
        ),
        "{text}"
    );
    // Without an item (the session's inbox was full): the host's own policy change.
    r.approval = None;
    assert!(show(&line(&r)).contains("add \"evil.example\" to [network] allow"));
}
