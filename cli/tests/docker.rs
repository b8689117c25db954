//! The CLI against the real engine and the real image (`scripts/build-image` builds
//! `airlock:latest` once). Every test has its own data directory and repository; a guard
//! removes every container labelled with that data directory, even when the test fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{World, commit_script, policy_reading, processes_holding, sh, volumes_of};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_sandboxes_on_one_repository_work_in_parallel_on_their_own_branches() {
    let w = World::new("par");
    let (a, b) = (w.name("a"), w.name("b"));
    let children: Vec<_> = [&a, &b]
        .iter()
        .map(|n| {
            let args = w.new_args(n, Some(&commit_script(n)));
            w.cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
                .stdin(Stdio::null())
                .output()
        })
        .collect();
    for c in children {
        let c = c.unwrap();
        assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    }
    for (me, other) in [(&a, &b), (&b, &a)] {
        w.wait_log(me, "COMMITTED");
        let logs = w.ok(&["logs", me]);
        assert!(
            logs.contains(&format!("sandbox/{me}")),
            "{me} sees its branch: {logs}"
        );
        assert!(
            !logs.contains(&format!("sandbox/{other}")),
            "{me} never sees {other}'s: {logs}"
        );
        assert!(
            !logs.contains("main"),
            "{me} does not see the operator's main: {logs}"
        );
    }
    let rows = w.list();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r["state"] == "running" && r["sessions"] == 1),
        "{rows:?}"
    );
    for n in [&a, &b] {
        let status: Value = serde_json::from_str(&w.ok(&["status", n, "--json"])).unwrap();
        assert_eq!(status["ahead"], 1, "{status}");
        w.ok(&["fetch", n]);
        let subject = sh(&w.repo(), &format!("git log -1 --format=%s sandbox/{n}"));
        assert_eq!(&subject, n);
    }
    // The operator's checkout is untouched: still on main, clean.
    assert_eq!(sh(&w.repo(), "git symbolic-ref --short HEAD"), "main");
    assert_eq!(sh(&w.repo(), "git status --porcelain"), "");
    for n in [&a, &b] {
        w.ok(&["destroy", n]);
    }
    assert!(w.list().is_empty());
}

#[test]
fn stop_start_restart_missing_destroy_and_gc() {
    let w = World::new("life");
    let s = w.name("s");
    let args = w.new_args(&s, None);
    w.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    w.ok(&["stop", &s]);
    assert_eq!(w.row(&s)["state"], "stopped");
    // A rescan needs a running sandbox: one line that says how to get one.
    let o = w.run(&["rescan", &s]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is not running") && err.contains("airlock start"),
        "{err}"
    );
    w.ok(&["start", &s]);
    let row = w.row(&s);
    assert_eq!(
        (row["state"].as_str(), row["sessions"].as_u64()),
        (Some("running"), Some(2))
    );
    // A restart by the engine, behind the CLI's back, is a third session.
    sh(
        &w.repo(),
        &format!("docker restart -t 1 airlock-{s} >/dev/null"),
    );
    assert_eq!(w.row(&s)["sessions"], 3);
    // The operator's rescan reaches PID 1 (SIGHUP), which reads the workspace's secret
    // files again and says so in the sandbox's report.
    let out = w.ok(&["rescan", &s]);
    assert!(out.contains("SIGHUP"), "{out}");
    let start = std::time::Instant::now();
    loop {
        let o = w.run(&["exec", &s, "--", "cat", "/run/airlock/workspace-secrets"]);
        let report = String::from_utf8_lossy(&o.stdout).into_owned();
        if report.contains("rescanned at") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no rescan in the report: {report}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A container removed by hand shows as missing, never a crash.
    sh(&w.repo(), &format!("docker rm -f airlock-{s} >/dev/null"));
    assert_eq!(w.row(&s)["state"], "missing");
    let o = w.run(&["exec", &s, "--", "true"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    w.ok(&["destroy", &s]);

    // Unfetched work: destroy refuses (exit 4) until --force.
    let d = w.name("d");
    let args = w.new_args(&d, Some(&commit_script("work")));
    w.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    w.wait_log(&d, "COMMITTED");
    let o = w.run(&["destroy", &d]);
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("holds 1 commit") && err.contains("--force"),
        "{err}"
    );
    w.ok(&["destroy", &d, "--force"]);

    // gc: a stopped sandbox past its TTL goes, one with unfetched work stays.
    let (e, k) = (w.name("e"), w.name("k"));
    for (n, script) in [(&e, None), (&k, Some(commit_script("keep")))] {
        let mut args = w.new_args(n, script.as_deref());
        args.splice(2..2, ["--ttl".to_string(), "0".to_string()]);
        w.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    w.wait_log(&k, "COMMITTED");
    // Stopped by the engine (not `airlock stop`, which would fetch the branch back).
    sh(
        &w.repo(),
        &format!("docker stop -t 1 airlock-{e} airlock-{k} >/dev/null"),
    );
    std::thread::sleep(Duration::from_millis(1100));
    let gc: Value = serde_json::from_str(&w.ok(&["gc", "--json"])).unwrap();
    assert_eq!(gc["removed"][0]["name"], e.as_str(), "{gc}");
    assert_eq!(gc["kept"][0]["name"], k.as_str(), "{gc}");
    assert!(
        gc["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("unfetched"),
        "{gc}"
    );
    assert_eq!(w.list().len(), 1);
    w.ok(&["destroy", &k, "--force"]);
}

#[test]
fn two_concurrent_new_with_one_name_exactly_one_wins_and_a_killed_new_is_collected() {
    let w = World::new("race");
    let n = w.name("x");
    let args = w.new_args(&n, None);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kids: Vec<_> = (0..2)
        .map(|_| {
            w.cmd(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
    assert!(
        codes.contains(&Some(0)) && codes.contains(&Some(4)),
        "{codes:?}: {}",
        outs.iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let loser = outs.iter().find(|o| o.status.code() == Some(4)).unwrap();
    assert!(String::from_utf8_lossy(&loser.stderr).contains("exists already"));
    assert_eq!(w.list().len(), 1);
    w.ok(&["destroy", &n]);

    // Kill `new` part-way, at several points; `gc` must leave nothing behind.
    for delay in [20, 80, 200] {
        let k = w.name(&format!("k{delay}"));
        let args = w.new_args(&k, None);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = w
            .cmd(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        // The engine finishes a create whose client was killed: a container may appear
        // after a gc (how long after depends on the machine's load); a later gc removes it.
        // gc again until nothing is left, for as long as an engine may take to finish.
        let left = |k: &str| {
            let container = Command::new("docker")
                .args(["inspect", &format!("airlock-{k}")])
                .output()
                .unwrap()
                .status
                .success();
            let mut left = Vec::new();
            if !w.list().is_empty() {
                left.push("a registry row");
            }
            if w.data().join("sandboxes").join(k).exists() {
                left.push("the checkout");
            }
            if container {
                left.push("the container");
            }
            left
        };
        let start = Instant::now();
        let mut gc = String::new();
        loop {
            // The engine may still be making the killed `new`'s container: a gc that meets
            // its volume in use says so and fails; the next one collects it.
            let o = w.run(&["gc"]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                o.status.success() || err.contains("volume is in use"),
                "airlock gc: {err}"
            );
            gc += &String::from_utf8_lossy(&o.stdout);
            gc += &err;
            // Finished anyway (fast machine): then it is a normal sandbox.
            if w.list()
                .iter()
                .any(|r| r["name"] == k.as_str() && r["state"] == "running")
            {
                w.ok(&["destroy", &k, "--force"]);
            }
            let still = left(&k);
            if still.is_empty() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{still:?} left after kill at {delay} ms and a minute of gc: {gc}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

#[test]
fn bad_input_gets_one_line_and_leaves_nothing() {
    let w = World::new("bad");
    let one_line = |o: &Output, code: i32, what: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(what), "{err}");
    };
    let o = w.run(&["new", "Bad_Name", "--repo", w.repo().to_str().unwrap()]);
    one_line(&o, 2, "not allowed");
    let plain = w.dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let o = w.run(&["new", &w.name("p"), "--repo", plain.to_str().unwrap()]);
    one_line(&o, 2, "is not a git checkout");
    let args = w.new_args(&w.name("i"), None);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--image", "airlock:does-not-exist"]);
    one_line(&w.run(&args), 6, "airlock build");
    let o = w
        .cmd(&["list"])
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    one_line(&o, 5, "DOCKER_HOST");
    let o = w.run(&["status", "nothing-here"]);
    one_line(&o, 3, "airlock list");
    assert!(w.list().is_empty());
    assert!(
        !w.data().join("sandboxes").exists()
            || std::fs::read_dir(w.data().join("sandboxes"))
                .unwrap()
                .next()
                .is_none()
    );
    // A corrupt registry: one line, what to do.
    std::fs::write(w.data().join("registry.sqlite"), vec![b'x'; 4096]).unwrap();
    let _ = std::fs::remove_file(w.data().join("registry.sqlite-wal"));
    let _ = std::fs::remove_file(w.data().join("registry.sqlite-shm"));
    one_line(&w.run(&["list"]), 1, "move it aside");
}

#[test]
fn secrets_are_mounted_files_never_in_a_host_process_or_the_container_config() {
    let w = World::new("sec");
    let value = format!("sekrit-{}-{}", std::process::id(), w.prefix);
    let file = w.dir.path().join("token");
    std::fs::write(&file, &value).unwrap();
    let s = w.name("s");
    std::fs::write(
        w.dir.path().join("policy.toml"),
        policy_reading("github_token"),
    )
    .unwrap();
    let args = w.new_args(&s, Some("exec sleep 600"));
    let mut args: Vec<String> = args;
    args.splice(
        2..2,
        [
            "--secret".to_string(),
            format!("github_token={}", file.display()),
        ],
    );
    let mut child = w
        .cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // While `new` runs and after: no process's argv or environment holds the value.
    let mut scans = 0;
    while child.try_wait().unwrap().is_none() || scans == 0 {
        assert_eq!(processes_holding(&value), Vec::<String>::new());
        scans += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(processes_holding(&value), Vec::<String>::new());
    let inspect = sh(&w.repo(), &format!("docker inspect airlock-{s}"));
    assert!(
        !inspect.contains(&value),
        "the container config holds the secret"
    );
    assert!(
        inspect.contains(&format!("airlock-secrets-{s}:/run/secrets:ro")),
        "mounted read-only: {inspect}"
    );
    w.ok(&["destroy", &s]);
}

/// `airlock exec NAME -- sh -c SCRIPT` as the agent: its stdout and stderr.
fn as_agent(w: &World, name: &str, script: &str) -> String {
    let o = w.run(&["exec", name, "--", "sh", "-c", script]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_secret_is_root_only_inside_and_one_no_credential_reads_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new("sck");
    let value = format!("agent-readable-{}", w.prefix);
    // The operator's files as the issue found them: 0644, and owned by the agent's uid.
    let open = w.dir.path().join("open");
    std::fs::write(&open, &value).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let owned = w.dir.path().join("owned");
    std::fs::write(&owned, &value).unwrap();
    std::os::unix::fs::chown(&owned, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&owned, std::fs::Permissions::from_mode(0o600)).unwrap();
    let policy = w.dir.path().join("policy.toml");

    // Bound by a credential: the sandbox starts, the copy inside is root's 0400, the agent
    // cannot read it.
    for (tag, file) in [("o", &open), ("u", &owned)] {
        std::fs::write(&policy, policy_reading("api_token")).unwrap();
        let s = w.name(tag);
        let mut args = w.new_args(&s, Some("exec sleep 600"));
        args.splice(
            2..2,
            [
                "--secret".to_string(),
                format!("api_token={}", file.display()),
            ],
        );
        w.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let seen = as_agent(
            &w,
            &s,
            "stat -c 'mode=%u:%g:%a' /run/secrets/api_token; cat /run/secrets/api_token",
        );
        assert!(seen.contains("mode=0:0:400"), "{seen}");
        assert!(!seen.contains(&value), "the agent read the secret: {seen}");
        assert!(seen.contains("Permission denied"), "{seen}");
        w.ok(&["destroy", &s]);
    }

    // Bound by nothing: refused before start, with one line naming it; nothing left.
    std::fs::write(&policy, crate::common::POLICY).unwrap();
    let s = w.name("n");
    let mut args = w.new_args(&s, Some("exec sleep 600"));
    args.splice(
        2..2,
        [
            "--secret".to_string(),
            format!("claude_code_oauth_token={}", open.display()),
        ],
    );
    let o = w.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--secret claude_code_oauth_token") && err.contains("no credential"),
        "{err}"
    );
    // The image's own policy (no --policy) is read from the image: same refusal.
    let o = w.run(&[
        "new",
        &w.name("d"),
        "--repo",
        w.repo().to_str().unwrap(),
        "--secret",
        &format!("claude_code_oauth_token={}", open.display()),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("airlock:latest:/etc/airlock/policy.toml"),
        "{err}"
    );
    assert!(w.list().is_empty(), "nothing left");
    let left = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.airlock.data={}", w.data().display()),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "a container is left"
    );
}

#[test]
fn a_sandbox_reads_only_the_objects_its_base_reaches() {
    let w = World::new("obj");
    let repo = w.repo();
    // A sandbox on the first commit: the later one's store chains to its store (mounted
    // beside it in the container), where the first commit's objects are.
    let p = w.name("p");
    w.ok(&w
        .new_args(&p, Some("exec sleep 600"))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    // A password committed and reset away (only an unreachable object holds it), and an
    // object only on another branch; the base has two commits of history.
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
    let old_blob = sh(&repo, "git rev-parse HEAD:a");
    sh(&repo, "echo two > a && git commit -qam two");
    let s = w.name("s");
    let script = format!(
        "for id in {g7} {o7} {g} {o}; do git cat-file -p $id && echo LEAK-$id; done; \
         echo OLD-$(git cat-file -p {b7}); echo COMMITS-$(git rev-list --count HEAD); echo DONE; \
         exec sleep 600",
        g7 = &gone[..7],
        o7 = &other[..7],
        g = gone,
        o = other,
        b7 = &old_blob[..7],
    );
    let args = w.new_args(&s, Some(&script));
    w.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    w.wait_log(&s, "DONE");
    let logs = w.ok(&["logs", &s]);
    assert!(
        !logs.contains("LEAK") && !logs.contains("hunter2"),
        "{logs}"
    );
    assert!(!logs.contains("only-on-other"), "{logs}");
    assert!(
        logs.contains("OLD-one"),
        "the base's history is readable: {logs}"
    );
    assert!(logs.contains("COMMITS-2"), "{logs}");
    let stores: Vec<String> = std::fs::read_dir(w.data().join("stores"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".git"))
        .collect();
    assert_eq!(stores.len(), 2, "one store per base: {stores:?}");
    let alternates = std::fs::read_to_string(
        w.data()
            .join("stores")
            .join(format!("{}.git", sh(&repo, "git rev-parse HEAD")))
            .join("objects/info/alternates"),
    )
    .unwrap();
    assert!(alternates.starts_with("../../"), "chained: {alternates}");
    w.ok(&["destroy", &s]);
    w.ok(&["destroy", &p]);
}

#[test]
fn as_a_docker_group_user_a_stored_secret_is_mounted_without_secret_and_root_only() {
    use std::os::unix::fs::MetadataExt;
    let w = World::new("sru");
    // uid 1000, in the engine socket's group (as a docker-group user is), owns the world and
    // stores the key the way the README says (`airlock secret set`): a 0600 file of its own.
    let sock = std::fs::metadata("/var/run/docker.sock").expect("the engine's socket");
    let value = format!("stored-{}", w.prefix);
    std::fs::write(
        w.dir.path().join("policy.toml"),
        policy_reading("api_token"),
    )
    .unwrap();
    sh(w.dir.path(), "chown -R 1000:1000 .");
    let as_user = |args: &[&str], input: Option<&str>| {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=1000",
            "--regid=1000",
            &format!("--groups={}", sock.gid()),
            "--",
            env!("CARGO_BIN_EXE_airlock"),
        ])
        .args(args)
        .env("AIRLOCK_DATA_DIR", w.data())
        .env("AIRLOCK_CONFIG_DIR", w.config())
        .env("HOME", w.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(i) = input {
            std::io::Write::write_all(&mut stdin, i.as_bytes()).unwrap();
        }
        drop(stdin);
        child.wait_with_output().unwrap()
    };
    for (name, v) in [("api_token", value.as_str()), ("unread_token", "other")] {
        let o = as_user(&["secret", "set", name], Some(v));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let stored = w.config().join("secrets/api_token");
    assert_eq!(std::fs::metadata(&stored).unwrap().uid(), 1000);
    // No --secret: the policy's credential reads /run/secrets/api_token, the store has it.
    let s = w.name("s");
    let args = w.new_args(&s, Some("exec sleep 600"));
    let o = as_user(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let seen = as_agent(
        &w,
        &s,
        "stat -c 'mode=%u:%g:%a' /run/secrets/api_token; cat /run/secrets/api_token; ls /run/secrets",
    );
    assert!(seen.contains("mode=0:0:400"), "{seen}");
    assert!(!seen.contains(&value), "the agent read the secret: {seen}");
    assert!(seen.contains("Permission denied"), "{seen}");
    assert!(
        !seen.contains("unread_token"),
        "a stored secret no credential reads stays out: {seen}"
    );
    // The proxy holds it: the start did not warn that the credential is missing.
    let logs = w.ok(&["logs", &s]);
    assert!(!logs.contains("\"api_token\" is not configured"), "{logs}");
    // The same user removes it: its audit directory (the proxy user's) is kept all the same.
    let o = as_user(&["destroy", &s], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("could not be kept"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let kept: Vec<_> = std::fs::read_dir(w.data().join("audit"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        kept.iter().any(|k| k.starts_with(&format!("{s}-"))),
        "{kept:?}"
    );
    assert!(!w.data().join("sandboxes").join(&s).exists());
    assert!(w.list().is_empty());
    assert!(
        volumes_of(&w).is_empty(),
        "the secrets and the home go with the sandbox: {:?}",
        volumes_of(&w)
    );
}

#[test]
fn the_agent_home_survives_stop_and_start_and_goes_with_destroy() {
    let w = World::new("home");
    let s = w.name("s");
    w.ok(&w
        .new_args(&s, Some("exec sleep 600"))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    // What an agent leaves in its home: history, a tool in ~/bin; and a file in /tmp.
    let first = as_agent(
        &w,
        &s,
        "echo remembered > ~/.history && mkdir -p ~/bin && printf '#!/bin/sh\\necho RAN-HOME\\n' > ~/bin/t \
         && chmod +x ~/bin/t && ~/bin/t && echo scratch > /tmp/scratch && cat /run/airlock/session.key | sha256sum",
    );
    assert!(first.contains("RAN-HOME"), "{first}");
    w.ok(&["stop", &s]);
    w.ok(&["start", &s]);
    let second = as_agent(
        &w,
        &s,
        "cat ~/.history; ~/bin/t; ls /tmp/scratch 2>&1; cat /run/airlock/session.key | sha256sum",
    );
    assert!(
        second.contains("remembered") && second.contains("RAN-HOME"),
        "{second}"
    );
    assert!(
        second.contains("No such file"),
        "/tmp is per start: {second}"
    );
    let key = |t: &str| t.lines().last().unwrap_or_default().to_string();
    assert_ne!(key(&first), key(&second), "the session key is per start");
    assert!(volumes_of(&w).contains(&format!("airlock-home-{s}")));
    w.ok(&["destroy", &s]);
    assert!(volumes_of(&w).is_empty(), "{:?}", volumes_of(&w));
}

#[test]
fn tmp_and_the_home_run_programs_but_honour_no_setuid_or_devices() {
    let w = World::new("exec");
    let s = w.name("s");
    w.ok(&w
        .new_args(&s, Some("exec sleep 600"))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    let seen = as_agent(
        &w,
        &s,
        "printf '#!/bin/sh\\necho RAN-TMP\\n' > /tmp/t && chmod +x /tmp/t && /tmp/t; \
         grep -E ' /tmp ' /proc/self/mountinfo; \
         cp /bin/cat /tmp/suid && chmod u+s /tmp/suid; /tmp/suid /proc/self/status | grep -E '^(Uid|NoNewPrivs)'",
    );
    assert!(seen.contains("RAN-TMP"), "{seen}");
    let tmp = seen
        .lines()
        .find(|l| l.contains(" /tmp "))
        .unwrap_or_default();
    assert!(
        tmp.contains("nosuid") && tmp.contains("nodev") && !tmp.contains("noexec"),
        "{tmp}"
    );
    // A setuid bit the agent sets gives it nothing: its own uid, no_new_privs.
    assert!(seen.contains("NoNewPrivs:\t1"), "{seen}");
    assert!(!seen.contains("Uid:\t0"), "{seen}");
    w.ok(&["destroy", &s]);
}

#[test]
fn a_shell_sandbox_stops_by_hang_up_not_by_kill() {
    let w = World::new("stop");
    let s = w.name("s");
    // The image's shell, interactive on the sandbox's terminal: it ignores SIGTERM.
    w.ok(&w
        .new_args(&s, None)
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    w.ok(&["stop", &s]);
    let code = sh(
        &w.repo(),
        &format!("docker inspect -f '{{{{.State.ExitCode}}}}' airlock-{s}"),
    );
    // 137 is the engine's SIGKILL after its grace period; a hung-up bash ends with 129.
    assert_ne!(code, "137", "the shell outlived the stop's SIGTERM");
    w.ok(&["destroy", &s]);
}

#[test]
fn a_sandbox_sees_the_operator_s_remotes_without_their_credentials() {
    let w = World::new("rem");
    sh(
        &w.repo(),
        "git remote add origin https://me:ghp_NOTFORTHEAGENT@github.com/acme/app.git \
         && git remote add local /srv/git/app.git \
         && git config remote.origin.uploadpack 'touch /tmp/x; git-upload-pack'",
    );
    let s = w.name("s");
    let script = "git remote -v; git config --get-regexp '^remote\\.'; git fetch local; echo FETCHED; exec sleep 600";
    w.ok(&w
        .new_args(&s, Some(script))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    w.wait_log(&s, "FETCHED");
    let logs = w.ok(&["logs", &s]);
    assert!(
        logs.contains("origin\thttps://github.com/acme/app.git (fetch)"),
        "{logs}"
    );
    assert!(logs.contains("local\t/srv/git/app.git (push)"), "{logs}");
    assert!(!logs.contains("NOTFORTHEAGENT"), "{logs}");
    assert!(!logs.contains("uploadpack"), "{logs}");
    // A remote the sandbox may not reach: the refusal says how the work comes back.
    assert!(
        logs.contains(&format!("comes back to their repository as sandbox/{s}"))
            && logs.contains(&format!("airlock fetch {s}")),
        "{logs}"
    );
    w.ok(&["destroy", &s]);
}

/// A start is ready when PID 1's record in the sandbox's control directory (a host
/// directory of the CLI's, mounted in the container) says so, not when the container prints
/// something; each start writes its own. Inside, the agent can neither list that directory,
/// read the record nor replace it.
#[test]
fn a_start_is_ready_by_its_record_and_the_agent_cannot_reach_the_control_directory() {
    let w = World::new("ctl");
    let s = w.name("s");
    w.ok(&w
        .new_args(
            &s,
            Some("echo 'airlock: session fake ready in 1 ms'; exec sleep 600"),
        )
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    let control = w.data().join("sandboxes").join(&s).join("control");
    let record = || -> Value {
        let text = std::fs::read_to_string(control.join("status.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let first = record();
    assert_eq!(first["state"], "ready", "{first}");
    assert!(first["steps"]["total_ms"].as_u64().is_some(), "{first}");
    let seen = as_agent(
        &w,
        &s,
        "ls /run/airlock >/dev/null; echo runlist=$?; \
         ls /run/airlock/operator; echo list=$?; \
         cat /run/airlock/operator/control/status.json; echo read=$?; \
         echo '{}' > /run/airlock/operator/control/status.json; echo forge=$?",
    );
    assert!(seen.contains("runlist=0"), "{seen}");
    for step in ["list", "read", "forge"] {
        let status = seen
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{step}=")))
            .unwrap_or_else(|| panic!("{step} did not run: {seen}"));
        assert_ne!(status, "0", "{step} succeeded: {seen}");
    }
    assert!(
        !seen.contains("\"state\""),
        "the agent read the record: {seen}"
    );
    assert_eq!(record(), first, "the record is unchanged");
    // A new start: its own record, another session.
    w.ok(&["stop", &s]);
    w.ok(&["start", &s]);
    let second = record();
    assert_eq!(second["state"], "ready", "{second}");
    assert_ne!(second["session"], first["session"]);
    w.ok(&["destroy", &s]);
    assert!(!control.exists());
}
