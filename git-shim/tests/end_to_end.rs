//! End to end, as the agent: the real `git` shim binary talks to a git API server (the
//! `airlock-git-api` library, on a temp socket) that runs the real git against a hidden
//! git dir, with a local bare repository standing in for github.com/acme/app.
//!
//! Every refusal is asserted by its reason code *and* by the upstream's refs being
//! unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_git_api::push::PushRules;
use airlock_git_api::run::GitEnv;
use airlock_git_api::server::Server;
use airlock_wire::{SessionKey, Verifier};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

const KEY: [u8; 32] = [42; 32];

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    upstream: PathBuf,
    socket: PathBuf,
}

fn plain_git(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new("/usr/bin/git")
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
    String::from_utf8(out.stdout).unwrap()
}

impl World {
    fn new() -> World {
        World::with_system_config(None)
    }

    /// A world whose git API reads `system_config` as git's system layer.
    fn with_system_config(system_config: Option<PathBuf>) -> World {
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
        let seed = root.join("seed");
        plain_git(
            &root,
            &[
                "clone",
                "-q",
                upstream.to_str().unwrap(),
                seed.to_str().unwrap(),
            ],
        );
        std::fs::create_dir_all(seed.join(".github/workflows")).unwrap();
        std::fs::write(seed.join("README.md"), "hello\n").unwrap();
        std::fs::write(seed.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
        plain_git(&seed, &["add", "-A"]);
        plain_git(&seed, &["commit", "-q", "-m", "seed"]);
        plain_git(&seed, &["push", "-q", "origin", "main"]);
        // The workspace: files only; its .git lives in a hidden place.
        let ws = root.join("workspace");
        plain_git(
            &root,
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
        plain_git(
            &root,
            &[
                "--git-dir",
                git_dir.to_str().unwrap(),
                "remote",
                "set-url",
                "origin",
                "https://github.com/acme/app.git",
            ],
        );
        let mut policy = airlock_policy::GitPolicy::defaults_for("demo");
        policy.repositories = vec!["github.com/acme/app".into()];
        let rules = PushRules::new(&policy, Some("main")).unwrap();
        let env = GitEnv {
            git: "/usr/bin/git".into(),
            git_dir,
            work_tree: ws.clone(),
            home: root.join("empty-home"),
            proxy_url: "http://127.0.0.1:9".into(),
            ca_file: None,
            ca_dir: None,
            test_upstreams: vec![("github.com/acme/app".into(), upstream.clone())],
            system_config,
        };
        let socket = root.join("git.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let uid = nix_uid();
        let server = Arc::new(Server::new(
            env,
            uid,
            rules,
            airlock_git_api::visible::Visibility::new(&policy, "demo", Some("main")).unwrap(),
            Verifier::new(SessionKey::from_bytes(KEY)),
            8,
        ));
        std::thread::spawn(move || server.serve(&listener));
        World {
            _dir: dir,
            root,
            ws,
            upstream,
            socket,
        }
    }

    /// The shim, as an agent with no identity of its own runs it, in the workspace.
    fn anonymous(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_git"))
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("AIRLOCK_WORKSPACE", &self.ws)
            .env("AIRLOCK_GIT_SOCKET", &self.socket)
            .env("AIRLOCK_SESSION_KEY", hex(&KEY))
            .args(args)
            .output()
            .unwrap()
    }

    /// The shim with one more variable in the agent's environment.
    fn git_with(&self, var: (&str, &str), args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_git"))
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("AIRLOCK_WORKSPACE", &self.ws)
            .env("AIRLOCK_GIT_SOCKET", &self.socket)
            .env("AIRLOCK_SESSION_KEY", hex(&KEY))
            .env("GIT_AUTHOR_NAME", "Agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
            .env("GIT_COMMITTER_NAME", "Agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
            .env(var.0, var.1)
            .args(args)
            .output()
            .unwrap()
    }

    /// The shim, as the agent runs it, in `sub` of the workspace.
    fn git_in(&self, cwd: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_git"))
            .current_dir(cwd)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("AIRLOCK_WORKSPACE", &self.ws)
            .env("AIRLOCK_GIT_SOCKET", &self.socket)
            .env("AIRLOCK_SESSION_KEY", hex(&KEY))
            .env("GIT_AUTHOR_NAME", "Agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
            .env("GIT_COMMITTER_NAME", "Agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
            .args(args)
            .output()
            .unwrap()
    }

    fn git(&self, args: &[&str]) -> Output {
        self.git_in(&self.ws, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.git(args);
        assert!(
            o.status.success(),
            "git {args:?} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// Assert a refusal with `reason`, and that upstream refs did not move.
    fn refused(&self, args: &[&str], reason: &str) {
        let before = self.upstream_refs();
        let o = self.git(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "git {args:?}: {err}");
        assert!(
            err.contains(&format!("airlock refused this ({reason})")),
            "git {args:?}: expected {reason}, got {err}"
        );
        assert_eq!(
            self.upstream_refs(),
            before,
            "git {args:?} moved upstream refs"
        );
    }

    fn upstream_refs(&self) -> String {
        plain_git(&self.upstream, &["for-each-ref"])
    }

    fn write(&self, path: &str, text: &str) {
        let p = self.ws.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

fn nix_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn the_agent_clones_edits_commits_and_pushes_its_sandbox_branch() {
    let w = World::new();
    assert!(!w.ws.join(".git").exists(), "the workspace has no .git");
    w.ok(&["switch", "-c", "sandbox/demo/feat"]);
    w.write("src/lib.rs", "pub fn f() {}\n");
    w.ok(&["add", "-A"]);
    w.ok(&["commit", "-m", "add f"]);
    let status = w.ok(&["status", "--porcelain"]);
    assert_eq!(status, "");
    assert_eq!(w.ok(&["log", "-1", "--format=%s"]), "add f\n");
    // From a subdirectory too, with a message file read by the shim.
    w.write("src/msg.txt", "second\n\nbody\n");
    w.write("src/more.rs", "\n");
    let o = w.git_in(&w.ws.join("src"), &["add", "more.rs"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = w.git_in(&w.ws.join("src"), &["commit", "-F", "msg.txt"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let head = w.ok(&["rev-parse", "HEAD"]);
    let o = w.git(&["push", "-u", "origin", "sandbox/demo/feat"]);
    assert!(
        o.status.success(),
        "push: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let upstream_head = plain_git(&w.upstream, &["rev-parse", "refs/heads/sandbox/demo/feat"]);
    assert_eq!(upstream_head, head, "the commit landed upstream");
    // A plain `git push` on the tracking branch works too.
    w.write("src/lib.rs", "pub fn f() { }\n");
    w.ok(&["commit", "-am", "third"]);
    w.ok(&["push"]);
    assert_eq!(
        plain_git(&w.upstream, &["rev-parse", "refs/heads/sandbox/demo/feat"]),
        w.ok(&["rev-parse", "HEAD"])
    );
}

#[test]
fn pushes_that_rewrite_or_escape_are_refused_and_upstream_is_unchanged() {
    let w = World::new();
    w.ok(&["switch", "-c", "sandbox/demo/feat"]);
    w.write("a.txt", "1\n");
    w.ok(&["add", "a.txt"]);
    w.ok(&["commit", "-m", "one"]);
    w.ok(&["push", "-u", "origin", "sandbox/demo/feat"]);
    // Force push: rewrite the pushed commit.
    w.ok(&["reset", "--hard", "HEAD~1"]);
    w.write("a.txt", "2\n");
    w.ok(&["add", "a.txt"]);
    w.ok(&["commit", "-m", "rewritten"]);
    w.refused(&["push"], "not_fast_forward");
    w.refused(
        &["push", "origin", "+sandbox/demo/feat"],
        "not_fast_forward",
    );
    w.refused(&["push", "--force"], "option_not_allowed");
    w.refused(&["push", "-f"], "option_refused");
    w.refused(&["push", "--force-with-lease"], "option_not_allowed");
    // Deletion.
    w.refused(&["push", "origin", ":sandbox/demo/feat"], "deletion");
    w.refused(
        &["push", "-d", "origin", "sandbox/demo/feat"],
        "option_refused",
    );
    w.refused(
        &["push", "--delete", "origin", "sandbox/demo/feat"],
        "option_not_allowed",
    );
    // Protected and foreign branches.
    w.refused(&["push", "origin", "HEAD:main"], "branch_protected");
    w.refused(
        &["push", "origin", "HEAD:refs/heads/master"],
        "branch_protected",
    );
    w.refused(
        &["push", "origin", "HEAD:sandbox/other/feat"],
        "branch_not_allowed",
    );
    w.refused(&["push", "origin", "HEAD:release/1.0"], "branch_protected");
    w.ok(&["switch", "main"]);
    w.write("b.txt", "x\n");
    w.ok(&["add", "b.txt"]);
    w.ok(&["commit", "-m", "on main"]);
    w.refused(&["push"], "branch_protected");
    // Tags.
    w.ok(&["tag", "v9"]);
    w.refused(&["push", "origin", "v9"], "tag_push");
    w.refused(&["push", "--tags"], "option_not_allowed");
    w.refused(&["push", "--mirror"], "option_not_allowed");
    w.refused(&["push", "--all"], "option_not_allowed");
    // Restricted paths, on a fresh sandbox branch, directly and hidden behind a later revert.
    w.ok(&["switch", "-c", "sandbox/demo/wf", "origin/main"]);
    w.write(".github/workflows/x.yml", "on: push\njobs: {}\n");
    w.ok(&["add", "-A"]);
    w.ok(&["commit", "-m", "workflow"]);
    w.refused(&["push", "origin", "sandbox/demo/wf"], "restricted_path");
    w.ok(&["rm", "-q", ".github/workflows/x.yml"]);
    w.ok(&["commit", "-m", "hide it"]);
    w.refused(&["push", "origin", "sandbox/demo/wf"], "restricted_path");
    // Unauthorized repositories: a URL instead of a remote, and a remote on a host the
    // policy does not allow (a read-only second remote must be readable: fbdfa3f).
    w.refused(
        &[
            "push",
            "https://github.com/evil/x.git",
            "HEAD:sandbox/demo/x",
        ],
        "repository_not_authorized",
    );
    w.refused(
        &["remote", "add", "evil", "https://github.com/evil/x.git"],
        "repository_not_authorized",
    );
    w.refused(
        &[
            "config",
            "remote.origin.url",
            "https://github.com/evil/x.git",
        ],
        "config_key_not_writable",
    );
    w.refused(
        &[
            "config",
            "remote.origin.pushurl",
            "https://github.com/evil/x.git",
        ],
        "config_key_not_writable",
    );
}

#[test]
fn options_that_run_programs_or_redirect_git_are_refused() {
    let w = World::new();
    let marker = w.root.join("pwned");
    let fsmonitor = format!("core.fsmonitor=touch {}", marker.display());
    w.refused(&["-c", &fsmonitor, "status"], "global_option_refused");
    w.refused(
        &[&format!("-c{fsmonitor}"), "status"],
        "global_option_refused",
    );
    w.refused(&["--git-dir=/tmp", "status"], "global_option_refused");
    w.refused(&["--work-tree=/", "status"], "global_option_refused");
    w.refused(&["--exec-path=/tmp", "status"], "global_option_refused");
    let up = format!("--upload-pack=touch {}", marker.display());
    w.refused(&["fetch", &up, "origin"], "option_refused");
    w.refused(&["fetch", "--upload-p=x", "origin"], "option_refused");
    w.refused(&["fetch", "--up=x", "origin"], "option_refused");
    w.refused(&["pull", "--upload-pack", "x"], "option_refused");
    w.refused(&["push", "--receive-pack=x"], "option_refused");
    w.refused(&["push", "--exec=x"], "option_refused");
    w.refused(&["rebase", "--exec", "x", "main"], "option_refused");
    w.refused(&["rebase", "-i", "main"], "interactive_refused");
    // diff --no-index is run by the shim, as the agent (its own permissions), never by the
    // git API; the API refuses it when sent (argv unit tests).
    let o = w.git(&["diff", "--no-index", "/etc/hostname", "README.md"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("airlock refused"));
    w.refused(&["diff", "--ext-diff"], "option_refused");
    w.refused(
        &["config", "core.fsmonitor", "touch x"],
        "config_key_not_writable",
    );
    w.refused(
        &["config", "core.hooksPath", "/tmp"],
        "config_key_not_writable",
    );
    w.refused(
        &["config", "alias.st", "!touch x"],
        "config_key_not_writable",
    );
    // No command `st` and aliases are not expanded: nothing to run.
    w.refused(&["st"], "not_installed");
    w.refused(&["submodule", "update"], "subcommand_not_allowed");
    // .gitattributes naming a filter or diff driver: no such driver is configured and the
    // agent cannot configure one, so nothing runs.
    w.write(".gitattributes", "* filter=evil diff=evil\n");
    w.write("x.txt", "x\n");
    w.ok(&["add", "-A"]);
    w.ok(&["diff", "--cached"]);
    // A .git file pointing elsewhere is ignored: the server names the git dir.
    std::fs::write(w.ws.join(".git"), "gitdir: /tmp/elsewhere\n").unwrap();
    w.ok(&["status"]);
    assert!(!marker.exists(), "nothing the agent named was run");
    // A working directory that escapes through a symlink runs native git instead, which
    // finds no repository there.
    std::os::unix::fs::symlink(&w.root, w.ws.join("escape")).unwrap();
    let o = w.git_in(&w.ws.join("escape/hidden"), &["status"]);
    assert!(!o.status.success());
}

#[test]
fn replayed_and_forged_requests_are_refused() {
    use airlock_git_shim::client::{self, Outcome};
    use airlock_wire::auth;
    let w = World::new();
    let inv = airlock_git_shim::prepare::invocation(
        vec!["status".into()],
        String::new(),
        None,
        false,
        None,
    );
    let body = inv.to_body().unwrap();
    let key = SessionKey::from_bytes(KEY);
    let signed = auth::sign(&key, &body).unwrap();
    let send = |a: &airlock_wire::Auth, body: &[u8]| {
        let mut s = std::os::unix::net::UnixStream::connect(&w.socket).unwrap();
        client::send_raw(&mut s, a, body).unwrap();
        client::receive(&mut s, &mut Vec::new(), &mut Vec::new()).unwrap()
    };
    assert_eq!(send(&signed, &body), Outcome::Exited(0));
    let Outcome::Denied(d) = send(&signed, &body) else {
        panic!("replay accepted")
    };
    assert_eq!(d.reason, "replayed_nonce");
    let forged = auth::sign(&SessionKey::from_bytes([7; 32]), &body).unwrap();
    let Outcome::Denied(d) = send(&forged, &body) else {
        panic!("forgery accepted")
    };
    assert_eq!(d.reason, "bad_signature");
    // The body swapped under a valid signature.
    let evil = airlock_git_shim::prepare::invocation(
        vec!["-c".into(), "core.fsmonitor=x".into(), "status".into()],
        String::new(),
        None,
        false,
        None,
    );
    let fresh = auth::sign(&key, &body).unwrap();
    let Outcome::Denied(d) = send(&fresh, &evil.to_body().unwrap()) else {
        panic!("swap accepted")
    };
    assert_eq!(d.reason, "bad_signature");
    let mut stale = auth::sign(&key, &body).unwrap();
    stale = auth::sign_with(&key, &body, stale.timestamp - 120, [9; 16]);
    let Outcome::Denied(d) = send(&stale, &body) else {
        panic!("stale accepted")
    };
    assert_eq!(d.reason, "stale_timestamp");
}

#[test]
fn outside_the_workspace_git_is_native_and_a_missing_api_is_one_line() {
    let w = World::new();
    let o = Command::new(env!("CARGO_BIN_EXE_git"))
        .current_dir(&w.root)
        .env("AIRLOCK_WORKSPACE", &w.ws)
        .env("AIRLOCK_GIT_SOCKET", w.root.join("nope.sock"))
        .args(["--version"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("git version"));
    let o = Command::new(env!("CARGO_BIN_EXE_git"))
        .current_dir(&w.ws)
        .env("AIRLOCK_WORKSPACE", &w.ws)
        .env("AIRLOCK_GIT_SOCKET", w.root.join("nope.sock"))
        .env("AIRLOCK_SESSION_KEY", hex(&KEY))
        .args(["status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(128));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not answering"), "{err}");
}

#[test]
fn display_and_identity_dash_c_keys_work_and_program_keys_are_refused() {
    let w = World::new();
    w.write("a file.txt", "x\n");
    let out = w.ok(&[
        "-c",
        "color.ui=never",
        "-c",
        "core.quotepath=off",
        "status",
        "--short",
    ]);
    assert!(out.contains("a file.txt"), "{out}");
    w.ok(&["add", "-A"]);
    w.ok(&[
        "-c",
        "user.name=Tool Name",
        "-c",
        "user.email=tool@example.invalid",
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "-m",
        "via -c",
    ]);
    // GIT_AUTHOR_* of the environment wins over user.* (git's own precedence); the
    // committer too. The -c reached git when nothing else names the identity:
    assert_eq!(w.ok(&["log", "-1", "--format=%s"]), "via -c\n");
    // A message file is still read by the shim when -c comes first.
    w.write("msg.txt", "from a file\n");
    w.write("b.txt", "b\n");
    w.ok(&["add", "b.txt"]);
    w.ok(&["-c", "color.ui=never", "commit", "-q", "-F", "msg.txt"]);
    assert_eq!(w.ok(&["log", "-1", "--format=%s"]), "from a file\n");
    // Escape attempts: nothing named runs.
    let marker = w.root.join("pwned");
    let evil = format!("touch {}", marker.display());
    for kv in [
        format!("core.pager={evil}"),
        format!("core.editor={evil}"),
        format!("core.sshCommand={evil}"),
        format!("core.fsmonitor={evil}"),
        "core.hooksPath=/tmp".to_owned(),
        format!("diff.external={evil}"),
        format!("diff.x.textconv={evil}"),
        format!("filter.x.clean={evil}"),
        format!("credential.helper=!{evil}"),
        "url.file:///tmp/x.insteadOf=https://github.com/".to_owned(),
        format!("alias.st=!{evil}"),
        "include.path=/tmp/x".to_owned(),
        "protocol.file.allow=always".to_owned(),
        "http.proxy=http://127.0.0.1:1".to_owned(),
        "remote.origin.url=/tmp/x".to_owned(),
    ] {
        w.refused(&["-c", &kv, "log", "-1"], "global_option_refused");
    }
    assert!(!marker.exists(), "nothing the agent named was run");
}

/// `git config --global` is the agent's ~/.gitconfig (fbdfa3f), edited by the git API in
/// a private directory of its own; a git API started without one refuses the write with
/// one line saying where the agent's global configuration is, and writes nothing (the
/// namespace tier tests the real entrypoint's, which has the directory).
#[test]
fn config_global_without_the_private_directory_is_refused_saying_where_it_goes() {
    let w = World::new();
    let before = w.ok(&["config", "--list", "--local"]);
    let o = w.git(&["config", "--global", "user.email", "me@example.invalid"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("(config_key_not_writable)") && err.contains("~/.gitconfig"),
        "{err}"
    );
    assert_eq!(
        w.ok(&["config", "--list", "--local"]),
        before,
        "nothing written"
    );
    w.refused(
        &["config", "--global", "core.pager", "touch /tmp/x"],
        "config_key_not_writable",
    );
    w.refused(
        &["config", "--global", "alias.st", "status"],
        "config_key_not_writable",
    );
}

#[test]
fn an_absent_tool_is_not_installed_and_refusals_say_what_works() {
    let w = World::new();
    let o = w.git(&["lfs", "version"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("(not_installed)"), "{err}");
    assert!(err.contains("git-lfs is not installed"), "{err}");
    // A git command the API refuses is a policy refusal naming what works instead.
    let o = w.git(&["clone", "https://github.com/acme/app.git", "x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("(subcommand_not_allowed)") && err.contains("/tmp"),
        "{err}"
    );
    assert!(!err.contains("docker exec"), "{err}");
    let o = w.git(&["config", "--system", "user.name", "x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("git config <key> <value>"), "{err}");
}

/// Two branches that change the same line of `c.txt`: `main` and `sandbox/demo/topic`.
fn conflicting_branches(w: &World) {
    w.write("c.txt", "base\n");
    w.ok(&["add", "c.txt"]);
    w.ok(&["commit", "-q", "-m", "base"]);
    w.ok(&["switch", "-q", "-c", "sandbox/demo/topic"]);
    w.write("c.txt", "topic\n");
    w.ok(&["commit", "-q", "-am", "topic change"]);
    w.ok(&["switch", "-q", "main"]);
    w.write("c.txt", "main\n");
    w.ok(&["commit", "-q", "-am", "main change"]);
}

fn resolve(w: &World) {
    w.write("c.txt", "resolved\n");
    w.ok(&["add", "c.txt"]);
}

#[test]
fn conflicts_finish_non_interactively_keeping_the_prepared_message() {
    let w = World::new();
    conflicting_branches(&w);
    // rebase --continue
    w.ok(&["switch", "-q", "sandbox/demo/topic"]);
    assert!(!w.git(&["rebase", "main"]).status.success());
    resolve(&w);
    w.ok(&["rebase", "--continue"]);
    assert_eq!(w.ok(&["log", "-1", "--format=%s"]), "topic change\n");
    // merge --continue
    w.ok(&["switch", "-q", "-c", "sandbox/demo/m", "main"]);
    w.ok(&["reset", "-q", "--hard", "HEAD~1"]);
    w.write("c.txt", "other\n");
    w.ok(&["commit", "-q", "-am", "other"]);
    assert!(!w.git(&["merge", "main"]).status.success());
    resolve(&w);
    w.ok(&["merge", "--continue"]);
    assert_eq!(
        w.ok(&["log", "-1", "--format=%s"]),
        "Merge branch 'main' into sandbox/demo/m\n"
    );
    // commit --no-edit after a conflicted merge
    w.ok(&["reset", "-q", "--hard", "HEAD~1"]);
    assert!(!w.git(&["merge", "main"]).status.success());
    resolve(&w);
    w.ok(&["commit", "--no-edit"]);
    assert_eq!(
        w.ok(&["log", "-1", "--format=%s"]),
        "Merge branch 'main' into sandbox/demo/m\n"
    );
    // cherry-pick --continue
    w.ok(&["reset", "-q", "--hard", "HEAD~1"]);
    let main_change = w.ok(&["rev-parse", "main"]);
    assert!(!w.git(&["cherry-pick", main_change.trim()]).status.success());
    resolve(&w);
    w.ok(&["cherry-pick", "--continue"]);
    assert_eq!(w.ok(&["log", "-1", "--format=%s"]), "main change\n");
    // revert --continue
    w.write("c.txt", "again\n");
    w.ok(&["commit", "-q", "-am", "again"]);
    assert!(!w.git(&["revert", "HEAD~1"]).status.success());
    resolve(&w);
    w.ok(&["revert", "--continue"]);
    assert!(
        w.ok(&["log", "-1", "--format=%s"])
            .starts_with("Revert \"main change\"")
    );
    // -c core.editor=true commit (a tool's way to say "keep the message")
    w.ok(&["reset", "-q", "--hard", "HEAD~2"]);
    assert!(!w.git(&["merge", "main"]).status.success());
    resolve(&w);
    w.ok(&["-c", "core.editor=true", "commit"]);
    assert_eq!(w.ok(&["status", "--porcelain"]), "");
}

#[test]
fn the_agent_tries_its_own_editor_mid_rebase_and_nothing_runs() {
    let w = World::new();
    conflicting_branches(&w);
    w.ok(&["switch", "-q", "sandbox/demo/topic"]);
    assert!(!w.git(&["rebase", "main"]).status.success());
    resolve(&w);
    let marker = w.root.join("pwned");
    let evil = format!("touch {}", marker.display());
    w.refused(
        &["-c", &format!("core.editor={evil}"), "rebase", "--continue"],
        "global_option_refused",
    );
    w.refused(
        &[
            "-c",
            &format!("sequence.editor={evil}"),
            "rebase",
            "--continue",
        ],
        "global_option_refused",
    );
    // GIT_EDITOR and GIT_SEQUENCE_EDITOR of the agent's environment are not sent.
    let o = Command::new(env!("CARGO_BIN_EXE_git"))
        .current_dir(&w.ws)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AIRLOCK_WORKSPACE", &w.ws)
        .env("AIRLOCK_GIT_SOCKET", &w.socket)
        .env("AIRLOCK_SESSION_KEY", hex(&KEY))
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
        .env("GIT_EDITOR", &evil)
        .env("GIT_SEQUENCE_EDITOR", &evil)
        .args(["rebase", "--continue"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!marker.exists(), "nothing the agent named was run");
}

#[test]
fn read_only_plumbing_an_agent_orients_itself_with_works() {
    let w = World::new();
    assert_eq!(w.ok(&["symbolic-ref", "--short", "HEAD"]), "main\n");
    assert_eq!(
        w.ok(&["for-each-ref", "--format=%(refname:short)", "refs/heads"]),
        "main\n"
    );
    w.write(".gitignore", "target/\n");
    let o = w.ok(&["check-ignore", "-v", "target/x"]);
    assert!(o.contains(".gitignore:1:target/"), "{o}");
    w.write("h.txt", "hello\n");
    assert_eq!(
        w.ok(&["hash-object", "h.txt"]),
        "ce013625030ba8dba906f756967f9e9ca394464a\n"
    );
    assert!(w.ok(&["count-objects", "-v"]).contains("count:"));
    let wl = w.ok(&["worktree", "list"]);
    assert!(wl.contains("[main]"), "{wl}");
    assert_eq!(w.ok(&["submodule", "status"]), "");
    w.ok(&["notes", "list"]);
    w.ok(&["gc", "--auto"]);
    // diff --no-index between two files of the workspace and /tmp-like space.
    w.write("x1.txt", "a\n");
    w.write("x2.txt", "b\n");
    let o = w.git(&["diff", "--no-index", "x1.txt", "x2.txt"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("+b"));
    // archive to stdout and to a file the shim writes.
    let o = w.git(&["archive", "--format=tar", "HEAD"]);
    assert!(o.status.success() && o.stdout.len() > 512);
    w.ok(&["archive", "-o", "out.zip", "HEAD"]);
    let zip = std::fs::read(w.ws.join("out.zip")).unwrap();
    assert_eq!(&zip[..2], b"PK");
    // bisect: start, bad, good, reset.
    w.ok(&["add", ".gitignore", "h.txt"]);
    w.ok(&["commit", "-q", "-m", "two"]);
    w.ok(&["bisect", "start"]);
    w.ok(&["bisect", "bad", "HEAD"]);
    let o = w.ok(&["bisect", "good", "HEAD~1"]);
    assert!(o.contains("is the first bad commit"), "{o}");
    assert!(w.ok(&["bisect", "log"]).contains("git bisect good"));
    w.ok(&["bisect", "reset"]);
    // The writing and running forms.
    w.refused(
        &["symbolic-ref", "HEAD", "refs/heads/x"],
        "subcommand_not_allowed",
    );
    w.refused(&["worktree", "add", "../wt"], "subcommand_not_allowed");
    // git notes write like a commit message (347629f): a note is the agent's own text.
    w.ok(&["notes", "add", "-m", "reviewed"]);
    assert_eq!(w.ok(&["notes", "show"]), "reviewed\n");
    w.refused(&["gc"], "subcommand_not_allowed");
    w.refused(&["hash-object", "-w", "h.txt"], "subcommand_not_allowed");
    w.refused(
        &["archive", "--remote=https://x/y", "HEAD"],
        "option_not_allowed",
    );
    assert!(!w.root.join("wt").exists());
}

impl World {
    /// The shim with `input` on its standard input.
    fn git_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_git"))
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("AIRLOCK_WORKSPACE", &self.ws)
            .env("AIRLOCK_GIT_SOCKET", &self.socket)
            .env("AIRLOCK_SESSION_KEY", hex(&KEY))
            .env("GIT_COMMITTER_NAME", "Agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }
}

#[test]
fn patch_workflows_apply_format_patch_and_am_work_inside_the_workspace() {
    let w = World::new();
    w.write("README.md", "hello\nworld\n");
    let patch = w.ok(&["diff"]);
    w.write("p.patch", &patch);
    w.ok(&["checkout", "--", "README.md"]);
    w.ok(&["apply", "--check", "p.patch"]);
    w.ok(&["apply", "p.patch"]);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("README.md")).unwrap(),
        "hello\nworld\n"
    );
    w.ok(&["apply", "-R", "p.patch"]);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("README.md")).unwrap(),
        "hello\n"
    );
    // (the index's stat data of README.md is stale after two rewrites within a second)
    w.ok(&["reset", "-q", "--hard"]);
    w.ok(&["apply", "--index", "-p1", "p.patch"]);
    assert_eq!(w.ok(&["diff", "--cached", "--name-only"]), "README.md\n");
    w.ok(&["reset", "-q", "--hard"]);
    w.ok(&["apply", "--cached", "p.patch"]);
    assert_eq!(w.ok(&["diff", "--cached", "--name-only"]), "README.md\n");
    w.ok(&["reset", "-q", "--hard"]);
    let o = w.git_stdin(&["apply"], patch.as_bytes());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("README.md")).unwrap(),
        "hello\nworld\n"
    );
    // format-patch writes files (as the agent) and am applies them on another branch.
    w.ok(&["commit", "-q", "-am", "Add world: the (second) line"]);
    let listing = w.ok(&["format-patch", "-1", "-o", "out"]);
    assert_eq!(listing, "out/0001-Add-world-the-second-line.patch\n");
    let mbox =
        std::fs::read_to_string(w.ws.join("out/0001-Add-world-the-second-line.patch")).unwrap();
    assert!(mbox.contains("Subject: [PATCH] Add world"), "{mbox}");
    assert!(w.ok(&["format-patch", "--stdout", "-1"]).contains("+world"));
    std::fs::write(w.root.join("tmp.patch"), &mbox).unwrap();
    w.ok(&["switch", "-q", "-c", "sandbox/demo/am", "HEAD~1"]);
    w.ok(&["am", "out/0001-Add-world-the-second-line.patch"]);
    assert_eq!(
        w.ok(&["log", "-1", "--format=%s"]),
        "Add world: the (second) line\n"
    );
    // am --abort and --skip after a patch that does not apply.
    let o = w.git(&["am", "out/0001-Add-world-the-second-line.patch"]);
    assert!(!o.status.success());
    w.ok(&["am", "--abort"]);
    assert!(
        !w.git(&["am", "out/0001-Add-world-the-second-line.patch"])
            .status
            .success()
    );
    w.ok(&["am", "--skip"]);
    assert_eq!(w.ok(&["status", "--porcelain", "--untracked-files=no"]), "");
}

#[test]
fn patches_that_escape_the_work_tree_or_touch_git_are_refused() {
    let w = World::new();
    let dotgit = "diff --git a/.git/config b/.git/config\nnew file mode 100644\n--- /dev/null\n+++ b/.git/config\n@@ -0,0 +1 @@\n+[core]\n";
    w.write("evil.patch", dotgit);
    w.refused(&["apply", "evil.patch"], "outside_workspace");
    w.refused(&["am", "evil.patch"], "outside_workspace");
    let upper = dotgit.replace(".git/", ".GIT/");
    let o = w.git_stdin(&["apply"], upper.as_bytes());
    assert!(String::from_utf8_lossy(&o.stderr).contains("(outside_workspace)"));
    w.refused(&["apply", "--unsafe-paths", "evil.patch"], "option_refused");
    w.refused(
        &["apply", "--directory=.git", "evil.patch"],
        "outside_workspace",
    );
    // A patch that climbs out of the work tree, or through a symlink, is refused by git.
    let out = "diff --git a/../escaped.txt b/../escaped.txt\nnew file mode 100644\n--- /dev/null\n+++ b/../escaped.txt\n@@ -0,0 +1 @@\n+x\n";
    w.write("out.patch", out);
    assert!(!w.git(&["apply", "out.patch"]).status.success());
    assert!(!w.root.join("escaped.txt").exists());
    std::os::unix::fs::symlink(&w.root, w.ws.join("link")).unwrap();
    let via = "diff --git a/link/escaped.txt b/link/escaped.txt\nnew file mode 100644\n--- /dev/null\n+++ b/link/escaped.txt\n@@ -0,0 +1 @@\n+x\n";
    w.write("via.patch", via);
    assert!(!w.git(&["apply", "via.patch"]).status.success());
    assert!(!w.root.join("escaped.txt").exists());
    // format-patch never writes through the git API.
    w.refused(
        &[
            "format-patch",
            "--output-directory=/tmp/x",
            "--stdout",
            "-1",
        ],
        "option_refused",
    );
}

impl World {
    /// Point `origin` at `url` in the hidden git dir, as the operator's clone would have it.
    fn set_origin(&self, url: &str) {
        let git_dir = self.root.join("hidden/repo.git");
        plain_git(
            &self.root,
            &[
                "--git-dir",
                git_dir.to_str().unwrap(),
                "remote",
                "set-url",
                "origin",
                url,
            ],
        );
    }
}

#[test]
fn ssh_origins_are_their_https_repository_and_shown_unchanged() {
    for url in [
        "git@github.com:acme/app.git",
        "git@github.com:acme/app",
        "ssh://git@github.com/acme/app",
        "ssh://git@github.com/acme/app.git",
    ] {
        let w = World::new();
        w.set_origin(url);
        assert_eq!(w.ok(&["remote", "get-url", "origin"]), format!("{url}\n"));
        assert!(w.ok(&["remote", "-v"]).contains(url));
        let listed = w.ok(&["ls-remote", "origin"]);
        assert!(listed.contains("refs/heads/main"), "{url}: {listed}");
        w.ok(&["fetch", "origin"]);
        w.ok(&["pull", "origin", "main"]);
        w.ok(&["switch", "-q", "-c", "sandbox/demo/ssh"]);
        w.write("s.txt", "ssh\n");
        w.ok(&["add", "s.txt"]);
        w.ok(&["commit", "-q", "-m", "over ssh origin"]);
        w.ok(&["push", "-u", "origin", "sandbox/demo/ssh"]);
        assert_eq!(
            plain_git(&w.upstream, &["rev-parse", "refs/heads/sandbox/demo/ssh"]),
            w.ok(&["rev-parse", "HEAD"]),
            "{url}"
        );
        // The specific refusals are no longer hidden behind the URL.
        w.refused(&["push", "origin", "HEAD:main"], "branch_protected");
        w.ok(&["tag", "v1"]);
        w.refused(&["push", "origin", "v1"], "tag_push");
        assert_eq!(w.ok(&["config", "remote.origin.url"]), format!("{url}\n"));
    }
}

#[test]
fn ssh_origins_of_unauthorized_repositories_stay_refused() {
    for (url, says) in [
        (
            "git@github.com:evil/app.git",
            "repositories = [\"github.com/evil/app\"]",
        ),
        ("ssh://git@evil.example/acme/app", "evil.example/acme/app"),
        (
            "git@github.com:acme/app/extra.git",
            "git remote set-url origin https://",
        ),
        (
            "ssh://git@github.com:2222/acme/app",
            "git remote set-url origin https://",
        ),
    ] {
        let w = World::new();
        w.set_origin(url);
        for args in [
            &["fetch", "origin"][..],
            &["ls-remote", "origin"],
            &["push", "origin", "HEAD:sandbox/demo/x"],
        ] {
            let o = w.git(args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("(repository_not_authorized)"),
                "{url} {args:?}: {err}"
            );
            assert!(err.contains(says), "{url} {args:?}: {err}");
        }
    }
}

#[test]
fn a_push_outside_the_sandbox_namespace_says_the_command_that_works_and_it_does() {
    let w = World::new();
    w.ok(&["switch", "-q", "-c", "fix/login"]);
    w.write("l.txt", "login\n");
    w.ok(&["add", "l.txt"]);
    w.ok(&["commit", "-q", "-m", "fix login"]);
    for args in [&["push"][..], &["push", "-u", "origin", "fix/login"]] {
        let o = w.git(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains("(branch_not_allowed)"), "{err}");
        assert!(
            !err.contains("main"),
            "a protected branch is offered: {err}"
        );
        let cmd = err
            .split("instead: ")
            .nth(1)
            .expect("a command to run")
            .trim()
            .to_owned();
        assert_eq!(cmd, "git push origin fix/login:sandbox/demo/fix/login");
    }
    // The command it names works.
    w.ok(&["push", "origin", "fix/login:sandbox/demo/fix/login"]);
    assert_eq!(
        plain_git(
            &w.upstream,
            &["rev-parse", "refs/heads/sandbox/demo/fix/login"]
        ),
        w.ok(&["rev-parse", "HEAD"])
    );
    let o = w.git(&["push", "origin", "HEAD:main"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(branch_protected)"), "{err}");
    assert!(
        err.contains("git push origin HEAD:sandbox/demo/main"),
        "{err}"
    );
}

#[test]
fn bisect_run_runs_the_agents_command_as_the_agent_in_the_shim() {
    let w = World::new();
    for (i, text) in ["ok", "ok", "bad", "bad"].iter().enumerate() {
        w.write("f.txt", &format!("{text} {i}\n"));
        w.ok(&["add", "f.txt"]);
        w.ok(&["commit", "-q", "-m", &format!("step {i}")]);
    }
    w.ok(&["bisect", "start", "HEAD", "HEAD~3"]);
    // The command writes a marker as the agent: it ran in the shim's process tree.
    let marker = w.root.join("ran-by-agent");
    let script = format!("echo x >> {}; ! grep -q bad f.txt", marker.display());
    let out = w.ok(&["bisect", "run", "sh", "-c", &script]);
    assert!(out.contains("is the first bad commit"), "{out}");
    assert!(out.contains("step 2"), "{out}");
    assert!(marker.exists());
    w.ok(&["bisect", "reset"]);
    // Sent to the git API directly, `bisect run` is refused.
    use airlock_git_shim::client::{self, Outcome};
    let inv = airlock_git_shim::prepare::invocation(
        vec!["bisect".into(), "run".into(), "true".into()],
        String::new(),
        None,
        false,
        None,
    );
    let Outcome::Denied(d) = client::run(
        &w.socket,
        &SessionKey::from_bytes(KEY),
        &inv,
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .unwrap() else {
        panic!("bisect run accepted by the git API")
    };
    assert_eq!(d.reason, "subcommand_not_allowed");
}

/// Issue 17 item 3: the operator's identity is the default (git's system layer), so the
/// first commit works; the repository's config, `-c` and the agent's environment win.
#[test]
fn the_operators_identity_is_the_default_commit_identity_and_the_agents_own_wins() {
    let id = airlock_git_api::identity::DefaultIdentity::new(
        Some("Op \"the\" Erator"),
        Some("op@example.org"),
    )
    .unwrap()
    .unwrap();
    let w = World::with_system_config(Some(id.path()));
    let last = |w: &World| {
        let o = w.anonymous(&["log", "-1", "--format=%an <%ae> | %cn <%ce>"]);
        String::from_utf8(o.stdout).unwrap()
    };
    let o = w.anonymous(&["commit", "--allow-empty", "-m", "first"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        last(&w),
        "Op \"the\" Erator <op@example.org> | Op \"the\" Erator <op@example.org>\n"
    );
    let o = w.anonymous(&["config", "user.name"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "Op \"the\" Erator\n");
    // The agent's own identity in the repository's config wins over the default.
    assert!(
        w.anonymous(&["config", "user.name", "Agent Smith"])
            .status
            .success()
    );
    assert!(
        w.anonymous(&["commit", "--allow-empty", "-m", "second"])
            .status
            .success()
    );
    assert_eq!(
        last(&w),
        "Agent Smith <op@example.org> | Agent Smith <op@example.org>\n"
    );
    // So do -c and the environment.
    let o = w.anonymous(&[
        "-c",
        "user.email=c@example.org",
        "commit",
        "--allow-empty",
        "-m",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        last(&w),
        "Agent Smith <c@example.org> | Agent Smith <c@example.org>\n"
    );
    w.ok(&["commit", "--allow-empty", "-m", "4"]);
    assert_eq!(
        last(&w),
        "Agent <agent@example.invalid> | Agent <agent@example.invalid>\n"
    );
    drop(id);
}

/// `GIT_EDITOR=true git commit --amend` (or EDITOR=:) keeps the message, as natively; an
/// editor that would open something is still refused with what to pass instead.
#[test]
fn an_agent_editor_of_true_keeps_the_prepared_message() {
    let w = World::new();
    w.write("a.txt", "a\n");
    w.ok(&["add", "a.txt"]);
    w.ok(&["commit", "-q", "-m", "keep me"]);
    w.write("a.txt", "b\n");
    w.ok(&["add", "a.txt"]);
    for var in [("GIT_EDITOR", "true"), ("EDITOR", ":")] {
        let o = w.git_with(var, &["commit", "-q", "--amend"]);
        assert!(
            o.status.success(),
            "{var:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(w.ok(&["log", "-1", "--format=%s"]), "keep me\n");
    }
    let o = w.git_with(("GIT_EDITOR", "vim"), &["commit", "-q", "--amend"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("airlock refused this (message_required)"));
}

/// Outside the workspace the native git gets the operator's default identity too (the
/// entrypoint hands AIRLOCK_GIT_USER_NAME/EMAIL to the agent): a scratch repository's
/// first commit works; its own user.name wins.
#[test]
fn a_native_git_outside_the_workspace_has_the_operators_default_identity() {
    let w = World::new();
    let scratch = w.root.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let git = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_git"))
            .current_dir(&scratch)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &scratch)
            .env("AIRLOCK_WORKSPACE", &w.ws)
            .env("AIRLOCK_GIT_USER_NAME", "Op Erator")
            .env("AIRLOCK_GIT_USER_EMAIL", "op@example.org")
            .args(args)
            .output()
            .unwrap()
    };
    assert!(git(&["init", "-q", "-b", "main"]).status.success());
    let o = git(&["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = git(&["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "Op Erator <op@example.org>\n"
    );
    assert!(git(&["config", "user.name", "Own"]).status.success());
    assert!(
        git(&["commit", "-q", "--allow-empty", "-m", "y"])
            .status
            .success()
    );
    let o = git(&["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "Own <op@example.org>\n");
}

/// `git apply --index` after a file was changed and changed back: natively the agent's
/// `git status` would have refreshed the index; the git API refreshes it before applying.
#[test]
fn apply_index_after_a_file_changed_back_works() {
    let w = World::new();
    w.write("f.txt", "a\n");
    w.ok(&["add", "f.txt"]);
    w.ok(&["commit", "-q", "-m", "f"]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    w.write("f.txt", "a\nb\n");
    let patch = w.ok(&["diff"]);
    w.write("f.txt", "a\n");
    w.write("change.patch", &patch);
    w.ok(&["status", "--short"]);
    w.ok(&["apply", "--index", "change.patch"]);
    assert_eq!(w.ok(&["diff", "--cached", "--name-only"]), "f.txt\n");
}
