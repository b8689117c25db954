//! Repository names read one way: `host/owner/repo`.
//!
//! Four parts of airlock compare repository names: the policy's `[git] repositories`
//! (written by a person), the git API's push judge (from a workspace remote URL), the
//! entrypoint's default repository (the workspace's `origin`) and the proxy's smart-HTTP
//! check (from a request's host and path). Each calls [`repository_id`] (a remote URL through
//! [`remote_repository_id`]), so a repository cannot be authorized under one spelling and
//! refused, or reached, under another. The host is read by [`Host::parse`] (case, a trailing dot and Unicode/IDNA
//! spellings never matter: `GitHub.com.` and `ｇｉｔｈｕｂ.com` are `github.com`) and must be
//! a name, not an IP address; owner and repository are `[A-Za-z0-9._-]`, neither `.` nor
//! `..`, compared lowercase (as GitHub and GitLab do); one `.git` suffix of the repository,
//! in any case, is dropped.
//!
//! Also here: [`is_git_component`], the one reading of a path component as a repository's
//! `.git` (the git API's argument checks and the entrypoint's start scan for nested
//! repositories both ask it).

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

/// The repository a git remote URL names, read as [`repository_id`] reads it:
/// `https://[user@]host[:443]/owner/repo[.git][/]`, and the SSH spellings of the same
/// repository, `[user@]host:owner/repo[.git]` and `ssh://[user@]host[:22]/owner/repo[.git]`
/// (the git API talks HTTPS to it: the sandbox has no SSH). `None` for anything else: another
/// scheme or port, a local path, a path that is not `owner/repo`.
#[must_use]
pub fn remote_repository_id(url: &str) -> Option<String> {
    let (host, path) = if let Some(rest) = url.strip_prefix("https://") {
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        (host.strip_suffix(":443").unwrap_or(host), path)
    } else if let Some(rest) = url.strip_prefix("ssh://") {
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        (host.strip_suffix(":22").unwrap_or(host), path)
    } else {
        scp_like(url)?
    };
    let path = path.trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    let [owner, repo] = parts.as_slice() else {
        return None;
    };
    repository_id(host, owner, repo).ok()
}

/// git's scp-like SSH syntax: `[user@]host:path`, where no `/` comes before the `:` (else
/// git takes it for a local path) and the URL has no scheme.
fn scp_like(url: &str) -> Option<(&str, &str)> {
    let (authority, path) = url.split_once(':')?;
    if authority.contains('/') || path.starts_with('/') || path.starts_with("//") {
        return None;
    }
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some((host, path))
}

/// Code points HFS+ ignores in a name (git's `is_hfs_dotgit` list): `.g\u{200c}it` is
/// `.git` there.
fn hfs_ignored(c: char) -> bool {
    matches!(
        c,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
    )
}

/// Whether one path component is `.git` as some checkout reads it: case folded, NTFS
/// trailing dots and spaces, alternate data stream suffix and short name (`GIT~1`), and the
/// code points HFS+ ignores.
#[must_use]
pub fn is_git_component(name: &str) -> bool {
    let kept: String = name.chars().filter(|c| !hfs_ignored(*c)).collect();
    // NTFS: an alternate data stream suffix (`.git::$INDEX_ALLOCATION`) names the same
    // file, and trailing dots and spaces are dropped.
    let base = kept.split(':').next().unwrap_or("");
    let base = base.trim_end_matches(['.', ' ']).to_ascii_lowercase();
    base == ".git" || base == "git~1"
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

    /// The workspace's remote spells the authorized host with a trailing dot, in capitals
    /// or in an IDN form: it is read as the policy and the proxy read theirs.
    #[test]
    fn remote_urls_read_hosts_as_the_policy_does() {
        for url in [
            "https://GitHub.com./acme/app.git",
            "https://ｇｉｔｈｕｂ.com/acme/app",
            "git@GITHUB.COM.:acme/app.GIT",
            "ssh://git@github\u{ff0e}com/acme/app",
        ] {
            assert_eq!(
                remote_repository_id(url).as_deref(),
                Some("github.com/acme/app"),
                "{url}"
            );
        }
        assert_eq!(
            remote_repository_id("https://bücher.example/o/r").as_deref(),
            Some("xn--bcher-kva.example/o/r")
        );
        for url in [
            "https://203.0.113.7/acme/app",
            "https://0x7f.1/acme/app",
            "https://xn--a.com/acme/app",
        ] {
            assert_eq!(remote_repository_id(url), None, "{url}");
        }
    }

    /// SSH and HTTPS spellings of one repository are one id; a local path, another scheme,
    /// another port or a path that is not `owner/repo` is none.
    #[test]
    fn remote_urls() {
        for (url, id) in [
            (
                "https://github.com/acme/app.git",
                Some("github.com/acme/app"),
            ),
            ("https://github.com/Acme/App", Some("github.com/acme/app")),
            (
                "https://x-access-token@github.com/acme/app/",
                Some("github.com/acme/app"),
            ),
            (
                "https://github.com:443/acme/app.git",
                Some("github.com/acme/app"),
            ),
            ("http://github.com/acme/app", None),
            ("git@github.com:acme/app.git", Some("github.com/acme/app")),
            ("git@github.com:Acme/App", Some("github.com/acme/app")),
            ("github.com:acme/app.git", Some("github.com/acme/app")),
            ("ssh://git@github.com/acme/app", Some("github.com/acme/app")),
            ("ssh://github.com/acme/app.git", Some("github.com/acme/app")),
            (
                "ssh://git@github.com:22/acme/app.git",
                Some("github.com/acme/app"),
            ),
            ("ssh://git@github.com:2222/acme/app.git", None),
            ("git@github.com:/acme/app.git", None),
            ("git@github.com:acme/app/extra", None),
            ("git@github.com:../app", None),
            ("./dir:acme/app", None),
            ("/tmp/x:acme/app", None),
            ("git@evil host:acme/app", None),
            ("git@[::1]:acme/app", None),
            ("ext::sh -c touch% /tmp/x", None),
            ("file:///tmp/x", None),
            ("https://github.com/acme/app/extra", None),
            ("https://github.com:8443/acme/app", None),
            ("https://github.com/../app", None),
            ("ext::sh -c x", None),
        ] {
            assert_eq!(remote_repository_id(url).as_deref(), id, "{url}");
        }
    }

    /// A nested repository's `.git` spelled for another checkout's reading is still `.git`;
    /// names that merely start like it are not.
    #[test]
    fn git_components_in_every_spelling() {
        for name in [
            ".git",
            ".GIT",
            ".Git",
            ".git.",
            ".git. . ",
            "GIT~1",
            ".g\u{200c}it",
            "\u{feff}.git",
            ".git::$INDEX_ALLOCATION",
        ] {
            assert!(is_git_component(name), "{name:?}");
        }
        for name in [
            ".gitignore",
            ".github",
            "x.git",
            ".gitattributes",
            "git",
            ".git-blame-ignore-revs",
            ".gitmodules",
        ] {
            assert!(!is_git_component(name), "{name:?}");
        }
    }
}
