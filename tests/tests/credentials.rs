//! The agent never holds a real secret (the entrypoint's half of issue 4): it gets a
//! placeholder under the same variable name, and hunting for the real value in every
//! environment, command line and file it can read finds nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

const SECRET: &str = "sk-ant-REALSECRET-7f3a9c1e";

fn policy_with(source: &str) -> String {
    format!(
        "{POLICY_INSPECTED}\n[[credentials]]\nname = \"anthropic\"\nsource = {source}\nhosts = [\"allowed.test\"]\nheader = \"x-api-key\"\nformat = \"{{}}\"\n"
    )
}

#[test]
fn the_agent_sees_a_placeholder_and_cannot_find_the_real_secret_anywhere() {
    let world = world();
    let airlock = Airlock::new(&world, &policy_with("{ env = \"ANTHROPIC_API_KEY\" }"));
    let handoff = airlock.run_dir.join("proxy").join("credentials.json");
    let script = format!(
        // `REAL[S]ECRET` matches the secret while grep's own argv (visible in /proc) does not.
        "echo key=$ANTHROPIC_API_KEY\n\
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f 2>/dev/null; done | tr '\\0' '\\n' | grep -c 'REAL[S]ECRET'; echo proc-scan-done\n\
         cat {handoff} 2>&1; echo handoff=$?\n\
         ls {dir} 2>&1; echo statedir=$?\n\
         echo files=$(grep -rsl 'REAL[S]ECRET' /run $HOME {root} 2>/dev/null | wc -l)",
        handoff = handoff.display(),
        dir = handoff.parent().unwrap().display(),
        root = world.dir().display(),
    );
    let mut cmd = airlock.command(&world, &["sh", "-c", &script]);
    cmd.env("ANTHROPIC_API_KEY", SECRET);
    let out = cmd.output().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        !text.contains("REALSECRET"),
        "the agent found the secret:\n{text}"
    );
    let key = text
        .lines()
        .find_map(|l| l.strip_prefix("key="))
        .unwrap_or_default();
    assert!(
        key.starts_with("airlock-placeholder-anthropic-"),
        "placeholder in the same variable: {key:?}"
    );
    assert!(
        text.contains("0\nproc-scan-done"),
        "no process environment or argv holds it:\n{text}"
    );
    assert!(
        !text.contains("handoff=0") && !text.contains("statedir=0"),
        "the hand-off is the proxy's alone:\n{text}"
    );
    assert!(
        text.contains("files=0"),
        "no readable file holds it:\n{text}"
    );

    // The hand-off exists, belongs to the proxy user, and carries the real value.
    let meta = std::fs::metadata(&handoff).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        world.users().proxy
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o400);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&handoff).unwrap()).unwrap();
    assert_eq!(json["credentials"][0]["value"], SECRET);
    assert_eq!(json["credentials"][0]["placeholder"], key);
    assert!(
        !stderr(&out).contains("REALSECRET"),
        "nothing logs the secret"
    );
}

#[test]
fn a_secret_file_the_agent_could_read_is_refused() {
    let world = world();
    let secret = world.dir().join("anthropic.key");
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o444)).unwrap();
    let airlock = Airlock::new(
        &world,
        &policy_with(&format!("{{ file = \"{}\" }}", secret.display())),
    );
    let out = airlock.run(&world, "touch agent-ran");
    assert_eq!(out.status.code(), Some(EXIT_REFUSED), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("readable by the agent"),
        "{}",
        stderr(&out)
    );
    assert!(!airlock.workdir.join("agent-ran").exists());

    // Root-only 0400 is accepted, and the agent still cannot read it.
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o400)).unwrap();
    let out = airlock.run(
        &world,
        &format!("cat {} 2>/dev/null; echo read=$?", secret.display()),
    );
    assert_ok(&out);
    assert!(
        stdout(&out).contains("read=1") && !stdout(&out).contains("REALSECRET"),
        "{}",
        stdout(&out)
    );
}

/// A credential that is not configured (its variable unset) does not stop the start
/// (issue 16 item 3): one warning line names it and the fix, the agent still holds a
/// placeholder, and a request to its host is refused by the proxy with
/// `credential-missing`, the credential and the fix in the answer, nothing sent upstream.
#[test]
fn a_missing_secret_starts_and_its_host_is_refused_with_the_fix() {
    let world = world();
    let airlock = Airlock::new(&world, &policy_with("{ env = \"ANTHROPIC_API_KEY\" }"));
    let script = "echo key=$ANTHROPIC_API_KEY\n\
         curl -sS --max-time 10 -w ' status=%{http_code}' -H \"x-api-key: $ANTHROPIC_API_KEY\" https://allowed.test/v1/messages; echo";
    let mut cmd = airlock.command(&world, &["sh", "-c", script]);
    cmd.env_remove("ANTHROPIC_API_KEY");
    let out = cmd.output().unwrap();
    assert_ok(&out);
    let (text, err) = (stdout(&out), stderr(&out));
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("airlock: warning: credential"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("\"anthropic\" is not configured (ANTHROPIC_API_KEY is not set)")
            && warnings[0].contains("-e ANTHROPIC_API_KEY"),
        "{err}"
    );
    assert!(
        text.contains("key=airlock-placeholder-anthropic-"),
        "the agent still holds a placeholder:\n{text}"
    );
    assert!(text.contains(" status=403"), "{text}\n{err}");
    assert!(
        text.contains("\"error\":\"credential-missing\"")
            && text.contains("\"credential\":\"anthropic\"")
            && text.contains("set ANTHROPIC_API_KEY on the host"),
        "{text}"
    );
    let upstream = world.upstream_log().unwrap();
    assert!(
        upstream.iter().all(|l| l["path"] != "/v1/messages"),
        "nothing reached upstream: {upstream:?}"
    );
    assert!(
        airlock
            .audit()
            .iter()
            .any(|l| l["reason"] == "credential-missing"
                && l["credential"] == "anthropic"
                && l["path"] == "/v1/messages"),
        "{:?}",
        airlock.audit()
    );
}

/// An agent profile names both sources (`{ env, file }`) so one policy serves `docker run
/// -e KEY` and the host CLI, which passes secrets only as files (`--secret NAME` →
/// `/run/secrets/NAME`). With the variable unset the file's value is injected, the agent
/// holds the placeholder under the variable's name, and it cannot read the file.
#[test]
fn an_env_or_file_credential_without_its_variable_injects_the_file() {
    let world = world();
    let secret = world.dir().join("anthropic_api_key");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o400)).unwrap();
    let source = format!(
        "{{ env = \"ANTHROPIC_API_KEY\", file = \"{}\" }}",
        secret.display()
    );
    let airlock = Airlock::new(&world, &policy_with(&source));
    let script = format!(
        "echo key=$ANTHROPIC_API_KEY\n\
         cat {} 2>/dev/null; echo read=$?\n\
         curl -sS --max-time 10 -o /dev/null -w 'status=%{{http_code}}\\n' -H \"x-api-key: $ANTHROPIC_API_KEY\" https://allowed.test/v1/messages",
        secret.display()
    );
    let mut cmd = airlock.command(&world, &["sh", "-c", &script]);
    cmd.env_remove("ANTHROPIC_API_KEY");
    let out = cmd.output().unwrap();
    assert_ok(&out);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(
        text.contains("key=airlock-placeholder-anthropic-")
            && text.contains("read=1")
            && !text.contains("REALSECRET"),
        "{text}"
    );
    assert!(
        !err.contains("warning: credential"),
        "configured by its file: {err}"
    );
    assert!(text.contains("status=200"), "{text}\n{err}");
    let upstream = world.upstream_log().unwrap();
    let hits: Vec<_> = upstream
        .iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert_eq!(hits.len(), 1, "{upstream:?}");
    assert_eq!(
        hits[0]["headers"]["x-api-key"], SECRET,
        "the file's value injected"
    );
}
