//! Outside the workspace: exec the real git with protected configuration, and the
//! operator's default commit identity (`AIRLOCK_GIT_USER_NAME/EMAIL`, from the entrypoint)
//! as git's system layer, so a first commit in a scratch repository works as in the
//! workspace; the repository's, the global and `-c` identities still win.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{FromRawFd as _, IntoRawFd as _};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// Configuration given to every native git (command line wins over any config file).
#[must_use]
pub fn protected_config(helper: &Path) -> Vec<String> {
    vec![
        "core.hooksPath=/dev/null".into(),
        "core.fsmonitor=false".into(),
        // Reset the helper list, then ours only.
        "credential.helper=".into(),
        format!("credential.helper={}", helper.display()),
        "protocol.allow=never".into(),
        "protocol.https.allow=always".into(),
        "protocol.file.allow=always".into(),
    ]
}

/// Replace this process by the real git. Returns only on failure.
pub fn exec(real_git: &Path, args: &[OsString]) -> std::io::Error {
    exec_in(real_git, args, None)
}

/// [`exec`] in the directory `cwd` (the effective directory after `-C`).
pub fn exec_in(real_git: &Path, args: &[OsString], cwd: Option<&Path>) -> std::io::Error {
    let helper = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("git-credential-airlock")))
        .unwrap_or_else(|| "git-credential-airlock".into());
    let mut cmd = Command::new(real_git);
    cmd.arg0("git");
    for c in protected_config(&helper) {
        cmd.arg("-c").arg(c);
    }
    cmd.args(args);
    if let Some(layer) = identity_layer() {
        cmd.env("GIT_CONFIG_SYSTEM", layer);
    }
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    cmd.exec()
}

/// The system configuration holding the default identity (then `/etc/gitconfig`, included
/// as git would read it), or `None` when no usable name or email is given.
#[must_use]
pub fn identity_config(name: Option<&str>, email: Option<&str>) -> Option<String> {
    let mut user = String::new();
    for (key, value) in [("name", name), ("email", email)] {
        let Some(v) = value
            .map(str::trim)
            .filter(|v| !v.is_empty() && !v.chars().any(char::is_control))
        else {
            continue;
        };
        let quoted = v.replace('\\', "\\\\").replace('"', "\\\"");
        user.push_str(&format!("\t{key} = \"{quoted}\"\n"));
    }
    (!user.is_empty()).then(|| format!("[user]\n{user}[include]\n\tpath = /etc/gitconfig\n"))
}

/// `/proc/self/fd/N` of a sealed memfd holding [`identity_config`], inherited across the
/// exec; `None` when there is no identity or the agent chose git's system layer itself.
fn identity_layer() -> Option<String> {
    if std::env::var_os("GIT_CONFIG_SYSTEM").is_some()
        || std::env::var_os("GIT_CONFIG_NOSYSTEM").is_some()
    {
        return None;
    }
    let name = std::env::var("AIRLOCK_GIT_USER_NAME").ok();
    let email = std::env::var("AIRLOCK_GIT_USER_EMAIL").ok();
    let text = identity_config(name.as_deref(), email.as_deref())?;
    // SAFETY: a NUL-terminated name and valid flags; the descriptor returned is ours.
    let fd =
        unsafe { libc::memfd_create(c"airlock-git-identity".as_ptr(), libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(text.as_bytes()).ok()?;
    let fd = file.into_raw_fd();
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own; failure leaves it unsealed, which is harmless
    // (only this process and the git it becomes hold it).
    unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) };
    Some(format!("/proc/self/fd/{fd}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_default_identity_is_quoted_and_the_system_file_still_read() {
        assert_eq!(
            identity_config(Some("A \"B\" C"), Some("a@b")).unwrap(),
            "[user]\n\tname = \"A \\\"B\\\" C\"\n\temail = \"a@b\"\n[include]\n\tpath = /etc/gitconfig\n"
        );
        assert_eq!(identity_config(None, Some(" ")), None);
        assert_eq!(
            identity_config(Some("x\n[core]"), Some("a@b")).unwrap(),
            "[user]\n\temail = \"a@b\"\n[include]\n\tpath = /etc/gitconfig\n"
        );
    }
}
