//! What the kernel says about a process tree: CPU time (utime + stime) and memory.

use std::collections::HashMap;
use std::fs;

use anyhow::Context;

/// Clock ticks per second (`utime`/`stime` unit).
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects; a failure is -1, handled below.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Fields after the `(comm)` of /proc/<pid>/stat, so a comm with spaces cannot shift them.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `pid` and all its descendants (helpers some proxies fork: counted as the proxy's).
pub fn tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // After comm: state(0) ppid(1).
            if let Some(ppid) = stat_fields(p).and_then(|f| f.get(1)?.parse::<u32>().ok()) {
                children.entry(ppid).or_default().push(p);
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c);
        }
        i += 1;
    }
    out
}

/// utime + stime of the tree, in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for p in tree(pid) {
        let f = stat_fields(p).with_context(|| format!("reading /proc/{p}/stat"))?;
        // After comm: utime is field 14 of stat, index 11 here; stime index 12.
        let ut: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        total += ut + st;
    }
    Ok(total)
}

/// (VmRSS, VmHWM) summed over the tree, KiB.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let mut rss = 0;
    let mut hwm = 0;
    for p in tree(pid) {
        let Ok(s) = fs::read_to_string(format!("/proc/{p}/status")) else {
            continue;
        };
        for line in s.lines() {
            let val = || {
                line.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("VmRSS:") {
                rss += val();
            } else if line.starts_with("VmHWM:") {
                hwm += val();
            }
        }
    }
    (rss, hwm)
}

/// Open file descriptors of the tree (entries of /proc/<pid>/fd).
pub fn fds(pid: u32) -> anyhow::Result<usize> {
    let mut total = 0;
    for p in tree(pid) {
        let dir = format!("/proc/{p}/fd");
        total += fs::read_dir(&dir)
            .with_context(|| format!("listing {dir}"))?
            .count();
    }
    Ok(total)
}

/// The machine's CPU time so far from the first line of /proc/stat, in clock ticks:
/// `(steal, total)`. Steal is time the hypervisor ran something else while a vCPU of this
/// guest wanted to run: on a shared host it inflates every CPU and latency figure taken
/// meanwhile, so each cell reports its share.
pub fn steal_ticks() -> anyhow::Result<(u64, u64)> {
    let s = fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse_steal(&s).context("no cpu line with a steal field in /proc/stat")
}

fn parse_steal(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
    // already inside user and nice, so the total stops at steal.
    let steal = *v.get(7)?;
    Some((steal, v.iter().take(8).sum()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn steal_is_the_eighth_field_and_guest_time_is_not_counted_twice() {
        let stat = "cpu  100 0 50 800 10 0 5 35 20 0\ncpu0 50 0 25 400 5 0 2 17 10 0\n";
        assert_eq!(parse_steal(stat), Some((35, 1000)));
        assert_eq!(parse_steal("cpu  1 2 3\n"), None);
    }
}
