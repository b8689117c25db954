use super::*;
use serde_json::json;

fn line(reason: &str, host: &str, port: u16, method: &str, path: &str, ts: &str) -> Value {
    json!({"ts": ts, "decision": "deny", "reason": reason, "host": host, "port": port,
           "method": method, "path": path, "kind": "http"})
}

fn read(lines: &[Value]) -> Suggestion {
    suggest(lines.iter().filter_map(Refused::from_line))
}

#[test]
fn refusals_become_the_fewest_exact_lines_and_hard_denies_none() {
    let t1 = "2026-11-28T10:00:00.000Z";
    let t2 = "2026-11-28T11:00:00.000Z";
    let lines = [
        line("blocked-by-policy", "pypi.org", 443, "CONNECT", "", t1),
        line("blocked-by-policy", "pypi.org", 443, "CONNECT", "", t2),
        line(
            "blocked-by-policy",
            "api.example.com",
            8443,
            "CONNECT",
            "",
            t1,
        ),
        line("blocked-port", "git.example.com", 22, "CONNECT", "", t1),
        line("blocked-ip-literal", "2001:db8::1", 8443, "CONNECT", "", t1),
        line(
            "read-only-host",
            "api.example.com",
            443,
            "POST",
            "/v1/items/7?x=1",
            t1,
        ),
        line(
            "read-only-host",
            "api.example.com",
            443,
            "post",
            "/v1/items/8",
            t2,
        ),
        line(
            "read-only-host",
            "uploads.example.com",
            443,
            "PUT",
            "/a/b",
            t1,
        ),
        line("upgrade-denied", "ws.example.com", 443, "GET", "/", t1),
        line("denied-by-rule", "bad.example.com", 443, "CONNECT", "", t1),
        line(
            "blocked-metadata-address",
            "169.254.169.254",
            80,
            "GET",
            "/",
            t1,
        ),
        line("credential-leak", "evil.example", 443, "POST", "/", t1),
        // Allowed lines, and a line without a reason, are not refusals.
        json!({"ts": t1, "decision": "allow", "host": "ok.example", "port": 443}),
        json!({"ts": t1, "decision": "deny", "host": "x.example"}),
        // A folded line counts its denials.
        json!({"ts": t2, "decision": "deny", "event": "suppressed", "reason": "blocked-by-policy",
               "host": "flood.example", "port": 443, "count": 300, "since": t1, "kind": "connect"}),
        // Report mode: what enforce would have refused.
        json!({"ts": t1, "decision": "report", "reason": "blocked-by-policy",
               "host": "report.example", "port": 443, "kind": "connect"}),
    ];
    let s = read(&lines);
    assert_eq!(s.refusals, 12 + 300 + 1);
    let allow: Vec<&str> = s.network["allow"].keys().map(String::as_str).collect();
    assert_eq!(
        allow,
        [
            "[2001:db8::1]:8443",
            "api.example.com:8443",
            "flood.example",
            "git.example.com:22",
            "pypi.org",
            "report.example"
        ]
    );
    let pypi = &s.network["allow"]["pypi.org"];
    assert_eq!((pypi.count, pypi.first_ms < pypi.last_ms), (2, true));
    assert_eq!(s.network["allow"]["flood.example"].count, 300);
    assert_eq!(
        s.network["websocket"].keys().collect::<Vec<_>>(),
        ["ws.example.com"]
    );
    // One rule per host and method, its path no wider than the paths seen.
    let rules: Vec<(&str, &str, &str)> = s
        .rules
        .iter()
        .map(|r| (r.host.as_str(), r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        rules,
        [
            ("api.example.com", "POST", "/v1/items/**"),
            ("uploads.example.com", "PUT", "/a/b")
        ]
    );
    assert!(s.edits.keys().any(|e| e.contains("[network] deny entry")));
    let never: Vec<&str> = s.never.keys().map(String::as_str).collect();
    assert_eq!(never, ["blocked-metadata-address", "credential-leak"]);

    let text = render(&s, "fix-login");
    assert!(text.contains("\n[network]\nallow = [\n"), "{text}");
    assert!(text.contains("\"pypi.org\","), "{text}");
    assert!(
        text.contains("2 refusals (blocked-by-policy), last 2026-11-28T11:00:00.000Z"),
        "{text}"
    );
    assert!(text.contains("[[rules]]\nhost = \"api.example.com\"\nmethod = \"POST\"\npath = \"/v1/items/**\"\naction = \"allow\""), "{text}");
    assert!(
        text.contains("#   blocked-metadata-address: 1 refusal"),
        "{text}"
    );
    assert!(
        !text.contains("169.254.169.254\","),
        "a hard deny is never a line: {text}"
    );
}

#[test]
fn a_path_glob_is_literal_up_to_the_first_segment_a_glob_would_read() {
    let g = |ps: &[&str]| path_glob(&ps.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>());
    assert_eq!(g(&["/a/b"]), "/a/b");
    assert_eq!(g(&["/a/b?q=1", "/a/b"]), "/a/b");
    assert_eq!(g(&["/a/b", "/a/c"]), "/a/**");
    assert_eq!(g(&["/a/b", "/x"]), "/**");
    assert_eq!(g(&["/a/*/c"]), "/a/**");
    assert_eq!(g(&["/a/%2e%2e/c"]), "/a/**");
    assert_eq!(g(&["/a/../c"]), "/a/**");
    assert_eq!(g(&["/a//c"]), "/a/**");
    assert_eq!(g(&["/[x]"]), "/**");
    assert_eq!(g(&[]), "/**");
}

#[test]
fn an_empty_log_suggests_nothing() {
    let s = read(&[]);
    assert_eq!(s.refusals, 0);
    assert!(render(&s, "x").contains("nothing to suggest"));
}

#[test]
fn since_is_a_span_back_from_now_or_a_log_time() {
    let now = 10 * 86_400_000;
    assert_eq!(since_ms("90s", now), Ok(now - 90_000));
    assert_eq!(since_ms("30m", now), Ok(now - 1_800_000));
    assert_eq!(since_ms("2h", now), Ok(now - 7_200_000));
    assert_eq!(since_ms("7d", now), Ok(now - 7 * 86_400_000));
    assert_eq!(since_ms("1970-01-01T00:00:01.000Z", now), Ok(1_000));
    for bad in ["", "h", "2", "2w", "-2h", "yesterday", "2026-11-28"] {
        assert!(since_ms(bad, now).is_err(), "{bad}");
    }
}
