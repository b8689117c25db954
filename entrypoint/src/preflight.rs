//! Preflight: before anything starts, check that the container was started the way the
//! documented `docker run` command starts it, and refuse with one line naming every missing
//! piece (the flag to add) otherwise.
//!
//! Pure core, thin effects: [`Facts`] is what the kernel says about this container (read from
//! `/proc/self/mountinfo`, the capability sets, `NoNewPrivs` in `/proc/self/status` and the
//! cgroup limit files), [`missing`] turns facts into [`Missing`] items without I/O, and
//! [`check`] gathers the facts and fails with the line.
//!
//! Which checks run depends on `AIRLOCK_PREFLIGHT` (the image sets `container`):
//! - `container`: everything below (the image's layout: read-only root, tmpfs, volumes);
//! - unset: only the capabilities the entrypoint itself needs (a run outside a container,
//!   e.g. the namespace tests and `scripts/sandbox`, has its own layout);
//! - `off`: nothing (an operator who knows better; the later steps still fail closed).
//!
//! Memory: every writable tmpfs (the agent's `/tmp`, home and `/dev/shm`, and `/run`, `/dev`)
//! keeps its pages in the container's memory cgroup, and without swap nothing can reclaim
//! them. A tmpfs without a size (Docker's default: half the host's RAM) lets the agent fill
//! the cgroup, after which `docker exec` fails and requests hang. So each must have an
//! explicit size, and their sizes plus [`PROCESS_RESERVE`] must fit the memory limit: filling
//! them then ends in `ENOSPC` and nothing else.
//!
//! What "documented" means is `airlock-control`'s: the capabilities with their jobs, the
//! tmpfs mounts with their options and sizes, the limits. The host CLI renders its run flags
//! from the same definition, and `docker/run-flags.sh` and `compose.yaml` are tested to agree
//! with it (here and in the CLI's tests), so the flag a refusal names is the flag they use.
//!
//! It does not fix anything and does not judge the policy or the users (later steps do).

use crate::procfs::{Mount, parse_mountinfo};
use airlock_control::{caps as contract, limits, tmpfs};
use anyhow::{Result, bail};
use caps::{CapSet, Capability};
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// Environment variable that selects the checks (see the module docs).
pub const MODE_VAR: &str = airlock_control::env::PREFLIGHT;

/// What the entrypoint needs as root, each for one job (`airlock_control::caps`), as the
/// kernel names them. The documented run command adds exactly these after `--cap-drop ALL`.
pub fn required_caps() -> Vec<(Capability, &'static str)> {
    contract::CAPABILITIES
        .iter()
        .filter_map(|c| Some((c.kernel_name().parse().ok()?, c.why)))
        .collect()
}

/// Memory the processes need beside the full tmpfs mounts (`airlock_control::limits`).
pub const PROCESS_RESERVE: u64 = limits::PROCESS_RESERVE;

/// Which checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The image's layout: every check.
    Container,
    /// Outside a container: capabilities only.
    Capabilities,
    /// No checks.
    Off,
}

impl Mode {
    /// The mode for a value of [`MODE_VAR`]; `None` for an unknown value.
    pub fn parse(value: Option<&str>) -> Option<Mode> {
        match value {
            None | Some("") => Some(Mode::Capabilities),
            Some("container") => Some(Mode::Container),
            Some("off") => Some(Mode::Off),
            Some(_) => None,
        }
    }
}

/// A cgroup limit file's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Limit {
    /// No limit file could be read.
    #[default]
    Unreadable,
    /// `max` (v2), `-1` or the v1 "unlimited" page-rounded `i64::MAX`.
    Unlimited,
    Bytes(u64),
}

/// What the kernel says about this container.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub effective: HashSet<Capability>,
    pub bounding: HashSet<Capability>,
    pub no_new_privs: bool,
    /// Mounts in mount order (a later mount on the same point hides an earlier one).
    pub mounts: Vec<Mount>,
    /// `Some(false)` when the pids controller says "max"; `None` when it cannot be read.
    pub pids_limited: Option<bool>,
    /// The memory cgroup's limit (`memory.max`, or v1's `memory.limit_in_bytes`).
    pub memory: Limit,
}

impl Facts {
    /// The mount that is visible at `point` (the last one mounted there).
    fn mount_at(&self, point: &Path) -> Option<&Mount> {
        self.mounts.iter().rev().find(|m| m.point == point)
    }
}

/// Paths of the image's layout that must be mounts.
#[derive(Debug, Clone)]
pub struct Layout {
    pub workspace: PathBuf,
    pub audit_dir: PathBuf,
    pub run_dir: PathBuf,
    pub agent_home: PathBuf,
    pub agent_uid: u32,
}

/// One missing piece: what is wrong and the `docker run` flag that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Capability(Capability),
    ExtraCapabilities(Vec<Capability>),
    NoNewPrivs,
    ReadOnlyRoot,
    WritableTmpfs(PathBuf),
    AgentHome(PathBuf, u32),
    Workspace(PathBuf),
    AuditVolume(PathBuf),
    PidsLimit,
    /// No memory limit (`Limit::Unlimited`) or none readable (`Limit::Unreadable`).
    MemoryLimit(Limit),
    /// A writable tmpfs without a size; the flag that mounts it with the documented size.
    UnsizedTmpfs(PathBuf, String),
    /// The writable tmpfs sizes plus [`PROCESS_RESERVE`] exceed the memory limit.
    TmpfsOverMemory {
        tmpfs: u64,
        limit: u64,
    },
}

impl Missing {
    /// Stable code of the missing piece.
    pub fn code(&self) -> &'static str {
        match self {
            Missing::Capability(_) => "missing-capability",
            Missing::ExtraCapabilities(_) => "extra-capabilities",
            Missing::NoNewPrivs => "missing-no-new-privileges",
            Missing::ReadOnlyRoot => "missing-read-only",
            Missing::WritableTmpfs(_) => "missing-tmpfs",
            Missing::AgentHome(..) => "missing-agent-home",
            Missing::Workspace(_) => "missing-workspace",
            Missing::AuditVolume(_) => "missing-audit-volume",
            Missing::PidsLimit => "missing-pids-limit",
            Missing::MemoryLimit(_) => "missing-memory-limit",
            Missing::UnsizedTmpfs(..) => "unsized-tmpfs",
            Missing::TmpfsOverMemory { .. } => "tmpfs-over-memory",
        }
    }
}

/// `CAP_NET_ADMIN` → `NET_ADMIN`, as `docker run --cap-add` spells it.
fn docker_name(cap: Capability) -> String {
    cap.to_string()
        .trim_start_matches("CAP_")
        .to_ascii_uppercase()
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Capability(cap) => {
                let name = docker_name(*cap);
                let why = contract::find(&name).map_or("", |c| c.why);
                write!(f, "--cap-add {name} (needed to {why})")
            }
            Missing::ExtraCapabilities(extra) => {
                let names: Vec<String> = extra.iter().map(|c| docker_name(*c)).collect();
                write!(
                    f,
                    "--cap-drop ALL (the container also holds {}; add back only the documented ones)",
                    names.join(",")
                )
            }
            Missing::NoNewPrivs => write!(f, "--security-opt no-new-privileges"),
            Missing::ReadOnlyRoot => write!(f, "--read-only (the root filesystem is writable)"),
            Missing::WritableTmpfs(p) => write!(f, "--tmpfs {}", p.display()),
            Missing::UnsizedTmpfs(p, flag) => write!(
                f,
                "{flag} ({} is a tmpfs without a size: it could fill the memory limit and wedge the container)",
                p.display()
            ),
            Missing::TmpfsOverMemory { tmpfs, limit } => write!(
                f,
                "--memory {} (the writable tmpfs mounts may hold {} and the processes need {} beside them, more than the {} limit; or lower the tmpfs sizes)",
                gib_flag(tmpfs.saturating_add(PROCESS_RESERVE)),
                gib(*tmpfs),
                gib(PROCESS_RESERVE),
                gib(*limit)
            ),
            Missing::AgentHome(p, uid) => write!(
                f,
                "--tmpfs {}:uid={uid},gid={uid},mode=0700 (the agent's home)",
                p.display()
            ),
            Missing::Workspace(p) => write!(
                f,
                "-v \"$PWD:{}\" (mount the repository the agent works on)",
                p.display()
            ),
            Missing::AuditVolume(p) => {
                write!(f, "-v airlock-audit:{} (the audit log volume)", p.display())
            }
            Missing::PidsLimit => write!(f, "--pids-limit (no limit on processes)"),
            Missing::MemoryLimit(Limit::Unreadable) => write!(
                f,
                "--memory {} (no memory limit readable in /sys/fs/cgroup, so the tmpfs sizes cannot be checked against it)",
                limits::MEMORY
            ),
            Missing::MemoryLimit(_) => {
                write!(f, "--memory {} (no memory limit)", limits::MEMORY)
            }
        }
    }
}

/// `1.7 GiB`.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// The smallest whole `--memory` value in GiB that holds `bytes`: `3g`.
fn gib_flag(bytes: u64) -> String {
    format!("{}g", bytes.div_ceil(1 << 30))
}

/// The documented flag that mounts `point` as a sized tmpfs.
fn sized_flag(point: &Path, layout: &Layout) -> String {
    if point == layout.agent_home {
        let options = tmpfs::HOME.options_for_uid(layout.agent_uid);
        format!("--tmpfs {}:{options}", point.display())
    } else if let Some(t) = tmpfs::TMPFS.iter().find(|t| point == Path::new(t.target)) {
        format!("--tmpfs {}", t.spec())
    } else if point == Path::new("/dev/shm") {
        format!("--shm-size {}", limits::SHM_SIZE)
    } else {
        format!("--tmpfs {}:size=64m (or remove it)", point.display())
    }
}

/// The tmpfs mounts that can be written (the visible mount at each point, one per
/// filesystem: bind mounts of one tmpfs share its size), outside `/proc` and `/sys` (kernel
/// interfaces; on cgroup v1 Docker holds the controllers in a root-only tmpfs at
/// `/sys/fs/cgroup`, and masks `/proc` files with binds of `/dev`'s tmpfs).
fn writable_tmpfs(facts: &Facts) -> Vec<&Mount> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, m) in facts.mounts.iter().enumerate() {
        let hidden = facts
            .mounts
            .iter()
            .skip(i + 1)
            .any(|later| later.point == m.point);
        if hidden
            || m.fstype != "tmpfs"
            || m.read_only
            || m.point.starts_with("/proc")
            || m.point.starts_with("/sys")
        {
            continue;
        }
        if seen.insert(m.dev.as_str()) {
            out.push(m);
        }
    }
    out
}

/// The missing pieces, in the order of the documented command. Empty means "go".
pub fn missing(mode: Mode, facts: &Facts, layout: &Layout) -> Vec<Missing> {
    let mut out = Vec::new();
    if mode == Mode::Off {
        return out;
    }
    let required_caps = required_caps();
    for (cap, _) in &required_caps {
        if !facts.effective.contains(cap) {
            out.push(Missing::Capability(*cap));
        }
    }
    if mode == Mode::Capabilities {
        return out;
    }
    let required: HashSet<Capability> = required_caps.iter().map(|(c, _)| *c).collect();
    let mut extra: Vec<Capability> = facts.bounding.difference(&required).copied().collect();
    extra.sort_by_key(|c| c.index());
    if !extra.is_empty() {
        out.push(Missing::ExtraCapabilities(extra));
    }
    if !facts.no_new_privs {
        out.push(Missing::NoNewPrivs);
    }
    if facts.mount_at(Path::new("/")).is_none_or(|m| !m.read_only) {
        out.push(Missing::ReadOnlyRoot);
    }
    for dir in [Path::new("/tmp"), layout.run_dir.as_path()] {
        let tmp = facts
            .mount_at(dir)
            .or_else(|| dir.parent().and_then(|p| facts.mount_at(p)));
        if tmp.is_none_or(|m| m.fstype != "tmpfs" || m.read_only) {
            let point = if dir.starts_with("/run") {
                Path::new("/run")
            } else {
                dir
            };
            out.push(Missing::WritableTmpfs(point.to_path_buf()));
        }
    }
    if facts
        .mount_at(&layout.agent_home)
        .is_none_or(|m| m.read_only)
    {
        out.push(Missing::AgentHome(
            layout.agent_home.clone(),
            layout.agent_uid,
        ));
    }
    if facts.mount_at(&layout.workspace).is_none() {
        out.push(Missing::Workspace(layout.workspace.clone()));
    }
    if facts
        .mount_at(&layout.audit_dir)
        .is_none_or(|m| m.read_only)
    {
        out.push(Missing::AuditVolume(layout.audit_dir.clone()));
    }
    if facts.pids_limited == Some(false) {
        out.push(Missing::PidsLimit);
    }
    let tmpfs = writable_tmpfs(facts);
    for m in &tmpfs {
        if m.size.is_none() {
            out.push(Missing::UnsizedTmpfs(
                m.point.clone(),
                sized_flag(&m.point, layout),
            ));
        }
    }
    match facts.memory {
        Limit::Bytes(limit) => {
            let total: u64 = tmpfs.iter().filter_map(|m| m.size).sum();
            // An unsized tmpfs is already named; the sum would understate it.
            if tmpfs.iter().all(|m| m.size.is_some())
                && total.saturating_add(PROCESS_RESERVE) > limit
            {
                out.push(Missing::TmpfsOverMemory {
                    tmpfs: total,
                    limit,
                });
            }
        }
        other => out.push(Missing::MemoryLimit(other)),
    }
    out
}

/// `NoNewPrivs:\t1` in `/proc/self/status`.
pub fn parse_no_new_privs(status: &str) -> bool {
    status
        .lines()
        .filter_map(|l| l.strip_prefix("NoNewPrivs:"))
        .any(|v| v.trim() == "1")
}

/// A cgroup limit file's content: `max` (v2), `-1`, the v1 "unlimited" page-rounded
/// `i64::MAX` and anything unparsable are no limit.
pub fn parse_limit(content: &str) -> Limit {
    match content.trim().parse::<u64>() {
        Ok(n) if n < (1u64 << 62) => Limit::Bytes(n),
        _ => Limit::Unlimited,
    }
}

fn limit_from(paths: &[&str]) -> Limit {
    paths
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map_or(Limit::Unreadable, |c| parse_limit(&c))
}

fn gather() -> Facts {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    Facts {
        effective: caps::read(None, CapSet::Effective)
            .unwrap_or_default()
            .into_iter()
            .collect(),
        bounding: caps::read(None, CapSet::Bounding)
            .unwrap_or_default()
            .into_iter()
            .collect(),
        no_new_privs: parse_no_new_privs(&read("/proc/self/status")),
        mounts: parse_mountinfo(&read("/proc/self/mountinfo")),
        pids_limited: match limit_from(&["/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"])
        {
            Limit::Unreadable => None,
            l => Some(matches!(l, Limit::Bytes(_))),
        },
        memory: limit_from(&[
            "/sys/fs/cgroup/memory.max",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        ]),
    }
}

/// What [`check`] needs of the command line: the paths that must be mounts and the agent's
/// user (its home must be a tmpfs).
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub workspace: &'a Path,
    pub audit_dir: &'a Path,
    pub run_dir: &'a Path,
    pub agent_user: &'a str,
}

/// Refuse to start, with one line naming every missing flag or mount, unless the container
/// was started as documented.
pub fn check(input: &Input<'_>) -> Result<()> {
    let value = std::env::var(MODE_VAR).ok();
    let Some(mode) = Mode::parse(value.as_deref()) else {
        bail!(
            "{MODE_VAR}={:?} is not one of container, off (or unset)",
            value.unwrap_or_default()
        );
    };
    if mode == Mode::Off {
        return Ok(());
    }
    let agent = nix::unistd::User::from_name(input.agent_user)
        .ok()
        .flatten();
    let layout = Layout {
        workspace: input.workspace.to_path_buf(),
        audit_dir: input.audit_dir.to_path_buf(),
        run_dir: input.run_dir.to_path_buf(),
        agent_home: agent.as_ref().map_or_else(
            || PathBuf::from(airlock_control::paths::AGENT_HOME),
            |u| u.dir.clone(),
        ),
        agent_uid: agent.map_or(1000, |u| u.uid.as_raw()),
    };
    let gaps = missing(mode, &gather(), &layout);
    if gaps.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = gaps.iter().map(ToString::to_string).collect();
    let codes: Vec<&str> = gaps.iter().map(Missing::code).collect();
    bail!(
        "the container was not started as documented (docs/docker.md), missing: {} [{}]",
        list.join("; "),
        codes.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{parse_size, unescape};

    /// `/proc/self/mountinfo` of the documented command on Docker 28, cgroup v1 (the smoke
    /// tests' host), trimmed of the per-controller cgroup mounts: note the root-only tmpfs at
    /// `/sys/fs/cgroup` and the binds of `/dev`'s tmpfs that mask `/proc` files.
    const DOCKER_MOUNTINFO: &str = "\
69 45 0:39 / / ro,noatime master:2 - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0,group_id=0
70 69 0:41 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
71 69 0:42 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
73 69 0:44 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
74 73 0:45 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
78 74 0:32 /docker/81c1 /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
85 71 0:46 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
86 69 0:47 / /run rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=65536k
87 69 0:48 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=524288k
91 69 0:49 / /home/agent rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=1048576k,mode=700,uid=1000,gid=1000
92 69 8:1 /src/my\\040repo /workspace rw,relatime - ext4 /dev/sda1 rw
93 69 8:1 /var/lib/docker/volumes/airlock-audit/_data /var/log/airlock rw,relatime - ext4 /dev/sda1 rw
94 69 8:1 /src/policy.toml /etc/airlock/policy.toml ro,relatime - ext4 /dev/sda1 rw
95 92 0:52 / /workspace/.git ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs ro,mode=555
50 70 0:50 / /proc/acpi ro,relatime - tmpfs tmpfs ro
51 70 0:42 /null /proc/keys rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
";

    const GIB: u64 = 1 << 30;

    fn layout() -> Layout {
        Layout {
            workspace: "/workspace".into(),
            audit_dir: "/var/log/airlock".into(),
            run_dir: "/run/airlock".into(),
            agent_home: "/home/agent".into(),
            agent_uid: 1000,
        }
    }

    fn documented() -> Facts {
        let required: HashSet<Capability> = required_caps().iter().map(|(c, _)| *c).collect();
        Facts {
            effective: required.clone(),
            bounding: required,
            no_new_privs: true,
            mounts: parse_mountinfo(DOCKER_MOUNTINFO),
            pids_limited: Some(true),
            memory: Limit::Bytes(4 * GIB),
        }
    }

    fn only(facts: &Facts) -> Missing {
        let gaps = missing(Mode::Container, facts, &layout());
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        gaps.into_iter().next().unwrap()
    }

    #[test]
    fn the_documented_command_passes() {
        assert_eq!(
            missing(Mode::Container, &documented(), &layout()),
            Vec::new()
        );
    }

    #[test]
    fn mountinfo_is_parsed_with_escapes_and_options() {
        let mounts = parse_mountinfo(DOCKER_MOUNTINFO);
        assert_eq!(mounts.len(), 16);
        assert_eq!(mounts[0].point, Path::new("/"));
        assert!(mounts[0].read_only);
        assert_eq!(mounts[10].point, Path::new("/workspace"));
        assert_eq!(mounts[8].point, Path::new("/tmp"));
        assert_eq!(mounts[8].fstype, "tmpfs");
        assert_eq!(mounts[8].dev, "0:48");
        assert_eq!(mounts[8].size, Some(512 << 20));
        assert!(!mounts[8].read_only);
        assert_eq!(mounts[4].size, None, "/sys/fs/cgroup has no size");
        assert_eq!(mounts[10].size, None);
        assert_eq!(unescape("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
        assert!(parse_mountinfo("garbage\n\n1 2 3").is_empty());
    }

    #[test]
    fn each_forgotten_flag_is_named() {
        let mut f = documented();
        f.effective.remove(&Capability::CAP_NET_ADMIN);
        let m = only(&f);
        assert_eq!(m.code(), "missing-capability");
        assert_eq!(
            m.to_string(),
            "--cap-add NET_ADMIN (needed to apply the firewall)"
        );

        let mut f = documented();
        f.bounding.insert(Capability::CAP_NET_RAW);
        f.bounding.insert(Capability::CAP_SYS_ADMIN);
        let m = only(&f);
        assert_eq!(m.code(), "extra-capabilities");
        assert!(m.to_string().contains("NET_RAW,SYS_ADMIN"), "{m}");

        let mut f = documented();
        f.no_new_privs = false;
        assert_eq!(only(&f).to_string(), "--security-opt no-new-privileges");

        let mut f = documented();
        f.mounts.retain(|m| m.point != Path::new("/run"));
        assert_eq!(only(&f).to_string(), "--tmpfs /run");

        let mut f = documented();
        f.mounts.retain(|m| m.point != Path::new("/tmp"));
        assert_eq!(only(&f).to_string(), "--tmpfs /tmp");

        let mut f = documented();
        f.mounts.retain(|m| m.point != Path::new("/home/agent"));
        assert_eq!(only(&f).code(), "missing-agent-home");

        let mut f = documented();
        f.mounts.retain(|m| m.point != Path::new("/workspace"));
        assert_eq!(only(&f).code(), "missing-workspace");

        let mut f = documented();
        f.mounts
            .retain(|m| m.point != Path::new("/var/log/airlock"));
        assert_eq!(only(&f).code(), "missing-audit-volume");

        let mut f = documented();
        f.pids_limited = Some(false);
        assert_eq!(only(&f).code(), "missing-pids-limit");

        let mut f = documented();
        f.memory = Limit::Unlimited;
        assert_eq!(only(&f).code(), "missing-memory-limit");
        assert!(only(&f).to_string().starts_with("--memory 4g"));
    }

    fn set_tmpfs(f: &mut Facts, point: &str, size: Option<u64>) {
        let m = f
            .mounts
            .iter_mut()
            .rfind(|m| m.point == Path::new(point))
            .unwrap();
        m.size = size;
    }

    #[test]
    fn a_tmpfs_without_a_size_is_refused_naming_the_sized_flag() {
        let mut f = documented();
        set_tmpfs(&mut f, "/tmp", None);
        let m = only(&f);
        assert_eq!(m.code(), "unsized-tmpfs");
        assert!(
            m.to_string().starts_with(
                "--tmpfs /tmp:rw,exec,nosuid,nodev,size=512m (/tmp is a tmpfs without a size"
            ),
            "{m}"
        );

        let mut f = documented();
        set_tmpfs(&mut f, "/home/agent", None);
        assert!(
            only(&f).to_string().starts_with(
                "--tmpfs /home/agent:rw,exec,nosuid,nodev,uid=1000,gid=1000,mode=0700,size=1g "
            ),
            "{}",
            only(&f)
        );

        let mut f = documented();
        set_tmpfs(&mut f, "/run", None);
        assert!(
            only(&f)
                .to_string()
                .starts_with("--tmpfs /run:rw,nosuid,nodev,noexec,size=64m "),
            "{}",
            only(&f)
        );

        // --ipc host: the host's /dev/shm, unsized.
        let mut f = documented();
        set_tmpfs(&mut f, "/dev/shm", None);
        assert!(only(&f).to_string().starts_with("--shm-size 64m "));

        // An operator's extra tmpfs counts like the documented ones.
        let mut f = documented();
        f.mounts.extend(parse_mountinfo(
            "99 69 0:60 / /var/cache rw,relatime - tmpfs tmpfs rw,size=0k\n",
        ));
        assert!(
            only(&f)
                .to_string()
                .starts_with("--tmpfs /var/cache:size=64m")
        );
    }

    #[test]
    fn kernel_interfaces_read_only_covers_and_binds_are_not_counted_twice() {
        let tmpfs: Vec<PathBuf> = writable_tmpfs(&documented())
            .iter()
            .map(|m| m.point.clone())
            .collect();
        // Not /sys/fs/cgroup (root-only, unsized), not /proc/keys (a bind of /dev's tmpfs),
        // not the read-only .git cover or /proc/acpi.
        let want: Vec<PathBuf> = ["/dev", "/dev/shm", "/run", "/tmp", "/home/agent"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(tmpfs, want);

        // A bind of /tmp elsewhere shares /tmp's size: counted once.
        let mut f = documented();
        f.mounts.extend(parse_mountinfo(
            "99 69 0:48 /sub /var/tmp rw,relatime - tmpfs tmpfs rw,size=524288k\n",
        ));
        f.memory = Limit::Bytes(1728 * (1 << 20) + PROCESS_RESERVE);
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());

        // A tmpfs hidden under a later mount is not reachable.
        let mut f = documented();
        f.mounts.insert(
            1,
            parse_mountinfo("98 69 0:70 / /tmp rw - tmpfs tmpfs rw\n").remove(0),
        );
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());
    }

    #[test]
    fn the_tmpfs_sizes_and_a_reserve_must_fit_the_memory_limit() {
        // The documented sizes: 64m /dev + 64m /dev/shm + 64m /run + 512m /tmp + 1g home.
        let total = 1728u64 << 20;
        let mut f = documented();
        f.memory = Limit::Bytes(total + PROCESS_RESERVE);
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());

        f.memory = Limit::Bytes(total + PROCESS_RESERVE - 1);
        let m = only(&f);
        assert_eq!(
            m,
            Missing::TmpfsOverMemory {
                tmpfs: total,
                limit: total + PROCESS_RESERVE - 1
            }
        );
        assert_eq!(m.code(), "tmpfs-over-memory");
        assert!(m.to_string().starts_with("--memory 3g (the writable tmpfs mounts may hold 1.7 GiB and the processes need 1.0 GiB beside them, more than the 2.7 GiB limit"), "{m}");

        let mut f = documented();
        set_tmpfs(&mut f, "/tmp", Some(8 * GIB));
        assert!(
            only(&f).to_string().starts_with("--memory 11g "),
            "{}",
            only(&f)
        );
    }

    #[test]
    fn an_unreadable_memory_limit_is_refused() {
        let mut f = documented();
        f.memory = Limit::Unreadable;
        let m = only(&f);
        assert_eq!(m.code(), "missing-memory-limit");
        assert!(m.to_string().contains("no memory limit readable"), "{m}");
    }

    #[test]
    fn sizes_parse_as_tmpfs_and_docker_spell_them() {
        assert_eq!(parse_size("524288k"), Some(512 << 20));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("1g"), Some(GIB));
        assert_eq!(parse_size("4G"), Some(4 * GIB));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("50%"), None);
        assert_eq!(parse_size("m"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999t"), None);
        assert_eq!(parse_limit("4294967296\n"), Limit::Bytes(4 * GIB));
        assert_eq!(parse_limit("max\n"), Limit::Unlimited);
        assert_eq!(parse_limit("9223372036854771712"), Limit::Unlimited);
        let zero = parse_mountinfo("1 2 0:1 / /tmp rw - tmpfs tmpfs rw,size=0k\n");
        assert_eq!(zero[0].size, None, "size=0 is an unbounded tmpfs");
    }

    /// The mountinfo lines Docker makes of `--tmpfs POINT:OPTIONS` specs (sizes in KiB, as
    /// the kernel shows them), on top of its own `/dev` and `/dev/shm` (64 MiB each).
    fn docker_tmpfs(specs: &[String]) -> Vec<Mount> {
        let mut text = String::from(
            "71 69 0:42 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n\
             85 71 0:46 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k\n",
        );
        for (i, spec) in specs.iter().enumerate() {
            let (point, opts) = spec.split_once(':').unwrap_or((spec, ""));
            let ro = if opts.split(',').any(|o| o == "ro") {
                "ro"
            } else {
                "rw"
            };
            let size = opts
                .split(',')
                .find_map(|o| o.strip_prefix("size="))
                .map(|s| format!(",size={}k", parse_size(s).unwrap() >> 10))
                .unwrap_or_default();
            text.push_str(&format!(
                "{n} 69 0:{n} / {point} {ro} - tmpfs tmpfs {ro}{size}\n",
                n = 200 + i
            ));
        }
        parse_mountinfo(&text)
    }

    /// The documented facts with the tmpfs mounts and memory limit of a run definition.
    fn facts_of(specs: &[String], memory: &str) -> Facts {
        let mut f = documented();
        f.mounts.retain(|m| {
            m.fstype != "tmpfs" || m.point.starts_with("/proc") || m.point.starts_with("/sys")
        });
        f.mounts.extend(docker_tmpfs(specs));
        f.memory = Limit::Bytes(parse_size(memory).unwrap());
        f
    }

    fn repo_file(path: &str) -> String {
        let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
        std::fs::read_to_string(&full)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", full.display()))
    }

    #[test]
    fn docker_run_flags_agree_with_the_preflight() {
        let text = repo_file("docker/run-flags.sh");
        let words: Vec<&str> = text.split_whitespace().collect();
        let after = |flag: &str| -> Vec<String> {
            words
                .windows(2)
                .filter(|w| w[0] == flag)
                .map(|w| w[1].to_owned())
                .collect()
        };
        let specs = after("--tmpfs");
        let memory = after("--memory");
        assert_eq!(memory.len(), 1, "one --memory in run-flags.sh");
        assert!(specs.len() >= 3, "{specs:?}");
        let f = facts_of(&specs, &memory[0]);
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());
        // What the preflight tells an operator to add is what run-flags.sh says, verbatim.
        for point in ["/tmp", "/run", "/home/agent"] {
            let flag = sized_flag(Path::new(point), &layout());
            let spec = flag.trim_start_matches("--tmpfs ");
            assert!(specs.iter().any(|s| s == spec), "{spec} not in {specs:?}");
        }
    }

    /// The run `airlock-control` describes (every capability, every tmpfs with its options
    /// and size, the memory limit) passes: what the CLI renders from it starts.
    #[test]
    fn the_contract_s_run_passes_the_preflight() {
        assert_eq!(
            required_caps().len(),
            contract::CAPABILITIES.len(),
            "every capability of the contract has a kernel name"
        );
        let specs: Vec<String> = tmpfs::TMPFS
            .iter()
            .chain([&tmpfs::GIT_COVER])
            .map(|t| t.spec())
            .collect();
        let f = facts_of(&specs, limits::MEMORY);
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());
        for t in tmpfs::TMPFS {
            let flag = sized_flag(Path::new(t.target), &layout());
            assert_eq!(flag, format!("--tmpfs {}", t.spec()));
        }
        assert_eq!(
            sized_flag(Path::new("/dev/shm"), &layout()),
            format!("--shm-size {}", limits::SHM_SIZE)
        );
    }

    /// The CLI mounts a volume of the sandbox's own at the home instead of its tmpfs: a
    /// writable home is all the preflight asks, and the volume takes no memory.
    #[test]
    fn a_home_volume_passes_in_place_of_its_tmpfs() {
        let specs: Vec<String> = [tmpfs::TMP, tmpfs::RUN, tmpfs::GIT_COVER]
            .iter()
            .map(|t| t.spec())
            .collect();
        let mut f = facts_of(&specs, limits::MEMORY);
        f.mounts.extend(parse_mountinfo(
            "99 69 8:1 /var/lib/docker/volumes/airlock-home-x/_data /home/agent rw,relatime - ext4 /dev/sda1 rw\n",
        ));
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());
        // Read-only, it is not a home.
        let last = f.mounts.len() - 1;
        f.mounts[last].read_only = true;
        assert_eq!(only(&f).code(), "missing-agent-home");
    }

    #[test]
    fn compose_yaml_agrees_with_the_preflight() {
        let text = repo_file("compose.yaml");
        let mut specs = Vec::new();
        let mut memory = None;
        let mut in_tmpfs = false;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with('#') {
                continue;
            }
            if let Some(m) = t.strip_prefix("mem_limit:") {
                memory = Some(m.trim().to_owned());
            }
            if t == "tmpfs:" {
                in_tmpfs = true;
                continue;
            }
            match t.strip_prefix("- ") {
                Some(item) if in_tmpfs => specs.push(item.to_owned()),
                _ => in_tmpfs = false,
            }
        }
        assert!(specs.len() >= 3, "{specs:?}");
        let memory = memory.expect("mem_limit in compose.yaml");
        let f = facts_of(&specs, &memory);
        assert_eq!(missing(Mode::Container, &f, &layout()), Vec::new());
        for point in ["/tmp", "/run", "/home/agent"] {
            let flag = sized_flag(Path::new(point), &layout());
            let spec = flag.trim_start_matches("--tmpfs ");
            assert!(specs.iter().any(|s| s == spec), "{spec} not in {specs:?}");
        }
    }

    #[test]
    fn a_writable_root_is_refused_even_if_remounted_read_only_underneath() {
        let mut f = documented();
        f.mounts.push(Mount {
            point: "/".into(),
            fstype: "overlay".into(),
            read_only: false,
            dev: "0:99".into(),
            size: None,
        });
        assert_eq!(only(&f), Missing::ReadOnlyRoot);
        f.mounts.retain(|m| m.point != Path::new("/"));
        assert_eq!(only(&f), Missing::ReadOnlyRoot);
    }

    #[test]
    fn a_read_only_tmpfs_or_a_plain_directory_is_not_a_writable_tmpfs() {
        let mut f = documented();
        for m in &mut f.mounts {
            if m.point == Path::new("/tmp") {
                m.read_only = true;
            }
        }
        assert_eq!(only(&f), Missing::WritableTmpfs("/tmp".into()));
        let mut f = documented();
        for m in &mut f.mounts {
            if m.point == Path::new("/run") {
                m.fstype = "ext4".into();
            }
        }
        assert_eq!(only(&f), Missing::WritableTmpfs("/run".into()));
    }

    #[test]
    fn outside_a_container_only_capabilities_count_and_off_checks_nothing() {
        let mut f = Facts::default();
        assert_eq!(
            missing(Mode::Capabilities, &f, &layout()).len(),
            required_caps().len()
        );
        f.effective = required_caps().iter().map(|(c, _)| *c).collect();
        assert!(missing(Mode::Capabilities, &f, &layout()).is_empty());
        assert!(missing(Mode::Off, &Facts::default(), &layout()).is_empty());
        assert!(missing(Mode::Container, &Facts::default(), &layout()).len() > 8);
    }

    #[test]
    fn modes_and_limits_parse() {
        assert_eq!(Mode::parse(None), Some(Mode::Capabilities));
        assert_eq!(Mode::parse(Some("container")), Some(Mode::Container));
        assert_eq!(Mode::parse(Some("off")), Some(Mode::Off));
        assert_eq!(Mode::parse(Some("Container")), None);
        assert_eq!(parse_limit("max\n"), Limit::Unlimited);
        assert_eq!(parse_limit("-1"), Limit::Unlimited);
        assert_eq!(parse_limit("9223372036854771712\n"), Limit::Unlimited);
        assert_eq!(parse_limit("garbage"), Limit::Unlimited);
        assert!(matches!(parse_limit("512\n"), Limit::Bytes(_)));
        assert!(matches!(parse_limit("2147483648"), Limit::Bytes(_)));
        assert!(parse_no_new_privs(
            "Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\n"
        ));
        assert!(!parse_no_new_privs("NoNewPrivs:\t0\n"));
        assert!(!parse_no_new_privs(""));
    }
}
