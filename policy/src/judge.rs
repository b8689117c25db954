//! The L7 decision on one request: [`Policy::judge`] and its companions, which read the
//! whole policy (read-only hosts, writable hosts, passthrough, credentials) with the rule
//! values of [`crate::l7`] and the GitHub judges of [`crate::github`].
//!
//! The proxy asks, in this order, for every request on an intercepted connection:
//! 1. [`Policy::judge`] on the request head. `Deny` is final. `Pass` is final unless
//! 2. [`Policy::body_needed`] returns `Some(cap)`: the request's body must then be read
//!    (at most `cap` bytes after removing the transfer coding; a larger body, or one with
//!    a `content-encoding`, is refused with [`Reason::RequestDeniedByRule`]) and
//! 3. [`Policy::judge_body`] decides (it re-applies [`Policy::judge`] first).
//!
//! The semantics of the rules are in [`crate::l7`]'s docs.

use crate::github;
use crate::github_api::ApiUse;
use crate::host::Host;
use crate::l7::READ_METHODS;
use crate::l7::{Action, BodyJudge, BodyRule, L7Verdict, Preset, RequestView};
use crate::model::Policy;
use crate::path::{PathForms, percent_decode};
use crate::reason::Reason;

/// A read method whose query cannot carry a `_method` override (no percent-encoding, and no
/// "method" in any case): [`writes`] would say no without [`methods_of`].
fn plainly_reads(req: &RequestView<'_>) -> bool {
    READ_METHODS
        .iter()
        .any(|m| req.method.eq_ignore_ascii_case(m))
        && req.query.is_none_or(|q| {
            !q.contains('%')
                && !q
                    .as_bytes()
                    .windows(6)
                    .any(|w| w.eq_ignore_ascii_case(b"method"))
        })
}

/// Whether any of the request's methods ([`methods_of`]) is not a read.
fn writes(methods: &[String]) -> bool {
    methods.iter().any(|m| !READ_METHODS.contains(&m.as_str()))
}

/// A git smart-HTTP fetch by its head: `POST …/git-upload-pack` (the request that carries
/// `want` and `have` lines). Git reads with it, so a read-only host that serves git
/// ([`Policy::serves_git`]) accepts it, once the proxy has read its body and found a fetch
/// request there ([`Policy::fetch_exempt`]).
fn is_git_fetch(req: &RequestView<'_>) -> bool {
    req.method.eq_ignore_ascii_case("POST")
        && req.query.is_none_or(str::is_empty)
        && req
            .path
            .rsplit('/')
            .next()
            .is_some_and(|last| last == "git-upload-pack")
}

/// The request's methods: the method uppercased, and a `_method` query override.
fn methods_of(req: &RequestView<'_>) -> Vec<String> {
    let mut out = vec![req.method.to_ascii_uppercase()];
    let decode = |s: &str| {
        String::from_utf8_lossy(&percent_decode(s.replace('+', " ").as_bytes()))
            .trim()
            .to_ascii_uppercase()
    };
    for pair in req.query.unwrap_or("").split(['&', ';']) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(key) == "_METHOD" {
            let value = decode(value);
            if !out.contains(&value) {
                out.push(value);
            }
        }
    }
    out
}

impl Policy {
    /// Whether a host is listed in `network.passthrough` (never intercepted).
    #[must_use]
    pub fn is_passthrough(&self, host: &Host) -> bool {
        self.network
            .passthrough
            .iter()
            .any(|r| r.matches_host(host))
    }

    /// Whether the proxy must intercept (TLS-terminate) connections to `host`: every host
    /// except `network.passthrough` ones. Methods can only be enforced on requests the
    /// proxy reads, so an allowed host is inspected unless the policy says, explicitly,
    /// that it must not be (a client that pins certificates).
    #[must_use]
    pub fn intercepts(&self, host: &Host) -> bool {
        !self.is_passthrough(host)
    }

    /// Whether `host` accepts any method: listed in `network.writable`, or the GitHub API
    /// host under the `github` preset (whose deny rules and body judges decide its writes).
    /// Every other host is read-only ([`READ_METHODS`] and git smart-HTTP fetches), unless
    /// an `allow` rule of `[[rules]]` matches the request.
    #[must_use]
    pub fn is_writable(&self, host: &Host) -> bool {
        self.network.writable.iter().any(|r| r.matches_host(host))
            || (self.l7.presets.contains(&Preset::Github) && host.as_str() == github::API_HOST)
    }

    /// Whether `host` serves git smart-HTTP fetches: the host of a `[git] repositories`
    /// entry, a public forge of [`crate::GIT_FORGES`], or a host `network.git_hosts`
    /// names.
    #[must_use]
    pub fn serves_git(&self, host: &Host) -> bool {
        let h = host.as_str();
        self.git
            .repositories
            .iter()
            .any(|r| r.split('/').next() == Some(h))
            || crate::model::GIT_FORGES.contains(&h)
            || self.network.git_hosts.iter().any(|r| r.matches_host(host))
    }

    /// A git fetch ([`is_git_fetch`]) to a host that serves git.
    fn git_fetch(&self, req: &RequestView<'_>) -> bool {
        is_git_fetch(req) && self.serves_git(req.host)
    }

    /// Whether `req` passes [`Policy::judge`] as a git fetch on a host that is otherwise
    /// read-only: its body must then be a git fetch request (pkt-lines of `want`, `have`,
    /// `done` and their companions, bounded), which the proxy reads and checks before
    /// anything is sent; any other body is a write (`read-only-host`).
    #[must_use]
    pub fn fetch_exempt(&self, req: &RequestView<'_>) -> bool {
        self.git_fetch(req) && !self.is_writable(req.host) && !self.is_passthrough(req.host)
    }

    /// The decision on a read (`GET`, `HEAD`, `OPTIONS`, no override naming a write) that
    /// carries a body (a `content-length` above 0, or a chunked one): on a read-only host it
    /// is refused `body-on-read` (a body is what a write sends, and an upstream that ignores
    /// a read's body may take it for a request of its own); on a writable or passthrough
    /// host it passes. A write is judged by [`Policy::judge`], never here.
    #[must_use]
    pub fn judge_read_body(&self, req: &RequestView<'_>) -> L7Verdict {
        let host = req.host;
        if self.is_passthrough(host) || self.is_writable(host) || writes(&methods_of(req)) {
            return L7Verdict::Pass { rule: None };
        }
        L7Verdict::Deny {
            reason: Reason::BodyOnRead,
            rule: format!(
                "{host}: read-only (not in network.writable): a {} carries no body",
                req.method.to_ascii_uppercase()
            ),
        }
    }

    /// A pull-request or issue write of a `[git]` repository on the GitHub API with the git
    /// credential bound ([`Policy::github_api_use`]): the one write that credential exists
    /// for, so a read-only `api.github.com` still accepts it.
    fn github_token_write(&self, req: &RequestView<'_>) -> bool {
        self.github_api_bound(req.host)
            && req.query.is_none_or(str::is_empty)
            && self.github_api_use(req.method, req.path) == ApiUse::Token
    }

    /// The L7 decision on a request head (see the module docs). A `Pass` is final unless
    /// [`Policy::body_needed`] asks for the body.
    #[must_use]
    pub fn judge(&self, req: &RequestView<'_>) -> L7Verdict {
        let host = req.host;
        if self.is_passthrough(host) {
            return L7Verdict::Pass { rule: None };
        }
        // The common request (a read, no method override possible in its query, on a host
        // without rules) passes without an allocation.
        if plainly_reads(req) && !self.l7.has_rules_for(host) {
            return L7Verdict::Pass { rule: None };
        }
        let methods = methods_of(req);
        let read_only = writes(&methods)
            && !self.is_writable(host)
            && !self.git_fetch(req)
            && !self.github_token_write(req);
        if !read_only && !self.l7.has_rules_for(host) {
            return L7Verdict::Pass { rule: None };
        }
        let forms = match PathForms::analyse(req.path) {
            Ok(f) => f,
            Err(e) => return L7Verdict::deny(format!("{host}: {e}")),
        };
        let (mut allows, mut asks) = (Vec::new(), Vec::new());
        for rule in self.l7.all_rules().filter(|r| r.applies_to(host)) {
            match rule.action {
                Action::Deny if rule.matches_any(&methods, &forms) => {
                    return L7Verdict::deny(rule.label());
                }
                Action::Deny => {}
                Action::Allow => allows.push(rule),
                Action::Ask => asks.push(rule),
            }
        }
        // An allow rule that matches is the policy naming this method and path: it may
        // write. An ask rule that matches names it too, once the operator says yes.
        if let Some(rule) = allows.iter().find(|r| r.matches_every(&methods, &forms)) {
            return L7Verdict::Pass {
                rule: Some(rule.label()),
            };
        }
        if let Some(rule) = asks.iter().find(|r| r.matches_every(&methods, &forms)) {
            return L7Verdict::Ask { rule: rule.label() };
        }
        if !allows.is_empty() || !asks.is_empty() {
            return L7Verdict::deny(format!("{host}: no allow rule matches"));
        }
        if read_only {
            return L7Verdict::Deny {
                reason: Reason::ReadOnlyHost,
                rule: format!("{host}: read-only (not in network.writable)"),
            };
        }
        L7Verdict::Pass { rule: None }
    }

    /// `Some(cap)` when [`Policy::judge`] passes this request but its body must be judged
    /// too: the proxy reads at most `cap` bytes (a larger body is denied) and calls
    /// [`Policy::judge_body`]. `None`: the head's verdict is final.
    #[must_use]
    pub fn body_needed(&self, req: &RequestView<'_>) -> Option<usize> {
        // No rule or body judge on the host: nothing to read, without judging the head
        // again (the caller already did) or analysing the path.
        if !self.l7.has_rules_for(req.host)
            || self.is_passthrough(req.host)
            || self.judge(req).is_deny()
        {
            return None;
        }
        let forms = PathForms::analyse(req.path).ok()?;
        let methods = methods_of(req);
        self.body_rules_for(req, &methods, &forms)
            .map(|b| b.cap)
            .max()
    }

    /// The decision on a request with its (decoded, complete) body: [`Policy::judge`]
    /// first, then every body judge that applies. A body over a judge's cap is denied. An
    /// asked head stays [`L7Verdict::Ask`] when its body passes (the proxy took the
    /// operator's answer on the head).
    #[must_use]
    pub fn judge_body(&self, req: &RequestView<'_>, body: &[u8]) -> L7Verdict {
        let verdict = self.judge(req);
        if verdict.is_deny() || self.is_passthrough(req.host) {
            return verdict;
        }
        let Ok(forms) = PathForms::analyse(req.path) else {
            return verdict;
        };
        let methods = methods_of(req);
        for rule in self.body_rules_for(req, &methods, &forms) {
            if req.query.is_some_and(|q| !q.is_empty()) {
                return L7Verdict::deny(format!(
                    "{}: a query string could override the judged body",
                    rule.name
                ));
            }
            if body.len() > rule.cap {
                return L7Verdict::deny(format!(
                    "{}: body larger than {} bytes",
                    rule.name, rule.cap
                ));
            }
            let judged = match rule.judge {
                BodyJudge::GithubGraphql => github::judge_graphql(body),
                BodyJudge::GithubContents => match self.git_rules() {
                    Ok(git) => github::judge_contents(&git, &rule.path, &forms, body),
                    Err(e) => Err(format!("git globs: {e}")),
                },
                BodyJudge::GithubReview => github::judge_review(body),
            };
            if let Err(why) = judged {
                return L7Verdict::deny(format!("{}: {why}", rule.name));
            }
        }
        verdict
    }

    fn body_rules_for<'a>(
        &'a self,
        req: &'a RequestView<'_>,
        methods: &'a [String],
        forms: &'a PathForms,
    ) -> impl Iterator<Item = &'a BodyRule> + 'a {
        self.l7.body_rules.iter().filter(move |b| {
            b.host.matches_host(req.host)
                && methods.iter().any(|m| b.methods.matches(m))
                && forms.all().iter().any(|f| b.path.matches(f))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    pub(crate) fn policy(extra: &str) -> Policy {
        let text = format!("[sandbox]\nname = \"t\"\n{extra}\n");
        Policy::parse(&text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn judge(p: &Policy, host: &str, method: &str, target: &str) -> L7Verdict {
        let host = Host::parse(host).unwrap();
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        p.judge(&RequestView {
            host: &host,
            method,
            path,
            query,
        })
    }

    fn denied_by(v: &L7Verdict) -> &str {
        match v {
            L7Verdict::Deny { reason, rule } => {
                assert_eq!(*reason, Reason::RequestDeniedByRule);
                rule
            }
            v => panic!("passed: {v:?}"),
        }
    }

    const DENY_MERGE: &str = r#"
[network]
writable = ["api.example.com", "other.example.com"]

[[rules]]
name = "no-merge"
host = "api.example.com"
method = "PUT"
path = "/repos/*/*/pulls/*/merge"
"#;

    #[test]
    fn attack_path_spellings_cannot_dodge_a_deny() {
        let p = policy(DENY_MERGE);
        for target in [
            "/repos/a/b/pulls/1/merge",
            "/repos/a/b/pulls/1/merge/",
            "//repos/a/b/pulls/1/merge",
            "/repos//a/b/pulls/1/merge",
            "/repos/a/b/pulls/1/./merge",
            "/repos/a/b/x/../pulls/1/merge",
            "/repos/x/y/../../a/b/pulls/1/merge",
            "/repos/a/b/pulls/1/%2e%2e/1/merge",
            "/REPOS/a/b/Pulls/1/MERGE",
            "/repos/a/b/pulls%2F1%2Fmerge",
            "/repos/a/b/pulls%252F1%252Fmerge",
            "/repos\\a\\b\\pulls\\1\\merge",
            "/repos/a/b/pulls/1/merge;jsessionid=x",
            "/repos/a/b/pulls/1/merge.json",
            "/repos/a/b/pulls/1/m%65rge",
            "/repos/a/b/pulls/1/merge?x=1",
        ] {
            assert_eq!(
                denied_by(&judge(&p, "api.example.com", "PUT", target)),
                "no-merge",
                "{target}"
            );
        }
        // Method case and host spellings do not matter either.
        assert_eq!(
            denied_by(&judge(
                &p,
                "API.Example.COM.",
                "put",
                "/repos/a/b/pulls/1/merge"
            )),
            "no-merge"
        );
        // A method override in the query is judged too.
        assert_eq!(
            denied_by(&judge(
                &p,
                "api.example.com",
                "POST",
                "/repos/a/b/pulls/1/merge?_method=put"
            )),
            "no-merge"
        );
        // What the rule does not cover passes.
        for (m, t) in [
            ("GET", "/repos/a/b/pulls/1/merge"),
            ("PUT", "/repos/a/b/pulls/1"),
            ("PUT", "/repos/a/b/c/pulls/1/merge"),
            ("PUT", "/repos/a/b/pulls/1/merged"),
        ] {
            assert_eq!(
                judge(&p, "api.example.com", m, t),
                L7Verdict::Pass { rule: None },
                "{m} {t}"
            );
        }
        assert!(judge(&p, "other.example.com", "PUT", "/repos/a/b/pulls/1/merge").is_pass());
    }

    #[test]
    fn attack_unjudgeable_paths_are_denied_on_hosts_with_rules() {
        let p = policy(DENY_MERGE);
        for target in [
            "/repos/a/b/pulls/1/merge%00",
            "*",
            "/x%C0%AF",
            "/%252525252F",
        ] {
            let v = judge(&p, "api.example.com", "PUT", target);
            assert!(
                denied_by(&v).starts_with("api.example.com: "),
                "{target}: {v:?}"
            );
        }
        // A host without rules is not judged at all.
        assert!(judge(&p, "free.example.com", "GET", "*").is_pass());
    }

    const ALLOW_LIST: &str = r#"
[[rules]]
host = "api.example.com"
method = ["GET", "post"]
path = "/v1/*"
action = "allow"

[[rules]]
name = "health"
host = "api.example.com"
path = "/health"
action = "allow"

[[rules]]
host = "*.example.com"
method = "DELETE"
path = "/**"
"#;

    #[test]
    fn an_ask_rule_asks_what_no_allow_rule_names_and_a_deny_still_wins() {
        let p = policy(
            "\n[network]\nallow = [\"api.example.com\"]\nwritable = [\"api.example.com\"]\n\n[[rules]]\nhost = \"api.example.com\"\nmethod = \"GET\"\npath = \"/v1/**\"\naction = \"allow\"\n\n[[rules]]\nname = \"publish\"\nhost = \"api.example.com\"\nmethod = \"POST\"\npath = \"/v1/releases\"\naction = \"ask\"\n\n[[rules]]\nhost = \"api.example.com\"\nmethod = \"POST\"\npath = \"/v1/releases/*/assets\"\n",
        );
        assert!(judge(&p, "api.example.com", "GET", "/v1/x").is_pass());
        assert_eq!(
            judge(&p, "api.example.com", "POST", "/v1/releases"),
            L7Verdict::Ask {
                rule: "publish".into()
            }
        );
        // Every method of the request must be one the ask rule names, as for an allow.
        assert!(judge(&p, "api.example.com", "POST", "/v1/releases?_method=DELETE").is_deny());
        assert_eq!(
            denied_by(&judge(
                &p,
                "api.example.com",
                "POST",
                "/v1/releases/1/assets"
            )),
            "api.example.com POST /v1/releases/*/assets"
        );
        assert!(judge(&p, "api.example.com", "POST", "/v1/releases/1").is_deny());
        assert!(judge(&p, "api.example.com", "PUT", "/v1/releases").is_deny());
        let host = Host::parse("api.example.com").unwrap();
        assert!(p.l7.asks(&host, "publish"));
        assert!(!p.l7.asks(&host, "api.example.com GET /v1/**"));
        assert!(p.listing().iter().any(|l| l.rule == "ask publish"));
    }

    #[test]
    fn allow_rules_turn_a_host_into_an_allowlist() {
        let p = policy(ALLOW_LIST);
        assert_eq!(
            judge(&p, "api.example.com", "POST", "/v1/messages"),
            L7Verdict::Pass {
                rule: Some("api.example.com GET,POST /v1/*".into())
            }
        );
        assert_eq!(
            judge(&p, "api.example.com", "PATCH", "/health"),
            L7Verdict::Pass {
                rule: Some("health".into())
            }
        );
        for (m, t) in [
            ("PUT", "/v1/messages"),
            ("GET", "/v1"),
            ("GET", "/v1/a/b"),
            ("GET", "/admin"),
            // An encoded separator makes a second reading that the allow does not cover.
            ("GET", "/v1/messages%2F..%2F..%2Fadmin"),
            ("GET", "/v1/x%2Fy"),
            // Every method of the request must be allowed.
            ("GET", "/v1/messages?_method=PUT"),
        ] {
            assert_eq!(
                denied_by(&judge(&p, "api.example.com", m, t)),
                "api.example.com: no allow rule matches",
                "{m} {t}"
            );
        }
        // Deny wins over allow: DELETE is denied by the *.example.com rule, by its text.
        assert_eq!(
            denied_by(&judge(&p, "api.example.com", "DELETE", "/health")),
            "*.example.com DELETE /**"
        );
        // Hosts with only deny rules are not allowlists.
        assert!(judge(&p, "b.example.com", "GET", "/anything").is_pass());
    }

    #[test]
    fn intercepts_every_host_but_passthrough() {
        let p = policy(
            r#"
[network]
allow = ["api.example.com", "cdn.example.com", "api.anthropic.com", "files.example.org"]
passthrough = ["cdn.example.com", "*.example.org"]

[[credentials]]
preset = "anthropic"
source = { env = "K" }

[[rules]]
host = "*.example.com"
method = "DELETE"
"#,
        );
        let i = |h: &str| p.intercepts(&Host::parse(h).unwrap());
        assert!(i("api.anthropic.com"));
        assert!(i("api.example.com"));
        assert!(!i("cdn.example.com"));
        assert!(!i("files.example.org"));
        assert!(i("pypi.org"));
        // A passthrough host is never judged either (the proxy never sees its requests).
        assert!(judge(&p, "cdn.example.com", "DELETE", "/x").is_pass());
        assert!(!judge(&p, "api.example.com", "DELETE", "/x").is_pass());
    }

    #[test]
    fn attack_method_override_spellings() {
        let p = policy(DENY_MERGE);
        for q in [
            "_method=PUT",
            "_METHOD=put",
            "%5Fmethod=PUT",
            "_method=%50UT",
            "a=1;_method=PUT",
            "_method=PUT+",
        ] {
            let target = format!("/repos/a/b/pulls/1/merge?{q}");
            assert_eq!(
                denied_by(&judge(&p, "api.example.com", "POST", &target)),
                "no-merge",
                "{q}"
            );
        }
    }

    #[test]
    fn without_rules_nothing_is_needed() {
        let p = policy("[network]\nwritable = [\"api.github.com\"]");
        let h = Host::parse("api.github.com").unwrap();
        let req = RequestView {
            host: &h,
            method: "POST",
            path: "/graphql",
            query: None,
        };
        assert!(p.judge(&req).is_pass());
        assert_eq!(p.body_needed(&req), None);
        assert!(p.judge_body(&req, b"not json").is_pass());
    }

    fn read_only_denial(v: &L7Verdict) -> bool {
        matches!(
            v,
            L7Verdict::Deny {
                reason: Reason::ReadOnlyHost,
                ..
            }
        )
    }

    #[test]
    fn attack_writes_to_a_host_allowed_for_reading() {
        // The agent publishes the workspace to a registry it may read from.
        let p = policy("[network]\nallow = [\"registry.npmjs.org\", \"crates.io\"]");
        for (method, path) in [
            ("PUT", "/stolen-workspace"),
            ("POST", "/upload"),
            ("PATCH", "/-/package/x/dist-tags"),
            ("DELETE", "/x/-rev/1"),
            ("put", "/api/v1/crates/new"),
            ("TRACE", "/"),
        ] {
            let v = judge(&p, "registry.npmjs.org", method, path);
            assert!(read_only_denial(&v), "{method} {path}: {v:?}");
        }
        // A read method with a write override is a write, however the override is spelled.
        let h = Host::parse("crates.io").unwrap();
        for query in [
            "_method=PUT",
            "_m%65thod=PUT",
            "%5FMETHOD=put",
            "a=1&_Method+=DELETE",
        ] {
            let v = p.judge(&RequestView {
                host: &h,
                method: "GET",
                path: "/api/v1/crates/new",
                query: Some(query),
            });
            assert!(read_only_denial(&v), "{query}: {v:?}");
        }
        // Reading stays open.
        for method in ["GET", "HEAD", "OPTIONS", "get"] {
            assert!(judge(&p, "registry.npmjs.org", method, "/left-pad").is_pass());
        }
    }

    #[test]
    fn git_fetches_read_only_on_hosts_that_serve_git() {
        let p = policy(
            "[network]\nallow = [\"registry.npmjs.org\", \"github.com\", \"git.corp.example\", \"a.mirror.example\", \"repo.example\"]\ngit_hosts = [\"*.mirror.example\"]\n[git]\nrepositories = [\"git.corp.example/o/r\"]",
        );
        let fetch = |host: &str| judge(&p, host, "POST", "/o/r.git/git-upload-pack");
        // A registry is no git server: its upload-pack path is a write like any POST.
        assert!(read_only_denial(&fetch("registry.npmjs.org")));
        assert!(read_only_denial(&fetch("repo.example")));
        // A public forge, a [git] repository's host, a declared git host.
        for host in ["github.com", "git.corp.example", "a.mirror.example"] {
            assert!(fetch(host).is_pass(), "{host}");
            let h = Host::parse(host).unwrap();
            assert!(p.fetch_exempt(&RequestView {
                host: &h,
                method: "POST",
                path: "/o/r.git/git-upload-pack",
                query: None,
            }));
        }
        // Writable: nothing is exempt (any body may go), so no fetch check either.
        let w = policy("[network]\nallow = [\"github.com\"]\nwritable = [\"github.com\"]");
        let h = Host::parse("github.com").unwrap();
        assert!(!w.fetch_exempt(&RequestView {
            host: &h,
            method: "POST",
            path: "/o/r.git/git-upload-pack",
            query: None,
        }));
    }

    #[test]
    fn a_read_with_a_body_is_refused_on_a_read_only_host_only() {
        let p = policy(
            "[network]\nallow = [\"ro.example\", \"rw.example\", \"pt.example\"]\nwritable = [\"rw.example\"]\npassthrough = [\"pt.example\"]",
        );
        let body = |host: &str, method: &str, query: Option<&str>| {
            let h = Host::parse(host).unwrap();
            p.judge_read_body(&RequestView {
                host: &h,
                method,
                path: "/x",
                query,
            })
        };
        for method in ["GET", "HEAD", "OPTIONS", "get"] {
            match body("ro.example", method, None) {
                L7Verdict::Deny { reason, rule } => {
                    assert_eq!(reason, Reason::BodyOnRead);
                    assert!(rule.starts_with("ro.example: read-only"), "{rule}");
                }
                v => panic!("{method}: {v:?}"),
            }
            assert!(body("rw.example", method, None).is_pass());
            assert!(body("pt.example", method, None).is_pass());
        }
        // A read overridden into a write is judged as the write (`judge`), not here.
        assert!(body("ro.example", "GET", Some("_method=PUT")).is_pass());
        assert!(read_only_denial(&judge(
            &p,
            "ro.example",
            "GET",
            "/x?_method=PUT"
        )));
    }

    #[test]
    fn git_fetches_read_but_pushes_and_look_alikes_write() {
        let p =
            policy("[network]\nallow = [\"git.example.com\"]\ngit_hosts = [\"git.example.com\"]");
        let g = |m: &str, path: &str| judge(&p, "git.example.com", m, path);
        assert!(g("POST", "/o/r.git/git-upload-pack").is_pass());
        assert!(g("POST", "/o/r/git-upload-pack").is_pass());
        assert!(read_only_denial(&g("POST", "/o/r.git/git-receive-pack")));
        assert!(read_only_denial(&g("POST", "/o/r.git/git-upload-pack/x")));
        assert!(read_only_denial(&g("PUT", "/o/r.git/git-upload-pack")));
        // A query could carry a method override: not a plain fetch.
        let h = Host::parse("git.example.com").unwrap();
        let v = p.judge(&RequestView {
            host: &h,
            method: "POST",
            path: "/o/r.git/git-upload-pack",
            query: Some("_method=DELETE"),
        });
        assert!(read_only_denial(&v), "{v:?}");
    }

    #[test]
    fn writable_hosts_allow_rules_and_the_github_preset_may_write() {
        let p = policy(
            r#"
[network]
allow = ["api.anthropic.com", "*.up.example", "api.github.com", "static.example"]
writable = ["api.anthropic.com", "*.up.example"]

[l7]
presets = ["github"]

[[rules]]
host = "static.example"
method = "POST"
path = "/v1/telemetry"
action = "allow"

[[rules]]
host = "static.example"
method = ["GET", "HEAD"]
action = "allow"

[[rules]]
host = "*.up.example"
method = "DELETE"
"#,
        );
        assert!(judge(&p, "api.anthropic.com", "POST", "/v1/messages").is_pass());
        assert!(judge(&p, "a.up.example", "PUT", "/x").is_pass());
        // Writable is not a bypass of the deny rules.
        assert!(!judge(&p, "a.up.example", "DELETE", "/x").is_pass());
        assert!(!p.is_writable(&Host::parse("up.example").unwrap()));
        // An allow rule names exactly the write it permits.
        assert!(judge(&p, "static.example", "POST", "/v1/telemetry").is_pass());
        assert!(!judge(&p, "static.example", "POST", "/v1/other").is_pass());
        assert!(judge(&p, "static.example", "GET", "/v1/other").is_pass());
        // The preset's host: its own deny rules and body judges decide.
        assert!(judge(&p, "api.github.com", "POST", "/repos/o/r/pulls").is_pass());
        assert!(!judge(&p, "api.github.com", "PUT", "/repos/o/r/pulls/1/merge").is_pass());
    }

    #[test]
    fn a_passthrough_host_is_never_judged_read_only() {
        let p =
            policy("[network]\nallow = [\"pinned.example\"]\npassthrough = [\"pinned.example\"]");
        assert!(judge(&p, "pinned.example", "POST", "/x").is_pass());
        assert!(!p.intercepts(&Host::parse("pinned.example").unwrap()));
    }
}
