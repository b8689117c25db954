//! The Kubernetes renderings as data: no hostPath by default, the seeded workspace in the
//! hidden-`.git` layout, the SIG's objects, the fence, the admission policy.

use super::admission::{self, Shape};
use super::fence::{self, Fence};
use super::objects::{self, Kind, Rendering};
use super::*;
use crate::flags::{DEFAULT_IMAGE, EXTRA_CA, Layout, RunSpec, Source};
use serde_json::Value;
use std::collections::BTreeSet;

fn spec() -> RunSpec {
    let mut layout = Layout::checkout("/src/repo", Source::Volume("airlock-audit".into()), true);
    layout.policy = Some("/cfg/policy.toml".into());
    layout.secrets = vec![("github_token".into(), "/cfg/secrets/github_token".into())];
    RunSpec::documented(DEFAULT_IMAGE, &layout)
}

fn claims() -> Storage {
    Storage::Claims(Claims {
        seed: Seed {
            url: "https://github.com/acme/app.git".into(),
            base: "HEAD".into(),
            branch: None,
        },
        workspace_size: "10Gi".into(),
        audit: Audit::Create("1Gi".into()),
    })
}

fn the_fence() -> Fence {
    Fence {
        ports: [80, 443, 8443].into_iter().collect(),
        pod_cidrs: vec![fence::DEFAULT_POD_CIDR.into(), "fd00:10:244::/56".into()],
        service_cidrs: vec![fence::DEFAULT_SERVICE_CIDR.into()],
    }
}

fn rendering<'a>(spec: &'a RunSpec, storage: &'a Storage, kind: Kind) -> Rendering<'a> {
    Rendering {
        spec,
        pod: PodOptions {
            name: "app",
            storage,
            runtime_class: Some("gvisor"),
            claim_templates: false,
        },
        kind,
        secrets: vec![("github_token".into(), b"tok".to_vec())],
        policy_text: Some("[sandbox]\nname = \"x\"\n".into()),
        fence: the_fence(),
        base_template: None,
    }
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn contains_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|v| contains_key(v, key)),
        Value::Array(a) => a.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

#[test]
fn the_default_rendering_has_no_host_path_and_seeds_the_hidden_git_layout() {
    let spec = spec();
    let storage = claims();
    let docs = objects::render(&rendering(&spec, &storage, Kind::Pod)).unwrap();
    assert!(!contains_key(&Value::Array(docs.clone()), "hostPath"));
    let pod = of_kind(&docs, "Pod")[0];
    let ps = &pod["spec"];
    let c = &ps["containers"][0];
    let mount = |path: &str| -> Value {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == path)
            .cloned()
            .unwrap_or_else(|| panic!("no mount at {path}"))
    };
    // One claim: the work tree and the git dir, as the CLI lays them out for Docker.
    assert_eq!(mount(WORKSPACE)["name"], WORKSPACE_VOLUME);
    assert_eq!(mount(WORKSPACE)["subPath"], WORK_SUBDIR);
    assert_eq!(mount(HIDDEN_GIT_DIR)["name"], WORKSPACE_VOLUME);
    assert_eq!(mount(HIDDEN_GIT_DIR)["subPath"], GIT_SUBDIR);
    // The cover over the work tree's .git is still a tmpfs (memory emptyDir).
    let cover = mount("/workspace/.git");
    let vols = ps["volumes"].as_array().unwrap();
    let vol = |n: &Value| vols.iter().find(|v| v["name"] == *n).cloned().unwrap();
    assert_eq!(vol(&cover["name"])["emptyDir"]["medium"], "Memory");
    assert_eq!(
        vol(&json!(WORKSPACE_VOLUME))["persistentVolumeClaim"]["claimName"],
        "workspace-app"
    );
    assert_eq!(
        vol(&json!(AUDIT_VOLUME))["persistentVolumeClaim"]["claimName"],
        "audit-app"
    );
    assert_eq!(
        vol(&mount(POLICY)["name"])["configMap"]["name"],
        "app-policy"
    );
    // The claims the Pod names are rendered, and the policy's ConfigMap.
    let pvcs: Vec<&str> = of_kind(&docs, "PersistentVolumeClaim")
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(pvcs, ["workspace-app", "audit-app"]);
    assert_eq!(
        of_kind(&docs, "ConfigMap")[0]["data"][POLICY_KEY],
        "[sandbox]\nname = \"x\"\n"
    );
    // The seed: airlock's image, root with CHOWN alone, the claim's root, the script.
    let seed = &ps["initContainers"][0];
    assert_eq!(seed["name"], SEED_CONTAINER);
    assert_eq!(seed["image"], DEFAULT_IMAGE);
    assert_eq!(
        seed["securityContext"]["capabilities"]["add"],
        json!(["CHOWN"])
    );
    assert_eq!(
        seed["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(seed["volumeMounts"][0]["mountPath"], SEED_DIR);
    assert_eq!(seed["command"][2], SEED_SCRIPT);
    assert_eq!(ps["runtimeClassName"], "gvisor");
    assert_eq!(pod["metadata"]["labels"][FENCE_LABEL], "app");
}

#[test]
fn a_named_audit_claim_is_used_and_not_made() {
    let spec = spec();
    let Storage::Claims(mut c) = claims() else {
        unreachable!()
    };
    c.audit = Audit::Named("team-audit".into());
    let storage = Storage::Claims(c);
    let docs = objects::render(&rendering(&spec, &storage, Kind::Pod)).unwrap();
    let pvcs = of_kind(&docs, "PersistentVolumeClaim");
    assert_eq!(pvcs.len(), 1, "the workspace's only");
    let vols = of_kind(&docs, "Pod")[0]["spec"]["volumes"].clone();
    assert!(
        vols.to_string().contains("\"claimName\":\"team-audit\""),
        "{vols}"
    );
}

#[test]
fn host_paths_only_when_asked_and_another_host_mount_is_refused_with_claims() {
    let spec = spec();
    let pod = pod(&spec, "one").unwrap();
    assert!(contains_key(&pod, "hostPath"));
    assert!(pod["spec"]["initContainers"].is_null());
    // A host file that has no place in a cluster (here the extra CA) is refused, never
    // silently dropped.
    let mut layout = Layout::checkout("/src/repo", Source::Volume("a".into()), true);
    layout.extra_ca = Some("/etc/corp-ca.pem".into());
    let spec = RunSpec::documented(DEFAULT_IMAGE, &layout);
    let storage = claims();
    let err = objects::render(&rendering(&spec, &storage, Kind::Pod)).unwrap_err();
    assert_eq!(
        err,
        K8sError::HostPath {
            target: EXTRA_CA.into(),
            path: "/etc/corp-ca.pem".into()
        }
    );
    assert!(err.to_string().contains("--host-paths"), "{err}");
}

#[test]
fn the_template_is_unmanaged_and_its_pod_is_the_pods() {
    let spec = spec();
    let storage = claims();
    let kind = Kind::Template {
        warm_pool: Some(3),
        claims: vec!["fix-login".into(), "feature/Parser".into()],
    };
    let docs = objects::render(&rendering(&spec, &storage, kind)).unwrap();
    let t = of_kind(&docs, "SandboxTemplate")[0];
    assert_eq!(t["apiVersion"], objects::EXTENSIONS_API);
    assert_eq!(t["spec"]["networkPolicyManagement"], "Unmanaged");
    assert_eq!(t["spec"]["envVarsInjectionPolicy"], "Allowed");
    assert!(t["spec"]["networkPolicy"].is_null());
    let vcts: Vec<&str> = t["spec"]["volumeClaimTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(vcts, [WORKSPACE_VOLUME, AUDIT_VOLUME]);
    // The controller adds the claims' volumes by those names: the template leaves them out.
    let pt = &t["spec"]["podTemplate"];
    let names: Vec<&str> = pt["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&WORKSPACE_VOLUME) && !names.contains(&AUDIT_VOLUME));
    // The same container as the bare Pod's but for the wait for its claim, the same labels.
    let bare = objects::render(&rendering(&spec, &storage, Kind::Pod)).unwrap();
    let pod = of_kind(&bare, "Pod")[0];
    assert_eq!(
        without_claim_wait(&pt["spec"])["containers"],
        pod["spec"]["containers"]
    );
    assert_eq!(pt["spec"]["initContainers"], pod["spec"]["initContainers"]);
    assert_eq!(pt["metadata"]["labels"], pod["metadata"]["labels"]);
    // A pool, and a claim per branch that gives the seed its branch.
    let pool = of_kind(&docs, "SandboxWarmPool")[0];
    assert_eq!(pool["spec"]["replicas"], 3);
    assert_eq!(pool["spec"]["sandboxTemplateRef"]["name"], "app");
    let claims = of_kind(&docs, "SandboxClaim");
    let names: Vec<&str> = claims
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app-fix-login", "app-feature-parser"]);
    assert_eq!(claims[1]["spec"]["warmPoolRef"]["name"], "app");
    assert_eq!(
        claims[1]["spec"]["env"],
        json!([{ "name": SEED_BRANCH, "value": "feature/Parser", "containerName": SEED_CONTAINER }])
    );
    // Without claims no variable may be added, and a claim alone still gets a pool (of none).
    let kind = Kind::Template {
        warm_pool: None,
        claims: vec![],
    };
    let docs = objects::render(&rendering(&spec, &storage, kind)).unwrap();
    assert!(of_kind(&docs, "SandboxTemplate")[0]["spec"]["envVarsInjectionPolicy"].is_null());
    assert!(of_kind(&docs, "SandboxWarmPool").is_empty());
    let kind = Kind::Template {
        warm_pool: None,
        claims: vec!["x".into()],
    };
    let docs = objects::render(&rendering(&spec, &storage, kind)).unwrap();
    assert_eq!(of_kind(&docs, "SandboxWarmPool")[0]["spec"]["replicas"], 0);
}

/// `pod_spec` without what [`objects::wait_for_claim`] adds (which must be there).
fn without_claim_wait(pod_spec: &Value) -> Value {
    let mut p = pod_spec.clone();
    let c = &mut p["containers"][0];
    let env = c["env"].as_array_mut().unwrap();
    let n = env.len();
    env.retain(|e| e["name"] != airlock_control::env::WAIT_FOR_CLAIM);
    assert_eq!(env.len(), n - 1, "the wait's variable, once");
    let mounts = c["volumeMounts"].as_array_mut().unwrap();
    mounts.retain(|m| m["name"] != objects::CLAIM_VOLUME);
    let volumes = p["volumes"].as_array_mut().unwrap();
    volumes.retain(|v| v["name"] != objects::CLAIM_VOLUME);
    p
}

/// The template's pods may start warm, before any claim: their airlock container waits for
/// the claim's annotation, through a read-only downward-API file; the bare Pod and Sandbox,
/// never warm, do not wait.
#[test]
fn the_templates_pod_waits_for_its_claim_and_the_pod_and_sandbox_do_not() {
    let spec = spec();
    let storage = claims();
    let kind = Kind::Template {
        warm_pool: Some(2),
        claims: vec!["fix-login".into()],
    };
    let docs = objects::render(&rendering(&spec, &storage, kind)).unwrap();
    let ps = &of_kind(&docs, "SandboxTemplate")[0]["spec"]["podTemplate"]["spec"];
    let c = &ps["containers"][0];
    let waits: Vec<&Value> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == airlock_control::env::WAIT_FOR_CLAIM)
        .collect();
    assert_eq!(
        waits,
        [&json!({ "name": "AIRLOCK_WAIT_FOR_CLAIM", "value": "/etc/airlock/claim/branch" })]
    );
    let mount: Vec<&Value> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == objects::CLAIM_VOLUME)
        .collect();
    assert_eq!(
        mount,
        [&json!({ "name": "claim", "mountPath": "/etc/airlock/claim", "readOnly": true })]
    );
    let volume: Vec<&Value> = ps["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == objects::CLAIM_VOLUME)
        .collect();
    assert_eq!(
        volume,
        [&json!({ "name": "claim", "downwardAPI": {
            "items": [{ "path": "branch", "fieldRef": { "fieldPath": "metadata.annotations['airlock.dev/branch']" } }],
            "defaultMode": 0o400,
        }})]
    );
    // The claim sets the annotation the file holds.
    let claim = of_kind(&docs, "SandboxClaim")[0];
    assert_eq!(
        claim["spec"]["additionalPodMetadata"]["annotations"][objects::BRANCH_ANNOTATION],
        "fix-login"
    );
    // The mount is none of the paths the entrypoint's preflight requires or the agent writes.
    for p in [
        WORKSPACE,
        HIDDEN_GIT_DIR,
        AUDIT_DIR,
        POLICY,
        SECRETS_DIR,
        airlock_control::paths::AGENT_HOME,
        airlock_control::paths::RUN_DIR,
        "/tmp",
    ] {
        let p = std::path::Path::new(p);
        let dir = std::path::Path::new(objects::CLAIM_DIR);
        assert!(
            !dir.starts_with(p) && !p.starts_with(dir),
            "{}",
            p.display()
        );
    }
    // Nor in the bare Pod or Sandbox.
    for kind in [Kind::Pod, Kind::Sandbox] {
        let docs = objects::render(&rendering(&spec, &storage, kind)).unwrap();
        let text = serde_json::to_string(&docs).unwrap();
        for needle in ["AIRLOCK_WAIT_FOR_CLAIM", "downwardAPI", objects::CLAIM_DIR] {
            assert!(!text.contains(needle), "{needle}");
        }
    }
}

#[test]
fn the_bare_sandbox_has_the_same_pod() {
    let spec = spec();
    let storage = claims();
    let docs = objects::render(&rendering(&spec, &storage, Kind::Sandbox)).unwrap();
    let s = of_kind(&docs, "Sandbox")[0];
    assert_eq!(s["apiVersion"], objects::SANDBOX_API);
    let bare = objects::render(&rendering(&spec, &storage, Kind::Pod)).unwrap();
    assert_eq!(
        s["spec"]["podTemplate"]["spec"]["containers"],
        of_kind(&bare, "Pod")[0]["spec"]["containers"]
    );
    assert!(
        of_kind(&docs, "PersistentVolumeClaim").is_empty(),
        "the controller's"
    );
}

#[test]
fn claims_branches_are_checked_and_may_not_collide() {
    assert!(objects::claim_names("app", &["a/b".into(), "a-b".into()]).is_err());
    for bad in [
        "", "-x", "a..b", "a b", "x.lock", ".x", "HEAD", "a:b", "a~1",
    ] {
        assert!(check_branch(bad).is_err(), "{bad:?}");
    }
    let long = "b".repeat(70);
    assert!(objects::claim_names("app", &[long]).is_err());
}

#[test]
fn clone_urls_are_https_or_http_without_a_credential() {
    assert!(check_url("https://github.com/acme/app.git").is_ok());
    for bad in [
        "git@github.com:acme/app.git",
        "file:///srv/app",
        "/srv/app",
        "ssh://git@github.com/acme/app",
        "https://user:ghp_x@github.com/acme/app.git",
        "https://ghp_x@github.com/acme/app.git",
        "https://",
        "https://github.com/a b",
    ] {
        assert!(check_url(bad).is_err(), "{bad}");
    }
    for leak in [
        "https://me:ghp_SECRET@github.com/a",
        "ssh://me:ghp_SECRET@github.com/a",
    ] {
        let e = check_url(leak).unwrap_err().to_string();
        assert!(!e.contains("ghp_SECRET") && !e.contains("me:"), "{e}");
    }
}

/// The fence as data: no ingress, DNS to kube-dns only, the policy's ports on public
/// addresses only, every private, link-local, loopback and cluster range excepted.
#[test]
fn the_fence_admits_dns_and_the_policys_ports_on_public_addresses_only() {
    let f = the_fence();
    let np = fence::network_policy("app", &f);
    let spec = &np["spec"];
    assert_eq!(spec["podSelector"]["matchLabels"][FENCE_LABEL], "app");
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(spec["ingress"], json!([]), "no ingress at all");
    let egress = spec["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 2);
    let dns = &egress[0];
    assert_eq!(
        dns["to"],
        json!([{
            "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "kube-system" } },
            "podSelector": { "matchLabels": { "k8s-app": "kube-dns" } },
        }])
    );
    assert_eq!(
        dns["ports"],
        json!([{ "protocol": "UDP", "port": 53 }, { "protocol": "TCP", "port": 53 }])
    );
    let public = &egress[1];
    let ports: BTreeSet<u64> = public["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["protocol"], "TCP");
            p["port"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(ports, [80, 443, 8443].into_iter().collect());
    let blocks = public["to"].as_array().unwrap();
    assert_eq!(blocks.len(), 2, "IPv4 and IPv6 blocks, nothing else");
    let except = |cidr: &str| -> Vec<String> {
        let b = blocks
            .iter()
            .find(|b| b["ipBlock"]["cidr"] == cidr)
            .unwrap_or_else(|| panic!("no block {cidr}"));
        serde_json::from_value(b["ipBlock"]["except"].clone()).unwrap()
    };
    let v4 = except("0.0.0.0/0");
    for r in [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "127.0.0.0/8",
        "10.244.0.0/16",
        "10.96.0.0/12",
    ] {
        assert!(v4.contains(&r.to_string()), "{r} not excepted: {v4:?}");
    }
    let v6 = except("::/0");
    for r in ["fc00::/7", "fe80::/10", "::1/128", "fd00:10:244::/56"] {
        assert!(v6.contains(&r.to_string()), "{r} not excepted: {v6:?}");
    }
    assert!(v4.iter().all(|c| !c.contains(':')) && v6.iter().all(|c| c.contains(':')));
}

#[test]
fn a_managed_template_is_refused_with_the_reason() {
    for (t, mode) in [
        (
            json!({ "metadata": { "name": "t" }, "spec": {} }),
            "Managed (the default)",
        ),
        (
            json!({ "metadata": { "name": "t" }, "spec": { "networkPolicyManagement": "Managed" } }),
            "Managed",
        ),
    ] {
        let e = fence::require_unmanaged(&t).unwrap_err();
        assert_eq!(
            e,
            K8sError::Managed {
                name: "t".into(),
                mode: mode.into()
            }
        );
        let line = e.to_string();
        assert!(!line.contains('\n'));
        assert!(
            line.contains("add up") && line.contains("Unmanaged"),
            "{line}"
        );
    }
    // Through --base-template: a user's template left managed is refused; an unmanaged one
    // gives its scheduling and keeps airlock's fence mode.
    let spec = spec();
    let storage = claims();
    let kind = Kind::Template {
        warm_pool: None,
        claims: vec![],
    };
    let mut r = rendering(&spec, &storage, kind);
    r.pod.runtime_class = None;
    r.base_template = Some(json!({
        "apiVersion": objects::EXTENSIONS_API, "kind": "SandboxTemplate",
        "metadata": { "name": "platform" },
        "spec": { "podTemplate": { "spec": { "containers": [] } } },
    }));
    assert!(matches!(objects::render(&r), Err(K8sError::Managed { .. })));
    r.base_template = Some(json!({
        "apiVersion": objects::EXTENSIONS_API, "kind": "SandboxTemplate",
        "metadata": { "name": "platform", "labels": { "team": "a" } },
        "spec": {
            "networkPolicyManagement": "Unmanaged",
            "podTemplate": { "spec": {
                "containers": [], "runtimeClassName": "kata",
                "nodeSelector": { "sandbox": "true" },
                "hostNetwork": true,
            } },
        },
    }));
    let docs = objects::render(&r).unwrap();
    let t = of_kind(&docs, "SandboxTemplate")[0];
    assert_eq!(t["metadata"]["labels"]["team"], "a");
    assert_eq!(t["metadata"]["name"], "app");
    let ps = &t["spec"]["podTemplate"]["spec"];
    assert_eq!(ps["runtimeClassName"], "kata");
    assert_eq!(ps["nodeSelector"]["sandbox"], "true");
    assert!(ps["hostNetwork"].is_null(), "only scheduling is kept");
    assert_eq!(t["spec"]["networkPolicyManagement"], "Unmanaged");
}

#[test]
fn cidrs_are_checked() {
    assert!(fence::parse_cidr("x", "10.244.0.0/16").is_ok());
    assert!(fence::parse_cidr("x", "fd00:10:244::/56").is_ok());
    for bad in ["10.244.0.1/16", "10.0.0.0/33", "10.0.0.0", "x/8", "::1/129"] {
        assert!(fence::parse_cidr("x", bad).is_err(), "{bad}");
    }
}

#[test]
fn the_image_policys_ports_are_the_default_ones() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/policy.toml");
    let p = airlock_policy::Policy::load(std::path::Path::new(file)).unwrap();
    assert_eq!(fence::policy_ports(Some(&p)), fence::policy_ports(None));
    let p = airlock_policy::Policy::parse(
        "[sandbox]\nname = \"x\"\n[network]\nallow = [\"a.test:8443\", \"b.test\"]\n",
        std::path::Path::new("p.toml"),
    )
    .unwrap();
    assert_eq!(
        fence::policy_ports(Some(&p)),
        [80, 443, 8443].into_iter().collect()
    );
}

#[test]
fn the_admission_policy_is_made_of_the_rendered_pod() {
    let spec = spec();
    let storage = claims();
    let o = PodOptions {
        name: "ns",
        storage: &storage,
        runtime_class: None,
        claim_templates: false,
    };
    let shape = Shape::of(&pod_spec(&spec, &o).unwrap());
    assert_eq!(shape.image, DEFAULT_IMAGE);
    assert_eq!(shape.caps, airlock_control::caps::names());
    assert!(shape.seed_env.contains(&SEED_BRANCH.to_string()));
    assert!(!shape.env.contains(&SEED_BRANCH.to_string()));
    assert!(shape.env.contains(&"AIRLOCK_HOST_REPO".to_string()));
    // The seed's PATH, HOME and git variables are the seed's only.
    assert!(
        shape.seed_env.contains(&"PATH".to_string()) && !shape.env.contains(&"PATH".to_string())
    );
    assert!(!shape.env.contains(&"LD_PRELOAD".to_string()));
    // The template's pod (which waits for its claim) has the Pod's shape: one policy admits
    // both.
    let mut warm = pod_spec(&spec, &o).unwrap();
    objects::wait_for_claim(&mut warm);
    assert_eq!(Shape::of(&warm), shape);
    assert!(
        shape
            .env
            .contains(&airlock_control::env::WAIT_FOR_CLAIM.to_string())
    );
    let docs = admission::objects("ns", false, &shape);
    let labels = &docs[0]["metadata"]["labels"];
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged");
    assert_eq!(
        labels["pod-security.kubernetes.io/enforce-version"],
        "latest"
    );
    assert_eq!(labels.as_object().unwrap().len(), 2);
    let single = admission::namespace("ns", true);
    assert_eq!(
        single["metadata"]["labels"][admission::SINGLE_NODE_LABEL],
        "true"
    );
    let vap = docs[1].to_string();
    for needle in [
        "'NET_ADMIN'",
        "['ALL']",
        "hostNetwork",
        "hostPath",
        "ephemeralContainers",
        "downwardAPI",
        "metadata.annotations['airlock.dev/branch']",
    ] {
        assert!(vap.contains(needle), "{needle}");
    }
    assert_eq!(docs[2]["spec"]["policyName"], docs[1]["metadata"]["name"]);
    assert_eq!(docs[2]["spec"]["validationActions"], json!(["Deny"]));
}

#[test]
fn sizes_are_quantities() {
    for ok in ["10Gi", "512Mi", "1000", "5G"] {
        assert!(check_size("--x", ok).is_ok(), "{ok}");
    }
    for bad in ["", "Gi", "10 Gi", "-1Gi", "10GB", "1.5Gi"] {
        assert!(check_size("--x", bad).is_err(), "{bad}");
    }
}
