//! The first ten minutes (issue 15): what a newcomer does on the first day must work, in the
//! real entrypoint, proxy and firewall in the namespace world.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use airlock_tests::seed_git;

/// `mode = "report"` (the documented way to learn which hosts an agent needs) starts: the
/// self-test proves the firewall with what report mode still denies, a policy denial is let
/// through and logged as `report`, and a hard deny stays denied.
#[test]
fn report_mode_starts_lets_policy_denials_through_and_logs_them() {
    let world = world();
    let airlock = Airlock::new(
        &world,
        "[sandbox]\nname = \"learn\"\nmode = \"report\"\n\n[network]\nallow = [\"allowed.test\"]\n",
    );
    let script = [
        probe(&world, "blocked", "http://blocked.test/"),
        probe(&world, "meta", "http://169.254.169.254/"),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("blocked=200"),
        "report mode lets a policy denial through:\n{text}\n{}",
        stderr(&out)
    );
    assert!(
        text.contains("meta=403"),
        "hard denies stay denied:\n{text}"
    );
    let audit = airlock.audit();
    assert!(
        audit
            .iter()
            .any(|l| l["host"] == "blocked.test" && l["decision"] == "report"),
        "the let-through is logged as report: {audit:#?}"
    );
}

/// Run the entrypoint on a terminal (`script` gives it a pty for stdin, stdout and stderr,
/// as `docker run -it` does) and return what the terminal showed.
fn run_on_a_terminal(
    world: &airlock_tests::World,
    airlock: &Airlock,
    agent: &str,
    env: &[(&str, &str)],
) -> String {
    let entry = airlock.command(world, &["sh", "-c", agent]);
    let mut line = vec![shell_quote(entry.get_program().to_string_lossy().as_ref())];
    line.extend(
        entry
            .get_args()
            .map(|a| shell_quote(a.to_string_lossy().as_ref())),
    );
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qefc", &line.join(" "), "/dev/null"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("AIRLOCK_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script(1)");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(
        out.status.success(),
        "the run on a terminal failed ({:?}):\n{text}\n{}",
        out.status,
        stderr(&out)
    );
    text
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// On a terminal the agent's screen carries only the agent's output, below the one
/// `airlock: session … ready` line printed before the agent starts: the proxy's lines and
/// the entrypoint's own go to `airlock.log` in the audit directory (`AIRLOCK_LOG` still sets
/// the proxy's level), and every decision is in the audit log.
#[test]
fn an_interactive_terminal_carries_only_the_agents_output() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let agent = format!(
        "{}; echo AGENT-DONE",
        probe(&world, "allowed", "https://allowed.test/")
    );
    let screen = run_on_a_terminal(&world, &airlock, &agent, &[]);
    assert!(
        screen.contains("allowed=200") && screen.contains("AGENT-DONE"),
        "{screen}"
    );
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("airlock: session ") && l.contains(" ready in ")),
        "the ready line comes first: {lines:#?}"
    );
    let foreign: Vec<&&str> = lines[1..]
        .iter()
        .filter(|l| !l.contains("allowed=200") && !l.contains("AGENT-DONE"))
        .collect();
    assert!(
        foreign.is_empty(),
        "the terminal shows lines that are not the agent's: {foreign:#?}"
    );
    assert!(
        airlock
            .audit()
            .iter()
            .any(|l| l["host"] == "allowed.test" && l["decision"] == "allow")
    );
    let log = airlock.audit_dir.join("airlock.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(
        text.contains("ready in"),
        "the entrypoint's ready line is in the log:\n{text}"
    );

    // AIRLOCK_LOG=info: the proxy's decision lines, in the log and still not on the screen.
    let screen = run_on_a_terminal(&world, &airlock, &agent, &[("AIRLOCK_LOG", "info")]);
    assert!(!screen.contains("allowed.test:443"), "{screen}");
    assert!(!screen.contains("INFO"), "{screen}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("airlock-proxy ready") && text.contains("allowed.test"),
        "the proxy's lines are in the log:\n{text}"
    );
}

/// A uid no user of the sandbox has: the host user's own uid, as on a machine whose
/// developer is not uid 1000.
const HOST_UID: u32 = 64200;

/// A workspace checkout with its `.git` hidden as the docker flags hide it, owned by
/// `owner`, and the entrypoint (with the shims at the image's path) running `agent` there.
struct GitCheckout {
    world: airlock_tests::World,
    airlock: Airlock,
    git_dir: std::path::PathBuf,
    shims: std::path::PathBuf,
}

impl GitCheckout {
    fn new(owner: u32) -> GitCheckout {
        use std::os::unix::fs::PermissionsExt;
        let world = world();
        let airlock = Airlock::new(&world, POLICY);
        let ws = &airlock.workdir;
        seed_git(ws, &["init", "-q"]);
        std::fs::write(ws.join("README.md"), "hello\n").unwrap();
        seed_git(ws, &["add", "-A"]);
        seed_git(ws, &["commit", "-q", "-m", "seed"]);
        // The image's layout: the hidden git dir under root:airlock-git 0710, the cover root's.
        let parent = world.dir().join("airlock").join("git");
        std::fs::create_dir(&parent).unwrap();
        std::os::unix::fs::chown(&parent, Some(0), Some(world.users().git)).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o710)).unwrap();
        let git_dir = parent.join("workspace.git");
        std::fs::rename(ws.join(".git"), &git_dir).unwrap();
        for p in [ws, &git_dir] {
            let ok = std::process::Command::new("chown")
                .args(["-R", &format!("{owner}:{owner}")])
                .arg(p)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
        std::fs::create_dir(ws.join(".git")).unwrap();
        std::os::unix::fs::chown(ws.join(".git"), Some(0), Some(0)).unwrap();
        let shims = world.dir().join("shims");
        std::fs::create_dir(&shims).unwrap();
        for name in ["git", "git-credential-airlock"] {
            std::fs::copy(bin(name), shims.join(name)).unwrap();
        }
        std::fs::create_dir_all("/usr/local/lib/airlock/bin").unwrap();
        GitCheckout {
            world,
            airlock,
            git_dir,
            shims,
        }
    }

    fn run(&self, agent: &str) -> std::process::Output {
        self.run_with_env(agent, &[])
    }

    fn run_with_env(&self, agent: &str, env: &[(&str, &str)]) -> std::process::Output {
        let (airlock, ws) = (&self.airlock, &self.airlock.workdir);
        let mut cmd = self.world.sandbox_command(std::path::Path::new("/bin/sh"));
        cmd.arg("-c")
            .arg(
                "set -e; mount -t tmpfs -o ro,mode=0555 airlock-cover \"$1/.git\"; \
                 mount --bind \"$2\" /usr/local/lib/airlock/bin; shift 2; exec \"$@\"",
            )
            .arg("wrap")
            .arg(ws)
            .arg(&self.shims)
            .arg(bin("airlock-entrypoint"))
            .arg("--policy")
            .arg(&airlock.policy)
            .arg("--audit-dir")
            .arg(&airlock.audit_dir)
            .arg("--run-dir")
            .arg(&airlock.run_dir)
            .arg("--workdir")
            .arg(ws)
            .arg("--git-dir")
            .arg(&self.git_dir)
            .args(["--", "sh", "-c", agent]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

/// Any workspace owner: the agent runs as the uid that owns the checkout, so what it writes
/// stays the user's, and the git API (effective uid the owner's) commits into the hidden
/// `.git` as that uid too (issue 15, item 4).
#[test]
fn the_agent_runs_as_the_workspace_owner() {
    use std::os::unix::fs::MetadataExt;
    let g = GitCheckout::new(HOST_UID);
    let ws = &g.airlock.workdir;
    let out = g.run(
        "id -u > uid.txt; echo new > new.txt; git add new.txt; \
         git -c user.name=a -c user.email=a@example.com commit -q -m agent; echo commit=$?",
    );
    assert_ok(&out);
    assert!(
        stdout(&out).contains("commit=0"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let uid = std::fs::read_to_string(ws.join("uid.txt")).unwrap();
    assert_eq!(uid.trim(), HOST_UID.to_string());
    assert_eq!(
        std::fs::metadata(ws.join("new.txt")).unwrap().uid(),
        HOST_UID
    );
    let log = seed_git(&g.git_dir, &["log", "--format=%s", "-1"]);
    assert_eq!(log, "agent");
    // Everything in the repository is still the user's: host git keeps working.
    let foreign = std::process::Command::new("find")
        .arg(&g.git_dir)
        .args(["!", "-uid", &HOST_UID.to_string()])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&foreign).trim(),
        "",
        "files in .git not owned by the user"
    );
}

/// A start leaves no denial of its own in the git API's log (PID 1's readiness check is not
/// a refused connection), and every line of that log carries this start's session
/// (issue 15, item 8).
#[test]
fn the_git_log_has_no_self_inflicted_denial_and_carries_the_session() {
    let g = GitCheckout::new(HOST_UID);
    let out = g.run("git status --short >/dev/null; echo status=$?");
    assert_ok(&out);
    assert!(stdout(&out).contains("status=0"), "{}", stderr(&out));
    let session = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("airlock: session "))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no session line:\n{}", stderr(&out)));
    let text = std::fs::read_to_string(g.airlock.audit_dir.join("git-api.jsonl")).unwrap();
    assert!(!text.contains("peer_not_agent"), "{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(l["session"], session.as_str(), "{l}");
    }
}

/// Two sandboxes on one checkout would see and overwrite each other's work: the second start
/// is refused with one line saying so, and the first keeps running (issue 15, item 6).
#[test]
fn a_second_sandbox_on_a_checkout_in_use_is_refused() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let mut first = airlock.spawn(
        &world,
        "touch first-up; while [ ! -e stop ]; do sleep 0.05; done",
    );
    airlock.wait_for_agent_file("first-up");
    let out = airlock.run(&world, "touch second-ran");
    std::fs::write(airlock.workdir.join("stop"), "").unwrap();
    let first_status = first.wait().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_REFUSED), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("airlock:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("in use by another airlock"), "{err}");
    assert!(!airlock.workdir.join("second-ran").exists());
    assert!(first_status.success(), "the first sandbox was disturbed");
    // Once the first is gone, the checkout can be used again.
    let out = airlock.run(&world, "touch third-ran");
    assert_ok(&out);
}

/// Useful without writing a policy (issue 15, item 6): the sandbox name comes from
/// `AIRLOCK_SANDBOX` and, as the policy lists no repository, the workspace's own origin is
/// the authorized one: a push to `main` is refused as outside the sandbox's namespace (with
/// the command that works), not as an unauthorized repository.
#[test]
fn the_sandbox_name_comes_from_the_environment_and_origin_is_authorized() {
    let g = GitCheckout::new(HOST_UID);
    seed_git(
        &g.git_dir,
        &["config", "remote.origin.url", "git@github.com:Acme/App.git"],
    );
    let out = g.run_with_env(
        "git push origin HEAD:main 2>&1; echo push=$?",
        &[("AIRLOCK_SANDBOX", "fix-login")],
    );
    assert_ok(&out);
    let text = stdout(&out);
    assert!(!text.contains("repository_not_authorized"), "{text}");
    assert!(text.contains("HEAD:sandbox/fix-login/"), "{text}");
    assert!(!text.contains("push=0"), "{text}");
}

/// A supported second session (issue 15, item 9): `airlock-entrypoint __session` (what
/// `docker exec -it NAME airlock-entrypoint __session` runs) is the agent with the full
/// confinement of the first one: its uid, no capabilities, `no_new_privs`, seccomp, the
/// proxy settings; its traffic is audited as the agent's, and the firewall stays out of reach.
#[test]
fn a_second_session_is_the_agent_with_the_same_confinement() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let mut first = airlock.spawn(
        &world,
        "touch first-up; while [ ! -e stop ]; do sleep 0.05; done",
    );
    airlock.wait_for_agent_file("first-up");
    let script = format!(
        "echo uid=$(id -u); grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; \
         echo pwd=$(pwd); {}; iptables -F 2>/dev/null; echo flush=$?",
        probe(&world, "allowed", "https://allowed.test/")
    );
    let out = world
        .sandbox_command(&bin("airlock-entrypoint"))
        .args(["__session", "--", "sh", "-c", &script])
        .env("AIRLOCK_RUN_DIR", &airlock.run_dir)
        .output()
        .unwrap();
    // The same under the name `airlock-session` (a link to the entrypoint).
    let link = world.dir().join("airlock-session");
    std::os::unix::fs::symlink(bin("airlock-entrypoint"), &link).unwrap();
    let linked = world
        .sandbox_command(&link)
        .args(["--", "sh", "-c", "echo linked-uid=$(id -u)"])
        .env("AIRLOCK_RUN_DIR", &airlock.run_dir)
        .output()
        .unwrap();
    std::fs::write(airlock.workdir.join("stop"), "").unwrap();
    assert!(first.wait().unwrap().success());
    assert_ok(&out);
    let text = stdout(&out);
    let agent = world.users().agent;
    assert!(
        stdout(&linked).contains(&format!("linked-uid={agent}")),
        "{}",
        stderr(&linked)
    );
    for want in [
        format!("uid={agent}"),
        "CapEff:\t0000000000000000".to_owned(),
        "CapBnd:\t0000000000000000".to_owned(),
        "NoNewPrivs:\t1".to_owned(),
        "Seccomp:\t2".to_owned(),
        format!("pwd={}", airlock.workdir.display()),
        "allowed=200".to_owned(),
    ] {
        assert!(text.contains(&want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("flush=0"), "{text}");
    assert!(
        airlock
            .audit()
            .iter()
            .any(|l| l["host"] == "allowed.test" && l["uid"] == agent),
        "the session's request is audited as the agent's"
    );
}

/// The packets count of the IPv4 OUTPUT rule whose target and protocol match, read in the
/// sandbox's network namespace the way docs/audit.md tells the operator to.
fn reject_count(world: &airlock_tests::World, proto: &str) -> u64 {
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            world.sandbox_ns(),
            "iptables",
            "-vnxL",
            "OUTPUT",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[2] == "REJECT" && f[3] == proto)
        .and_then(|f| f[0].parse().ok())
        .unwrap_or_else(|| panic!("no REJECT {proto} rule:\n{}", stdout(&out)))
}

/// UDP attempts the kernel rejects leave a trace the operator can read (issue 15, item 8):
/// the firewall's REJECT counter, read in the container's network namespace from the host,
/// as docs/audit.md says.
#[test]
fn udp_attempts_show_in_the_firewalls_counters() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    assert_ok(&airlock.run(&world, "true"));
    let udp0 = reject_count(&world, "17");
    let out = airlock.run(
        &world,
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
         s.sendto(b'x', ('203.0.113.10', 9))\" 2>/dev/null; true",
    );
    assert_ok(&out);
    assert!(
        reject_count(&world, "17") > udp0,
        "the UDP attempt is counted"
    );
}
