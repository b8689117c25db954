//! A workspace as the sandbox has it (its `.git` hidden elsewhere, origin the authorized
//! `github.com/acme/app`), local upstreams standing in for GitHub, the agent's home, and
//! the git API serving them on a socket; requests sent as the shim sends them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_git_api::global::AgentHome;
use airlock_git_api::push::PushRules;
use airlock_git_api::run::GitEnv;
use airlock_git_api::server::Server;
use airlock_git_api::visible::Visibility;
use airlock_wire::frame::{self, FrameKind, MAX_FRAME, write_frame};
use airlock_wire::{Denied, Exit, Invocation, SessionKey, Verifier, auth};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

pub const KEY: [u8; 32] = [42; 32];
pub const GIT: &str = "/usr/bin/git";
/// The authorized repository.
pub const ORIGIN: &str = "github.com/acme/app";
/// A repository the policy does not authorize (a read-only second remote).
pub const OTHER: &str = "github.com/other/app";

/// The agent's own git (the image's `/usr/bin/git`), with `home` as `HOME`: what git outside
/// the workspace is. Fails the test when git fails.
pub fn agent_git(cwd: &Path, home: &Path, args: &[&str]) -> String {
    let out = agent_git_output(cwd, home, args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`agent_git`]'s output, whatever git's status.
pub fn agent_git_output(cwd: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(GIT)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Seed")
        .env("GIT_AUTHOR_EMAIL", "seed@example.invalid")
        .env("GIT_COMMITTER_NAME", "Seed")
        .env("GIT_COMMITTER_EMAIL", "seed@example.invalid")
        .args(args)
        .output()
        .unwrap()
}

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

pub fn executable(path: &Path, text: &str) {
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The world: a temp root holding everything.
pub struct World {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub git_dir: PathBuf,
    /// The agent's home (`~`).
    pub home: PathBuf,
    /// The git API's private directory.
    pub scratch: PathBuf,
    /// The local stand-ins of [`ORIGIN`] and [`OTHER`].
    pub upstream: PathBuf,
    pub other: PathBuf,
    pub socket: PathBuf,
}

/// How the server is built.
pub struct Options {
    /// Serve the agent's home (`--agent-home`, `--scratch-dir`).
    pub home: bool,
    /// The policy's network table (`[network]` allow list), read for a read-only remote's
    /// host; `None`: no network policy given to the server.
    pub network: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            home: true,
            network: Some("[network]\nallow = [\"github.com\"]\n"),
        }
    }
}

/// A bare repository at `path` with `main` (one commit holding `file` = `text`) and the
/// further branches named, each one commit ahead of main.
pub fn seeded_bare(root: &Path, path: &Path, file: &str, text: &str, branches: &[&str]) {
    let home = root.join("seed-home");
    std::fs::create_dir_all(&home).unwrap();
    agent_git(
        root,
        &home,
        &["init", "-q", "--bare", "-b", "main", path.to_str().unwrap()],
    );
    let seed = root.join(format!(
        "seed-{}",
        path.file_name().unwrap().to_string_lossy()
    ));
    agent_git(
        root,
        &home,
        &[
            "clone",
            "-q",
            path.to_str().unwrap(),
            seed.to_str().unwrap(),
        ],
    );
    write(&seed.join(file), text);
    agent_git(&seed, &home, &["add", "-A"]);
    agent_git(&seed, &home, &["commit", "-q", "-m", "seed"]);
    agent_git(&seed, &home, &["push", "-q", "origin", "main"]);
    for b in branches {
        agent_git(&seed, &home, &["switch", "-q", "-c", b, "main"]);
        write(&seed.join(format!("{}.txt", b.replace('/', "-"))), b);
        agent_git(&seed, &home, &["add", "-A"]);
        agent_git(&seed, &home, &["commit", "-q", "-m", b]);
        agent_git(&seed, &home, &["push", "-q", "origin", b]);
    }
}

/// `to`: a bare copy of `from` whose main is one commit ahead (`UPSTREAM.md`), with the
/// further branches named (the project a fork follows).
pub fn fork(root: &Path, from: &Path, to: &Path, branches: &[&str]) {
    let home = root.join("seed-home");
    agent_git(
        root,
        &home,
        &[
            "clone",
            "-q",
            "--bare",
            from.to_str().unwrap(),
            to.to_str().unwrap(),
        ],
    );
    let seed = root.join("seed-fork");
    agent_git(
        root,
        &home,
        &["clone", "-q", to.to_str().unwrap(), seed.to_str().unwrap()],
    );
    write(&seed.join("UPSTREAM.md"), "from upstream\n");
    agent_git(&seed, &home, &["add", "-A"]);
    agent_git(&seed, &home, &["commit", "-q", "-m", "upstream change"]);
    agent_git(&seed, &home, &["push", "-q", "origin", "main"]);
    for b in branches {
        agent_git(&seed, &home, &["switch", "-q", "-c", b, "main"]);
        write(&seed.join(format!("{}.txt", b.replace('/', "-"))), b);
        agent_git(&seed, &home, &["add", "-A"]);
        agent_git(&seed, &home, &["commit", "-q", "-m", b]);
        agent_git(&seed, &home, &["push", "-q", "origin", b]);
    }
}

impl World {
    pub fn new(opts: Options) -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let upstream = root.join("upstream.git");
        let other = root.join("other.git");
        seeded_bare(&root, &upstream, "README.md", "hello\n", &["feature"]);
        fork(&root, &upstream, &other, &["develop", "sandbox/someone/x"]);
        let home = root.join("home");
        std::fs::create_dir(&home).unwrap();
        let scratch = root.join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let ws = root.join("workspace");
        agent_git(
            &root,
            &home,
            &[
                "clone",
                "-q",
                upstream.to_str().unwrap(),
                ws.to_str().unwrap(),
            ],
        );
        let hidden = root.join("hidden");
        std::fs::create_dir(&hidden).unwrap();
        let git_dir = hidden.join("repo.git");
        std::fs::rename(ws.join(".git"), &git_dir).unwrap();
        agent_git(
            &root,
            &home,
            &[
                "--git-dir",
                git_dir.to_str().unwrap(),
                "remote",
                "set-url",
                "origin",
                &format!("https://{ORIGIN}.git"),
            ],
        );
        let mut policy = airlock_policy::GitPolicy::defaults_for("demo");
        policy.repositories = vec![ORIGIN.into()];
        let env = GitEnv {
            git: GIT.into(),
            git_dir: git_dir.clone(),
            work_tree: ws.clone(),
            home: root.join("empty-home"),
            proxy_url: "http://127.0.0.1:9".into(),
            ca_file: None,
            ca_dir: None,
            test_upstreams: vec![
                (ORIGIN.into(), upstream.clone()),
                (OTHER.into(), other.clone()),
            ],
            system_config: None,
        };
        let socket = root.join("git.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let mut server = Server::new(
            env,
            uid,
            PushRules::new(&policy, Some("main")).unwrap(),
            Visibility::new(&policy, "demo", Some("main")).unwrap(),
            Verifier::new(SessionKey::from_bytes(KEY)),
            16,
        );
        if opts.home {
            server = server.with_agent_home(
                AgentHome::new(home.clone(), uid, GIT.into()).with_scratch(scratch.clone()),
            );
        }
        if let Some(network) = opts.network {
            let text = format!("[sandbox]\nname = \"demo\"\n{network}");
            let policy = airlock_policy::Policy::parse(&text, Path::new("t.toml")).unwrap();
            server = server.with_network(policy);
        }
        let server = Arc::new(server);
        std::thread::spawn(move || server.serve(&listener));
        World {
            _dir: dir,
            root,
            ws,
            git_dir,
            home,
            scratch,
            upstream,
            other,
            socket,
        }
    }

    /// One request through the git API, as the shim sends it (no identity in the
    /// environment: git takes it from its configuration).
    pub fn call(&self, argv: &[&str]) -> Reply {
        self.call_with(argv, None)
    }

    pub fn call_with(&self, argv: &[&str], stdin: Option<&[u8]>) -> Reply {
        let body = Invocation {
            version: 1,
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: String::new(),
            env: BTreeMap::new(),
            stdin: stdin.map(<[u8]>::to_vec),
            term_width: None,
            stdout_tty: false,
        }
        .to_body()
        .unwrap();
        let a = auth::sign(&SessionKey::from_bytes(KEY), &body).unwrap();
        let mut raw = Vec::new();
        write_frame(&mut raw, FrameKind::Auth, &serde_json::to_vec(&a).unwrap()).unwrap();
        write_frame(&mut raw, FrameKind::Body, &body).unwrap();
        let mut s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let _ = s.write_all(&raw);
        let _ = s.shutdown(Shutdown::Write);
        let mut reply = Reply::default();
        while let Ok(Some(f)) = frame::read_frame(&mut s, MAX_FRAME) {
            match f.kind {
                FrameKind::Stdout => reply.stdout.extend(&f.payload),
                FrameKind::Stderr => reply.stderr.extend(&f.payload),
                FrameKind::Exit => {
                    reply.exit = Some(frame::decode::<Exit>(&f.payload, "exit").unwrap().code);
                }
                FrameKind::Denied => {
                    reply.denied = Some(frame::decode::<Denied>(&f.payload, "denied").unwrap());
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        assert!(
            reply.exit.is_some() || reply.denied.is_some(),
            "git {argv:?}: the server closed without an answer"
        );
        reply
    }

    /// A request that must succeed; its stdout.
    pub fn ok(&self, argv: &[&str]) -> String {
        let r = self.call(argv);
        assert_eq!(r.exit, Some(0), "git {argv:?}: {}", r.outcome());
        r.out()
    }

    /// The operator's git on the hidden git dir (a look from outside the sandbox).
    pub fn operator_git(&self, args: &[&str]) -> String {
        let mut full = vec!["--git-dir", self.git_dir.to_str().unwrap()];
        full.extend(args);
        agent_git(&self.root, &self.root.join("seed-home"), &full)
    }

    /// The hidden git dir's own configuration file, as text.
    pub fn config(&self) -> String {
        std::fs::read_to_string(self.git_dir.join("config")).unwrap()
    }
}

#[derive(Debug, Default)]
pub struct Reply {
    pub exit: Option<i32>,
    pub denied: Option<Denied>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Reply {
    pub fn reason(&self) -> Option<&str> {
        self.denied.as_ref().map(|d| d.reason.as_str())
    }

    pub fn message(&self) -> &str {
        self.denied.as_ref().map_or("", |d| d.message.as_str())
    }

    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn err(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    pub fn outcome(&self) -> String {
        match (&self.exit, &self.denied) {
            (_, Some(d)) => format!("denied {}: {}", d.reason, d.message),
            (Some(c), None) => format!("exit {c}: {}", self.err()),
            _ => "no answer".into(),
        }
    }
}
