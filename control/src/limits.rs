//! The container's resource limits, and the memory the sized tmpfs mounts must leave.
//!
//! Every writable tmpfs (the agent's `/tmp` and home, `/run`, and the engine's own `/dev`
//! and `/dev/shm`) keeps its pages in the container's memory cgroup, and without swap nothing
//! can reclaim them. So each has a size, and their sizes plus [`PROCESS_RESERVE`] must fit
//! [`MEMORY`]: filling them ends in `ENOSPC`, never in a wedged container.

/// `--memory`, as written.
pub const MEMORY: &str = "4g";
/// `--pids-limit`.
pub const PIDS_LIMIT: i64 = 512;
/// `--cpus`.
pub const CPUS: u32 = 2;
/// Memory the processes need beside the full tmpfs mounts: PID 1, the proxy, the git API
/// and the agent's own tools. A floor, not an estimate of an agent's needs.
pub const PROCESS_RESERVE: u64 = 1 << 30;
/// The size the engine gives each of its own tmpfs mounts, `/dev` and `/dev/shm`
/// (`--shm-size` for the latter).
pub const ENGINE_TMPFS: u64 = 64 << 20;
/// `--shm-size`, as written: the flag the preflight names for an unsized `/dev/shm`.
pub const SHM_SIZE: &str = "64m";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tmpfs::{TMPFS, parse_size};

    #[test]
    fn the_writable_tmpfs_sizes_and_the_reserve_fit_the_memory_limit() {
        let tmpfs: u64 = TMPFS
            .iter()
            .filter(|t| t.writable())
            .map(|t| t.size_bytes().unwrap_or(u64::MAX))
            .sum();
        assert_eq!(parse_size(SHM_SIZE), Some(ENGINE_TMPFS));
        let memory = parse_size(MEMORY).unwrap_or(0);
        assert!(tmpfs + 2 * ENGINE_TMPFS + PROCESS_RESERVE <= memory);
    }
}
