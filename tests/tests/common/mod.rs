//! Shared helpers for the namespace tests: run the real entrypoint in a World, read its
//! audit log, and check a capture against the proxy's own upstream connections.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(dead_code)]

use airlock_tests::{Capture, Packet, Proto, World};
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Exit status of a refused start.
pub const EXIT_REFUSED: i32 = airlock_channels::EXIT_REFUSED as i32;

/// The policy most tests run under: the fake internet's hosts are `passthrough`, so
/// tunnels and transparent TLS reach the fake upstream untouched (the agent's curl trusts
/// the fake CA, `curl`). Interception and read-only hosts: [`POLICY_INSPECTED`].
pub const POLICY: &str = r#"
[sandbox]
name = "nstest"

[network]
allow = ["allowed.test", "v6.test", "rebind.test", "meta.test", "203.0.113.12"]
deny = []
passthrough = ["allowed.test", "v6.test"]
"#;

/// [`POLICY`] with every host intercepted (the default), `allowed.test` and `other.test`
/// writable: for credentials and L7 tests.
pub const POLICY_INSPECTED: &str = r#"
[sandbox]
name = "nstest"

[network]
allow = ["allowed.test", "v6.test", "rebind.test", "meta.test", "203.0.113.12"]
deny = []
writable = ["allowed.test", "other.test"]
"#;

/// A binary built by `cargo build --workspace` next to this test executable.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build --workspace` first (scripts/test does)",
        path.display()
    );
    path
}

/// Paths of one airlock start inside a World.
pub struct Airlock {
    pub policy: PathBuf,
    pub audit_dir: PathBuf,
    pub run_dir: PathBuf,
    pub workdir: PathBuf,
}

impl Airlock {
    pub fn new(world: &World, policy: &str) -> Airlock {
        let dir = world.dir().join("airlock");
        std::fs::create_dir_all(&dir).unwrap();
        let policy_path = dir.join("policy.toml");
        std::fs::write(&policy_path, policy).unwrap();
        std::fs::set_permissions(&policy_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let workdir = dir.join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        std::os::unix::fs::chown(
            &workdir,
            Some(world.users().agent),
            Some(world.users().agent),
        )
        .unwrap();
        Airlock {
            policy: policy_path,
            audit_dir: dir.join("audit"),
            run_dir: dir.join("run"),
            workdir,
        }
    }

    /// The entrypoint command (not yet started) with `agent` as the agent command.
    pub fn command(&self, world: &World, agent: &[&str]) -> std::process::Command {
        let mut cmd = world.sandbox_command(&bin("airlock-entrypoint"));
        cmd.arg("--policy")
            .arg(&self.policy)
            .arg("--audit-dir")
            .arg(&self.audit_dir)
            .arg("--run-dir")
            .arg(&self.run_dir)
            .arg("--workdir")
            .arg(&self.workdir)
            // Test configuration: the proxy (never the agent) trusts the fake internet's CA
            // for upstream TLS, as an operator would pass a corporate root.
            .arg("--upstream-ca")
            .arg(world.ca_pem_path())
            .arg("--")
            .args(agent);
        // Debugging a test: the proxy's log filter, as an operator would set it.
        if let Ok(filter) = std::env::var("AIRLOCK_LOG") {
            cmd.env("AIRLOCK_LOG", filter);
        }
        cmd
    }

    /// Start airlock, run `script` with `sh -c` as the agent, return what happened.
    pub fn run(&self, world: &World, script: &str) -> Output {
        self.command(world, &["sh", "-c", script])
            .output()
            .expect("spawn the entrypoint")
    }

    /// Start airlock in the background with `script` as the agent, both streams captured.
    pub fn spawn(&self, world: &World, script: &str) -> std::process::Child {
        self.command(world, &["sh", "-c", script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the entrypoint")
    }

    /// Wait (up to 20 s) until the agent has created `name` in its working directory.
    pub fn wait_for_agent_file(&self, name: &str) {
        let path = self.workdir.join(name);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !path.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the agent never created {}",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The proxy's audit log, one JSON value per line.
    /// The audit log's final lines (one per decision). The `open` lines written before
    /// anything went upstream are checked, not returned: every final line of a request
    /// that reached an upstream must come after its `open` line.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        let all = self.audit_all();
        let mut open = std::collections::HashMap::<String, usize>::new();
        let key = |l: &serde_json::Value| {
            ["ts", "client", "kind", "method", "host", "port", "path"]
                .iter()
                .map(|k| l[*k].to_string())
                .collect::<Vec<_>>()
                .join("|")
        };
        for l in &all {
            if l["event"] == "open" {
                *open.entry(key(l)).or_default() += 1;
            } else if !l["upstream"].is_null() || !l["status"].is_null() {
                let n = open.get_mut(&key(l));
                assert!(
                    n.as_ref().is_some_and(|n| **n > 0) || l["decision"] == "deny",
                    "a request reached an upstream with no open line before it: {l}"
                );
                if let Some(n) = n {
                    *n = n.saturating_sub(1);
                }
            }
        }
        all.into_iter().filter(|l| l["event"] != "open").collect()
    }

    /// Every line of the audit log, `open` lines included.
    pub fn audit_all(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.audit_dir.join("audit.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| {
                // Every line is also read typed, refusal codes included: what the real
                // proxy writes is what the schema promises readers.
                if let Err(e) =
                    serde_json::from_str::<airlock_audit_schema::Line<airlock_policy::Reason>>(l)
                {
                    panic!("audit line off the schema: {e}: {l}");
                }
                serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line {l:?}: {e}"))
            })
            .collect()
    }
}

/// Pids of the processes in the sandbox's network namespace whose `comm` satisfies `pick`.
pub fn sandbox_pids(world: &World, pick: impl Fn(&str) -> bool) -> Vec<u32> {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", world.sandbox_ns()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|pid| pid.trim().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| pick(c.trim()))
        })
        .collect()
}

/// Send `sig` (e.g. `-TERM`) to `pid` as root on the host.
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Panic with both streams unless the run succeeded.
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "airlock run failed: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// `curl` as the agent, printing `<code>` then headers; `--cacert` trusts the fake internet's CA.
pub fn curl(world: &World, args: &str) -> String {
    format!(
        "curl -sS --max-time 10 --cacert {} {args}",
        world.ca_pem_path().display()
    )
}

/// A script line that runs curl as the agent and prints `NAME=<http code>`: `000` when the
/// connection failed, otherwise the status it got.
pub fn probe(world: &World, name: &str, args: &str) -> String {
    format!(
        "echo {name}=$({})",
        curl(
            world,
            &format!("-o /dev/null -w '%{{http_code}}' {args} 2>/dev/null")
        )
    )
}

/// A direct attempt is stopped when the kernel refused it (`000`) or airlock's transparent
/// listener denied it (`403`); whatever else the callers check that nothing reached upstream.
pub fn assert_stopped(text: &str, name: &str) {
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or("<missing>");
    assert!(
        matches!(value, "000" | "403"),
        "{name} was not stopped (got {value:?}):\n{text}"
    );
}

/// Build a fresh World; a test that cannot set up its environment fails, it never skips.
pub fn world() -> World {
    World::new().expect("build the namespace world (run as root; scripts/test installs the tools)")
}

/// The agent ran the step that printed `NAME=<exit status>` and it failed: not 0 (it
/// worked) and not 127 (the tool was missing, so nothing was attempted).
pub fn assert_attempt_failed(text: &str, name: &str) {
    let status = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .map(str::trim);
    match status {
        None => panic!("{name} did not run:\n{text}"),
        Some("0") => panic!("{name} succeeded:\n{text}"),
        Some("127") => panic!("{name}: tool missing, nothing was attempted:\n{text}"),
        Some(_) => {}
    }
}

/// Kernel housekeeping that any interface sends on its own (not a process's traffic).
fn is_kernel_housekeeping(p: &Packet) -> bool {
    matches!(p.proto, Proto::Icmpv6) && matches!(p.icmpv6_type, Some(133..=136 | 143))
}

/// Every packet that left the sandbox belongs to an upstream connection the proxy made (its
/// source port is in the audit log) or is a DNS query for a name the policy allows (the
/// proxy's own resolution). Returns the number of proxy packets seen, so callers can assert
/// that the capture saw anything at all.
pub fn assert_only_proxy_traffic(
    world: &World,
    capture: &Capture,
    audit: &[serde_json::Value],
    allowed_names: &[&str],
) -> usize {
    let proxy_ports: HashSet<u16> = audit
        .iter()
        .filter_map(|l| l.get("upstream_local_port")?.as_u64())
        .map(|p| p as u16)
        .collect();
    let mut proxy_packets = 0;
    for p in capture.from_sandbox(world) {
        if is_kernel_housekeeping(p) {
            continue;
        }
        match p.proto {
            Proto::Tcp => {
                let port = p.src_port.expect("tcp source port");
                assert!(
                    proxy_ports.contains(&port),
                    "a TCP packet left the sandbox that is not from a proxy connection: {p:?}\nproxy ports: {proxy_ports:?}"
                );
                proxy_packets += 1;
            }
            Proto::Udp if p.dst_port == Some(53) => {}
            _ => panic!("a packet left the sandbox that no proxy connection explains: {p:?}"),
        }
    }
    for (src, qname, qtype) in capture.dns_queries() {
        if src != std::net::IpAddr::V4(world.sandbox_ip_v4())
            && src != std::net::IpAddr::V6(world.sandbox_ip_v6())
        {
            continue;
        }
        let name = qname.trim_end_matches('.').to_ascii_lowercase();
        assert!(
            allowed_names.contains(&name.as_str()),
            "a DNS query for {name} ({qtype}) left the sandbox"
        );
    }
    proxy_packets
}
