//! The renderings agree with each other and with what the repository ships
//! (`docker/run-flags.sh`, `compose.yaml`).

use super::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What every rendering must say the same way.
#[derive(Debug, Default, PartialEq, Eq)]
struct Facts {
    cap_drop: Vec<String>,
    cap_add: BTreeSet<String>,
    no_new_privileges: bool,
    read_only: bool,
    tmpfs: BTreeMap<String, String>,
    pids: i64,
    memory: u64,
    cpus: u32,
    binds: BTreeSet<String>,
    labels: BTreeSet<String>,
    env: BTreeSet<String>,
    network: Option<String>,
    dns: Vec<String>,
}

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn from_docker_args(args: &[String]) -> Facts {
    let mut f = Facts::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match flag.as_str() {
            "--cap-drop" => f.cap_drop.push(val()),
            "--cap-add" => {
                f.cap_add.insert(val());
            }
            "--security-opt" => f.no_new_privileges |= val() == "no-new-privileges",
            "--read-only" => f.read_only = true,
            "--tmpfs" => {
                let v = val();
                let (t, o) = v.split_once(':').unwrap_or((&v, ""));
                f.tmpfs.insert(t.into(), o.into());
            }
            "--pids-limit" => f.pids = val().parse().unwrap_or(-1),
            "--memory" => f.memory = parse_size(&val()).unwrap_or(0),
            "--cpus" => f.cpus = val().parse().unwrap_or(0),
            "-v" => {
                f.binds.insert(val());
            }
            "--label" => {
                f.labels.insert(val());
            }
            "-e" => {
                f.env.insert(val());
            }
            "--network" => f.network = Some(val()),
            "--dns" => f.dns.push(val()),
            other => panic!("unexpected flag {other}"),
        }
    }
    f
}

/// The array(s) of `docker/run-flags.sh`, with its variables substituted.
fn run_flags_sh(repo: &str, audit: &str, git: bool) -> Vec<String> {
    let text = repo_file("docker/run-flags.sh");
    let mut out = Vec::new();
    let mut inside = false;
    let mut block = 0;
    for line in text.lines().map(str::trim) {
        if line.ends_with("=(") {
            inside = true;
            block += 1;
            continue;
        }
        if line == ")" {
            inside = false;
            continue;
        }
        if !inside || (block > 1 && !git) || line.starts_with('#') {
            continue;
        }
        for word in line.split_whitespace() {
            let w = word
                .trim_matches('"')
                .replace("$repo", repo)
                .replace("$audit_volume", audit);
            out.push(w);
        }
    }
    out
}

fn from_engine(body: &Value) -> Facts {
    let h = &body["HostConfig"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    Facts {
        cap_drop: strings(&h["CapDrop"]),
        cap_add: strings(&h["CapAdd"]).into_iter().collect(),
        no_new_privileges: strings(&h["SecurityOpt"])
            .iter()
            .any(|s| s == "no-new-privileges"),
        read_only: h["ReadonlyRootfs"].as_bool().unwrap_or(false),
        tmpfs: h["Tmpfs"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").into()))
            .collect(),
        pids: h["PidsLimit"].as_i64().unwrap_or(-1),
        memory: h["Memory"].as_u64().unwrap_or(0),
        cpus: (h["NanoCpus"].as_u64().unwrap_or(0) / 1_000_000_000) as u32,
        binds: strings(&h["Binds"]).into_iter().collect(),
        labels: body["Labels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect(),
        env: strings(&body["Env"]).into_iter().collect(),
        network: h["NetworkMode"].as_str().map(String::from),
        dns: strings(&h["Dns"]),
    }
}

/// The keys of the first service of a compose file, as `docker/run-flags.sh` would say them.
fn from_compose(text: &str, repo: &str) -> Facts {
    let mut f = Facts::default();
    let mut list: Option<&str> = None;
    // Compose's `secrets:` are read-only files at /run/secrets/<name>: binds, in our terms.
    let mut secrets: Vec<String> = Vec::new();
    let mut secret_files: BTreeMap<String, String> = BTreeMap::new();
    let mut top_secret: Option<String> = None;
    let inline = |v: &str| -> Vec<String> {
        v.trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(item) = line.strip_prefix("- ") {
            let item = item.replace("${AIRLOCK_REPO:-.}", repo);
            match list {
                Some("tmpfs") => {
                    let (t, o) = item.split_once(':').unwrap_or((&item, ""));
                    f.tmpfs.insert(t.into(), o.into());
                }
                Some("volumes") => {
                    f.binds.insert(item);
                }
                Some("labels") => {
                    f.labels.insert(item);
                }
                Some("environment") => {
                    f.env.insert(item);
                }
                Some("secrets") => secrets.push(item),
                _ => {}
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        list = None;
        if raw.starts_with("  ") && !raw.starts_with("    ") {
            top_secret = Some(key.to_string());
        }
        if key == "file" {
            if let Some(name) = &top_secret {
                secret_files.insert(name.clone(), value.to_string());
            }
            continue;
        }
        match key {
            "cap_drop" => f.cap_drop = inline(value),
            "cap_add" => f.cap_add = inline(value).into_iter().collect(),
            "security_opt" => {
                f.no_new_privileges = inline(value).iter().any(|s| s == "no-new-privileges:true")
            }
            "read_only" => f.read_only = value == "true",
            "pids_limit" => f.pids = value.parse().unwrap_or(-1),
            "mem_limit" => f.memory = parse_size(value).unwrap_or(0),
            "cpus" => f.cpus = value.parse().unwrap_or(0),
            "tmpfs" | "volumes" | "labels" | "environment" | "secrets"
                if value.is_empty() && raw.starts_with("    ") =>
            {
                list = Some(key)
            }
            _ => {}
        }
    }
    for name in secrets {
        let file = secret_files.get(&name).cloned().unwrap_or_default();
        f.binds.insert(format!("{file}:{SECRETS_DIR}/{name}:ro"));
    }
    f
}

fn from_devcontainer(doc: &Value) -> Facts {
    let args: Vec<String> = doc["runArgs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .filter(|s| s != "--interactive" && s != "--tty")
        .collect();
    let mut f = from_docker_args(&args);
    let wm = doc["workspaceMount"].as_str().unwrap_or("");
    let field = |k: &str| {
        wm.split(',')
            .find_map(|kv| kv.strip_prefix(k))
            .unwrap_or("")
            .to_string()
    };
    f.binds
        .insert(format!("{}:{}", field("source="), field("target=")));
    f
}

/// The pod says less (no tmpfs options but the size, no bind sources): compare what it says.
fn pod_agrees(pod: &Value, spec: &RunSpec) {
    let c = &pod["spec"]["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["capabilities"]["add"], serde_json::json!(spec.cap_add));
    assert_eq!(
        sc["allowPrivilegeEscalation"],
        Value::Bool(!spec.no_new_privileges)
    );
    assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(spec.read_only));
    assert_eq!(
        sc["seccompProfile"]["type"], "RuntimeDefault",
        "as Docker's default"
    );
    assert_eq!(
        c["readinessProbe"]["exec"]["command"],
        serde_json::json!(["/usr/local/bin/airlock-entrypoint", "--ready"]),
        "ready when the entrypoint's record says so"
    );
    assert_eq!(c["resources"]["limits"]["memory"], "4Gi");
    assert_eq!(c["resources"]["limits"]["cpu"], spec.cpus.to_string());
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mounts = c["volumeMounts"].as_array().cloned().unwrap_or_default();
    for t in &spec.tmpfs {
        let m = mounts
            .iter()
            .find(|m| m["mountPath"] == t.target)
            .unwrap_or_else(|| {
                panic!("no pod mount at {}", t.target);
            });
        assert_eq!(m["readOnly"], Value::Bool(!t.writable()), "{}", t.target);
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .cloned()
            .unwrap_or_default();
        assert_eq!(v["emptyDir"]["medium"], "Memory", "{}", t.target);
        let size = v["emptyDir"]["sizeLimit"].as_str().map(String::from);
        assert_eq!(size, t.size_bytes().map(k8s::quantity), "{}", t.target);
    }
    for m in &spec.mounts {
        let pm = mounts.iter().find(|p| p["mountPath"] == m.target.as_str());
        let pm = pm.unwrap_or_else(|| panic!("no pod mount at {}", m.target));
        assert_eq!(pm["readOnly"], Value::Bool(m.read_only), "{}", m.target);
    }
    assert_eq!(mounts.len(), spec.tmpfs.len() + spec.mounts.len());
}

fn every_rendering_agrees(spec: &RunSpec) -> Facts {
    let args = from_docker_args(&spec.docker_args());
    assert_eq!(
        from_engine(&spec.engine_body()),
        args,
        "engine body vs docker args"
    );
    let repo = spec.mounts[0].source.spelled();
    assert_eq!(
        from_compose(&compose::render(spec, "airlock"), &repo),
        args,
        "compose"
    );
    assert_eq!(
        from_devcontainer(&devcontainer::render(spec, "x")),
        args,
        "devcontainer"
    );
    pod_agrees(&k8s::pod(spec, "x").unwrap(), spec);
    cluster_renderings_agree(spec);
    args
}

/// The cluster renderings (claims, no hostPath): the Pod and the SIG template's pod agree
/// with the spec as the single-node Pod does, or the spec holds a host file with no cluster
/// spelling and is refused naming it; never a pod that silently drops a mount.
fn cluster_renderings_agree(spec: &RunSpec) {
    let storage = k8s::Storage::Claims(k8s::Claims {
        seed: k8s::Seed {
            url: "https://git.example/acme/app.git".into(),
            base: "HEAD".into(),
            branch: None,
        },
        workspace_size: "10Gi".into(),
        audit: k8s::Audit::Create("1Gi".into()),
    });
    let o = k8s::PodOptions {
        name: "x",
        storage: &storage,
        runtime_class: None,
        claim_templates: false,
    };
    let cluster = [WORKSPACE, HIDDEN_GIT_DIR, AUDIT_DIR, POLICY];
    let host_only = spec
        .mounts
        .iter()
        .find(|m| !cluster.contains(&m.target.as_str()) && !m.target.starts_with(SECRETS_DIR));
    match (k8s::objects::pod(spec, &o), host_only) {
        (Ok(pod), None) => {
            pod_agrees(&pod, spec);
            let t = k8s::objects::template(spec, &o, false).unwrap();
            // The template's pod also waits for its claim (k8s::objects::wait_for_claim):
            // one read-only mount more, which is not the spec's.
            let mut ps = t["spec"]["podTemplate"]["spec"].clone();
            let mounts = ps["containers"][0]["volumeMounts"].as_array_mut().unwrap();
            let n = mounts.len();
            mounts.retain(|m| m["mountPath"] != k8s::objects::CLAIM_DIR);
            assert_eq!(mounts.len() + 1, n, "the claim's mount, once");
            pod_agrees(&serde_json::json!({ "spec": ps }), spec);
        }
        (Err(k8s::K8sError::HostPath { target, .. }), Some(m)) => assert_eq!(target, m.target),
        (got, host) => panic!("cluster rendering {got:?} with host-only mount {host:?}"),
    }
}

#[test]
fn the_renderings_agree_with_run_flags_sh_with_and_without_git() {
    for git in [true, false] {
        let layout = Layout::checkout("/src/repo", Source::Volume("airlock-audit".into()), git);
        let spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
        // run-flags.sh has the flags; scripts/docker-run adds the AIRLOCK_HOST_* labels.
        let mut ours = spec.docker_args();
        let label = ["-e".to_string(), "AIRLOCK_HOST_REPO=/src/repo".to_string()];
        assert!(ours.ends_with(&label), "{ours:?}");
        ours.truncate(ours.len() - 2);
        let shipped = run_flags_sh("/src/repo", "airlock-audit", git);
        assert_eq!(ours, shipped, "docker/run-flags.sh (git: {git})");
        every_rendering_agrees(&spec);
    }
}

#[test]
fn the_renderings_agree_with_compose_yaml() {
    // No secret is required: the GitHub token's lines are there, commented out.
    let layout = Layout::checkout("/src/repo", Source::Volume("airlock-audit".into()), true);
    let spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
    let text = repo_file("compose.yaml");
    assert!(text.contains("# - ${GITHUB_TOKEN_FILE}:/run/secrets/github_token:ro"));
    let mut shipped = from_compose(&text, "/src/repo");
    // compose.yaml passes the default policy's ANTHROPIC_API_KEY through from the caller's
    // environment (as scripts/docker-run does when it is set); the definition passes no
    // secret as a variable: the CLI mounts secrets as files.
    assert!(shipped.env.remove("ANTHROPIC_API_KEY"), "{:?}", shipped.env);
    assert_eq!(shipped, every_rendering_agrees(&spec));
}

#[test]
fn a_sandbox_layout_renders_alike_with_shared_objects_and_secrets_read_only() {
    let layout = Layout {
        work_tree: "/d/sb/work".into(),
        git_dir: Some("/d/sb/repo.git".into()),
        shared_objects: Some("/d/stores/b.git/objects".into()),
        chained_stores: vec!["/d/stores/a.git".into()],
        audit: Source::Host("/d/sb/audit".into()),
        secrets: vec![("github_token".into(), "/cfg/secrets/github_token".into())],
        secrets_volume: None,
        policy: Some("/cfg/policy.toml".into()),
        upstream_ca: None,
        extra_ca: None,
        home: Some(Source::Volume("airlock-home-one".into())),
        control: Some("/d/sb/control".into()),
    };
    let mut spec = RunSpec::documented("airlock:test", &layout);
    spec.labels
        .push(("dev.airlock.sandbox".into(), "one".into()));
    spec.command = vec!["bash".into()];
    spec.env.push(("TERM".into(), "xterm".into()));
    let f = every_rendering_agrees(&spec);
    assert!(
        f.binds
            .contains("/d/stores/b.git/objects:/var/lib/airlock/git/shared.git/objects:ro")
    );
    assert!(
        f.binds
            .contains("/d/stores/a.git/objects:/var/lib/airlock/git/a.git/objects:ro"),
        "a chained store beside the shared one, where its alternates line leads"
    );
    assert!(
        f.binds
            .contains("/cfg/secrets/github_token:/run/secrets/github_token:ro")
    );
    assert!(
        f.binds
            .contains("/cfg/policy.toml:/etc/airlock/policy.toml:ro")
    );
    // The agent's home is the sandbox's volume, in place of the tmpfs (not both).
    assert!(f.binds.contains("airlock-home-one:/home/agent"));
    assert!(spec.tmpfs.iter().all(|t| t.target != "/home/agent"));
    // The secret is a file, never a value in the body's environment.
    // Only where the files are (labels for refusals), never a value.
    let env = serde_json::json!([
        "AIRLOCK_HOST_REPO=/d/sb/work",
        "AIRLOCK_HOST_POLICY=/cfg/policy.toml",
        "AIRLOCK_HOST_GITHUB_TOKEN_FILE=/cfg/secrets/github_token",
        "TERM=xterm"
    ]);
    assert_eq!(spec.engine_body()["Env"], env);
    let pod = k8s::pod(&spec, "one").unwrap();
    // The control directory: the operator's, read-write, where the readiness record is.
    assert!(
        f.binds
            .contains("/d/sb/control:/run/airlock/operator/control")
    );
    assert_eq!(
        pod["spec"]["volumes"].as_array().map(|v| v.len()),
        Some(spec.tmpfs.len() + 9)
    ); // 8 binds and one Secret volume
}

#[test]
fn an_upstream_ca_is_a_read_only_file_named_by_its_variable_in_every_rendering() {
    let mut layout = Layout::checkout("/src/repo", Source::Host("/d/audit".into()), true);
    layout.upstream_ca = Some("/etc/corp/ca.pem".into());
    let spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
    let f = every_rendering_agrees(&spec);
    assert!(
        f.binds
            .contains("/etc/corp/ca.pem:/etc/airlock/upstream-ca.pem:ro")
    );
    assert!(
        f.env
            .contains("AIRLOCK_UPSTREAM_CA=/etc/airlock/upstream-ca.pem")
    );
}

#[test]
fn an_extra_ca_is_mounted_where_docker_run_mounts_it_and_named_for_refusals() {
    let mut layout = Layout::checkout("/src/repo", Source::Host("/d/audit".into()), true);
    layout.extra_ca = Some("/etc/corp/ca.pem".into());
    let spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
    let f = every_rendering_agrees(&spec);
    // As scripts/docker-run's EXTRA_CA_FILE does.
    assert!(
        f.binds
            .contains("/etc/corp/ca.pem:/etc/airlock/extra-ca.pem:ro")
    );
    assert!(f.env.contains("AIRLOCK_EXTRA_CA=/etc/airlock/extra-ca.pem"));
    assert!(f.env.contains("AIRLOCK_HOST_EXTRA_CA=/etc/corp/ca.pem"));
    let docker_run = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/docker-run"),
    )
    .unwrap();
    assert!(docker_run.contains(":/etc/airlock/extra-ca.pem:ro"));
}

#[test]
fn network_and_dns_place_the_container_alike_for_docker_and_the_engine() {
    let layout = Layout::checkout("/src/repo", Source::Host("/d/audit".into()), true);
    let mut spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
    assert_eq!(spec.engine_body()["HostConfig"].get("NetworkMode"), None);
    spec.network = Some("airlock-test-net".into());
    spec.dns = vec!["192.0.2.53".into(), "2001:db8::53".into()];
    let args = from_docker_args(&spec.docker_args());
    assert_eq!(from_engine(&spec.engine_body()), args);
    assert_eq!(args.network.as_deref(), Some("airlock-test-net"));
    assert_eq!(args.dns, ["192.0.2.53", "2001:db8::53"]);
}

#[test]
fn the_writable_tmpfs_sizes_and_the_reserve_fit_the_memory_limit() {
    let layout = Layout::checkout("/r", Source::Volume("a".into()), true);
    let spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
    let tmpfs: u64 = spec
        .tmpfs
        .iter()
        .filter(|t| t.writable())
        .filter_map(Tmpfs::size_bytes)
        .sum();
    let dev = 2 * (64 << 20);
    assert!(tmpfs + dev + (1 << 30) <= spec.memory_bytes());
    assert!(
        spec.tmpfs
            .iter()
            .filter(|t| t.writable())
            .all(|t| t.size_bytes().is_some())
    );
}

#[test]
fn sizes_parse_and_quantities_print() {
    assert_eq!(parse_size("512m"), Some(512 << 20));
    assert_eq!(parse_size("4g"), Some(4 << 30));
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size("x"), None);
    assert_eq!(parse_size("1t"), None);
    assert_eq!(k8s::quantity(4 << 30), "4Gi");
    assert_eq!(k8s::quantity(512 << 20), "512Mi");
    assert_eq!(k8s::quantity(1000), "1000");
}

/// The probe runs the image's entrypoint: the one the image's ENTRYPOINT names.
#[test]
fn the_readiness_probe_runs_the_image_s_entrypoint() {
    let dockerfile = repo_file("Dockerfile");
    let entrypoint = format!("ENTRYPOINT [\"{}\"]", airlock_control::status::PROBE[0]);
    assert!(dockerfile.lines().any(|l| l == entrypoint), "{entrypoint}");
}
