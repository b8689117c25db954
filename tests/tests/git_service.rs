//! The git service port trusts a proof, not a group, at the namespace tier: the real
//! entrypoint, proxy and git API, the firewall in the sandbox's namespace, and fakenet's
//! `github.com` (`git http-backend`, whose `pre-receive` hook logs every ref update that
//! reaches it).
//!
//! The attacker runs with the git API's exact identity (its real, effective and group ids
//! and its supplementary groups, read from `/proc/<git API>/status`): what code that git
//! started on the agent's behalf would hold. The firewall lets it reach the service port;
//! the proxy must still refuse every push and fetch it makes, and nothing may change
//! upstream, while the honest push through the shim still lands. The git API's ticket is in
//! no process's argv, and no process but root reads the environment it is in.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use crate::git::{GitWorld, assert_step_ok, step};
use airlock_channels::GIT_SERVICE_PORT;
use airlock_tests::topology::{GIT_UID, GITHUB_HOST};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `<field>:` of a `/proc/<pid>/status` text: its whitespace-separated values.
fn status_field(status: &str, field: &str) -> Vec<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {status}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The git API's process (exactly one runs).
fn git_api_pid(g: &GitWorld) -> u32 {
    let api = sandbox_pids(&g.world, |comm| comm == "airlock-git-api");
    assert_eq!(api.len(), 1, "exactly one git API runs: {api:?}");
    api[0]
}

/// Runs `script` with `sh` in the sandbox's network namespace as a child of the git API
/// would run: real uid the git API's (`airlock-git`), effective uid and gid and
/// supplementary groups the git API's own, as read from its `/proc/<pid>/status`.
fn as_git_identity(g: &GitWorld, script: &str) -> Output {
    let status = std::fs::read_to_string(format!("/proc/{}/status", git_api_pid(g))).unwrap();
    let uid = status_field(&status, "Uid");
    let gid = status_field(&status, "Gid");
    let groups = status_field(&status, "Groups").join(",");
    assert_eq!(uid[0], GIT_UID.to_string(), "{status}");
    assert!(
        groups.split(',').any(|x| x == GIT_UID.to_string()),
        "the git API holds its group: {status}"
    );
    // A clean environment, as the git API gives its git (the test runner's own, such as
    // `GIT_SSL_CAINFO`, would change what git does).
    let out = Command::new("ip")
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["netns", "exec", g.world.sandbox_ns(), "setpriv"])
        .args(["--ruid", &uid[0], "--euid", &uid[1]])
        .args(["--rgid", &gid[0], "--egid", &gid[1]])
        .args(["--groups", &groups])
        // `bash -p`: a shell started with a split identity keeps it (`sh` would drop the
        // effective uid to the real one).
        .args(["--", "bash", "-p", "-c"])
        .arg(format!("{}\n{script}", crate::git::HELPERS))
        .output()
        .unwrap();
    let ids = String::from_utf8_lossy(&out.stdout);
    assert!(
        ids.contains(&format!("ids={} {}", uid[0], uid[1])),
        "the attacker did not run with the git API's uids: {ids}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A directory the attacker (effective uid the agent's) owns.
fn scratch(g: &GitWorld, name: &str) -> PathBuf {
    let dir = g.world.dir().join(name);
    std::fs::create_dir(&dir).unwrap();
    let agent = g.world.users().agent;
    std::os::unix::fs::chown(&dir, Some(agent), Some(agent)).unwrap();
    dir
}

/// What the attacker's git needs to speak to the service port as the git API's does: the
/// port as its proxy and the appliance CA (the proxy intercepts every connection there).
fn attacker_git(ca: &Path) -> String {
    format!(
        "/usr/bin/git -c http.proxy=http://127.0.0.1:{GIT_SERVICE_PORT} -c http.sslCAInfo={} -c user.name=x -c user.email=x@example.invalid",
        ca.display()
    )
}

#[test]
fn code_running_as_the_git_api_cannot_push_or_fetch_past_it() {
    let g = GitWorld::new();
    let before = g.upstream_refs();
    let other = g
        .upstream_ref("refs/heads/sandbox/other/feature")
        .expect("seeded");
    let work = scratch(&g, "attacker");
    let script = r#"
touch ready; while [ ! -e attacked ]; do sleep 0.05; done
git checkout -q -b sandbox/nstest/honest
echo honest >> README.md
git commit -qam "honest change"
t push git push origin sandbox/nstest/honest
t log git log -1 --format=%H
"#;
    let child = g
        .command(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    g.airlock.wait_for_agent_file("ready");
    let git = attacker_git(&g.airlock.run_dir.join("ca.pem"));
    let url = format!("https://{GITHUB_HOST}/acme/app.git");
    let attack = format!(
        r#"
echo ids=$(grep '^Uid:' /proc/self/status | cut -f2,3 | tr '\t' ' ')
export HOME={work} GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0
cd {work} && /usr/bin/git init -q evil && cd evil && echo pwned > pwned && {git} add pwned && {git} commit -qm pwned
t force-main {git} push --force {url} HEAD:refs/heads/main
t delete {git} push {url} :refs/heads/sandbox/other/feature
t tag {git} push {url} HEAD:refs/tags/v666
t own-branch {git} push {url} HEAD:refs/heads/sandbox/nstest/evil
# A forged ticket, through git's environment (spelled so no argv holds the header's name).
h=x-airlock-; export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader GIT_CONFIG_VALUE_0="${{h}}ticket: v1.Zm9yZ2Vk.bWFj"
t forged {git} push --force {url} HEAD:refs/heads/main
unset GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0
t fetch {git} ls-remote {url}
"#,
        work = work.display(),
    );
    let out = as_git_identity(&g, &attack);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(g.airlock.workdir.join("attacked"), "").unwrap();
    for name in [
        "force-main",
        "delete",
        "tag",
        "own-branch",
        "forged",
        "fetch",
    ] {
        let (code, said) = step(&text, name);
        assert_ne!(
            code, 0,
            "{name} worked as the git API's identity: {said}\n{text}"
        );
        assert_ne!(code, 127, "{name}: tool missing: {said}");
        assert!(
            said.contains("airlock: git-ticket-"),
            "{name}: refused for another reason: {said}\n{text}"
        );
    }
    let agent = child.wait_with_output().unwrap();
    assert_ok(&agent);
    let agent_text = stdout(&agent);
    assert_step_ok(&agent_text, "push");
    let head = step(&agent_text, "log").1.trim().to_owned();
    // Nothing the attacker did reached upstream; the honest push did.
    assert_eq!(
        g.world.git_hook_lines().unwrap(),
        vec![format!(
            "acme/app 0000000000000000000000000000000000000000 {head} refs/heads/sandbox/nstest/honest"
        )],
        "attacker:\n{text}"
    );
    assert_eq!(
        g.upstream_ref("refs/heads/main").as_deref(),
        Some(g.main.as_str())
    );
    assert_eq!(
        g.upstream_ref("refs/heads/sandbox/other/feature")
            .as_deref(),
        Some(other.as_str())
    );
    assert_eq!(g.upstream_ref("refs/tags/v666"), None);
    assert_eq!(g.upstream_ref("refs/heads/sandbox/nstest/evil"), None);
    let after = g.upstream_refs();
    assert_eq!(
        after.lines().filter(|l| !before.contains(*l)).count(),
        1,
        "only the honest branch is new:\n{before}\n---\n{after}"
    );
    let upstream = g.world.upstream_log().unwrap();
    assert!(
        !upstream.iter().any(|l| l["headers"]
            .to_string()
            .to_ascii_lowercase()
            .contains("x-airlock-ticket")),
        "a ticket went upstream"
    );
    // Every attempt is on the audit, refused on the service port.
    let audit = g.airlock.audit();
    let refused: Vec<_> = audit
        .iter()
        .filter(|l| {
            l["kind"] == "git-service"
                && l["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("git-ticket-"))
        })
        .collect();
    assert!(refused.len() >= 6, "{audit:#?}");
}

fn list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_ticket_is_in_no_argv_and_in_no_environment_but_roots_view() {
    let g = GitWorld::new();
    // The upstream holds the push in its pre-receive hook until released: the git API's
    // git (and its ticket) are alive while everyone looks.
    let gate = g.world.dir().join("gate");
    std::fs::create_dir(&gate).unwrap();
    let hook = g.upstream.join("hooks").join("pre-receive");
    let text = std::fs::read_to_string(&hook).unwrap();
    let held = format!(
        "#!/bin/sh\ntouch '{gate}/in-hook'\nwhile [ ! -e '{gate}/release' ]; do sleep 0.05; done\n{}",
        text.trim_start_matches("#!/bin/sh\n"),
        gate = gate.display()
    );
    std::fs::write(&hook, held).unwrap();
    // The marker, spelled so that no scanner's own argv holds it.
    let marker = "x-airlock-tick[e]t";
    let script = format!(
        r#"
git checkout -q -b sandbox/nstest/scan && echo y >> README.md && git commit -qam scan
git push -q origin sandbox/nstest/scan > push.out 2>&1 &
while [ ! -e scan-now ]; do sleep 0.05; done
echo agent-argv=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c '{marker}')
echo agent-environ=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c '{marker}')
touch agent-scanned
wait $!; echo push-status=$?
"#
    );
    let child = g
        .command(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let in_hook = gate.join("in-hook");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !in_hook.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the push never reached upstream"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Root sees the ticket in the environment of the git API's git (the scan works), and in
    // no process's argv.
    let pids = sandbox_pids(&g.world, |_| true);
    let mut in_environ = Vec::new();
    for pid in &pids {
        let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&read("cmdline")).to_ascii_lowercase();
        assert!(
            !cmdline.contains("x-airlock-ticket") && !cmdline.contains("extraheader"),
            "pid {pid}'s argv holds the ticket: {cmdline:?}"
        );
        if String::from_utf8_lossy(&read("environ")).contains("x-airlock-ticket: v1.") {
            in_environ.push(*pid);
        }
    }
    assert!(
        !in_environ.is_empty(),
        "no process holds the ticket in its environment: the push carried none ({pids:?})"
    );
    // The git API's identity (the attacker's) cannot read it there, nor in any argv.
    let out = as_git_identity(
        &g,
        &format!(
            r#"
echo ids=$(grep '^Uid:' /proc/self/status | cut -f2,3 | tr '\t' ' ')
echo git-argv=$(for p in {all}; do cat /proc/$p/cmdline; done 2>/dev/null | tr '\0' '\n' | grep -c '{marker}')
echo git-environ=$(for p in {all}; do cat /proc/$p/environ; done 2>/dev/null | tr '\0' '\n' | grep -c '{marker}')
for p in {holders}; do cat /proc/$p/environ >/dev/null 2>&1 && echo readable=$p; done; echo probed
"#,
            all = list(&pids),
            holders = list(&in_environ),
        ),
    );
    let seen = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(seen.contains("git-argv=0\n"), "{seen}");
    assert!(seen.contains("git-environ=0\n"), "{seen}");
    assert!(
        seen.contains("probed") && !seen.contains("readable="),
        "{seen}"
    );
    std::fs::write(g.airlock.workdir.join("scan-now"), "").unwrap();
    g.airlock.wait_for_agent_file("agent-scanned");
    std::fs::write(gate.join("release"), "").unwrap();
    let agent = child.wait_with_output().unwrap();
    assert_ok(&agent);
    let text = stdout(&agent);
    assert!(text.contains("agent-argv=0\n"), "{text}");
    assert!(text.contains("agent-environ=0\n"), "{text}");
    assert!(text.contains("push-status=0"), "{text}\n{}", stderr(&agent));
    assert!(
        g.upstream_ref("refs/heads/sandbox/nstest/scan").is_some(),
        "the held push landed once released"
    );
}

/// An honest push the git API judged on a stale view of the remote (the branch appeared
/// upstream after the sandbox last fetched) is refused by the proxy, in words git prints
/// with the fix; after `git fetch` the same push goes through.
#[test]
fn a_push_judged_on_a_stale_view_of_the_remote_says_fetch_then_push() {
    let g = GitWorld::new();
    // Someone else creates the branch upstream after the sandbox's clone was made.
    crate::git::seed_upstream_ref(&g, "refs/heads/sandbox/nstest/late", &g.main.clone());
    let script = r#"
git checkout -q -b sandbox/nstest/late
echo late >> README.md
git commit -qam "late change"
t stale git push origin sandbox/nstest/late
t fetch git fetch origin
t again git push origin sandbox/nstest/late
t log git log -1 --format=%H
"#;
    let out = g.run(script);
    assert_ok(&out);
    let text = stdout(&out);
    let (code, said) = step(&text, "stale");
    assert_ne!(code, 0, "the stale push went through: {said}");
    assert!(
        said.contains("remote rejected") && said.contains("airlock: git-ref-update-unsigned"),
        "git shows the proxy's refusal: {said}"
    );
    assert!(said.contains("git fetch, then push again"), "{said}");
    assert_step_ok(&text, "fetch");
    assert_step_ok(&text, "again");
    let head = step(&text, "log").1.trim().to_owned();
    assert_eq!(
        g.upstream_ref("refs/heads/sandbox/nstest/late").as_deref(),
        Some(head.as_str())
    );
    assert_eq!(
        g.world.git_hook_lines().unwrap(),
        vec![format!(
            "acme/app {} {head} refs/heads/sandbox/nstest/late",
            g.main
        )],
        "only the push after the fetch reached upstream\n{text}"
    );
}

/// The git API is restarted with the same service key (PID 1 hands it over on a new pipe at
/// every start): after its restart an honest push still lands.
#[test]
fn a_restarted_git_api_still_pushes() {
    let g = GitWorld::new();
    let script = r#"
api() { for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = airlock-git-api ] && echo ${p#/proc/}; done | head -1; }
first=$(api)
touch ready; while [ ! -e killed ]; do sleep 0.05; done
while [ -z "$(api)" ] || [ "$(api)" = "$first" ]; do sleep 0.05; done
git checkout -q -b sandbox/nstest/after-restart
echo restarted >> README.md
git commit -qam "after the restart"
t push git push origin sandbox/nstest/after-restart
t log git log -1 --format=%H
"#;
    let child = g
        .command(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    g.airlock.wait_for_agent_file("ready");
    signal(git_api_pid(&g), "-KILL");
    std::fs::write(g.airlock.workdir.join("killed"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert_step_ok(&text, "push");
    let head = step(&text, "log").1.trim().to_owned();
    assert_eq!(
        g.upstream_ref("refs/heads/sandbox/nstest/after-restart")
            .as_deref(),
        Some(head.as_str()),
        "{text}"
    );
    assert_eq!(
        g.git_log().matches(r#""event":"start""#).count(),
        2,
        "the git API was restarted once:\n{}",
        g.git_log()
    );
}
