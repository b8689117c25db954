//! The agent's seccomp filter: a deny list on top of Docker's default profile.
//!
//! Docker's default profile (seen on this machine) still allows `io_uring_setup` and
//! `AF_VSOCK` sockets; we also close the kernel attack surface an unprivileged agent never
//! needs (`bpf`, `userfaultfd`, the keyring, `perf_event_open`), new user namespaces (the
//! door to privileged-looking operations inside a fresh namespace), `ptrace` and
//! cross-process memory access, and every mount-API call. Denied calls fail with `EPERM`
//! (the program sees an ordinary error, not a kill); `clone3` fails with `ENOSYS` because its
//! flags live in memory a filter cannot inspect, and libc then falls back to `clone`, whose
//! flags we can check.

use anyhow::{Context, Result};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// `socket(2)` address family of virtio vsock (not exported by every libc version).
const AF_VSOCK: u64 = 40;

/// Syscalls denied outright, with why.
const DENIED: &[(i64, &str)] = &[
    (
        libc::SYS_io_uring_setup,
        "io_uring bypasses seccomp argument checks and has a long CVE tail",
    ),
    (libc::SYS_io_uring_enter, "io_uring"),
    (libc::SYS_io_uring_register, "io_uring"),
    (libc::SYS_bpf, "eBPF programs"),
    (
        libc::SYS_userfaultfd,
        "race-widening primitive for kernel exploits",
    ),
    (libc::SYS_keyctl, "kernel keyring"),
    (libc::SYS_add_key, "kernel keyring"),
    (libc::SYS_request_key, "kernel keyring"),
    (libc::SYS_ptrace, "tracing other processes"),
    (
        libc::SYS_process_vm_readv,
        "reading another process's memory",
    ),
    (
        libc::SYS_process_vm_writev,
        "writing another process's memory",
    ),
    (libc::SYS_perf_event_open, "perf events"),
    (libc::SYS_kexec_load, "kernel replacement"),
    (libc::SYS_kexec_file_load, "kernel replacement"),
    (libc::SYS_init_module, "kernel modules"),
    (libc::SYS_finit_module, "kernel modules"),
    (libc::SYS_delete_module, "kernel modules"),
    (libc::SYS_mount, "mounts"),
    (libc::SYS_umount2, "mounts"),
    (libc::SYS_pivot_root, "mounts"),
    (libc::SYS_fsopen, "mount API"),
    (libc::SYS_fsconfig, "mount API"),
    (libc::SYS_fsmount, "mount API"),
    (libc::SYS_fspick, "mount API"),
    (libc::SYS_move_mount, "mount API"),
    (libc::SYS_open_tree, "mount API"),
    (libc::SYS_mount_setattr, "mount API"),
    (libc::SYS_setns, "joining other namespaces"),
    (
        libc::SYS_open_by_handle_at,
        "file handles bypass path checks",
    ),
    (libc::SYS_name_to_handle_at, "file handles"),
    (libc::SYS_swapon, "swap"),
    (libc::SYS_swapoff, "swap"),
    (libc::SYS_reboot, "reboot"),
    (libc::SYS_acct, "process accounting"),
    (libc::SYS_quotactl, "quotas"),
];

fn masked(arg: u8, mask: u64) -> Result<SeccompRule> {
    let cond = SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        mask,
    )
    .context("building a seccomp condition")?;
    SeccompRule::new(vec![cond]).context("building a seccomp rule")
}

fn arch() -> Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH).with_context(|| {
        format!(
            "no seccomp support for architecture {}",
            std::env::consts::ARCH
        )
    })
}

/// The two programs to install, in order: the `EPERM` deny list and the `ENOSYS` for `clone3`.
pub fn agent_filters() -> Result<Vec<BpfProgram>> {
    let arch = arch()?;
    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _why) in DENIED {
        eperm.insert(*nr, vec![]);
    }
    let newuser = libc::CLONE_NEWUSER as u64;
    eperm.insert(libc::SYS_unshare, vec![masked(0, newuser)?]);
    eperm.insert(libc::SYS_clone, vec![masked(clone_flags_arg(), newuser)?]);
    let vsock = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, AF_VSOCK)
        .context("building the AF_VSOCK condition")?;
    eperm.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![vsock]).context("building the AF_VSOCK rule")?],
    );
    let deny = SeccompFilter::new(
        eperm,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .context("building the agent's seccomp filter")?;

    let mut enosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    enosys.insert(libc::SYS_clone3, vec![]);
    let clone3 = SeccompFilter::new(
        enosys,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .context("building the clone3 filter")?;

    Ok(vec![
        deny.try_into()
            .context("compiling the agent's seccomp filter")?,
        clone3.try_into().context("compiling the clone3 filter")?,
    ])
}

/// `clone(2)`'s flags argument: the first on x86_64 and aarch64 alike.
const fn clone_flags_arg() -> u8 {
    0
}

/// Install the filters on the calling thread (the child, after `fork`, before `exec`).
/// `no_new_privs` must already be set (it is: the drop sets it first).
pub fn install(filters: &[BpfProgram]) -> std::io::Result<()> {
    for prog in filters {
        seccompiler::apply_filter(prog).map_err(std::io::Error::other)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_architecture() {
        let progs = agent_filters().unwrap();
        assert_eq!(progs.len(), 2);
        assert!(progs.iter().all(|p| !p.is_empty()));
    }

    #[test]
    fn the_deny_list_covers_what_docker_leaves_open() {
        let nrs: Vec<i64> = DENIED.iter().map(|(n, _)| *n).collect();
        for nr in [
            libc::SYS_io_uring_setup,
            libc::SYS_bpf,
            libc::SYS_userfaultfd,
            libc::SYS_keyctl,
            libc::SYS_ptrace,
        ] {
            assert!(nrs.contains(&nr), "syscall {nr} must be denied");
        }
    }
}
