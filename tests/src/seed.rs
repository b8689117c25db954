//! Seeding git repositories for tests, outside any sandbox: the host's `/usr/bin/git` with
//! a clean environment (no system or global config, `HOME` at the repository), a fixed
//! author, `main` as the first branch, and any directory trusted (the seeds are chowned to
//! the sandbox's users afterwards).

use std::path::Path;
use std::process::Command;

/// Runs `git args` in `cwd` and returns its trimmed stdout; panics with git's stderr when
/// git fails (a test that cannot seed its repository must fail, not go on).
///
/// # Panics
/// When git cannot be started or exits non-zero.
#[allow(clippy::unwrap_used, clippy::panic)]
pub fn seed_git(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new("/usr/bin/git")
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Seed")
        .env("GIT_AUTHOR_EMAIL", "seed@example.invalid")
        .env("GIT_COMMITTER_NAME", "Seed")
        .env("GIT_COMMITTER_EMAIL", "seed@example.invalid")
        .args(["-c", "safe.directory=*", "-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run /usr/bin/git {args:?}: {e}"));
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
