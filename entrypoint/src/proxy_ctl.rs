//! Starting the proxy as its own user and waiting until it answers.

use crate::spawn::RunAs;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// How long the proxy gets to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// glibc tuning for the proxy's process (x86-64 glibc only; other targets get nothing).
///
/// glibc's `memcpy`/`memmove` switch to `rep movsb` from about 2 KiB on CPUs that advertise
/// fast short `rep movsb` (FSRM). AMD Zen 3 and 4 advertise it, but there the instruction
/// collapses when the destination sits 1 to 31 bytes past the source modulo 4 KiB: a 16 KiB
/// copy then moves 3 GB/s instead of 65-95 GB/s (measured on the dev machine, an EPYC).
/// malloc makes that the common case in the proxy's data path: rustls, tokio-rustls and
/// hyper copy every intercepted byte between 16 KiB buffers allocated one after the other,
/// 16 KiB plus malloc's 16-byte header apart. There the copies took 40% of the proxy's CPU
/// for intercepted downloads; with `rep movsb` out of reach (a threshold no copy reaches)
/// glibc uses its vector loop for every size, copies fell to 7%, and the proxy's CPU per
/// intercepted MiB from 1.26 to 0.93 ms. Where `rep movsb` is fast the vector loop is at
/// most marginally slower. The benchmarks start the proxy with this same value
/// (`bench/proxy-tunables`).
pub const PROXY_GLIBC_TUNABLES: &str = "glibc.cpu.x86_rep_movsb_threshold=0x1000000000";

/// Everything needed to (re)start the proxy.
#[derive(Debug, Clone)]
pub struct ProxySpec {
    pub bin: PathBuf,
    pub policy: PathBuf,
    pub audit_file: PathBuf,
    pub session: String,
    /// The proxy's private state directory (hand-off, CA).
    pub state_dir: PathBuf,
    /// Where the proxy exports its CA certificate.
    pub ca_export: PathBuf,
    /// Extra upstream roots (copies inside the state directory).
    pub upstream_ca: Vec<PathBuf>,
    /// The audit log's cap in bytes (`None`: the proxy's default).
    pub audit_cap: Option<u64>,
    /// The container's id, for every audit line ([`container_id`]).
    pub container: Option<String>,
    /// The proxy's log filter (`AIRLOCK_PROXY_LOG`; see [`crate::console::Route`]).
    pub log_filter: Option<String>,
    /// The admin API's socket, inherited by every start of the proxy.
    pub admin: Option<crate::admin_socket::AdminSocket>,
    /// Where PID 1 copies its readiness record for the admin API's status.
    pub status_dir: Option<PathBuf>,
    /// The agent's uid (the admin API's sessions).
    pub agent_uid: Option<u32>,
    pub run_as: RunAs,
}

impl ProxySpec {
    fn env(log_filter: Option<&str>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_owned(), "/usr/bin:/bin".to_owned());
        if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
            env.insert("GLIBC_TUNABLES".to_owned(), PROXY_GLIBC_TUNABLES.to_owned());
        }
        // The operator's log filter (or the quiet one on a terminal), under the name the
        // proxy reads.
        if let Some(filter) = log_filter {
            env.insert("AIRLOCK_PROXY_LOG".to_owned(), filter.to_owned());
        }
        env
    }

    /// Spawn the proxy and wait until its health check answers.
    pub fn start(&self) -> Result<Child> {
        let mut child = self.spawn()?;
        wait_ready(&mut child)?;
        Ok(child)
    }

    /// Spawn the proxy without waiting: the first start waits with [`wait_ready`] after it
    /// has done other work (the firewall) meanwhile.
    pub fn spawn(&self) -> Result<Child> {
        let env = Self::env(self.log_filter.as_deref());
        let mut cmd = self.run_as.command(&self.bin, &env, Path::new("/"));
        cmd.arg("--policy")
            .arg(&self.policy)
            .arg("--audit")
            .arg(&self.audit_file)
            .arg("--session")
            .arg(&self.session)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--ca-export")
            .arg(&self.ca_export)
            .stdin(Stdio::null());
        // On a terminal, the proxy's lines go to airlock's log, not the agent's screen.
        if let Some(log) = crate::console::child_stream()? {
            cmd.stdout(log.try_clone().context("cannot duplicate airlock's log")?)
                .stderr(log);
        }
        for ca in &self.upstream_ca {
            cmd.arg("--upstream-ca").arg(ca);
        }
        if let Some(cap) = self.audit_cap {
            cmd.arg("--audit-cap").arg(cap.to_string());
        }
        if let Some(id) = &self.container {
            cmd.arg("--container").arg(id);
        }
        if let Some(dir) = &self.status_dir {
            cmd.arg("--status-dir").arg(dir);
        }
        if let Some(uid) = self.agent_uid {
            cmd.arg("--agent-uid").arg(uid.to_string());
        }
        if let Some(admin) = &self.admin {
            let fd = admin.fd();
            cmd.arg("--admin-fd").arg(fd.to_string());
            if let Some(uid) = admin.operator_uid {
                cmd.arg("--admin-operator-uid").arg(uid.to_string());
            }
            // SAFETY: runs in the child between fork and exec, after the privilege drop; it
            // makes one async-signal-safe system call on a descriptor the child inherited.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    crate::git::keep_across_exec(fd)
                });
            }
        }
        cmd.spawn().with_context(|| {
            format!(
                "cannot start the proxy {} as user {}",
                self.bin.display(),
                self.run_as.identity.name
            )
        })
    }
}

/// Wait until the spawned proxy's health check answers; kill it when it does not in time.
pub fn wait_ready(child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the proxy")? {
            match crate::console::last_line() {
                Some(line) => bail!("the proxy exited during start-up ({status}): {line}"),
                None => bail!(
                    "the proxy exited during start-up ({status}); its reason is printed above"
                ),
            }
        }
        if health_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the proxy did not answer on {} within {}s; check that nothing else uses that port",
                airlock_channels::explicit_addr(),
                READY_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One health request to the explicit proxy.
pub fn health_ok() -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &airlock_channels::explicit_addr(),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: airlock\r\nConnection: close\r\n\r\n",
        airlock_channels::HEALTH_PATH
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    buf[..got].starts_with(b"HTTP/1.1 200")
}

/// The id of the container this process runs in ([`container_id`] of its own mountinfo).
#[must_use]
pub fn own_container() -> Option<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| container_id(&m))
}

/// The id of the container we run in, from the engine's bind mount of its per-container
/// files (`/var/lib/docker/containers/<id>/hostname` on Docker, `.../containers/<id>/userdata/`
/// on Podman) in `mountinfo`; `None` outside a container engine.
#[must_use]
pub fn container_id(mountinfo: &str) -> Option<String> {
    let is_id = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    mountinfo.lines().find_map(|line| {
        let root = line.split(' ').nth(3)?;
        let segments: Vec<&str> = root.split('/').collect();
        segments
            .windows(2)
            .find(|w| w[0].ends_with("containers") && is_id(w[1]))
            .map(|w| w[1].to_owned())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_container_id_is_read_from_the_engines_bind_mounts() {
        let docker = "1102 1100 8:1 /var/lib/docker/containers/4f2e0c8d2a1b6e7f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f/hostname /etc/hostname rw,relatime - ext4 /dev/sda1 rw\n";
        assert_eq!(
            container_id(docker).as_deref(),
            Some("4f2e0c8d2a1b6e7f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f")
        );
        let podman = "99 98 0:50 /containers/storage/overlay-containers/aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44/userdata/hostname /etc/hostname rw - tmpfs tmpfs rw\n";
        assert!(container_id(podman).is_some());
        let plain = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n";
        assert_eq!(container_id(plain), None);
        let short =
            "1 1 8:1 /var/lib/docker/containers/abc/hostname /etc/hostname rw - ext4 x rw\n";
        assert_eq!(container_id(short), None);
    }

    use super::*;

    /// The tuning reaches the proxy, and this glibc (the image's base is the same Debian
    /// release as the build machine's) parses it into the threshold we mean: a misspelt
    /// tunable is silently ignored by glibc, so only its own report proves it took.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    fn the_proxy_runs_with_rep_movsb_out_of_reach() {
        let env = ProxySpec::env(None);
        assert!(!env.contains_key("AIRLOCK_PROXY_LOG"));
        assert_eq!(
            ProxySpec::env(Some("warn"))
                .get("AIRLOCK_PROXY_LOG")
                .map(String::as_str),
            Some("warn")
        );
        assert_eq!(
            env.get("GLIBC_TUNABLES").map(String::as_str),
            Some(PROXY_GLIBC_TUNABLES)
        );
        let out = std::process::Command::new("/lib64/ld-linux-x86-64.so.2")
            .arg("--list-tunables")
            .env_clear()
            .env("GLIBC_TUNABLES", PROXY_GLIBC_TUNABLES)
            .output()
            .expect("running the dynamic loader's --list-tunables");
        assert!(
            out.status.success(),
            "ld.so --list-tunables failed: {out:?}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let (name, value) = PROXY_GLIBC_TUNABLES.split_once('=').unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} not among glibc's tunables:\n{text}"));
        let shown = line[name.len() + 1..]
            .split_whitespace()
            .next()
            .unwrap_or_default();
        assert_eq!(shown, value, "glibc did not take the value: {line}");
    }
}
