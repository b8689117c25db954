//! Nested git repositories already in the checkout at start: reported and refused.
//!
//! git run in the workspace enters a repository it finds inside it (through a gitlink, or
//! when someone later runs git in that directory) and runs what that repository's own
//! configuration names: a clean filter, fsmonitor, hooks. The git API never enters one
//! (`airlock_git_api::nested`); a checkout that already holds one is refused before
//! anything starts, so that nothing planted in it (by an earlier sandbox's branch, say)
//! waits there: one line names the paths and the fix, and the start exits 78.
//!
//! **What counts** ([`classify`], pure): any entry below the top named `.git` as some
//! checkout reads the name (any case, NTFS trailing dots and spaces and short name, the
//! code points HFS+ ignores; a directory, a `.git` file or a symlink alike), and any
//! directory shaped like a bare repository (`HEAD`, `objects/` and `refs/`, names in any
//! case). The top's own `.git` (the read-only cover over the workspace's repository) is
//! not one.
//!
//! **The walk** ([`scan`]) never follows a symbolic link, does not enter what it reports,
//! and is bounded: [`MAX_ENTRIES`] directory entries, [`MAX_DEPTH`] levels. Reaching a bound,
//! or a directory it cannot read, refuses the start too (fail closed), saying so.

use airlock_policy::repo::is_git_component;
use anyhow::{Result, anyhow};
use std::path::{Path, PathBuf};

/// Directory entries read at most.
pub const MAX_ENTRIES: usize = 1_000_000;
/// Directory levels below the top entered at most.
pub const MAX_DEPTH: usize = 256;
/// Paths named in the refusal at most (the count says how many in all).
const SHOWN: usize = 5;

/// What a directory entry is, as `readdir` says (a symlink is never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// A nested repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A `.git` entry (its path, relative to the top).
    GitEntry(String),
    /// A directory shaped like a bare repository (its path; `""` is never reported).
    Bare(String),
}

/// Why the walk could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfinished {
    /// More than [`MAX_ENTRIES`] entries.
    TooMany,
    /// A directory deeper than [`MAX_DEPTH`] levels (the first seen).
    TooDeep(String),
    /// A directory that cannot be listed, with the error.
    Unreadable(String, String),
}

/// What the walk found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    pub found: Vec<Found>,
    pub unfinished: Option<Unfinished>,
    pub entries: usize,
}

/// One directory's listing judged: the `.git` entries among `entries` (names), and whether
/// the directory itself is shaped like a bare repository.
#[must_use]
pub fn classify(entries: &[(String, Kind)]) -> (Vec<&str>, bool) {
    let git: Vec<&str> = entries
        .iter()
        .filter(|(n, _)| is_git_component(n))
        .map(|(n, _)| n.as_str())
        .collect();
    let has = |name: &str, kinds: &[Kind]| {
        entries
            .iter()
            .any(|(n, k)| n.eq_ignore_ascii_case(name) && kinds.contains(k))
    };
    let bare = has("HEAD", &[Kind::File, Kind::Symlink])
        && has("objects", &[Kind::Dir])
        && has("refs", &[Kind::Dir]);
    (git, bare)
}

/// Walk `root` (see the module docs).
#[must_use]
pub fn scan(root: &Path) -> Scan {
    let mut out = Scan::default();
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root.to_path_buf(), String::new(), 0)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let listing = match std::fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) => {
                out.unfinished = Some(Unfinished::Unreadable(shown_dir(&rel), e.to_string()));
                return out;
            }
        };
        let mut entries = Vec::new();
        for entry in listing {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    out.unfinished = Some(Unfinished::Unreadable(shown_dir(&rel), e.to_string()));
                    return out;
                }
            };
            out.entries += 1;
            if out.entries > MAX_ENTRIES {
                out.unfinished = Some(Unfinished::TooMany);
                return out;
            }
            let kind = match entry.file_type() {
                Ok(t) if t.is_symlink() => Kind::Symlink,
                Ok(t) if t.is_dir() => Kind::Dir,
                Ok(t) if t.is_file() => Kind::File,
                _ => Kind::Other,
            };
            entries.push((entry.file_name().to_string_lossy().into_owned(), kind));
        }
        let (git, bare) = classify(&entries);
        if bare && !rel.is_empty() {
            out.found.push(Found::Bare(rel));
            continue;
        }
        for name in &git {
            if rel.is_empty() && *name == ".git" {
                continue; // the cover over the workspace's own repository
            }
            out.found.push(Found::GitEntry(join(&rel, name)));
        }
        for (name, kind) in &entries {
            if *kind != Kind::Dir || git.contains(&name.as_str()) {
                continue;
            }
            let child = join(&rel, name);
            if depth + 1 > MAX_DEPTH {
                out.unfinished = Some(Unfinished::TooDeep(child));
                return out;
            }
            stack.push((dir.join(name), child, depth + 1));
        }
    }
    out.found.sort_by(|a, b| path_of(a).cmp(path_of(b)));
    out
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_owned()
    } else {
        format!("{rel}/{name}")
    }
}

fn shown_dir(rel: &str) -> String {
    if rel.is_empty() {
        ".".to_owned()
    } else {
        rel.to_owned()
    }
}

fn path_of(f: &Found) -> &str {
    match f {
        Found::GitEntry(p) | Found::Bare(p) => p,
    }
}

/// A path for the one line: control characters (a name can hold escape sequences) escaped.
fn shown(path: &str) -> String {
    path.escape_debug().to_string()
}

/// The verdict on a scan: `Err(line)` refuses the start.
pub fn verdict(scan: &Scan) -> std::result::Result<(), String> {
    let unchecked = "the workspace could not be checked for nested git repositories (git would run \
                     their configuration)";
    match &scan.unfinished {
        Some(Unfinished::TooMany) => {
            return Err(format!(
                "{unchecked}: it holds more than {MAX_ENTRIES} files and directories and the \
                 check stops there; move generated trees (node_modules, target, build output) \
                 out of the checkout, then start again"
            ));
        }
        Some(Unfinished::TooDeep(p)) => {
            return Err(format!(
                "{unchecked}: {} is more than {MAX_DEPTH} directories deep and the check stops \
                 there; remove that tree from the checkout, then start again",
                shown(p)
            ));
        }
        Some(Unfinished::Unreadable(p, e)) => {
            return Err(format!(
                "{unchecked}: directory {} cannot be read ({e}); make it readable or remove it, \
                 then start again",
                shown(p)
            ));
        }
        None => {}
    }
    if scan.found.is_empty() {
        return Ok(());
    }
    let mut listed: Vec<String> = scan
        .found
        .iter()
        .take(SHOWN)
        .map(|f| match f {
            Found::GitEntry(p) => shown(p),
            Found::Bare(p) => format!("{}/ (a bare repository: HEAD, objects/, refs/)", shown(p)),
        })
        .collect();
    if scan.found.len() > SHOWN {
        listed.push(format!("and {} more", scan.found.len() - SHOWN));
    }
    let remove: Vec<String> = scan
        .found
        .iter()
        .take(SHOWN)
        .map(|f| format!("'{}'", shown(path_of(f)).replace('\'', "'\\''")))
        .collect();
    Err(format!(
        "the workspace holds {} nested git repositor{} ({}); git entering one would run its own \
         configuration (filters, hooks, fsmonitor), so airlock does not start on it. Remove \
         them from the checkout (rm -rf {}) or move them out, then start again; a nested \
         project's files can stay as ordinary files once its .git is gone",
        scan.found.len(),
        if scan.found.len() == 1 { "y" } else { "ies" },
        listed.join(", "),
        remove.join(" ")
    ))
}

/// The start-time check of the workspace `root`.
///
/// # Errors
/// One line: the nested repositories and the fix, or why the check could not finish.
pub fn check(root: &Path) -> Result<()> {
    verdict(&scan(root)).map_err(|line| anyhow!(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[(&str, Kind)]) -> Vec<(String, Kind)> {
        list.iter().map(|(n, k)| ((*n).to_owned(), *k)).collect()
    }

    #[test]
    fn git_entries_and_bare_shapes_are_recognised() {
        let list = entries(&[
            (".git", Kind::File),
            (".GIT", Kind::Dir),
            ("git~1", Kind::Dir),
            (".git.", Kind::Symlink),
            (".gitignore", Kind::File),
            (".github", Kind::Dir),
        ]);
        let (git, bare) = classify(&list);
        assert_eq!(git, [".git", ".GIT", "git~1", ".git."]);
        assert!(!bare);
        for (list, want) in [
            (
                &[
                    ("HEAD", Kind::File),
                    ("objects", Kind::Dir),
                    ("refs", Kind::Dir),
                ][..],
                true,
            ),
            (
                &[
                    ("head", Kind::Symlink),
                    ("Objects", Kind::Dir),
                    ("REFS", Kind::Dir),
                ],
                true,
            ),
            (&[("HEAD", Kind::File), ("objects", Kind::Dir)], false),
            (
                &[
                    ("HEAD", Kind::Dir),
                    ("objects", Kind::Dir),
                    ("refs", Kind::Dir),
                ],
                false,
            ),
            (
                &[
                    ("HEAD", Kind::File),
                    ("objects", Kind::File),
                    ("refs", Kind::Dir),
                ],
                false,
            ),
        ] {
            assert_eq!(classify(&entries(list)).1, want, "{list:?}");
        }
    }

    fn mkdir(root: &Path, p: &str) {
        std::fs::create_dir_all(root.join(p)).unwrap();
    }

    /// A checkout with a nested repository, a `.git` file, a case variant, an embedded
    /// bare repository, a symlinked directory (never followed) and the top's own `.git`.
    #[test]
    fn the_walk_finds_every_nested_repository_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        mkdir(root, ".git/objects");
        mkdir(root, "src/deep/er");
        std::fs::write(root.join("src/deep/er/file.rs"), "").unwrap();
        mkdir(root, "sub/.git/hooks");
        mkdir(root, "linked");
        std::fs::write(root.join("linked/.git"), "gitdir: ../sub/.git\n").unwrap();
        mkdir(root, "a/B/.GIT");
        mkdir(root, "tools/objects");
        mkdir(root, "tools/refs/heads");
        std::fs::write(root.join("tools/HEAD"), "ref: refs/heads/main\n").unwrap();
        mkdir(root, "tools/inner/.git");
        mkdir(root, "outside/.git");
        std::os::unix::fs::symlink(root.join("outside"), root.join("via-link")).unwrap();
        let s = scan(root);
        assert_eq!(s.unfinished, None);
        assert_eq!(
            s.found,
            vec![
                Found::GitEntry("a/B/.GIT".into()),
                Found::GitEntry("linked/.git".into()),
                Found::GitEntry("outside/.git".into()),
                Found::GitEntry("sub/.git".into()),
                Found::Bare("tools".into()),
            ]
        );
        let line = verdict(&s).unwrap_err();
        assert!(!line.contains('\n'), "{line}");
        for want in [
            "5 nested git repositories",
            "sub/.git",
            "tools/ (a bare repository",
            "rm -rf",
        ] {
            assert!(line.contains(want), "{want}: {line}");
        }
        // Nothing nested: the start goes on.
        let clean = tempfile::tempdir().unwrap();
        mkdir(clean.path(), ".git");
        mkdir(clean.path(), "src/.github/workflows");
        assert_eq!(verdict(&scan(clean.path())), Ok(()));
    }

    #[test]
    fn names_are_escaped_and_the_list_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..8 {
            mkdir(tmp.path(), &format!("r{i}/.git"));
        }
        mkdir(tmp.path(), "evil\x1b[2K\rname/.git");
        let line = verdict(&scan(tmp.path())).unwrap_err();
        assert!(!line.contains('\x1b') && !line.contains('\r'), "{line:?}");
        assert!(line.contains("9 nested git repositories"), "{line}");
        assert!(line.contains("and 4 more"), "{line}");
    }

    /// A bound reached, or a directory that cannot be read, refuses the start: the check
    /// says it did not finish.
    #[test]
    fn an_unfinished_walk_fails_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = (0..=MAX_DEPTH).map(|_| "d").collect::<Vec<_>>().join("/");
        mkdir(tmp.path(), &deep);
        let s = scan(tmp.path());
        assert!(
            matches!(s.unfinished, Some(Unfinished::TooDeep(_))),
            "{s:?}"
        );
        let line = verdict(&s).unwrap_err();
        assert!(
            line.contains("could not be checked") && line.contains("deep"),
            "{line}"
        );
        let many = Scan {
            unfinished: Some(Unfinished::TooMany),
            ..Scan::default()
        };
        assert!(verdict(&many).unwrap_err().contains("more than 1000000"));
        let s = scan(&tmp.path().join("missing"));
        assert!(
            matches!(s.unfinished, Some(Unfinished::Unreadable(..))),
            "{s:?}"
        );
        assert!(verdict(&s).unwrap_err().contains("cannot be read"));
    }
}
