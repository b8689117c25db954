//! The agent's seccomp filter: a deny list on top of Docker's default profile.
//!
//! Docker's default profile (seen on this machine) still allows `io_uring_setup` and
//! `AF_VSOCK` sockets; we also close the kernel attack surface an unprivileged agent never
//! needs (`bpf`, `userfaultfd`, the keyring, `perf_event_open`), new user namespaces (the
//! door to privileged-looking operations inside a fresh namespace), `ptrace` and
//! cross-process memory access, every mount-API call, and changing another process's
//! priority or scheduling policy (`SCHEDULING`). Denied calls fail with `EPERM`
//! (the program sees an ordinary error, not a kill); `clone3` fails with `ENOSYS` because its
//! flags live in memory a filter cannot inspect, and libc then falls back to `clone`, whose
//! flags we can check.
//!
//! In front of every rule stands the x32 guard: on x86_64 the kernel also accepts the x32
//! ABI's system calls, numbered `nr | 0x40000000` (`__X32_SYSCALL_BIT`) under the same
//! `AUDIT_ARCH_X86_64`, so the architecture check lets them in and no rule (they name the
//! x86_64 numbers) matches them. On a host kernel built with `CONFIG_X86_X32_ABI` (Docker's
//! default profile admits the x32 architecture) `io_uring_setup`, `ptrace`, `unshare` and
//! AF_VSOCK `socket` would run unjudged. The guard refuses every number at or above the bit
//! with `EPERM` before anything else is read.

use anyhow::{Context, Result};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
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

/// `__X32_SYSCALL_BIT` (`arch/x86/include/uapi/asm/unistd.h`): x32 system calls are the
/// x86_64 numbers with this bit set. No native system call on any architecture comes near it.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The guard prepended to the deny list: load the system call number (offset 0 of
/// `seccomp_data`); if it is `>= X32_SYSCALL_BIT` return `EPERM`, otherwise fall through to
/// the compiled rules. Classic BPF jumps are relative and forward only, so the compiled
/// program after it is unchanged.
fn x32_guard() -> [sock_filter; 3] {
    [
        sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA),
        },
    ]
}

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

/// The two programs to install, in order: the x32 guard and the `EPERM` deny list, and the
/// `ENOSYS` for `clone3`.
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
    for (nr, arg) in SCHEDULING {
        eperm.insert(*nr, vec![not_self(*arg)?]);
    }
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

    let compiled: BpfProgram = deny
        .try_into()
        .context("compiling the agent's seccomp filter")?;
    let mut guarded: BpfProgram = x32_guard().to_vec();
    guarded.extend(compiled);
    // The kernel's `BPF_MAXINSNS`: a longer program is refused at install time.
    if guarded.len() > 4096 {
        anyhow::bail!(
            "the agent's seccomp filter is too long ({} instructions)",
            guarded.len()
        );
    }
    Ok(vec![
        guarded,
        clone3.try_into().context("compiling the clone3 filter")?,
    ])
}

/// Calls that change how another process is scheduled, with the argument naming it. The
/// kernel lets them through when the caller's effective uid is the target's real *or
/// effective* uid, and the git API's effective uid is the agent's (it writes the workspace as
/// its owner): only the filter keeps the agent from starving it (`renice 19`, `SCHED_IDLE`).
/// The agent may still change itself (`0`: `nice`, `os.nice`, `chrt`/`renice` of a command it
/// starts) but no other process, its own included. `sched_setaffinity` stays open: pinning
/// moves a process, it does not starve it. Signals, `prlimit` and `ioprio_set` are refused
/// by the kernel already (they compare real or saved uids, `airlock-git` in the git API).
const SCHEDULING: &[(i64, u8)] = &[
    // setpriority(which, who, prio): PRIO_PROCESS, PRIO_PGRP and PRIO_USER alike name the
    // caller (its process, group, user) with who = 0.
    (libc::SYS_setpriority, 1),
    (libc::SYS_sched_setscheduler, 0),
    (libc::SYS_sched_setparam, 0),
    (libc::SYS_sched_setattr, 0),
];

/// A rule matching a call whose argument `arg` (a pid, a pgid or a uid) is not 0.
fn not_self(arg: u8) -> Result<SeccompRule> {
    let cond = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)
        .context("building a seccomp condition")?;
    SeccompRule::new(vec![cond]).context("building a seccomp rule")
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

    /// Run `nr(args)` under the agent's filters in a forked child: `Err(errno)` on failure.
    fn call_under(filters: &[BpfProgram], nr: i64, args: [u64; 3]) -> Result<(), i32> {
        // SAFETY: as in `syscall_under`: the child only installs the filters, makes one raw
        // system call with integer arguments and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
        if pid == 0 {
            if install(filters).is_err() {
                // SAFETY: `_exit` is async-signal-safe and never returns.
                unsafe { libc::_exit(250) };
            }
            // SAFETY: setpriority and the sched_* calls probed here take integers only, or a
            // null pointer the kernel rejects with EINVAL/EFAULT after the filter has run.
            let rc = unsafe { libc::syscall(nr, args[0], args[1], args[2]) };
            let code = if rc == -1 {
                // SAFETY: `__errno_location` returns this thread's errno slot.
                unsafe { *libc::__errno_location() }
            } else {
                0
            };
            // SAFETY: as above.
            unsafe { libc::_exit(code.clamp(0, 249)) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child this test forked; `status` is a valid out-pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
        assert!(libc::WIFEXITED(status), "child died: {status:#x}");
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            250 => panic!("the child could not install the filters"),
            errno => Err(errno),
        }
    }

    #[test]
    fn the_agent_may_renice_itself_but_no_other_process() {
        let filters = agent_filters().unwrap();
        let parent = u64::from(std::process::id());
        let prio = libc::SYS_setpriority;
        let (process, pgrp, user) = (
            libc::PRIO_PROCESS as u64,
            libc::PRIO_PGRP as u64,
            libc::PRIO_USER as u64,
        );
        // Itself: nice(1) is setpriority(PRIO_PROCESS, 0, n); raising its own nice is allowed.
        assert_eq!(call_under(&filters, prio, [process, 0, 5]), Ok(()));
        // Another process (here its parent, same uid), a group, a user: refused by the filter.
        for (which, who) in [(process, parent), (pgrp, parent), (user, 1)] {
            assert_eq!(
                call_under(&filters, prio, [which, who, 19]),
                Err(libc::EPERM),
                "setpriority({which}, {who})"
            );
        }
        for nr in [
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_setparam,
            libc::SYS_sched_setattr,
        ] {
            assert_eq!(
                call_under(&filters, nr, [parent, 0, 0]),
                Err(libc::EPERM),
                "{nr}"
            );
            // On itself the filter lets it through to the kernel (which judges the null
            // argument: EINVAL or EFAULT, never the filter's EPERM).
            assert_ne!(
                call_under(&filters, nr, [0, 0, 0]),
                Err(libc::EPERM),
                "{nr}"
            );
        }
    }

    /// `__X32_SYSCALL_BIT`: x32 system calls are the x86_64 numbers with this bit set.
    const X32_BIT: i64 = 0x4000_0000;

    /// Install `filters` in a forked child, make the raw system call `nr` there and report
    /// how it ended: `Ok(())` when it returned, `Err(errno)` when it failed. The kernel runs
    /// the compiled program itself: seccomp sees the raw number before the dispatcher looks
    /// at it, so an x32 number reaches the filter whether or not the kernel has the x32 ABI.
    fn syscall_under(filters: &[BpfProgram], nr: i64) -> Result<(), i32> {
        // SAFETY: the child only makes async-signal-safe calls (prctl, seccomp and the probed
        // system call through `syscall(2)`, then `_exit`); it touches no lock or allocator
        // another test thread might hold.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
        if pid == 0 {
            if install(filters).is_err() {
                // SAFETY: `_exit` is async-signal-safe and never returns.
                unsafe { libc::_exit(250) };
            }
            // SAFETY: a raw system call with zero arguments; the probed numbers (getpid and
            // unknown or refused ones) read no memory.
            let rc = unsafe { libc::syscall(nr, 0, 0, 0, 0, 0, 0) };
            let code = if rc == -1 {
                // SAFETY: `__errno_location` returns this thread's errno slot.
                unsafe { *libc::__errno_location() }
            } else {
                0
            };
            // SAFETY: as above.
            unsafe { libc::_exit(code.clamp(0, 249)) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child this test forked; `status` is a valid out-pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
        assert!(
            libc::WIFEXITED(status),
            "child did not exit normally: {status:#x}"
        );
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            250 => panic!("the child could not install the filters"),
            errno => Err(errno),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn an_x32_system_call_is_refused_before_every_other_rule() {
        let filters = agent_filters().unwrap();
        // The filters let an ordinary call through ...
        assert_eq!(syscall_under(&filters, libc::SYS_getpid), Ok(()));
        // ... the rules behind the guard still run ...
        assert_eq!(
            syscall_under(&filters, libc::SYS_io_uring_setup),
            Err(libc::EPERM)
        );
        assert_eq!(syscall_under(&filters, libc::SYS_clone3), Err(libc::ENOSYS));
        // ... and refuse the x32 spellings of what the deny list covers and of what it
        // allows: with x32 enabled in the host kernel these would run, no rule matching them.
        for nr in [
            libc::SYS_io_uring_setup,
            libc::SYS_ptrace,
            libc::SYS_unshare,
            libc::SYS_socket,
            libc::SYS_getpid,
        ] {
            assert_eq!(
                syscall_under(&filters, X32_BIT | nr),
                Err(libc::EPERM),
                "x32 syscall {nr} must be refused with EPERM"
            );
        }
        // Any number at or above the bit, not only valid x32 ones.
        assert_eq!(syscall_under(&filters, X32_BIT), Err(libc::EPERM));
        assert_eq!(syscall_under(&filters, 0x7fff_ffff), Err(libc::EPERM));
    }
}
