//! Host-side git: a sandbox's own checkout, borrowing the objects of its base, and bringing
//! its branch back.
//!
//! Layout under the sandbox's directory (`paths`):
//!
//! ```text
//! repo.git/               the sandbox's git dir: `git init --bare`, core.bare=false, one
//!                         branch (refs/heads/<branch>) and HEAD on it; nothing else of the
//!                         operator's refs, so the sandbox cannot list another's branch
//! repo.git/objects/info/alternates = ../../shared.git/objects
//! shared.git/objects  ->  <data>/stores/<base>.git/objects   (a symlink on the host to the
//!                         store of the sandbox's base ([`store`]); in the container that
//!                         store is mounted read-only at /var/lib/airlock/git/shared.git/objects
//!                         and its ancestors beside it, so the relative paths resolve on both
//!                         sides)
//! work/                   the work tree, with an empty .git (the mount point of the cover)
//! audit/                  the audit log (the proxy user's once the sandbox has started)
//! control/                the control directory (0700, the operator's): the start's
//!                         readiness record, written by PID 1
//! host.git/               the CLI's own git dir for reading the sandbox (never mounted):
//!                         only our config, the sandbox's objects through alternates, the
//!                         branch tip the CLI read and validated itself
//! ```
//!
//! This is the entrypoint's hidden-`.git` layout (docs/docker.md#git) with the git dir kept
//! out of the work tree, so the entrypoint and the git API need no change. A sandbox reads
//! the objects its base reaches and the ones it makes, nothing else of the operator's; what
//! an extra sandbox costs on disk is in [`store`]'s docs.
//!
//! **Nothing a sandbox wrote runs here.** After its agent has run, `repo.git` and `work/` are
//! the agent's: the host never runs git with `repo.git` as its repository (its config,
//! hooks, attributes, commit-graph, index), never lets git walk into a repository inside
//! `work/`, and reads the branch tip itself ([`refs`]). Whether the work tree holds
//! uncommitted changes and the fetch-back both go through `host.git` ([`git::ours`]):
//! "uncommitted" compares `work/` with the tip in an index of ours (submodules ignored, no
//! attribute driver configured, so no filter can run); the fetch runs `upload-pack` in
//! `host.git`. The operator's repository is run with its owner's config and git's ownership
//! check as git has it ([`git::operator`]).

mod git;
pub mod range;
pub mod refs;
pub mod remotes;
pub mod store;

use git::{ours, run, text};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
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
    /// git refuses the repository (another account's, an unknown format, ...).
    #[error(
        "git refuses the repository {path} ({why}); run airlock as the account that owns it (under sudo, git accepts the invoking user's repositories)"
    )]
    Refused {
        /// The repository.
        path: PathBuf,
        /// git's reason, one line.
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
        /// git's reason, one line.
        stderr: String,
    },
    /// The sandbox's branch (or its object store) is not what the CLI accepts as such.
    #[error("cannot read the sandbox's branch at {path}: {why}")]
    BadRef {
        /// The file read.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
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

pub(crate) fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CheckoutError {
    let path = path.to_path_buf();
    move |source| CheckoutError::Io { step, path, source }
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
    /// What of the work tree a sandbox will not have: changed tracked files, untracked files
    /// and ignored ones (an `.env`, `node_modules/`), as `git status` names them.
    pub left_out: LeftOut,
}

/// The parts of the operator's work tree a sandbox does not get (it starts from HEAD).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Tracked files with changes not committed (staged or not).
    pub changed: Vec<String>,
    /// Untracked files (a directory of them as one `dir/`).
    pub untracked: Vec<String>,
    /// Ignored files (an ignored directory as one `dir/`).
    pub ignored: Vec<String>,
}

impl LeftOut {
    /// `git status --porcelain -z --ignored` output, read. Pure.
    pub fn parse(status: &[u8]) -> LeftOut {
        let mut out = LeftOut::default();
        let mut records = status.split(|b| *b == 0).filter(|r| !r.is_empty());
        while let Some(r) = records.next() {
            if r.len() < 4 {
                continue;
            }
            let path = String::from_utf8_lossy(&r[3..]).into_owned();
            match &r[..2] {
                b"??" => out.untracked.push(path),
                b"!!" => out.ignored.push(path),
                code => {
                    // A rename or copy names its source in the next record.
                    if code[0] == b'R' || code[0] == b'C' {
                        records.next();
                    }
                    out.changed.push(path);
                }
            }
        }
        out
    }

    /// Nothing left out.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.untracked.is_empty() && self.ignored.is_empty()
    }

    /// `2 changed (a, b), 1 untracked (n), 3 ignored (.env, build/, ...)`: at most `shown`
    /// names of each kind, escaped.
    pub fn describe(&self, shown: usize) -> String {
        let mut parts = Vec::new();
        for (what, list) in [
            ("changed", &self.changed),
            ("untracked", &self.untracked),
            ("ignored", &self.ignored),
        ] {
            if list.is_empty() {
                continue;
            }
            let mut names: Vec<String> = list
                .iter()
                .take(shown)
                .map(|p| crate::review::escape(p.as_bytes()))
                .collect();
            if list.len() > shown {
                names.push("...".into());
            }
            parts.push(format!("{} {what} ({})", list.len(), names.join(", ")));
        }
        parts.join(", ")
    }
}

/// Inspect `path`: it must be the top of a checkout whose `.git` is a directory, and one git
/// accepts (its ownership check included: a repository git refuses is refused with git's
/// reason).
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
    let head = git::operator(&top)
        .args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    if !head.status.success() {
        let why = git::reason(&head.stderr);
        if why.is_empty() {
            return Err(not("it has no commit yet".into()));
        }
        return Err(CheckoutError::Refused { path: top, why });
    }
    let status = run(
        "status",
        &top,
        git::operator(&top).args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=normal",
            "--ignored=traditional",
            "--ignore-submodules=all",
        ]),
    )?;
    let left_out = LeftOut::parse(&status.stdout);
    Ok(Operator {
        top,
        git_dir,
        head: text(&head),
        dirty: !left_out.changed.is_empty(),
        left_out,
    })
}

/// The operator's git identity as git sees it in their repository (`user.name` and
/// `user.email`: the repository's config, then the user's), the agent's default commit
/// identity; under sudo the invoking user's (their HOME), as `scripts/docker-run` reads it.
pub fn identity(top: &Path) -> (Option<String>, Option<String>) {
    let home = sudo_home();
    let get = |key: &str| {
        let mut c = git::operator(top);
        c.args(["config", "--get", key]);
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
    /// The control directory, mounted at `airlock_control::paths::CONTROL_DIR`: the start's
    /// readiness record is read here.
    pub fn control(&self) -> PathBuf {
        self.dir.join("control")
    }
    /// The CLI's own git dir for reading the sandbox (see the module docs).
    pub fn host_git(&self) -> PathBuf {
        self.dir.join("host.git")
    }
    fn shared(&self) -> PathBuf {
        self.dir.join("shared.git")
    }

    /// Create the checkout of `branch` at `base`, borrowing the objects of `store` (the
    /// store of `base`, [`store::Stores::acquire`]). The directory must not exist (the
    /// registry row was claimed first, so no other `new` makes it).
    pub fn create(&self, store: &Path, branch: &str, base: &str) -> Result<(), CheckoutError> {
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let gd = self.git_dir();
        init_bare(&gd, base)?;
        let shared = self.shared();
        std::fs::create_dir_all(&shared).map_err(io("create", &shared))?;
        std::os::unix::fs::symlink(store.join("objects"), shared.join("objects"))
            .map_err(io("link the shared objects at", &shared))?;
        let info = gd.join("objects/info");
        std::fs::create_dir_all(&info).map_err(io("create", &info))?;
        std::fs::write(info.join("alternates"), format!("{ALTERNATES}\n"))
            .map_err(io("write the alternates of", &gd))?;
        run(
            "config",
            &gd,
            ours(&gd).args(["config", "core.bare", "false"]),
        )?;
        run(
            "update-ref",
            &gd,
            ours(&gd).args(["update-ref", &format!("refs/heads/{branch}"), base]),
        )?;
        run(
            "symbolic-ref",
            &gd,
            ours(&gd).args(["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")]),
        )?;
        let work = self.work_tree();
        std::fs::create_dir_all(&work).map_err(io("create", &work))?;
        let mut c = ours(&gd);
        c.arg("--work-tree")
            .arg(&work)
            .args(["reset", "--hard", "--quiet"]);
        run("checkout", &work, &mut c)?;
        std::fs::create_dir_all(work.join(".git")).map_err(io("create", &work))?;
        std::fs::create_dir_all(self.audit()).map_err(io("create", &self.audit()))?;
        // The operator's (never the agent's): only PID 1, as root, writes into it.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(self.control())
            .map_err(io("create", &self.control()))?;
        chown_tree(&gd, AGENT_ID)?;
        chown_tree(&work, AGENT_ID)
    }

    /// Give the sandbox the operator's remotes (`entries`, [`remotes::of_operator`]) and the
    /// keys that name it (`sandbox`, the `branch` that comes back), before its agent runs.
    pub fn set_remotes(
        &self,
        entries: &[(String, String)],
        sandbox: &str,
        branch: &str,
    ) -> Result<(), CheckoutError> {
        let gd = self.git_dir();
        remotes::write(&gd, entries, sandbox, branch)?;
        let config = gd.join("config");
        std::os::unix::fs::lchown(&config, Some(AGENT_ID), Some(AGENT_ID))
            .map_err(io("chown", &config))
    }

    /// The store this sandbox borrows from (its `shared.git/objects` link), if it is one of
    /// `stores`.
    pub fn store(&self, stores: &store::Stores) -> Option<PathBuf> {
        let target = std::fs::read_link(self.shared().join("objects")).ok()?;
        let store = target.parent()?;
        (store.parent()? == stores.dir).then(|| store.to_path_buf())
    }

    /// `host.git` made ready to read the sandbox at `tip`: only our config, the sandbox's
    /// objects through alternates (after checking that the sandbox's own alternates line is
    /// still the one written at creation), `refs/heads/tip` and HEAD at `tip` (git checks
    /// that it is a commit the objects hold).
    fn host_at(&self, tip: &str) -> Result<PathBuf, CheckoutError> {
        let hg = self.host_git();
        if !hg.join("HEAD").is_file() {
            init_bare(&hg, tip)?;
        }
        let objects = self.git_dir().join("objects");
        match std::fs::symlink_metadata(&objects) {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(CheckoutError::BadRef {
                    path: objects,
                    why: "it is not a directory".into(),
                });
            }
        }
        let alternates = objects.join("info/alternates");
        let line = refs::read_plain(&alternates, 4096)?.unwrap_or_default();
        if line != format!("{ALTERNATES}\n").as_bytes() {
            return Err(CheckoutError::BadRef {
                path: alternates,
                why: format!(
                    "it names {:?}, not the store airlock gave the sandbox",
                    crate::review::escape(&line)
                ),
            });
        }
        let objects = objects.display().to_string();
        if objects.contains('\n') || objects.starts_with('"') {
            return Err(CheckoutError::BadRef {
                path: objects.into(),
                why: "the data directory's path holds a newline or starts with a quote".into(),
            });
        }
        let info = hg.join("objects/info");
        std::fs::create_dir_all(&info).map_err(io("create", &info))?;
        std::fs::write(info.join("alternates"), format!("{objects}\n"))
            .map_err(io("write the alternates of", &hg))?;
        run(
            "update-ref",
            &hg,
            ours(&hg).args(["update-ref", "--no-deref", "refs/heads/tip", tip]),
        )?;
        Ok(hg)
    }

    /// Whether the work tree holds changes not committed to `branch` (tracked files
    /// changed, or new files not ignored): the work tree compared with the branch's tip in
    /// an index of ours, never the sandbox's git dir, submodules ignored.
    pub fn uncommitted(&self, branch: &str) -> Result<bool, CheckoutError> {
        let tip = refs::branch_tip(&self.git_dir(), branch)?;
        let hg = self.host_at(&tip)?;
        run(
            "read-tree",
            &hg,
            ours(&hg).args(["read-tree", "refs/heads/tip"]),
        )?;
        let work = self.work_tree();
        let mut c = ours(&hg);
        c.arg("--work-tree").arg(&work).args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "-z",
            "--ignore-submodules=all",
            "--untracked-files=normal",
            "--no-renames",
        ]);
        let out = run("status", &work, &mut c)?;
        Ok(!out.stdout.is_empty())
    }

    /// Remove the whole sandbox directory (never a store: the link only).
    pub fn remove(&self) -> Result<(), CheckoutError> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &self.dir)(e)),
            _ => Ok(()),
        }
    }
}

/// `git init --bare` of `path` with no template (no sample hooks), in the object format of
/// the object id `like`; HEAD on `refs/heads/tip`.
pub(crate) fn init_bare(path: &Path, like: &str) -> Result<(), CheckoutError> {
    let format = if like.len() == 64 { "sha256" } else { "sha1" };
    run(
        "init",
        path,
        ours(path).args([
            "init",
            "--bare",
            "--quiet",
            "--template=",
            &format!("--object-format={format}"),
        ]),
    )?;
    run(
        "symbolic-ref",
        path,
        ours(path).args(["symbolic-ref", "HEAD", "refs/heads/tip"]),
    )?;
    Ok(())
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
/// can be counted without reading the sandbox again).
pub fn tip_ref(name: &str) -> String {
    format!("refs/airlock/sandboxes/{name}")
}

/// Fetch the sandbox's branch into the operator's repository: its tip under [`tip_ref`]
/// (forced: it mirrors the sandbox) and, unless `branch_back` is `None`, as that branch
/// (not forced: never overwrites the operator's own commits). The tip is read by the CLI
/// ([`refs::branch_tip`]) and fetched from `host.git` (see the module docs): nothing of the
/// sandbox's config, hooks or attributes is used. Returns the tip.
pub fn fetch(
    op_top: &Path,
    ck: &Checkout,
    name: &str,
    branch: &str,
    branch_back: Option<&str>,
) -> Result<String, CheckoutError> {
    let tip = refs::branch_tip(&ck.git_dir(), branch)?;
    let hg = ck.host_at(&tip)?;
    // The local transport runs upload-pack in host.git with the fetch's environment and
    // `-c` options cleared: it is given ours again.
    let env: Vec<String> = git::OURS_ENV
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let upload_pack = format!("{} git {} upload-pack", env.join(" "), git::ours_options());
    let mut c = git::operator(op_top);
    c.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
    ]);
    c.arg(format!("--upload-pack={upload_pack}"));
    c.arg("--");
    c.arg(&hg);
    c.arg(format!("+refs/heads/tip:{}", tip_ref(name)));
    if let Some(back) = branch_back {
        c.arg(format!("refs/heads/tip:refs/heads/{back}"));
    }
    let fetched = run("fetch", op_top, &mut c);
    restore_owner(op_top)?;
    fetched?;
    Ok(tip)
}

/// Whether the operator's repository has the branch `branch`.
pub fn has_branch(op_top: &Path, branch: &str) -> Result<bool, CheckoutError> {
    let out = git::operator(op_top)
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ])
        .output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    Ok(out.status.success())
}

/// How many commits of `tip` the operator's repository has in no branch, tag or
/// remote-tracking ref: the work that `destroy` would lose.
pub fn ahead(op_top: &Path, tip: &str) -> Result<u64, CheckoutError> {
    let out = run(
        "rev-list",
        op_top,
        git::operator(op_top).args([
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

/// Forget the hidden tip ref (at destroy).
pub fn drop_tip(op_top: &Path, name: &str) -> Result<(), CheckoutError> {
    let mut c = git::operator(op_top);
    c.args(["update-ref", "-d", &tip_ref(name)]);
    let done = run("update-ref -d", op_top, &mut c).map(|_| ());
    restore_owner(op_top)?;
    done
}

#[cfg(test)]
mod tests;
