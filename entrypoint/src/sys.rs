//! The system calls of the privilege drop behind one small seam, so that their order and
//! their failures can be tested without privileges.
//!
//! [`drop_privileges`] is the sequence: clear the bounding set (needs `CAP_SETPCAP`, so it
//! comes while still root) → `setgroups` → `setresgid` → `setresuid` → clear the inheritable,
//! ambient, effective and permitted sets → `no_new_privs` → seccomp. The first failing step
//! stops it, and its [`DropError`] names the call and its arguments in one line
//! (`setresuid(1000): EPERM: Operation not permitted`). [`Linux`] makes the real calls;
//! the tests drive the sequence with a recording double.
//!
//! It does not fork, exec, change the session or verify the result: `spawn` does, around it.

use caps::{CapSet, Capability, errors::CapsError};
use nix::errno::Errno;
use nix::unistd::{Gid, Uid};
use seccompiler::BpfProgram;
use std::fmt;
use std::io;

/// One call per method, in the words of the kernel interface each wraps.
pub trait Sys {
    /// `prctl(PR_CAPBSET_DROP, cap)`.
    fn drop_bounding(&mut self, cap: Capability) -> Result<(), CapsError>;
    /// `setgroups(groups)`: exactly these supplementary groups.
    fn setgroups(&mut self, groups: &[u32]) -> Result<(), Errno>;
    /// `setresgid(gid, gid, gid)`.
    fn setresgid(&mut self, gid: u32) -> Result<(), Errno>;
    /// `setresuid(real, effective, saved)`.
    fn setresuid(&mut self, uids: Uids) -> Result<(), Errno>;
    /// Empty one capability set (`capset`, or `prctl(PR_CAP_AMBIENT_CLEAR_ALL)` for ambient).
    fn clear_caps(&mut self, set: CapSet) -> Result<(), CapsError>;
    /// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
    fn no_new_privs(&mut self) -> Result<(), Errno>;
    /// `seccomp(SECCOMP_SET_MODE_FILTER)`, once per program.
    fn seccomp(&mut self, filters: &[BpfProgram]) -> io::Result<()>;
}

/// The three uids `setresuid` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uids {
    pub real: u32,
    pub effective: u32,
    pub saved: u32,
}

impl fmt::Display for Uids {
    /// `1000` when all three agree, else `998, 1000, 1000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.real == self.effective && self.effective == self.saved {
            write!(f, "{}", self.real)
        } else {
            write!(f, "{}, {}, {}", self.real, self.effective, self.saved)
        }
    }
}

/// What the drop makes of the calling process.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub groups: &'a [u32],
    pub gid: u32,
    pub uids: Uids,
    /// The seccomp programs to install last; `None` installs none.
    pub filters: Option<&'a [BpfProgram]>,
}

/// The step that failed, named for its call; its display is the one line the child reports.
#[derive(Debug, thiserror::Error)]
pub enum DropError {
    #[error("clearing bounding capability {cap}: {source}")]
    DropBounding { cap: Capability, source: CapsError },
    #[error("setgroups({groups:?}): {errno}")]
    Setgroups { groups: Vec<u32>, errno: Errno },
    #[error("setresgid({gid}): {errno}")]
    Setresgid { gid: u32, errno: Errno },
    #[error("setresuid({uids}): {errno}")]
    Setresuid { uids: Uids, errno: Errno },
    #[error("clearing {set:?} capabilities: {source}")]
    ClearCaps { set: CapSet, source: CapsError },
    #[error("prctl(PR_SET_NO_NEW_PRIVS): {errno}")]
    NoNewPrivs { errno: Errno },
    #[error("installing seccomp filter: {source}")]
    Seccomp { source: io::Error },
}

impl DropError {
    /// The errno to hand back to the parent: the call's own, else `EPERM`.
    pub fn raw_os_error(&self) -> i32 {
        match self {
            DropError::Setgroups { errno, .. }
            | DropError::Setresgid { errno, .. }
            | DropError::Setresuid { errno, .. }
            | DropError::NoNewPrivs { errno } => *errno as i32,
            DropError::Seccomp { source } => source.raw_os_error().unwrap_or(libc::EPERM),
            DropError::DropBounding { .. } | DropError::ClearCaps { .. } => libc::EPERM,
        }
    }
}

/// The sets emptied after the uid change, in this order.
pub const CLEARED: [CapSet; 4] = [
    CapSet::Inheritable,
    CapSet::Ambient,
    CapSet::Effective,
    CapSet::Permitted,
];

/// Drop to `target`, in the order of the module docs; stops at the first failure.
pub fn drop_privileges(sys: &mut impl Sys, target: &Target<'_>) -> Result<(), DropError> {
    for cap in caps::all() {
        sys.drop_bounding(cap)
            .map_err(|source| DropError::DropBounding { cap, source })?;
    }
    sys.setgroups(target.groups)
        .map_err(|errno| DropError::Setgroups {
            groups: target.groups.to_vec(),
            errno,
        })?;
    sys.setresgid(target.gid)
        .map_err(|errno| DropError::Setresgid {
            gid: target.gid,
            errno,
        })?;
    sys.setresuid(target.uids)
        .map_err(|errno| DropError::Setresuid {
            uids: target.uids,
            errno,
        })?;
    for set in CLEARED {
        sys.clear_caps(set)
            .map_err(|source| DropError::ClearCaps { set, source })?;
    }
    sys.no_new_privs()
        .map_err(|errno| DropError::NoNewPrivs { errno })?;
    if let Some(filters) = target.filters {
        sys.seccomp(filters)
            .map_err(|source| DropError::Seccomp { source })?;
    }
    Ok(())
}

/// The real calls (nix, caps, seccompiler). Only ever used in a child between `fork` and
/// `exec`: each call changes the calling process for good.
#[derive(Debug, Clone, Copy, Default)]
pub struct Linux;

impl Sys for Linux {
    fn drop_bounding(&mut self, cap: Capability) -> Result<(), CapsError> {
        caps::drop(None, CapSet::Bounding, cap)
    }

    fn setgroups(&mut self, groups: &[u32]) -> Result<(), Errno> {
        let groups: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
        nix::unistd::setgroups(&groups)
    }

    fn setresgid(&mut self, gid: u32) -> Result<(), Errno> {
        let gid = Gid::from_raw(gid);
        nix::unistd::setresgid(gid, gid, gid)
    }

    fn setresuid(&mut self, uids: Uids) -> Result<(), Errno> {
        nix::unistd::setresuid(
            Uid::from_raw(uids.real),
            Uid::from_raw(uids.effective),
            Uid::from_raw(uids.saved),
        )
    }

    fn clear_caps(&mut self, set: CapSet) -> Result<(), CapsError> {
        caps::clear(None, set)
    }

    fn no_new_privs(&mut self) -> Result<(), Errno> {
        nix::sys::prctl::set_no_new_privs()
    }

    fn seccomp(&mut self, filters: &[BpfProgram]) -> io::Result<()> {
        crate::seccomp::install(filters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every call by name; fails the call named `fail_at` with `EPERM`.
    #[derive(Debug, Default)]
    struct Recording {
        calls: Vec<String>,
        fail_at: Option<&'static str>,
    }

    impl Recording {
        fn failing_at(step: &'static str) -> Recording {
            Recording {
                calls: Vec::new(),
                fail_at: Some(step),
            }
        }

        /// Record `name`; whether it is the one to fail.
        fn call(&mut self, name: &'static str) -> bool {
            self.calls.push(name.to_owned());
            self.fail_at == Some(name)
        }

        /// The calls with repeats of one step (the bounding set, the cleared sets) merged.
        fn steps(&self) -> Vec<&str> {
            let mut out: Vec<&str> = self.calls.iter().map(String::as_str).collect();
            out.dedup();
            out
        }
    }

    fn errno(fail: bool) -> Result<(), Errno> {
        if fail { Err(Errno::EPERM) } else { Ok(()) }
    }

    fn caps_err(fail: bool) -> Result<(), CapsError> {
        if fail {
            Err(CapsError::from("Operation not permitted"))
        } else {
            Ok(())
        }
    }

    impl Sys for Recording {
        fn drop_bounding(&mut self, _: Capability) -> Result<(), CapsError> {
            let fail = self.call("bounding");
            caps_err(fail)
        }
        fn setgroups(&mut self, _: &[u32]) -> Result<(), Errno> {
            let fail = self.call("setgroups");
            errno(fail)
        }
        fn setresgid(&mut self, _: u32) -> Result<(), Errno> {
            let fail = self.call("setresgid");
            errno(fail)
        }
        fn setresuid(&mut self, _: Uids) -> Result<(), Errno> {
            let fail = self.call("setresuid");
            errno(fail)
        }
        fn clear_caps(&mut self, _: CapSet) -> Result<(), CapsError> {
            let fail = self.call("caps");
            caps_err(fail)
        }
        fn no_new_privs(&mut self) -> Result<(), Errno> {
            let fail = self.call("no_new_privs");
            errno(fail)
        }
        fn seccomp(&mut self, _: &[BpfProgram]) -> io::Result<()> {
            if self.call("seccomp") {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            Ok(())
        }
    }

    const ORDER: [&str; 7] = [
        "bounding",
        "setgroups",
        "setresgid",
        "setresuid",
        "caps",
        "no_new_privs",
        "seccomp",
    ];

    fn target(filters: Option<&[BpfProgram]>) -> Target<'_> {
        Target {
            groups: &[1000, 50],
            gid: 1000,
            uids: Uids {
                real: 1000,
                effective: 1000,
                saved: 1000,
            },
            filters,
        }
    }

    #[test]
    fn the_drop_runs_groups_gid_uid_caps_no_new_privs_then_seccomp() {
        let filters: Vec<BpfProgram> = vec![Vec::new()];
        let mut sys = Recording::default();
        drop_privileges(&mut sys, &target(Some(&filters))).unwrap();
        assert_eq!(sys.steps(), ORDER);
        // Every capability leaves the bounding set, and all four other sets are emptied.
        let count = |name: &str| sys.calls.iter().filter(|c| *c == name).count();
        assert_eq!(count("bounding"), caps::all().len());
        assert_eq!(count("caps"), CLEARED.len());
        // Without filters the sequence ends at no_new_privs.
        let mut sys = Recording::default();
        drop_privileges(&mut sys, &target(None)).unwrap();
        assert_eq!(sys.steps(), ORDER[..6]);
    }

    #[test]
    fn a_failing_step_stops_the_drop_with_one_line_naming_the_call() {
        let filters: Vec<BpfProgram> = vec![Vec::new()];
        let expected = [
            ("bounding", "clearing bounding capability "),
            ("setgroups", "setgroups([1000, 50]): EPERM"),
            ("setresgid", "setresgid(1000): EPERM"),
            ("setresuid", "setresuid(1000): EPERM"),
            ("caps", "clearing Inheritable capabilities: "),
            ("no_new_privs", "prctl(PR_SET_NO_NEW_PRIVS): EPERM"),
            ("seccomp", "installing seccomp filter: "),
        ];
        for (i, (step, line)) in expected.into_iter().enumerate() {
            let mut sys = Recording::failing_at(step);
            let err = drop_privileges(&mut sys, &target(Some(&filters))).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with(line), "{step}: {msg}");
            assert!(!msg.contains('\n'), "{msg}");
            // Nothing after the failed step was attempted.
            assert_eq!(sys.steps(), ORDER[..=i], "{step}");
            assert_eq!(sys.calls.last().map(String::as_str), Some(step));
        }
    }

    #[test]
    fn the_parent_gets_the_calls_own_errno() {
        let mut sys = Recording::failing_at("setresuid");
        let err = drop_privileges(&mut sys, &target(None)).unwrap_err();
        assert_eq!(err.raw_os_error(), libc::EPERM);
        let mut sys = Recording::failing_at("seccomp");
        let filters: Vec<BpfProgram> = vec![Vec::new()];
        let err = drop_privileges(&mut sys, &target(Some(&filters))).unwrap_err();
        assert_eq!(err.raw_os_error(), libc::EINVAL);
    }

    #[test]
    fn a_split_identity_names_all_three_uids() {
        let uids = Uids {
            real: 998,
            effective: 1000,
            saved: 1000,
        };
        let err = DropError::Setresuid {
            uids,
            errno: Errno::EPERM,
        };
        assert_eq!(
            err.to_string(),
            "setresuid(998, 1000, 1000): EPERM: Operation not permitted"
        );
    }
}
