//! The agent's global git configuration (`~/.gitconfig`), the same file in the workspace as
//! outside it.
//!
//! Outside the workspace the agent's git is the image's own and reads `~/.gitconfig` as it
//! is. In the workspace the git API runs git, and a key there that names a program
//! (`core.pager`, `core.fsmonitor`, `filter.*`, `alias.*`, `include.path`,
//! `url.*.insteadOf`, `credential.helper`, ...) would run it with the git API's identity.
//! So git there reads a *layer* made from the file, never the file:
//!
//! - [`AgentHome::layer`] reads `~/.gitconfig` as the agent could (`O_NOFOLLOW`: a symbolic
//!   link is not followed; a regular file owned by the agent with one link, at most
//!   [`MAX_GITCONFIG`] bytes), has git list it (`git config --file - --no-includes --list
//!   -z`: git's own reading, includes never followed), keeps only the keys the agent may
//!   write with `git config` in the workspace ([`crate::argv::WRITABLE_CONFIG`], values
//!   checked as a write's are; `branch.*` is the repository's business and stays out), and
//!   writes them into a sealed memfd the git children read as `GIT_CONFIG_GLOBAL`. git's
//!   precedence holds: system (the operator's default identity) < global (this layer) <
//!   the repository's < `-c`. The layer is remade only when the file's bytes change.
//! - A `git config --global` write in the workspace ([`AgentHome::edit`]) runs git on a
//!   copy of the file in the git API's private directory (root:airlock-git 2770, made by
//!   the entrypoint: the agent cannot reach it, so nothing there is a link it planted), and
//!   the result replaces `~/.gitconfig` by a rename in the home ([`Edit::store`]): written
//!   with the git API's effective uid, which is the agent's, never through a link.
//!
//! Reading the file costs an `open`, an `fstat` and a `read` per request (the bytes are
//! compared with the last ones); git lists it only when it changed.

use std::ffi::CString;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The largest `~/.gitconfig` the git API reads.
pub const MAX_GITCONFIG: u64 = 64 * 1024;

/// The file's name in the agent's home.
pub const GITCONFIG: &str = ".gitconfig";

/// Why `~/.gitconfig` was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// It is a symbolic link (never followed).
    #[error("~/.gitconfig is a symbolic link, which the git API does not follow")]
    Link,
    /// It is not a regular file.
    #[error("~/.gitconfig is not a regular file")]
    NotFile,
    /// It belongs to another uid.
    #[error("~/.gitconfig belongs to uid {0}, not the agent's")]
    Owner(u32),
    /// It has more than one hard link.
    #[error("~/.gitconfig has {0} hard links")]
    Links(u64),
    /// It is larger than [`MAX_GITCONFIG`].
    #[error("~/.gitconfig is larger than {MAX_GITCONFIG} bytes")]
    TooLarge,
    /// Opening or reading it failed.
    #[error("reading ~/.gitconfig: {0}")]
    Read(std::io::Error),
    /// The edited copy could not be made, read or put in place.
    #[error("writing ~/.gitconfig: {0}")]
    Write(std::io::Error),
    /// This git API has no private directory to edit a copy in.
    #[error("this git API has no private directory to edit ~/.gitconfig in")]
    NoScratch,
}

/// The git configuration layer made from `~/.gitconfig`, alive as long as this value.
#[derive(Debug)]
pub struct Layer {
    _fd: OwnedFd,
    path: PathBuf,
    text: String,
}

impl Layer {
    /// What git's children read as `GIT_CONFIG_GLOBAL` (`/proc/self/fd/N`).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The layer's text.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[derive(Debug)]
struct Cached {
    raw: Vec<u8>,
    layer: Option<Arc<Layer>>,
}

/// The agent's home as the git API sees it.
#[derive(Debug)]
pub struct AgentHome {
    dir: PathBuf,
    uid: u32,
    git: PathBuf,
    scratch: Option<PathBuf>,
    cache: Mutex<Option<Cached>>,
    edits: AtomicU64,
}

impl AgentHome {
    /// The home `dir` of the agent `uid`; `git` lists the file.
    #[must_use]
    pub fn new(dir: PathBuf, uid: u32, git: PathBuf) -> AgentHome {
        AgentHome {
            dir,
            uid,
            git,
            scratch: None,
            cache: Mutex::new(None),
            edits: AtomicU64::new(0),
        }
    }

    /// The same home, with `dir` (the agent cannot reach it) to edit copies in.
    #[must_use]
    pub fn with_scratch(mut self, dir: PathBuf) -> AgentHome {
        self.scratch = Some(dir);
        self
    }

    /// `~/.gitconfig`'s path.
    #[must_use]
    pub fn file(&self) -> PathBuf {
        self.dir.join(GITCONFIG)
    }

    /// `~/.gitconfig`'s bytes (`None`: there is none), read as the module docs say.
    pub fn read(&self) -> Result<Option<Vec<u8>>, HomeError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(self.file());
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(HomeError::Link),
            Err(e) => return Err(HomeError::Read(e)),
        };
        let meta = file.metadata().map_err(HomeError::Read)?;
        if !meta.file_type().is_file() {
            return Err(HomeError::NotFile);
        }
        if meta.uid() != self.uid {
            return Err(HomeError::Owner(meta.uid()));
        }
        if meta.nlink() != 1 {
            return Err(HomeError::Links(meta.nlink()));
        }
        if meta.len() > MAX_GITCONFIG {
            return Err(HomeError::TooLarge);
        }
        let mut raw = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        (&mut file)
            .take(MAX_GITCONFIG + 1)
            .read_to_end(&mut raw)
            .map_err(HomeError::Read)?;
        if raw.len() as u64 > MAX_GITCONFIG {
            return Err(HomeError::TooLarge);
        }
        Ok(Some(raw))
    }

    /// The layer git in the workspace reads as its global configuration, made from the file
    /// as it is now; `None` when there is no file, it cannot be read as the module docs
    /// say, or nothing in it is kept.
    pub fn layer(&self) -> Option<Arc<Layer>> {
        let raw = self.read().ok().flatten()?;
        let mut cache = self.cache.lock().ok()?;
        if let Some(c) = cache.as_ref()
            && c.raw == raw
        {
            return c.layer.clone();
        }
        let layer = self.make_layer(&raw);
        *cache = Some(Cached {
            raw,
            layer: layer.clone(),
        });
        layer
    }

    fn make_layer(&self, raw: &[u8]) -> Option<Arc<Layer>> {
        let listed = list(&self.git, raw)?;
        let text = filter(&listed);
        if text.is_empty() {
            return None;
        }
        let fd = sealed_memfd(text.as_bytes()).ok()?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        Some(Arc::new(Layer {
            _fd: fd,
            path,
            text,
        }))
    }

    /// A copy of `~/.gitconfig` in the private directory for git to edit (`git config
    /// --global` with `GIT_CONFIG_GLOBAL` = [`Edit::path`]); [`Edit::store`] puts the result
    /// in place. The copy is removed when the value is dropped.
    pub fn edit(&self) -> Result<Edit<'_>, HomeError> {
        let scratch = self.scratch.as_ref().ok_or(HomeError::NoScratch)?;
        let before = self.read()?;
        let n = self.edits.fetch_add(1, Ordering::Relaxed);
        let path = scratch.join(format!("gitconfig-{}-{n}", std::process::id()));
        // Group-readable: the git group's (the directory is setgid), so that git's access(2)
        // checks, made with the real uid (the git API's own), pass.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o660)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(HomeError::Write)?;
        // Whatever the umask says.
        f.set_permissions(std::fs::Permissions::from_mode(0o660))
            .map_err(HomeError::Write)?;
        let edit = Edit {
            home: self,
            path,
            before,
        };
        f.write_all(edit.before.as_deref().unwrap_or_default())
            .map_err(HomeError::Write)?;
        Ok(edit)
    }
}

/// A copy of `~/.gitconfig` being edited ([`AgentHome::edit`]).
#[derive(Debug)]
pub struct Edit<'a> {
    home: &'a AgentHome,
    path: PathBuf,
    before: Option<Vec<u8>>,
}

impl Edit<'_> {
    /// The copy's path (in the private directory).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The edited copy replaces `~/.gitconfig` (a new file renamed over it in the home, so
    /// a link there is replaced, never followed); nothing is written when git left the
    /// bytes as they were. Whether it wrote.
    pub fn store(&self) -> Result<bool, HomeError> {
        let mut after = Vec::new();
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .and_then(|f| f.take(MAX_GITCONFIG + 1).read_to_end(&mut after))
            .map_err(HomeError::Write)?;
        if after.len() as u64 > MAX_GITCONFIG {
            return Err(HomeError::TooLarge);
        }
        if self.before.as_deref() == Some(after.as_slice())
            || (self.before.is_none() && after.is_empty())
        {
            return Ok(false);
        }
        let n = self.home.edits.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .home
            .dir
            .join(format!(".gitconfig.airlock-{}-{n}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&after));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(HomeError::Write(e));
        }
        std::fs::rename(&tmp, self.home.file()).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            HomeError::Write(e)
        })?;
        Ok(true)
    }
}

impl Drop for Edit<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // git's own lock file, if it died holding one.
        let mut lock = self.path.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
    }
}

/// `raw` as git lists it (`key\nvalue\0` per entry, `key\0` for a key without a value),
/// includes not followed; `None` when git cannot read it.
fn list(git: &Path, raw: &[u8]) -> Option<Vec<u8>> {
    let mut child = Command::new(git)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .current_dir("/")
        .args(["config", "--file", "-", "--no-includes", "--list", "-z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let raw = raw.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&raw);
    });
    let out = child.wait_with_output().ok()?;
    let _ = feeder.join();
    out.status.success().then_some(out.stdout)
}

/// The layer's text from git's listing (see [`list`]): the keys the agent may write in the
/// workspace, each value checked as a write's would be, `branch.*` left out; one
/// `[section]` per key, the value quoted. Pure.
#[must_use]
pub fn filter(listed: &[u8]) -> String {
    let mut text = String::new();
    for entry in listed.split(|b| *b == 0) {
        let Ok(entry) = std::str::from_utf8(entry) else {
            continue;
        };
        let Some((key, value)) = entry.split_once('\n') else {
            continue;
        };
        let Some((section, name)) = key.split_once('.') else {
            continue;
        };
        if name.contains('.')
            || !crate::argv::config_key_writable(key)
            || crate::argv::config_value_fits(key, value).is_err()
        {
            continue;
        }
        let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str(&format!("[{section}]\n\t{name} = \"{quoted}\"\n"));
    }
    text
}

/// A memfd holding `bytes`, sealed against every change, inherited across exec (no
/// `MFD_CLOEXEC`: the git children open it as their own descriptor).
fn sealed_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let name = CString::new("airlock-git-global").unwrap_or_default();
    let fd = memfd_create(name.as_c_str(), MFdFlags::MFD_ALLOW_SEALING)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    let fd = OwnedFd::from(file);
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn home() -> (tempfile::TempDir, AgentHome) {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let home = AgentHome::new(
            dir.path().to_path_buf(),
            nix::unistd::geteuid().as_raw(),
            "/usr/bin/git".into(),
        )
        .with_scratch(scratch);
        (dir, home)
    }

    #[test]
    fn only_writable_keys_with_fitting_values_are_kept() {
        let listed = b"user.name\nAda \"L\" \\o\0core.pager\nless\0alias.co\n!sh\0\
include.path\n/x\0url.https://e.example/.insteadof\nhttps://github.com/\0\
credential.helper\nstore\0filter.x.clean\ncat\0branch.main.remote\norigin\0\
pull.rebase\ntrue\0pull.rebase\ninteractive\0color.ui\0init.defaultbranch\nmain\0";
        assert_eq!(
            filter(listed),
            "[user]\n\tname = \"Ada \\\"L\\\" \\\\o\"\n[pull]\n\trebase = \"true\"\n\
[init]\n\tdefaultbranch = \"main\"\n"
        );
    }

    #[test]
    fn git_reads_the_layer_as_the_file_says_and_nothing_else() {
        let (dir, home) = home();
        assert!(home.layer().is_none(), "no file, no layer");
        std::fs::write(
            dir.path().join(GITCONFIG),
            "[user]\n\tname = Ada\n[core]\n\tpager = less\n[include]\n\tpath = /etc/x\n\
[User]\n\tEmail = ada@example.org\n",
        )
        .unwrap();
        let layer = home.layer().unwrap();
        assert_eq!(
            layer.text(),
            "[user]\n\tname = \"Ada\"\n[user]\n\temail = \"ada@example.org\"\n"
        );
        let out = Command::new("/usr/bin/git")
            .env_clear()
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", layer.path())
            .args(["config", "--global", "--list"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "user.name=Ada\nuser.email=ada@example.org\n"
        );
        // Unchanged bytes: the same layer.
        assert!(Arc::ptr_eq(&layer, &home.layer().unwrap()));
    }

    #[test]
    fn a_link_a_fifo_a_hard_link_or_a_large_file_is_not_read() {
        let (dir, home) = home();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "[user]\n\tname = Link\n").unwrap();
        std::os::unix::fs::symlink(&target, home.file()).unwrap();
        assert!(matches!(home.read(), Err(HomeError::Link)));
        assert!(home.layer().is_none());
        std::fs::remove_file(home.file()).unwrap();
        nix::unistd::mkfifo(&home.file(), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(home.read(), Err(HomeError::NotFile)));
        std::fs::remove_file(home.file()).unwrap();
        std::fs::hard_link(&target, home.file()).unwrap();
        assert!(matches!(home.read(), Err(HomeError::Links(2))));
        std::fs::remove_file(home.file()).unwrap();
        std::fs::write(home.file(), vec![b'#'; MAX_GITCONFIG as usize + 1]).unwrap();
        assert!(matches!(home.read(), Err(HomeError::TooLarge)));
    }

    #[test]
    fn an_edit_replaces_a_link_instead_of_following_it() {
        let (dir, home) = home();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep\n").unwrap();
        let edit = home.edit().unwrap();
        std::fs::write(edit.path(), "[user]\n\tname = New\n").unwrap();
        std::os::unix::fs::symlink(&target, home.file()).unwrap();
        assert!(edit.store().unwrap());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
        assert_eq!(
            std::fs::read_to_string(home.file()).unwrap(),
            "[user]\n\tname = New\n"
        );
        assert!(!std::fs::symlink_metadata(home.file()).unwrap().is_symlink());
        let copy = edit.path().to_path_buf();
        drop(edit);
        assert!(!copy.exists(), "the copy is removed");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(".gitconfig.airlock"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
