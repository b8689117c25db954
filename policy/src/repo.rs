//! Repository names read one way: `host/owner/repo`.
//!
//! Three parts of airlock compare repository names: the policy's `[git] repositories`
//! (written by a person), the git API's push judge (from a workspace remote URL) and the
//! proxy's smart-HTTP check (from a request's host and path). Each calls [`repository_id`],
//! so a repository cannot be authorized under one spelling and refused, or reached, under
//! another. The host is read by [`Host::parse`] (case, a trailing dot and Unicode/IDNA
//! spellings never matter: `GitHub.com.` and `ｇｉｔｈｕｂ.com` are `github.com`) and must be
//! a name, not an IP address; owner and repository are `[A-Za-z0-9._-]`, neither `.` nor
//! `..`, compared lowercase (as GitHub and GitLab do); one `.git` suffix of the repository,
//! in any case, is dropped.

use crate::host::{Host, HostError};

/// Why a host, owner and repository are not a repository id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepoError {
    /// The host is not a host ([`Host::parse`]'s reason).
    #[error("{0} in host")]
    Host(#[from] HostError),
    /// The host is an IP address.
    #[error("the host must be a name, not an IP address")]
    IpHost,
    /// An owner or repository name with a character outside `[A-Za-z0-9._-]`, empty, `.`
    /// or `..`.
    #[error("{0:?} is not a valid owner or repository name ([A-Za-z0-9._-])")]
    Name(String),
}

/// Whether `segment` may be an owner or a repository name: `[A-Za-z0-9._-]`, not empty,
/// not `.` or `..`.
#[must_use]
pub fn name_ok(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `repo` without one `.git` suffix, in any case (`r.git`, `r.GIT` and `r.Git` are `r`).
#[must_use]
pub fn without_git_suffix(repo: &str) -> &str {
    let cut = repo.len().saturating_sub(4);
    match (repo.get(..cut), repo.get(cut..)) {
        (Some(stem), Some(tail)) if tail.eq_ignore_ascii_case(".git") => stem,
        _ => repo,
    }
}

/// The one reading of a repository: `host/owner/repo`, the host canonical, owner and
/// repository lowercase, the repository without a `.git` suffix.
///
/// # Errors
/// A [`RepoError`] naming the first part that cannot be read.
pub fn repository_id(host: &str, owner: &str, repo: &str) -> Result<String, RepoError> {
    let host = Host::parse(host)?;
    if host.ip().is_some() {
        return Err(RepoError::IpHost);
    }
    let repo = without_git_suffix(repo);
    for part in [owner, repo] {
        if !name_ok(part) {
            return Err(RepoError::Name(part.to_owned()));
        }
    }
    Ok(format!("{host}/{owner}/{repo}").to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(host: &str, owner: &str, repo: &str) -> Option<String> {
        repository_id(host, owner, repo).ok()
    }

    /// The agent spells the authorized host another way; it is the same repository, never
    /// a different one that would escape a rule written for `github.com`.
    #[test]
    fn host_spellings_are_one_repository() {
        let want = Some("github.com/acme/app".to_owned());
        for host in [
            "github.com",
            "GitHub.com",
            "GitHub.com.",
            "ｇｉｔｈｕｂ.com",
            "github\u{ff0e}com",
            "git\u{ad}hub.com",
        ] {
            assert_eq!(id(host, "Acme", "App.git"), want, "{host:?}");
        }
        assert_eq!(
            id("bücher.example", "o", "r").as_deref(),
            Some("xn--bcher-kva.example/o/r")
        );
        assert_eq!(
            id("BÜCHER.example.", "o", "r").as_deref(),
            Some("xn--bcher-kva.example/o/r")
        );
        // A Cyrillic "і" is another host: it does not fold into the authorized one.
        assert_ne!(id("g\u{456}thub.com", "acme", "app"), want);
    }

    #[test]
    fn git_suffix_in_any_case_is_the_same_repository() {
        for repo in ["app", "app.git", "app.GIT", "App.Git"] {
            assert_eq!(
                id("github.com", "acme", repo).as_deref(),
                Some("github.com/acme/app")
            );
        }
        assert_eq!(
            id("github.com", "acme", "app.git.git").as_deref(),
            Some("github.com/acme/app.git")
        );
    }

    /// The agent tries names that are not repositories: every one is refused.
    #[test]
    fn what_is_not_a_repository_is_refused() {
        assert_eq!(
            repository_id("203.0.113.7", "o", "r"),
            Err(RepoError::IpHost)
        );
        assert_eq!(repository_id("0x7f.1", "o", "r"), Err(RepoError::IpHost));
        assert_eq!(repository_id("[::1]", "o", "r"), Err(RepoError::IpHost));
        assert!(matches!(
            repository_id("git hub.com", "o", "r"),
            Err(RepoError::Host(_))
        ));
        assert!(matches!(
            repository_id("xn--a.com", "o", "r"),
            Err(RepoError::Host(_))
        ));
        for (owner, repo) in [
            ("", "r"),
            ("o", ""),
            (".", "r"),
            ("..", "r"),
            ("o", ".git"),
            ("o r", "x"),
            ("o", "r/x"),
            ("o", "r%2F"),
            ("ｏ", "r"),
        ] {
            assert!(
                matches!(
                    repository_id("github.com", owner, repo),
                    Err(RepoError::Name(_))
                ),
                "{owner:?}/{repo:?}"
            );
        }
    }
}
