//! The two ways the host runs git, and how a failed run is read.
//!
//! - [`ours`]: on a git dir the CLI made (a sandbox's before its agent ran, the fetch-back's
//!   own, an object store). Only our configuration: no system or global config, no
//!   attributes or excludes file of the user's, nothing of the caller's `GIT_*` environment,
//!   and the settings that make git run a program, read a cache file a sandbox could have
//!   written, or enter a submodule pinned off on the command line. It never runs with a
//!   sandbox's git dir as its repository: a sandbox's objects are only reached through
//!   alternates of a git dir of ours.
//! - [`operator`]: in the operator's repository, whose config is the operator's own. Hooks and
//!   fsmonitor off, submodules never entered, and git's ownership check left as git has it
//!   (no `safe.directory`): a repository git would refuse is refused with git's reason.

use super::CheckoutError;
use std::path::Path;
use std::process::{Command, Output};

/// `-c` settings every host-side git carries: nothing runs, no submodule is entered.
const ALWAYS: [&str; 5] = [
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "diff.ignoreSubmodules=all",
    "core.untrackedCache=false",
];

/// `-c` settings of [`ours`] on top of [`ALWAYS`]: no attributes or excludes file of the
/// user's, and no cache file of an object store (commit-graph, multi-pack index, bitmaps),
/// which a sandbox could have written into its own objects directory.
const OURS: [&str; 6] = [
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.commitGraph=false",
    "core.multiPackIndex=false",
    "pack.useBitmaps=false",
    "core.splitIndex=false",
];

fn base() -> Command {
    let mut c = Command::new("git");
    // The caller's GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_ALTERNATE_OBJECT_DIRECTORIES, ...
    // would redirect or reconfigure every call.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            c.env_remove(k);
        }
    }
    for kv in ALWAYS {
        c.arg("-c").arg(kv);
    }
    c.env("GIT_TERMINAL_PROMPT", "0").env("GIT_PAGER", "cat");
    c
}

/// The environment of [`ours`], also given to the `upload-pack` a fetch runs in a git dir of
/// ours.
pub const OURS_ENV: [(&str, &str); 3] = [
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_ATTR_NOSYSTEM", "1"),
];

/// `git --git-dir <git_dir>` with only our configuration (see the module docs).
pub fn ours(git_dir: &Path) -> Command {
    let mut c = base();
    for kv in OURS {
        c.arg("-c").arg(kv);
    }
    for (k, v) in OURS_ENV {
        c.env(k, v);
    }
    c.arg("--git-dir").arg(git_dir);
    c
}

/// The `-c` options of [`ours`], for a command line run by a shell (`--upload-pack`).
pub fn ours_options() -> String {
    ALWAYS
        .iter()
        .chain(OURS.iter())
        .map(|kv| format!("-c {kv}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `git -C <top>` in the operator's repository (see the module docs).
pub fn operator(top: &Path) -> Command {
    let mut c = base();
    c.arg("-C").arg(top);
    c
}

/// git's reason for a failure, on one line: its `fatal:` or `error:` line (git follows the
/// reason with hints), else its last line.
pub fn reason(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
        .or(lines.last())
        .map(|l| crate::review::escape(l.as_bytes()))
        .unwrap_or_default()
}

/// Run `cmd`; its output when it succeeded, else [`CheckoutError::Git`] naming `step`.
pub fn run(step: &'static str, path: &Path, cmd: &mut Command) -> Result<Output, CheckoutError> {
    let out = cmd
        .output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    if out.status.success() {
        return Ok(out);
    }
    Err(CheckoutError::Git {
        step,
        path: path.into(),
        stderr: reason(&out.stderr),
    })
}

/// Run `cmd` with `input` on its stdin; as [`run`].
pub fn run_with_input(
    step: &'static str,
    path: &Path,
    cmd: &mut Command,
    input: &[u8],
) -> Result<Output, CheckoutError> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| CheckoutError::Spawn { source })?;
    let stdin = child.stdin.take();
    let input = input.to_vec();
    // Written from a thread: git may fill its stdout before it has read all of its input.
    let writer = std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            let _ = s.write_all(&input);
        }
    });
    let out = child
        .wait_with_output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    let _ = writer.join();
    if out.status.success() {
        return Ok(out);
    }
    Err(CheckoutError::Git {
        step,
        path: path.into(),
        stderr: reason(&out.stderr),
    })
}

/// stdout, trimmed, as text.
pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_gits_fatal_line_not_its_hints() {
        let stderr = b"fatal: detected dubious ownership in repository at '/r'\n\
            To add an exception for this directory, call:\n\n\
            \tgit config --global --add safe.directory /r\n";
        assert_eq!(
            reason(stderr),
            "fatal: detected dubious ownership in repository at '/r'"
        );
        assert_eq!(reason(b"warning: x\nlast line\n"), "last line");
        assert_eq!(reason(b"fatal: \x1b[2Kname\n"), "fatal: \\x1b[2Kname");
    }
}
