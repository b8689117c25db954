//! Outside the workspace: exec the real git with protected configuration.

use std::ffi::OsString;
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
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    cmd.exec()
}
