//! Host-side git: a sandbox's own checkout sharing the operator's objects, and bringing its
//! branch back.
//!
//! Layout under the sandbox's directory (`paths`):
//!
//! ```text
//! repo.git/               the sandbox's git dir: `git init --bare`, core.bare=false, one
//!                         branch (refs/heads/<branch>) and HEAD on it; nothing else of the
//!                         operator's refs, so the sandbox cannot list another's branch
//! repo.git/objects/info/alternates = ../../shared.git/objects
//! shared.git/objects  ->  <operator>/.git/objects   (a symlink on the host; in the container
//!                         the same directory is mounted read-only at
//!                         /var/lib/airlock/git/shared.git/objects, so the relative path
//!                         resolves on both sides)
//! work/                   the work tree, with an empty .git (the mount point of the cover)
//! ```
//!
//! This is the entrypoint's hidden-`.git` layout (docs/docker.md#git) with the git dir kept
//! out of the work tree, so the entrypoint and the git API need no change; an extra sandbox
//! costs its checkout plus the objects its agent writes.
//!
//! Nothing here runs what a sandbox wrote: the sandbox's git dir is only ever read by
//! `git fetch` from the operator's repository (upload-pack honours none of the sandbox's
//! config that runs commands), with `core.hooksPath=/dev/null` and `core.fsmonitor=false`
//! on the command line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use thiserror::Error;

/// The relative alternates line, valid on the host and in the container.
pub const ALTERNATES: &str = "../../shared.git/objects";
/// The agent's uid and gid in the image (the checkout's owner).
pub const AGENT_ID: u32 = 1000;

/// A failed host-side git step, naming the repository or path.
#[derive(Debug, Error)]
pub enum CheckoutError {
    /// The path is not the top of a git checkout with a `.git` directory.
    #[error(
        "{path} is not a git checkout ({why}); give the top directory of a repository with a commit (git init; git commit)"
    )]
    NotARepository {
        /// The path.
        path: PathBuf,
        /// What git said.
        why: String,
    },
    /// `git` itself could not be run.
    #[error("cannot run git ({source}); install git on the host")]
    Spawn {
        /// Why.
        source: std::io::Error,
    },
    /// A git step failed.
    #[error("git {step} in {path} failed: {stderr}")]
    Git {
        /// Which step.
        step: &'static str,
        /// Where.
        path: PathBuf,
        /// git's last line.
        stderr: String,
    },
    /// A file step failed.
    #[error("cannot {step} {path}: {source}")]
    Io {
        /// Which step.
        step: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CheckoutError {
    let path = path.to_path_buf();
    move |source| CheckoutError::Io { step, path, source }
}

/// `git` with the options every host-side call carries: no hooks, no fsmonitor, no pager,
/// no prompt.
fn git() -> Command {
    let mut c = Command::new("git");
    c.args([
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
    ]);
    c.env("GIT_TERMINAL_PROMPT", "0").env("GIT_PAGER", "cat");
    c
}

/// `git` in the operator's repository at `top`. Its owner may not be us (`sudo airlock run
/// ~/src/app` is root working on the user's repository): git's ownership check is told this
/// repository is the operator's to use (`safe.directory`, as for a repository of our own;
/// hooks and fsmonitor stay off), and whatever git writes there goes back to the owner
/// ([`restore_owner`]) so the owner's own git keeps working.
fn op_git(top: &Path) -> Command {
    let mut c = git();
    c.arg("-c")
        .arg(format!("safe.directory={}", top.display()))
        .arg("-C")
        .arg(top);
    c
}

/// After a write into the operator's repository as root: hand every file and directory of
/// its `.git` that root owns (what that write made) back to the owner of `.git`. Nothing to
/// do when we are not root or the owner is root.
pub fn restore_owner(top: &Path) -> Result<(), CheckoutError> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let git_dir = top.join(".git");
    let meta = std::fs::metadata(&git_dir).map_err(io("stat", &git_dir))?;
    if meta.uid() == 0 {
        return Ok(());
    }
    fn walk(path: &Path, uid: u32, gid: u32) -> Result<(), CheckoutError> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io("stat", path)(e)),
        };
        if meta.uid() == 0 {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io("chown", path))?;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).map_err(io("read", path))? {
                walk(&entry.map_err(io("read", path))?.path(), uid, gid)?;
            }
        }
        Ok(())
    }
    for part in ["objects", "refs", "logs", "packed-refs", "index"] {
        walk(&git_dir.join(part), meta.uid(), meta.gid())?;
    }
    Ok(())
}

fn run(step: &'static str, path: &Path, cmd: &mut Command) -> Result<Output, CheckoutError> {
    let out = cmd
        .output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    if out.status.success() {
        return Ok(out);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    Err(CheckoutError::Git {
        step,
        path: path.into(),
        stderr: last.to_string(),
    })
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The operator's repository, as `new` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The top of the work tree (absolute).
    pub top: PathBuf,
    /// Its `.git` directory.
    pub git_dir: PathBuf,
    /// The commit HEAD points at.
    pub head: String,
    /// Whether the checkout has uncommitted changes (they do not go into a sandbox).
    pub dirty: bool,
}

/// Inspect `path`: it must be the top of a checkout whose `.git` is a directory.
pub fn operator(path: &Path) -> Result<Operator, CheckoutError> {
    let not = |why: String| CheckoutError::NotARepository {
        path: path.into(),
        why,
    };
    let top = std::fs::canonicalize(path).map_err(|e| not(e.to_string()))?;
    let git_dir = top.join(".git");
    if !git_dir.is_dir() {
        return Err(not("it has no .git directory at its top".into()));
    }
    let head = op_git(&top)
        .args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    if !head.status.success() {
        return Err(not("it has no commit yet".into()));
    }
    let status = run(
        "status",
        &top,
        op_git(&top).args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ]),
    )?;
    Ok(Operator {
        top,
        git_dir,
        head: text(&head),
        dirty: !status.stdout.is_empty(),
    })
}

/// The operator's git identity as git sees it in their repository (`user.name` and
/// `user.email`: the repository's config, then the user's), the agent's default commit
/// identity; under sudo the invoking user's (their HOME), as `scripts/docker-run` reads it.
pub fn identity(top: &Path) -> (Option<String>, Option<String>) {
    let home = sudo_home();
    let get = |key: &str| {
        let mut c = git();
        c.arg("-c")
            .arg(format!("safe.directory={}", top.display()))
            .arg("-C")
            .arg(top)
            .args(["config", "--get", key]);
        if let Some(h) = &home {
            c.env("HOME", h);
        }
        c.output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| text(&o))
            .filter(|v| !v.is_empty())
    };
    (get("user.name"), get("user.email"))
}

fn sudo_home() -> Option<PathBuf> {
    let user = std::env::var("SUDO_USER")
        .ok()
        .filter(|u| !u.is_empty() && u != "root")?;
    Some(nix::unistd::User::from_name(&user).ok()??.dir)
}

/// The paths of one sandbox's checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The sandbox directory.
    pub dir: PathBuf,
}

impl Checkout {
    /// The git dir.
    pub fn git_dir(&self) -> PathBuf {
        self.dir.join("repo.git")
    }
    /// The work tree.
    pub fn work_tree(&self) -> PathBuf {
        self.dir.join("work")
    }
    /// The audit directory.
    pub fn audit(&self) -> PathBuf {
        self.dir.join("audit")
    }
    fn shared(&self) -> PathBuf {
        self.dir.join("shared.git")
    }

    /// Create the checkout of `branch` at `base`, borrowing `op`'s objects. The directory
    /// must not exist (the registry row was claimed first, so no other `new` makes it).
    pub fn create(&self, op: &Operator, branch: &str, base: &str) -> Result<(), CheckoutError> {
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let gd = self.git_dir();
        let empty_template = self.dir.join(".template");
        std::fs::create_dir_all(&empty_template).map_err(io("create", &empty_template))?;
        let mut tpl = std::ffi::OsString::from("--template=");
        tpl.push(&empty_template);
        run(
            "init",
            &gd,
            git().args(["init", "--bare", "--quiet"]).arg(tpl).arg(&gd),
        )?;
        std::fs::remove_dir_all(&empty_template).map_err(io("remove", &empty_template))?;
        let shared = self.shared();
        std::fs::create_dir_all(&shared).map_err(io("create", &shared))?;
        std::os::unix::fs::symlink(op.git_dir.join("objects"), shared.join("objects"))
            .map_err(io("link the shared objects at", &shared))?;
        let info = gd.join("objects/info");
        std::fs::create_dir_all(&info).map_err(io("create", &info))?;
        std::fs::write(info.join("alternates"), format!("{ALTERNATES}\n"))
            .map_err(io("write the alternates of", &gd))?;
        let g = |c: &mut Command| {
            c.arg("--git-dir").arg(&gd);
        };
        let mut c = git();
        g(&mut c);
        run("config", &gd, c.args(["config", "core.bare", "false"]))?;
        let mut c = git();
        g(&mut c);
        run(
            "update-ref",
            &gd,
            c.args(["update-ref", &format!("refs/heads/{branch}"), base]),
        )?;
        let mut c = git();
        g(&mut c);
        run(
            "symbolic-ref",
            &gd,
            c.args(["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")]),
        )?;
        let work = self.work_tree();
        std::fs::create_dir_all(&work).map_err(io("create", &work))?;
        let mut c = git();
        g(&mut c);
        c.arg("--work-tree")
            .arg(&work)
            .args(["reset", "--hard", "--quiet"]);
        run("checkout", &work, &mut c)?;
        std::fs::create_dir_all(work.join(".git")).map_err(io("create", &work))?;
        std::fs::create_dir_all(self.audit()).map_err(io("create", &self.audit()))?;
        chown_tree(&gd, AGENT_ID)?;
        chown_tree(&work, AGENT_ID)
    }

    /// Whether the work tree holds changes not committed to its branch (tracked files
    /// changed, or new files not ignored). Hooks and fsmonitor off, as everywhere here.
    pub fn uncommitted(&self) -> Result<bool, CheckoutError> {
        let gd = self.git_dir();
        let mut c = git();
        c.arg("-c")
            .arg(format!("safe.directory={}", gd.display()))
            .arg("--git-dir")
            .arg(&gd)
            .arg("--work-tree")
            .arg(self.work_tree())
            .args(["--no-optional-locks", "status", "--porcelain"]);
        let out = run("status", &self.work_tree(), &mut c)?;
        Ok(!out.stdout.is_empty())
    }

    /// Remove the whole sandbox directory (never the operator's objects: the link only).
    pub fn remove(&self) -> Result<(), CheckoutError> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &self.dir)(e)),
            _ => Ok(()),
        }
    }
}

fn chown_tree(path: &Path, id: u32) -> Result<(), CheckoutError> {
    // As the operator's own uid (1000) this changes nothing; as root it hands the checkout
    // to the agent's uid, which the entrypoint requires. Symlinks themselves, never targets.
    std::os::unix::fs::lchown(path, Some(id), Some(id)).map_err(io("chown", path))?;
    let meta = std::fs::symlink_metadata(path).map_err(io("stat", path))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io("read", path))? {
            chown_tree(&entry.map_err(io("read", path))?.path(), id)?;
        }
    }
    Ok(())
}

/// The hidden ref the operator's repository keeps a sandbox's tip under (so that `ahead`
/// can be counted without running git in the sandbox's git dir).
pub fn tip_ref(name: &str) -> String {
    format!("refs/airlock/sandboxes/{name}")
}

/// Fetch the sandbox's branch into the operator's repository: its tip under [`tip_ref`]
/// (forced: it mirrors the sandbox) and, unless `branch_back` is `None`, as that branch
/// (not forced: never overwrites the operator's own commits). Hooks off, the sandbox's
/// config never executed. Returns the tip.
pub fn fetch(
    op_top: &Path,
    ck: &Checkout,
    name: &str,
    branch: &str,
    branch_back: Option<&str>,
) -> Result<String, CheckoutError> {
    let gd = ck.git_dir();
    // The local transport runs upload-pack in the sandbox's git dir with our `-c` options
    // cleared; it must be told there (the dir belongs to the agent's uid, not ours).
    let quoted = shell_quote(&gd.display().to_string());
    let upload_pack = format!(
        "git -c safe.directory={quoted} -c core.hooksPath=/dev/null -c core.fsmonitor=false upload-pack"
    );
    let mut c = op_git(op_top);
    c.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
    ]);
    c.arg(format!("--upload-pack={upload_pack}"));
    c.arg(&gd);
    c.arg(format!("+refs/heads/{branch}:{}", tip_ref(name)));
    if let Some(back) = branch_back {
        c.arg(format!("refs/heads/{branch}:refs/heads/{back}"));
    }
    let fetched = run("fetch", op_top, &mut c);
    restore_owner(op_top)?;
    fetched?;
    let out = run(
        "rev-parse",
        op_top,
        op_git(op_top).args(["rev-parse", &tip_ref(name)]),
    )?;
    Ok(text(&out))
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// How many commits of `tip` the operator's repository has in no branch, tag or
/// remote-tracking ref: the work that `destroy` would lose.
pub fn ahead(op_top: &Path, tip: &str) -> Result<u64, CheckoutError> {
    let out = run(
        "rev-list",
        op_top,
        op_git(op_top).args([
            "rev-list",
            "--count",
            tip,
            "--not",
            "--branches",
            "--tags",
            "--remotes",
        ]),
    )?;
    Ok(text(&out).parse().unwrap_or(u64::MAX))
}

/// The paths that differ between `base` and `tip` (in the operator's repository).
pub fn changed_paths(op_top: &Path, base: &str, tip: &str) -> Result<Vec<String>, CheckoutError> {
    let mut c = op_git(op_top);
    c.args([
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        base,
        tip,
    ]);
    let out = run("diff", op_top, &mut c)?;
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// The paths among `changed` that can make the host run something without anyone typing a
/// command for it (an editor opening the folder, a shell entering it, git reading it, CI, a
/// package install): where a review should start.
pub fn risky(changed: &[String]) -> Vec<String> {
    const DIRS: [&str; 6] = [
        ".vscode/",
        ".devcontainer/",
        ".github/workflows/",
        ".husky/",
        ".idea/",
        ".gitlab/",
    ];
    const FILES: [&str; 9] = [
        ".envrc",
        ".env",
        ".gitattributes",
        ".gitmodules",
        ".gitlab-ci.yml",
        "package.json",
        ".pre-commit-config.yaml",
        ".npmrc",
        ".lfsconfig",
    ];
    changed
        .iter()
        .filter(|p| {
            let file = p.rsplit('/').next().unwrap_or(p);
            let nested_git = p.split('/').any(|c| c.eq_ignore_ascii_case(".git"));
            nested_git
                || FILES.contains(&file)
                || DIRS
                    .iter()
                    .any(|d| p.starts_with(d) || p.contains(&format!("/{d}")))
        })
        .cloned()
        .collect()
}

/// Forget the hidden tip ref (at destroy).
pub fn drop_tip(op_top: &Path, name: &str) -> Result<(), CheckoutError> {
    let mut c = op_git(op_top);
    c.args(["update-ref", "-d", &tip_ref(name)]);
    let done = run("update-ref -d", op_top, &mut c).map(|_| ());
    restore_owner(op_top)?;
    done
}

#[cfg(test)]
mod tests;
