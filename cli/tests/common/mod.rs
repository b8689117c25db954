//! What the Docker tests share: a [`World`] (its own data and config directories, an
//! operator repository, a policy, a name prefix) whose guard removes every container labelled
//! with its data directory, even when the test fails.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const POLICY: &str =
    "[sandbox]\nname = \"clitest\"\nmode = \"enforce\"\n\n[network]\nallow = [\"allowed.test\"]\n";

/// [`POLICY`] with a credential that reads `/run/secrets/<secret>` (so `--secret <secret>` is
/// bound).
pub fn policy_reading(secret: &str) -> String {
    format!(
        "{POLICY}\n[[credentials]]\nname = \"{secret}\"\nsource = {{ file = \"/run/secrets/{secret}\" }}\nhosts = [\"allowed.test\"]\nheader = \"x-api-key\"\nformat = \"{{}}\"\n"
    )
}

/// One test's world: a data directory, an operator repository, a policy, a name prefix.
pub struct World {
    pub dir: tempfile::TempDir,
    pub prefix: String,
}

impl World {
    pub fn new(tag: &str) -> World {
        let image = Command::new("docker")
            .args(["image", "inspect", "airlock:latest"])
            .output();
        let ok = image.map(|o| o.status.success()).unwrap_or(false);
        assert!(
            ok,
            "the image airlock:latest is missing: run scripts/build-image first"
        );
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        sh(
            &repo,
            "git init -q -b main . && git config user.email o@x && git config user.name o && echo one > a && git add a && git commit -qm one",
        );
        std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        let prefix = format!("{tag}{}", std::process::id() % 100_000);
        World { dir, prefix }
    }

    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    pub fn name(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlock"));
        c.args(args)
            .env("AIRLOCK_DATA_DIR", self.data())
            .env("AIRLOCK_CONFIG_DIR", self.config())
            .env("AIRLOCK_GC_CREATING_GRACE", "0");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "airlock {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `airlock new NAME --repo R --policy P [-- sh -c SCRIPT]`.
    pub fn new_args(&self, name: &str, script: Option<&str>) -> Vec<String> {
        let mut a: Vec<String> = vec!["new".into(), name.into()];
        a.extend(["--repo".into(), self.repo().display().to_string()]);
        let policy = self.dir.path().join("policy.toml");
        a.extend(["--policy".into(), policy.display().to_string()]);
        if let Some(s) = script {
            a.extend(["--".into(), "sh".into(), "-c".into(), s.into()]);
        }
        a
    }

    pub fn list(&self) -> Vec<Value> {
        serde_json::from_str::<Value>(&self.ok(&["list", "--json"]))
            .unwrap()
            .as_array()
            .cloned()
            .unwrap()
    }

    pub fn row(&self, name: &str) -> Value {
        self.list()
            .into_iter()
            .find(|r| r["name"] == name)
            .unwrap_or(Value::Null)
    }

    /// Wait until the sandbox's output contains `text` (it may not be registered yet: a
    /// `run` in the background).
    pub fn wait_log(&self, name: &str, text: &str) {
        let start = Instant::now();
        loop {
            let o = self.run(&["logs", name]);
            let logs = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            if o.status.success() && logs.contains(text) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{name} never logged {text:?}: {logs}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let label = format!("label=dev.airlock.data={}", self.data().display());
        let ids = Command::new("docker")
            .args(["ps", "-aq", "--filter", &label])
            .output();
        if let Ok(ids) = ids {
            for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", "-v", id]).output();
            }
        }
        let vols = Command::new("docker")
            .args(["volume", "ls", "-q", "--filter", &label])
            .output();
        if let Ok(vols) = vols {
            for v in String::from_utf8_lossy(&vols.stdout).split_whitespace() {
                let _ = Command::new("docker")
                    .args(["volume", "rm", "-f", v])
                    .output();
            }
        }
    }
}

/// The volumes labelled with `w`'s data directory.
pub fn volumes_of(w: &World) -> Vec<String> {
    let label = format!("label=dev.airlock.data={}", w.data().display());
    let o = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", &label])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

pub fn sh(dir: &Path, script: &str) -> String {
    let o = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The agent commits a file named after its sandbox and lists the branches it can see.
pub fn commit_script(file: &str) -> String {
    format!(
        "git config user.name agent; git config user.email agent@x; echo {file} > {file}; \
         git add {file}; git commit -qm {file}; echo BRANCHES; git branch --list; echo COMMITTED; \
         exec sleep 600"
    )
}

/// Every process (pid: comm) whose argv or environment contains `needle`.
pub fn processes_holding(needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for f in ["cmdline", "environ"] {
            if let Ok(bytes) = std::fs::read(entry.path().join(f))
                && String::from_utf8_lossy(&bytes).contains(needle)
            {
                hits.push(format!("{pid} {f}"));
            }
        }
    }
    hits
}

/// The end mark of a script run in a [`Shell`].
const END: &str = "__airlock_test_end__";

/// A long-lived session driven line by line: `airlock exec NAME -- sh` on pipes.
pub struct Shell {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Shell {
    /// `airlock exec NAME -- sh`: a session of its own in the sandbox `name`.
    pub fn start(w: &World, name: &str) -> Shell {
        let mut child = w
            .cmd(&["exec", name, "--", "sh"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Shell {
            child,
            stdin,
            stdout,
        }
    }

    /// What `script` prints in this session (stderr joined), trimmed.
    pub fn run(&mut self, script: &str) -> String {
        self.send(script);
        self.finish()
    }

    /// Starts `script` in this session without waiting for it ([`Shell::finish`] does).
    pub fn send(&mut self, script: &str) {
        // The end mark on a line of its own, whether or not the output ended its line.
        writeln!(self.stdin, "{{ {script}\n}} 2>&1; printf '\\n{END}\\n'").unwrap();
        self.stdin.flush().unwrap();
    }

    /// What the script [`Shell::send`] started printed, once it ends, trimmed.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the session ended before its script did: {out}");
            if line.trim_end() == END {
                return out.trim().to_owned();
            }
            out.push_str(&line);
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
