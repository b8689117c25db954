//! `git config --global` is one file everywhere: the agent's `~/.gitconfig`. An identity set
//! in the workspace (through the git API) is what plain git reads outside it, and the other
//! way round. And the file is the agent's, written by its own git with anything in it: no
//! key that names a program, an include, a URL rewrite, a credential helper or a remote is
//! ever honoured by the git API's git. Every trap appends to a marker file; no request may
//! make one appear.
//!
//! The trap is armed: the test first shows that the git API's git with its protected
//! configuration alone, given the file as its global configuration, does write the marker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ORIGIN, Options, World, agent_git, agent_git_output, executable, write};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A scratch repository outside the workspace, as the agent makes one in /tmp.
fn scratch_repo(w: &World) -> PathBuf {
    let x = w.root.join("tmp-x");
    std::fs::create_dir(&x).unwrap();
    agent_git(&x, &w.home, &["init", "-q"]);
    x
}

#[test]
fn an_identity_set_in_the_workspace_is_seen_outside_and_the_other_way_round() {
    let w = World::new(Options::default());
    let x = scratch_repo(&w);
    // In the workspace, through the git API.
    w.ok(&["config", "--global", "user.name", "Ada Lovelace"]);
    w.ok(&["config", "--global", "init.defaultBranch", "trunk"]);
    // Outside: plain git reads ~/.gitconfig.
    assert_eq!(
        agent_git(&x, &w.home, &["config", "user.name"]).trim(),
        "Ada Lovelace"
    );
    assert_eq!(
        agent_git(&x, &w.home, &["config", "--global", "init.defaultBranch"]).trim(),
        "trunk"
    );
    // Not the repository's config: the workspace's own .git is untouched.
    assert!(!w.config().contains("Ada"), "{}", w.config());
    // Outside, plain git writes ~/.gitconfig; the workspace's git reads it.
    agent_git(
        &x,
        &w.home,
        &["config", "--global", "user.email", "ada@example.org"],
    );
    assert_eq!(w.ok(&["config", "user.email"]).trim(), "ada@example.org");
    assert_eq!(
        w.ok(&["config", "--global", "--get", "user.name"]).trim(),
        "Ada Lovelace"
    );
    // A commit in the workspace carries it.
    write(&w.ws.join("a.txt"), "a\n");
    w.ok(&["add", "a.txt"]);
    w.ok(&["commit", "-q", "-m", "a"]);
    assert_eq!(
        w.ok(&["log", "-1", "--format=%an <%ae>"]).trim(),
        "Ada Lovelace <ada@example.org>"
    );
    // The repository's own identity still wins over the global one, as in git.
    w.ok(&["config", "user.name", "Repo Name"]);
    assert_eq!(w.ok(&["config", "user.name"]).trim(), "Repo Name");
    assert_eq!(
        w.ok(&["config", "--global", "user.name"]).trim(),
        "Ada Lovelace"
    );
    // An unset in the workspace is an unset outside.
    w.ok(&["config", "--global", "--unset", "user.email"]);
    let out = agent_git_output(&x, &w.home, &["config", "--global", "user.email"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Keys the agent wrote outside for its own git stay in the file after a write inside.
    agent_git(&x, &w.home, &["config", "--global", "alias.co", "checkout"]);
    w.ok(&["config", "--global", "pull.rebase", "true"]);
    let text = std::fs::read_to_string(w.home.join(".gitconfig")).unwrap();
    assert!(
        text.contains("co = checkout") && text.contains("rebase = true"),
        "{text}"
    );
    // Nothing left in the private directory.
    assert_eq!(std::fs::read_dir(&w.scratch).unwrap().count(), 0);
}

#[test]
fn a_global_write_never_goes_through_a_link_and_says_what_works() {
    let w = World::new(Options::default());
    let target = w.root.join("elsewhere.conf");
    std::fs::write(&target, "[user]\n\tname = Kept\n").unwrap();
    std::os::unix::fs::symlink(&target, w.home.join(".gitconfig")).unwrap();
    let r = w.call(&["config", "--global", "user.name", "Mallory"]);
    assert_eq!(
        r.reason(),
        Some("config_key_not_writable"),
        "{}",
        r.outcome()
    );
    assert!(
        r.message().contains("symbolic link") && r.message().contains("git -C ~ config --global"),
        "{}",
        r.message()
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "[user]\n\tname = Kept\n"
    );
    // A linked file is not read either.
    let r = w.call(&["config", "--global", "user.name"]);
    assert_eq!(r.exit, Some(1), "{}", r.outcome());
    // Program-valued keys stay refused with --global, as without it.
    std::fs::remove_file(w.home.join(".gitconfig")).unwrap();
    for key in [
        "core.pager",
        "alias.co",
        "include.path",
        "credential.helper",
    ] {
        let r = w.call(&["config", "--global", key, "x"]);
        assert_eq!(r.reason(), Some("config_key_not_writable"), "{key}");
    }
    assert!(!w.home.join(".gitconfig").exists());
}

/// Without a home the git API reads no global configuration and refuses a global write
/// with what works.
#[test]
fn a_git_api_without_the_home_refuses_a_global_write_with_the_way_that_works() {
    let w = World::new(Options {
        home: false,
        ..Options::default()
    });
    std::fs::write(w.home.join(".gitconfig"), "[user]\n\tname = Ada\n").unwrap();
    let r = w.call(&["config", "--global", "user.name", "X"]);
    assert_eq!(
        r.reason(),
        Some("config_key_not_writable"),
        "{}",
        r.outcome()
    );
    assert!(r.message().contains("git -C ~"), "{}", r.message());
    assert_eq!(w.call(&["config", "user.name"]).exit, Some(1));
}

/// The traps: a `~/.gitconfig` naming a program for every key git runs one from, an include
/// of a second file with more, URL rewrites, a credential helper and a global `origin` whose
/// URL is a trap repository with its own upload-pack.
fn plant(w: &World) -> (PathBuf, PathBuf) {
    let mark = w.root.join("MARK");
    let run = w.root.join("trap-run");
    executable(
        &run,
        &format!(
            "#!/bin/sh\necho \"ran: $0 $*\" >> {}\nexit 0\n",
            mark.display()
        ),
    );
    let filter = w.root.join("trap-filter");
    executable(
        &filter,
        &format!(
            "#!/bin/sh\necho \"filter: $*\" >> {}\nexec cat\n",
            mark.display()
        ),
    );
    let hooks = w.root.join("trap-hooks");
    for h in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "post-checkout",
        "pre-push",
        "reference-transaction",
        "post-merge",
        "post-rewrite",
    ] {
        executable(
            &hooks.join(h),
            &format!("#!/bin/sh\necho \"hook {h}\" >> {}\n", mark.display()),
        );
    }
    let trap_repo = w.root.join("trap.git");
    common::seeded_bare(&w.root, &trap_repo, "TRAP.md", "trap\n", &[]);
    let attrs = w.root.join("trap-attributes");
    write(&attrs, "* filter=trap diff=trap merge=trap\n");
    let included = w.root.join("included.gitconfig");
    let (r, f, h, t) = (
        run.display(),
        filter.display(),
        hooks.display(),
        trap_repo.display(),
    );
    write(
        &included,
        &format!(
            "[core]\n\tfsmonitor = {r}\n\thooksPath = {h}\n[filter \"inc\"]\n\tclean = {f}\n\
             [user]\n\tname = Included Name\n"
        ),
    );
    write(
        &w.home.join(".gitconfig"),
        &format!(
            "[user]\n\tname = Home Name\n\temail = home@example.org\n\
             [core]\n\tpager = {r}\n\tfsmonitor = {r}\n\thooksPath = {h}\n\teditor = {r}\n\
             \tsshCommand = {r}\n\taskPass = {r}\n\tgitProxy = {r}\n\tattributesFile = {a}\n\
             \talternateRefsCommand = {r}\n\
             [sequence]\n\teditor = {r}\n\
             [diff]\n\texternal = {r}\n\
             [diff \"trap\"]\n\ttextconv = {r}\n\tcommand = {r}\n\
             [merge \"trap\"]\n\tdriver = {r}\n\
             [filter \"trap\"]\n\tclean = {f}\n\tsmudge = {f}\n\trequired = true\n\
             [credential]\n\thelper = !{r}\n\
             [gpg]\n\tprogram = {r}\n\
             [commit]\n\tgpgSign = true\n\
             [uploadpack]\n\tpackObjectsHook = {r}\n\
             [pager]\n\tstatus = {r}\n\tlog = {r}\n\tdiff = {r}\n\
             [alias]\n\tst = !{r}\n\tlg = !{r}\n\
             [include]\n\tpath = {i}\n\
             [includeIf \"gitdir:/\"]\n\tpath = {i}\n\
             [url \"file://{t}\"]\n\tinsteadOf = https://{ORIGIN}\n\tinsteadOf = https://github.com/\n\
             [remote \"origin\"]\n\turl = {t}\n\tuploadpack = {r}\n\treceivepack = {r}\n\
             [remote \"upstream\"]\n\turl = {t}\n\tuploadpack = {r}\n\
             [remote \"helper\"]\n\turl = {t}\n\tvcs = trap\n\tproxy = http://127.0.0.1:1\n\
             [protocol]\n\tallow = always\n\
             [http]\n\tproxy = http://127.0.0.1:1\n",
            a = attrs.display(),
            i = included.display(),
        ),
    );
    (mark, run)
}

fn take(mark: &Path) -> String {
    let text = std::fs::read_to_string(mark).unwrap_or_default();
    let _ = std::fs::remove_file(mark);
    text
}

/// The trap is armed: the git the git API runs, with its protected configuration only and
/// the file as git's global layer, runs the clean filter on `git add` and the trap
/// repository's upload-pack on `git fetch`.
#[test]
fn the_trapped_home_is_armed_against_the_protected_configuration_alone() {
    let w = World::new(Options::default());
    let (mark, _) = plant(&w);
    let env = airlock_git_api::run::GitEnv {
        git: common::GIT.into(),
        git_dir: w.git_dir.clone(),
        work_tree: w.ws.clone(),
        home: w.root.join("empty-home"),
        proxy_url: "http://127.0.0.1:9".into(),
        ca_file: None,
        ca_dir: None,
        test_upstreams: vec![(ORIGIN.into(), w.upstream.clone())],
        system_config: None,
    };
    write(&w.ws.join("armed.txt"), "armed\n");
    for args in [vec!["add", "armed.txt"], vec!["fetch", "origin"]] {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let _ = env
            .command(&w.ws, &BTreeMap::new(), &[], &args)
            .env("GIT_CONFIG_GLOBAL", w.home.join(".gitconfig"))
            .output()
            .unwrap();
    }
    let ran = take(&mark);
    assert!(
        ran.contains("filter:") && ran.contains("ran:"),
        "the trap did not fire: {ran:?}"
    );
}

/// Everyday requests with the trapped home: nothing it names ever runs, the remote checks
/// read the repository's remotes only, and git takes only the identity from the file.
#[test]
fn no_program_valued_key_of_the_home_is_honoured() {
    let w = World::new(Options::default());
    let (mark, _) = plant(&w);
    write(&w.ws.join("new.txt"), "new\n");
    write(&w.ws.join("README.md"), "hello again\n");
    let requests: &[&[&str]] = &[
        &["status"],
        &["status", "--porcelain"],
        &["add", "-A"],
        &["diff", "--cached"],
        &["diff", "HEAD"],
        &["commit", "-q", "-m", "work"],
        &["log", "-p", "-2"],
        &["show", "HEAD"],
        &["blame", "README.md"],
        &["switch", "-c", "topic"],
        &["switch", "main"],
        &["merge", "--no-edit", "topic"],
        &["stash", "list"],
        &["fetch"],
        &["fetch", "origin"],
        &["pull", "--no-rebase", "origin", "main"],
        &["ls-remote", "origin"],
        &["push", "origin", "HEAD:sandbox/demo/x"],
        &["config", "--global", "--list"],
        &["config", "--list"],
        &["config", "--global", "--includes", "--list"],
        &["st"],
        &["lg"],
        &["rebase", "main"],
        &["cherry-pick", "--no-commit", "HEAD"],
        &["reset", "--hard", "HEAD"],
        &["checkout", "--", "README.md"],
        &["remote", "-v"],
        &["remote", "show", "origin"],
    ];
    let mut outcomes = Vec::new();
    for argv in requests {
        let r = w.call(argv);
        outcomes.push(format!("{argv:?}: {}", r.outcome()));
        let ran = take(&mark);
        assert!(ran.is_empty(), "git {argv:?} ran the home's trap: {ran}");
    }
    // The global layer holds the identity only; the included file never counts.
    let listed = w.ok(&["config", "--global", "--list"]);
    assert_eq!(
        listed, "user.name=Home Name\nuser.email=home@example.org\n",
        "{outcomes:#?}"
    );
    assert_eq!(
        w.ok(&["log", "-1", "--format=%an <%ae>"]).trim(),
        "Home Name <home@example.org>"
    );
    // The fetches went to the authorized repository, never the trap's.
    let remote = w.ok(&["remote", "-v"]);
    assert!(!remote.contains("trap.git"), "{remote}");
    let heads = w.operator_git(&["log", "--all", "--format=%s"]);
    assert!(
        !heads.lines().any(|l| l == "seed" && heads.contains("TRAP")),
        "{heads}"
    );
    let trap_objects = w.operator_git(&["log", "--all", "--format=%H", "--", "TRAP.md"]);
    assert!(
        trap_objects.trim().is_empty(),
        "the trap repository was fetched"
    );
}
