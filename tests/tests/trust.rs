//! Toolchain trust (issue 4, item 6): on a host the proxy intercepts, every common tool of
//! the agent (curl, Python's urllib and requests, Node, git, pip) completes TLS against the
//! appliance CA through the variables the entrypoint sets, and nothing else: the fake
//! internet's own CA is trusted only by the proxy (`--upstream-ca`, test configuration).
//!
//! Each tool asks for its own path, so fakenet's log proves the request crossed the proxy
//! and was re-originated by it (the proxy, not the agent, holds the upstream TLS session).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

/// `allowed.test` carries an L7 rule, so it is intercepted; `other.test` has none and is
/// tunnelled untouched.
const POLICY_INTERCEPT: &str = r#"
[sandbox]
name = "trust"

[network]
allow = ["allowed.test", "other.test"]
passthrough = ["other.test"]

[[rules]]
host = "allowed.test"
method = "DELETE"
path = "/forbidden"
action = "deny"
"#;

fn tool_paths(log: &[serde_json::Value]) -> Vec<String> {
    log.iter()
        .filter(|l| l["kind"] == "http")
        .filter_map(|l| l["path"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn every_common_tool_trusts_the_appliance_ca_on_an_intercepted_host() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY_INTERCEPT);
    // No --cacert anywhere: only what the entrypoint put in the environment.
    let script = r#"
u=https://allowed.test
echo curl=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' $u/tool/curl 2>&1)
echo urllib=$(python3 -c "import urllib.request as r; print(r.urlopen('$u/tool/urllib', timeout=10).status)" 2>&1 | tail -1)
echo requests=$(python3 -c "import requests; print(requests.get('$u/tool/requests', timeout=10).status_code)" 2>&1 | tail -1)
echo node=$(node -e "require('https').get('$u/tool/node', r => console.log(r.statusCode)).on('error', e => console.log(e.code))" 2>&1 | tail -1)
git ls-remote $u/tool/git.git >/dev/null 2>git.err; grep -c -i 'ssl\|certificate' git.err | sed 's/^/git-tls-errors=/'
python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir -d pipdl --index-url $u/tool/pip/ nosuchpkg >/dev/null 2>pip.err; grep -c -i 'ssl\|certificate' pip.err | sed 's/^/pip-tls-errors=/'
echo denied=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -X DELETE $u/forbidden 2>&1)
echo bundle=$SSL_CERT_FILE
"#;
    let out = airlock.run(&world, script);
    assert_ok(&out);
    let text = stdout(&out);
    for (tool, want) in [
        ("curl", "200"),
        ("urllib", "200"),
        ("requests", "200"),
        ("node", "200"),
        ("git-tls-errors", "0"),
        ("pip-tls-errors", "0"),
        // The L7 rule answered: the connection really was intercepted.
        ("denied", "403"),
    ] {
        assert!(
            text.lines().any(|l| l == format!("{tool}={want}")),
            "{tool}: wanted {want}\n{text}\n--- stderr\n{}",
            stderr(&out)
        );
    }
    assert!(
        text.contains(&format!(
            "bundle={}",
            airlock.run_dir.join("ca-bundle.pem").display()
        )),
        "{text}"
    );
    let paths = tool_paths(&world.upstream_log().unwrap());
    for tool in ["curl", "urllib", "requests", "node", "git.git", "pip"] {
        assert!(
            paths
                .iter()
                .any(|p| p.starts_with(&format!("/tool/{tool}"))),
            "{tool} never reached upstream: {paths:?}"
        );
    }
    assert!(
        !paths.iter().any(|p| p.starts_with("/forbidden")),
        "the denied request crossed the wire: {paths:?}"
    );
}

#[test]
fn the_agent_does_not_trust_the_upstreams_own_ca_without_the_proxy() {
    // A tunnelled host presents fakenet's own certificate, which only the proxy's test
    // configuration trusts: the agent's bundle (system roots + appliance CA) rejects it,
    // so the appliance CA is the only thing added to the agent's trust.
    let world = world();
    let airlock = Airlock::new(&world, POLICY_INTERCEPT);
    let out = airlock.run(
        &world,
        "curl -sS --max-time 10 -o /dev/null https://other.test/x 2>&1; echo tunnelled=$?",
    );
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("tunnelled=60"),
        "curl must fail certificate verification (60):\n{text}"
    );
}

#[test]
fn the_bundle_holds_the_appliance_ca_and_the_agent_can_change_no_trust_nor_read_the_ca_key() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY_INTERCEPT);
    let state = airlock.run_dir.join("proxy");
    let script = format!(
        "grep -c 'BEGIN CERTIFICATE' $SSL_CERT_FILE | sed 's/^/certs=/'\n\
         cat {key} >/dev/null 2>&1; echo key=$?\n\
         ls {state} >/dev/null 2>&1; echo state=$?\n\
         echo junk >> $SSL_CERT_FILE 2>/dev/null; echo append=$?\n\
         cp $SSL_CERT_FILE $GIT_SSL_CAPATH/planted.pem 2>/dev/null; echo plant=$?\n\
         echo capath=$GIT_SSL_CAPATH entries=$(ls -A $GIT_SSL_CAPATH | wc -l)",
        key = state.join("ca-key.pem").display(),
        state = state.display(),
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    let certs: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("certs="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(certs >= 2, "system roots + the appliance CA:\n{text}");
    for refused in ["key=0", "state=0", "append=0", "plant=0"] {
        assert!(!text.contains(refused), "{refused}:\n{text}");
    }
    // git's CA directory (instead of all of /etc/ssl/certs) is empty and stays so.
    let capath = airlock.run_dir.join("empty-ca-dir");
    assert!(
        text.contains(&format!("capath={} entries=0", capath.display())),
        "{text}"
    );
    let key = std::fs::metadata(state.join("ca-key.pem")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(key.permissions().mode() & 0o077, 0, "CA key is private");
    assert_eq!(key.uid(), world.users().proxy, "owned by the proxy");
}

#[test]
fn an_operator_ca_is_used_instead_of_a_generated_one() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY_INTERCEPT);
    let dir = world.dir().join("operator-ca");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=operator test CA"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl could not make the operator CA");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The agent trusts only the operator's certificate: the leaf must chain to it.
    let script = format!(
        "echo op=$(curl -sS --max-time 10 --cacert {} -o /dev/null -w '%{{http_code}}' https://allowed.test/op 2>&1)",
        cert.display()
    );
    let mut cmd = airlock.command(&world, &["sh", "-c", &script]);
    cmd.env("AIRLOCK_CA_CERT", &cert)
        .env("AIRLOCK_CA_KEY", &key);
    let out = cmd.output().unwrap();
    assert_ok(&out);
    assert!(
        stdout(&out).contains("op=200"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let exported = std::fs::read_to_string(airlock.run_dir.join("ca.pem")).unwrap();
    assert_eq!(
        exported.trim(),
        std::fs::read_to_string(&cert).unwrap().trim(),
        "the exported CA is the operator's"
    );

    // A key the agent could read is refused before anything starts.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o444)).unwrap();
    let mut cmd = airlock.command(&world, &["true"]);
    cmd.env("AIRLOCK_CA_CERT", &cert)
        .env("AIRLOCK_CA_KEY", &key);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(EXIT_REFUSED), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("readable by the agent"),
        "{}",
        stderr(&out)
    );
}
