//! Finding the programs the harness runs: system tools on `PATH` (plus the sbin
//! directories) and this workspace's own binaries next to the test executable.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// Absolute paths of the system tools a World needs.
#[derive(Debug, Clone)]
pub struct Tools {
    /// iproute2's `ip`.
    pub ip: PathBuf,
    /// util-linux's `unshare`.
    pub unshare: PathBuf,
    /// `tcpdump`.
    pub tcpdump: PathBuf,
}

impl Tools {
    /// Finds every tool, or fails naming the missing ones and the package that has them.
    pub fn find() -> anyhow::Result<Tools> {
        let mut missing = Vec::new();
        let mut get = |name: &str, package: &str| {
            find_program(name).unwrap_or_else(|| {
                missing.push(format!("{name} (Debian package {package})"));
                PathBuf::new()
            })
        };
        let tools = Tools {
            ip: get("ip", "iproute2"),
            unshare: get("unshare", "util-linux"),
            tcpdump: get("tcpdump", "tcpdump"),
        };
        if !missing.is_empty() {
            bail!(
                "the namespace harness needs these tools, not found on PATH or in /usr/sbin, /sbin: {}",
                missing.join(", ")
            );
        }
        Ok(tools)
    }
}

/// `name` on `PATH`, or in the sbin/bin directories that a non-login root shell may lack.
#[must_use]
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(
            [
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
            ]
            .map(PathBuf::from),
        )
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A binary of this workspace (`airlock-fakenet`, `airlock-entrypoint`, ...) in the Cargo
/// target directory the running test executable lives in (`target/<profile>/`, the parent of
/// `deps/`). `AIRLOCK_BIN_DIR` overrides the directory.
///
/// Cargo builds the binaries of the package under test before its integration tests; binaries
/// of other packages must have been built (`cargo build --workspace --bins`) before the tests.
pub fn workspace_binary(name: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("AIRLOCK_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().context("locating the running test executable")?;
            let mut dir = exe
                .parent()
                .context("the test executable has no parent directory")?
                .to_path_buf();
            if dir.file_name().is_some_and(|n| n == "deps") {
                dir.pop();
            }
            dir
        }
    };
    let path = dir.join(name);
    if !is_executable(&path) {
        bail!(
            "{name} not found at {} — build it first (`cargo build --workspace --bins` with the \
               same CARGO_TARGET_DIR and profile), or set AIRLOCK_BIN_DIR",
            path.display()
        );
    }
    Ok(path)
}
