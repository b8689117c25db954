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

/// One step of the policy's path as the agent would meet it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathStep {
    pub path: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub is_dir: bool,
    /// On a read-only mount: nobody writes, renames in or changes the mode of it.
    pub read_only: bool,
}

/// Whether the agent (its uid, primary and supplementary groups) could change this step:
/// write the file, add, remove or rename entries of the directory, or, as the owner, change
/// the mode to allow that. Ownership alone is not a refusal: a read-only mount wins. The
/// sticky bit on a directory the agent does not own (like /tmp) still stops renames of
/// entries it does not own. Pure.
pub fn agent_can_change(step: &PathStep, agent: &crate::identity::Identity) -> bool {
    if step.read_only {
        return false;
    }
    let owner = step.uid == agent.uid;
    let in_group = step.gid == agent.gid || agent.groups.contains(&step.gid);
    let writable = owner || (in_group && step.mode & 0o020 != 0) || step.mode & 0o002 != 0;
    let sticky_dir = step.is_dir && step.mode & 0o1000 != 0 && !owner;
    writable && !sticky_dir
}

/// The first step of `steps` (the file, then its ancestors) the agent could change. Pure.
pub fn policy_writable_at<'a>(
    steps: &'a [PathStep],
    agent: &crate::identity::Identity,
) -> Option<&'a PathStep> {
    steps.iter().find(|s| agent_can_change(s, agent))
}

/// The policy file and each ancestor, with the read-only flag of the mount each lives on.
fn path_steps(path: &Path) -> Result<Vec<PathStep>> {
    let real = path
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", path.display()))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| crate::procfs::parse_mountinfo(&t))
        .unwrap_or_default();
    let mut steps = Vec::new();
    for p in real.ancestors() {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot stat {}", p.display()))?;
        // The mount a path lives on: the deepest mount point above it, the last one mounted
        // there when several are.
        let read_only = mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| p.starts_with(&m.point))
            .max_by_key(|(i, m)| (m.point.components().count(), *i))
            .is_some_and(|(_, m)| m.read_only);
        steps.push(PathStep {
            path: p.to_path_buf(),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
            is_dir: meta.is_dir(),
            read_only,
        });
    }
    Ok(steps)
}

/// The agent must not be able to change the policy it runs under: checked by what the
/// agent's uid and groups could do (mode bits, owner, groups, read-only mounts), not by who
/// owns the file.
pub fn require_protected(path: &Path, users: &Users, knobs: &crate::problems::Knobs) -> Result<()> {
    let steps = path_steps(path)?;
    if let Some(step) = policy_writable_at(&steps, &users.agent) {
        bail!(
            "policy {} is writable by the agent (uid {}) through {} (owner {}, mode {:o}, {}): mount it read-only (-v FILE:{}:ro; scripts/docker-run does) or make it not writable by uid {}",
            knobs.policy_file(path),
            users.agent.uid,
            step.path.display(),
            step.uid,
            step.mode,
            if step.read_only {
                "read-only mount"
            } else {
                "writable mount"
            },
            path.display(),
            users.agent.uid
        );
    }
    Ok(())
}

/// This container's claim on its workspace: an exclusive `flock` on the workspace directory
/// (the same inode in every container that mounts the checkout), held by PID 1 for the
/// container's life. Nothing is written into the checkout.
#[derive(Debug)]
pub struct WorkspaceLock(#[allow(dead_code)] Option<nix::fcntl::Flock<std::fs::File>>);

/// Claim the workspace, or refuse: two sandboxes on one checkout would see and overwrite each
/// other's work and branches. No workspace, no claim.
pub fn claim_workspace(workdir: &Path, host_repo: Option<&str>) -> Result<WorkspaceLock> {
    use nix::fcntl::{Flock, FlockArg};
    let Ok(dir) = std::fs::File::open(workdir) else {
        return Ok(WorkspaceLock(None));
    };
    match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(WorkspaceLock(Some(lock))),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => bail!(
            "the workspace {} is in use by another airlock container: stop that one first (docker ps), or give each sandbox its own checkout (a second clone, or `airlock new`, which makes one per sandbox)",
            host_repo.unwrap_or(&workdir.display().to_string())
        ),
        Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", workdir.display())),
    }
}

/// The agent's home belongs to the ids it runs as, and to nobody else: see [`prepare_home`].
pub fn give_home(agent: &crate::identity::Identity) -> Result<()> {
    prepare_home(&mut RealHome, agent)
}

/// What [`prepare_home`] reads of the agent's home and changes there: a seam, so that its
/// decisions are tested without privileges (a recording double in the tests).
pub trait HomeFs {
    /// `lstat` of `path` (`Err`: it cannot be read, e.g. it does not exist).
    fn stat(&self, path: &Path) -> std::io::Result<HomeMeta>;
    /// The direct entries of the directory `dir` with their `lstat`, at most `max` of them.
    fn entries(&self, dir: &Path, max: usize) -> std::io::Result<Vec<(PathBuf, HomeMeta)>>;
    /// `chown(path, uid, gid)`.
    fn chown(&mut self, path: &Path, uid: u32, gid: u32) -> std::io::Result<()>;
    /// `chmod(path, mode)`.
    fn chmod(&mut self, path: &Path, mode: u32) -> std::io::Result<()>;
}

/// What [`prepare_home`] needs of a file's `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HomeMeta {
    pub uid: u32,
    pub gid: u32,
    /// The permission bits (`& 0o7777`).
    pub mode: u32,
    /// The filesystem it is on (`st_dev`): an entry on another one is a mount point.
    pub dev: u64,
    pub is_dir: bool,
}

/// The entries of the home's top looked at (a reused home shows itself in its first
/// entries: the agent's dotfiles).
const HOME_ENTRIES_READ: usize = 10_000;

/// The agent's home is its own: a home whose top or direct entries belong to another uid is
/// a home another sandbox or another agent uid wrote (a volume reused across sandboxes or
/// workspace owners), and the start is refused, naming the fix (files written there by
/// another uid would be the agent's dotfiles and state now). An empty home whose top is not
/// the agent's (the image's tmpfs or a new volume, made for uid 1000 when `--agent-uid` chose
/// the workspace owner's) is given to the agent. The top is made 0700 (a volume comes as a
/// copy of the image's 0755 directory; a tmpfs already has `mode=0700`). An entry on another
/// filesystem (the operator's own mount inside the home) is not judged. No home, nothing.
pub fn prepare_home(fs: &mut impl HomeFs, agent: &crate::identity::Identity) -> Result<()> {
    let home = &agent.home;
    let Ok(top) = fs.stat(home) else {
        return Ok(());
    };
    if !top.is_dir {
        bail!(
            "the agent's home {} is not a directory: mount an empty volume or a tmpfs there (--tmpfs {}:uid={},gid={},mode=0700,size=1g)",
            home.display(),
            home.display(),
            agent.uid,
            agent.gid
        );
    }
    let entries = fs
        .entries(home, HOME_ENTRIES_READ)
        .with_context(|| format!("cannot read the agent's home {}", home.display()))?;
    let own: Vec<&(PathBuf, HomeMeta)> = entries.iter().filter(|(_, m)| m.dev == top.dev).collect();
    let foreign: Vec<&(PathBuf, HomeMeta)> = own
        .iter()
        .copied()
        .filter(|(_, m)| m.uid != agent.uid)
        .collect();
    let reused = |owner: u32, what: String| {
        anyhow::anyhow!(
            "the agent's home {} holds files of uid {owner} ({what}), not of the agent (uid {}): it is a home another sandbox or another workspace owner used; give this sandbox a new one (airlock destroy NAME removes a CLI sandbox's home volume airlock-home-NAME; docker volume rm VOLUME for your own), or start with the uid that wrote it",
            home.display(),
            agent.uid
        )
    };
    if let Some((path, meta)) = foreign.first() {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().escape_debug().to_string(),
        );
        let more = match foreign.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        return Err(reused(meta.uid, format!("{name}{more}")));
    }
    if top.uid != agent.uid && !own.is_empty() {
        return Err(reused(top.uid, "its top directory".to_owned()));
    }
    if top.uid != agent.uid || top.gid != agent.gid {
        fs.chown(home, agent.uid, agent.gid).with_context(|| {
            format!(
                "cannot give the agent's home {} to uid {}: mount a writable tmpfs there (--tmpfs {}:uid={},gid={},mode=0700,size=1g)",
                home.display(),
                agent.uid,
                home.display(),
                agent.uid,
                agent.gid
            )
        })?;
    }
    if top.mode != 0o700 {
        fs.chmod(home, 0o700).with_context(|| {
            format!(
                "cannot make the agent's home {} private (mode 0700)",
                home.display()
            )
        })?;
    }
    Ok(())
}

/// [`HomeFs`] on the real filesystem.
struct RealHome;

fn home_meta(m: &std::fs::Metadata) -> HomeMeta {
    HomeMeta {
        uid: m.uid(),
        gid: m.gid(),
        mode: m.mode() & 0o7777,
        dev: m.dev(),
        is_dir: m.file_type().is_dir(),
    }
}

impl HomeFs for RealHome {
    fn stat(&self, path: &Path) -> std::io::Result<HomeMeta> {
        std::fs::symlink_metadata(path).map(|m| home_meta(&m))
    }

    fn entries(&self, dir: &Path, max: usize) -> std::io::Result<Vec<(PathBuf, HomeMeta)>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)?.take(max) {
            let entry = entry?;
            let meta = std::fs::symlink_metadata(entry.path())?;
            out.push((entry.path(), home_meta(&meta)));
        }
        Ok(out)
    }

    fn chown(&mut self, path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
        chown(path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))).map_err(Into::into)
    }

    fn chmod(&mut self, path: &Path, mode: u32) -> std::io::Result<()> {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
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

/// The firewall plan for these users: every session the pool can hand out gets its
/// address by its gid (session 1 the agent's own, session `k` [`ch::session_gid`]).
pub fn plan(users: &Users, preserved_nat: airlock_firewall::PreservedNat) -> Plan {
    Plan {
        proxy_uid: users.proxy.uid,
        git_gid: users.git_gid,
        explicit_port: ch::EXPLICIT_PORT,
        transparent_port: ch::TRANSPARENT_PORT,
        dns_port: ch::DNS_PORT,
        git_service_port: ch::GIT_SERVICE_PORT,
        session_gids: (1..=ch::MAX_SESSIONS)
            .map(|k| ch::session_gid(k, users.agent.gid))
            .collect(),
        preserved_nat,
    }
}

/// Render and apply the firewall, one atomic `iptables-restore` per family. The two
/// families are applied at once (two processes, on two cores when there are two): the IPv6
/// rules are the `filter` table alone and do not depend on the `nat` table Docker left,
/// which only the IPv4 side reads first. Either failing stops the start; IPv6 rules applied
/// beside a failed IPv4 side only refuse more.
pub fn apply_firewall(users: &Users) -> Result<()> {
    const CAP_HINT: &str = "run the container with --cap-add NET_ADMIN";
    // The plan's ids are the users' (the nat rules Docker left do not change what it
    // checks): refuse a plan whose rules would not mean what they say before any is applied.
    plan(users, airlock_firewall::PreservedNat::default())
        .check()
        .context("cannot build the firewall for these users")?;
    let v6 = match airlock_firewall::ipv6_state() {
        Ipv6State::Enabled => Some(airlock_firewall::render_v6(&plan(
            users,
            airlock_firewall::PreservedNat::default(),
        ))),
        Ipv6State::Disabled => None,
    };
    let (v4, v6) = std::thread::scope(|scope| {
        let v6 = v6.map(|rules| scope.spawn(move || airlock_firewall::apply(Family::V6, &rules)));
        let v4 = apply_v4(users, CAP_HINT);
        (v4, v6.map(|job| job.join()))
    });
    v4?;
    match v6 {
        Some(Ok(applied)) => applied.context(
            "IPv6 is up but cannot be filtered: make ip6tables work in the container or disable IPv6 (--sysctl net.ipv6.conf.all.disable_ipv6=1)",
        )?,
        Some(Err(_)) => bail!("applying the IPv6 firewall panicked"),
        None => crate::console::info("IPv6 is disabled in this container; no IPv6 rules needed"),
    }
    Ok(())
}

/// The IPv4 side: read the `nat` table (Docker's embedded-DNS rules are kept), then apply.
fn apply_v4(users: &Users, cap_hint: &str) -> Result<()> {
    let save = airlock_firewall::save_nat_v4()
        .with_context(|| format!("cannot read the current nat table ({cap_hint})"))?;
    let preserved = airlock_firewall::preserved_nat_from_save(&save)
        .context("cannot keep Docker's nat rules")?;
    let plan = plan(users, preserved);
    airlock_firewall::apply(Family::V4, &airlock_firewall::render_v4(&plan))
        .with_context(|| format!("cannot apply the IPv4 firewall ({cap_hint})"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;

    fn agent() -> Identity {
        Identity {
            name: "agent".into(),
            uid: 1000,
            gid: 1000,
            groups: vec![1000, 50],
            home: "/home/agent".into(),
            shell: "/bin/sh".into(),
        }
    }

    /// Every session the pool hands out has its rule: 64 gids, the agent's first, all
    /// distinct, and the plan passes its own check.
    #[test]
    fn the_plan_names_every_session_by_its_gid() {
        let mut proxy = agent();
        proxy.uid = 101;
        proxy.gid = 101;
        let users = Users {
            proxy,
            agent: agent(),
            git_gid: 102,
        };
        let plan = plan(&users, airlock_firewall::PreservedNat::default());
        assert_eq!(plan.session_gids.len(), usize::from(ch::MAX_SESSIONS));
        assert_eq!(plan.session_gids[0], 1000);
        assert_eq!(plan.session_gids[1], ch::SESSION_GID_BASE + 2);
        plan.check().unwrap();
        let clash = Users {
            git_gid: ch::SESSION_GID_BASE + 5,
            ..users
        };
        assert!(plan_of(&clash).check().is_err());
    }

    fn plan_of(users: &Users) -> Plan {
        plan(users, airlock_firewall::PreservedNat::default())
    }

    fn step(uid: u32, gid: u32, mode: u32, is_dir: bool, read_only: bool) -> PathStep {
        PathStep {
            path: "/etc/airlock/policy.toml".into(),
            uid,
            gid,
            mode,
            is_dir,
            read_only,
        }
    }

    /// A home as [`HomeFs`] sees it, recording the changes made.
    #[derive(Default)]
    struct Home {
        top: Option<HomeMeta>,
        entries: Vec<(PathBuf, HomeMeta)>,
        changes: Vec<String>,
    }

    impl HomeFs for Home {
        fn stat(&self, _: &Path) -> std::io::Result<HomeMeta> {
            self.top.ok_or_else(|| std::io::ErrorKind::NotFound.into())
        }
        fn entries(&self, _: &Path, max: usize) -> std::io::Result<Vec<(PathBuf, HomeMeta)>> {
            Ok(self.entries.iter().take(max).cloned().collect())
        }
        fn chown(&mut self, _: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
            self.changes.push(format!("chown {uid}:{gid}"));
            Ok(())
        }
        fn chmod(&mut self, _: &Path, mode: u32) -> std::io::Result<()> {
            self.changes.push(format!("chmod {mode:o}"));
            Ok(())
        }
    }

    fn meta(uid: u32, mode: u32, dev: u64) -> HomeMeta {
        HomeMeta {
            uid,
            gid: uid,
            mode,
            dev,
            is_dir: true,
        }
    }

    fn home(top: HomeMeta, entries: &[(&str, HomeMeta)]) -> Home {
        Home {
            top: Some(top),
            entries: entries
                .iter()
                .map(|(n, m)| (Path::new("/home/agent").join(n), *m))
                .collect(),
            changes: Vec::new(),
        }
    }

    #[test]
    fn a_volume_home_becomes_private_and_a_fresh_one_is_given_to_the_agent() {
        let a = agent();
        // A new volume: the image's empty 1000:1000 0755 directory.
        let mut h = home(meta(1000, 0o755, 7), &[]);
        prepare_home(&mut h, &a).unwrap();
        assert_eq!(h.changes, ["chmod 700"]);
        // The same for an agent uid of the workspace owner's: given to it, then private.
        let other = Identity {
            uid: 1001,
            gid: 1001,
            ..agent()
        };
        let mut h = home(meta(1000, 0o755, 7), &[]);
        prepare_home(&mut h, &other).unwrap();
        assert_eq!(h.changes, ["chown 1001:1001", "chmod 700"]);
        // A tmpfs made for the agent (mode=0700): nothing to do.
        let mut h = home(meta(1000, 0o700, 7), &[(".bashrc", meta(1000, 0o644, 7))]);
        prepare_home(&mut h, &a).unwrap();
        assert!(h.changes.is_empty(), "{:?}", h.changes);
        // A home the agent used before (its own files): kept, made private.
        let mut h = home(meta(1000, 0o755, 7), &[(".claude", meta(1000, 0o700, 7))]);
        prepare_home(&mut h, &a).unwrap();
        assert_eq!(h.changes, ["chmod 700"]);
        // No home at all: nothing.
        let mut h = Home::default();
        prepare_home(&mut h, &a).unwrap();
        assert!(h.changes.is_empty());
    }

    #[test]
    fn a_home_another_uid_wrote_refuses_the_start_naming_the_fix() {
        let a = agent();
        // A volume reused across workspace owners: the last sandbox's agent was uid 1001.
        let mut h = home(
            meta(1000, 0o700, 7),
            &[
                (".bashrc", meta(1000, 0o644, 7)),
                (".claude", meta(1001, 0o700, 7)),
                (".cache", meta(1001, 0o700, 7)),
            ],
        );
        let e = format!("{:#}", prepare_home(&mut h, &a).unwrap_err());
        assert!(
            e.contains("uid 1001")
                && e.contains(".claude and 1 more")
                && e.contains("airlock destroy")
                && e.contains("(uid 1000)"),
            "{e}"
        );
        assert!(h.changes.is_empty(), "nothing changed: {:?}", h.changes);
        assert_eq!(e.lines().count(), 1, "{e}");
        // Its top another uid's and not empty: refused, not chowned.
        let mut h = home(meta(1001, 0o700, 7), &[(".bashrc", meta(1000, 0o644, 7))]);
        let e = format!("{:#}", prepare_home(&mut h, &a).unwrap_err());
        assert!(e.contains("uid 1001 (its top directory)"), "{e}");
        assert!(h.changes.is_empty());
        // A root-owned file on the home's own filesystem counts; the operator's mount in
        // the home (another filesystem) does not.
        let mut h = home(meta(1000, 0o700, 7), &[(".ssh", meta(0, 0o700, 7))]);
        assert!(prepare_home(&mut h, &a).is_err());
        let mut h = home(meta(1000, 0o700, 7), &[(".config", meta(0, 0o755, 9))]);
        prepare_home(&mut h, &a).unwrap();
        // A name with a control character is shown escaped.
        let mut h = home(meta(1000, 0o700, 7), &[("a\nb", meta(1001, 0o600, 7))]);
        let e = format!("{:#}", prepare_home(&mut h, &a).unwrap_err());
        assert!(e.contains("a\\nb") && e.lines().count() == 1, "{e}");
    }

    #[test]
    fn a_read_only_mount_protects_whoever_owns_the_file() {
        let a = agent();
        assert!(!agent_can_change(&step(1000, 1000, 0o644, false, true), &a));
        assert!(!agent_can_change(&step(0, 0, 0o666, false, true), &a));
        // The same file writable: the owner could chmod it.
        assert!(agent_can_change(&step(1000, 1000, 0o444, false, false), &a));
    }

    #[test]
    fn writability_follows_mode_bits_and_every_group_of_the_agent() {
        let a = agent();
        assert!(!agent_can_change(&step(0, 0, 0o644, false, false), &a));
        assert!(agent_can_change(&step(0, 0, 0o646, false, false), &a));
        assert!(agent_can_change(&step(0, 50, 0o664, false, false), &a));
        assert!(!agent_can_change(&step(0, 51, 0o664, false, false), &a));
        // Sticky directories not the agent's (like /tmp) do not let it rename others' files.
        assert!(!agent_can_change(&step(0, 0, 0o1777, true, false), &a));
        assert!(agent_can_change(&step(1000, 0, 0o1755, true, false), &a));
    }

    #[test]
    fn the_first_changeable_step_is_named() {
        let a = agent();
        let steps = vec![
            step(1000, 1000, 0o644, false, true),
            PathStep {
                path: "/etc/airlock".into(),
                ..step(1000, 1000, 0o755, true, false)
            },
            PathStep {
                path: "/".into(),
                ..step(0, 0, 0o755, true, false)
            },
        ];
        assert_eq!(
            policy_writable_at(&steps, &a).map(|s| s.path.clone()),
            Some(PathBuf::from("/etc/airlock"))
        );
        assert_eq!(policy_writable_at(&steps[..1], &a), None);
    }
}
