//! Writing a file into a project directory without following a symlink: a project's files
//! are not trusted (a sandbox's branch may have put a symlink where airlock writes), so
//! neither the directory airlock creates nor the file it writes may be one, whatever
//! `--force` says.

use nix::fcntl::{AtFlags, OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::{Mode, SFlag, fstatat};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a file was not written.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The directory or the file is a symlink.
    #[error(
        "{path} is a symlink: airlock does not write through one (remove it, or write the file yourself)"
    )]
    Symlink {
        /// The symlink.
        path: PathBuf,
    },
    /// The directory is not a directory, or the file is not a regular file.
    #[error("{path} is not a {what}: move it aside first")]
    NotA {
        /// The path.
        path: PathBuf,
        /// `directory` or `regular file`.
        what: &'static str,
    },
    /// The file exists and was not to be replaced.
    #[error("{path} exists already")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A file step failed.
    #[error("cannot {step} {path}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(nix::Error) -> WriteError {
    let path = path.to_path_buf();
    move |e| WriteError::Io {
        step,
        path,
        source: std::io::Error::from(e),
    }
}

/// The kind of `name` in the directory `dir` (not following a symlink); `None` if absent.
fn kind_at(dir: &OwnedFd, name: &str, path: &Path) -> Result<Option<SFlag>, WriteError> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(SFlag::from_bits_truncate(
            st.st_mode & SFlag::S_IFMT.bits(),
        ))),
        Err(nix::errno::Errno::ENOENT) => Ok(None),
        Err(e) => Err(io("inspect", path)(e)),
    }
}

/// Write `contents` to `top/dir/file`: `top` is the directory the operator named (followed
/// as given); `dir` is made if missing and must be a real directory; `file` must not be a
/// symlink, and an existing one is replaced only with `force` (atomically, by a rename
/// within `dir`). Returns the file's path.
pub fn write_in(
    top: &Path,
    dir: &str,
    file: &str,
    contents: &[u8],
    force: bool,
) -> Result<PathBuf, WriteError> {
    let dir_path = top.join(dir);
    let file_path = dir_path.join(file);
    let top_fd = nix::fcntl::open(top, OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(io("open", top))?;
    match kind_at(&top_fd, dir, &dir_path)? {
        Some(SFlag::S_IFLNK) => return Err(WriteError::Symlink { path: dir_path }),
        Some(SFlag::S_IFDIR) => {}
        Some(_) => {
            return Err(WriteError::NotA {
                path: dir_path,
                what: "directory",
            });
        }
        None => {
            nix::sys::stat::mkdirat(&top_fd, dir, Mode::from_bits_truncate(0o755))
                .map_err(io("create", &dir_path))?;
        }
    }
    let dir_fd = openat(
        &top_fd,
        dir,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::errno::Errno::ELOOP => WriteError::Symlink {
            path: dir_path.clone(),
        },
        e => io("open", &dir_path)(e),
    })?;
    match kind_at(&dir_fd, file, &file_path)? {
        Some(SFlag::S_IFLNK) => return Err(WriteError::Symlink { path: file_path }),
        Some(SFlag::S_IFREG) if !force => return Err(WriteError::Exists { path: file_path }),
        Some(SFlag::S_IFREG) | None => {}
        Some(_) => {
            return Err(WriteError::NotA {
                path: file_path,
                what: "regular file",
            });
        }
    }
    let tmp = format!(".{file}.airlock-{}", std::process::id());
    let _ = nix::unistd::unlinkat(
        &dir_fd,
        tmp.as_str(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
    let fd = openat(
        &dir_fd,
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(io("create", &dir_path.join(&tmp)))?;
    let mut f = std::fs::File::from(fd);
    let written = f
        .write_all(contents)
        .and_then(|()| f.sync_all())
        .map_err(|source| WriteError::Io {
            step: "write",
            path: dir_path.join(&tmp),
            source,
        });
    // Never over a file that appeared since (unless forced); a rename replaces a symlink
    // itself, never its target.
    let flags = if force {
        RenameFlags::empty()
    } else {
        RenameFlags::RENAME_NOREPLACE
    };
    let renamed = written.and_then(|()| {
        renameat2(dir_fd.as_fd(), tmp.as_str(), dir_fd.as_fd(), file, flags).map_err(|e| match e {
            nix::errno::Errno::EEXIST => WriteError::Exists {
                path: file_path.clone(),
            },
            e => io("install", &file_path)(e),
        })
    });
    if renamed.is_err() {
        let _ = nix::unistd::unlinkat(
            &dir_fd,
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    renamed.map(|()| file_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_written_new_and_replaced_only_with_force() {
        let d = tempfile::tempdir().unwrap();
        let p = write_in(
            d.path(),
            ".devcontainer",
            "devcontainer.json",
            b"one",
            false,
        )
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        let e = write_in(
            d.path(),
            ".devcontainer",
            "devcontainer.json",
            b"two",
            false,
        );
        assert!(matches!(e, Err(WriteError::Exists { .. })), "{e:?}");
        write_in(d.path(), ".devcontainer", "devcontainer.json", b"two", true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let left: Vec<_> = std::fs::read_dir(d.path().join(".devcontainer"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
    }

    #[test]
    fn a_symlinked_directory_or_file_is_never_written_through_even_with_force() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let top = d.path().join("project");
        std::fs::create_dir(&top).unwrap();
        // The directory a symlink to somewhere else.
        std::os::unix::fs::symlink(&outside, top.join(".devcontainer")).unwrap();
        for force in [false, true] {
            let e = write_in(&top, ".devcontainer", "devcontainer.json", b"x", force);
            assert!(matches!(e, Err(WriteError::Symlink { .. })), "{e:?}");
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        std::fs::remove_file(top.join(".devcontainer")).unwrap();
        // The file a dangling symlink, and one to an existing file.
        std::fs::create_dir(top.join(".devcontainer")).unwrap();
        let target = outside.join("made-by-the-link");
        std::os::unix::fs::symlink(&target, top.join(".devcontainer/devcontainer.json")).unwrap();
        for force in [false, true] {
            let e = write_in(&top, ".devcontainer", "devcontainer.json", b"x", force);
            assert!(matches!(e, Err(WriteError::Symlink { .. })), "{e:?}");
        }
        assert!(!target.exists(), "the dangling link's target was created");
        std::fs::write(&target, "mine").unwrap();
        let e = write_in(&top, ".devcontainer", "devcontainer.json", b"x", true);
        assert!(matches!(e, Err(WriteError::Symlink { .. })), "{e:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
    }

    #[test]
    fn a_file_where_the_directory_goes_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".devcontainer"), "").unwrap();
        let e = write_in(d.path(), ".devcontainer", "devcontainer.json", b"x", true);
        assert!(matches!(e, Err(WriteError::NotA { .. })), "{e:?}");
    }
}
