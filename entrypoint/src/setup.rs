//! The set-up steps with effects: directories, tools, the firewall, PID 1's own capabilities.
//! Each failure is one line naming what failed and how to fix it.

use crate::config::Cli;
use crate::identity::Users;
use airlock_channels as ch;
use airlock_firewall::{Family, Ipv6State, Plan};
use anyhow::{Context, Result, bail};
use caps::{CapSet, Capability};
use nix::unistd::{Gid, Uid, chown};
use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Programs the firewall step runs.
const TOOLS: &[&str] = &["iptables-restore", "iptables-save", "ip6tables-restore"];

/// Fail before anything starts if a tool the firewall needs is missing.
pub fn require_tools() -> Result<()> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    for tool in TOOLS {
        let found = std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .any(|d| d.join(tool).is_file());
        if !found {
            bail!("{tool} not found: install iptables (nft backend, IPv4 and IPv6) in the image");
        }
    }
    Ok(())
}

/// The agent must not be able to change the policy it runs under.
pub fn require_protected(path: &Path, users: &Users, knobs: &crate::problems::Knobs) -> Result<()> {
    let agent = &users.agent;
    let mut here = Some(path);
    while let Some(p) = here {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot stat {}", p.display()))?;
        let mode = meta.mode();
        let writable = meta.uid() == agent.uid
            || (meta.gid() == agent.gid && mode & 0o020 != 0)
            || mode & 0o002 != 0;
        // The sticky bit on a world-writable directory (like /tmp) still stops renames of
        // files the agent does not own; only the file itself and non-sticky dirs matter.
        let sticky_dir = meta.is_dir() && mode & 0o1000 != 0 && meta.uid() != agent.uid;
        if writable && !sticky_dir {
            bail!(
                "policy {} is writable by the agent through {} (owner {}, mode {:o}): mount it read-only and owned by root",
                knobs.policy_file(path),
                p.display(),
                meta.uid(),
                mode & 0o7777
            );
        }
        here = p.parent().filter(|parent| !parent.as_os_str().is_empty());
    }
    Ok(())
}

/// Create the runtime and audit directories with their owners and modes.
pub fn prepare_dirs(cli: &Cli, users: &Users) -> Result<PathBuf> {
    std::fs::create_dir_all(&cli.run_dir).with_context(|| {
        format!(
            "cannot create runtime directory {} (mount a tmpfs at /run)",
            cli.run_dir.display()
        )
    })?;
    std::fs::set_permissions(&cli.run_dir, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot set the mode of {}", cli.run_dir.display()))?;
    let audit = &cli.audit_dir;
    std::fs::create_dir_all(audit).with_context(|| {
        format!(
            "cannot create audit directory {} (mount a writable volume there)",
            audit.display()
        )
    })?;
    let (uid, gid) = (
        Uid::from_raw(users.proxy.uid),
        Gid::from_raw(users.proxy.gid),
    );
    chown(audit, Some(uid), Some(gid))
        .with_context(|| format!("cannot hand {} to the proxy user", audit.display()))?;
    std::fs::set_permissions(audit, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private to the proxy user", audit.display()))?;
    let file = audit.join(ch::AUDIT_FILE);
    if file.exists() {
        chown(&file, Some(uid), Some(gid))
            .with_context(|| format!("cannot hand {} to the proxy user", file.display()))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot set the mode of {}", file.display()))?;
    }
    Ok(file)
}

/// The firewall plan for these users.
pub fn plan(users: &Users, preserved_nat: airlock_firewall::PreservedNat) -> Plan {
    Plan {
        proxy_uid: users.proxy.uid,
        git_gid: users.git_gid,
        explicit_port: ch::EXPLICIT_PORT,
        transparent_port: ch::TRANSPARENT_PORT,
        dns_port: ch::DNS_PORT,
        git_service_port: ch::GIT_SERVICE_PORT,
        preserved_nat,
    }
}

/// Render and apply the firewall, one atomic `iptables-restore` per family.
pub fn apply_firewall(users: &Users) -> Result<()> {
    const CAP_HINT: &str = "run the container with --cap-add NET_ADMIN";
    let save = airlock_firewall::save_nat_v4()
        .with_context(|| format!("cannot read the current nat table ({CAP_HINT})"))?;
    let preserved = airlock_firewall::preserved_nat_from_save(&save)
        .context("cannot keep Docker's nat rules")?;
    let plan = plan(users, preserved);
    airlock_firewall::apply(Family::V4, &airlock_firewall::render_v4(&plan))
        .with_context(|| format!("cannot apply the IPv4 firewall ({CAP_HINT})"))?;
    match airlock_firewall::ipv6_state() {
        Ipv6State::Enabled => airlock_firewall::apply(Family::V6, &airlock_firewall::render_v6(&plan)).context(
            "IPv6 is up but cannot be filtered: make ip6tables work in the container or disable IPv6 (--sysctl net.ipv6.conf.all.disable_ipv6=1)",
        )?,
        Ipv6State::Disabled => crate::console::info("IPv6 is disabled in this container; no IPv6 rules needed"),
    }
    Ok(())
}

/// After set-up PID 1 keeps only what supervising needs: starting the proxy again as its
/// user (SETUID, SETGID, SETPCAP to clear the child's bounding set) and signalling children
/// of other users (KILL). No NET_ADMIN, no DAC override, nothing else.
pub fn reduce_pid1_caps() -> Result<()> {
    let keep: HashSet<Capability> = [
        Capability::CAP_SETUID,
        Capability::CAP_SETGID,
        Capability::CAP_SETPCAP,
        Capability::CAP_KILL,
    ]
    .into_iter()
    .collect();
    for cap in caps::all() {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .with_context(|| format!("cannot drop {cap} from PID 1's bounding set"))?;
        }
    }
    caps::clear(None, CapSet::Inheritable)
        .context("cannot clear PID 1's inheritable capabilities")?;
    caps::clear(None, CapSet::Ambient).context("cannot clear PID 1's ambient capabilities")?;
    let effective =
        caps::read(None, CapSet::Permitted).context("cannot read PID 1's capabilities")?;
    let keep: HashSet<Capability> = keep.intersection(&effective).copied().collect();
    caps::set(None, CapSet::Effective, &keep)
        .context("cannot reduce PID 1's effective capabilities")?;
    caps::set(None, CapSet::Permitted, &keep)
        .context("cannot reduce PID 1's permitted capabilities")?;
    Ok(())
}
