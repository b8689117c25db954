//! Shape checks for the `[git]` table's strings (repositories, branch and path globs).
//!
//! Only the shape is checked here; what a push may do is decided by the git API. Each
//! check returns the canonical string or a one-line reason.

use crate::model::SANDBOX_PLACEHOLDER;

/// `host/owner/repo`: no scheme, no `.git` suffix; returned as [`crate::repo::repository_id`]
/// reads it (the git API and the proxy read theirs with the same function).
pub(crate) fn repository(text: &str) -> Result<String, String> {
    if text.contains("://") {
        return Err("write host/owner/repo without a scheme".into());
    }
    if text.to_ascii_lowercase().ends_with(".git") {
        return Err("write host/owner/repo without the .git suffix".into());
    }
    let parts: Vec<&str> = text.split('/').collect();
    let [host, owner, repo] = parts.as_slice() else {
        return Err("must be host/owner/repo, e.g. \"github.com/owner/repo\"".into());
    };
    crate::repo::repository_id(host, owner, repo).map_err(|e| e.to_string())
}

/// A branch name glob (`*` allowed; `{sandbox}` too when `placeholder`), following
/// `git check-ref-format` for everything else. Returned as written.
pub(crate) fn branch_pattern(text: &str, placeholder: bool) -> Result<String, String> {
    if text.is_empty() {
        return Err("empty branch pattern".into());
    }
    if text.starts_with("refs/") {
        return Err("write the branch name without refs/heads/".into());
    }
    let rest = if placeholder {
        text.replace(SANDBOX_PLACEHOLDER, "x")
    } else {
        text.to_owned()
    };
    if let Some(c) = rest.chars().find(|c| {
        c.is_control() || c.is_whitespace() || matches!(c, '~' | '^' | ':' | '?' | '[' | '\\')
    }) {
        return Err(format!("{c:?} is not allowed in a branch name"));
    }
    if rest.contains(['{', '}']) {
        return Err(if placeholder {
            "the only placeholder is {sandbox}".into()
        } else {
            "placeholders are not allowed here".into()
        });
    }
    if rest.contains("..") || rest.contains("@{") || rest == "@" {
        return Err("\"..\", \"@{\" and \"@\" are not allowed in a branch name".into());
    }
    if rest.ends_with('.') {
        return Err("a branch name cannot end with '.'".into());
    }
    for component in rest.split('/') {
        if component.is_empty() {
            return Err("empty path component (leading, trailing or double '/')".into());
        }
        if component.starts_with('.') || component.ends_with(".lock") {
            return Err("a component cannot start with '.' or end with \".lock\"".into());
        }
    }
    crate::glob::check_git_glob(text)?;
    Ok(text.to_owned())
}

/// A path glob relative to the repository root (`**` allowed). Returned as written.
pub(crate) fn path_pattern(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("empty path pattern".into());
    }
    if text.starts_with('/') {
        return Err("paths are relative to the repository root; drop the leading '/'".into());
    }
    if text.chars().any(char::is_control) {
        return Err("control characters are not allowed in a path pattern".into());
    }
    if text.split('/').any(|c| c == "..") {
        return Err("\"..\" is not allowed in a path pattern".into());
    }
    crate::glob::check_git_glob(text)?;
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories() {
        assert_eq!(
            repository("GitHub.com/Owner/Repo").unwrap(),
            "github.com/owner/repo"
        );
        assert_eq!(
            repository("github.com/o/my.repo_x-1").unwrap(),
            "github.com/o/my.repo_x-1"
        );
        for bad in [
            "https://github.com/o/r",
            "github.com/o/r.git",
            "github.com/o",
            "github.com/o/r/x",
            "github.com//r",
            "github.com/../r",
            "github.com/o r/x",
            "203.0.113.7/o/r",
            "git hub.com/o/r",
        ] {
            assert!(repository(bad).is_err(), "{bad:?}");
        }
    }

    /// A policy names the repository with a trailing dot or an IDN spelling of its host: it
    /// is the repository the git API and the proxy read from the same names
    /// (`crate::repo::repository_id`), not one that never matches.
    #[test]
    fn repository_host_spellings_read_one_way() {
        for text in [
            "GitHub.com./Owner/Repo",
            "ｇｉｔｈｕｂ.com/owner/repo",
            "github\u{ff0e}com/owner/repo",
        ] {
            assert_eq!(
                repository(text).unwrap(),
                "github.com/owner/repo",
                "{text:?}"
            );
        }
        assert_eq!(
            repository("bücher.example/o/r").unwrap(),
            "xn--bcher-kva.example/o/r"
        );
    }

    #[test]
    fn branch_patterns() {
        assert!(branch_pattern("sandbox/{sandbox}/*", true).is_ok());
        assert!(branch_pattern("release/*", false).is_ok());
        assert!(branch_pattern("main", false).is_ok());
        for bad in [
            "",
            "refs/heads/main",
            "a..b",
            "a b",
            "a~1",
            "a:b",
            "/main",
            "main/",
            "a//b",
            ".hidden",
            "x.lock",
            "x.",
            "a@{1}",
            "{other}/x",
            "a\nb",
        ] {
            assert!(branch_pattern(bad, true).is_err(), "{bad:?}");
        }
        assert!(branch_pattern("sandbox/{sandbox}/*", false).is_err());
    }

    #[test]
    fn path_patterns() {
        assert!(path_pattern(".github/workflows/**").is_ok());
        assert!(path_pattern("/etc").is_err());
        assert!(path_pattern("../x").is_err());
        assert!(path_pattern("").is_err());
    }
}
