//! `airlock-sandbox`: the no-Docker way to run the appliance. Builds a fake internet
//! in network namespaces (the same World the tests use), then runs the real entrypoint in its
//! own network, mount and pid namespaces with `examples/sandbox-policy.toml` and the given
//! agent command (default: the agent's shell), attached to this terminal. Everything is torn
//! down when the agent exits.

use airlock_tests::{World, workspace_binary};
use anyhow::{Context, Result, bail};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("airlock-sandbox: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<i32> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (policy, command) = match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].first().cloned(), args[i + 1..].to_vec()),
        None => (args.first().cloned(), Vec::new()),
    };
    let policy = PathBuf::from(policy.unwrap_or_else(|| "examples/sandbox-policy.toml".to_owned()));
    let world = World::new().context("building the namespace world (run as root)")?;
    let dir = world.dir().join("sandbox");
    std::fs::create_dir_all(&dir)?;
    let policy_copy = dir.join("policy.toml");
    std::fs::copy(&policy, &policy_copy)
        .with_context(|| format!("reading {}", policy.display()))?;
    std::fs::set_permissions(&policy_copy, std::fs::Permissions::from_mode(0o644))?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work)?;
    std::os::unix::fs::chown(&work, Some(world.users().agent), Some(world.users().agent))?;
    // Like Docker: unprivileged ping sockets exist, so `ping` is a real attempt.
    let sysctl = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            world.sandbox_ns(),
            "sysctl",
            "-qw",
            "net.ipv4.ping_group_range=0 2147483647",
        ])
        .status()?;
    if !sysctl.success() {
        bail!("cannot set ping_group_range in the sandbox namespace");
    }
    eprintln!(
        "airlock-sandbox: fake internet up (allowed.test, blocked.test, resolver 203.0.113.53); upstream CA: {}",
        world.ca_pem_path().display()
    );
    let mut cmd = world.sandbox_command(&workspace_binary("airlock-entrypoint")?);
    cmd.arg("--policy")
        .arg(&policy_copy)
        .arg("--audit-dir")
        .arg(dir.join("audit"))
        .arg("--run-dir")
        .arg(dir.join("run"))
        .arg("--workdir")
        .arg(&work)
        // The fake internet's CA as an extra upstream root: the proxy verifies it (the
        // entrypoint refuses AIRLOCK_PASS_ENV of a CA variable it sets itself).
        .env("AIRLOCK_UPSTREAM_CA", world.ca_pem_path());
    if !command.is_empty() {
        cmd.arg("--").args(&command);
    }
    let status = cmd.status().context("starting the entrypoint")?;
    let audit = std::fs::read_to_string(dir.join("audit").join("audit.jsonl")).unwrap_or_default();
    eprintln!(
        "airlock-sandbox: {} audit lines; last ones:",
        audit.lines().count()
    );
    for line in audit
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        eprintln!("  {line}");
    }
    Ok(status.code().unwrap_or(128 + 9))
}
