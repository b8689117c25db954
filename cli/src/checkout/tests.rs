use super::*;
use std::process::Command;

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An operator repository with two commits on main and another sandbox's branch.
fn operator_repo(root: &Path) -> PathBuf {
    let repo = root.join("op");
    std::fs::create_dir_all(&repo).unwrap();
    sh(
        &repo,
        "git init -q -b main . && git config user.email o@x && git config user.name o \
         && echo one > a && git add a && git commit -qm one \
         && echo two > b && git add b && git commit -qm two \
         && git branch sandbox/other",
    );
    repo
}

/// Make the checkout `ck` of `branch` at the operator's HEAD, with the store of that base
/// (under `ck`'s parent, as under the data directory).
fn make(ck: &Checkout, op: &Operator, branch: &str) {
    let stores = store::Stores::new(ck.dir.parent().unwrap());
    let chain = stores.acquire(&op.top, &op.head).unwrap();
    ck.create(&chain[0], branch, &op.head).unwrap();
}

/// Git as the git API would run it in the container, on the sandbox's dirs.
fn in_sandbox(ck: &Checkout, args: &str) -> String {
    sh(
        &ck.dir,
        &format!(
            "git -c safe.directory='*' -c user.email=a@x -c user.name=a --git-dir repo.git --work-tree work {args}"
        ),
    )
}

#[test]
fn a_checkout_has_one_branch_the_operators_files_and_borrowed_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let op = operator(&operator_repo(tmp.path())).unwrap();
    assert!(!op.dirty);
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    make(&ck, &op, "sandbox/one");
    assert_eq!(
        std::fs::read_to_string(ck.work_tree().join("b")).unwrap(),
        "two\n"
    );
    assert!(
        ck.work_tree().join(".git").is_dir(),
        "the cover's mount point"
    );
    let refs = in_sandbox(&ck, "for-each-ref --format='%(refname)'");
    assert_eq!(refs, "refs/heads/sandbox/one", "no other branch is listed");
    assert_eq!(
        in_sandbox(&ck, "symbolic-ref HEAD"),
        "refs/heads/sandbox/one"
    );
    assert_eq!(in_sandbox(&ck, "status --porcelain"), "");
    let alt = std::fs::read_to_string(ck.git_dir().join("objects/info/alternates")).unwrap();
    assert_eq!(alt.trim(), ALTERNATES);
    // Only the sandbox's own objects are stored: none were copied.
    let count = in_sandbox(&ck, "count-objects -v");
    assert!(
        count.contains("count: 0") && count.contains("in-pack: 0"),
        "{count}"
    );
    assert!(!ck.git_dir().join("hooks").exists(), "no sample hooks");
}

#[test]
fn commits_come_back_as_a_branch_and_ahead_counts_the_unfetched() {
    let tmp = tempfile::tempdir().unwrap();
    let op = operator(&operator_repo(tmp.path())).unwrap();
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    make(&ck, &op, "sandbox/one");
    std::fs::write(ck.work_tree().join("c"), "agent\n").unwrap();
    in_sandbox(&ck, "add c");
    in_sandbox(&ck, "commit -qm agent");
    let tip = fetch(&op.top, &ck, "one", "sandbox/one", None).unwrap();
    assert_eq!(
        ahead(&op.top, &tip).unwrap(),
        1,
        "only under the hidden ref so far"
    );
    let tip2 = fetch(&op.top, &ck, "one", "sandbox/one", Some("sandbox/one")).unwrap();
    assert_eq!(tip, tip2);
    assert_eq!(ahead(&op.top, &tip).unwrap(), 0);
    assert_eq!(sh(&op.top, "git log -1 --format=%s sandbox/one"), "agent");
    drop_tip(&op.top, "one").unwrap();
    assert_eq!(sh(&op.top, "git for-each-ref refs/airlock"), "");
    ck.remove().unwrap();
    assert!(!ck.dir.exists());
    assert!(
        op.git_dir.join("objects").is_dir(),
        "the operator's objects stay"
    );
}

#[test]
fn a_planted_hook_or_fsmonitor_never_runs_on_the_host_at_fetch() {
    let tmp = tempfile::tempdir().unwrap();
    let op = operator(&operator_repo(tmp.path())).unwrap();
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    make(&ck, &op, "sandbox/evil");
    let marker = tmp.path().join("marker");
    let payload = format!("#!/bin/sh\necho ran \"$0\" >> {}\n", marker.display());
    let hooks = ck.git_dir().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "pre-upload-pack",
        "post-checkout",
        "reference-transaction",
        "post-merge",
        "fsmon",
    ] {
        std::fs::write(hooks.join(hook), &payload).unwrap();
        sh(&hooks, &format!("chmod +x {hook}"));
    }
    let cfg = format!(
        "git config --file repo.git/config core.fsmonitor {0}/fsmon && \
         git config --file repo.git/config uploadpack.packObjectsHook {0}/fsmon && \
         git config --file repo.git/config core.hooksPath {0}",
        hooks.display()
    );
    sh(&ck.dir, &cfg);
    // The operator's own repository has hooks too: the fetch must not run them either.
    let op_hooks = op.git_dir.join("hooks");
    std::fs::write(op_hooks.join("reference-transaction"), &payload).unwrap();
    sh(&op_hooks, "chmod +x reference-transaction");
    std::fs::write(ck.work_tree().join("x"), "x\n").unwrap();
    sh(
        &ck.dir,
        "git -c safe.directory='*' -c core.hooksPath=/dev/null -c core.fsmonitor=false -c user.email=a@x -c user.name=a --git-dir repo.git --work-tree work add x && git -c safe.directory='*' -c core.hooksPath=/dev/null -c core.fsmonitor=false -c user.email=a@x -c user.name=a --git-dir repo.git --work-tree work commit -qm x",
    );
    fetch(&op.top, &ck, "evil", "sandbox/evil", Some("sandbox/evil")).unwrap();
    assert!(
        !marker.exists(),
        "a hook ran: {:?}",
        std::fs::read_to_string(&marker)
    );
    assert_eq!(sh(&op.top, "git log -1 --format=%s sandbox/evil"), "x");
}

#[test]
fn not_a_repository_and_an_empty_one_are_refused_saying_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let e = operator(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("is not a git checkout") && e.contains("git init; git commit"),
        "{e}"
    );
    let e = operator(&tmp.path().join("nope")).unwrap_err().to_string();
    assert!(e.contains("is not a git checkout"), "{e}");
    sh(tmp.path(), "git init -q .");
    let e = operator(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("no commit yet"), "{e}");
}

#[test]
fn a_dirty_checkout_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = operator_repo(tmp.path());
    std::fs::write(repo.join("a"), "changed\n").unwrap();
    assert!(operator(&repo).unwrap().dirty);
}

/// A command that, run by any git on the host, leaves a line in `marker` (who ran it).
fn payload(marker: &Path) -> String {
    format!("sh -c 'id >> {}; cat'", marker.display())
}

fn assert_nothing_ran(marker: &Path) {
    assert!(
        !marker.exists(),
        "something the sandbox wrote ran on the host: {:?}",
        std::fs::read_to_string(marker)
    );
}

/// The environment variable a child test run by [`child`] finds.
const CHILD: &str = "AIRLOCK_CHECKOUT_TEST_CHILD";

/// Run this module's test `name` (an `#[ignore]`d one that refuses to run on its own) in a
/// child process of this test binary: as `uid` (setpriv) when given, with `env`.
fn child(name: &str, uid: Option<u32>, env: &[(&str, String)]) {
    let exe = std::env::current_exe().unwrap();
    let mut c = match uid {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={u}"))
                .arg(format!("--regid={u}"))
                .args(["--clear-groups", "--"])
                .arg(&exe);
            c.env("HOME", "/tmp");
            c
        }
        None => Command::new(&exe),
    };
    c.args([
        &format!("checkout::tests::{name}"),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    c.env(CHILD, "1");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} as {uid:?}: {text}"
    );
}

/// Refuse to run but as [`child`]'s child.
fn only_as_child() {
    assert!(
        std::env::var_os(CHILD).is_some(),
        "this test is run by its parent test in a child process (another uid or SUDO_UID)"
    );
}

/// The attack: the agent makes a nested repository whose clean filter is a payload,
/// adds it to its index as a gitlink, commits, and leaves a file of the nested repository
/// modified, so that a `git status` recursing into it has to run the filter.
fn gitlink_filter_attack(root: &Path) {
    let op = operator(&operator_repo(root)).unwrap();
    let ck = Checkout {
        dir: root.join("sb"),
    };
    make(&ck, &op, "sandbox/evil");
    let marker = root.join("marker");
    let sub = ck.work_tree().join("sub");
    std::fs::create_dir(&sub).unwrap();
    sh(
        &sub,
        "git init -q . && git config user.email a@x && git config user.name a \
         && echo '* filter=x' > .gitattributes && echo data > f && git add . && git commit -qm sub",
    );
    sh(
        &sub,
        &format!("git config filter.x.clean \"{}\"", payload(&marker)),
    );
    std::fs::write(sub.join("f"), "changed\n").unwrap();
    in_sandbox(
        &ck,
        "update-index --add --cacheinfo 160000,$(git -C work/sub rev-parse HEAD),sub",
    );
    in_sandbox(&ck, "commit -qm gitlink");
    assert_nothing_ran(&marker);
    let uncommitted = ck.uncommitted("sandbox/evil");
    let fetched = fetch(&op.top, &ck, "evil", "sandbox/evil", Some("sandbox/evil"));
    assert_nothing_ran(&marker);
    // Never entered: what changed inside the nested repository is not looked at.
    assert!(!uncommitted.unwrap(), "the gitlink is committed");
    let tip = fetched.unwrap();
    assert_eq!(
        sh(&op.top, &format!("git ls-tree {tip} sub"))
            .split_whitespace()
            .next(),
        Some("160000"),
        "the gitlink came back as data"
    );
}

/// Everything git can be told to run, in the sandbox's own config, its info/attributes, its
/// hooks directory and the work tree's .gitattributes, with tracked files changed and new
/// ones, so that a status has to read every one of them.
fn sandbox_config_attack(root: &Path) {
    let op = operator(&operator_repo(root)).unwrap();
    let ck = Checkout {
        dir: root.join("sb"),
    };
    make(&ck, &op, "sandbox/evil");
    let marker = root.join("marker");
    let script = root.join("payload");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nid >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    sh(root, "chmod 755 payload");
    let p = script.display().to_string();
    let hooks = ck.git_dir().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "pre-upload-pack",
        "post-checkout",
        "post-index-change",
        "reference-transaction",
        "fsmonitor-watchman",
        "pre-auto-gc",
    ] {
        std::fs::copy(&script, hooks.join(hook)).unwrap();
    }
    let mut cfg = String::new();
    for (k, v) in [
        ("core.fsmonitor", p.as_str()),
        ("core.hooksPath", &hooks.display().to_string()),
        ("filter.x.clean", &p),
        ("filter.x.smudge", &p),
        ("filter.x.process", &p),
        ("filter.x.required", "true"),
        ("diff.x.textconv", &p),
        ("diff.external", &p),
        ("core.pager", &p),
        ("uploadpack.packObjectsHook", &p),
        ("core.sshCommand", &p),
        ("core.alternateRefsCommand", &p),
        ("submodule.recurse", "true"),
        ("status.submoduleSummary", "true"),
    ] {
        cfg.push_str(&format!("git config --file repo.git/config {k} '{v}' && "));
    }
    cfg.push_str("mkdir -p repo.git/info && echo '* filter=x diff=x' > repo.git/info/attributes");
    sh(&ck.dir, &cfg);
    std::fs::write(ck.work_tree().join(".gitattributes"), "* filter=x diff=x\n").unwrap();
    std::fs::write(ck.work_tree().join("a"), "changed by the agent\n").unwrap();
    std::fs::write(ck.work_tree().join("new"), "new\n").unwrap();
    assert_nothing_ran(&marker);
    let uncommitted = ck.uncommitted("sandbox/evil");
    let fetched = fetch(&op.top, &ck, "evil", "sandbox/evil", Some("sandbox/evil"));
    assert_nothing_ran(&marker);
    assert!(uncommitted.unwrap(), "the changes are seen");
    fetched.unwrap();
}

/// An embedded bare repository (`HEAD`, `objects/`, `refs/`, a `config` with
/// `core.fsmonitor`) committed on the sandbox's branch and changed in its work tree.
fn embedded_bare_attack(root: &Path) {
    let op = operator(&operator_repo(root)).unwrap();
    let ck = Checkout {
        dir: root.join("sb"),
    };
    make(&ck, &op, "sandbox/evil");
    let marker = root.join("marker");
    let tools = ck.work_tree().join("tools");
    for d in ["objects/info", "refs/heads"] {
        std::fs::create_dir_all(tools.join(d)).unwrap();
        std::fs::write(tools.join(d).join("keep"), "").unwrap();
    }
    std::fs::write(tools.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        tools.join("config"),
        format!(
            "[core]\n\tbare = true\n\tfsmonitor = \"{}\"\n",
            payload(&marker)
        ),
    )
    .unwrap();
    in_sandbox(&ck, "add tools");
    in_sandbox(&ck, "commit -qm tools");
    std::fs::write(tools.join("objects/info/keep"), "x").unwrap();
    let uncommitted = ck.uncommitted("sandbox/evil");
    let fetched = fetch(&op.top, &ck, "evil", "sandbox/evil", Some("sandbox/evil"));
    assert_nothing_ran(&marker);
    assert!(uncommitted.unwrap());
    let tip = fetched.unwrap();
    // And it is listed for the operator.
    let (changes, tree) = range::brought(&op.top, &op.head, &tip).unwrap();
    let found = crate::review::review(&changes, &tree);
    assert!(
        found.iter().any(|f| f.path == b"tools/"),
        "{:?}",
        crate::review::lines(&found)
    );
}

/// An operator repository owned by uid 4242 whose config runs a filter on every tracked
/// file git has to read (one is changed) and names an fsmonitor.
fn foreign_operator_repo(root: &Path) -> (PathBuf, PathBuf) {
    let repo = operator_repo(root);
    let marker = root.join("marker");
    sh(
        &repo,
        &format!(
            "git config filter.x.clean \"{0}\" && git config core.fsmonitor \"{0}\" \
             && echo '* filter=x' > .git/info/attributes && echo changed > a \
             && chown -R 4242:4242 . && chmod -R a+rwX {1}",
            payload(&marker),
            root.display()
        ),
    );
    (repo, marker)
}

fn foreign_operator_attack(repo: &Path, marker: &Path) {
    let e = operator(repo).unwrap_err().to_string();
    assert_nothing_ran(marker);
    assert!(e.contains("dubious ownership"), "git's reason: {e}");
    assert!(e.contains("run airlock as the account that owns it"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn the_gitlink_filter_attack_runs_nothing_at_wind_up_or_fetch() {
    gitlink_filter_attack(tempfile::tempdir().unwrap().path());
}

#[test]
fn a_sandbox_config_with_hooks_fsmonitor_and_filters_runs_nothing() {
    sandbox_config_attack(tempfile::tempdir().unwrap().path());
}

#[test]
fn an_embedded_bare_repository_runs_nothing_at_wind_up_or_fetch() {
    embedded_bare_attack(tempfile::tempdir().unwrap().path());
}

#[test]
fn an_operator_repository_owned_by_another_account_is_refused_with_gits_reason() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test chowns a repository to another user: run it as root (scripts/test does)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (repo, marker) = foreign_operator_repo(tmp.path());
    foreign_operator_attack(&repo, &marker);
}

#[test]
fn as_an_ordinary_user_the_same_attacks_run_nothing() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs its child as uid 1000 and chowns a repository to uid 4242: run it as root (scripts/test does)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (repo, marker) = foreign_operator_repo(tmp.path());
    child(
        "child_attacks_as_an_ordinary_user",
        Some(1000),
        &[
            ("FOREIGN_REPO", repo.display().to_string()),
            ("FOREIGN_MARKER", marker.display().to_string()),
        ],
    );
    assert_nothing_ran(&marker);
}

#[test]
#[ignore = "run by as_an_ordinary_user_the_same_attacks_run_nothing as uid 1000"]
fn child_attacks_as_an_ordinary_user() {
    only_as_child();
    assert_eq!(nix::unistd::geteuid().as_raw(), 1000);
    gitlink_filter_attack(tempfile::tempdir().unwrap().path());
    sandbox_config_attack(tempfile::tempdir().unwrap().path());
    embedded_bare_attack(tempfile::tempdir().unwrap().path());
    let repo = PathBuf::from(std::env::var("FOREIGN_REPO").unwrap());
    let marker = PathBuf::from(std::env::var("FOREIGN_MARKER").unwrap());
    foreign_operator_attack(&repo, &marker);
}

#[test]
fn root_under_sudo_reads_the_invoking_users_repository_and_leaves_it_theirs() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test chowns a repository to another user: run it as root (scripts/test does)"
    );
    // `sudo airlock run ~/src/app` as uid 1000: git accepts the repository of SUDO_UID.
    child(
        "child_root_under_sudo",
        None,
        &[("SUDO_UID", "1000".into()), ("SUDO_GID", "1000".into())],
    );
}

#[test]
#[ignore = "run by root_under_sudo_reads_the_invoking_users_repository_and_leaves_it_theirs"]
fn child_root_under_sudo() {
    only_as_child();
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = operator_repo(tmp.path());
    sh(&repo, "chown -R 1000:1000 .");
    let op = operator(&repo).expect("git's ownership check accepts the invoking user's repository");
    assert!(!op.dirty);
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    make(&ck, &op, "sandbox/one");
    std::fs::write(ck.work_tree().join("c"), "agent\n").unwrap();
    in_sandbox(&ck, "add c");
    in_sandbox(&ck, "commit -qm agent");
    let tip = fetch(&op.top, &ck, "one", "sandbox/one", Some("sandbox/one")).unwrap();
    assert_eq!(ahead(&op.top, &tip).unwrap(), 0);
    let (changes, _) = range::brought(&op.top, &op.head, &tip).unwrap();
    assert_eq!(
        changes
            .iter()
            .map(|c| c.path.as_slice())
            .collect::<Vec<_>>(),
        [b"c"]
    );
    drop_tip(&op.top, "one").unwrap();
    let mut rooted = Vec::new();
    let mut stack = vec![op.git_dir.clone()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.uid() != 1000 {
            rooted.push(p.clone());
        }
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    assert_eq!(
        rooted,
        Vec::<PathBuf>::new(),
        "all of .git stays the owner's"
    );
}

#[test]
fn root_without_sudo_on_another_users_repository_is_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test chowns a repository to another user: run it as root (scripts/test does)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let repo = operator_repo(tmp.path());
    sh(&repo, "chown -R 1000:1000 .");
    let e = operator(&repo).unwrap_err();
    assert!(matches!(e, CheckoutError::Refused { .. }), "{e}");
}

#[test]
fn what_a_branch_brings_is_listed_from_gits_trees_and_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let op = operator(&operator_repo(tmp.path())).unwrap();
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    make(&ck, &op, "sandbox/one");
    // Commits that plant, then one that removes a file again: every commit of the range
    // counts, not only the net change.
    sh(
        &ck.work_tree(),
        "mkdir -p editor .Claude sub && echo '{}' > editor/tasks.json && ln -s editor .vscode \
         && echo '{}' > .Claude/settings.json && printf '* filter=x\\n' > .gitattributes \
         && printf 'x' > \".Claude/$(printf 'a\\033[2Kb')\" && ln -s /home/u/.bashrc out \
         && echo once > .envrc",
    );
    in_sandbox(&ck, "add -A");
    in_sandbox(&ck, "commit -qm plant");
    in_sandbox(&ck, "rm -q .envrc");
    in_sandbox(
        &ck,
        "update-index --add --cacheinfo 160000,$(git --git-dir repo.git rev-parse HEAD),sub",
    );
    in_sandbox(&ck, "commit -qm more");
    let tip = fetch(&op.top, &ck, "one", "sandbox/one", None).unwrap();
    let (changes, tree) = range::brought(&op.top, &op.head, &tip).unwrap();
    let found = crate::review::review(&changes, &tree);
    let text = crate::review::lines(&found).join("\n");
    let listed: Vec<&[u8]> = found.iter().map(|f| f.path.as_slice()).collect();
    for p in [
        &b".vscode"[..],
        b"editor/tasks.json",
        b".Claude/settings.json",
        b".gitattributes",
        b"out",
        b".envrc",
        b"sub",
    ] {
        assert!(
            listed.contains(&p),
            "{} missing from:\n{text}",
            crate::review::escape(p)
        );
    }
    assert!(text.contains(".Claude/a\\x1b[2Kb"), "{text}");
    assert!(!text.contains('\x1b'), "{text}");
}

/// An operator repository whose main has history, a commit reset away holding a password,
/// and a branch holding an object no other has. Returns (repo, the reset-away blob, the
/// other branch's blob).
fn repo_with_secrets(root: &Path) -> (PathBuf, String, String) {
    let repo = operator_repo(root);
    let gone = sh(
        &repo,
        "echo DB_PASSWORD=hunter2 > .env && git add .env && git commit -qm oops \
         && git rev-parse HEAD:.env && git reset -q --hard HEAD~1",
    );
    let other = sh(
        &repo,
        "git checkout -q -b other && echo only-on-other > o && git add o && git commit -qm o \
         && git rev-parse HEAD:o && git checkout -q main",
    );
    (repo, gone, other)
}

/// Every object `base` reaches in `repo`, sorted.
fn reachable(repo: &Path, base: &str) -> Vec<String> {
    let mut v: Vec<String> = sh(
        repo,
        &format!("git rev-list --objects {base} | cut -d' ' -f1"),
    )
    .lines()
    .map(String::from)
    .collect();
    v.sort();
    v
}

/// Every object a git dir reads (its own and its alternates'), sorted.
fn readable(git_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = sh(
        git_dir,
        "git -c safe.directory='*' --git-dir . cat-file --batch-all-objects --batch-check='%(objectname)'",
    )
    .lines()
    .map(String::from)
    .collect();
    v.sort();
    v
}

#[test]
fn a_sandbox_reads_exactly_what_its_base_reaches() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, gone, other) = repo_with_secrets(tmp.path());
    let op = operator(&repo).unwrap();
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    make(&ck, &op, "sandbox/one");
    assert_eq!(readable(&ck.git_dir()), reachable(&repo, &op.head));
    for secret in [&gone, &other] {
        let abbrev = &secret[..7];
        let out = Command::new("git")
            .args(["-c", "safe.directory=*", "--git-dir"])
            .arg(ck.git_dir())
            .args(["cat-file", "-p", abbrev])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{abbrev} resolved in the sandbox");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("hunter2"));
    }
    assert_eq!(
        in_sandbox(&ck, "rev-list --count HEAD"),
        "2",
        "the base's history"
    );
}

#[test]
fn a_later_base_chains_to_its_ancestors_store_the_union_still_exact_and_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = operator_repo(tmp.path());
    let stores = store::Stores::new(tmp.path());
    let mut lens = Vec::new();
    for i in 0..7 {
        let base = sh(
            &repo,
            &format!(
                "echo {i} > f{i} && git add f{i} && git commit -qm c{i} && git rev-parse HEAD \
                 && echo reset-{i} > r && git add r && git commit -qm r && git reset -q --hard HEAD~1"
            ),
        );
        let base = base.lines().next().unwrap().to_string();
        let chain = stores.acquire(&repo, &base).unwrap();
        lens.push(chain.len());
        assert!(chain.len() <= store::MAX_CHAIN);
        // The chain's union is exactly what the base reaches, and each store in it holds
        // only what its parent's base does not.
        let ck = Checkout {
            dir: tmp.path().join(format!("sb{i}")),
        };
        ck.create(&chain[0], "sandbox/x", &base).unwrap();
        assert_eq!(readable(&ck.git_dir()), reachable(&repo, &base), "base {i}");
        let own = sh(
            &chain[0],
            "git --git-dir . count-objects -v | sed -n 's/^in-pack: //p'",
        );
        let expected = match chain.get(1) {
            Some(parent) => {
                let pbase = parent
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .replace(".git", "");
                reachable(&repo, &base).len() - reachable(&repo, &pbase).len()
            }
            None => reachable(&repo, &base).len(),
        };
        assert_eq!(
            own.parse::<usize>().unwrap(),
            expected,
            "base {i}: {lens:?}"
        );
    }
    assert_eq!(
        lens,
        [1, 2, 3, 4, 4, 4, 4],
        "chained to the nearest store with room"
    );
    // Another sandbox on a base that has a store costs nothing more.
    let before = std::fs::read_dir(&stores.dir).unwrap().count();
    let head = sh(&repo, "git rev-parse HEAD");
    stores.acquire(&repo, &head).unwrap();
    assert_eq!(std::fs::read_dir(&stores.dir).unwrap().count(), before);
}

#[test]
fn gc_sweeps_the_stores_no_sandbox_links_and_keeps_a_linked_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = operator_repo(tmp.path());
    let stores = store::Stores::new(tmp.path());
    let a = sh(&repo, "git rev-parse HEAD");
    stores.acquire(&repo, &a).unwrap();
    let b = sh(
        &repo,
        "echo b > b2 && git add b2 && git commit -qm b && git rev-parse HEAD",
    );
    let chain = stores.acquire(&repo, &b).unwrap();
    assert_eq!(chain.len(), 2);
    let c = sh(
        &repo,
        "git checkout -q --orphan lone && git commit -qm lone && git rev-parse HEAD",
    );
    stores.acquire(&repo, &c).unwrap();
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    ck.create(&chain[0], "sandbox/x", &b).unwrap();
    let live: Vec<PathBuf> = ck.store(&stores).into_iter().collect();
    assert_eq!(live, [stores.path(&b)]);
    let _held = stores.lock().unwrap();
    // Within the grace nothing goes; past it, only the unlinked store.
    assert!(
        stores
            .sweep(&live, std::time::Duration::from_secs(3600))
            .unwrap()
            .is_empty()
    );
    let removed = stores.sweep(&live, std::time::Duration::ZERO).unwrap();
    assert_eq!(removed, [format!("{c}.git")]);
    assert!(stores.path(&a).exists(), "the linked store's parent stays");
    ck.remove().unwrap();
    let removed = stores.sweep(&[], std::time::Duration::ZERO).unwrap();
    assert_eq!(removed.len(), 2);
}

#[test]
fn what_a_sandbox_leaves_out_is_read_from_git_status_and_named() {
    let status = b" M src/a.rs\0R  new.rs\0old.rs\0?? notes.txt\0!! .env\0!! node_modules/\0";
    let l = LeftOut::parse(status);
    assert_eq!(l.changed, ["src/a.rs", "new.rs"]);
    assert_eq!(l.untracked, ["notes.txt"]);
    assert_eq!(l.ignored, [".env", "node_modules/"]);
    assert_eq!(
        l.describe(1),
        "2 changed (src/a.rs, ...), 1 untracked (notes.txt), 2 ignored (.env, ...)"
    );
    assert!(LeftOut::parse(b"").is_empty());
}

#[test]
fn the_operator_repository_reports_changed_untracked_and_ignored_files() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    let sh = |s: &str| {
        let o = std::process::Command::new("sh")
            .arg("-ec")
            .arg(s)
            .current_dir(r)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{s}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    sh(
        "git init -q -b main . && git config user.email o@x && git config user.name o && printf '.env\\nbuild/\\n' > .gitignore && echo a > a && git add -A && git commit -qm one && echo b >> a && echo s > .env && mkdir build && touch build/x && echo n > notes",
    );
    let op = operator(r).unwrap();
    assert!(op.dirty);
    assert_eq!(op.left_out.changed, ["a"]);
    assert_eq!(op.left_out.untracked, ["notes"]);
    assert_eq!(op.left_out.ignored, [".env", "build/"]);
}
