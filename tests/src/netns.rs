//! Effects on network namespaces: run `ip`, build a World's topology, delete namespaces,
//! kill what runs in them, and sweep away the leftovers of dead test processes.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::tools::Tools;
use crate::topology::{self, WorldId};

/// Where iproute2 keeps named namespaces.
const NETNS_RUN_DIR: &str = "/run/netns";
/// Where `ip netns exec` finds per-namespace `/etc` files to bind-mount.
pub const NETNS_ETC_DIR: &str = "/etc/netns";

/// Runs `ip [-n ns] args`, feeding `stdin` (for `-batch -`); fails with ip's stderr.
pub fn ip(
    tools: &Tools,
    ns: Option<&str>,
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<String> {
    let mut cmd = Command::new(&tools.ip);
    if let Some(ns) = ns {
        cmd.args(["-n", ns]);
    }
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = || {
        format!(
            "ip {}{}",
            ns.map(|n| format!("-n {n} ")).unwrap_or_default(),
            args.join(" ")
        )
    };
    let mut child = cmd.spawn().with_context(|| format!("running {}", what()))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .with_context(|| format!("feeding {}", what()))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for {}", what()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}{}",
            what(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            stdin.map(|s| format!("\nscript:\n{s}")).unwrap_or_default()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Creates both namespaces of `id`, the veth pair and all addresses and routes.
pub fn create(tools: &Tools, id: WorldId) -> anyhow::Result<()> {
    ip(
        tools,
        None,
        &["-batch", "-"],
        Some(&topology::create_script(id)),
    )
    .context("creating the World's namespaces and veth pair")?;
    ip(
        tools,
        Some(&id.upstream_ns()),
        &["-batch", "-"],
        Some(&topology::upstream_script(id)),
    )
    .context("configuring the upstream namespace")?;
    ip(
        tools,
        Some(&id.sandbox_ns()),
        &["-batch", "-"],
        Some(&topology::sandbox_script()),
    )
    .context("configuring the sandbox namespace")?;
    Ok(())
}

/// Whether a named namespace exists.
#[must_use]
pub fn exists(name: &str) -> bool {
    Path::new(NETNS_RUN_DIR).join(name).exists()
}

/// Names of all named namespaces.
pub fn list() -> anyhow::Result<Vec<String>> {
    match std::fs::read_dir(NETNS_RUN_DIR) {
        Ok(rd) => Ok(rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(e) => Err(e).context(format!("listing {NETNS_RUN_DIR}")),
    }
}

/// SIGKILLs every process inside namespace `name` (they were started by a World there).
pub fn kill_all_in(tools: &Tools, name: &str) {
    let Ok(out) = ip(tools, None, &["netns", "pids", name], None) else {
        return;
    };
    let me = std::process::id();
    for pid in out.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        if u32::try_from(pid).is_ok_and(|p| p != me) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Kills what runs in `name`, then deletes it and its `/etc/netns/<name>` directory.
pub fn destroy(tools: &Tools, name: &str) -> anyhow::Result<()> {
    let etc = Path::new(NETNS_ETC_DIR).join(name);
    if etc.exists() {
        std::fs::remove_dir_all(&etc).with_context(|| format!("removing {}", etc.display()))?;
    }
    if exists(name) {
        kill_all_in(tools, name);
        ip(tools, None, &["netns", "del", name], None)?;
    }
    Ok(())
}

/// Whether process `pid` exists (a zombie counts: its namespaces may still be in use).
#[must_use]
pub fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes namespaces, `/etc/netns` entries and temp directories named by this harness whose
/// creator process is dead, plus any with `mine`'s exact id (left by an earlier process that
/// had our pid).
pub fn remove_stale(tools: &Tools, mine: WorldId, tmp: &Path) -> anyhow::Result<()> {
    let stale = |name: &str| {
        WorldId::from_name(name)
            .is_some_and(|id| id == mine || (id.pid != mine.pid && !pid_alive(id.pid)))
    };
    let mut names = list()?;
    if let Ok(rd) = std::fs::read_dir(NETNS_ETC_DIR) {
        names.extend(
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned()),
        );
    }
    names.sort();
    names.dedup();
    for name in names.iter().filter(|n| stale(n)) {
        // Another process may be sweeping the same leftovers: only a survivor is an error.
        if let Err(e) = destroy(tools, name)
            && exists(name)
        {
            return Err(e).context(format!("removing the stale namespace {name}"));
        }
    }
    if let Ok(rd) = std::fs::read_dir(tmp) {
        for entry in rd.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if stale(&name) && entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    Ok(())
}
