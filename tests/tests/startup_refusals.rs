//! Fail closed: every set-up step that cannot do its job stops the start with one line and
//! exit status 78, and the agent command never runs on a half-applied firewall.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use airlock_tests::World;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;

/// The agent command: leaves a marker if it ever runs.
fn marker_script(airlock: &Airlock) -> String {
    format!("touch {}/agent-ran", airlock.workdir.display())
}

/// A refused start: status 78, exactly one `airlock:` line on stderr that contains `needle`,
/// and the agent never ran.
fn assert_refused(out: &Output, airlock: &Airlock, needle: &str) {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(EXIT_REFUSED),
        "expected a refused start:\n{err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("airlock:")).collect();
    assert_eq!(lines.len(), 1, "one line saying what failed:\n{err}");
    assert!(
        lines[0].contains(needle),
        "{needle:?} not in {:?}",
        lines[0]
    );
    assert!(
        !airlock.workdir.join("agent-ran").exists(),
        "the agent ran despite a refused start"
    );
}

#[test]
fn a_malformed_policy_is_refused_with_file_line_and_reason() {
    let world = world();
    let airlock = Airlock::new(
        &world,
        "[sandbox]\nname = \"x\"\n\n[network]\nallow = [\"ok.test\", \"*.\"]\n",
    );
    let out = airlock.run(&world, &marker_script(&airlock));
    assert_refused(&out, &airlock, &format!("{}:5:", airlock.policy.display()));

    let airlock = Airlock::new(&world, "[sandbox]\nname = \"x\"\nallowx = 1\n");
    let out = airlock.run(&world, &marker_script(&airlock));
    assert_refused(&out, &airlock, ":3:");
}

#[test]
fn a_missing_agent_user_is_refused() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let mut cmd = world.sandbox_command(&bin("airlock-entrypoint"));
    cmd.arg("--policy")
        .arg(&airlock.policy)
        .arg("--audit-dir")
        .arg(&airlock.audit_dir)
        .arg("--run-dir")
        .arg(&airlock.run_dir);
    cmd.args([
        "--agent-user",
        "no-such-agent",
        "--",
        "sh",
        "-c",
        &marker_script(&airlock),
    ]);
    let out = cmd.output().unwrap();
    assert_refused(&out, &airlock, "no-such-agent");
}

#[test]
fn a_policy_the_agent_can_write_is_refused() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    std::os::unix::fs::chown(&airlock.policy, Some(world.users().agent), None).unwrap();
    let out = airlock.run(&world, &marker_script(&airlock));
    assert_refused(&out, &airlock, "writable by the agent");
    std::fs::set_permissions(&airlock.policy, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&airlock.policy, Some(0), None).unwrap();
    let out = airlock.run(&world, &marker_script(&airlock));
    assert_refused(&out, &airlock, "writable by the agent");
}

#[test]
fn a_proxy_that_fails_to_start_is_refused() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let mut cmd = airlock.command(&world, &["sh", "-c", &marker_script(&airlock)]);
    cmd.env("AIRLOCK_PROXY_BIN", "/bin/false");
    let out = cmd.output().unwrap();
    assert_refused(&out, &airlock, "proxy exited during start-up");

    let mut cmd = airlock.command(&world, &["sh", "-c", &marker_script(&airlock)]);
    cmd.env("AIRLOCK_PROXY_BIN", "/nonexistent/airlock-proxy");
    let out = cmd.output().unwrap();
    assert_refused(
        &out,
        &airlock,
        "proxy binary /nonexistent/airlock-proxy not found",
    );
}

/// Run the entrypoint through `sh -c 'prelude; exec entrypoint ...'` inside the sandbox's own
/// mount namespace, so the prelude can hide tools without touching the host.
fn run_with_prelude(
    world: &World,
    airlock: &Airlock,
    prelude: &str,
    env: &[(&str, String)],
) -> Output {
    let entry = bin("airlock-entrypoint");
    let script = format!(
        "{prelude}\nexec {} --policy {} --audit-dir {} --run-dir {} --workdir {} -- sh -c '{}'",
        entry.display(),
        airlock.policy.display(),
        airlock.audit_dir.display(),
        airlock.run_dir.display(),
        airlock.workdir.display(),
        marker_script(airlock)
    );
    let mut cmd = world.sandbox_command(std::path::Path::new("/bin/sh"));
    cmd.args(["-c", &script]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn missing_iptables_is_refused() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let out = run_with_prelude(
        &world,
        &airlock,
        "mount --bind /dev/null /usr/sbin/iptables-restore || exit 99",
        &[],
    );
    assert_refused(&out, &airlock, "iptables-restore not found");
}

#[test]
fn ipv6_that_is_up_but_cannot_be_filtered_is_refused() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    // An ip6tables-restore that fails the way it does on a kernel without ip6_tables.
    let fake = world.dir().join("fakebin");
    std::fs::create_dir_all(&fake).unwrap();
    let tool = fake.join("ip6tables-restore");
    std::fs::write(&tool, "#!/bin/sh\necho 'ip6tables-restore v1.8.9 (nf_tables): Could not initialize table filter' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        fake.display()
    );
    let out = run_with_prelude(&world, &airlock, "", &[("PATH", path)]);
    assert_refused(&out, &airlock, "IPv6 is up but cannot be filtered");
}

#[test]
fn a_proxy_that_lets_a_blocked_domain_through_fails_the_self_test() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    // A "proxy" that answers 200 to everything: healthy-looking (it even exports a CA), but
    // it allows what it must deny.
    let fake = world.dir().join("yes-proxy.py");
    std::fs::write(
        &fake,
        "#!/usr/bin/env python3\nimport http.server, sys\n# Exports a CA like the real proxy, so the start gets as far as the self-test.\nca = sys.argv[sys.argv.index('--ca-export') + 1]\nopen(ca, 'w').write('-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\\n')\nclass H(http.server.BaseHTTPRequestHandler):\n    protocol_version = 'HTTP/1.1'\n    def do_GET(self):\n        self.send_response(200); self.send_header('content-length','0'); self.end_headers()\n    def log_message(self, *a): pass\nhttp.server.ThreadingHTTPServer(('127.0.0.1', 3128), H).serve_forever()\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = airlock.command(&world, &["sh", "-c", &marker_script(&airlock)]);
    cmd.env("AIRLOCK_PROXY_BIN", &fake);
    let out = cmd.output().unwrap();
    assert_refused(&out, &airlock, "self-test as the agent failed");
    assert!(stderr(&out).contains("blocked domain"), "{}", stderr(&out));
}

#[test]
fn a_proxy_that_exports_no_ca_is_refused() {
    // Healthy-looking, but without the CA the agent's bundle cannot be built: the start must
    // stop rather than run the agent with a trust store that does not match the proxy.
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let fake = world.dir().join("no-ca-proxy.py");
    std::fs::write(
        &fake,
        "#!/usr/bin/env python3\nimport http.server\nclass H(http.server.BaseHTTPRequestHandler):\n    protocol_version = 'HTTP/1.1'\n    def do_GET(self):\n        self.send_response(200); self.send_header('content-length','0'); self.end_headers()\n    def log_message(self, *a): pass\nhttp.server.ThreadingHTTPServer(('127.0.0.1', 3128), H).serve_forever()\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = airlock.command(&world, &["sh", "-c", &marker_script(&airlock)]);
    cmd.env("AIRLOCK_PROXY_BIN", &fake);
    let out = cmd.output().unwrap();
    assert_refused(&out, &airlock, "the proxy did not export its CA");
}

/// Every problem the start can find before it starts anything is reported in one run, one
/// `airlock:` line each, in the terms of the knob the user sets (issue 15, item 3).
#[test]
fn every_start_up_problem_is_reported_at_once() {
    let world = world();
    let token = world.dir().join("github_token");
    std::fs::write(&token, "ghp_x\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let policy = format!(
        "{POLICY_INSPECTED}\n[[credentials]]\nname = \"api\"\nsource = {{ env = \"NEWCOMER_API_KEY\" }}\nhosts = [\"allowed.test\"]\nheader = \"x-api-key\"\nformat = \"{{}}\"\n\n[[credentials]]\nname = \"gh\"\nsource = {{ file = \"{}\" }}\nhosts = [\"allowed.test\"]\nheader = \"authorization\"\nformat = \"Bearer {{}}\"\n",
        token.display()
    );
    let airlock = Airlock::new(&world, &policy);
    std::os::unix::fs::chown(&airlock.policy, Some(world.users().agent), None).unwrap();
    let not_a_ca = world.dir().join("corp-ca.pem");
    std::fs::write(&not_a_ca, "not a certificate\n").unwrap();
    let mut cmd = airlock.command(&world, &["sh", "-c", &marker_script(&airlock)]);
    cmd.env("AIRLOCK_PROXY_BIN", "/nonexistent/airlock-proxy")
        .env("AIRLOCK_HOST_POLICY", "/home/me/my-policy.toml")
        .env("AIRLOCK_EXTRA_CA", &not_a_ca)
        .env_remove("NEWCOMER_API_KEY");
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_REFUSED), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("airlock:")).collect();
    assert_eq!(lines.len(), 4, "one line per problem:\n{err}");
    for needle in [
        // The policy, named by the host file the user edited.
        "/home/me/my-policy.toml",
        "proxy binary /nonexistent/airlock-proxy not found",
        // A secret file the agent could read, with the fix.
        "chmod 0400",
        // The extra CA, with its knob.
        "holds no PEM certificate",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "{needle:?} in no line:\n{err}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("EXTRA_CA_FILE")), "{err}");
    // The unset variable is no problem (issue 16 item 3), and a refused start warns of
    // nothing.
    assert!(!err.contains("NEWCOMER_API_KEY"), "{err}");
    assert!(!airlock.workdir.join("agent-ran").exists());
}

/// A policy the agent cannot write is accepted whoever owns it: the user's own file (here
/// the agent's uid, as on a host whose user is uid 1000) mounted read-only (issue 15, item 5).
#[test]
fn a_read_only_policy_owned_by_the_agents_uid_is_accepted() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    std::os::unix::fs::chown(&airlock.policy, Some(world.users().agent), None).unwrap();
    let p = airlock.policy.display();
    let out = run_with_prelude(
        &world,
        &airlock,
        &format!("mount --bind {p} {p} && mount -o remount,bind,ro {p} || exit 99"),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        airlock.workdir.join("agent-ran").exists(),
        "{}",
        stderr(&out)
    );
}
