//! Patch workflows: `git apply`, `git am`, `git format-patch`.
//!
//! The git API never opens a path the agent names, and its file access is not the agent's
//! (its effective uid is, but it also holds the git group that reaches the hidden git dir).
//! So patches travel as bytes: the shim reads the patch files (or its own standard input)
//! with the agent's permissions and sends them as standard input; `apply` and `am` here
//! take no path operand but `-`. `format-patch` runs with `--stdout` only; the shim writes
//! the files, as the agent. A patch that names a `.git` path component anywhere is refused
//! before git sees it (git's own `verify_path` refuses it too), and `--unsafe-paths` is
//! refused wherever it appears.

use super::gitdirs::names_git_dir;
use super::parse::Arg;
use super::refusal::Refusal;
use airlock_wire::Reason;

/// Judge the options and operands of `apply`, `am` and `format-patch`.
pub(crate) fn check(sub: &str, args: &[Arg], operands: &[String]) -> Result<(), Refusal> {
    match sub {
        "apply" | "am" => {
            if operands.iter().any(|o| o != "-") {
                return Err(Refusal::new(
                    Reason::OutsideWorkspace,
                    format!(
                        "git {sub} takes its patch on standard input here: the shim reads the \
                         files you name (git {sub} <file>, or git {sub} < file) and sends them; \
                         the git API opens no path"
                    ),
                ));
            }
            for a in args.iter().filter(|a| a.name == "directory") {
                if let Some(p) = a.value.as_deref().filter(|p| names_git_dir(p)) {
                    return Err(touches_git(sub, p));
                }
            }
            Ok(())
        }
        "format-patch" => {
            if args.iter().any(|a| a.name == "stdout") {
                Ok(())
            } else {
                Err(Refusal::new(
                    Reason::OptionRefused,
                    "git format-patch writes files through the shim only (the shim asks the git \
                     API for --stdout and writes the files as you): run it with the shim, or \
                     add --stdout",
                ))
            }
        }
        _ => Ok(()),
    }
}

fn touches_git(sub: &str, path: &str) -> Refusal {
    Refusal::new(
        Reason::OutsideWorkspace,
        format!(
            "git {sub}: the patch touches {path:?}, inside a .git directory: patches change \
             work tree files only"
        ),
    )
}

/// The first path a patch (or mailbox) names that lies inside a `.git` directory.
#[must_use]
pub fn path_into_git_dir(patch: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(patch);
    for line in text.lines() {
        let paths: Vec<&str> = if let Some(rest) = line.strip_prefix("diff --git ") {
            rest.split(' ').collect()
        } else if let Some(rest) = [
            "--- ",
            "+++ ",
            "rename from ",
            "rename to ",
            "copy from ",
            "copy to ",
        ]
        .iter()
        .find_map(|p| line.strip_prefix(p))
        {
            vec![rest.split('\t').next().unwrap_or(rest)]
        } else {
            continue;
        };
        if let Some(p) = paths
            .into_iter()
            .find(|p| names_git_dir(p.trim_matches('"')))
        {
            return Some(p.to_owned());
        }
    }
    None
}

/// The refusal of a patch that touches `.git`, for the server.
pub fn refuse_git_dir(sub: &str, patch: &[u8]) -> Result<(), Refusal> {
    match path_into_git_dir(patch) {
        Some(p) => Err(touches_git(sub, &p)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_into_git_dirs_are_found_in_every_spelling() {
        for patch in [
            "diff --git a/.git/config b/.git/config\n",
            "--- a/src/x\n+++ b/.git/hooks/pre-commit\n",
            "--- /dev/null\n+++ b/.GIT/config\n",
            "+++ b/.git./config\n",
            "+++ b/.git /config\n",
            "+++ b/sub/.git/config\n",
            "rename to .git/config\n",
            "copy to x/.Git/HEAD\n",
            "+++ b/GIT~1/config\n",
            "diff --git \"a/.git/x\" \"b/.git/x\"\n",
        ] {
            assert!(path_into_git_dir(patch.as_bytes()).is_some(), "{patch}");
        }
        for patch in [
            "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n",
            "+++ b/.github/workflows/ci.yml\n",
            "+++ b/.gitignore\n",
            "+++ b/x.git/y\n",
            " context line mentioning .git/config\n",
            "+added line: .git/config\n",
        ] {
            assert!(path_into_git_dir(patch.as_bytes()).is_none(), "{patch}");
        }
    }
}
