//! Sessions against the real engine and image: `run` (one shot, branch back, nothing left),
//! `exec` (a confined session through the entrypoint, never root) and `attach` (the agent's
//! terminal), with and without a terminal on our side (`script` gives us a real one).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{World, sh};
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// `airlock ARGS` with `input` on stdin (a pipe, not a terminal).
fn piped(w: &World, args: &[&str], input: &[u8]) -> Output {
    let mut child = w
        .cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// `airlock ARGS` on a pseudo-terminal (`script`); its status is the CLI's.
fn on_terminal(w: &World, args: &[&str]) -> Output {
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_airlock"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let o = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .env("AIRLOCK_DATA_DIR", w.data())
        .env("AIRLOCK_CONFIG_DIR", w.config())
        .stdin(Stdio::null())
        .output();
    o.expect("`script` (util-linux) runs the CLI on a pseudo-terminal; install util-linux")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace('\r', "")
}

fn run_args(w: &World, name: &str, script: &str) -> Vec<String> {
    let policy = w.dir.path().join("policy.toml");
    [
        "run",
        w.repo().to_str().unwrap(),
        "--name",
        name,
        "--policy",
        policy.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn run_is_one_session_whose_branch_comes_back_and_leaves_nothing() {
    let w = World::new("run");
    let n = w.name("one");
    // No identity configured in the sandbox: the operator's (the repository's o <o@x>) is
    // the default.
    let script = "echo two > b; git add b; git commit -qm from-run; echo OUT-$(id -u); exit 7";
    let o = w.run(&strs(&run_args(&w, &n, script)));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(7), "the agent's status: {err}");
    assert!(
        out.contains("OUT-1000"),
        "the agent's output, as the agent: {out}"
    );
    assert!(err.contains(&format!("sandbox/{n} is at")), "{err}");
    let subject = sh(
        &w.repo(),
        &format!("git log -1 --format=%s/%an/%ae sandbox/{n}"),
    );
    assert_eq!(
        subject, "from-run/o/o@x",
        "the branch is kept in the repository"
    );
    assert!(w.list().is_empty(), "no registry row left");
    assert!(
        !w.data().join("sandboxes").join(&n).exists(),
        "no checkout left"
    );
    let c = Command::new("docker")
        .args(["inspect", &format!("airlock-{n}")])
        .output()
        .unwrap();
    assert!(!c.status.success(), "the container is removed");
    assert_eq!(sh(&w.repo(), "git symbolic-ref --short HEAD"), "main");
}

#[test]
fn run_attaches_a_terminal_when_there_is_one() {
    let w = World::new("rtty");
    let n = w.name("t");
    let o = on_terminal(&w, &strs(&run_args(&w, &n, "tty; stty size; exit 3")));
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("/dev/pts/"), "the agent has a terminal: {out}");
    assert!(w.list().is_empty(), "{out}");
    // Without one, it has none.
    let o = w.run(&strs(&run_args(&w, &w.name("p"), "tty || echo NO-TTY")));
    assert!(text(&o.stdout).contains("NO-TTY"), "{}", text(&o.stderr));
}

#[test]
fn run_keeps_a_sandbox_whose_work_is_not_committed() {
    let w = World::new("rkeep");
    let n = w.name("k");
    let o = w.run(&strs(&run_args(&w, &n, "echo draft > notes.txt")));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("is kept") && err.contains("did not commit"),
        "{err}"
    );
    assert_eq!(w.row(&n)["state"], "stopped", "{err}");
    let kept = w.data().join("sandboxes").join(&n).join("work/notes.txt");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "draft\n");
    w.ok(&["destroy", &n, "--force"]);
}

#[test]
fn exec_is_a_confined_session_and_attach_reaches_the_agent() {
    let w = World::new("sess");
    let s = w.name("s");
    w.ok(&strs(&w.new_args(&s, None)));
    // A pipe: stdin reaches the command up to its end; the command is the agent, confined.
    let probe = "cat; id -u; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; \
                 echo proxy=$HTTPS_PROXY; pwd; exit 5";
    let o = piped(&w, &["exec", &s, "--", "sh", "-c", probe], b"piped-in\n");
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(5), "{out}{}", text(&o.stderr));
    for want in [
        "piped-in\n1000\n",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "proxy=http://127.0.0.1:3128",
        "/workspace",
    ] {
        assert!(out.contains(want), "{want:?} in {out}");
    }
    // A terminal: the session gets one too.
    let o = on_terminal(&w, &["exec", &s, "--", "sh", "-c", "tty; exit 4"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("/dev/pts/"), "{}", text(&o.stdout));

    // attach: the agent (bash on the container's terminal) reads what we send.
    let o = piped(&w, &["attach", &s], b"echo hello-$((6*7))\nexit 3\n");
    assert!(text(&o.stdout).contains("hello-42"), "{}", text(&o.stdout));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert_eq!(w.row(&s)["state"], "stopped");
    // Detaching (ctrl-p ctrl-q) leaves it running and exits 0 at once (it used to wait 3 s
    // to see whether the container stopped).
    w.ok(&["start", &s]);
    let t = std::time::Instant::now();
    let o = piped(&w, &["attach", &s], b"\x10\x11");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        t.elapsed().as_millis() < 1500,
        "detach took {:?}",
        t.elapsed()
    );
    assert_eq!(w.row(&s)["state"], "running");
    w.ok(&["destroy", &s]);
}

#[test]
fn bad_input_to_run_and_the_new_commands_gets_one_line_and_leaves_nothing() {
    let w = World::new("rbad");
    let one_line = |args: &[&str], env: Option<(&str, &str)>, code: i32, what: &str| {
        let mut c = w.cmd(args);
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        let o = c.stdin(Stdio::null()).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    };
    let r = w.repo();
    let r = r.to_str().unwrap();
    let plain = w.dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let p = plain.to_str().unwrap();
    one_line(&["run", p], None, 2, "is not a git checkout");
    one_line(&["run", "/nonexistent/x"], None, 2, "is not a git checkout");
    one_line(&["run", r, "--name", "Odd_Name"], None, 2, "not allowed");
    one_line(&["run", r, "--agent", "a b"], None, 2, "not an agent name");
    one_line(
        &["run", r, "--image", "airlock:does-not-exist"],
        None,
        6,
        "airlock build",
    );
    one_line(
        &["run", r, "--secret", "absent"],
        None,
        3,
        "airlock secret set absent",
    );
    one_line(
        &["run", r],
        Some(("DOCKER_HOST", "unix:///nonexistent.sock")),
        5,
        "DOCKER_HOST",
    );
    one_line(&["exec", "absent", "--", "true"], None, 3, "airlock list");
    one_line(&["attach", "absent"], None, 3, "airlock list");
    one_line(&["secret", "set", "../x"], None, 2, "not allowed");
    one_line(&["secret", "rm", "absent"], None, 3, "airlock secret ls");
    one_line(
        &["devcontainer", "/nonexistent/x"],
        None,
        2,
        "not a project directory",
    );
    one_line(&["k8s", "render", "Odd_Name"], None, 2, "not allowed");
    // Nothing half-made: no row, no checkout, no container, no devcontainer file.
    assert!(w.list().is_empty());
    let dirs = std::fs::read_dir(w.data().join("sandboxes")).map_or(0, |d| d.count());
    assert_eq!(dirs, 0, "no checkout left");
    let label = format!("label=dev.airlock.data={}", w.data().display());
    assert_eq!(
        sh(
            &w.repo(),
            &format!("docker ps -aq --filter {label} | wc -l")
        ),
        "0"
    );
    assert!(!plain.join(".devcontainer").exists());
    // A corrupt registry: one line saying what to do, for run as for every command.
    std::fs::write(w.data().join("registry.sqlite"), vec![b'x'; 4096]).unwrap();
    let _ = std::fs::remove_file(w.data().join("registry.sqlite-wal"));
    let _ = std::fs::remove_file(w.data().join("registry.sqlite-shm"));
    one_line(&["run", r], None, 1, "move it aside");
    let after = std::fs::read_dir(w.data().join("sandboxes")).map_or(0, |d| d.count());
    assert_eq!(after, 0, "no checkout left");
}

#[test]
fn the_readme_command_scripts_airlock_gives_one_line_on_bad_input() {
    let w = World::new("sbad");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/airlock");
    let one_line = |args: &[&str], env: Option<(&str, &str)>, code: i32, what: &str| {
        let mut c = Command::new(&script);
        c.args(args)
            .env("AIRLOCK_BIN", env!("CARGO_BIN_EXE_airlock"))
            .env("AIRLOCK_DATA_DIR", w.data())
            .env("AIRLOCK_CONFIG_DIR", w.config());
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        let o = c.stdin(Stdio::null()).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    };
    let plain = w.dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    // Checked before any image is built (the script asks `run` to build a missing one).
    one_line(
        &["run", plain.to_str().unwrap()],
        None,
        2,
        "is not a git checkout",
    );
    one_line(
        &["run", w.repo().to_str().unwrap()],
        Some(("DOCKER_HOST", "unix:///nonexistent.sock")),
        5,
        "start Docker",
    );
    one_line(
        &["run"],
        Some(("AIRLOCK_BIN", "/nonexistent/airlock")),
        1,
        "not an executable",
    );
    assert!(w.list().is_empty());
}

/// `airlock run` in the background, its output discarded (it is killed part-way).
fn spawn_run(w: &World, name: &str, script: &str) -> std::process::Child {
    w.cmd(&strs(&run_args(w, name, script)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn gc_json(w: &World) -> serde_json::Value {
    serde_json::from_str(&w.ok(&["gc", "--json"])).unwrap()
}

fn names_in(v: &serde_json::Value, list: &str) -> Vec<String> {
    v[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect()
}

fn gone(w: &World, name: &str) -> bool {
    let c = Command::new("docker")
        .args(["inspect", &format!("airlock-{name}")])
        .output()
        .unwrap();
    !c.status.success()
        && !w.data().join("sandboxes").join(name).exists()
        && w.list().iter().all(|r| r["name"] != name)
}

#[test]
fn a_killed_run_is_finished_by_gc_its_branch_fetched_back_never_lost() {
    let w = World::new("kill");
    let commit = |file: &str, then: &str| {
        format!(
            "git config user.name agent; git config user.email a@x; echo {file} > {file}; \
             git add {file}; git commit -qm {file}; echo COMMITTED; {then}"
        )
    };

    // SIGKILLed while the agent works: gc leaves the sandbox alone while its container runs,
    // and once it has stopped fetches the branch back and removes everything.
    let a = w.name("a");
    let mut run = spawn_run(&w, &a, &commit("from-a", "exec sleep 600"));
    w.wait_log(&a, "COMMITTED");
    // While `run` lives, its sandbox is not gc's, whatever its state.
    let gc = gc_json(&w);
    assert!(
        !names_in(&gc, "removed").contains(&a) && !names_in(&gc, "kept").contains(&a),
        "{gc}"
    );
    run.kill().unwrap();
    run.wait().unwrap();
    let gc = gc_json(&w);
    assert_eq!(names_in(&gc, "kept"), [a.as_str()], "still running: {gc}");
    assert_eq!(w.row(&a)["oneshot"], true);
    sh(
        &w.repo(),
        &format!("docker stop -t 1 airlock-{a} >/dev/null"),
    );
    let gc = gc_json(&w);
    assert_eq!(names_in(&gc, "removed"), [a.as_str()], "{gc}");
    assert!(
        gc["removed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("fetched back"),
        "{gc}"
    );
    let subject = sh(&w.repo(), &format!("git log -1 --format=%s sandbox/{a}"));
    assert_eq!(subject, "from-a", "the commit came back");
    assert!(gone(&w, &a), "nothing left of {a}");

    // Killed, then its container removed by hand: the next `run` finishes it on its way
    // (the opportunistic gc): the commits are in its git dir, not in the container.
    let b = w.name("b");
    let mut run = spawn_run(&w, &b, &commit("from-b", "exec sleep 600"));
    w.wait_log(&b, "COMMITTED");
    run.kill().unwrap();
    run.wait().unwrap();
    sh(&w.repo(), &format!("docker rm -f airlock-{b} >/dev/null"));
    let o = w.run(&strs(&run_args(&w, &w.name("c"), "true")));
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "gc: removed {b}: an interrupted `run` (its container is gone)"
        )),
        "{err}"
    );
    let subject = sh(&w.repo(), &format!("git log -1 --format=%s sandbox/{b}"));
    assert_eq!(subject, "from-b");
    assert!(gone(&w, &b));

    // Work the agent did not commit is never removed: kept once, then an ordinary sandbox.
    let u = w.name("u");
    let mut run = spawn_run(&w, &u, "echo draft > notes.txt; echo WROTE; exec sleep 600");
    w.wait_log(&u, "WROTE");
    run.kill().unwrap();
    run.wait().unwrap();
    sh(
        &w.repo(),
        &format!("docker stop -t 1 airlock-{u} >/dev/null"),
    );
    let gc = gc_json(&w);
    assert_eq!(names_in(&gc, "kept"), [u.as_str()], "{gc}");
    assert!(
        gc["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("did not commit"),
        "{gc}"
    );
    let row = w.row(&u);
    assert_eq!(
        (row["state"].as_str(), row["oneshot"].as_bool()),
        (Some("stopped"), Some(false))
    );
    let kept = w.data().join("sandboxes").join(&u).join("work/notes.txt");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "draft\n");
    let gc = gc_json(&w);
    assert!(
        names_in(&gc, "kept").is_empty() && names_in(&gc, "removed").is_empty(),
        "{gc}"
    );
    w.ok(&["destroy", &u, "--force"]);
    assert!(w.list().is_empty());
}

#[test]
fn run_detaches_on_ctrl_p_ctrl_q_and_gc_finishes_it_once_it_stops() {
    let w = World::new("rdet");
    let n = w.name("d");
    let cli = env!("CARGO_BIN_EXE_airlock");
    let policy = w.dir.path().join("policy.toml");
    // The terminal's input: once the agent has committed (the CLI's terminal is raw by then,
    // so ctrl-q is a byte, not XON), the detach sequence; then it stays open a while.
    std::fs::write(
        w.dir.path().join("feed.sh"),
        format!(
            "until '{cli}' logs {n} 2>/dev/null | grep -q COMMITTED; do sleep 0.1; done\n\
             sleep 0.5; printf '\\020\\021'; sleep 5\n"
        ),
    )
    .unwrap();
    std::fs::write(
        w.dir.path().join("run.sh"),
        format!(
            "'{cli}' run '{}' --name {n} --policy '{}' -- sh -c \
             'echo two > b; git add b; git commit -qm from-detached; echo COMMITTED; exec sleep 600'\n\
             echo \"EXIT=$?\"\n",
            w.repo().display(),
            policy.display()
        ),
    )
    .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg("sh feed.sh | script -qec 'sh run.sh' /dev/null")
        .current_dir(w.dir.path())
        .env("AIRLOCK_DATA_DIR", w.data())
        .env("AIRLOCK_CONFIG_DIR", w.config())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert!(out.contains(&format!("detached from {n}")), "{out}");
    assert!(out.contains("EXIT=0"), "{out}");
    let row = w.row(&n);
    assert_eq!(
        (row["state"].as_str(), row["oneshot"].as_bool()),
        (Some("running"), Some(true))
    );
    // gc keeps it while it runs, finishes it once stopped.
    assert!(w.ok(&["gc"]).contains(&format!("kept {n}")));
    sh(
        &w.repo(),
        &format!("docker stop -t 1 airlock-{n} >/dev/null"),
    );
    assert!(w.ok(&["gc"]).contains(&format!("removed {n}")));
    let subject = sh(&w.repo(), &format!("git log -1 --format=%s sandbox/{n}"));
    assert_eq!(subject, "from-detached");
    assert!(gone(&w, &n));
}

#[test]
fn run_lists_what_can_run_on_the_host_first_and_the_wind_up_runs_none_of_it() {
    let w = World::new("rrev");
    let n = w.name("r");
    let marker = w.dir.path().join("marker");
    let payload = format!("sh -c 'id >> {}; cat'", marker.display());
    // The agent plants, with the image's own git for the nested repositories: a nested
    // repository whose clean filter is the payload (then added as a gitlink, if the git API
    // lets it), an embedded bare repository whose fsmonitor is the payload, a symlinked and
    // a case-varied .vscode, and a name that would erase the operator's terminal lines.
    let script = format!(
        "set -x; mkdir sub && cd sub && /usr/bin/git init -q . && /usr/bin/git config user.email a@x \
         && /usr/bin/git config user.name a && echo '* filter=x' > .gitattributes && echo d > f \
         && /usr/bin/git add . && /usr/bin/git commit -qm s && /usr/bin/git config filter.x.clean \"{payload}\" \
         && echo changed > f && cd .. \
         && mkdir -p tools/objects/info tools/refs/heads editor .VSCode .claude \
         && echo 'ref: refs/heads/main' > tools/HEAD && touch tools/objects/info/k tools/refs/heads/k \
         && /usr/bin/git config --file tools/config core.bare true \
         && /usr/bin/git config --file tools/config core.fsmonitor \"{payload}\" \
         && echo '{{}}' > editor/tasks.json && ln -s editor .vscode && echo '{{}}' > .VSCode/settings.json \
         && echo x > \".claude/$(printf 'a\\033[2K\\033[1Ab')\"; \
         git add tools editor .vscode .VSCode .claude; git add sub; git commit -qm plant; echo PLANTED"
    );
    let o = w.run(&strs(&run_args(&w, &n, &script)));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(out.contains("PLANTED"), "{out}{err}");
    assert!(
        !marker.exists(),
        "the wind-up ran what the sandbox wrote: {:?}",
        std::fs::read_to_string(&marker)
    );
    assert!(
        !err.contains('\u{1b}'),
        "a raw escape reached the terminal: {err:?}"
    );
    // The CLI's wind-up lines (the container's own `airlock:` lines come before them).
    let ours: Vec<&str> = err
        .lines()
        .skip_while(|l| !l.starts_with("airlock: review first:"))
        .collect();
    let at = err.find(&format!("sandbox/{n} is at")).unwrap_or(0);
    assert!(
        !ours.is_empty() && err.find("airlock: review first:").unwrap() < at,
        "the list comes before anything else is said of the branch: {err}"
    );
    for p in [
        "tools/:",
        "editor/tasks.json:",
        ".vscode:",
        ".VSCode/settings.json:",
        ".claude/a\\x1b[2K\\x1b[1Ab:",
    ] {
        assert!(
            ours.iter()
                .any(|l| l.starts_with(&format!("airlock:   {p}"))),
            "{p} is not listed: {err}"
        );
    }
    // The nested repository is untracked (or a gitlink): either way the sandbox is kept or
    // gone without anything having run; clean up.
    let _ = w.run(&["destroy", &n, "--force"]);
    assert!(!marker.exists());
}

#[test]
fn a_run_that_changed_nothing_leaves_no_branch_but_its_audit_named_for_it() {
    let w = World::new("quiet");
    // What the sandbox will not have: an edit not committed, an ignored .env, a new file.
    sh(
        &w.repo(),
        "printf '.env\\n' > .gitignore && git add .gitignore && git commit -qm ignore \
         && echo SECRET=1 > .env && echo edit >> a && echo n > notes",
    );
    let n = w.name("q");
    let o = w.run(&strs(&run_args(
        &w,
        &n,
        "echo AGENT-ONLY; curl -s -o /dev/null https://blocked.test/ || true",
    )));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    // The agent's output is the agent's: no proxy line among it.
    assert_eq!(out.trim(), "AGENT-ONLY", "{out}");
    assert!(!err.contains(" INFO "), "{err}");
    let warned = err
        .lines()
        .find(|l| l.contains("not in it"))
        .unwrap_or_default();
    assert!(
        warned.contains("1 changed (a)")
            && warned.contains("1 untracked (notes)")
            && warned.contains("1 ignored (.env)"),
        "{err}"
    );
    assert!(err.contains("no branch"), "{err}");
    assert_eq!(
        sh(&w.repo(), "git branch --list 'sandbox/*'"),
        "",
        "no branch made for a run that changed nothing"
    );
    assert!(w.list().is_empty());
    // The audit outlives the sandbox, and every line names it.
    let audit = w.ok(&["logs", &n, "--audit", "--json"]);
    let lines: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|l| l["host"] == "blocked.test"), "{audit}");
    assert!(
        lines
            .iter()
            .filter(|l| l.get("sandbox").is_some())
            .all(|l| l["sandbox"] == n.as_str()),
        "{audit}"
    );
    let o = w.run(&["logs", "never-was", "--audit"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
}
