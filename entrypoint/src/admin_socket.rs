//! The admin API's socket: bound by PID 1 in the control directory, handed to the proxy.
//!
//! PID 1 binds it (as root, while it may still enter the root-only parent of the control
//! directory) and keeps the listening descriptor for the container's life; every start of
//! the proxy inherits it (`--admin-fd`), so the socket outlives a proxy restart and no
//! process but PID 1 and the proxy ever holds it (it is close-on-exec everywhere else: the
//! agent and the git API never see it). The socket file is `0600`, owned by the control
//! directory's owner (the host user whose CLI connects through the bind mount); the proxy
//! checks each peer's credentials as well (`airlock_proxy::admin::peer`), admitting that
//! uid from outside the container only.

use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

/// The bound socket and who may use it from the host.
#[derive(Debug, Clone)]
pub struct AdminSocket {
    listener: Arc<UnixListener>,
    path: PathBuf,
    /// The control directory's owner when it is not root: the operator on the host.
    pub operator_uid: Option<u32>,
}

impl AdminSocket {
    /// Binds `admin.sock` in `control_dir` (an earlier start's socket file is replaced),
    /// `0600`, owned by the directory's owner.
    ///
    /// # Errors
    /// When the socket cannot be bound or given to the directory's owner: the start fails.
    pub fn bind(control_dir: &Path) -> Result<AdminSocket> {
        let path = control_dir.join(airlock_control::admin::SOCKET);
        let fix =
            "fix: give the container a writable control directory (docs/docker.md, \"Readiness\")";
        let owner = std::fs::metadata(control_dir).with_context(|| {
            format!(
                "cannot read the control directory {}; {fix}",
                control_dir.display()
            )
        })?;
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_dir() => anyhow::bail!(
                "{} is a directory, where the admin socket goes; remove it",
                path.display()
            ),
            Ok(_) => std::fs::remove_file(&path).with_context(|| {
                format!("cannot remove the stale admin socket {}", path.display())
            })?,
            Err(_) => {}
        }
        let listener = UnixListener::bind(&path)
            .with_context(|| format!("cannot bind the admin socket {}; {fix}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot set the mode of {}", path.display()))?;
        std::os::unix::fs::lchown(&path, Some(owner.uid()), Some(owner.gid())).with_context(
            || {
                format!(
                    "cannot give the admin socket {} to uid {}",
                    path.display(),
                    owner.uid()
                )
            },
        )?;
        Ok(AdminSocket {
            listener: Arc::new(listener),
            path,
            operator_uid: (owner.uid() != 0).then_some(owner.uid()),
        })
    }

    /// The listening descriptor (close-on-exec; a child keeps it only when asked).
    #[must_use]
    pub fn fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Where it is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_private_to_the_directory_owner_and_replaces_a_stale_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(airlock_control::admin::SOCKET), b"stale").unwrap();
        let s = AdminSocket::bind(dir.path()).unwrap();
        let m = std::fs::symlink_metadata(s.path()).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(m.uid(), std::fs::metadata(dir.path()).unwrap().uid());
        // Close-on-exec: no child inherits it unless asked.
        // SAFETY: F_GETFD reads the flags of a descriptor this test holds.
        let flags = unsafe { libc::fcntl(s.fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }
}
