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
//! It does not fix anything and does not judge the policy or the users (later steps do).

use crate::config::Cli;
use anyhow::{Result, bail};
use caps::{CapSet, Capability};
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// Environment variable that selects the checks (see the module docs).
pub const MODE_VAR: &str = "AIRLOCK_PREFLIGHT";

/// What the entrypoint needs as root, each for one job. The documented run command adds
/// exactly these after `--cap-drop ALL`.
pub const REQUIRED_CAPS: [(Capability, &str); 8] = [
    (Capability::CAP_NET_ADMIN, "apply the firewall"),
    (
        Capability::CAP_SETUID,
        "run the proxy and the agent as their users",
    ),
    (Capability::CAP_SETGID, "set their groups"),
    (Capability::CAP_SETPCAP, "clear their bounding sets"),
    (Capability::CAP_KILL, "signal the proxy and the agent"),
    (
        Capability::CAP_CHOWN,
        "hand the audit log to the proxy user",
    ),
    (
        Capability::CAP_FOWNER,
        "set the audit directory's mode after the chown",
    ),
    (
        Capability::CAP_DAC_OVERRIDE,
        "write the credential hand-off and reach the audit log inside the proxy's 0700 directories",
    ),
];

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

/// One mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub fstype: String,
    pub read_only: bool,
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
    /// `Some(false)` when the memory controller has no limit; `None` when it cannot be read.
    pub memory_limited: Option<bool>,
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
    MemoryLimit,
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
            Missing::MemoryLimit => "missing-memory-limit",
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
                let why = REQUIRED_CAPS
                    .iter()
                    .find(|(c, _)| c == cap)
                    .map_or("", |(_, why)| why);
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
            Missing::MemoryLimit => write!(f, "--memory (no memory limit)"),
        }
    }
}

/// The missing pieces, in the order of the documented command. Empty means "go".
pub fn missing(mode: Mode, facts: &Facts, layout: &Layout) -> Vec<Missing> {
    let mut out = Vec::new();
    if mode == Mode::Off {
        return out;
    }
    for (cap, _) in REQUIRED_CAPS {
        if !facts.effective.contains(&cap) {
            out.push(Missing::Capability(cap));
        }
    }
    if mode == Mode::Capabilities {
        return out;
    }
    let required: HashSet<Capability> = REQUIRED_CAPS.iter().map(|(c, _)| *c).collect();
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
    if facts.memory_limited == Some(false) {
        out.push(Missing::MemoryLimit);
    }
    out
}

/// Undoes the octal escapes of `/proc/self/mountinfo` (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let oct = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let (b'\\', Some(digits)) = (bytes[i], oct) {
            let value = digits
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            if let Ok(v) = u8::try_from(value) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo`; malformed lines are skipped (they then count as "not
/// mounted", which fails closed).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?;
            let options = fields.get(5)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                fstype: (*fstype).to_owned(),
                read_only: options.split(',').any(|o| o == "ro"),
            })
        })
        .collect()
}

/// `NoNewPrivs:\t1` in `/proc/self/status`.
pub fn parse_no_new_privs(status: &str) -> bool {
    status
        .lines()
        .filter_map(|l| l.strip_prefix("NoNewPrivs:"))
        .any(|v| v.trim() == "1")
}

/// Whether a cgroup limit file's content is a limit: `max` (v2), `-1` or the v1 "unlimited"
/// page-rounded `i64::MAX` are not.
pub fn is_limit(content: &str) -> bool {
    let v = content.trim();
    if v == "max" || v == "-1" {
        return false;
    }
    match v.parse::<u64>() {
        Ok(n) => n < (1u64 << 62),
        Err(_) => false,
    }
}

fn limit_from(paths: &[&str]) -> Option<bool> {
    paths
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|c| is_limit(&c))
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
        pids_limited: limit_from(&["/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"]),
        memory_limited: limit_from(&[
            "/sys/fs/cgroup/memory.max",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        ]),
    }
}

/// Refuse to start, with one line naming every missing flag or mount, unless the container
/// was started as documented.
pub fn check(cli: &Cli) -> Result<()> {
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
    let agent = nix::unistd::User::from_name(&cli.agent_user).ok().flatten();
    let layout = Layout {
        workspace: cli.workdir.clone(),
        audit_dir: cli.audit_dir.clone(),
        run_dir: cli.run_dir.clone(),
        agent_home: agent
            .as_ref()
            .map_or_else(|| PathBuf::from("/home/agent"), |u| u.dir.clone()),
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

    const DOCKER_MOUNTINFO: &str = "\
1100 1000 0:90 / / ro,relatime master:1 - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0
1101 1100 0:93 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1102 1100 0:94 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
1110 1100 0:95 / /run rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
1111 1100 0:96 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw
1112 1100 0:97 / /home/agent rw,nosuid,nodev,relatime - tmpfs tmpfs rw,uid=1000,gid=1000,mode=700
1113 1100 8:1 /src/my\\040repo /workspace rw,relatime - ext4 /dev/sda1 rw
1114 1100 8:1 /var/lib/docker/volumes/airlock-audit/_data /var/log/airlock rw,relatime - ext4 /dev/sda1 rw
1115 1100 8:1 /src/policy.toml /etc/airlock/policy.toml ro,relatime - ext4 /dev/sda1 rw
";

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
        let required: HashSet<Capability> = REQUIRED_CAPS.iter().map(|(c, _)| *c).collect();
        Facts {
            effective: required.clone(),
            bounding: required,
            no_new_privs: true,
            mounts: parse_mountinfo(DOCKER_MOUNTINFO),
            pids_limited: Some(true),
            memory_limited: Some(true),
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
        assert_eq!(mounts.len(), 9);
        assert_eq!(mounts[0].point, Path::new("/"));
        assert!(mounts[0].read_only);
        assert_eq!(mounts[6].point, Path::new("/workspace"));
        assert_eq!(mounts[4].fstype, "tmpfs");
        assert!(!mounts[4].read_only);
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
        f.memory_limited = Some(false);
        assert_eq!(only(&f).code(), "missing-memory-limit");
    }

    #[test]
    fn a_writable_root_is_refused_even_if_remounted_read_only_underneath() {
        let mut f = documented();
        f.mounts.push(Mount {
            point: "/".into(),
            fstype: "overlay".into(),
            read_only: false,
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
            REQUIRED_CAPS.len()
        );
        f.effective = REQUIRED_CAPS.iter().map(|(c, _)| *c).collect();
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
        assert!(!is_limit("max\n"));
        assert!(!is_limit("-1"));
        assert!(!is_limit("9223372036854771712\n"));
        assert!(!is_limit("garbage"));
        assert!(is_limit("512\n"));
        assert!(is_limit("2147483648"));
        assert!(parse_no_new_privs(
            "Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\n"
        ));
        assert!(!parse_no_new_privs("NoNewPrivs:\t0\n"));
        assert!(!parse_no_new_privs(""));
    }
}
