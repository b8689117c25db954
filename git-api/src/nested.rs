//! Nested repositories: the git API never enters one and never records one.
//!
//! The work tree is the agent's, and so is every repository inside it: `sub/.git` made with
//! the agent's own git can configure a clean filter, fsmonitor, hooks, a pager or textconv,
//! and git runs them as soon as it looks inside (`git status` of a gitlink spawns a status in
//! the submodule with that repository's configuration). Two rules keep the git API out:
//!
//! - **Never entered.** Every git the server runs gets [`PINNED_CONFIG`] after the agent's
//!   own `-c` options (submodules ignored on every walk, no submodule summary, no recursion,
//!   fsmonitor and hooks off, `.git` spellings refused in paths), and the commands that take
//!   them get [`tail_options`] (`--ignore-submodules=all`, `--submodule=short`) after the
//!   agent's options, where they win; plumbing that ignores `diff.ignoreSubmodules`
//!   (`diff-files`, `diff-index`) is covered by the option.
//! - **Never recorded.** A gitlink (mode 160000) that `git add` or `git commit` would put
//!   in the index or a commit is refused: the server keeps the index as it was before the
//!   command ([`Guard`]: a hard link, so no copy), reads the gitlinks before and after
//!   ([`crate::gitindex`], no git process), and on a new one puts the index back, moves
//!   HEAD back after a commit, and answers with [`Reason::NestedRepository`] and what works
//!   instead. Paths naming `.git` and patches recording a gitlink are refused before git
//!   runs ([`crate::argv::gitdirs`]).

use crate::argv::{Checked, Refusal};
use crate::gitindex::{self, Gitlink};
use crate::rawdiff;
use crate::run::GitEnv;
use airlock_wire::Reason;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Configuration every git the server runs gets after the agent's `-c` options.
pub const PINNED_CONFIG: &[&str] = &[
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "diff.submodule=short",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    // git refuses `.GIT`, `.git.`, `git~1`, `.g\u{200c}it` ... in index paths.
    "core.protectNTFS=true",
    "core.protectHFS=true",
    // Its hint offers `git submodule add`, which the git API refuses; the refusal says
    // what works instead.
    "advice.addEmbeddedRepo=false",
];

/// `PINNED_CONFIG` as `-c` arguments.
#[must_use]
pub fn pinned_args() -> Vec<String> {
    PINNED_CONFIG
        .iter()
        .flat_map(|kv| ["-c".to_owned(), (*kv).to_owned()])
        .collect()
}

/// Options the server adds after the agent's options of `sub` (`first` is its first
/// operand: `stash show` is a diff), so that no option of the agent's asks git to look
/// inside a submodule.
#[must_use]
pub fn tail_options(sub: &str, first: Option<&str>) -> &'static [&'static str] {
    const DIFF: &[&str] = &["--ignore-submodules=all", "--submodule=short"];
    match sub {
        "status" => &["--ignore-submodules=all"],
        "diff" | "diff-files" | "diff-index" | "diff-tree" | "log" | "show" | "format-patch" => {
            DIFF
        }
        "stash" if first == Some("show") => DIFF,
        _ => &[],
    }
}

/// Refuses an option of the agent's that asks git to look inside a submodule:
/// `--ignore-submodules=<anything but all>` and `--submodule` (which means `log`) or
/// `--submodule=<anything but short>`. The server's own `--ignore-submodules=all
/// --submodule=short` ([`tail_options`]) go before the first operand, so an option the
/// agent writes after an operand would otherwise come later and win.
pub fn check_options(c: &Checked) -> Result<(), Refusal> {
    let end = c.options_end.min(c.argv.len());
    let start = (c.sub_index + 1).min(end);
    for (i, a) in c.argv.iter().enumerate().take(end).skip(start) {
        if c.operands.contains(&i) {
            continue;
        }
        let looks_inside = match a.split_once('=') {
            Some(("--ignore-submodules", v)) => v != "all",
            Some(("--submodule", v)) => v != "short",
            None => a == "--submodule",
            _ => false,
        };
        if looks_inside {
            return Err(Refusal::new(
                Reason::NestedRepository,
                format!(
                    "{a} is refused: it would make git look inside a submodule, and a \
                     repository inside the workspace runs its own configuration (filters, \
                     hooks, fsmonitor); the git API never enters one. --ignore-submodules=all \
                     and --submodule=short work (they are what the git API uses)"
                ),
            ));
        }
    }
    Ok(())
}

/// The commands whose index (and, for a commit, HEAD) is checked afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// `git add`: no new gitlink in the index.
    Add,
    /// `git commit`: no new gitlink in the commit or the index.
    Commit,
}

impl Watch {
    /// The watch for a subcommand, if it is watched.
    #[must_use]
    pub fn of(sub: &str) -> Option<Watch> {
        match sub {
            "add" => Some(Watch::Add),
            "commit" => Some(Watch::Commit),
            _ => None,
        }
    }
}

/// The index file's name for the copy kept while a watched command runs.
const SAVED: &str = "airlock-index-before";

/// What a watched command started from: the index (kept as a hard link), its gitlinks,
/// and (for a commit in a repository with gitlinks) HEAD.
#[derive(Debug)]
pub struct Guard<'a> {
    env: &'a GitEnv,
    watch: Watch,
    /// The hard link to the index as it was, or `None` when there was no index.
    saved: Option<PathBuf>,
    before: Vec<Gitlink>,
    /// HEAD before a commit (`Some(None)`: unborn), read when the index has gitlinks.
    head: Option<Option<String>>,
}

impl<'a> Guard<'a> {
    /// Before `watch`'s command runs (under the repository lock).
    ///
    /// # Errors
    /// An internal refusal when the index cannot be kept or read.
    pub fn before(env: &'a GitEnv, watch: Watch) -> Result<Guard<'a>, Refusal> {
        let index = env.git_dir.join("index");
        let keep = env.git_dir.join(SAVED);
        let _ = std::fs::remove_file(&keep);
        let saved = match std::fs::hard_link(&index, &keep) {
            Ok(()) => Some(keep),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => {
                // A file system without hard links: a copy (the index's size, once).
                std::fs::copy(&index, &keep).map_err(|e| internal("keeping the index", &e))?;
                Some(keep)
            }
        };
        let before = read_gitlinks(env)?;
        let head = if watch == Watch::Commit && !before.is_empty() {
            Some(head(env)?)
        } else {
            None
        };
        Ok(Guard {
            env,
            watch,
            saved,
            before,
            head,
        })
    }

    /// After the command (git's exit `code`): `Ok` when it recorded no new gitlink, else
    /// everything it did is undone and the refusal says what works instead. A commit that
    /// git refused while the index stages a gitlink (git sees nothing to commit, as it
    /// ignores submodules) is answered with the same refusal: it says what to do.
    ///
    /// # Errors
    /// [`Reason::NestedRepository`]; an internal refusal when undoing failed.
    pub fn after(mut self, code: i32) -> Result<(), Refusal> {
        let after = read_gitlinks(self.env)?;
        let mut new: Vec<String> = after
            .iter()
            .filter(|g| !self.before.contains(g))
            .map(|g| String::from_utf8_lossy(&g.path).into_owned())
            .collect();
        let mut moved = None;
        if self.watch == Watch::Commit && !(self.before.is_empty() && after.is_empty()) {
            let now = head(self.env)?;
            let was = match &self.head {
                Some(h) => h.clone(),
                // The index had no gitlink before: HEAD's previous value from its reflog.
                None => query_line(self.env, &["rev-parse", "-q", "--verify", "HEAD@{1}"])?,
            };
            if now != was
                && let Some(commit) = &now
            {
                let recorded = committed_gitlinks(self.env, commit, was.as_deref())?;
                if !recorded.is_empty() {
                    for p in recorded {
                        if !new.contains(&p) {
                            new.push(p);
                        }
                    }
                    moved = Some((was, commit.clone()));
                }
            }
        }
        if new.is_empty() && moved.is_none() && code != 0 && self.watch == Watch::Commit {
            new = staged_gitlinks(self.env, &self.before)?;
            if !new.is_empty() {
                return Err(refusal(self.watch, &new, &self.env.work_tree));
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        if let Some((was, now)) = moved {
            self.move_head_back(was.as_deref(), &now)?;
        }
        self.restore()?;
        Err(refusal(self.watch, &new, &self.env.work_tree))
    }

    fn move_head_back(&self, was: Option<&str>, now: &str) -> Result<(), Refusal> {
        let msg = "airlock: commit refused (it recorded a nested repository)";
        let q = match was {
            Some(old) => self.env.query(&["update-ref", "-m", msg, "HEAD", old, now]),
            None => self
                .env
                .query(&["update-ref", "-m", msg, "-d", "HEAD", now]),
        }
        .map_err(|e| internal("moving HEAD back", &e))?;
        if q.ok {
            Ok(())
        } else {
            Err(Refusal::new(
                Reason::Internal,
                format!(
                    "a commit that records a nested repository could not be undone ({}); \
                     run git reset --soft HEAD~1 and git rm --cached on the gitlink",
                    q.stderr.trim()
                ),
            ))
        }
    }

    /// The index as it was before the command.
    fn restore(&mut self) -> Result<(), Refusal> {
        let index = self.env.git_dir.join("index");
        match self.saved.take() {
            Some(keep) => {
                std::fs::rename(&keep, &index).map_err(|e| internal("restoring the index", &e))
            }
            None => match std::fs::remove_file(&index) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(internal("restoring the index", &e)),
            },
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(keep) = self.saved.take() {
            let _ = std::fs::remove_file(keep);
        }
    }
}

/// `git rm` (without `--cached`) of a gitlink whose directory holds a repository enters that
/// repository (a status inside it, with its configuration, to see whether removing it loses
/// work) and moves its `.git` into the hidden git dir (`modules/`, which is the operator's
/// `.git` on the host). Refused before git runs; `git rm --cached` and deleting the
/// directory yourself are what work. `cwd` is where the agent ran it (its pathspecs are
/// relative to it).
///
/// # Errors
/// [`Reason::NestedRepository`]; an internal refusal when git cannot be asked.
pub fn check_rm(env: &GitEnv, c: &Checked, cwd: &Path) -> Result<(), Refusal> {
    let options = &c.argv[(c.sub_index + 1).min(c.argv.len())..c.options_end.min(c.argv.len())];
    if options.iter().any(|a| a == "--cached") {
        return Ok(());
    }
    let populated: Vec<String> = read_gitlinks(env)?
        .into_iter()
        .map(|g| String::from_utf8_lossy(&g.path).into_owned())
        .filter(|p| {
            env.work_tree
                .join(p)
                .join(".git")
                .symlink_metadata()
                .is_ok()
        })
        .collect();
    if populated.is_empty() {
        return Ok(());
    }
    // Which entries the agent's pathspecs name, as git reads them (index only: nothing
    // entered, nothing moved).
    let mut args: Vec<String> = c.argv[..c.sub_index].to_vec();
    args.extend(
        ["rm", "--cached", "-n", "-r", "--ignore-unmatch", "--"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    args.extend(c.operands.iter().filter_map(|&i| c.argv.get(i).cloned()));
    let config: Vec<String> = PINNED_CONFIG.iter().map(|s| (*s).to_owned()).collect();
    let out = env
        .command(cwd, &BTreeMap::new(), &config, &args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| internal("running git", &e))?;
    let listed = String::from_utf8_lossy(&out.stdout);
    let hit: Vec<&String> = populated
        .iter()
        .filter(|p| listed.lines().any(|l| l == format!("rm '{p}'")))
        .collect();
    let Some(first) = hit.first() else {
        return Ok(());
    };
    Err(Refusal::new(
        Reason::NestedRepository,
        format!(
            "git rm is refused: {first} holds a git repository of its own ({first}/.git), and \
             git rm would enter it (running its configuration) and move its .git into the \
             repository. git rm --cached {first} removes it from the index (the files stay); \
             delete the directory yourself with rm -rf {first}"
        ),
    ))
}

fn internal(what: &str, e: &dyn std::fmt::Display) -> Refusal {
    Refusal::new(Reason::Internal, format!("{what}: {e}"))
}

fn query_line(env: &GitEnv, args: &[&str]) -> Result<Option<String>, Refusal> {
    Ok(env
        .query(args)
        .map_err(|e| internal("running git", &e))?
        .line())
}

/// HEAD's commit, `None` on an unborn branch.
fn head(env: &GitEnv) -> Result<Option<String>, Refusal> {
    query_line(env, &["rev-parse", "-q", "--verify", "HEAD"])
}

/// The index's gitlinks: read from its bytes, or (a format not read there) as git lists
/// them.
fn read_gitlinks(env: &GitEnv) -> Result<Vec<Gitlink>, Refusal> {
    let data = match std::fs::read(env.git_dir.join("index")) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(internal("reading the index", &e)),
    };
    if let Ok(links) = gitindex::gitlinks(&data) {
        return Ok(links);
    }
    let q = env
        .query(&["ls-files", "--stage", "-z"])
        .map_err(|e| internal("running git", &e))?;
    if !q.ok {
        return Err(Refusal::new(
            Reason::Internal,
            format!("listing the index failed: {}", q.stderr.trim()),
        ));
    }
    Ok(parse_ls_files(&q.stdout))
}

/// `ls-files --stage -z` records (`<mode> <oid> <stage>\t<path>`), gitlinks only.
fn parse_ls_files(out: &str) -> Vec<Gitlink> {
    out.split('\0')
        .filter_map(|r| {
            let (meta, path) = r.split_once('\t')?;
            let mut parts = meta.split(' ');
            (parts.next()? == "160000").then_some(())?;
            let oid = parts.next()?.to_owned();
            let stage = parts.next()?.parse().ok()?;
            Some(Gitlink {
                path: path.as_bytes().to_vec(),
                oid,
                stage,
            })
        })
        .collect()
}

/// The gitlinks `commit` records that neither any of its parents nor `was` (HEAD before
/// the command: the amended commit, or the first parent) records as they are: what this
/// commit added. A merge's gitlink taken from one side, an amend that keeps the amended
/// commit's, are not new. Trees only: nothing in the work tree is looked at.
fn committed_gitlinks(
    env: &GitEnv,
    commit: &str,
    was: Option<&str>,
) -> Result<Vec<String>, Refusal> {
    let raw = |args: &[&str]| -> Result<Vec<String>, Refusal> {
        let mut all = vec![
            "diff-tree",
            "-r",
            "--raw",
            "-z",
            "--no-commit-id",
            "--no-renames",
        ];
        all.extend(args);
        let q = env.query(&all).map_err(|e| internal("running git", &e))?;
        if !q.ok {
            return Err(Refusal::new(
                Reason::Internal,
                format!("reading the commit failed: {}", q.stderr.trim()),
            ));
        }
        Ok(raw_gitlinks(&q.stdout))
    };
    let against_parents = raw(&["-c", "--root", commit])?;
    if against_parents.is_empty() {
        return Ok(against_parents);
    }
    let Some(was) = was else {
        return Ok(against_parents);
    };
    let against_was = raw(&[was, commit])?;
    Ok(against_parents
        .into_iter()
        .filter(|p| against_was.contains(p))
        .collect())
}

/// The gitlinks of `index` (its gitlinks) that HEAD does not record as they are: what a
/// commit would record.
fn staged_gitlinks(env: &GitEnv, index: &[Gitlink]) -> Result<Vec<String>, Refusal> {
    if index.is_empty() {
        return Ok(Vec::new());
    }
    let q = env
        .query(&["ls-tree", "-r", "-z", "--full-tree", "HEAD"])
        .map_err(|e| internal("running git", &e))?;
    let recorded: Vec<(String, String)> = q
        .stdout
        .split('\0')
        .filter_map(|r| {
            let (meta, path) = r.split_once('\t')?;
            let mut parts = meta.split(' ');
            (parts.next()? == "160000").then_some(())?;
            parts.next()?;
            Some((parts.next()?.to_owned(), path.to_owned()))
        })
        .collect();
    Ok(index
        .iter()
        .map(|g| (g.oid.clone(), String::from_utf8_lossy(&g.path).into_owned()))
        .filter(|g| !recorded.contains(g))
        .map(|(_, p)| p)
        .collect())
}

/// The paths of `--raw -z` records (plain or combined) whose result mode is a gitlink.
fn raw_gitlinks(out: &str) -> Vec<String> {
    rawdiff::records(out)
        .into_iter()
        .filter(|r| r.mode() == "160000")
        .map(|r| r.path)
        .collect()
}

/// The refusal for gitlinks `paths`, saying for each what works instead.
fn refusal(watch: Watch, paths: &[String], work_tree: &Path) -> Refusal {
    const SHOWN: usize = 5;
    let mut listed: Vec<String> = paths.iter().take(SHOWN).cloned().collect();
    if paths.len() > SHOWN {
        listed.push(format!("and {} more", paths.len() - SHOWN));
    }
    let listed = listed.join(", ");
    let first = &paths[0];
    let has_git = work_tree
        .join(first)
        .join(".git")
        .symlink_metadata()
        .is_ok();
    let what = if has_git {
        format!("{first} is a git repository of its own ({first}/.git)")
    } else {
        format!("{first} is recorded as a nested repository (a gitlink, mode 160000)")
    };
    match watch {
        Watch::Add => Refusal::new(
            Reason::NestedRepository,
            format!(
                "git add is refused: it would record {listed} as a nested repository (a \
                 gitlink), and the git API never records or enters one (git would run that \
                 repository's own configuration). Nothing was added: the index is as before. \
                 {what}. To add its files as ordinary files, remove its .git (rm -rf \
                 {first}/.git) and git add {first} again; to leave it out, add {first}/ to \
                 .gitignore"
            ),
        ),
        Watch::Commit => Refusal::new(
            Reason::NestedRepository,
            format!(
                "git commit is refused: it would record {listed} as a nested repository (a \
                 gitlink), and the git API never records or enters one. Nothing was \
                 committed: HEAD and the index are as before. {what}. To commit without \
                 it: git reset -q -- {first} (unstages it; the files stay); to commit its \
                 files as ordinary files: rm -rf {first}/.git, git rm -q --cached -f \
                 {first}, git add {first}"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_records_with_a_gitlink_result_are_found() {
        let h = "1".repeat(40);
        let z = "0".repeat(40);
        let out = format!(
            ":000000 160000 {z} {h} A\0sub\0:100644 100644 {h} {h} M\0README.md\0\
             :160000 000000 {h} {z} D\0gone\0::100644 160000 160000 {h} {h} {h} MM\0merged\0\
             ::160000 160000 100644 {h} {h} {h} MM\0now-a-file\0"
        );
        assert_eq!(raw_gitlinks(&out), ["sub", "merged"]);
        assert_eq!(raw_gitlinks(""), Vec::<String>::new());
    }

    #[test]
    fn ls_files_records_are_read() {
        let h = "1".repeat(40);
        let out = format!("100644 {h} 0\ta b\0160000 {h} 0\tsub\0160000 {h} 2\tx\ty\0");
        let got = parse_ls_files(&out);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].path, b"sub");
        assert_eq!(got[1].path, b"x\ty");
        assert_eq!(got[1].stage, 2);
    }

    #[test]
    fn tail_options_follow_the_command() {
        assert_eq!(tail_options("status", None), ["--ignore-submodules=all"]);
        assert!(tail_options("diff-files", None).contains(&"--ignore-submodules=all"));
        assert!(tail_options("stash", Some("show")).contains(&"--submodule=short"));
        assert!(tail_options("stash", Some("pop")).is_empty());
        assert!(tail_options("commit", None).is_empty());
    }
}
