//! `git.restricted_paths` against real pushes through the git API to a local bare upstream:
//! what git pushes is judged, as git stores it. A name git would quote (a non-ASCII byte, a
//! quote, a tab), a symbolic link named like a restricted directory (or pointing into one),
//! and a case variant a case-insensitive checkout reads as the restricted name are refused,
//! and the upstream's refs do not move; an honest push still lands.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_git_api::push::PushRules;
use airlock_git_api::run::GitEnv;
use airlock_git_api::server::Server;
use airlock_git_api::visible::Visibility;
use airlock_wire::frame::{self, FrameKind, MAX_FRAME, write_frame};
use airlock_wire::{Denied, Exit, Invocation, SessionKey, Verifier, auth};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const KEY: [u8; 32] = [42; 32];
const GIT: &str = "/usr/bin/git";

fn plain_git(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(GIT)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Seed")
        .env("GIT_AUTHOR_EMAIL", "seed@example.invalid")
        .env("GIT_COMMITTER_NAME", "Seed")
        .env("GIT_COMMITTER_EMAIL", "seed@example.invalid")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    upstream: PathBuf,
    socket: PathBuf,
}

impl World {
    fn new(case_insensitive: bool) -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let upstream = root.join("upstream.git");
        plain_git(
            &root,
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                upstream.to_str().unwrap(),
            ],
        );
        let ws = root.join("workspace");
        std::fs::create_dir(&ws).unwrap();
        plain_git(&ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("README.md"), "hello\n").unwrap();
        plain_git(&ws, &["add", "-A"]);
        plain_git(&ws, &["commit", "-q", "-m", "seed"]);
        plain_git(&ws, &["push", "-q", upstream.to_str().unwrap(), "main"]);
        plain_git(
            &ws,
            &["remote", "add", "origin", "https://github.com/acme/app.git"],
        );
        plain_git(
            &ws,
            &[
                "fetch",
                "-q",
                upstream.to_str().unwrap(),
                "+refs/heads/*:refs/remotes/origin/*",
            ],
        );
        let git_dir = root.join("hidden.git");
        std::fs::rename(ws.join(".git"), &git_dir).unwrap();
        let mut policy = airlock_policy::GitPolicy::defaults_for("demo");
        policy.repositories = vec!["github.com/acme/app".into()];
        policy.restricted_paths = vec![".github/workflows/**".into(), ".vscode/**".into()];
        policy.restricted_paths_case_insensitive = case_insensitive;
        let env = GitEnv {
            git: GIT.into(),
            git_dir,
            work_tree: ws.clone(),
            home: root.join("empty-home"),
            proxy_url: "http://127.0.0.1:9".into(),
            ca_file: None,
            ca_dir: None,
            test_upstreams: vec![("github.com/acme/app".into(), upstream.clone())],
            system_config: None,
        };
        let socket = root.join("git.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let server = Arc::new(Server::new(
            env,
            nix::unistd::getuid().as_raw(),
            PushRules::new(&policy, Some("main")).unwrap(),
            Visibility::new(&policy, "demo", Some("main")).unwrap(),
            Verifier::new(SessionKey::from_bytes(KEY)),
            8,
        ));
        std::thread::spawn(move || server.serve(&listener));
        World {
            _dir: dir,
            ws,
            upstream,
            socket,
        }
    }

    /// One request through the git API: `Ok(exit)` or `Err((reason, message))`.
    fn call(&self, argv: &[&str]) -> Result<i32, (String, String)> {
        let mut env = BTreeMap::new();
        env.insert("GIT_AUTHOR_NAME".to_owned(), "Agent".to_owned());
        env.insert(
            "GIT_AUTHOR_EMAIL".to_owned(),
            "a@example.invalid".to_owned(),
        );
        env.insert("GIT_COMMITTER_NAME".to_owned(), "Agent".to_owned());
        env.insert(
            "GIT_COMMITTER_EMAIL".to_owned(),
            "a@example.invalid".to_owned(),
        );
        let body = Invocation {
            version: 1,
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: String::new(),
            env,
            stdin: None,
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
        let mut last = None;
        while let Ok(Some(f)) = frame::read_frame(&mut s, MAX_FRAME) {
            last = Some(f);
        }
        let f = last.expect("no answer");
        match f.kind {
            FrameKind::Exit => Ok(frame::decode::<Exit>(&f.payload, "exit").unwrap().code),
            FrameKind::Denied => {
                let d = frame::decode::<Denied>(&f.payload, "denied").unwrap();
                Err((d.reason, d.message))
            }
            other => panic!("last frame {other:?}"),
        }
    }

    fn ok(&self, argv: &[&str]) {
        assert_eq!(self.call(argv), Ok(0), "git {argv:?}");
    }

    fn upstream_refs(&self) -> String {
        plain_git(&self.upstream, &["for-each-ref"])
    }

    /// A commit on a fresh sandbox branch with `files` (path, contents; contents starting
    /// with `->` make a symbolic link to the rest), pushed: the answer.
    fn push_commit(&self, branch: &str, files: &[(&str, &str)]) -> Result<i32, (String, String)> {
        self.ok(&["switch", "-q", "-C", branch, "main"]);
        for (path, contents) in files {
            let p = self.ws.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            match contents.strip_prefix("->") {
                Some(target) => std::os::unix::fs::symlink(target, &p).unwrap(),
                None => std::fs::write(&p, contents).unwrap(),
            }
        }
        self.ok(&["add", "-A"]);
        self.ok(&["commit", "-q", "-m", branch]);
        self.call(&["push", "origin", &format!("HEAD:{branch}")])
    }
}

fn refused(w: &World, branch: &str, files: &[(&str, &str)]) -> String {
    let before = w.upstream_refs();
    let answer = w.push_commit(branch, files);
    let Err((reason, message)) = answer else {
        panic!("pushed {files:?}: {answer:?}");
    };
    assert_eq!(reason, "restricted_path", "{files:?}: {message}");
    assert_eq!(w.upstream_refs(), before, "{files:?} reached the upstream");
    assert!(!message.contains('\n'), "{message:?}");
    message
}

/// The reported bypass and its family: each refused, the upstream unchanged.
#[test]
fn what_git_pushes_is_judged_as_git_stores_it() {
    let w = World::new(true);
    let m = refused(
        &w,
        "sandbox/demo/accent",
        &[(".github/workflows/ci-\u{e9}.yml", "on: push\n")],
    );
    assert!(m.contains("ci-\u{e9}.yml"), "{m}");
    refused(
        &w,
        "sandbox/demo/quote",
        &[(".github/workflows/a\"b\tc.yml", "on: push\n")],
    );
    // A symbolic link named .vscode: its target's files are .vscode/... in a checkout.
    let m = refused(
        &w,
        "sandbox/demo/link",
        &[
            ("tools/vsc/settings.json", "{}\n"),
            (".vscode", "->tools/vsc"),
        ],
    );
    assert!(m.contains(".vscode") && m.contains("symbolic link"), "{m}");
    // A link that points into a restricted directory.
    refused(
        &w,
        "sandbox/demo/into",
        &[("docs/ci", "->../.github/workflows")],
    );
    // Case variants a case-insensitive checkout (macOS, Windows) opens as .vscode/.
    refused(
        &w,
        "sandbox/demo/case",
        &[(".VSCode/settings.json", "{}\n")],
    );
    refused(
        &w,
        "sandbox/demo/dot",
        &[(".vscode./settings.json", "{}\n")],
    );
    // An honest push lands.
    assert_eq!(
        w.push_commit(
            "sandbox/demo/ok",
            &[
                ("src/lib.rs", "pub fn f() {}\n"),
                ("docs/readme", "->../README.md")
            ]
        ),
        Ok(0)
    );
    assert!(w.upstream_refs().contains("refs/heads/sandbox/demo/ok"));
}

/// `restricted_paths_case_insensitive = false`: names are matched exactly as written.
#[test]
fn exact_case_matches_names_as_written() {
    let w = World::new(false);
    assert_eq!(
        w.push_commit("sandbox/demo/case", &[(".VSCode/settings.json", "{}\n")]),
        Ok(0)
    );
    refused(
        &w,
        "sandbox/demo/exact",
        &[(".vscode/settings.json", "{}\n")],
    );
}
