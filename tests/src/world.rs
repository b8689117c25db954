//! [`World`]: one fake internet plus one sandbox namespace, and everything that runs in it.

use std::fs::{self, File};
use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::ca;
use crate::capture::Capture;
use crate::netns::{self, NETNS_ETC_DIR};
use crate::tools::{Tools, workspace_binary};
use crate::topology::{self, SANDBOX_V4, SANDBOX_V6, WorldId};
use crate::users::{self, Users};

/// Worlds created by this process so far (the second half of a [`WorldId`]).
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Where World directories go (world-traversable, as the sandbox's users need their homes).
const TMP: &str = "/tmp";
/// How long fakenet and tcpdump get to say they are ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight frames get to reach tcpdump before it is stopped.
const CAPTURE_SETTLE: Duration = Duration::from_millis(50);

/// A fake internet and a sandbox namespace attached to it. See the crate docs.
#[derive(Debug)]
pub struct World {
    id: WorldId,
    upstream_ns: String,
    sandbox_ns: String,
    dir: PathBuf,
    ca_pem: PathBuf,
    log: PathBuf,
    users: Users,
    tools: Tools,
    fakenet: Option<Child>,
    capture: Option<Tcpdump>,
    captures: u32,
}

/// A running tcpdump.
#[derive(Debug)]
struct Tcpdump {
    child: Child,
    file: PathBuf,
    /// tcpdump's stderr lines (in a Mutex only so that World is Sync).
    stderr: Mutex<mpsc::Receiver<String>>,
    seen: Vec<String>,
}

impl World {
    /// Builds a fresh fake internet and sandbox namespace (see the crate docs). Namespaces and
    /// directories left by dead test processes are removed first. Fails if not root, if a tool
    /// is missing, or if fakenet does not come up.
    pub fn new() -> anyhow::Result<World> {
        if !nix::unistd::geteuid().is_root() {
            bail!(
                "the namespace harness must run as root (it creates network namespaces and \
                   veth pairs); run the tests with sudo or in a root container"
            );
        }
        let tools = Tools::find()?;
        let fakenet_bin = workspace_binary("airlock-fakenet")?;
        let id = WorldId {
            pid: std::process::id(),
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
        };
        netns::remove_stale(&tools, id, Path::new(TMP))?;

        let dir = Path::new(TMP).join(id.dir_name());
        // From here on, Drop undoes whatever part of the set-up happened.
        let mut world = World {
            id,
            upstream_ns: id.upstream_ns(),
            sandbox_ns: id.sandbox_ns(),
            ca_pem: dir.join("ca.pem"),
            log: dir.join("upstream.jsonl"),
            dir,
            users: Users::fixed(),
            tools,
            fakenet: None,
            capture: None,
            captures: 0,
        };
        world.make_dir()?;
        let (ca_cert, ca_key) = ca::generate_ca()?;
        write_file(&world.ca_pem, &ca_cert, 0o644)?;
        world.write_etc()?;
        netns::create(&world.tools, id)?;
        world.start_fakenet(&fakenet_bin, ca_cert, ca_key)?;
        Ok(world)
    }

    /// The sandbox namespace's name (`alk-s-<id>`).
    #[must_use]
    pub fn sandbox_ns(&self) -> &str {
        &self.sandbox_ns
    }

    /// The upstream namespace's name (`alk-u-<id>`).
    #[must_use]
    pub fn upstream_ns(&self) -> &str {
        &self.upstream_ns
    }

    /// The World's directory (`/tmp/alk-<id>`, 0755; removed on drop unless
    /// `AIRLOCK_KEEP_WORLD=1`).
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The test CA's certificate (PEM), the root of every fakenet HTTPS certificate.
    #[must_use]
    pub fn ca_pem_path(&self) -> &Path {
        &self.ca_pem
    }

    /// fakenet's JSON-lines log.
    #[must_use]
    pub fn upstream_log_path(&self) -> &Path {
        &self.log
    }

    /// Where fakenet's `github.com` keeps its bare repositories (`<owner>/<repo>.git`).
    #[must_use]
    pub fn git_root(&self) -> PathBuf {
        self.dir.join("git-upstream")
    }

    /// The upstream hooks' log: one line `<owner>/<repo> <old> <new> <ref>` per ref update
    /// that reached a repository's `pre-receive` hook (before the upstream accepts it).
    #[must_use]
    pub fn git_hook_log(&self) -> PathBuf {
        self.git_root().join("hooks.log")
    }

    /// The hook log's lines so far.
    pub fn git_hook_lines(&self) -> anyhow::Result<Vec<String>> {
        match fs::read_to_string(self.git_hook_log()) {
            Ok(t) => Ok(t.lines().map(str::to_owned).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
            Err(e) => Err(e).context("reading the git hook log"),
        }
    }

    /// Creates the bare repository `github.com/<owner>/<repo>` (default branch `main`) with a
    /// `pre-receive` hook that logs every ref update to [`World::git_hook_log`]. Like a forge
    /// without branch protection it accepts force pushes and deletions. Returns its path.
    pub fn git_upstream(&self, owner: &str, repo: &str) -> anyhow::Result<PathBuf> {
        let path = self.git_root().join(owner).join(format!("{repo}.git"));
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let git = |args: &[&str]| -> anyhow::Result<()> {
            let out = Command::new("git")
                .arg("-C")
                .arg(&path)
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", &self.dir)
                .output()
                .context("running git")?;
            if !out.status.success() {
                bail!(
                    "git {args:?} in {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(())
        };
        git(&["init", "-q", "--bare", "-b", "main"])?;
        git(&["config", "receive.denyNonFastForwards", "false"])?;
        git(&["config", "receive.denyDeletes", "false"])?;
        let hook = path.join("hooks").join("pre-receive");
        write_file(
            &hook,
            &format!(
                "#!/bin/sh
while read old new ref; do echo \"{owner}/{repo} $old $new $ref\" >> '{}'; done
",
                self.git_hook_log().display()
            ),
            0o755,
        )?;
        Ok(path)
    }

    /// The users that exist inside the sandbox.
    #[must_use]
    pub fn users(&self) -> &Users {
        &self.users
    }

    /// The agent's home directory (0700, owned by the agent).
    #[must_use]
    pub fn agent_home(&self) -> PathBuf {
        self.dir.join("home").join(airlock_channels::AGENT_USER)
    }

    /// The sandbox's IPv4 address.
    #[must_use]
    pub fn sandbox_ip_v4(&self) -> Ipv4Addr {
        SANDBOX_V4
    }

    /// The sandbox's IPv6 address.
    #[must_use]
    pub fn sandbox_ip_v6(&self) -> Ipv6Addr {
        SANDBOX_V6
    }

    /// A command running `program` as PID 1 of a fresh pid namespace (with its own `/proc`)
    /// and mount namespace, inside the sandbox network namespace, with the World's
    /// `/etc/resolv.conf`, `/etc/hosts`, `/etc/passwd` and `/etc/group`:
    /// `ip netns exec <sandbox> unshare --pid --fork --kill-child --mount --mount-proc -- program`.
    /// Killing the returned child (it is `unshare`) kills the whole pid namespace.
    #[must_use]
    pub fn sandbox_command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(&self.tools.ip);
        cmd.args(["netns", "exec", &self.sandbox_ns])
            .arg(&self.tools.unshare)
            .args([
                "--pid",
                "--fork",
                "--kill-child",
                "--mount",
                "--mount-proc",
                "--",
            ])
            .arg(program);
        cmd
    }

    /// A command running `program` in the upstream namespace (to add servers to the fake
    /// internet): `ip netns exec <upstream> program`.
    #[must_use]
    pub fn upstream_command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(&self.tools.ip);
        cmd.args(["netns", "exec", &self.upstream_ns]).arg(program);
        cmd
    }

    /// Starts tcpdump on the upstream-side veth and waits until it is capturing.
    pub fn start_capture(&mut self) -> anyhow::Result<()> {
        if self.capture.is_some() {
            bail!("a capture is already running in World {}", self.id);
        }
        self.captures += 1;
        let file = self.dir.join(format!("capture-{}.pcap", self.captures));
        let mut child = Command::new(&self.tools.ip)
            .args(["netns", "exec", &self.upstream_ns])
            .arg(&self.tools.tcpdump)
            .args([
                "-i",
                &self.id.upstream_veth(),
                "-U",
                "-n",
                "--immediate-mode",
                "-s",
                "0",
            ])
            // tcpdump would otherwise drop to its own user before opening the file.
            .args(["-Z", "root", "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting tcpdump")?;
        let stderr = child.stderr.take().context("tcpdump's stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut t = Tcpdump {
            child,
            file,
            stderr: Mutex::new(rx),
            seen: Vec::new(),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = t
                .stderr
                .get_mut()
                .map_err(|_| anyhow::anyhow!("tcpdump stderr lock poisoned"))?
                .recv_timeout(left);
            match line {
                Ok(line) => {
                    let listening = line.contains("listening on");
                    t.seen.push(line);
                    if listening {
                        break;
                    }
                }
                Err(e) => {
                    let _ = t.child.kill();
                    let _ = t.child.wait();
                    bail!(
                        "tcpdump did not start capturing ({e}): {}",
                        t.seen.join("\n")
                    );
                }
            }
        }
        self.capture = Some(t);
        Ok(())
    }

    /// Stops the capture (SIGINT, wait) and parses it. Fails if the kernel dropped packets:
    /// an incomplete capture could make "nothing left" pass falsely.
    pub fn stop_capture(&mut self) -> anyhow::Result<Capture> {
        let mut t = self
            .capture
            .take()
            .context("stop_capture without start_capture")?;
        std::thread::sleep(CAPTURE_SETTLE);
        let pid = Pid::from_raw(i32::try_from(t.child.id()).context("tcpdump pid")?);
        kill(pid, Signal::SIGINT).context("signalling tcpdump")?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let status = loop {
            if let Some(status) = t.child.try_wait().context("waiting for tcpdump")? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = t.child.kill();
                let _ = t.child.wait();
                bail!("tcpdump did not exit after SIGINT");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if let Ok(rx) = t.stderr.get_mut() {
            t.seen.extend(rx.iter());
        }
        if !status.success() {
            bail!("tcpdump failed ({status}): {}", t.seen.join("\n"));
        }
        if let Some(line) = t.seen.iter().find(|l| l.contains("dropped by kernel")) {
            let dropped = line
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
            if dropped != Some(0) {
                bail!("tcpdump lost packets, the capture is incomplete: {line}");
            }
        }
        let file = File::open(&t.file).with_context(|| format!("opening {}", t.file.display()))?;
        Capture::from_pcap(BufReader::new(file))
            .with_context(|| format!("parsing {}", t.file.display()))
    }

    /// fakenet's log so far, one JSON value per line (see [`crate::fakenet`] for the kinds).
    pub fn upstream_log(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let text = match fs::read_to_string(&self.log) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e).context(format!("reading {}", self.log.display())),
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).with_context(|| format!("fakenet log line {l:?}")))
            .collect()
    }

    /// Polls fakenet's log until `done` holds for it (for events that land after the client
    /// has exited, such as `tls_error`); fails after `timeout` showing the log.
    pub fn wait_upstream_log(
        &self,
        timeout: Duration,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.upstream_log()?;
            if done(&log) {
                return Ok(log);
            }
            if Instant::now() > deadline {
                bail!(
                    "fakenet's log did not reach the expected state within {timeout:?}: {log:#?}"
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn make_dir(&self) -> anyhow::Result<()> {
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir)
                .with_context(|| format!("removing stale {}", self.dir.display()))?;
        }
        fs::create_dir(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o755))?;
        fs::create_dir(self.git_root())?;
        fs::set_permissions(self.git_root(), fs::Permissions::from_mode(0o755))?;
        let homes = self.dir.join("home");
        fs::create_dir(&homes)?;
        fs::set_permissions(&homes, fs::Permissions::from_mode(0o755))?;
        let home = self.agent_home();
        fs::create_dir(&home).with_context(|| format!("creating {}", home.display()))?;
        fs::set_permissions(&home, fs::Permissions::from_mode(0o700))?;
        std::os::unix::fs::chown(&home, Some(self.users.agent), Some(self.users.agent))
            .with_context(|| format!("chown {}", home.display()))?;
        Ok(())
    }

    fn write_etc(&self) -> anyhow::Result<()> {
        let etc = Path::new(NETNS_ETC_DIR).join(&self.sandbox_ns);
        fs::create_dir_all(&etc).with_context(|| format!("creating {}", etc.display()))?;
        let host_passwd = fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
        let host_group = fs::read_to_string("/etc/group").context("reading /etc/group")?;
        let home = self.agent_home();
        write_file(
            &etc.join("passwd"),
            &users::passwd(&host_passwd, self.users, &home.to_string_lossy()),
            0o644,
        )?;
        write_file(
            &etc.join("group"),
            &users::group(&host_group, self.users),
            0o644,
        )?;
        write_file(&etc.join("hosts"), &topology::hosts(), 0o644)?;
        write_file(&etc.join("resolv.conf"), &topology::resolv_conf(), 0o644)?;
        Ok(())
    }

    fn start_fakenet(&mut self, bin: &Path, ca_cert: String, ca_key: String) -> anyhow::Result<()> {
        let mut config = topology::fakenet_config(ca_cert, ca_key, &self.log);
        config.git = Some(crate::fakenet::git::GitHttp {
            root: self.git_root(),
            host: topology::GITHUB_HOST.to_owned(),
            token: topology::GITHUB_TOKEN.to_owned(),
        });
        let config_path = self.dir.join("fakenet.json");
        // Holds the CA key: root only.
        write_file(&config_path, &serde_json::to_string_pretty(&config)?, 0o600)?;
        let stderr_path = self.dir.join("fakenet.stderr");
        let stderr = File::create(&stderr_path).context("creating fakenet's stderr file")?;
        let mut child = self
            .upstream_command(bin)
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("fakenet's stdout")?;
        self.fakenet = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first.map(|l| l.unwrap_or_default()));
            // Keep draining so fakenet never blocks on a full pipe.
            for _ in lines {}
        });
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(line)) if line.trim() == "ready" => Ok(()),
            other => {
                if let Some(mut c) = self.fakenet.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let err = fs::read_to_string(&stderr_path).unwrap_or_default();
                bail!(
                    "airlock-fakenet did not become ready ({other:?}): {}",
                    err.trim()
                )
            }
        }
    }
}

fn write_file(path: &Path, content: &str, mode: u32) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(content.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = fs::read(&self.log).unwrap_or_default();
            let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(16 * 1024)..]);
            eprintln!(
                "--- World {} (panicking): fakenet log tail ---\n{tail}---",
                self.id
            );
        }
        if let Some(mut t) = self.capture.take() {
            let _ = t.child.kill();
            let _ = t.child.wait();
        }
        if let Some(mut c) = self.fakenet.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.sandbox_ns, &self.upstream_ns] {
            if let Err(e) = netns::destroy(&self.tools, ns) {
                eprintln!("World {}: cleaning up {ns}: {e:#}", self.id);
            }
        }
        if std::env::var_os("AIRLOCK_KEEP_WORLD").is_some_and(|v| v == "1") {
            eprintln!("World {}: kept {}", self.id, self.dir.display());
        } else if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("World {}: removing {}: {e}", self.id, self.dir.display());
        }
    }
}
