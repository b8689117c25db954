//! Nested repositories in what the agent names: a path with a `.git` component, as any
//! checkout would read the name (case folded, NTFS trailing dots and spaces and short name,
//! the code points HFS+ ignores), and a patch that records a gitlink (mode 160000: `new
//! file mode`, `new mode` or an `index` line; git applies nothing else as one).
//!
//! Pure, like the rest of [`crate::argv`]. What `git add` and `git commit` find in the work
//! tree themselves (a directory holding its own `.git`) is judged after git ran, on the
//! index ([`crate::nested`]).

use super::refusal::Refusal;
use airlock_wire::Reason;

/// The commands whose operands are work-tree paths they write to the index or the work tree.
const PATH_WRITERS: &[&str] = &[
    "add", "commit", "rm", "mv", "restore", "checkout", "reset", "stash",
];

/// Code points HFS+ ignores in a name (git's `is_hfs_dotgit` list): `.g\u{200c}it` is
/// `.git` there.
fn hfs_ignored(c: char) -> bool {
    matches!(
        c,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
    )
}

/// Whether one path component is `.git` as some checkout reads it.
#[must_use]
pub fn is_git_component(name: &str) -> bool {
    let kept: String = name.chars().filter(|c| !hfs_ignored(*c)).collect();
    // NTFS: an alternate data stream suffix (`.git::$INDEX_ALLOCATION`) names the same
    // file, and trailing dots and spaces are dropped.
    let base = kept.split(':').next().unwrap_or("");
    let base = base.trim_end_matches(['.', ' ']).to_ascii_lowercase();
    base == ".git" || base == "git~1"
}

/// Whether a path has a component git would treat as `.git` on some checkout.
#[must_use]
pub fn names_git_dir(path: &str) -> bool {
    path.split(['/', '\\']).any(is_git_component)
}

/// A pathspec without its magic prefix (`:(top,icase)x`, `:/x`, `:!x`).
fn without_magic(spec: &str) -> &str {
    let Some(rest) = spec.strip_prefix(':') else {
        return spec;
    };
    if let Some(long) = rest.strip_prefix('(') {
        return long.split_once(')').map_or("", |(_, p)| p);
    }
    rest.trim_start_matches(['/', '!', '^'])
}

/// Operands of the commands that write paths: none may name a `.git` directory.
pub(super) fn check_operands(sub: &str, operands: &[String]) -> Result<(), Refusal> {
    if !PATH_WRITERS.contains(&sub) {
        return Ok(());
    }
    match operands.iter().find(|o| names_git_dir(without_magic(o))) {
        None => Ok(()),
        Some(p) => Err(Refusal::new(
            Reason::NestedRepository,
            format!(
                "git {sub} {p}: the path names a .git directory, which is never part of the \
                 work tree: the git API does not add, change or enter a git directory (a \
                 nested repository runs its own configuration). Name the files around it; a \
                 nested repository's files go in as ordinary files once its .git is removed"
            ),
        )),
    }
}

/// The first path a patch records as a gitlink (new, or changed, mode 160000), if any.
#[must_use]
pub fn gitlink_in_patch(patch: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(patch);
    let mut current = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            current = rest.rsplit(' ').next().unwrap_or(rest);
            current = current.strip_prefix("b/").unwrap_or(current);
            continue;
        }
        let gitlink = line == "new file mode 160000"
            || line == "new mode 160000"
            || (line.starts_with("index ") && line.ends_with(" 160000"));
        if gitlink {
            return Some(if current.is_empty() {
                "a path".to_owned()
            } else {
                current.to_owned()
            });
        }
    }
    None
}

/// The refusal of a patch that records a gitlink, for the server.
pub fn refuse_gitlink_patch(sub: &str, patch: &[u8]) -> Result<(), Refusal> {
    match gitlink_in_patch(patch) {
        None => Ok(()),
        Some(p) => Err(Refusal::new(
            Reason::NestedRepository,
            format!(
                "git {sub}: the patch records {p} as a nested repository (a gitlink, mode \
                 160000, \"Subproject commit\"); the git API never records one. Apply the \
                 rest of the patch without that file, or add the repository's files as \
                 ordinary files"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argv::test_util::{ok, refused};

    #[test]
    fn git_components_in_every_spelling() {
        for p in [
            ".git",
            "sub/.git",
            "sub/.git/config",
            "a/.GIT",
            "a/.Git/hooks",
            "a/.git.",
            "a/.git. . ",
            "GIT~1/config",
            "a/.g\u{200c}it/config",
            "a/\u{feff}.git",
            ".git::$INDEX_ALLOCATION/config",
            "a\\.git\\config",
        ] {
            assert!(names_git_dir(p), "{p}");
        }
        for p in [
            ".gitignore",
            ".github/workflows/x.yml",
            "x.git",
            "a/.gitattributes",
            "git",
            "a/.git-blame-ignore-revs",
            "a/.gitmodules",
        ] {
            assert!(!names_git_dir(p), "{p}");
        }
    }

    #[test]
    fn writers_refuse_git_dir_operands_in_any_pathspec_form() {
        for s in [
            "add sub/.git",
            "add sub/.GIT/config",
            "add -- x/.git",
            "add :(top).git/config",
            "add :/sub/.git",
            "commit -m x -- sub/.git",
            "rm --cached -r sub/.git",
            "mv a sub/.git/hooks/pre-commit",
            "restore sub/.git/config",
            "checkout HEAD -- .Git/config",
            "reset HEAD -- sub/.git",
            "stash push -- sub/.git",
        ] {
            assert_eq!(refused(s).reason, Reason::NestedRepository, "{s}");
        }
        for s in [
            "add .gitignore sub",
            "add :!sub",
            "commit -m .git",
            "log -- .git",
            "diff -- sub/.git",
            "checkout -- .gitattributes",
        ] {
            ok(s);
        }
    }

    #[test]
    fn patches_recording_a_gitlink_are_found() {
        let h = "1".repeat(40);
        for patch in [
            format!(
                "diff --git a/m b/m\nnew file mode 160000\nindex 0000000..{h}\n--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+Subproject commit {h}\n"
            ),
            format!(
                "diff --git a/m b/m\nindex 1111111..2222222 160000\n--- a/m\n+++ b/m\n@@ -1 +1 @@\n-Subproject commit {h}\n+Subproject commit {h}\n"
            ),
            "diff --git a/m b/m\nold mode 100644\nnew mode 160000\n".to_owned(),
        ] {
            assert_eq!(
                gitlink_in_patch(patch.as_bytes()).as_deref(),
                Some("m"),
                "{patch}"
            );
        }
        // A file whose text mentions a subproject, and a gitlink removed: nothing recorded.
        for patch in [
            "diff --git a/a b/a\nindex 1..2 100644\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+Subproject commit 1\n".to_owned(),
            format!("diff --git a/m b/m\ndeleted file mode 160000\nindex {h}..0000000\n--- a/m\n+++ /dev/null\n@@ -1 +0,0 @@\n-Subproject commit {h}\n"),
        ] {
            assert_eq!(gitlink_in_patch(patch.as_bytes()), None, "{patch}");
        }
    }
}
