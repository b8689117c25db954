//! The host-side commands against the real engine and image: `doctor`, `secret`, the
//! renderings written for other engines (`devcontainer`, `k8s render`) and `build`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{self, World};
use serde_json::Value;

fn doctor_json(w: &World, extra_env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend(args);
    let mut c = w.cmd(&all);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    (o.status.code(), v)
}

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} line in {v}"))
}

#[test]
fn doctor_reports_each_check_on_one_line_with_the_fix_when_wrong() {
    let w = World::new("doc");
    let (code, v) = doctor_json(&w, &[], &[]);
    for name in [
        "engine", "cgroup", "image", "iptables", "ipv6", "seccomp", "disk",
    ] {
        let c = check(&v, name);
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c}");
        assert_eq!(
            c["level"] == "ok",
            c["fix"].is_null(),
            "a fix exactly when not ok: {c}"
        );
    }
    assert_eq!(check(&v, "engine")["level"], "ok", "{v}");
    assert_eq!(check(&v, "image")["level"], "ok", "{v}");
    assert_eq!(
        check(&v, "iptables")["level"],
        "ok",
        "the firewall's tools work here: {v}"
    );
    assert_eq!(code, Some(0), "nothing fails on this machine: {v}");
    // No probe container is left behind.
    let left = common::sh(
        &w.repo(),
        "docker ps -aq --filter name=airlock-doctor- | wc -l",
    );
    assert_eq!(left, "0");
    // The text form: one line per check.
    let text = String::from_utf8_lossy(&w.cmd(&["doctor"]).output().unwrap().stdout).into_owned();
    assert_eq!(text.lines().count(), v.as_array().unwrap().len(), "{text}");

    // Engine down: that line fails with the fix, the machine's own lines still come.
    let (code, v) = doctor_json(&w, &[("DOCKER_HOST", "unix:///nonexistent.sock")], &[]);
    assert_eq!(code, Some(1));
    let e = check(&v, "engine");
    assert_eq!(e["level"], "fail");
    assert!(e["fix"].as_str().unwrap().contains("DOCKER_HOST"), "{e}");
    check(&v, "cgroup");
    check(&v, "disk");

    // A missing image: the image line fails and says how to build it.
    let (code, v) = doctor_json(&w, &[], &["--image", "airlock:does-not-exist"]);
    assert_eq!(code, Some(1));
    assert!(
        check(&v, "image")["fix"]
            .as_str()
            .unwrap()
            .contains("airlock build"),
        "{v}"
    );
}

/// `airlock ARGS` with `input` on stdin (a pipe).
fn piped(w: &World, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
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

#[test]
fn secrets_are_stored_0600_and_reach_a_sandbox_only_as_files() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new("sst");
    let value = format!("stored-sekrit-{}-{}", std::process::id(), w.prefix);
    let o = piped(
        &w,
        &["secret", "set", "api_token"],
        format!("{value}\n").as_bytes(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = w.config().join("secrets/api_token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), value);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&w.config().join("secrets")), 0o700);
    assert_eq!(w.ok(&["secret", "ls"]), "api_token\n");
    let ls: Value = serde_json::from_str(&w.ok(&["secret", "ls", "--json"])).unwrap();
    assert_eq!(ls[0]["name"], "api_token");
    assert!(!ls.to_string().contains(&value), "ls never shows a value");

    // A prompt on a terminal does not echo the value.
    let cmd = format!("{} secret set typed", env!("CARGO_BIN_EXE_airlock"));
    let o = common::sh(
        &w.repo(),
        &format!(
            "(sleep 1; printf 'typed-{v}\\n') | AIRLOCK_CONFIG_DIR='{c}' script -qec '{cmd}' /dev/null",
            v = w.prefix,
            c = w.config().display()
        ),
    );
    assert!(o.contains("not echoed") && !o.contains("typed-"), "{o}");
    let typed = std::fs::read_to_string(w.config().join("secrets/typed")).unwrap();
    assert_eq!(typed, format!("typed-{}", w.prefix));

    // A sandbox gets it as a read-only file; no host process has it in argv or environment.
    std::fs::write(
        w.dir.path().join("policy.toml"),
        common::policy_reading("api_token"),
    )
    .unwrap();
    let s = w.name("s");
    let mut args = w.new_args(&s, Some("exec sleep 600"));
    args.splice(2..2, ["--secret".to_string(), "api_token".to_string()]);
    let mut child = w
        .cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut scans = 0;
    while child.try_wait().unwrap().is_none() || scans == 0 {
        assert_eq!(common::processes_holding(&value), Vec::<String>::new());
        scans += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(common::processes_holding(&value), Vec::<String>::new());
    let seen = common::sh(
        &w.repo(),
        &format!("docker exec airlock-{s} cat /run/secrets/api_token"),
    );
    assert_eq!(seen, value, "mounted at /run/secrets/api_token");
    let inspect = common::sh(&w.repo(), &format!("docker inspect airlock-{s}"));
    assert!(
        !inspect.contains(&value),
        "never in the container's configuration"
    );
    // What is mounted is the sandbox's secrets volume (root's 0400 copies the engine wrote),
    // not the store's file.
    assert!(
        inspect.contains(&format!("airlock-secrets-{s}:/run/secrets:ro")),
        "{inspect}"
    );
    assert!(!inspect.contains(&w.config().join("secrets").display().to_string()));
    w.ok(&["destroy", &s]);

    // Removed: gone from the list, and a sandbox asking for it is refused before anything.
    w.ok(&["secret", "rm", "api_token"]);
    assert!(!file.exists());
    let o = w.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("airlock secret set api_token"));
    assert!(w.list().is_empty());
}

fn json_lines(text: &str) -> Vec<Value> {
    // The k8s stream: JSON documents after `---` lines.
    text.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn devcontainer_and_k8s_render_the_one_definition_alike_and_the_pod_is_valid() {
    let w = World::new("rend");
    let repo = w.repo();
    let r = repo.to_str().unwrap();
    piped(&w, &["secret", "set", "gh_token"], b"tok-value\n");
    let policy = w.dir.path().join("policy.toml");
    devcontainer_is_written_as_rendered(&w, r);
    let text = k8s_secret_and_pod_agree_with_the_others(&w, r, policy.to_str().unwrap());
    validate_offline(&w, &text);
}

/// `devcontainer PATH` writes what `render devcontainer` prints, its runArgs are the
/// `docker run` flags but the workspace bind, and it never overwrites a file.
fn devcontainer_is_written_as_rendered(w: &World, r: &str) {
    let repo = w.repo();
    // devcontainer PATH writes what `render devcontainer` prints; never over a file.
    w.ok(&["devcontainer", r]);
    let file = repo.join(".devcontainer/devcontainer.json");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let printed: Value =
        serde_json::from_str(&w.ok(&["render", "devcontainer", "--repo", r])).unwrap();
    assert_eq!(written, printed);
    let o = w.run(&["devcontainer", r]);
    assert_eq!(o.status.code(), Some(4), "an existing file is kept");
    // Its runArgs are the `docker run` flags but the workspace bind (its workspaceMount).
    let docker: Vec<String> = w
        .ok(&["render", "docker", "--repo", r])
        .lines()
        .map(String::from)
        .collect();
    let run_args: Vec<String> = serde_json::from_value(written["runArgs"].clone()).unwrap();
    let ws = format!("{r}:/workspace");
    let i = docker.iter().position(|a| *a == ws).unwrap();
    let mut expected = docker.clone();
    expected.drain(i - 1..=i);
    // With a terminal first: the image's command (a shell, an agent) waits for its user.
    expected.splice(0..0, ["--interactive".to_string(), "--tty".to_string()]);
    assert_eq!(run_args, expected);
    assert_eq!(
        written["workspaceMount"],
        format!("source={r},target=/workspace,type=bind")
    );
}

/// The Secret and Pod of `k8s render`; the Pod agrees with `render k8s`, the devcontainer
/// and the engine body. Returns the manifests.
fn k8s_secret_and_pod_agree_with_the_others(w: &World, r: &str, p: &str) -> String {
    let file = w.repo().join(".devcontainer/devcontainer.json");
    // k8s render: the Pod is `render k8s`'s; with a secret and a policy, the Secret holds the
    // value under the key the Pod mounts, and devcontainer mounts the same file at the same path.
    // (The single-node Pod: the node's paths, as the engine body binds them; cli/tests/k8s.rs
    // covers the cluster renderings.)
    let kind = |docs: &[Value], k: &str| docs.iter().find(|d| d["kind"] == k).cloned().unwrap();
    let plain = json_lines(&w.ok(&["k8s", "render", "agent-one", "--repo", r, "--host-paths"]));
    let pod: Value =
        serde_json::from_str(&w.ok(&["render", "k8s", "--name", "agent-one", "--repo", r]))
            .unwrap();
    assert_eq!(kind(&plain, "Pod"), pod);
    let text = w.ok(&[
        "k8s",
        "render",
        "agent-one",
        "--repo",
        r,
        "--host-paths",
        "--secret",
        "gh_token",
        "--policy",
        p,
    ]);
    let docs = json_lines(&text);
    let (secret, pod) = (&kind(&docs, "Secret"), &kind(&docs, "Pod"));
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(
        secret["data"]["gh_token"], "dG9rLXZhbHVl",
        "base64 of tok-value"
    );
    let vols = pod["spec"]["volumes"].as_array().unwrap();
    let sv = vols.iter().find(|v| v["secret"].is_object()).unwrap();
    assert_eq!(sv["secret"]["secretName"], secret["metadata"]["name"]);
    assert_eq!(sv["secret"]["items"][0]["key"], "gh_token");
    w.ok(&[
        "devcontainer",
        r,
        "--force",
        "--secret",
        "gh_token",
        "--policy",
        p,
    ]);
    let dc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let args = dc["runArgs"].to_string();
    let store = w.config().join("secrets/gh_token");
    assert!(
        args.contains(&format!("{}:/run/secrets/gh_token:ro", store.display())),
        "{args}"
    );
    assert!(!args.contains("tok-value"), "a path, never the value");
    // The Pod's container agrees with the engine body the CLI sends.
    let engine: Value = serde_json::from_str(&w.ok(&["render", "engine", "--repo", r])).unwrap();
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        engine["HostConfig"]["CapAdd"]
    );
    assert_eq!(
        c["securityContext"]["readOnlyRootFilesystem"],
        engine["HostConfig"]["ReadonlyRootfs"]
    );
    let mut pod_paths: Vec<String> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap().to_string())
        .collect();
    let mut engine_paths: Vec<String> = engine["HostConfig"]["Binds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().split(':').nth(1).unwrap().to_string())
        .chain(
            engine["HostConfig"]["Tmpfs"]
                .as_object()
                .unwrap()
                .keys()
                .cloned(),
        )
        .chain([
            "/run/secrets/gh_token".to_string(),
            "/etc/airlock/policy.toml".to_string(),
        ])
        .collect();
    pod_paths.sort();
    engine_paths.sort();
    assert_eq!(pod_paths, engine_paths);

    text
}

/// Offline validation against the official schemas (PyPI kubernetes-validate).
fn validate_offline(w: &World, text: &str) {
    let manifest = w.dir.path().join("k8s.yaml");
    std::fs::write(&manifest, text).unwrap();
    let v = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.31.0"])
        .arg(&manifest)
        .output()
        .expect(
            "kubernetes-validate validates the manifests offline: pip install kubernetes-validate",
        );
    let out = String::from_utf8_lossy(&v.stdout).into_owned() + &String::from_utf8_lossy(&v.stderr);
    assert!(v.status.success(), "{out}");
    assert!(
        out.contains("resource pod/agent-one against")
            && out.contains("resource secret/agent-one-secrets against"),
        "{out}"
    );
}

#[test]
fn build_makes_the_image_with_the_repository_scripts() {
    let w = World::new("bld");
    // A source tree without the scripts: one line, nothing built.
    let o = w.run(&["build", "--source", w.repo().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--source"), "{err}");
    // The real build (cached base, release binaries, docker build) under a tag of its own,
    // run from a directory that holds a scripts/build-image of its own: never run.
    let planted = w.dir.path().join("planted");
    std::fs::create_dir_all(planted.join("scripts")).unwrap();
    let marker = w.dir.path().join("planted-ran");
    std::fs::write(
        planted.join("scripts/build-image"),
        format!("#!/bin/sh\nid > {}\n", marker.display()),
    )
    .unwrap();
    common::sh(&planted, "chmod +x scripts/build-image");
    let tag = format!("airlock:clitest-{}", w.prefix);
    let o = w
        .cmd(&["build", "--tag", &tag])
        .current_dir(&planted)
        .env_remove("AIRLOCK_SOURCE")
        .output()
        .unwrap();
    let guard = RemoveImage(tag.clone());
    assert!(
        !marker.exists(),
        "a build script of the current directory ran"
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), tag);
    let inspect = std::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Config.Entrypoint}}", &tag])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&inspect.stdout).contains("airlock-entrypoint"),
        "{inspect:?}"
    );
    drop(guard);
}

#[test]
fn devcontainer_never_writes_through_a_symlink_even_with_force() {
    let w = World::new("dcl");
    let repo = w.repo();
    let r = repo.to_str().unwrap();
    let outside = w.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let one_line_refusal = |o: &std::process::Output| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("is a symlink"), "{err}");
    };
    std::os::unix::fs::symlink(&outside, repo.join(".devcontainer")).unwrap();
    one_line_refusal(&w.run(&["devcontainer", r]));
    one_line_refusal(&w.run(&["devcontainer", r, "--force"]));
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    std::fs::remove_file(repo.join(".devcontainer")).unwrap();
    std::fs::create_dir(repo.join(".devcontainer")).unwrap();
    let target = outside.join("created-by-the-link");
    std::os::unix::fs::symlink(&target, repo.join(".devcontainer/devcontainer.json")).unwrap();
    one_line_refusal(&w.run(&["devcontainer", r]));
    one_line_refusal(&w.run(&["devcontainer", r, "--force"]));
    assert!(!target.exists(), "the dangling link's target was created");
    std::fs::write(&target, "theirs").unwrap();
    one_line_refusal(&w.run(&["devcontainer", r, "--force"]));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
}

/// Removes an image tag when dropped (also when the test fails).
struct RemoveImage(String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", &self.0])
            .output();
    }
}
