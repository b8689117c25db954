//! `airlock k8s render` without a cluster: every rendered object validated offline (the core
//! ones against Kubernetes' schemas with kubernetes-validate, the SIG's against the pinned
//! CRD schemas in data/k8s), the seed container's script run for real, the fence applied
//! with iptables in network namespaces and crossed by real packets, and the renderings
//! compared. No engine or image needed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_cli::flags::k8s::{self, fence};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/k8s");

/// A repository with an origin, and the CLI's own directories.
struct Here {
    dir: tempfile::TempDir,
}

impl Here {
    fn new() -> Here {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        sh(
            &repo,
            "git init -q -b main . && git config user.email o@x && git config user.name o && echo one > a && git add a && git commit -qm one && git remote add origin https://tok:ghp_SECRET@git.example.test/acme/app.git",
        );
        std::fs::write(
            dir.path().join("policy.toml"),
            "[sandbox]\nname = \"k8stest\"\nmode = \"enforce\"\n\n[network]\nallow = [\"allowed.test\", \"api.allowed.test:8443\"]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("token"), "tok-value").unwrap();
        Here { dir }
    }
    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .env("AIRLOCK_DATA_DIR", self.dir.path().join("data"))
            .env("AIRLOCK_CONFIG_DIR", self.dir.path().join("config"))
            .current_dir(self.repo())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "airlock {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    fn docs(&self, args: &[&str]) -> Vec<Value> {
        docs(&self.ok(args))
    }
}

fn sh(dir: &Path, script: &str) -> String {
    let o = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn docs(text: &str) -> Vec<Value> {
    text.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let all: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(all.len(), 1, "one {kind} in {docs:?}");
    all[0]
}

fn stream(docs: &[&Value]) -> String {
    docs.iter().fold(String::new(), |mut s, d| {
        s.push_str("---\n");
        s.push_str(&serde_json::to_string_pretty(d).unwrap());
        s.push('\n');
        s
    })
}

const SIG: [&str; 2] = [
    "agents.x-k8s.io/v1beta1",
    "extensions.agents.x-k8s.io/v1beta1",
];

/// Every document validated: the SIG's against the pinned CRD schemas, the rest against
/// Kubernetes 1.31's with kubernetes-validate --strict.
fn validate(here: &Here, tag: &str, all: &[Value]) {
    let (sig, core): (Vec<&Value>, Vec<&Value>) = all
        .iter()
        .partition(|d| SIG.contains(&d["apiVersion"].as_str().unwrap_or_default()));
    if !sig.is_empty() {
        let f = here.path(&format!("{tag}-sig.yaml"));
        std::fs::write(&f, stream(&sig)).unwrap();
        let o = Command::new("python3")
            .arg(format!("{DATA}/validate_crd.py"))
            .arg(&f)
            .output()
            .expect(
                "python3 with jsonschema validates the SIG's objects (scripts/install-test-deps)",
            );
        let out =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{tag}: {out}");
        let valid = out.lines().filter(|l| l.starts_with("valid ")).count();
        assert_eq!(valid, sig.len(), "{tag}: {out}");
    }
    let f = here.path(&format!("{tag}-core.yaml"));
    std::fs::write(&f, stream(&core)).unwrap();
    let o = Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.31.0"])
        .arg(&f)
        .output()
        .expect("kubernetes-validate validates the manifests offline (scripts/install-test-deps)");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{tag}: {out}");
    for d in &core {
        let kind = d["kind"].as_str().unwrap().to_lowercase();
        let name = d["metadata"]["name"].as_str().unwrap();
        assert!(
            out.contains(&format!("resource {kind}/{name} against")),
            "{tag}: {kind}/{name} not validated: {out}"
        );
    }
}

/// Whether the airlock container of `pod_spec` waits for its claim: the variable naming
/// the downward-API file of the claim's annotation, the volume, its read-only mount.
fn waits_for_claim(pod_spec: &Value) -> bool {
    let c = &pod_spec["containers"][0];
    let has = |list: &Value, item: Value| list.as_array().unwrap().contains(&item);
    let env = has(
        &c["env"],
        json!({ "name": "AIRLOCK_WAIT_FOR_CLAIM", "value": "/etc/airlock/claim/branch" }),
    );
    let mount = has(
        &c["volumeMounts"],
        json!({ "name": "claim", "mountPath": "/etc/airlock/claim", "readOnly": true }),
    );
    let volume = has(
        &pod_spec["volumes"],
        json!({ "name": "claim", "downwardAPI": {
            "items": [{ "path": "branch", "fieldRef": { "fieldPath": "metadata.annotations['airlock.dev/branch']" } }],
            "defaultMode": 0o400,
        }}),
    );
    let any = serde_json::to_string(pod_spec).unwrap();
    assert_eq!(
        env && mount && volume,
        any.contains("AIRLOCK_WAIT_FOR_CLAIM") || any.contains("downwardAPI"),
        "all of the wait or none: {pod_spec}"
    );
    env && mount && volume
}

/// The downward-API volume of the claim in the pod `p`.
fn claim_volume(p: &mut Value) -> &mut Value {
    p["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|v| v["name"] == "claim")
        .unwrap()
}

/// The Pod the SIG's controller makes of the template `t` for the sandbox `name`: the
/// template's pod, its volume claim templates added as claims named `<template>-<name>`.
fn template_pod(t: &Value, name: &str) -> Value {
    let pt = &t["spec"]["podTemplate"];
    let mut spec = pt["spec"].clone();
    let volumes = spec["volumes"].as_array_mut().unwrap();
    for v in t["spec"]["volumeClaimTemplates"].as_array().unwrap() {
        let vol = v["metadata"]["name"].as_str().unwrap();
        volumes.push(json!({
            "name": vol,
            "persistentVolumeClaim": { "claimName": format!("{vol}-{name}") },
        }));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": pt["metadata"]["labels"],
            "annotations": pt["metadata"]["annotations"],
        },
        "spec": spec,
    })
}

#[test]
fn every_rendering_validates_offline_against_the_core_and_the_sigs_schemas() {
    let h = Here::new();
    let (policy, token) = (
        h.path("policy.toml"),
        format!("gh_token={}", h.path("token")),
    );
    let common = ["--policy", policy.as_str(), "--secret", token.as_str()];
    let with = |extra: &[&str]| -> Vec<Value> {
        let mut a = vec!["k8s", "render"];
        a.extend(extra);
        a.extend(common);
        h.docs(&a)
    };
    let pod = with(&["agent-one"]);
    let kinds: Vec<&str> = pod.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "Secret",
            "ConfigMap",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "PersistentVolumeClaim",
            "Pod"
        ]
    );
    assert!(!serde_json::to_string(&pod).unwrap().contains("hostPath"));
    // The origin's URL without its credential.
    let seed = &one(&pod, "Pod")["spec"]["initContainers"][0];
    assert_eq!(
        seed["env"][0]["value"],
        "https://git.example.test/acme/app.git"
    );
    assert!(!serde_json::to_string(&pod).unwrap().contains("ghp_SECRET"));
    validate(&h, "pod", &pod);

    let sandbox = with(&["agent-two", "--sandbox", "--runtime-class", "gvisor"]);
    assert_eq!(
        one(&sandbox, "Sandbox")["spec"]["podTemplate"]["spec"]["runtimeClassName"],
        "gvisor"
    );
    validate(&h, "sandbox", &sandbox);

    let template = with(&[
        "app",
        "--template",
        "--claim",
        "fix-login",
        "--claim",
        "feature/parser",
        "--warm-pool",
        "2",
        "--runtime-class",
        "kata",
        "--audit-claim",
        "team-audit",
        "--pod-cidr",
        "10.42.0.0/16",
        "--pod-cidr",
        "fd00:42::/56",
        "--service-cidr",
        "10.43.0.0/16",
    ]);
    assert_eq!(
        template
            .iter()
            .filter(|d| d["kind"] == "SandboxClaim")
            .count(),
        2
    );
    one(&template, "SandboxWarmPool");
    let t = one(&template, "SandboxTemplate");
    assert_eq!(t["spec"]["networkPolicyManagement"], "Unmanaged");
    // The template's pods wait for their claim; the Pod and the Sandbox, never warm, do not.
    assert!(waits_for_claim(&t["spec"]["podTemplate"]["spec"]));
    assert!(!waits_for_claim(&one(&pod, "Pod")["spec"]));
    assert!(!waits_for_claim(
        &one(&sandbox, "Sandbox")["spec"]["podTemplate"]["spec"]
    ));
    validate(&h, "template", &template);

    let admission = h.docs(&["k8s", "render", "sandboxes", "--admission"]);
    let kinds: Vec<&str> = admission
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    validate(&h, "admission", &admission);

    let single = with(&["agent-three", "--host-paths"]);
    assert!(serde_json::to_string(&single).unwrap().contains("hostPath"));
    validate(&h, "single", &single);
}

#[test]
fn k8s_render_refuses_what_a_cluster_cannot_take_with_one_line() {
    let h = Here::new();
    let managed = h.path("managed.json");
    std::fs::write(
        &managed,
        json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
            "metadata": { "name": "platform" },
            "spec": { "podTemplate": { "spec": { "containers": [] } } },
        })
        .to_string(),
    )
    .unwrap();
    let no_origin = h.path("bare");
    std::fs::create_dir(&no_origin).unwrap();
    sh(Path::new(&no_origin), "git init -q .");
    for (args, code, needle) in [
        (
            vec!["app", "--template", "--base-template", managed.as_str()],
            4,
            "add up",
        ),
        (
            vec!["app", "--clone", "git@github.com:acme/app.git"],
            2,
            "https://",
        ),
        (
            vec!["app", "--clone", "https://u:pw@github.com/acme/app.git"],
            2,
            "credential",
        ),
        (vec!["app", "--repo", no_origin.as_str()], 2, "--clone URL"),
        (vec!["app", "--template", "--claim", "a..b"], 2, "branch"),
        (vec!["app", "--pod-cidr", "10.244.0.1/16"], 2, "CIDR"),
        (vec!["app", "--workspace-size", "lots"], 2, "size"),
        (vec!["app", "--claim", "x"], 2, "--template"),
    ] {
        let mut a = vec!["k8s", "render"];
        a.extend(&args);
        let o = h.run(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing printed");
        assert!(!err.contains("pw@"), "{err}");
    }
}

/// The seed container's script, run as the pod runs it (root, a fresh claim), makes the
/// layout the entrypoint and the git API take: `repo.git` with the sandbox's one branch and
/// HEAD on it, the work tree checked out with an empty `.git`, both the agent's.
#[test]
fn the_seed_makes_the_hidden_git_layout_of_one_branch() {
    let h = Here::new();
    let docs = h.docs(&["k8s", "render", "agent-one"]);
    let seed = one(&docs, "Pod")["spec"]["initContainers"][0].clone();
    let script = seed["command"][2].as_str().unwrap().to_string();
    assert_eq!(seed["command"][0], "/bin/sh");
    // The operator's repository has a second branch: the sandbox must not see it.
    sh(&h.repo(), "git branch other && git tag v1");
    let claim = h.dir.path().join("claim");
    std::fs::create_dir(&claim).unwrap();
    let run = |branch: Option<&str>| -> Output {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", &script])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("AIRLOCK_SEED_URL", h.repo())
            .env("AIRLOCK_SEED_BASE", "HEAD")
            .env("AIRLOCK_SEED_DIR", &claim)
            .env("AIRLOCK_SEED_POD", "agent-one")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        if let Some(b) = branch {
            c.env("AIRLOCK_SEED_BRANCH", b);
        }
        c.output().unwrap()
    };
    let o = run(Some("no..branch"));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a branch name"));
    let o = run(None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let g = claim.join("repo.git");
    let w = claim.join("work");
    let git = |args: &str| sh(&claim, &format!("git --git-dir=repo.git {args}"));
    assert_eq!(
        git("symbolic-ref HEAD").trim(),
        "refs/heads/airlock/agent-one"
    );
    assert_eq!(
        git("for-each-ref --format='%(refname)'").trim(),
        "refs/heads/airlock/agent-one",
        "one branch, no tag, nothing else of the operator's"
    );
    assert_eq!(git("config core.bare").trim(), "false");
    assert_eq!(git("config airlock.sandbox").trim(), "agent-one");
    assert_eq!(git("config airlock.branch").trim(), "airlock/agent-one");
    assert_eq!(std::fs::read_to_string(w.join("a")).unwrap(), "one\n");
    assert_eq!(
        std::fs::read_dir(w.join(".git")).unwrap().count(),
        0,
        "the cover's mount point"
    );
    assert!(!claim.join(".repo.git.new").exists());
    use std::os::unix::fs::MetadataExt;
    for p in [&g, &w, &w.join("a"), &g.join("HEAD")] {
        assert_eq!(std::fs::metadata(p).unwrap().uid(), 1000, "{}", p.display());
    }
    // A claim seeded already is kept as it is (a restarted pod keeps the agent's work).
    std::fs::write(w.join("a"), "the agent's\n").unwrap();
    let o = run(Some("fix-login"));
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("kept as it is"));
    assert_eq!(
        std::fs::read_to_string(w.join("a")).unwrap(),
        "the agent's\n"
    );
    // A claim's branch.
    std::fs::remove_dir_all(&claim).unwrap();
    std::fs::create_dir(&claim).unwrap();
    assert!(run(Some("feature/parser")).status.success());
    assert_eq!(git("symbolic-ref HEAD").trim(), "refs/heads/feature/parser");
}

/// `render k8s` (the single-node Pod) is `k8s render --host-paths`'s Pod; the template's,
/// the Sandbox's and the Pod's containers are one; the Pod's mounts are the engine body's.
#[test]
fn the_pod_the_sandbox_and_the_template_render_the_one_definition_alike() {
    let h = Here::new();
    let r = h.repo().display().to_string();
    let single = h.docs(&["k8s", "render", "agent-one", "--repo", &r, "--host-paths"]);
    let printed: Value =
        serde_json::from_str(&h.ok(&["render", "k8s", "--name", "agent-one", "--repo", &r]))
            .unwrap();
    assert_eq!(one(&single, "Pod"), &printed);
    let pod = h.docs(&["k8s", "render", "agent-one", "--repo", &r]);
    let sandbox = h.docs(&["k8s", "render", "agent-one", "--repo", &r, "--sandbox"]);
    let template = h.docs(&["k8s", "render", "agent-one", "--repo", &r, "--template"]);
    let c = &one(&pod, "Pod")["spec"]["containers"];
    assert_eq!(
        &one(&sandbox, "Sandbox")["spec"]["podTemplate"]["spec"]["containers"],
        c
    );
    // The template's container is the Pod's, waiting for its claim.
    let mut tc =
        one(&template, "SandboxTemplate")["spec"]["podTemplate"]["spec"]["containers"].clone();
    let env = tc[0]["env"].as_array_mut().unwrap();
    assert_eq!(
        env.pop(),
        Some(json!({ "name": "AIRLOCK_WAIT_FOR_CLAIM", "value": "/etc/airlock/claim/branch" }))
    );
    let mounts = tc[0]["volumeMounts"].as_array_mut().unwrap();
    assert_eq!(mounts.pop().unwrap()["mountPath"], "/etc/airlock/claim");
    assert_eq!(&tc, c);
    // The cluster Pod mounts what the single-node Pod mounts, where the engine body does.
    let paths = |c: &Value| -> Vec<String> {
        let mut p: Vec<String> = c[0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap().to_string())
            .collect();
        p.sort();
        p
    };
    assert_eq!(paths(c), paths(&printed["spec"]["containers"]));
    let engine: Value = serde_json::from_str(&h.ok(&["render", "engine", "--repo", &r])).unwrap();
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
        .collect();
    engine_paths.sort();
    assert_eq!(paths(c), engine_paths);
    assert_eq!(
        c[0]["securityContext"]["capabilities"]["add"],
        engine["HostConfig"]["CapAdd"]
    );
    // Every rendering carries the fence, selecting its pods by the label they carry.
    for (docs, labels) in [
        (&pod, &one(&pod, "Pod")["metadata"]["labels"]),
        (
            &template,
            &one(&template, "SandboxTemplate")["spec"]["podTemplate"]["metadata"]["labels"],
        ),
    ] {
        let np = one(docs, "NetworkPolicy");
        for (k, v) in np["spec"]["podSelector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(&labels[k], v);
        }
    }
}

/// Network namespaces: a pod's and the world's, joined by a veth pair; the world holds an
/// address of each kind the fence must tell apart (on its loopback: local to the world,
/// reached through the veth).
struct Nets {
    pod: String,
    world: String,
    server: Option<std::process::Child>,
}

impl Drop for Nets {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        for ns in [&self.pod, &self.world] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn ip(args: &str) {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|e| {
            panic!("ip {args}: {e}: the fence test needs iproute2 and root (network namespaces)")
        });
    assert!(
        o.status.success(),
        "ip {args}: {} (the fence test needs root: network namespaces)",
        String::from_utf8_lossy(&o.stderr)
    );
}

const POD_V4: &str = "10.244.1.5";
const POD_V6: &str = "2001:db8:1::5";
const DNS_POD: &str = "10.244.0.10";
/// Addresses in the world: public, each private kind, metadata, another pod, a service.
const WORLD: [&str; 12] = [
    "8.8.8.8",
    "1.1.1.1",
    "10.1.2.3",
    "172.16.0.5",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "10.244.2.7",
    "10.96.0.10",
    DNS_POD,
    "2001:db8::8888",
    "fd00::1",
];

impl Nets {
    fn new() -> Nets {
        let tag = std::process::id();
        let n = Nets {
            pod: format!("airlock-fence-pod-{tag}"),
            world: format!("airlock-fence-world-{tag}"),
            server: None,
        };
        let (p, w) = (&n.pod, &n.world);
        ip(&format!("netns add {p}"));
        ip(&format!("netns add {w}"));
        ip(&format!(
            "link add fp{tag} netns {p} type veth peer name fw{tag} netns {w}"
        ));
        ip(&format!("-n {p} link set lo up"));
        ip(&format!("-n {w} link set lo up"));
        ip(&format!("-n {p} link set fp{tag} up"));
        ip(&format!("-n {w} link set fw{tag} up"));
        ip(&format!("-n {p} addr add {POD_V4}/32 dev fp{tag}"));
        ip(&format!(
            "-n {p} -6 addr add {POD_V6}/128 dev fp{tag} nodad"
        ));
        ip(&format!("-n {p} route add default dev fp{tag}"));
        // IPv6 answers neighbour solicitations only for the receiving link's addresses: the
        // world's end is the pod's gateway.
        ip(&format!("-n {w} -6 addr add fe80::1/64 dev fw{tag} nodad"));
        ip(&format!(
            "-n {p} -6 route add default via fe80::1 dev fp{tag}"
        ));
        ip(&format!("-n {w} route add {POD_V4}/32 dev fw{tag}"));
        ip(&format!("-n {w} -6 route add {POD_V6}/128 dev fw{tag}"));
        for a in WORLD {
            let len = if a.contains(':') { 128 } else { 32 };
            let nodad = if a.contains(':') { " nodad" } else { "" };
            ip(&format!("-n {w} addr add {a}/{len} dev lo{nodad}"));
        }
        n
    }

    fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    fn serve(&mut self, ports: &str) {
        let mut args = vec!["python3", "-u"];
        let script = format!("{DATA}/net_probe.py");
        args.extend([script.as_str(), "serve", ports]);
        args.extend(WORLD);
        let mut child = self
            .exec(&self.world, &args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the world's listeners");
        self.server = Some(child);
    }

    fn probe(&self, targets: &[(&str, &str, u16)]) -> Vec<bool> {
        let t = serde_json::to_string(&targets).unwrap();
        let o = self
            .exec(
                &self.pod,
                &["python3", &format!("{DATA}/net_probe.py"), "probe", &t],
            )
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn restore(&self, tool: &str, rules: &str) {
        use std::io::Write;
        let mut c = self
            .exec(&self.pod, &[tool])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "{tool}: {}\n{rules}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The fence as rendered, translated rule for rule into iptables in the pod's namespace:
/// real connections to private, metadata, pod and service addresses and to unlisted ports
/// fail; DNS to kube-dns and the policy's ports on public addresses pass; nothing gets in.
/// Without the rules every one of them passes (so the refusals are the fence's).
#[test]
fn the_fence_refuses_private_metadata_and_cluster_ranges_and_passes_dns_and_the_policys_ports() {
    let h = Here::new();
    let policy = h.path("policy.toml");
    let docs = h.docs(&[
        "k8s",
        "render",
        "agent-one",
        "--policy",
        &policy,
        "--pod-cidr",
        "10.244.0.0/16",
        "--pod-cidr",
        "fd00:10:244::/56",
    ]);
    let np = one(&docs, "NetworkPolicy").clone();
    let dns_peer = np["spec"]["egress"][0]["to"][0].clone();
    let peers = [(dns_peer, vec![DNS_POD.parse().unwrap()])];
    let v4 = fence::iptables(&np, &peers, false).unwrap();
    let v6 = fence::iptables(&np, &peers, true).unwrap();

    let mut n = Nets::new();
    n.serve("22,53,80,443,8443");
    let cases: Vec<(&str, &str, u16, bool)> = vec![
        ("udp", DNS_POD, 53, true),
        ("tcp", DNS_POD, 53, true),
        ("tcp", DNS_POD, 443, false),
        ("udp", "8.8.8.8", 53, false),
        ("tcp", "8.8.8.8", 53, false),
        ("tcp", "8.8.8.8", 443, true),
        ("tcp", "1.1.1.1", 80, true),
        ("tcp", "1.1.1.1", 8443, true),
        ("tcp", "1.1.1.1", 22, false),
        ("tcp", "10.1.2.3", 443, false),
        ("tcp", "172.16.0.5", 443, false),
        ("tcp", "192.168.1.1", 443, false),
        ("tcp", "100.64.0.1", 443, false),
        ("tcp", "169.254.169.254", 80, false),
        ("tcp", "10.244.2.7", 443, false),
        ("tcp", "10.96.0.10", 443, false),
        ("tcp", "2001:db8::8888", 443, true),
        ("tcp", "2001:db8::8888", 22, false),
        ("tcp", "fd00::1", 443, false),
    ];
    let targets: Vec<(&str, &str, u16)> = cases
        .iter()
        .map(|(p, a, port, _)| (*p, *a, *port))
        .collect();
    assert!(
        n.probe(&targets).iter().all(|ok| *ok),
        "without the fence the pod reaches every address of the world"
    );
    n.restore("iptables-restore", &v4);
    n.restore("ip6tables-restore", &v6);
    let got = n.probe(&targets);
    let wrong: Vec<String> = cases
        .iter()
        .zip(&got)
        .filter(|((_, _, _, want), got)| want != *got)
        .map(|((p, a, port, want), _)| {
            format!(
                "{p} {a}:{port} should {}",
                if *want { "pass" } else { "be refused" }
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}\n{v4}");
    // No ingress: a listener in the pod is not reached from the world.
    let mut inside = n
        .exec(
            &n.pod,
            &[
                "python3",
                "-u",
                &format!("{DATA}/net_probe.py"),
                "serve",
                "8080",
                POD_V4,
            ],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(inside.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let o = n
        .exec(
            &n.world,
            &[
                "python3",
                &format!("{DATA}/net_probe.py"),
                "probe",
                &json!([["tcp", POD_V4, 8080]]).to_string(),
            ],
        )
        .output()
        .unwrap();
    let _ = inside.kill();
    let _ = inside.wait();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "[false]",
        "no ingress"
    );
}

#[test]
fn the_translation_refuses_what_it_cannot_say() {
    let f = fence::Fence {
        ports: [443].into_iter().collect(),
        pod_cidrs: vec![],
        service_cidrs: vec![],
    };
    let np = fence::network_policy("x", &f);
    assert!(
        fence::iptables(&np, &[], false).is_err(),
        "the DNS peer's pods unknown"
    );
    let _ = k8s::FENCE_LABEL;
}

/// The admission policy's CEL, evaluated offline (cel-python) as the API server would: the
/// pods airlock renders are admitted (a claim's branch included, and a template's pod,
/// warm with the downward-API volume of its claim, and claimed), and each way of widening
/// the pod is refused, by the check that names it (a warm pod's included: another variable,
/// a downward-API volume of anything but the claim's annotation, a projected token).
#[test]
fn the_admission_policy_admits_airlocks_pod_and_refuses_every_widening() {
    let h = Here::new();
    let adm = h.docs(&["k8s", "render", "sandboxes", "--admission"]);
    let pod = one(&h.docs(&["k8s", "render", "agent-one"]), "Pod").clone();
    let mut claimed = pod.clone();
    claimed["spec"]["initContainers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "AIRLOCK_SEED_BRANCH", "value": "fix-login" }));
    let widen = |f: &dyn Fn(&mut Value)| -> Value {
        let mut p = pod.clone();
        f(&mut p);
        p
    };
    let attacks: Vec<(&str, Value)> = vec![
        (
            "privileged",
            widen(&|p| p["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true)),
        ),
        (
            "host network",
            widen(&|p| p["spec"]["hostNetwork"] = json!(true)),
        ),
        (
            "host network",
            widen(&|p| p["spec"]["hostPID"] = json!(true)),
        ),
        (
            "adds exactly",
            widen(&|p| {
                p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("SYS_ADMIN"))
            }),
        ),
        (
            "adds exactly",
            widen(&|p| {
                p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|c| c != "KILL")
            }),
        ),
        (
            "drops ALL",
            widen(&|p| {
                p["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] = json!([])
            }),
        ),
        (
            "CHOWN at most",
            widen(&|p| {
                p["spec"]["initContainers"][0]["securityContext"]["capabilities"]["add"] =
                    json!(["CHOWN", "SYS_ADMIN"])
            }),
        ),
        (
            "variables",
            widen(&|p| {
                p["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({ "name": "LD_PRELOAD", "value": "/workspace/x.so" }))
            }),
        ),
        (
            "in its container",
            widen(&|p| {
                // A variable the seed has (the SIG lets a claim add any name its container
                // lacks): not the airlock container's.
                p["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({ "name": "PATH", "value": "/workspace/bin" }))
            }),
        ),
        (
            "in its container",
            widen(&|p| {
                p["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({ "name": "AIRLOCK_SEED_BRANCH", "value": "x" }))
            }),
        ),
        (
            "in the seed",
            widen(&|p| {
                p["spec"]["initContainers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({ "name": "LD_PRELOAD", "value": "/x.so" }))
            }),
        ),
        (
            "only the image",
            widen(&|p| p["spec"]["containers"][0]["image"] = json!("evil:latest")),
        ),
        (
            "only the image",
            widen(&|p| p["spec"]["initContainers"][0]["image"] = json!("evil:latest")),
        ),
        (
            "hostPath",
            widen(&|p| {
                p["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({ "name": "root", "hostPath": { "path": "/" } }))
            }),
        ),
        (
            "ephemeral",
            widen(&|p| {
                p["spec"]["ephemeralContainers"] = json!([{ "name": "debug", "image": "busybox" }])
            }),
        ),
        (
            "fence's label",
            widen(&|p| p["metadata"]["labels"] = json!({})),
        ),
        (
            "service account token",
            widen(&|p| p["spec"]["automountServiceAccountToken"] = json!(true)),
        ),
        (
            "no_new_privs",
            widen(&|p| {
                p["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
                    json!(true)
            }),
        ),
        (
            "seccomp",
            widen(&|p| {
                p["spec"]["containers"][0]["securityContext"]["seccompProfile"]["type"] =
                    json!("Unconfined")
            }),
        ),
        (
            "read-only root",
            widen(&|p| {
                p["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] =
                    json!(false)
            }),
        ),
        (
            "its seed",
            widen(&|p| {
                let sidecar = json!({ "name": "sidecar", "image": "airlock:latest" });
                p["spec"]["containers"]
                    .as_array_mut()
                    .unwrap()
                    .push(sidecar)
            }),
        ),
    ];
    let eval = |ns: &Value, pods: &[Value]| -> Vec<Vec<String>> {
        let (pf, nf, podf) = (h.path("vap.json"), h.path("ns.json"), h.path("pods.json"));
        std::fs::write(&pf, one(&adm, "ValidatingAdmissionPolicy").to_string()).unwrap();
        std::fs::write(&nf, ns.to_string()).unwrap();
        std::fs::write(&podf, Value::Array(pods.to_vec()).to_string()).unwrap();
        let o = Command::new("python3")
            .args([format!("{DATA}/eval_vap.py"), pf, nf, podf])
            .output()
            .expect("python3 with cel-python evaluates the admission policy (scripts/install-test-deps)");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // A template's pod: warm (waiting for its claim, through the downward API), and claimed
    // (the claim's annotation set by the controller on the warm pod; or a pod started for a
    // claim, the seed given its branch).
    let template = h.docs(&["k8s", "render", "app", "--template", "--claim", "fix-login"]);
    let warm = template_pod(one(&template, "SandboxTemplate"), "app-x7k2p");
    assert!(waits_for_claim(&warm["spec"]));
    let mut adopted = warm.clone();
    adopted["metadata"]["annotations"]["airlock.dev/branch"] = json!("fix-login");
    let mut cold = adopted.clone();
    cold["spec"]["initContainers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "AIRLOCK_SEED_BRANCH", "value": "fix-login" }));
    let warm_widen = |f: &dyn Fn(&mut Value)| -> Value {
        let mut p = warm.clone();
        f(&mut p);
        p
    };
    let attacks: Vec<(&str, Value)> = attacks
        .into_iter()
        .chain([
            (
                "variables",
                warm_widen(&|p| {
                    p["spec"]["containers"][0]["env"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({ "name": "LD_PRELOAD", "value": "/workspace/x.so" }))
                }),
            ),
            (
                "downwardAPI of",
                warm_widen(&|p| {
                    claim_volume(p)["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] =
                        json!("metadata.labels")
                }),
            ),
            (
                "downwardAPI of",
                warm_widen(&|p| {
                    claim_volume(p)["downwardAPI"]["items"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({ "path": "mem", "resourceFieldRef": { "containerName": "airlock", "resource": "limits.memory" } }))
                }),
            ),
            (
                "downwardAPI of",
                warm_widen(&|p| {
                    p["spec"]["volumes"].as_array_mut().unwrap().push(json!({
                        "name": "token",
                        "projected": { "sources": [{ "serviceAccountToken": { "path": "t" } }] },
                    }))
                }),
            ),
        ])
        .collect();
    let ns = one(&adm, "Namespace").clone();
    let admitted = [
        (pod.clone(), "airlock's own pod is admitted"),
        (claimed, "a claim's branch for the seed is admitted"),
        (
            warm,
            "a warm template pod (the downwardAPI volume of its claim) is admitted",
        ),
        (adopted, "a warm pod its claim adopted is admitted"),
        (cold, "a pod started for a claim is admitted"),
    ];
    let mut pods: Vec<Value> = admitted.iter().map(|(p, _)| p.clone()).collect();
    pods.extend(attacks.iter().map(|(_, p)| p.clone()));
    let got = eval(&ns, &pods);
    for ((_, what), failed) in admitted.iter().zip(&got) {
        assert_eq!(failed, &Vec::<String>::new(), "{what}");
    }
    for ((what, _), failed) in attacks.iter().zip(&got[admitted.len()..]) {
        assert!(
            failed.iter().any(|m| m.contains(what)),
            "a pod widened at {what:?} is refused by that check: {failed:?}"
        );
    }
    // hostPath: only in a namespace labelled single-node, with the single-node rendering.
    let single_adm = h.docs(&["k8s", "render", "sandboxes", "--admission", "--host-paths"]);
    let single_pod = one(
        &h.docs(&["k8s", "render", "agent-one", "--host-paths"]),
        "Pod",
    )
    .clone();
    assert!(
        !eval(&ns, std::slice::from_ref(&single_pod))[0].is_empty(),
        "hostPath refused in a cluster namespace"
    );
    assert_eq!(
        eval(one(&single_adm, "Namespace"), &[single_pod])[0],
        Vec::<String>::new(),
        "hostPath admitted where the namespace says single-node"
    );
}

/// `airlock k8s check` reads `kubectl api-versions` (a stand-in prints what a cluster with
/// the current controller, an older one, none, or an unreachable API server would): exit 0
/// for v1beta1, 4 for v1alpha1 only, 3 for none, 1 with kubectl's line when it fails.
#[test]
fn k8s_check_tells_the_served_agent_sandbox_version_from_kubectl() {
    use std::os::unix::fs::PermissionsExt;
    let here = Here::new();
    let kubectl = here.dir.path().join("kubectl");
    std::fs::write(
        &kubectl,
        "#!/bin/sh\n[ \"$1\" = api-versions ] || { echo \"unexpected: $*\" >&2; exit 2; }\ncase $SERVED in\n  down) echo 'The connection to the server localhost:8080 was refused' >&2; exit 1 ;;\n  *) printf '%b' \"$SERVED\" ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let check = |served: &str| {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["k8s", "check"])
            .env("AIRLOCK_KUBECTL", &kubectl)
            .env("SERVED", served)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = check(
        "apps/v1\\nagents.x-k8s.io/v1alpha1\\nagents.x-k8s.io/v1beta1\\nextensions.agents.x-k8s.io/v1beta1\\nv1\\n",
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("served at v1beta1"));
    let o = check("agents.x-k8s.io/v1alpha1\\nextensions.agents.x-k8s.io/v1alpha1\\n");
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("predates v0.5.0"));
    let o = check("apps/v1\\nv1\\n");
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("agents.x-k8s.io is not served"));
    let o = check("down");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "api-versions failed: The connection to the server localhost:8080 was refused"
        ),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
