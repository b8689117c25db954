//! The operator's default commit identity: the first `git commit` in a repository that has
//! no `user.name`/`user.email` works, under the operator's name (scripts/docker-run passes
//! the host user's `git config user.name/email` as `AIRLOCK_GIT_USER_NAME/EMAIL`).
//!
//! It is git's *system* configuration layer, the lowest: the repository's own `user.*`, a
//! `git config user.name` the agent writes, `-c user.name=...` and `GIT_AUTHOR_*` all win,
//! as they would over a developer's `/etc/gitconfig`. The layer is a sealed memfd that only
//! the git API's children inherit and read as `/proc/self/fd/N` (its own descriptor, which a
//! non-dumpable process may open); the agent can neither read nor change it, and nothing
//! is written to disk.

use std::ffi::CString;
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::PathBuf;

/// The system configuration text for `name` and `email` (each optional), or why a value is
/// unusable (a control character would end the value or the line).
pub fn config_text(name: Option<&str>, email: Option<&str>) -> Result<String, String> {
    let mut text = String::from("[user]\n");
    for (key, value, var) in [
        ("name", name, "AIRLOCK_GIT_USER_NAME"),
        ("email", email, "AIRLOCK_GIT_USER_EMAIL"),
    ] {
        let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            continue;
        };
        if v.chars().any(char::is_control) {
            return Err(format!("{var} holds a control character"));
        }
        let quoted = v.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str(&format!("\t{key} = \"{quoted}\"\n"));
    }
    Ok(text)
}

/// The default identity's configuration layer, alive as long as this value.
#[derive(Debug)]
pub struct DefaultIdentity {
    _fd: OwnedFd,
    path: PathBuf,
}

impl DefaultIdentity {
    /// `None` when neither a name nor an email is given.
    pub fn new(name: Option<&str>, email: Option<&str>) -> Result<Option<DefaultIdentity>, String> {
        let text = config_text(name, email)?;
        if text == "[user]\n" {
            return Ok(None);
        }
        let fd =
            sealed_memfd(text.as_bytes()).map_err(|e| format!("memfd for the identity: {e}"))?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        Ok(Some(DefaultIdentity { _fd: fd, path }))
    }

    /// What git's children read as `GIT_CONFIG_SYSTEM`.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.path.clone()
    }
}

/// A memfd holding `bytes`, sealed against every change, inherited across exec (no
/// `MFD_CLOEXEC`: the git children open it as their own descriptor).
fn sealed_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let name = CString::new("airlock-git-identity").unwrap_or_default();
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

    #[test]
    fn values_are_quoted_and_escaped() {
        assert_eq!(
            config_text(Some("Ada \"A\" L\\ovelace"), Some("ada@example.org")).unwrap(),
            "[user]\n\tname = \"Ada \\\"A\\\" L\\\\ovelace\"\n\temail = \"ada@example.org\"\n"
        );
        assert_eq!(
            config_text(None, Some(" a@b ")).unwrap(),
            "[user]\n\temail = \"a@b\"\n"
        );
        assert_eq!(
            config_text(Some("x ; # y"), None).unwrap(),
            "[user]\n\tname = \"x ; # y\"\n"
        );
    }

    #[test]
    fn control_characters_are_refused() {
        let e = config_text(Some("a\n[core]\nfsmonitor = x"), None).unwrap_err();
        assert!(e.contains("AIRLOCK_GIT_USER_NAME"), "{e}");
        assert!(config_text(None, Some("a@b\0")).is_err());
    }

    #[test]
    fn nothing_given_is_no_layer() {
        assert!(DefaultIdentity::new(None, Some("  ")).unwrap().is_none());
    }

    #[test]
    fn git_reads_the_layer_as_its_system_config() {
        let id = DefaultIdentity::new(Some("Op \"Erator\""), Some("op@example.org"))
            .unwrap()
            .unwrap();
        let out = std::process::Command::new("/usr/bin/git")
            .env_clear()
            .env("GIT_CONFIG_SYSTEM", id.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["config", "--system", "--get", "user.name"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "Op \"Erator\"\n");
        // Sealed: not even the git API can change it.
        let w = std::fs::OpenOptions::new().append(true).open(id.path());
        assert!(w.is_err() || w.unwrap().write_all(b"x").is_err());
    }
}
