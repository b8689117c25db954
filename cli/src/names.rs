//! Sandbox names and branch names: what is accepted, and the one line said when not.
//!
//! A name becomes a container name (`airlock-<name>`), a directory, a label value and the
//! tail of a branch, so it is kept to what all of them accept unquoted.

use thiserror::Error;

/// The longest accepted name.
pub const MAX_NAME: usize = 32;

/// Why a name or branch was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    /// A sandbox name outside the rules.
    #[error(
        "sandbox name {name:?} is not allowed: {why}; use 1 to {MAX_NAME} lowercase letters, digits and '-', starting with a letter (e.g. fix-login)"
    )]
    BadName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// A branch git would refuse, or one that could be mistaken for an option.
    #[error("branch {branch:?} is not allowed: {why}; use e.g. sandbox/fix-login")]
    BadBranch {
        /// The branch given.
        branch: String,
        /// Which rule it breaks.
        why: &'static str,
    },
}

/// Check a sandbox name.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError::BadName {
            name: name.into(),
            why,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME {
        return bad("it is too long");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return bad("it must start with a lowercase letter");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return bad("it has a character other than a-z, 0-9 and '-'");
    }
    if name.ends_with('-') || name.contains("--") {
        return bad("it ends with '-' or has '--'");
    }
    Ok(())
}

/// The branch a sandbox works on unless told otherwise.
pub fn default_branch(name: &str) -> String {
    format!("sandbox/{name}")
}

/// Check a branch name: git's `check-ref-format` rules, and no leading `-`.
pub fn validate_branch(branch: &str) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError::BadBranch {
            branch: branch.into(),
            why,
        })
    };
    if branch.is_empty() || branch.starts_with('-') || branch.starts_with('/') {
        return bad("it is empty or starts with '-' or '/'");
    }
    if branch.ends_with('/') || branch.ends_with('.') || branch.ends_with(".lock") {
        return bad("it ends with '/', '.' or '.lock'");
    }
    if branch.contains("..") || branch.contains("//") || branch.contains("@{") || branch == "@" {
        return bad("it has '..', '//' or '@{'");
    }
    let odd = |c: char| c.is_ascii_control() || " ~^:?*[\\\x7f".contains(c) || !c.is_ascii();
    if branch.chars().any(odd) {
        return bad("it has a space, a control or non-ASCII character, or one of ~^:?*[\\");
    }
    if branch.split('/').any(|part| part.starts_with('.')) {
        return bad("a component starts with '.'");
    }
    if branch == "HEAD" {
        return bad("HEAD is not a branch");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_pass() {
        for n in ["a", "fix-login", "t2", "a-b-c", &"x".repeat(MAX_NAME)] {
            assert_eq!(validate_name(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn odd_names_are_refused_with_the_rule() {
        for (n, why) in [
            ("", "empty"),
            ("Fix", "start with a lowercase"),
            ("1abc", "start with a lowercase"),
            ("-x", "start with a lowercase"),
            ("a_b", "character other"),
            ("a b", "character other"),
            ("a/b", "character other"),
            ("é", "start with a lowercase"),
            ("ab-", "ends with"),
            ("a--b", "ends with"),
            (&"x".repeat(MAX_NAME + 1), "too long"),
        ] {
            let e = validate_name(n)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(why), "{n:?}: {e}");
            assert!(e.contains("e.g. fix-login"), "says what to do: {e}");
        }
    }

    #[test]
    fn branches_follow_git_rules() {
        for b in ["sandbox/a", "feature/x-1", "main", "a.b"] {
            assert_eq!(validate_branch(b), Ok(()), "{b}");
        }
        for b in [
            "", "-f", "/a", "a/", "a.", "a.lock", "a..b", "a//b", "a@{1}", "@", "a b", "a~1", "a^",
            "a:b", "a?", "a*", "a[", "a\\b", "é", "a/.b", ".a", "HEAD", "a\u{7f}",
        ] {
            assert!(validate_branch(b).is_err(), "{b:?}");
        }
        assert_eq!(default_branch("x"), "sandbox/x");
        assert_eq!(validate_branch(&default_branch("fix-login")), Ok(()));
    }
}
