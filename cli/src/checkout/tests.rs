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
    ck.create(&op, "sandbox/one", &op.head).unwrap();
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
    ck.create(&op, "sandbox/one", &op.head).unwrap();
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
    ck.create(&op, "sandbox/evil", &op.head).unwrap();
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

#[test]
fn risky_paths_are_the_ones_that_run_without_a_command() {
    let changed: Vec<String> = [
        "src/main.rs",
        ".vscode/tasks.json",
        ".envrc",
        "sub/.gitattributes",
        "vendor/x/.git/config",
        ".github/workflows/ci.yml",
        "web/package.json",
        ".devcontainer/devcontainer.json",
        "docs/vscode.md",
        "a/.vscode/settings.json",
        "README.md",
    ]
    .map(String::from)
    .to_vec();
    let got = risky(&changed);
    assert_eq!(
        got,
        [
            ".vscode/tasks.json",
            ".envrc",
            "sub/.gitattributes",
            "vendor/x/.git/config",
            ".github/workflows/ci.yml",
            "web/package.json",
            ".devcontainer/devcontainer.json",
            "a/.vscode/settings.json",
        ]
    );
}

#[test]
fn root_on_a_users_repository_reads_it_and_leaves_it_theirs() {
    // `sudo airlock run ~/src/app`: root on a repository uid 1000 owns.
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test chowns a repository to another user: run it as root (scripts/test does)"
    );
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = operator_repo(tmp.path());
    sh(&repo, "chown -R 1000:1000 .");
    let op =
        operator(&repo).expect("git's ownership check does not refuse the operator's repository");
    assert!(!op.dirty);
    let ck = Checkout {
        dir: tmp.path().join("sb"),
    };
    ck.create(&op, "sandbox/one", &op.head).unwrap();
    std::fs::write(ck.work_tree().join("c"), "agent\n").unwrap();
    in_sandbox(&ck, "add c");
    in_sandbox(&ck, "commit -qm agent");
    let tip = fetch(&op.top, &ck, "one", "sandbox/one", Some("sandbox/one")).unwrap();
    assert_eq!(ahead(&op.top, &tip).unwrap(), 0);
    assert_eq!(changed_paths(&op.top, &op.head, &tip).unwrap(), ["c"]);
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
