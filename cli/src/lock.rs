//! A process's hold on one sandbox name while it is making or running that sandbox (`new`
//! until the agent is ready, `run` until its session has been fetched back and removed): an
//! exclusive `flock` on `<data>/locks/<name>`, which the kernel drops when the process dies,
//! however it dies (a SIGKILL included).
//!
//! `gc` takes the same lock without waiting before it touches a sandbox: a lock it cannot
//! take is a live `new` or `run`, so it never removes what one is still working on; a lock it
//! can take on a `run`'s sandbox means that `run` is gone, and `gc` may finish its work.
//!
//! A lock file is unlinked only by a holder (when the sandbox is removed); a taker checks
//! after locking that the path still names the file it locked, so a file unlinked between
//! its `open` and its `flock` is never taken for the name's lock.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A held name lock; dropping it releases the lock (the file stays).
#[derive(Debug)]
pub struct NameLock {
    _held: Flock<File>,
    path: PathBuf,
}

/// Where the name locks live under the data directory.
pub fn dir(data: &Path) -> PathBuf {
    data.join("locks")
}

impl NameLock {
    /// Take the lock of `name` under `data` without waiting: `Ok(None)` when another process
    /// holds it.
    pub fn try_take(data: &Path, name: &str) -> std::io::Result<Option<NameLock>> {
        let dir = dir(data);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(name);
        loop {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            let held = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(h) => h,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                Err((_, e)) => return Err(std::io::Error::from(e)),
            };
            // Still the file at the path? A holder may have unlinked it while we opened it.
            let ours = held.metadata()?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => {
                    return Ok(Some(NameLock { _held: held, path }));
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Unlink the lock file (the sandbox is gone), then release the lock.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::NameLock;

    #[test]
    fn one_holder_at_a_time_and_free_again_when_released_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let a = NameLock::try_take(dir.path(), "x").unwrap().unwrap();
        assert!(NameLock::try_take(dir.path(), "x").unwrap().is_none());
        assert!(NameLock::try_take(dir.path(), "y").unwrap().is_some());
        drop(a);
        let b = NameLock::try_take(dir.path(), "x").unwrap().unwrap();
        b.remove();
        assert!(!super::dir(dir.path()).join("x").exists());
        assert!(NameLock::try_take(dir.path(), "x").unwrap().is_some());
    }

    #[test]
    fn a_killed_holder_frees_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = super::dir(dir.path()).join("k");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "").unwrap();
        // flock(1) holds the lock (its command, with -o, does not), then is SIGKILLed.
        let mut child = std::process::Command::new("flock")
            .args(["-x", "-o"])
            .arg(&path)
            .args(["sleep", "20"])
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while NameLock::try_take(dir.path(), "k").unwrap().is_some() {
            assert!(start.elapsed().as_secs() < 10, "flock never took the lock");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // (flock's own child may still hold a copy of the descriptor for the moment before
        // it closes it and runs its command)
        let start = std::time::Instant::now();
        while NameLock::try_take(dir.path(), "k").unwrap().is_none() {
            assert!(
                start.elapsed().as_secs() < 5,
                "the killed holder's lock stays held"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
