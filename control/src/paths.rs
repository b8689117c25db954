//! Where things are inside the container: the mount points the host's run command fills
//! and the entrypoint expects, and the control directory the two share.

use std::path::{Path, PathBuf};

/// The runtime directory (on the `/run` tmpfs): sockets and per-start state.
pub const RUN_DIR: &str = airlock_channels::RUN_DIR;
/// The agent's work tree: the repository, bind-mounted read-write.
pub const WORKSPACE: &str = "/workspace";
/// Where the repository's git dir is handed to the git service: the hidden git dir
/// (docs/design.md §5). Its parent is `root:airlock-git 0710` in the image, so the agent
/// cannot traverse to it; an empty read-only tmpfs ([`crate::tmpfs::GIT_COVER`]) covers the
/// work tree's own `.git`.
pub const HIDDEN_GIT_DIR: &str = "/var/lib/airlock/git/workspace.git";
/// Where a sandbox's shared object store is mounted (read-only) for the git service: a
/// sibling of [`HIDDEN_GIT_DIR`] under the same parent. The sandbox's
/// `objects/info/alternates` names it relatively.
pub const SHARED_OBJECTS_DIR: &str = "/var/lib/airlock/git/shared.git/objects";
/// The directory the shared store's ancestors (`<name>.git/objects`, named relatively by its
/// alternates) are mounted in, read-only, beside it.
pub const STORES_PARENT: &str = "/var/lib/airlock/git";
/// The audit log directory: a volume or a host directory, never the container's own.
pub const AUDIT_DIR: &str = airlock_channels::DEFAULT_AUDIT_DIR;
/// Where the policy is read: the image's default, or the operator's file mounted over it,
/// unless the image's environment names another ([`crate::env::POLICY`]).
pub const POLICY: &str = airlock_channels::DEFAULT_POLICY_PATH;
/// Where secrets are mounted, one read-only file each (`/run/secrets/<name>`).
pub const SECRETS_DIR: &str = "/run/secrets";
/// Where upstream roots for the proxy alone are mounted (read-only;
/// [`crate::env::UPSTREAM_CA`]): a test configuration's fake internet.
pub const UPSTREAM_CA: &str = "/etc/airlock/upstream-ca.pem";
/// Where the operator's extra CA is mounted (read-only; [`crate::env::EXTRA_CA`]): a
/// corporate TLS-inspecting proxy's or a private mirror's, trusted by the proxy and the
/// agent's tools.
pub const EXTRA_CA: &str = "/etc/airlock/extra-ca.pem";
/// The agent's home: a sized tmpfs ([`crate::tmpfs::HOME`], a fresh home per start) or a
/// volume of the sandbox's own that keeps the agent's state across its starts. Either way it
/// must be writable; the preflight checks that something writable is mounted there.
pub const AGENT_HOME: &str = "/home/agent";

/// The directory inside [`RUN_DIR`] that only root can enter (0700): it holds the control
/// directory, so the agent can neither list nor reach what is in it, whoever owns the
/// control directory itself.
pub const OPERATOR_SUBDIR: &str = "operator";
/// The control directory inside [`RUN_DIR`] ([`CONTROL_DIR`]).
pub const CONTROL_SUBDIR: &str = "operator/control";
/// The control directory: the operator's side of the appliance. The host CLI bind-mounts a
/// directory of its own here (read-write), where it reads the readiness record
/// ([`crate::status::FILE`]) and, later, reaches the admin API's socket
/// ([`crate::admin::SOCKET`]); without such a mount PID 1 makes it on the `/run` tmpfs (a
/// Kubernetes probe reads it there). Its parent is root's 0700 ([`OPERATOR_SUBDIR`]).
pub const CONTROL_DIR: &str = "/run/airlock/operator/control";

/// The control directory of a start whose runtime directory is `run_dir`
/// ([`CONTROL_DIR`] for the image's [`RUN_DIR`]).
#[must_use]
pub fn control_dir(run_dir: &Path) -> PathBuf {
    run_dir.join(CONTROL_SUBDIR)
}

/// The root-only directory that holds the control directory of `run_dir`.
#[must_use]
pub fn operator_dir(run_dir: &Path) -> PathBuf {
    run_dir.join(OPERATOR_SUBDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_dir_is_under_the_root_only_operator_dir_of_the_run_dir() {
        assert_eq!(control_dir(Path::new(RUN_DIR)), Path::new(CONTROL_DIR));
        assert_eq!(
            control_dir(Path::new(RUN_DIR)).parent(),
            Some(operator_dir(Path::new(RUN_DIR)).as_path())
        );
    }

    #[test]
    fn the_git_service_mounts_share_the_hidden_parent() {
        for p in [HIDDEN_GIT_DIR, SHARED_OBJECTS_DIR] {
            assert!(Path::new(p).starts_with(STORES_PARENT), "{p}");
        }
    }
}
