//! Build prerequisites (issue 15 item 10): the shell tests of the scripts' build helpers,
//! run as part of `cargo test` (root, as `scripts/test` runs it).
//! - `tests/scripts/sudo-toolchain.sh`: under sudo the build uses the invoking user's
//!   toolchain (`scripts/lib/cargo.sh`), and no toolchain is one line and a failure;
//! - `tests/scripts/builder.sh`: the builder container (`scripts/lib/builder.sh`,
//!   `scripts/build-image --in-container`) starts, runs Debian's cargo and builds a crate;
//! - `tests/scripts/docker-run-name.sh`: `scripts/docker-run` names the sandbox after the
//!   checkout's directory unless `AIRLOCK_SANDBOX` or a policy of one's own names it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;

fn run(script: &str) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join(script))
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("{script} did not start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{text}",
        out.status
    );
}

#[test]
fn under_sudo_the_build_uses_the_invoking_users_toolchain() {
    run("tests/scripts/sudo-toolchain.sh");
}

#[test]
fn the_builder_container_builds_with_debians_toolchain() {
    run("tests/scripts/builder.sh");
}

#[test]
fn docker_run_names_the_sandbox_after_the_checkout() {
    run("tests/scripts/docker-run-name.sh");
}
