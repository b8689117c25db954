//! Kubernetes manifests for a [`RunSpec`], for when one machine is not enough
//! (docs/kubernetes.md).
//!
//! What maps one to one: capabilities (`drop: [ALL]` and the same `add`), `no_new_privs`
//! (`allowPrivilegeEscalation: false`), the read-only root, the memory and CPU limits, every
//! tmpfs as a memory-backed `emptyDir` with the same `sizeLimit`, every mount at the same
//! path with the same read-only flag, secrets as a Secret volume, the engine's default
//! seccomp profile (`RuntimeDefault`, which Kubernetes does not apply unless asked), and a
//! readiness probe that reads the entrypoint's readiness record. What differs
//! (docs/kubernetes.md, "What differs"): the pids limit is the kubelet's `podPidsLimit`, not
//! a pod field (kept as an annotation); tmpfs options other than the size (`nosuid`,
//! `noexec`, `uid`, `mode`) have no `emptyDir` spelling; the cluster's DNS replaces Docker's
//! embedded resolver.
//!
//! Where the host paths go ([`Storage`]): by default nowhere on a node. The workspace is a
//! claim (`persistentVolumeClaim`) seeded by an init container that fetches the repository
//! into the same hidden-`.git` layout the CLI prepares for Docker (`repo.git` at
//! [`HIDDEN_GIT_DIR`], the work tree at [`WORKSPACE`] with an empty `.git` under the
//! cover), the audit log a claim the rendering creates or names, the policy a ConfigMap.
//! `hostPath` volumes only with [`Storage::HostPaths`] (`--host-paths`, one node).
//!
//! The modules: [`objects`] (the Pod, the SIG's agent-sandbox objects, claims, ConfigMap,
//! Secret), [`fence`] (airlock's NetworkPolicy and its refusal of a managed template), and
//! [`admission`] (the namespace's Pod Security labels and the admission policy).

pub mod admission;
pub mod fence;
pub mod objects;

use super::{AUDIT_DIR, HIDDEN_GIT_DIR, POLICY, RunSpec, SECRETS_DIR, Source, WORKSPACE};
use serde_json::{Value, json};
use thiserror::Error;

/// The label every airlock pod carries, its value the rendering's name: the fence
/// ([`fence::network_policy`]) selects the pods by it, and the admission policy requires it.
pub const FENCE_LABEL: &str = "airlock.dev/fence";
/// The name of the seeding init container (a claim's branch is given to it by name).
pub const SEED_CONTAINER: &str = "seed";
/// The airlock container of every rendered pod (the one `kubectl exec -c` names).
pub const CONTAINER: &str = "airlock";
/// Where the seed container mounts the workspace claim.
pub const SEED_DIR: &str = "/seed";
/// The variables of the seed script ([`SEED_SCRIPT`]).
pub const SEED_URL: &str = "AIRLOCK_SEED_URL";
/// The commit or ref fetched as the branch's start (default `HEAD`).
pub const SEED_BASE: &str = "AIRLOCK_SEED_BASE";
/// The branch the sandbox works on (default `airlock/<pod name>`); a claim sets it.
pub const SEED_BRANCH: &str = "AIRLOCK_SEED_BRANCH";
/// The pod's name (the downward API), the sandbox name written into the git dir.
pub const SEED_POD: &str = "AIRLOCK_SEED_POD";
/// The directory seeded ([`SEED_DIR`] in the pod; a test's directory elsewhere).
pub const SEED_DIR_VAR: &str = "AIRLOCK_SEED_DIR";
/// The seed script: `repo.git` (one branch, HEAD on it, `core.bare=false`, the sandbox's
/// `airlock.*` keys) and `work/` (checked out, an empty `.git`), the agent's (uid 1000); a
/// claim seeded already is left as it is.
pub const SEED_SCRIPT: &str = include_str!("seed.sh");
/// The subdirectories of the workspace claim: the work tree and the git dir.
pub const WORK_SUBDIR: &str = "work";
/// See [`WORK_SUBDIR`].
pub const GIT_SUBDIR: &str = "repo.git";
/// The name of the workspace volume (and of the SIG's volume claim template).
pub const WORKSPACE_VOLUME: &str = "workspace";
/// The name of the audit volume (and of the SIG's volume claim template).
pub const AUDIT_VOLUME: &str = "audit";
/// The ConfigMap key the policy is under.
pub const POLICY_KEY: &str = "policy.toml";

/// What a rendering refuses, one line each with the fix.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum K8sError {
    /// A host path with no cluster spelling.
    #[error(
        "{target} is mounted from the host path {path}, which no cluster node has: render with --host-paths for a single node"
    )]
    HostPath {
        /// The container path.
        target: String,
        /// The host path.
        path: String,
    },
    /// A template whose NetworkPolicy the SIG's controller would manage.
    #[error(
        "the SandboxTemplate {name} leaves networkPolicyManagement {mode}: the controller would add its own NetworkPolicy, which admits the public internet on every port, and NetworkPolicy allows add up, so airlock's fence would be opened; set spec.networkPolicyManagement: Unmanaged"
    )]
    Managed {
        /// The template's name.
        name: String,
        /// What it says (`Managed`, or `Managed (the default)` when it says nothing).
        mode: String,
    },
    /// A clone URL a cluster cannot use or that carries a credential.
    #[error("{0}")]
    Url(String),
    /// A `--base-template` that is not a SandboxTemplate.
    #[error("{0}")]
    Base(String),
    /// A branch name git refuses, or two that make the same claim name.
    #[error("{0}")]
    Branch(String),
    /// A size that is not a quantity.
    #[error("{what} {value:?} is not a size: give e.g. 10Gi or 512Mi")]
    Size {
        /// The flag.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// A CIDR that is not one.
    #[error("{what} {value:?} is not a CIDR: give e.g. 10.244.0.0/16 or fd00:10:244::/56")]
    Cidr {
        /// The flag.
        what: &'static str,
        /// Its value.
        value: String,
    },
}

/// Where the workspace, its git dir and the audit log live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// The node's paths (`hostPath`): right on a single node only.
    HostPaths,
    /// Claims: the workspace seeded by an init container, the audit log on a claim.
    Claims(Claims),
}

/// The claims of [`Storage::Claims`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// What the seed container fetches.
    pub seed: Seed,
    /// The workspace claim's size (a quantity, `10Gi`).
    pub workspace_size: String,
    /// The audit log's claim.
    pub audit: Audit,
}

/// The audit log's claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audit {
    /// Made by the rendering (a PersistentVolumeClaim, or the SIG's volume claim template):
    /// one per sandbox, of this size.
    Create(String),
    /// An existing claim of this name.
    Named(String),
}

/// What the seed container fetches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// The repository's URL (`https://`/`http://`, no credential).
    pub url: String,
    /// The commit or ref the branch starts at.
    pub base: String,
    /// The branch (`None`: `airlock/<pod name>`, or a claim's).
    pub branch: Option<String>,
}

/// How one pod spec is rendered.
#[derive(Debug, Clone)]
pub struct PodOptions<'a> {
    /// The rendering's name: the Pod's, the Secret's and ConfigMap's prefix, the fence label.
    pub name: &'a str,
    /// Where the volumes come from.
    pub storage: &'a Storage,
    /// `runtimeClassName` (gVisor, Kata).
    pub runtime_class: Option<&'a str>,
    /// Inside a SIG object: the claims the rendering creates are volume claim templates,
    /// which the controller adds as volumes (named as the template), so they are left out
    /// of `volumes`.
    pub claim_templates: bool,
}

/// The Secret the pods of the rendering `name` mount: `<name>-secrets`, one key per secret
/// (`values`: name and value), base64 as the API wants it.
pub fn secret(name: &str, values: &[(String, Vec<u8>)]) -> Value {
    use base64::Engine as _;
    let data: serde_json::Map<String, Value> = values
        .iter()
        .map(|(k, v)| {
            let b64 = base64::engine::general_purpose::STANDARD.encode(v);
            (k.clone(), Value::String(b64))
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": secret_name(name) },
        "type": "Opaque",
        "data": data,
    })
}

/// The name of the Secret of the rendering `name`.
pub fn secret_name(name: &str) -> String {
    format!("{name}-secrets")
}

/// The name of the policy's ConfigMap of the rendering `name`.
pub fn policy_name(name: &str) -> String {
    format!("{name}-policy")
}

/// The claim the SIG's controller (and the bare Pod) names for the volume `volume` of the
/// sandbox `name`: `<volume>-<name>`.
pub fn claim_name(volume: &str, name: &str) -> String {
    format!("{volume}-{name}")
}

/// Documents as one YAML stream (`---` between JSON documents, which YAML reads as they
/// are): what `kubectl apply -f -` takes.
pub fn stream(docs: &[Value]) -> String {
    docs.iter().fold(String::new(), |mut out, d| {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(d).unwrap_or_default());
        out.push('\n');
        out
    })
}

/// `bytes` in the largest binary unit that divides it (`4Gi`, `512Mi`).
pub fn quantity(bytes: u64) -> String {
    for (shift, unit) in [(30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Whether `text` is a size the API takes (digits and a binary or decimal unit).
pub fn check_size(what: &'static str, text: &str) -> Result<(), K8sError> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let units = ["", "Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T"];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || !units.contains(&unit) {
        return Err(K8sError::Size {
            what,
            value: text.into(),
        });
    }
    Ok(())
}

/// The Pod `name` (a DNS label) running `spec` on the node's paths (`hostPath`): the
/// single-node rendering (`airlock render k8s`, `k8s render --host-paths`).
pub fn pod(spec: &RunSpec, name: &str) -> Result<Value, K8sError> {
    objects::pod(
        spec,
        &PodOptions {
            name,
            storage: &Storage::HostPaths,
            runtime_class: None,
            claim_templates: false,
        },
    )
}

/// The pod's labels: the spec's and [`FENCE_LABEL`].
pub fn pod_labels(spec: &RunSpec, name: &str) -> serde_json::Map<String, Value> {
    let mut labels: serde_json::Map<String, Value> = spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    labels.insert(FENCE_LABEL.into(), json!(name));
    labels
}

/// The pod's annotations: what has no pod field.
pub fn pod_annotations(spec: &RunSpec) -> Value {
    json!({ "airlock.dev/pids-limit": spec.pids_limit.to_string() })
}

/// The PodSpec of `spec` as `o` says: the airlock container, the seed init container with
/// claims, and the volumes.
pub fn pod_spec(spec: &RunSpec, o: &PodOptions<'_>) -> Result<Value, K8sError> {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    for (i, t) in spec.tmpfs.iter().enumerate() {
        let vol = format!("tmpfs-{i}");
        let mut empty = json!({ "medium": "Memory" });
        if let Some(size) = t.size_bytes() {
            empty["sizeLimit"] = json!(quantity(size));
        }
        volumes.push(json!({ "name": vol, "emptyDir": empty }));
        mounts.push(json!({ "name": vol, "mountPath": t.target, "readOnly": !t.writable() }));
    }
    let secret_prefix = format!("{SECRETS_DIR}/");
    let mut secret_items = Vec::new();
    let mut workspace_used = false;
    for (i, m) in spec.mounts.iter().enumerate() {
        if let Some(key) = m.target.strip_prefix(&secret_prefix) {
            secret_items.push(json!({ "key": key, "path": key }));
            mounts.push(json!({
                "name": "secrets", "mountPath": m.target, "subPath": key, "readOnly": true,
            }));
            continue;
        }
        let claims = match o.storage {
            Storage::HostPaths => None,
            Storage::Claims(c) => Some(c),
        };
        let Some(claims) = claims else {
            let vol = format!("mount-{i}");
            let source = match &m.source {
                Source::Host(p) => json!({ "hostPath": { "path": p.display().to_string() } }),
                Source::Volume(v) => json!({ "persistentVolumeClaim": { "claimName": v } }),
            };
            let mut v = json!({ "name": vol });
            if let (Some(obj), Some(src)) = (v.as_object_mut(), source.as_object()) {
                obj.extend(src.clone());
            }
            volumes.push(v);
            mounts.push(json!({ "name": vol, "mountPath": m.target, "readOnly": m.read_only }));
            continue;
        };
        let target = m.target.as_str();
        if target == WORKSPACE || target == HIDDEN_GIT_DIR {
            let sub = if target == WORKSPACE {
                WORK_SUBDIR
            } else {
                GIT_SUBDIR
            };
            workspace_used = true;
            mounts.push(json!({
                "name": WORKSPACE_VOLUME, "mountPath": target, "subPath": sub,
                "readOnly": m.read_only,
            }));
        } else if target == AUDIT_DIR {
            match &claims.audit {
                Audit::Create(_) if o.claim_templates => {}
                Audit::Create(_) => volumes.push(json!({
                    "name": AUDIT_VOLUME,
                    "persistentVolumeClaim": { "claimName": claim_name(AUDIT_VOLUME, o.name) },
                })),
                Audit::Named(c) => volumes.push(json!({
                    "name": AUDIT_VOLUME, "persistentVolumeClaim": { "claimName": c },
                })),
            }
            mounts.push(json!({
                "name": AUDIT_VOLUME, "mountPath": target, "readOnly": m.read_only,
            }));
        } else if target == POLICY {
            volumes.push(json!({
                "name": "policy",
                "configMap": {
                    "name": policy_name(o.name),
                    "items": [{ "key": POLICY_KEY, "path": POLICY_KEY }],
                    "defaultMode": 0o444,
                },
            }));
            mounts.push(json!({
                "name": "policy", "mountPath": target, "subPath": POLICY_KEY, "readOnly": true,
            }));
        } else {
            return Err(K8sError::HostPath {
                target: m.target.clone(),
                path: m.source.spelled(),
            });
        }
    }
    if !secret_items.is_empty() {
        volumes.push(json!({
            "name": "secrets",
            "secret": { "secretName": secret_name(o.name), "items": secret_items, "defaultMode": 0o400 },
        }));
    }
    let mut init = Vec::new();
    if let Storage::Claims(c) = o.storage {
        if workspace_used && !o.claim_templates {
            volumes.push(json!({
                "name": WORKSPACE_VOLUME,
                "persistentVolumeClaim": { "claimName": claim_name(WORKSPACE_VOLUME, o.name) },
            }));
        }
        init.push(seed_container(spec, &c.seed));
    }
    let mut pod = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "containers": [container(spec, mounts)],
        "volumes": volumes,
    });
    if !init.is_empty() {
        pod["initContainers"] = json!(init);
    }
    if let Some(rc) = o.runtime_class {
        pod["runtimeClassName"] = json!(rc);
    }
    Ok(pod)
}

/// The airlock container.
fn container(spec: &RunSpec, mounts: Vec<Value>) -> Value {
    let env: Vec<Value> = spec
        .env
        .iter()
        .map(|(k, v)| json!({ "name": k, "value": v }))
        .collect();
    let mut container = json!({
        "name": CONTAINER,
        "image": spec.image,
        "stdin": spec.tty,
        "tty": spec.tty,
        "env": env,
        "securityContext": {
            "capabilities": { "drop": ["ALL"], "add": spec.cap_add },
            "allowPrivilegeEscalation": !spec.no_new_privileges,
            "readOnlyRootFilesystem": spec.read_only,
            "runAsUser": 0,
            // Docker applies its default seccomp profile to every container; Kubernetes
            // runs a container unconfined unless asked.
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "resources": { "limits": {
            "memory": quantity(spec.memory_bytes()),
            "cpu": spec.cpus.to_string(),
        }},
        "volumeMounts": mounts,
    });
    if !spec.command.is_empty() {
        container["args"] = json!(spec.command);
    }
    // Ready when the entrypoint's readiness record says so (the proxy, the git API, the
    // firewall and the self-test are up), not when the container merely runs.
    container["readinessProbe"] = json!({
        "exec": { "command": airlock_control::status::PROBE },
        "periodSeconds": 2,
    });
    container
}

/// The init container that seeds the workspace claim ([`SEED_SCRIPT`]): airlock's image,
/// root with `CHOWN` alone (the checkout becomes the agent's), the claim's root at
/// [`SEED_DIR`]. It runs before the entrypoint, so before airlock's firewall: only the
/// fence bounds it, and only this script runs in it.
fn seed_container(spec: &RunSpec, seed: &Seed) -> Value {
    let mut env = vec![
        json!({ "name": SEED_URL, "value": seed.url }),
        json!({ "name": SEED_BASE, "value": seed.base }),
        json!({ "name": SEED_DIR_VAR, "value": SEED_DIR }),
        json!({ "name": SEED_POD, "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }),
        // Debian's git, never airlock's shim (which is the agent's).
        json!({ "name": "PATH", "value": "/usr/bin:/bin" }),
        json!({ "name": "HOME", "value": "/nonexistent" }),
        json!({ "name": "GIT_CONFIG_NOSYSTEM", "value": "1" }),
        json!({ "name": "GIT_CONFIG_GLOBAL", "value": "/dev/null" }),
        json!({ "name": "GIT_TERMINAL_PROMPT", "value": "0" }),
    ];
    if let Some(b) = &seed.branch {
        env.push(json!({ "name": SEED_BRANCH, "value": b }));
    }
    json!({
        "name": SEED_CONTAINER,
        "image": spec.image,
        "command": ["/bin/sh", "-c", SEED_SCRIPT],
        "env": env,
        "securityContext": {
            "capabilities": { "drop": ["ALL"], "add": ["CHOWN"] },
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsUser": 0,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "resources": { "limits": {
            "memory": quantity(spec.memory_bytes()),
            "cpu": spec.cpus.to_string(),
        }},
        "volumeMounts": [{ "name": WORKSPACE_VOLUME, "mountPath": SEED_DIR }],
    })
}

/// Whether `branch` is a branch name airlock gives a sandbox: what `git check-ref-format
/// --branch` accepts, in the characters a claim's name can be made of.
pub fn check_branch(branch: &str) -> Result<(), K8sError> {
    let bad = |why: &str| {
        Err(K8sError::Branch(format!(
            "--claim {branch:?}: {why}; give a branch name such as fix-login or feature/parser"
        )))
    };
    if branch.is_empty() || branch.len() > 200 {
        return bad("a branch name is 1 to 200 characters");
    }
    if !branch
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
    {
        return bad("it has a character other than letters, digits, '-', '_', '.' and '/'");
    }
    let parts_ok = branch.split('/').all(|p| {
        !p.is_empty() && !p.starts_with('.') && !p.ends_with(".lock") && !p.starts_with('-')
    });
    if !parts_ok || branch.contains("..") || branch.ends_with('.') || branch == "HEAD" {
        return bad("git refuses it as a branch name");
    }
    Ok(())
}

/// Whether `url` is a repository URL the seed container can fetch in a cluster: `https://`
/// or `http://`, with no credential in it (a Pod spec is no place for one).
pub fn check_url(url: &str) -> Result<(), K8sError> {
    // Said without any userinfo: a refusal never repeats a credential.
    let shown = match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let host = rest[..end].rsplit('@').next().unwrap_or_default();
            format!("{scheme}://{host}{}", &rest[end..])
        }
        None => url.rsplit('@').next().unwrap_or_default().to_string(),
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Err(K8sError::Url(format!(
            "--clone {shown:?}: the seed container fetches over https:// or http:// (through the fence's ports); give the repository's https URL"
        )));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(K8sError::Url(format!(
            "--clone {shown:?}: the URL carries a credential, which would be written into the pod spec; give the URL without it"
        )));
    }
    if authority.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(K8sError::Url(format!(
            "--clone {shown:?} is not a URL; give the repository's https URL"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
