//! The GitHub token on the REST API (issue 14 item 4): the agent may open a pull request
//! for its repository and nothing else; any other repository gets no token, and a write to
//! one is refused. The fake `api.github.com` logs what it received.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;

use crate::common::*;
use airlock_tests::topology::{GITHUB_HOST, GITHUB_TOKEN};

fn policy(token_file: &std::path::Path) -> String {
    format!(
        r#"
[sandbox]
name = "nstest"

[network]
allow = ["{GITHUB_HOST}", "api.github.com"]

[[credentials]]
name = "github"
source = {{ file = "{}" }}
hosts = ["{GITHUB_HOST}"]
header = "authorization"
format = "git-basic"

[git]
repositories = ["github.com/acme/app"]
"#,
        token_file.display()
    )
}

fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or("<missing>")
}

#[test]
fn the_agent_opens_a_pull_request_and_nothing_else_with_the_token() {
    let world = world();
    let token_file = world.dir().join("github_token");
    std::fs::write(&token_file, GITHUB_TOKEN).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o400)).unwrap();
    let airlock = Airlock::new(&world, &policy(&token_file));
    let c = "curl -sS --max-time 10 -o /dev/null -w '%{http_code}:%header{x-airlock-error}'";
    let script = format!(
        r#"
echo pr=$({c} -X POST -H 'Authorization: token attacker-token' -d '{{"title":"fix","head":"sandbox/nstest/fix","base":"main"}}' https://api.github.com/repos/acme/app/pulls)
echo view=$({c} https://api.github.com/repos/acme/app/pulls/1)
echo other-read=$({c} -H 'Authorization: token attacker-token' https://api.github.com/repos/other/repo/pulls)
echo other-comment=$({c} -X POST -d '{{"body":"hi"}}' https://api.github.com/repos/attacker/x/issues/1/comments)
echo merge=$({c} -X PUT https://api.github.com/repos/acme/app/pulls/1/merge)
"#
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        !text.contains(GITHUB_TOKEN),
        "the agent saw the token:\n{text}"
    );
    for (name, want) in [
        ("other-comment", "403:request-denied-by-rule"),
        ("merge", "403:request-denied-by-rule"),
    ] {
        assert_eq!(line(&text, name), want, "{name}:\n{text}\n{}", stderr(&out));
    }
    for name in ["pr", "view", "other-read"] {
        assert!(
            !line(&text, name).starts_with("403") && !line(&text, name).starts_with("000"),
            "{name} was refused:\n{text}\n{}",
            stderr(&out)
        );
    }
    let upstream = world.upstream_log().unwrap();
    let seen = |method: &str, path: &str| {
        upstream
            .iter()
            .find(|l| l["kind"] == "http" && l["method"] == method && l["path"] == path)
            .cloned()
    };
    let bearer = format!("Bearer {GITHUB_TOKEN}");
    let pr = seen("POST", "/repos/acme/app/pulls").expect("the pull request reached GitHub");
    assert_eq!(pr["headers"]["authorization"], bearer.as_str(), "{pr}");
    let view = seen("GET", "/repos/acme/app/pulls/1").expect("the read reached GitHub");
    assert_eq!(view["headers"]["authorization"], bearer.as_str(), "{view}");
    let other = seen("GET", "/repos/other/repo/pulls").expect("the other read reached GitHub");
    assert!(
        other["headers"].get("authorization").is_none(),
        "another repository got a token: {other}"
    );
    assert!(seen("POST", "/repos/attacker/x/issues/1/comments").is_none());
    assert!(seen("PUT", "/repos/acme/app/pulls/1/merge").is_none());
    let audit = airlock.audit();
    assert!(
        audit.iter().any(|l| l["path"] == "/repos/acme/app/pulls"
            && l["credential"] == "github"
            && l["intercepted"] == true),
        "{audit:?}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l["path"] == "/repos/attacker/x/issues/1/comments"
                && l["reason"] == "request-denied-by-rule"
                && l["rule"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("github api"))),
        "{audit:?}"
    );
}
