//! `airlock policy check`: what the revision in force decides for one URL, with the same
//! pure steps a request meets (the admission's policy step, `admission::policy`, for the host and port, the policy's request
//! judge for the method and path of an intercepted host). Nothing is resolved or sent: the
//! address checks (private, metadata) that follow a lookup are not part of a dry run, and
//! the message says so for an allowed host.

use airlock_control::admin::{CheckQuery, Checked, ErrorBody, ErrorCode};
use airlock_policy::l7::{L7Verdict, RequestView};
use airlock_policy::reason::Reason;

use crate::admission::{self, Port};
use crate::audit::Verdict;
use crate::decide::{self, Target};
use crate::snapshot::Rules;

/// The verdict of `rules` (revision `revision`) for `q`.
///
/// # Errors
/// [`ErrorCode::BadRequest`] for a URL that names no usable host.
pub fn check(rules: &Rules, revision: u64, q: &CheckQuery) -> Result<Checked, ErrorBody> {
    let (target, path, query) = parse(&q.url)?;
    let policy = &rules.policy;
    let intercepted = policy.intercepts(&target.host);
    // The name step is not taken: it would spend the zone's budget of the agent's names.
    let d = admission::policy(policy, &target, Port::Exact);
    let (decided, reason) = d.verdict();
    let passes = d.refused().is_none();
    let verdict = |v: Verdict| v.as_str().to_owned();
    let host = format!("{}:{}", target.host.as_str(), target.port);
    if !passes || q.method.is_none() || !intercepted {
        let message = match (passes, reason) {
            _ if d.outcome == admission::Outcome::Ask => format!(
                "{host} is not in the policy, which asks about such hosts: the agent is refused approval-required and the item waits for the operator (airlock approvals; approve ID or deny ID)"
            ),
            (false, Some(r)) => format!("{host} is refused ({}): {}", r.as_str(), r.hint()),
            (true, Some(r)) => format!(
                "{host} would be refused ({}) but the sandbox only reports: {}",
                r.as_str(),
                r.hint()
            ),
            _ if !intercepted => format!(
                "{host} is allowed as passthrough: its tunnel is not inspected, no request rule applies (its addresses are still checked when it is resolved)"
            ),
            _ => format!(
                "{host} is allowed (its addresses are still checked when it is resolved); give a method to judge a request"
            ),
        };
        return Ok(Checked {
            revision,
            decision: verdict(decided),
            stage: "host".to_owned(),
            reason: reason.map(|r| r.as_str().to_owned()),
            rule: d.rule,
            intercepted,
            message,
        });
    }
    let method = q.method.as_deref().unwrap_or("GET");
    let view = RequestView {
        host: &target.host,
        method,
        path: &path,
        query: query.as_deref(),
    };
    Ok(match policy.judge(&view) {
        L7Verdict::Pass { rule } => Checked {
            revision,
            decision: verdict(Verdict::Allow),
            stage: "request".to_owned(),
            reason: None,
            message: format!(
                "{method} {host}{path} is allowed{}",
                rule.as_deref()
                    .map_or_else(String::new, |r| format!(" by {r}"))
            ),
            rule: rule.or(d.rule),
            intercepted,
        },
        L7Verdict::Ask { rule } => Checked {
            revision,
            decision: verdict(Verdict::Deny),
            stage: "request".to_owned(),
            reason: Some(Reason::ApprovalRequired.as_str().to_owned()),
            message: format!(
                "{method} {host}{path} is asked of the operator by the ask rule {rule}: refused approval-required until a session's approval, answered out of band"
            ),
            rule: Some(rule),
            intercepted,
        },
        L7Verdict::Deny { reason, rule } => Checked {
            revision,
            decision: verdict(Verdict::Deny),
            stage: "request".to_owned(),
            reason: Some(reason.as_str().to_owned()),
            message: format!(
                "{method} {host}{path} is refused by {rule} ({}): {}",
                reason.as_str(),
                reason.hint()
            ),
            rule: Some(rule),
            intercepted,
        },
    })
}

/// The target, path and query of `url`: `scheme://host[:port]/path?query` or `host:port`.
fn parse(url: &str) -> Result<(Target, String, Option<String>), ErrorBody> {
    let bad = |why: String| ErrorBody {
        code: ErrorCode::BadRequest,
        message: format!("{url:?} {why}: give https://host/path, http://host/path or host:port"),
    };
    if !url.contains("://") {
        let t = decide::connect_target(url)
            .map_err(|r| bad(format!("is not usable ({})", r.reason.as_str())))?;
        return Ok((t, "/".to_owned(), None));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| bad(format!("is not a URL ({e})")))?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        Some("http") => 80,
        other => return Err(bad(format!("has the scheme {other:?}"))),
    };
    let authority = uri
        .authority()
        .ok_or_else(|| bad("names no host".to_owned()))?;
    let hostport = match authority.port_u16() {
        Some(_) => authority.as_str().to_owned(),
        None => format!("{}:{default_port}", authority.as_str()),
    };
    let t = decide::connect_target(&hostport)
        .map_err(|r| bad(format!("is not usable ({})", r.reason.as_str())))?;
    let path = if uri.path().is_empty() {
        "/".to_owned()
    } else {
        uri.path().to_owned()
    };
    Ok((t, path, uri.query().map(str::to_owned)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credentials;

    fn rules(extra: &str) -> Rules {
        let p = airlock_policy::Policy::parse(
            &format!(
                "[sandbox]\nname = \"box\"\n\n[network]\nallow = [\"api.example\", \"raw.example\"]\npassthrough = [\"raw.example\"]\n{extra}"
            ),
            std::path::Path::new("p.toml"),
        )
        .unwrap();
        Rules::new(p, Credentials::none()).unwrap()
    }

    fn q(url: &str, method: Option<&str>) -> CheckQuery {
        CheckQuery {
            url: url.into(),
            method: method.map(str::to_owned),
        }
    }

    #[test]
    fn the_host_step_decides_first_and_names_its_rule() {
        let r = rules("");
        let c = check(&r, 3, &q("https://evil.example/x", Some("GET"))).unwrap();
        assert_eq!((c.decision.as_str(), c.stage.as_str()), ("deny", "host"));
        assert_eq!(c.reason.as_deref(), Some("blocked-by-policy"));
        assert_eq!(c.revision, 3);
        let c = check(&r, 3, &q("api.example:443", None)).unwrap();
        assert_eq!(c.decision, "allow");
        assert_eq!(c.rule.as_deref(), Some("api.example"));
        let c = check(&r, 3, &q("https://raw.example/", Some("POST"))).unwrap();
        assert_eq!((c.decision.as_str(), c.intercepted), ("allow", false));
    }

    #[test]
    fn a_request_to_an_intercepted_host_meets_the_request_rules() {
        // A host not declared writable is read-only: a POST is refused at the request step.
        let r = rules("");
        let c = check(&r, 1, &q("https://api.example/v1/things", Some("POST"))).unwrap();
        assert_eq!(
            (c.decision.as_str(), c.stage.as_str()),
            ("deny", "request"),
            "{c:?}"
        );
        assert!(c.reason.is_some());
        let c = check(&r, 1, &q("https://api.example/v1/things", Some("GET"))).unwrap();
        assert_eq!(c.decision, "allow", "{c:?}");
    }

    #[test]
    fn urls_that_name_no_host_are_refused_clearly() {
        let r = rules("");
        for u in ["ftp://api.example/", "https:///x", "not a url", "host"] {
            let e = check(&r, 1, &q(u, None)).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{u}");
        }
    }
}
