//! Attacks through a repository the agent makes inside the workspace, from the agent's seat:
//! the agent runs the image's own `/usr/bin/git` as itself, so it can create `sub/.git` with
//! any configuration (a clean filter, fsmonitor, hooks, a pager, an editor, textconv, ...) and
//! `.gitattributes` naming those drivers. Whatever git the git API runs on the workspace must
//! never enter such a repository: every program the trap configures appends a line to a
//! marker file, and no request the agent can send may make one appear.
//!
//! The agent's `~/.gitconfig` is its own too: every world here also has a home whose
//! `.gitconfig` names the same traps (and includes a file that does), which the git API
//! reads as git's global layer kept to the keys the agent may write (`crate::global`), so
//! every row is walked against it as well.
//!
//! The trap is armed: the test first shows that the git the git API used to run (the
//! protected configuration alone) does write the marker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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

const KEY: [u8; 32] = [42; 32];
const GIT: &str = "/usr/bin/git";

/// Every hook name git runs (a trap script under each name).
const HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// The agent's own git: the image's `/usr/bin/git` with no protection at all.
fn agent_git(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(GIT)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn executable(path: &Path, text: &str) {
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The workspace, its hidden git dir, a local upstream for github.com/acme/app, the git API
/// serving them, and the marker every trap writes to.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    git_dir: PathBuf,
    socket: PathBuf,
    mark: PathBuf,
    /// The commit the untracked nested repository `nest` has checked out.
    nest_head: String,
}

/// How the world's workspace starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Upstream records `sub` as a gitlink (a submodule nobody initialised); the agent has
    /// made `sub/.git` inside it, `nest/.git` beside it, a `.git` file pointing at nest's
    /// from `linked/`, and an embedded bare repository in `tools/`.
    Trapped,
    /// A plain upstream (no gitlink); the agent made `sub/.git` (the attack as reported).
    Plain,
}

impl World {
    fn new(start: Start) -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mark = root.join("MARK");
        let upstream = root.join("upstream.git");
        agent_git(
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
        agent_git(
            &root,
            &[
                "clone",
                "-q",
                upstream.to_str().unwrap(),
                seed.to_str().unwrap(),
            ],
        );
        write(&seed.join("README.md"), "hello\n");
        write(&seed.join(".github/workflows/ci.yml"), "on: push\n");
        write(&seed.join("src/lib.rs"), "pub fn f() {}\n");
        if start == Start::Trapped {
            // An honest submodule upstream: a gitlink, never initialised in the workspace.
            let lib = root.join("sublib");
            std::fs::create_dir(&lib).unwrap();
            agent_git(&lib, &["init", "-q", "-b", "main"]);
            write(&lib.join("lib.txt"), "lib\n");
            agent_git(&lib, &["add", "-A"]);
            agent_git(&lib, &["commit", "-q", "-m", "lib"]);
            agent_git(&seed, &["clone", "-q", lib.to_str().unwrap(), "sub"]);
            agent_git(&seed, &["add", "sub"]);
            // Registered, so that `git submodule status` looks at it.
            write(
                &seed.join(".gitmodules"),
                &format!(
                    "[submodule \"sub\"]\n\tpath = sub\n\turl = {}\n",
                    lib.display()
                ),
            );
        }
        agent_git(&seed, &["add", "-A"]);
        agent_git(&seed, &["commit", "-q", "-m", "seed"]);
        agent_git(&seed, &["push", "-q", "origin", "main"]);
        agent_git(&seed, &["switch", "-q", "-c", "other"]);
        write(&seed.join("src/other.rs"), "// other\n");
        agent_git(&seed, &["add", "-A"]);
        agent_git(&seed, &["commit", "-q", "-m", "other"]);
        agent_git(&seed, &["push", "-q", "origin", "other"]);

        let ws = root.join("workspace");
        agent_git(
            &root,
            &[
                "clone",
                "-q",
                upstream.to_str().unwrap(),
                ws.to_str().unwrap(),
            ],
        );
        agent_git(&ws, &["branch", "-q", "other", "origin/other"]);
        let hidden = root.join("hidden");
        std::fs::create_dir(&hidden).unwrap();
        let git_dir = hidden.join("repo.git");
        std::fs::rename(ws.join(".git"), &git_dir).unwrap();
        agent_git(
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

        // The traps, as the agent plants them with its own git.
        let run = root.join("trap-run");
        executable(
            &run,
            &format!(
                "#!/bin/sh\necho \"ran: $0 $*\" >> {}\nexit 0\n",
                mark.display()
            ),
        );
        let filter = root.join("trap-filter");
        executable(
            &filter,
            &format!(
                "#!/bin/sh\necho \"filter: $*\" >> {}\nexec cat\n",
                mark.display()
            ),
        );
        let hooks = root.join("trap-hooks");
        for h in HOOKS {
            executable(
                &hooks.join(h),
                &format!("#!/bin/sh\necho \"hook {h}\" >> {}\n", mark.display()),
            );
        }
        let nest_head = trap_repo(&ws.join("nest"), &run, &filter, &hooks);
        trap_repo(&ws.join("sub"), &run, &filter, &hooks);
        // A `.git` file naming nest's repository.
        write(
            &ws.join("linked/.git"),
            &format!("gitdir: {}\n", ws.join("nest/.git").display()),
        );
        write(&ws.join("linked/x.txt"), "linked\n");
        // An embedded bare repository (HEAD, objects/, refs/, config).
        bare_trap(&ws.join("tools"), &run, &hooks);
        // The outer work tree names the trap's drivers for every path.
        write(&ws.join(".gitattributes"), "* filter=x diff=x merge=x\n");
        // The agent's home: its .gitconfig defines the same drivers and programs.
        let home = root.join("home");
        let (r, f, h) = (run.display(), filter.display(), hooks.display());
        let traps = format!(
            "[core]\n\tfsmonitor = {r}\n\thooksPath = {h}\n\tpager = {r}\n\teditor = {r}\n\
             \tsshCommand = {r}\n\taskPass = {r}\n\tgitProxy = {r}\n\
             [diff \"x\"]\n\ttextconv = {r}\n\tcommand = {r}\n\
             [merge \"x\"]\n\tdriver = {r}\n\
             [filter \"x\"]\n\tclean = {f}\n\tsmudge = {f}\n\trequired = true\n\
             [credential]\n\thelper = !{r}\n\
             [gpg]\n\tprogram = {r}\n\
             [commit]\n\tgpgSign = true\n\
             [remote \"upstream\"]\n\tuploadpack = {r}\n\treceivepack = {r}\n\
             [alias]\n\tst = !{r}\n"
        );
        write(&root.join("included.gitconfig"), &traps);
        write(
            &home.join(".gitconfig"),
            &format!(
                "[user]\n\tname = Agent Home\n{traps}[include]\n\tpath = {}\n",
                root.join("included.gitconfig").display()
            ),
        );
        let scratch = root.join("scratch");
        std::fs::create_dir(&scratch).unwrap();

        let mut policy = airlock_policy::GitPolicy::defaults_for("demo");
        policy.repositories = vec!["github.com/acme/app".into()];
        let env = GitEnv {
            git: GIT.into(),
            git_dir: git_dir.clone(),
            work_tree: ws.clone(),
            home: root.join("empty-home"),
            proxy_url: "http://127.0.0.1:9".into(),
            ca_file: None,
            ca_dir: None,
            test_upstreams: vec![
                ("github.com/acme/app".into(), upstream.clone()),
                ("github.com/other/app".into(), upstream),
            ],
            system_config: None,
        };
        let socket = root.join("git.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let network = airlock_policy::Policy::parse(
            "[sandbox]\nname = \"demo\"\n[network]\nallow = [\"github.com\"]\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let server = Arc::new(
            Server::new(
                env,
                uid,
                PushRules::new(&policy, Some("main")).unwrap(),
                Visibility::new(&policy, "demo", Some("main")).unwrap(),
                Verifier::new(SessionKey::from_bytes(KEY)),
                16,
            )
            .with_agent_home(AgentHome::new(home, uid, GIT.into()).with_scratch(scratch))
            .with_network(network),
        );
        std::thread::spawn(move || server.serve(&listener));
        World {
            _dir: dir,
            root,
            ws,
            git_dir,
            socket,
            mark,
            nest_head,
        }
    }

    /// What the marker holds (empty: nothing ran), and the marker removed.
    fn take_mark(&self) -> String {
        let text = std::fs::read_to_string(&self.mark).unwrap_or_default();
        let _ = std::fs::remove_file(&self.mark);
        text
    }

    /// One request through the git API, as the shim sends it.
    fn call(&self, argv: &[&str], stdin: Option<&[u8]>) -> Reply {
        self.call_in("", argv, stdin)
    }

    fn call_in(&self, cwd: &str, argv: &[&str], stdin: Option<&[u8]>) -> Reply {
        let mut env = BTreeMap::new();
        for (k, v) in [
            ("GIT_AUTHOR_NAME", "Agent"),
            ("GIT_AUTHOR_EMAIL", "agent@example.invalid"),
            ("GIT_COMMITTER_NAME", "Agent"),
            ("GIT_COMMITTER_EMAIL", "agent@example.invalid"),
        ] {
            env.insert(k.to_owned(), v.to_owned());
        }
        let body = Invocation {
            version: 1,
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: cwd.to_owned(),
            env,
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

    /// The hidden index's entries (`ls-files --stage`), read with the operator's git.
    fn index(&self) -> String {
        agent_git(
            &self.root,
            &[
                "--git-dir",
                self.git_dir.to_str().unwrap(),
                "ls-files",
                "--stage",
            ],
        )
    }

    /// The object a revision names (`HEAD:sub`: the commit a gitlink records).
    fn gitlink(&self, rev: &str) -> String {
        agent_git(
            &self.root,
            &[
                "--git-dir",
                self.git_dir.to_str().unwrap(),
                "rev-parse",
                rev,
            ],
        )
    }

    fn head(&self) -> String {
        agent_git(
            &self.root,
            &[
                "--git-dir",
                self.git_dir.to_str().unwrap(),
                "rev-parse",
                "HEAD",
            ],
        )
    }

    /// The hidden git dir's own configuration file, as text.
    fn config(&self) -> String {
        std::fs::read_to_string(self.git_dir.join("config")).unwrap()
    }
}

#[derive(Debug, Default)]
struct Reply {
    exit: Option<i32>,
    denied: Option<Denied>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Reply {
    fn reason(&self) -> Option<&str> {
        self.denied.as_ref().map(|d| d.reason.as_str())
    }

    fn outcome(&self) -> String {
        match (&self.exit, &self.denied) {
            (_, Some(d)) => format!("denied {}: {}", d.reason, d.message),
            (Some(c), None) => format!(
                "exit {c}: {}",
                String::from_utf8_lossy(&self.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ),
            _ => "no answer".into(),
        }
    }
}

/// A nested repository at `dir` whose every program-valued setting is a trap, with a commit
/// and then a modified file (so that a status inside it has content to filter). Its HEAD.
fn trap_repo(dir: &Path, run: &Path, filter: &Path, hooks: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    agent_git(dir, &["init", "-q", "-b", "main"]);
    write(&dir.join(".gitattributes"), "* filter=x diff=x merge=x\n");
    write(&dir.join("f.txt"), "one\n");
    agent_git(dir, &["add", "-A"]);
    agent_git(dir, &["commit", "-q", "-m", "trap"]);
    let head = agent_git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
    for h in HOOKS {
        std::fs::copy(hooks.join(h), dir.join(".git/hooks").join(h)).unwrap();
    }
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(".git/config"))
        .unwrap();
    let (r, f, h) = (run.display(), filter.display(), hooks.display());
    write!(
        config,
        "[core]\n\tfsmonitor = {r}\n\thooksPath = {h}\n\tpager = {r}\n\teditor = {r}\n\
         \tsshCommand = {r}\n\taskPass = {r}\n\tgitProxy = {r}\n\talternateRefsCommand = {r}\n\
         [sequence]\n\teditor = {r}\n\
         [diff]\n\texternal = {r}\n\tsubmodule = diff\n\
         [diff \"x\"]\n\ttextconv = {r}\n\tcommand = {r}\n\
         [merge \"x\"]\n\tdriver = {r}\n\
         [filter \"x\"]\n\tclean = {f}\n\tsmudge = {f}\n\trequired = true\n\
         [credential]\n\thelper = !{r}\n\
         [gpg]\n\tprogram = {r}\n\
         [commit]\n\tgpgSign = true\n\
         [uploadpack]\n\tpackObjectsHook = {r}\n\
         [status]\n\tsubmoduleSummary = true\n\
         [submodule]\n\trecurse = true\n\
         [pager]\n\tstatus = {r}\n\tdiff = {r}\n\
         [alias]\n\tstatus = !{r}\n"
    )
    .unwrap();
    // Modified content under a clean filter: a status inside runs it.
    write(&dir.join("f.txt"), "two\n");
    head
}

/// An embedded bare repository at `dir`: the shape git recognises when someone later runs
/// git inside it, with a trap configuration.
fn bare_trap(dir: &Path, run: &Path, hooks: &Path) {
    agent_git(
        dir.parent().unwrap(),
        &["init", "-q", "--bare", dir.to_str().unwrap()],
    );
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("config"))
        .unwrap();
    write!(
        config,
        "[core]\n\tfsmonitor = {}\n\thooksPath = {}\n",
        run.display(),
        hooks.display()
    )
    .unwrap();
}

/// One request: its argv and its standard input.
type Request = (Vec<String>, Option<Vec<u8>>);

/// Requests that exercise one row of the command table against the trap. Every row must be
/// here: a row added to the table without its requests fails the test that iterates them.
fn requests(sub: &str, w: &World) -> Option<Vec<Request>> {
    let v = |s: &[&str]| -> Request { (s.iter().map(|x| (*x).to_owned()).collect(), None) };
    let readme_patch = b"diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-hello\n+hello there\n".to_vec();
    let gitlink_patch = format!(
        "diff --git a/planted b/planted\nnew file mode 160000\nindex 0000000..{h}\n--- /dev/null\n+++ b/planted\n@@ -0,0 +1 @@\n+Subproject commit {h}\n",
        h = w.nest_head
    )
    .into_bytes();
    let with_stdin = |s: &[&str], stdin: &[u8]| -> Request {
        (
            s.iter().map(|x| (*x).to_owned()).collect(),
            Some(stdin.to_vec()),
        )
    };
    let mbox = {
        let mut m = b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: Agent <agent@example.invalid>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: [PATCH] readme\n\n---\n".to_vec();
        m.extend(&readme_patch);
        m.extend(b"-- \n2.47.0\n\n");
        m
    };
    Some(match sub {
        "status" => vec![
            v(&["status"]),
            v(&["status", "--porcelain=v2"]),
            v(&["status", "--ignore-submodules=none"]),
            v(&["status", "-uall", "--ignored"]),
            v(&["-c", "diff.ignoreSubmodules=none", "status"]),
            v(&["-c", "status.submoduleSummary=true", "status"]),
        ],
        "diff" => vec![
            v(&["diff"]),
            v(&["diff", "--submodule=diff"]),
            v(&["diff", "--submodule=log"]),
            v(&["diff", "--ignore-submodules=none", "--submodule=diff"]),
            v(&["diff", "HEAD", "--stat"]),
            v(&["diff", "--cached", "--submodule=diff"]),
            v(&["-c", "diff.ignoreSubmodules=none", "diff", "--", "sub"]),
        ],
        "log" => vec![
            v(&["log", "-p", "-1"]),
            v(&["log", "-p", "-1", "--submodule=diff"]),
            v(&["log", "--stat", "--ignore-submodules=none"]),
        ],
        "show" => vec![
            v(&["show", "HEAD"]),
            v(&["show", "--submodule=diff"]),
            v(&["show", "--ignore-submodules=none", "HEAD"]),
        ],
        "diff-tree" => vec![
            v(&["diff-tree", "-p", "-r", "--root", "HEAD"]),
            v(&["diff-tree", "--submodule=diff", "-p", "HEAD", "other"]),
        ],
        "diff-index" => vec![
            v(&["diff-index", "HEAD"]),
            v(&["diff-index", "-p", "HEAD"]),
            v(&["diff-index", "--quiet", "HEAD", "--"]),
            v(&["diff-index", "--ignore-submodules=none", "-p", "HEAD"]),
        ],
        "diff-files" => vec![
            v(&["diff-files"]),
            v(&["diff-files", "-p"]),
            v(&["diff-files", "--ignore-submodules=none", "-p"]),
            v(&["diff-files", "--submodule=diff"]),
        ],
        "shortlog" => vec![v(&["shortlog", "-s", "HEAD"])],
        "rev-list" => vec![v(&["rev-list", "HEAD", "--", "sub"])],
        "blame" => vec![v(&["blame", "README.md"]), v(&["blame", "sub"])],
        "grep" => vec![
            v(&["grep", "-n", "one"]),
            v(&["grep", "--untracked", "one"]),
            v(&["grep", "--cached", "hello"]),
        ],
        "ls-files" => vec![
            v(&["ls-files", "-m"]),
            v(&["ls-files", "-o"]),
            v(&["ls-files", "-o", "--directory"]),
            v(&["ls-files", "--eol"]),
        ],
        "ls-tree" => vec![v(&["ls-tree", "-r", "HEAD"])],
        "rev-parse" => vec![
            v(&["rev-parse", "HEAD"]),
            v(&["rev-parse", "--show-toplevel"]),
        ],
        "show-ref" => vec![v(&["show-ref"])],
        "merge-base" => vec![v(&["merge-base", "HEAD", "other"])],
        "describe" => vec![
            v(&["describe", "--always", "--dirty"]),
            v(&["describe", "--always", "--broken"]),
        ],
        "cat-file" => vec![v(&["cat-file", "-p", "HEAD"])],
        "name-rev" => vec![v(&["name-rev", "HEAD"])],
        "cherry" => vec![v(&["cherry", "other", "HEAD"])],
        "reflog" => vec![v(&["reflog", "-3"])],
        "version" => vec![v(&["version"])],
        "add" => vec![
            v(&["add", "README.md"]),
            v(&["add", "-u"]),
            v(&["add", "--renormalize", "."]),
            v(&["add", "-A"]),
            v(&["add", "sub"]),
            v(&["add", "nest"]),
            v(&["add", "linked"]),
            v(&["add", "-f", "tools"]),
            v(&["add", "."]),
        ],
        "rm" => vec![
            v(&["rm", "-n", "-r", "sub"]),
            v(&["rm", "-r", "sub"]),
            v(&["rm", "-f", "-r", "sub"]),
            v(&["rm", "-r", "-f", "."]),
            v(&["rm", "-q", "README.md"]),
            v(&["rm", "--cached", "sub"]),
        ],
        "mv" => vec![v(&["mv", "-n", "sub", "sub2"]), v(&["mv", "sub", "sub2"])],
        "restore" => vec![
            v(&["restore", "--staged", "sub"]),
            v(&["restore", "sub"]),
            v(&["restore", "."]),
        ],
        "reset" => vec![
            v(&["reset"]),
            v(&["reset", "HEAD", "--", "sub"]),
            v(&["reset", "--hard"]),
        ],
        "commit" => vec![
            v(&["commit", "--dry-run"]),
            v(&["commit", "-a", "-m", "all"]),
            v(&["commit", "-m", "path", "--", "sub"]),
            v(&["commit", "--allow-empty", "-m", "empty"]),
            v(&["commit", "--amend", "--no-edit"]),
            v(&["commit", "-a", "-v", "-m", "verbose"]),
        ],
        "checkout" => vec![
            v(&["checkout", "HEAD", "--", "sub"]),
            v(&["checkout", "-b", "co"]),
            v(&["checkout", "other"]),
            v(&["checkout", "-f", "main"]),
        ],
        "switch" => vec![
            v(&["switch", "-c", "sw"]),
            v(&["switch", "--detach", "other"]),
            v(&["switch", "-f", "main"]),
        ],
        "branch" => vec![v(&["branch", "-v"]), v(&["branch", "b1"])],
        "tag" => vec![v(&["tag", "t1"]), v(&["tag", "-a", "t2", "-m", "x"])],
        "merge" => vec![v(&["merge", "--no-edit", "other"])],
        "rebase" => vec![v(&["rebase", "other"])],
        "cherry-pick" => vec![v(&["cherry-pick", "other"])],
        "revert" => vec![v(&["revert", "--no-edit", "HEAD"])],
        "stash" => vec![
            v(&["stash"]),
            v(&["stash", "list"]),
            v(&["stash", "show", "-p", "--submodule=diff"]),
            v(&["stash", "pop"]),
            v(&["stash", "push", "-u"]),
            v(&["stash", "apply"]),
            v(&["stash", "push", "-a"]),
            v(&["stash", "pop"]),
        ],
        "clean" => vec![v(&["clean", "-n", "-d"]), v(&["clean", "-f", "-d"])],
        "config" => vec![
            v(&["config", "--list"]),
            v(&["config", "--global", "--list"]),
            v(&["config", "--global", "user.email", "agent@example.invalid"]),
        ],
        "remote" => vec![
            v(&["remote", "-v"]),
            v(&["remote", "show", "origin"]),
            v(&[
                "remote",
                "add",
                "upstream",
                "https://github.com/other/app.git",
            ]),
            v(&["fetch", "upstream"]),
            v(&["ls-remote", "upstream"]),
            v(&["pull", "--no-rebase", "upstream", "main"]),
            v(&[
                "remote",
                "set-url",
                "upstream",
                "git@github.com:other/app.git",
            ]),
            v(&["fetch", "upstream"]),
            v(&["remote", "rename", "upstream", "theirs"]),
            v(&["remote", "remove", "theirs"]),
        ],
        "fetch" => vec![v(&["fetch", "origin"]), v(&["fetch"])],
        "pull" => vec![v(&["pull", "--no-rebase", "origin", "other"])],
        "ls-remote" => vec![v(&["ls-remote", "origin"])],
        "symbolic-ref" => vec![v(&["symbolic-ref", "HEAD"])],
        "for-each-ref" => vec![v(&["for-each-ref"])],
        "check-ignore" => vec![v(&["check-ignore", "-v", "-n", "sub/f.txt"])],
        "count-objects" => vec![v(&["count-objects", "-v"])],
        "worktree" => vec![v(&["worktree", "list"])],
        "submodule" => vec![
            v(&["submodule"]),
            v(&["submodule", "status"]),
            v(&["submodule", "status", "--cached"]),
        ],
        "bisect" => vec![
            v(&["bisect", "start", "HEAD", "HEAD"]),
            v(&["bisect", "start"]),
            v(&["bisect", "bad"]),
            v(&["bisect", "reset"]),
        ],
        "notes" => vec![v(&["notes", "list"])],
        "archive" => vec![
            v(&["archive", "HEAD"]),
            v(&["archive", "--format=zip", "HEAD"]),
        ],
        "gc" => vec![v(&["gc", "--auto"])],
        "apply" => vec![
            with_stdin(&["apply", "--check"], &readme_patch),
            with_stdin(&["apply", "--index"], &readme_patch),
            with_stdin(&["apply", "--cached"], &gitlink_patch),
            with_stdin(&["apply", "-3"], &readme_patch),
        ],
        "am" => vec![with_stdin(&["am"], &mbox), v(&["am", "--abort"])],
        "format-patch" => vec![
            v(&["format-patch", "--stdout", "-1"]),
            v(&["format-patch", "--stdout", "-1", "--submodule=diff"]),
        ],
        "push" => vec![
            v(&["push", "origin", "HEAD:sandbox/demo/x"]),
            v(&["push", "--dry-run", "origin", "HEAD:sandbox/demo/y"]),
        ],
        _ => return None,
    })
}

/// Shown at least once per row: a row none of whose requests ran git proves nothing.
fn ran(r: &Reply) -> bool {
    r.exit.is_some()
}

/// The trap is armed: the git API's old command line (the protected configuration on the
/// command line, nothing pinned after it) runs the nested repository's clean filter on a
/// plain `git status`, as the agent's attack did.
#[test]
fn the_trap_is_armed() {
    let w = World::new(Start::Trapped);
    let out = Command::new(GIT)
        .current_dir(&w.ws)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &w.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .arg(format!("--git-dir={}", w.git_dir.display()))
        .arg(format!("--work-tree={}", w.ws.display()))
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "submodule.recurse=false",
            "-c",
            "diff.external=",
            "status",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mark = w.take_mark();
    assert!(
        mark.contains("filter:"),
        "plain git status did not run the nested clean filter: {mark:?}"
    );
}

/// Every subcommand the command table allows, run through the real git API in its everyday
/// forms and the forms that ask for submodules (`--ignore-submodules=none`,
/// `--submodule=diff`, `-c diff.ignoreSubmodules=none`, `--recurse-submodules`), against a
/// workspace holding a gitlink with a trap repository inside it, an untracked trap
/// repository, a `.git` file and an embedded bare repository: nothing the traps configure
/// ever runs.
#[test]
fn no_allowed_subcommand_enters_a_nested_repository() {
    let mut ran_programs = Vec::new();
    let mut silent_rows = Vec::new();
    let mut missing = Vec::new();
    for sub in airlock_git_api::argv::subcommands() {
        let w = World::new(Start::Trapped);
        let Some(reqs) = requests(sub, &w) else {
            missing.push(sub);
            continue;
        };
        let mut any_ran = false;
        let mut forms = reqs;
        // Every row that takes --recurse-submodules in git is asked for it too.
        forms.push((
            vec![sub.to_owned(), "--recurse-submodules".to_owned()],
            None,
        ));
        forms.push((
            vec![sub.to_owned(), "--recurse-submodules=yes".to_owned()],
            None,
        ));
        for (argv, stdin) in &forms {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let r = w.call(&argv, stdin.as_deref());
            any_ran |= ran(&r);
            // A nested repository's .git moved into the hidden git dir (`git rm` absorbs
            // it) would be the operator's .git/modules on the host.
            if w.git_dir.join("modules").exists() {
                ran_programs.push(format!(
                    "git {}: {}\n    moved a nested .git into the hidden git dir",
                    argv.join(" "),
                    r.outcome()
                ));
                let _ = std::fs::remove_dir_all(w.git_dir.join("modules"));
            }
            let mark = w.take_mark();
            if !mark.is_empty() {
                ran_programs.push(format!(
                    "git {}: {}\n    ran: {}",
                    argv.join(" "),
                    r.outcome(),
                    mark.trim().replace('\n', "\n         ")
                ));
            }
        }
        if !any_ran {
            silent_rows.push(sub);
        }
    }
    assert!(
        missing.is_empty(),
        "rows of the command table without trap requests in this test: {missing:?}"
    );
    assert!(
        ran_programs.is_empty(),
        "the git API ran what a nested repository configured:\n{}",
        ran_programs.join("\n")
    );
    assert!(
        silent_rows.is_empty(),
        "no request of these rows ran git, so they prove nothing: {silent_rows:?}"
    );
}

/// The attack as reported: the agent makes `sub/.git` with its own git and runs `git add
/// sub` through the shim, then `git status`. The add is refused with a reason code and a
/// message saying what works; the hidden index holds no gitlink; the status runs nothing.
#[test]
fn adding_a_nested_repository_is_refused_and_leaves_the_index_as_it_was() {
    let w = World::new(Start::Plain);
    let before = w.index();
    for argv in [
        &["add", "sub"][..],
        &["add", "sub/"],
        &["add", "./sub"],
        &["add", ":/sub"],
        &["add", "-A"],
        &["add", "."],
        &["add", "--all", "--", "."],
        &["add", "-f", "nest"],
        &["add", "linked"],
        &["add", "-N", "nest"],
        &["add", "--chmod=+x", "nest"],
    ] {
        let r = w.call(argv, None);
        assert_eq!(
            r.reason(),
            Some("nested_repository"),
            "git {argv:?}: {}",
            r.outcome()
        );
        let msg = &r.denied.as_ref().unwrap().message;
        assert!(
            msg.contains(".git") && msg.contains("ordinary files"),
            "the refusal says what works: {msg}"
        );
        assert_eq!(w.index(), before, "git {argv:?} changed the index");
        assert!(!w.index().contains("160000"), "a gitlink entered the index");
        assert_eq!(w.take_mark(), "", "git {argv:?} ran a trap");
    }
    // A path naming a .git component, in any case, is refused before git runs.
    for argv in [
        &["add", "sub/.git/config"][..],
        &["add", "sub/.GIT"],
        &["add", "--", "x/.Git/hooks/pre-commit"],
        &["commit", "-m", "x", "--", "sub/.git"],
    ] {
        let r = w.call(argv, None);
        assert_eq!(
            r.reason(),
            Some("nested_repository"),
            "git {argv:?}: {}",
            r.outcome()
        );
    }
    let r = w.call(&["status", "--porcelain"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    assert_eq!(w.take_mark(), "", "git status ran a trap");
    // An honest add beside the nested repository still works.
    write(&w.ws.join("src/new.rs"), "// new\n");
    let r = w.call(&["add", "src/new.rs"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    assert!(w.index().contains("src/new.rs"));
    // After the fix the refusal names, the files go in as ordinary files.
    std::fs::remove_dir_all(w.ws.join("sub/.git")).unwrap();
    let r = w.call(&["add", "sub"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    let index = w.index();
    assert!(
        index.contains("sub/f.txt") && !index.contains("160000"),
        "{index}"
    );
}

/// `git update-index` (its `--cacheinfo` and `--index-info` forms write any mode, 160000
/// included) is not a command the git API runs.
#[test]
fn update_index_cannot_write_a_gitlink() {
    let w = World::new(Start::Plain);
    let before = w.index();
    let line = format!("160000 {}\tplanted\n", w.nest_head);
    for (argv, stdin) in [
        (
            vec![
                "update-index".to_owned(),
                "--add".to_owned(),
                "--cacheinfo".to_owned(),
                format!("160000,{},planted", w.nest_head),
            ],
            None,
        ),
        (
            vec!["update-index".to_owned(), "--index-info".to_owned()],
            Some(line.as_bytes()),
        ),
        (
            vec![
                "update-index".to_owned(),
                "--add".to_owned(),
                "nest".to_owned(),
            ],
            None,
        ),
    ] {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let r = w.call(&argv, stdin);
        assert_eq!(
            r.reason(),
            Some("subcommand_not_allowed"),
            "{argv:?}: {}",
            r.outcome()
        );
    }
    assert_eq!(w.index(), before);
}

/// A gitlink that reached the index before (the old `git add sub`, or a patch), and a
/// submodule the agent moved by making a repository inside it: `git commit`, `commit -a` and
/// `commit <path>` are refused, HEAD does not move and the index is as it was.
#[test]
fn committing_a_gitlink_is_refused_and_undone() {
    // A gitlink staged behind the API's back, as the old add left it.
    let w = World::new(Start::Plain);
    agent_git(
        &w.root,
        &[
            "--git-dir",
            w.git_dir.to_str().unwrap(),
            "--work-tree",
            w.ws.to_str().unwrap(),
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "add",
            "sub",
        ],
    );
    w.take_mark();
    assert!(w.index().contains("160000"));
    let (head, index) = (w.head(), w.index());
    // The gitlink alone, then beside an honest change (git then writes a commit).
    let r = w.call(&["commit", "-m", "planted"], None);
    assert_eq!(r.reason(), Some("nested_repository"), "{}", r.outcome());
    assert_eq!(w.head(), head, "the commit stayed");
    write(&w.ws.join("README.md"), "changed\n");
    let r = w.call(&["commit", "-a", "-m", "planted"], None);
    assert_eq!(r.reason(), Some("nested_repository"), "{}", r.outcome());
    assert!(
        r.denied
            .as_ref()
            .unwrap()
            .message
            .contains("git reset -q -- sub"),
        "{}",
        r.outcome()
    );
    assert_eq!(w.head(), head, "the commit stayed");
    assert_eq!(w.index(), index);
    assert_eq!(w.take_mark(), "");
    // What the refusal says works.
    let r = w.call(&["reset", "-q", "--", "sub"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    write(&w.ws.join("src/ok.rs"), "// ok\n");
    assert_eq!(w.call(&["add", "src/ok.rs"], None).exit, Some(0));
    let r = w.call(&["commit", "-m", "honest"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    assert_ne!(w.head(), head);

    // A recorded submodule the agent moved (its nested repository has other commits): a
    // commit, alone or beside a real change, with -a, a path or --amend, never records the
    // moved gitlink. git leaves it out (submodules are ignored), or the commit is refused
    // and undone.
    for argv in [
        &["commit", "-a", "-m", "moved"][..],
        &["commit", "-m", "moved", "--", "sub"],
        &["commit", "-i", "-m", "moved", "sub"],
        &["commit", "--amend", "-a", "--no-edit"],
        &["commit", "--amend", "-m", "moved", "--", "sub"],
    ] {
        for honest_change in [false, true] {
            let w = World::new(Start::Trapped);
            agent_git(
                &w.ws.join("sub"),
                &[
                    "-c",
                    "commit.gpgSign=false",
                    "-c",
                    "core.fsmonitor=false",
                    "commit",
                    "-q",
                    "-a",
                    "-m",
                    "moved",
                ],
            );
            w.take_mark();
            let recorded = w.gitlink("HEAD:sub");
            let (head, index) = (w.head(), w.index());
            let mut argv = argv.to_vec();
            if honest_change {
                write(&w.ws.join("README.md"), "changed\n");
                if argv.contains(&"--") {
                    argv.push("README.md");
                }
            }
            let r = w.call(&argv, None);
            if r.reason() == Some("nested_repository") {
                assert_eq!(w.head(), head, "git {argv:?}: the commit stayed");
                assert_eq!(w.index(), index, "git {argv:?}");
            } else {
                assert!(r.denied.is_none(), "git {argv:?}: {}", r.outcome());
                assert_eq!(
                    w.gitlink("HEAD:sub"),
                    recorded,
                    "git {argv:?} recorded the move"
                );
            }
            assert_eq!(w.take_mark(), "", "git {argv:?}");
        }
    }
    let w = World::new(Start::Trapped);
    let head = w.head();
    // An honest commit in a repository with an (untouched) submodule works.
    write(&w.ws.join("src/ok.rs"), "// ok\n");
    assert_eq!(w.call(&["add", "src/ok.rs"], None).exit, Some(0));
    let r = w.call(&["commit", "-m", "honest"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    assert_ne!(w.head(), head);
}

/// A patch that creates a gitlink (`new file mode 160000`, `Subproject commit`) is refused
/// before git applies it, to the index or as a mail.
#[test]
fn a_patch_that_makes_a_gitlink_is_refused() {
    let w = World::new(Start::Plain);
    let patch = format!(
        "diff --git a/planted b/planted\nnew file mode 160000\nindex 0000000..{h}\n--- /dev/null\n+++ b/planted\n@@ -0,0 +1 @@\n+Subproject commit {h}\n",
        h = w.nest_head
    );
    for argv in [&["apply", "--cached"][..], &["apply", "--index"], &["am"]] {
        let r = w.call(argv, Some(patch.as_bytes()));
        assert_eq!(
            r.reason(),
            Some("nested_repository"),
            "git {argv:?}: {}",
            r.outcome()
        );
    }
    assert!(!w.index().contains("160000"));
}

/// Every way the agent can write the hidden git dir's configuration, tried with the keys
/// that run a program or point git elsewhere: each is refused, and the configuration file
/// holds none of them afterwards.
#[test]
fn the_hidden_config_takes_no_program_valued_key() {
    let w = World::new(Start::Plain);
    let program_keys = [
        "core.fsmonitor",
        "core.hooksPath",
        "core.pager",
        "core.editor",
        "core.sshCommand",
        "core.askPass",
        "core.gitProxy",
        "core.alternateRefsCommand",
        "core.worktree",
        "core.attributesFile",
        "core.excludesFile",
        "core.bare",
        "include.path",
        "includeIf.gitdir:/.path",
        "filter.x.clean",
        "filter.x.smudge",
        "filter.x.process",
        "diff.external",
        "diff.x.textconv",
        "diff.x.command",
        "merge.x.driver",
        "credential.helper",
        "credential.https://github.com.helper",
        "url.https://evil.example/.insteadOf",
        "url.https://evil.example/.pushInsteadOf",
        "http.proxy",
        "http.extraHeader",
        "http.https://github.com.extraHeader",
        "gpg.program",
        "gpg.ssh.program",
        "alias.st",
        "remote.origin.url",
        "remote.origin.pushurl",
        "remote.origin.vcs",
        "remote.origin.uploadpack",
        "remote.origin.receivepack",
        "remote.origin.proxy",
        "remote.evil.url",
        "submodule.sub.update",
        "submodule.sub.url",
        "sequence.editor",
        "uploadpack.packObjectsHook",
        "protocol.allow",
        "protocol.ext.allow",
        "safe.directory",
        "extensions.worktreeConfig",
        "pager.status",
        "status.submoduleSummary",
        "diff.ignoreSubmodules",
        "diff.submodule",
        "submodule.recurse",
        "fetch.recurseSubmodules",
        "lfs.standalonetransferagent",
        "maintenance.repo",
    ];
    let value = "!touch /tmp/airlock-pwned";
    let before_keys: Vec<String> = agent_git(
        &w.root,
        &[
            "config",
            "--file",
            w.git_dir.join("config").to_str().unwrap(),
            "--list",
            "--name-only",
        ],
    )
    .lines()
    .map(str::to_ascii_lowercase)
    .collect();
    let mut allowed = Vec::new();
    let mut attempt = |argv: Vec<String>, stdin: Option<&[u8]>| {
        let a: Vec<&str> = argv.iter().map(String::as_str).collect();
        let r = w.call(&a, stdin);
        if r.denied.is_none() && r.exit == Some(0) {
            allowed.push(format!("git {}", a.join(" ")));
        }
    };
    let s = |x: &[&str]| x.iter().map(|y| (*y).to_owned()).collect::<Vec<_>>();
    for key in program_keys {
        for form in [
            s(&["config", key, value]),
            s(&["config", "--add", key, value]),
            s(&["config", "--replace-all", key, value]),
            s(&["config", "--global", key, value]),
            s(&["config", "--local", key, value]),
            s(&["config", "set", key, value]),
            s(&["config", "set", "--append", key, value]),
            s(&["config", "--type=path", key, value]),
            s(&["config", "--bool", key, "true"]),
        ] {
            attempt(form, None);
        }
        // Case and subsection spellings of the same key.
        attempt(s(&["config", &key.to_uppercase(), value]), None);
    }
    // Keys that are writable, with values or subsections that try to reach further.
    for form in [
        s(&["config", "user.name", "x\n[core]\n\tfsmonitor = /tmp/evil"]),
        s(&[
            "config",
            "branch.x\"]\n[core]\nfsmonitor=evil.remote",
            "origin",
        ]),
        s(&[
            "config",
            "branch.main.remote",
            "ext::sh -c touch% /tmp/pwned",
        ]),
        s(&["config", "--file", "/tmp/x", "user.name", "x"]),
        s(&["config", "--file=.git/config", "core.fsmonitor", "x"]),
        s(&["config", "--blob", "HEAD:x", "--list"]),
        s(&["config", "--system", "core.fsmonitor", "x"]),
        s(&["config", "--worktree", "core.fsmonitor", "x"]),
        s(&["config", "rename-section", "user", "core"]),
        s(&["config", "edit"]),
        s(&["-c", "include.path=/tmp/x", "config", "user.name", "y"]),
        s(&["remote", "add", "evil", "https://evil.example/x"]),
        s(&["remote", "set-url", "origin", "https://evil.example/x"]),
        s(&["remote", "set-url", "--push", "origin", "ext::sh -c x"]),
        s(&["remote", "set-branches", "origin", "*"]),
        s(&["remote", "rename", "origin", "evil"]),
        s(&["remote", "set-head", "origin", "main"]),
        s(&["branch", "--set-upstream-to=origin/main\n[core]"]),
        s(&["branch", "--edit-description"]),
        s(&["init"]),
        s(&["init", "--template=/tmp"]),
        s(&["clone", "https://github.com/acme/app", "x"]),
        s(&["worktree", "add", "../wt"]),
        s(&["notes", "add", "-m", "x"]),
        s(&["maintenance", "register"]),
        s(&["maintenance", "start"]),
        s(&["lfs", "install"]),
        s(&["submodule", "add", "https://github.com/acme/app", "m"]),
        s(&["submodule", "init"]),
        s(&["submodule", "update", "--init"]),
        s(&["submodule", "set-url", "sub", "ext::sh"]),
        s(&["sparse-checkout", "init"]),
        s(&["rerere"]),
        s(&["gc"]),
        s(&["update-ref", "refs/heads/x", "HEAD"]),
        s(&["-c", "core.fsmonitor=x", "status"]),
        s(&["--config-env=core.fsmonitor=PATH", "status"]),
    ] {
        attempt(form, None);
    }
    // The ways that do write the config legitimately, with hostile spellings.
    for form in [
        s(&["branch", "x\"evil"]),
        s(&["branch", "--set-upstream-to=origin/main", "x\"evil"]),
        s(&["branch", "-m", "x\"evil", "y]evil"]),
        s(&["switch", "-c", "z", "--track", "origin/main"]),
        s(&["config", "branch.y]evil.rebase", "interactive"]),
        s(&["push", "-u", "origin", "HEAD:sandbox/demo/ok"]),
        s(&["fetch", "--set-upstream", "origin", "main"]),
    ] {
        let a: Vec<&str> = form.iter().map(String::as_str).collect();
        let _ = w.call(&a, None);
    }
    let after = w.config();
    // What git reads from the file: every key that was not there before is a writable one.
    let keys = |w: &World| -> Vec<String> {
        agent_git(
            &w.root,
            &[
                "config",
                "--file",
                w.git_dir.join("config").to_str().unwrap(),
                "--list",
                "--name-only",
            ],
        )
        .lines()
        .map(str::to_ascii_lowercase)
        .collect()
    };
    let mut bad: Vec<String> = keys(&w)
        .into_iter()
        .filter(|k| !before_keys.contains(k) && !airlock_git_api::argv::config_key_writable(k))
        .collect();
    bad.sort_unstable();
    assert!(
        bad.is_empty(),
        "program-valued keys in the hidden config: {bad:?}\n{after}"
    );
    assert!(!after.contains("evil.example"), "{after}");
    assert!(!after.contains("pwned"), "{after}");
    assert!(!after.contains("fsmonitor"), "{after}");
    assert!(
        allowed.iter().all(|a| !program_keys
            .iter()
            .any(|k| a.to_ascii_lowercase().contains(&k.to_ascii_lowercase()))),
        "allowed: {allowed:?}"
    );
}

/// `git rm` of a submodule whose directory holds a repository would run a status inside it
/// (its filter ran) and move its .git into the hidden git dir (the operator's
/// .git/modules): refused with what works; `--cached` works, and so does removing anything
/// else.
#[test]
fn removing_a_populated_submodule_is_refused_with_what_works() {
    let w = World::new(Start::Trapped);
    for argv in [
        &["rm", "-r", "sub"][..],
        &["rm", "-n", "sub"],
        &["rm", "-f", "sub"],
        &["rm", "-r", "-q", "."],
    ] {
        let r = w.call(argv, None);
        assert_eq!(
            r.reason(),
            Some("nested_repository"),
            "git {argv:?}: {}",
            r.outcome()
        );
        let msg = &r.denied.as_ref().unwrap().message;
        assert!(msg.contains("git rm --cached sub"), "{msg}");
        assert!(!w.git_dir.join("modules").exists(), "git {argv:?}");
        assert_eq!(w.take_mark(), "", "git {argv:?}");
    }
    let r = w.call(&["rm", "-q", "README.md"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    let r = w.call(&["rm", "-q", "--cached", "sub"], None);
    assert_eq!(r.exit, Some(0), "{}", r.outcome());
    assert!(!w.index().contains("160000"));
    assert!(w.ws.join("sub/.git").exists(), "the files stay");
    assert!(!w.git_dir.join("modules").exists());
    assert_eq!(w.take_mark(), "");
}

/// What an honest agent types keeps working with the pinned options in place: `git
/// --version` (no subcommand to put `-c` before) and the diff family with a path or a
/// revision and no `--` (git refuses an option after a path, so the server's options go
/// before the first operand). An option the agent writes after an operand that would look
/// inside a submodule is refused rather than left to come last and win, and nothing the
/// traps configure runs.
#[test]
fn honest_forms_work_and_a_late_submodule_option_is_refused() {
    let w = World::new(Start::Trapped);
    let version = w.call(&["--version"], None);
    assert_eq!(
        version.exit,
        Some(0),
        "git --version: {}",
        version.outcome()
    );
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("git version"),
        "git --version printed {:?}",
        String::from_utf8_lossy(&version.stdout)
    );
    std::fs::write(w.ws.join("README.md"), "hello again\n").unwrap();
    for argv in [
        &["diff", "-U1", "--color=never", "README.md"][..],
        &["diff", "HEAD", "--stat"],
        &["diff", "--stat", "HEAD", "README.md"],
        &["log", "--oneline", "-1", "README.md"],
        &["log", "--oneline", "HEAD", "-1"],
        &["show", "--stat", "HEAD"],
        &["status", "--short", "README.md"],
        &["diff-files", "--name-only", "README.md"],
        &["diff-index", "--name-only", "HEAD", "README.md"],
    ] {
        let r = w.call(argv, None);
        assert_eq!(r.exit, Some(0), "git {argv:?}: {}", r.outcome());
        assert_eq!(w.take_mark(), "", "git {argv:?} ran a trap");
    }
    let diff = w.call(&["diff", "-U1", "--color=never", "README.md"], None);
    assert!(
        String::from_utf8_lossy(&diff.stdout).contains("+hello again"),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    for argv in [
        &["diff", "HEAD", "--ignore-submodules=none"][..],
        &["diff", "HEAD", "--submodule=diff"],
        &["diff", "HEAD", "--submodule"],
        &["log", "-p", "HEAD", "--submodule=log"],
        &["status", "--ignore-submodules=dirty"],
        &[
            "show",
            "HEAD",
            "--ignore-submodules=untracked",
            "--submodule=diff",
        ],
    ] {
        let r = w.call(argv, None);
        assert_eq!(
            r.reason(),
            Some("nested_repository"),
            "git {argv:?}: {}",
            r.outcome()
        );
        assert!(
            r.denied
                .as_ref()
                .unwrap()
                .message
                .contains("--submodule=short work"),
            "git {argv:?}: the refusal says what works: {}",
            r.outcome()
        );
        assert_eq!(w.take_mark(), "", "git {argv:?} ran a trap");
    }
}
