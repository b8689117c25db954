//! Object stores per base commit: what a sandbox borrows instead of the operator's whole
//! object store, so that it can read exactly the objects reachable from its base (its own
//! branch's objects are its own), and an abbreviated id resolves among nothing else.
//!
//! ```text
//! <data>/stores/<base>.git/            one per base commit (any repository: an object id
//!                                      names the same history wherever it is)
//!     objects/pack/pack-*.{pack,idx}   the objects reachable from <base> and not from the
//!                                      parent store's base (one self-contained pack)
//!     objects/info/alternates          ../../<parent>.git/objects, when there is a parent
//!     refs/airlock/base                <base>
//! <data>/stores/.lock                  held while a store is made or linked, and by gc
//! ```
//!
//! A store is filled by `pack-objects --revs` in the operator's repository, which packs
//! only what is reachable from `<base>` (and not from the parent's base): an object the
//! operator reset away, or one only on another branch, is never in it. When a store of an
//! ancestor of `<base>` exists, the new store holds only what is new since, and chains to
//! it by alternates: the chain's union is still exactly what `<base>` reaches. git follows
//! at most 5 levels of alternates beyond a repository's own; a sandbox's git dir is one
//! level and the CLI's `host.git` another, so a chain is at most [`MAX_CHAIN`] stores: a
//! base chains to the nearest ancestor's store with room (then the new store holds what is
//! new since that one), and starts a fresh store when none has.
//!
//! Disk: the first sandbox of a repository costs one pack of its reachable history (about
//! the size of the operator's own packs) plus its checkout; another sandbox on the same base
//! costs its checkout only; one on a later base, a pack of the new objects. A store is kept
//! while a sandbox links it (directly or as an ancestor in a chain) and removed by `gc`.

use super::git::{self, ours, run};
use super::{CheckoutError, io};
use nix::fcntl::{Flock, FlockArg};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The longest chain of stores (see the module docs).
pub const MAX_CHAIN: usize = 4;
/// How many existing stores are tried as the parent of a new one (the newest first).
const CANDIDATES: usize = 16;

/// The stores of one data directory.
#[derive(Debug, Clone)]
pub struct Stores {
    /// `<data>/stores`.
    pub dir: PathBuf,
}

/// The stores' lock, held while it lives.
#[derive(Debug)]
pub struct StoresLock {
    _held: Flock<std::fs::File>,
}

fn is_oid(name: &str) -> bool {
    matches!(name.len(), 40 | 64) && name.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Stores {
    /// The stores under the data directory `data`.
    pub fn new(data: &Path) -> Stores {
        Stores {
            dir: data.join("stores"),
        }
    }

    /// The store of `base`.
    pub fn path(&self, base: &str) -> PathBuf {
        self.dir.join(format!("{base}.git"))
    }

    /// Take the stores' lock, waiting for another holder.
    pub fn lock(&self) -> Result<StoresLock, CheckoutError> {
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let path = self.dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        let held = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| io("lock", &path)(std::io::Error::from(e)))?;
        Ok(StoresLock { _held: held })
    }

    /// The chain of `store`: itself, then each parent its alternates name (ours), nearest
    /// first.
    pub fn chain(&self, store: &Path) -> Vec<PathBuf> {
        let mut out = vec![store.to_path_buf()];
        while out.len() <= MAX_CHAIN {
            let Some(last) = out.last() else { break };
            let line =
                std::fs::read_to_string(last.join("objects/info/alternates")).unwrap_or_default();
            let name = line
                .trim()
                .strip_prefix("../../")
                .and_then(|r| r.strip_suffix(".git/objects"))
                .filter(|n| is_oid(n));
            match name {
                Some(n) => out.push(self.path(n)),
                None => break,
            }
        }
        out
    }

    /// The store of `base` (made from the operator's repository at `top` if missing) and its
    /// chain, nearest first. The caller holds the [`StoresLock`] until the store is linked.
    pub fn acquire(&self, top: &Path, base: &str) -> Result<Vec<PathBuf>, CheckoutError> {
        let store = self.path(base);
        if store.join("objects").is_dir() {
            let chain = self.chain(&store);
            for s in &chain {
                touch(s);
            }
            return Ok(chain);
        }
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let parent = self.parent_for(top, base);
        let tmp = self.dir.join(format!(".tmp-{}-{base}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let made = self.fill(top, base, parent.as_deref(), &tmp);
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &store).map_err(io("install", &store))?;
        let chain = self.chain(&store);
        for s in &chain {
            touch(s);
        }
        Ok(chain)
    }

    /// The store to chain a new store of `base` to: of the stores whose base is an ancestor
    /// of `base` in `top` and whose chain has room for one more (the newest
    /// [`CANDIDATES`] looked at), the nearest to `base` (a descendant of the others).
    fn parent_for(&self, top: &Path, base: &str) -> Option<String> {
        let mut found: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(&self.dir)
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let oid = name.strip_suffix(".git")?.to_string();
                (is_oid(&oid) && oid.len() == base.len() && oid != base)
                    .then_some((e.metadata().ok()?.modified().ok()?, oid))
            })
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        let is_ancestor = |a: &str, b: &str| {
            git::operator(top)
                .args(["merge-base", "--is-ancestor", a, b])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let mut best: Option<String> = None;
        for (_, oid) in found.into_iter().take(CANDIDATES) {
            if self.chain(&self.path(&oid)).len() >= MAX_CHAIN || !is_ancestor(&oid, base) {
                continue;
            }
            if best.as_deref().is_none_or(|b| is_ancestor(b, &oid)) {
                best = Some(oid);
            }
        }
        best
    }

    /// Make the store of `base` at `tmp`: one pack of what `base` reaches and `parent`
    /// does not, packed in the operator's repository and indexed into ours.
    fn fill(
        &self,
        top: &Path,
        base: &str,
        parent: Option<&str>,
        tmp: &Path,
    ) -> Result<(), CheckoutError> {
        super::init_bare(tmp, base)?;
        if let Some(p) = parent {
            let info = tmp.join("objects/info");
            std::fs::create_dir_all(&info).map_err(io("create", &info))?;
            std::fs::write(info.join("alternates"), format!("../../{p}.git/objects\n"))
                .map_err(io("write the alternates of", tmp))?;
        }
        let mut revs = format!("{base}\n");
        if let Some(p) = parent {
            revs.push_str(&format!("^{p}\n"));
        }
        let mut pack = git::operator(top)
            .args([
                "pack-objects",
                "--revs",
                "--stdout",
                "--quiet",
                "--delta-base-offset",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| CheckoutError::Spawn { source })?;
        {
            use std::io::Write;
            let mut stdin = pack.stdin.take().ok_or_else(|| CheckoutError::Git {
                step: "pack-objects",
                path: top.into(),
                stderr: "no stdin".into(),
            })?;
            let _ = stdin.write_all(revs.as_bytes());
        }
        let stdout = pack
            .stdout
            .take()
            .map(Stdio::from)
            .unwrap_or_else(Stdio::null);
        let mut index = ours(tmp);
        index.args(["index-pack", "--stdin"]).stdin(stdout);
        let indexed = run("index-pack", tmp, &mut index);
        let packed = pack
            .wait_with_output()
            .map_err(|source| CheckoutError::Spawn { source })?;
        if !packed.status.success() {
            return Err(CheckoutError::Git {
                step: "pack-objects",
                path: top.into(),
                stderr: git::reason(&packed.stderr),
            });
        }
        indexed?;
        run(
            "update-ref",
            tmp,
            ours(tmp).args(["update-ref", "refs/airlock/base", base]),
        )?;
        Ok(())
    }

    /// Remove every store no chain of `live` (the stores sandboxes link) holds and that no
    /// sandbox was made on for `grace` (a `run` after a `run` on the same base finds its
    /// store), and any half-made one; the caller holds the [`StoresLock`]. Returns the
    /// removed stores' names.
    pub fn sweep(
        &self,
        live: &[PathBuf],
        grace: std::time::Duration,
    ) -> Result<Vec<String>, CheckoutError> {
        let mut keep = std::collections::BTreeSet::new();
        for s in live {
            keep.extend(self.chain(s));
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(Vec::new());
        };
        let mut removed = Vec::new();
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let store = name.strip_suffix(".git").is_some_and(is_oid);
            let idle = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age >= grace);
            if (store && idle && !keep.contains(&path)) || name.starts_with(".tmp-") {
                std::fs::remove_dir_all(&path).map_err(io("remove", &path))?;
                removed.push(name);
            }
        }
        Ok(removed)
    }
}

/// Mark `store` as used now (its directory's times), for [`Stores::sweep`]'s grace.
fn touch(store: &Path) {
    use nix::sys::stat::{UtimensatFlags, utimensat};
    use nix::sys::time::TimeSpec;
    let now = TimeSpec::UTIME_NOW;
    let _ = utimensat(
        nix::fcntl::AT_FDCWD,
        store,
        &now,
        &now,
        UtimensatFlags::FollowSymlink,
    );
}
