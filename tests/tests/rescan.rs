//! The workspace-secrets rescan (issue 21): a secret file the agent writes after start is
//! not read at start (the gap: such a secret passes to any allowed host unless a detector
//! knows its format); SIGHUP to PID 1 reads the workspace again as the agent, and from the
//! proxy's reload on the value is refused `foreign-secret`. Nothing found earlier is lost,
//! a file the rescan cannot use is one line, and SIGHUP no longer reaches the agent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use airlock_tests::World;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// In `.env` at start.
const START: &str = "start-Zq7vK2pL9xW4mN8rT3";
/// An AWS secret access key's shape (40 characters), written by the agent after start.
/// Sent bare, no detector knows it (the `aws-secret-key` format needs its name beside it):
/// only the workspace needle catches it.
const LATER: &str = "wJz9Xk2Qv7Lp4Rt8Ny3Hb6Mc1Df5Gs0Ae2Ku7Wo9";

/// PID 1 of the sandbox's pid namespace: the entrypoint.
fn pid1(world: &World) -> u32 {
    let pids = sandbox_pids(world, |c| c == "airlock-entrypo");
    pids.into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|l| l.split_whitespace().last())
                    == Some("1")
            })
        })
        .expect("the entrypoint is PID 1 of the sandbox")
}

/// The entrypoint's stderr, line by line, as it comes (PID 1's and the proxy's lines).
/// airlock's own log (`airlock.log` in the audit directory, where the entrypoint's and the
/// proxy's lines go since they stay off the agent's terminal), read as it grows.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn of(airlock: &Airlock) -> Lines {
        let path = airlock.audit_dir.join("airlock.log");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut offset = 0usize;
            let mut partial = String::new();
            loop {
                if let Ok(bytes) = std::fs::read(&path)
                    && bytes.len() > offset
                {
                    partial.push_str(&String::from_utf8_lossy(&bytes[offset..]));
                    offset = bytes.len();
                    while let Some(end) = partial.find('\n') {
                        let line: String = partial.drain(..=end).collect();
                        if tx.send(line.trim_end().to_owned()).is_err() {
                            return;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Wait (up to 30 s) for a line containing `what`; returns it.
    fn wait_for(&mut self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {what:?}; airlock.log so far:\n{}", self.all()),
            }
        }
    }

    /// Everything read, and the rest once the entrypoint has exited (the log is complete
    /// then: read until it has been quiet for a second).
    fn rest(&mut self) -> String {
        while let Ok(line) = self.rx.recv_timeout(Duration::from_secs(1)) {
            self.seen.push(line);
        }
        self.all()
    }

    fn all(&self) -> String {
        self.seen.join("\n")
    }
}

/// [`Airlock::spawn`] with the proxy logging at `info` (`AIRLOCK_LOG`, as an operator
/// watching a rescan would set it), so that its `workspace secrets reloaded` line is in
/// airlock.log beside the entrypoint's.
fn spawn(airlock: &Airlock, world: &World, script: &str) -> std::process::Child {
    airlock
        .command(world, &["sh", "-c", script])
        .env("AIRLOCK_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the entrypoint")
}

/// A sandbox whose workspace `.env` holds [`START`] when it starts (the agent's file).
fn with_start_secret(world: &World) -> Airlock {
    let airlock = Airlock::new(world, POLICY_INSPECTED);
    let env = airlock.workdir.join(".env");
    std::fs::write(&env, format!("DB_PASSWORD={START}\n")).unwrap();
    own(world, &env);
    airlock
}

/// The agent posting [`START`] to an allowed host (`start=` status:reason).
fn post_start() -> String {
    format!("echo start=$(c -X POST --data-binary 'v={START}' https://allowed.test/start)\n")
}

/// The agent's script: `c` (curl printing `status:x-airlock-error`), `before`, then the
/// `ready` file and a wait for the test's `go`, then `after`.
fn agent_script(airlock: &Airlock, before: &str, after: &str) -> String {
    let w = airlock.workdir.display();
    format!(
        "c() {{ curl -sS --max-time 10 -o /dev/null -w '%{{http_code}}:%header{{x-airlock-error}}' \"$@\"; }}\n\
         {before}\
         touch {w}/ready\n\
         while [ ! -e {w}/go ]; do sleep 0.05; done\n\
         {after}"
    )
}

fn own(world: &World, path: &Path) {
    std::os::unix::fs::chown(path, Some(world.users().agent), Some(world.users().agent)).unwrap();
}

fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in:\n{text}"))
}

/// The agent overwrites `.env` after start with a new key (the start value gone from the
/// file). Before the rescan the new value reaches the upstream (the gap the rescan closes);
/// after SIGHUP to PID 1 and the proxy's reload, the same POST is refused `foreign-secret`
/// and nothing with the value reaches the upstream; the start value, though no longer in
/// any file, is still refused.
#[test]
fn a_secret_written_after_start_is_refused_after_a_rescan_and_none_is_lost() {
    let world = world();
    let airlock = with_start_secret(&world);
    let w = airlock.workdir.display();
    let script = agent_script(
        &airlock,
        &format!(
            "printf 'AWS_SECRET_ACCESS_KEY={LATER}\\n' > {w}/.env\n\
             echo before=$(c -X POST --data-binary 'v={LATER}' https://allowed.test/before)\n"
        ),
        &format!(
            "echo after=$(c -X POST --data-binary 'v={LATER}' https://allowed.test/after)\n{}",
            post_start()
        ),
    );
    let child = spawn(&airlock, &world, &script);
    let mut lines = Lines::of(&airlock);
    airlock.wait_for_agent_file("ready");
    signal(pid1(&world), "-HUP");
    let reloaded = lines.wait_for("workspace secrets reloaded");
    assert!(reloaded.contains("(1 new, 0 gone)"), "{reloaded}");
    std::fs::write(airlock.workdir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let errs = lines.rest();
    assert!(
        out.status.success(),
        "{:?}\n{}\n{errs}",
        out.status,
        stdout(&out)
    );
    let text = stdout(&out);
    assert_eq!(
        field(&text, "before"),
        "200:",
        "the gap: not read before the rescan"
    );
    assert_eq!(field(&text, "after"), "403:foreign-secret", "{text}");
    assert_eq!(field(&text, "start"), "403:foreign-secret", "{text}");

    // Upstream: the one request before the rescan, nothing after it.
    let log = world.upstream_log().unwrap();
    let reached = |path: &str| {
        log.iter()
            .filter(|l| l["kind"] == "http" && l["path"] == path)
            .count()
    };
    assert_eq!(reached("/before"), 1, "{log:?}");
    assert_eq!(reached("/after") + reached("/start"), 0, "{log:?}");
    let after: Vec<_> = log
        .iter()
        .filter(|l| l["path"] != "/before" && l.to_string().contains(LATER))
        .collect();
    assert!(
        after.is_empty(),
        "the value reached the upstream: {after:?}"
    );

    // Audit: both refusals name the workspace needle; no value anywhere in it.
    let audit = airlock.audit();
    let refused: Vec<_> = audit
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .collect();
    assert_eq!(refused.len(), 2, "{audit:?}");
    assert!(
        refused.iter().all(|l| l["rule"]
            .as_str()
            .is_some_and(|r| r.contains("workspace:.env"))),
        "{refused:?}"
    );
    let audit_text = serde_json::to_string(&audit).unwrap();
    assert!(!audit_text.contains(LATER) && !audit_text.contains(START));
    // The reload is in the audit too: one line, in counts.
    let reloads: Vec<_> = audit.iter().filter(|l| l["event"] == "reload").collect();
    assert_eq!(reloads.len(), 1, "{audit:?}");
    let r = reloads[0];
    assert_eq!(
        (
            &r["kind"],
            &r["decision"],
            &r["needles"],
            &r["added"],
            &r["error"]
        ),
        (
            &"audit".into(),
            &"allow".into(),
            &2.into(),
            &1.into(),
            &serde_json::Value::Null
        ),
        "{r}"
    );

    // Report: the new name, when, the counts; never a value.
    let report = std::fs::read_to_string(airlock.run_dir.join("workspace-secrets")).unwrap();
    assert!(report.contains(".env: AWS_SECRET_ACCESS_KEY"), "{report}");
    assert!(
        report.contains("rescanned at") && report.contains("1 new needles, 2 in all"),
        "{report}"
    );
    assert!(
        errs.contains("airlock: workspace secrets rescanned at"),
        "{errs}"
    );
    for text in [&report, &errs, &text] {
        assert!(
            !text.contains(LATER) && !text.contains(START),
            "a value shown:\n{text}"
        );
    }
}

/// The agent makes its secret files unusable before the rescan: `.env` over the size limit
/// (a new secret inside it), a binary `.env.bin`, an `.env.local` it cannot read itself.
/// The rescan says one line per file and why, the start value stays refused.
#[test]
fn a_rescan_of_unusable_files_says_so_and_keeps_the_old_needles() {
    let world = world();
    let airlock = with_start_secret(&world);
    let w = airlock.workdir.display();
    let script = agent_script(
        &airlock,
        &format!(
            "{{ printf 'AWS_SECRET_ACCESS_KEY={LATER}\\n'; head -c 70000 /dev/zero | tr '\\0' '#'; }} > {w}/.env\n\
             printf 'TOKEN=a\\0b\\n' > {w}/.env.bin\n\
             printf 'API_TOKEN=Kq8v2Xw9Lm3Np7Rt\\n' > {w}/.env.local; chmod 000 {w}/.env.local\n"
        ),
        &post_start(),
    );
    let child = spawn(&airlock, &world, &script);
    let mut lines = Lines::of(&airlock);
    airlock.wait_for_agent_file("ready");
    signal(pid1(&world), "-HUP");
    let reloaded = lines.wait_for("workspace secrets reloaded");
    assert!(
        reloaded.contains("1 needles") && reloaded.contains("(0 new, 0 gone)"),
        "{reloaded}"
    );
    std::fs::write(airlock.workdir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let errs = lines.rest();
    assert!(
        out.status.success(),
        "{:?}\n{}\n{errs}",
        out.status,
        stdout(&out)
    );
    assert_eq!(field(&stdout(&out), "start"), "403:foreign-secret");
    for (file, why) in [
        (".env", "over the 64 KiB limit"),
        (".env.bin", "binary"),
        (".env.local", "Permission denied"),
    ] {
        let line = errs
            .lines()
            .find(|l| l.contains(&format!("workspace secret file {file} not read")))
            .unwrap_or_else(|| panic!("no line for {file}:\n{errs}"));
        assert!(line.contains(why), "{line}");
    }
    assert!(errs.contains("0 new needles, 1 in all"), "{errs}");
    let report = std::fs::read_to_string(airlock.run_dir.join("workspace-secrets")).unwrap();
    assert!(report.contains(".env.bin not read: binary"), "{report}");
    assert!(!errs.contains(LATER) && !errs.contains(START) && !errs.contains("Kq8v2Xw9"));
    let log = world.upstream_log().unwrap();
    assert!(
        !log.iter().any(|l| l.to_string().contains(START)),
        "the start value reached the upstream: {log:?}"
    );
    // The agent's unreadable file stays its own business: the scan ran as the agent.
    let mode = std::fs::metadata(airlock.workdir.join(".env.local"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0);
}

/// SIGHUP to PID 1 is the rescan, never forwarded: the agent's HUP trap does not fire. A
/// signal PID 1 forwards (USR1) still reaches the agent. Only the operator starts a
/// rescan: the agent's own `kill -HUP 1` is refused (another uid) and starts nothing.
#[test]
fn sighup_no_longer_reaches_the_agent_other_signals_do() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let w = airlock.workdir.display();
    let script = format!(
        "trap 'echo hup > {w}/hup' HUP\n\
         trap 'echo usr1 > {w}/usr1; exit 0' USR1\n\
         kill -HUP 1 2>/dev/null; echo $? > {w}/agent-hup\n\
         touch {w}/ready\n\
         while :; do sleep 0.05; done\n"
    );
    let child = spawn(&airlock, &world, &script);
    let mut lines = Lines::of(&airlock);
    airlock.wait_for_agent_file("ready");
    let pid = pid1(&world);
    signal(pid, "-HUP");
    // PID 1 takes its signals one at a time: the rescan's line means HUP was handled
    // before USR1 is sent.
    lines.wait_for("airlock: workspace secrets rescanned at");
    signal(pid, "-USR1");
    let out = child.wait_with_output().unwrap();
    let errs = lines.rest();
    assert!(out.status.success(), "{:?}\n{errs}", out.status);
    assert!(
        airlock.workdir.join("usr1").exists(),
        "USR1 was not forwarded"
    );
    assert!(
        !airlock.workdir.join("hup").exists(),
        "SIGHUP reached the agent's process group"
    );
    let agent_hup = std::fs::read_to_string(airlock.workdir.join("agent-hup")).unwrap();
    assert_ne!(agent_hup.trim(), "0", "the agent signalled PID 1");
    assert_eq!(
        errs.matches("workspace secrets rescanned at").count(),
        1,
        "only the operator's SIGHUP rescanned:\n{errs}"
    );
}

/// A rescan that cannot finish (here the hand-off cannot be read: the proxy user's writer
/// fails) is one line naming what failed; the proxy is not asked to reload and refuses
/// the start value as before.
#[test]
fn a_failed_rescan_is_one_line_and_the_proxy_keeps_its_needles() {
    let world = world();
    let airlock = with_start_secret(&world);
    let w = airlock.workdir.display();
    let script = agent_script(
        &airlock,
        &format!("printf 'AWS_SECRET_ACCESS_KEY={LATER}\\n' > {w}/.env\n"),
        &post_start(),
    );
    let child = spawn(&airlock, &world, &script);
    let mut lines = Lines::of(&airlock);
    airlock.wait_for_agent_file("ready");
    let handoff = airlock.run_dir.join("proxy").join("credentials.json");
    std::fs::set_permissions(&handoff, std::fs::Permissions::from_mode(0o000)).unwrap();
    signal(pid1(&world), "-HUP");
    let failed = lines.wait_for("workspace secrets rescan failed");
    assert!(
        failed.contains("rewriting the hand-off as") && failed.contains("keeps the needles"),
        "{failed}"
    );
    std::fs::write(airlock.workdir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let errs = lines.rest();
    assert!(out.status.success(), "{:?}\n{errs}", out.status);
    assert_eq!(field(&stdout(&out), "start"), "403:foreign-secret");
    assert!(!errs.contains("workspace secrets reloaded"), "{errs}");
    let why = errs
        .lines()
        .filter(|l| l.contains("workspace secrets rescan"))
        .collect::<Vec<_>>();
    assert_eq!(
        why.len(),
        2,
        "the writer's reason and PID 1's line: {why:?}"
    );
    assert!(why[0].contains("Permission denied"), "{why:?}");
    assert!(!errs.contains(LATER) && !errs.contains(START));
    // The proxy was never asked: nothing reloaded, nothing audited as reloaded.
    let audit = airlock.audit();
    assert!(audit.iter().all(|l| l["event"] != "reload"), "{audit:?}");
}
