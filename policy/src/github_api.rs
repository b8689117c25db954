//! Where the git credential acts on the GitHub REST API: the pull requests and issues of
//! the authorized repositories, so an honest agent can open a pull request for its branch,
//! and nothing else.
//!
//! A `git-basic` credential bound to `github.com` is also bound to `api.github.com` (the
//! agent's own `authorization` there is always removed). What the token may do for one
//! request there ([`Policy::github_api_use`]):
//!
//! | request | the token |
//! |---|---|
//! | a read (`GET`, `HEAD`, `OPTIONS`) under `/repos/<owner>/<repo>/` of a `[git]` repository | injected ([`ApiUse::Token`]) |
//! | `POST` `pulls`, `issues`, `pulls/<n>/comments`, `pulls/<n>/reviews`, `issues/<n>/comments`; `PATCH` `pulls/<n>`, `issues/<n>`, `pulls/comments/<id>`, `issues/comments/<id>` of a `[git]` repository | injected |
//! | any other write under `/repos/<owner>/<repo>` or `/repositories/<id>` (another repository, a merge, a ref, settings, an id the proxy cannot check) | refused ([`ApiUse::Refused`]) |
//! | anything else (reads of other repositories, `/user`, `/graphql`, ...) | not sent ([`ApiUse::Anonymous`]) |
//!
//! Reviews are still judged by the `github` preset when it is on (no approvals). Paths are
//! read as written: a segment with anything but `[A-Za-z0-9._-]` (percent escapes
//! included) never gets the token, and a write there is refused. GraphQL
//! (`gh pr create` uses it) is not covered: its repository is a node id the proxy cannot
//! check, so it goes without the token; the REST form works.

use crate::host::Host;
use crate::model::{CredentialFormat, Policy};

/// The host git repositories live on.
pub const GITHUB_HOST: &str = "github.com";
/// Its REST API host.
pub const API_HOST: &str = "api.github.com";

/// What the GitHub token may do for one request on [`API_HOST`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiUse {
    /// A read, or a pull-request/issue write, of an authorized repository: injected.
    Token,
    /// Anything else that may go: it goes without the token.
    Anonymous,
    /// A write the token does not cover, to a repository path: refused.
    Refused,
}

/// The rule named in the audit line and the 403 of a refused API write.
pub const REFUSED_RULE: &str =
    "github api: the token writes only pull requests, issues and comments of [git] repositories";

impl Policy {
    /// Whether `host` is [`API_HOST`] and a `git-basic` credential is bound to
    /// [`GITHUB_HOST`] (so the proxy intercepts it and judges each request).
    #[must_use]
    pub fn github_api_bound(&self, host: &Host) -> bool {
        host.as_str() == API_HOST
            && Host::parse(GITHUB_HOST).is_ok_and(|gh| {
                self.credentials
                    .iter()
                    .any(|c| c.format == CredentialFormat::GitBasic && c.applies_to(&gh))
            })
    }

    /// What the token may do for `method` on `path` (the path without the query).
    #[must_use]
    pub fn github_api_use(&self, method: &str, path: &str) -> ApiUse {
        let read = ["GET", "HEAD", "OPTIONS"]
            .iter()
            .any(|m| method.eq_ignore_ascii_case(m));
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let repo_path = matches!(segments.first(), Some(&("repos" | "repositories")));
        let plain = segments.iter().all(|s| plain_segment(s));
        let authorized = plain
            && segments.first() == Some(&"repos")
            && segments.len() >= 3
            && self.git.repositories.contains(&format!(
                "{GITHUB_HOST}/{}/{}",
                segments[1].to_ascii_lowercase(),
                segments[2].to_ascii_lowercase()
            ));
        match (read, authorized) {
            (true, true) => ApiUse::Token,
            (true, false) => ApiUse::Anonymous,
            (false, true) if writes_a_pull_request(method, &segments[3..]) => ApiUse::Token,
            (false, _) if repo_path || !plain => ApiUse::Refused,
            (false, _) => ApiUse::Anonymous,
        }
    }
}

/// A path segment read the same by every parser: `[A-Za-z0-9._-]`, not `.` or `..`.
fn plain_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The pull-request and issue writes the token covers (`rest`: after `/repos/o/r`).
fn writes_a_pull_request(method: &str, rest: &[&str]) -> bool {
    let post = method.eq_ignore_ascii_case("POST");
    let patch = method.eq_ignore_ascii_case("PATCH");
    match rest {
        ["pulls" | "issues"] => post,
        ["pulls", n, "comments" | "reviews"] | ["issues", n, "comments"] => post && number(n),
        ["pulls" | "issues", n] => patch && number(n),
        ["pulls" | "issues", "comments", id] => patch && number(id),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn policy(format: &str) -> Policy {
        Policy::parse(
            &format!(
                r#"
[sandbox]
name = "t"
[network]
allow = ["github.com", "api.github.com"]
[[credentials]]
name = "github"
source = {{ env = "G" }}
hosts = ["github.com"]
header = "authorization"
format = "{format}"
[git]
repositories = ["github.com/acme/app"]
"#
            ),
            Path::new("p.toml"),
        )
        .unwrap()
    }

    #[test]
    fn the_api_host_is_bound_only_through_a_git_credential_for_github() {
        let p = policy("git-basic");
        assert!(p.github_api_bound(&Host::parse("api.github.com").unwrap()));
        assert!(!p.github_api_bound(&Host::parse("github.com").unwrap()));
        assert!(!p.github_api_bound(&Host::parse("api.github.com.evil").unwrap()));
        let p = policy("Bearer {}");
        assert!(!p.github_api_bound(&Host::parse("api.github.com").unwrap()));
    }

    #[test]
    fn the_token_opens_pull_requests_of_authorized_repositories_and_nothing_else() {
        let p = policy("git-basic");
        for (method, path, want) in [
            ("POST", "/repos/acme/app/pulls", ApiUse::Token),
            ("POST", "/repos/ACME/App/pulls", ApiUse::Token),
            ("GET", "/repos/acme/app/pulls/3", ApiUse::Token),
            ("GET", "/repos/acme/app/contents/README.md", ApiUse::Token),
            ("PATCH", "/repos/acme/app/pulls/3", ApiUse::Token),
            ("POST", "/repos/acme/app/issues/3/comments", ApiUse::Token),
            ("POST", "/repos/acme/app/pulls/3/reviews", ApiUse::Token),
            ("PATCH", "/repos/acme/app/issues/comments/99", ApiUse::Token),
            // Not what the token is lent for.
            ("PUT", "/repos/acme/app/pulls/3/merge", ApiUse::Refused),
            ("POST", "/repos/acme/app/git/refs", ApiUse::Refused),
            ("DELETE", "/repos/acme/app", ApiUse::Refused),
            ("PATCH", "/repos/acme/app/pulls/x", ApiUse::Refused),
            // Another repository.
            (
                "POST",
                "/repos/attacker/x/issues/1/comments",
                ApiUse::Refused,
            ),
            ("POST", "/repos/acme/other/pulls", ApiUse::Refused),
            ("POST", "/repositories/123/pulls", ApiUse::Refused),
            ("GET", "/repos/attacker/x/pulls", ApiUse::Anonymous),
            // Spellings another parser may read differently.
            ("POST", "/repos/acme%2fapp/pulls", ApiUse::Refused),
            ("POST", "/repos/acme/app/../x/pulls", ApiUse::Refused),
            ("GET", "/repos/acme/app%2F..%2Fx/pulls", ApiUse::Anonymous),
            // Outside repositories.
            ("GET", "/user", ApiUse::Anonymous),
            ("POST", "/graphql", ApiUse::Anonymous),
        ] {
            assert_eq!(p.github_api_use(method, path), want, "{method} {path}");
        }
    }
}
