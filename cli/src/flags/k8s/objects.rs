//! The objects of a rendering: the bare Pod, the SIG's agent-sandbox objects (`Sandbox`,
//! `SandboxTemplate`, `SandboxWarmPool`, `SandboxClaim`, kubernetes-sigs/agent-sandbox,
//! `v1beta1`), and what they use (the Secret, the policy's ConfigMap, the claims).
//!
//! The SIG's controller makes a claim `<template>-<sandbox>` of each volume claim template
//! and adds it to the pod as the volume named as the template (`workspace`, `audit`), so
//! the pod template inside a SIG object leaves those volumes out; the bare Pod names the
//! same claims (`workspace-NAME`, `audit-NAME`), which the rendering creates.

use super::fence::{self, Fence};
use super::{
    AUDIT_VOLUME, Audit, K8sError, POLICY_KEY, PodOptions, SEED_BRANCH, SEED_CONTAINER, Storage,
    WORKSPACE_VOLUME, claim_name, pod_annotations, pod_labels, pod_spec, policy_name, secret,
};
use crate::flags::RunSpec;
use serde_json::{Value, json};

/// The API version of `Sandbox` the rendering writes: the SIG's current one (its CRDs
/// serve `v1alpha1` too, deprecated).
pub const SANDBOX_API: &str = "agents.x-k8s.io/v1beta1";
/// The API version of `SandboxTemplate`, `SandboxWarmPool` and `SandboxClaim`.
pub const EXTENSIONS_API: &str = "extensions.agents.x-k8s.io/v1beta1";
/// The annotation naming a claim's branch (on the claim and, through the controller, its pod).
pub const BRANCH_ANNOTATION: &str = "airlock.dev/branch";
/// Where the template's airlock container reads its claim: a read-only downward-API volume
/// holding the pod's [`BRANCH_ANNOTATION`] ([`wait_for_claim`]).
pub const CLAIM_DIR: &str = "/etc/airlock/claim";
/// The claim's file in [`CLAIM_DIR`], named by [`airlock_control::env::WAIT_FOR_CLAIM`]:
/// empty until a claim sets the annotation, then updated in place by the kubelet.
pub const CLAIM_FILE: &str = "/etc/airlock/claim/branch";
/// The downward-API item ([`CLAIM_FILE`]'s name in [`CLAIM_DIR`]).
pub const CLAIM_ITEM: &str = "branch";
/// The name of the claim's volume.
pub const CLAIM_VOLUME: &str = "claim";

/// The downward-API field [`CLAIM_FILE`] holds: the pod's [`BRANCH_ANNOTATION`].
pub fn claim_field() -> String {
    format!("metadata.annotations['{BRANCH_ANNOTATION}']")
}

/// What is rendered around the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A bare Pod (and the claims it names).
    Pod,
    /// The SIG's bare `Sandbox`.
    Sandbox,
    /// A `SandboxTemplate`; a `SandboxWarmPool` of `warm_pool` pods (or of none, when only
    /// claims ask for one: a claim names a pool); a `SandboxClaim` per branch.
    Template {
        /// Warm pods.
        warm_pool: Option<u32>,
        /// A claim per branch.
        claims: Vec<String>,
    },
}

/// One rendering: everything `airlock k8s render` prints.
#[derive(Debug, Clone)]
pub struct Rendering<'a> {
    /// The run.
    pub spec: &'a RunSpec,
    /// The pod's options.
    pub pod: PodOptions<'a>,
    /// What is rendered around it.
    pub kind: Kind,
    /// The Secret's values.
    pub secrets: Vec<(String, Vec<u8>)>,
    /// The policy file's text, for its ConfigMap (with claims).
    pub policy_text: Option<String>,
    /// The outer fence.
    pub fence: Fence,
    /// An existing `SandboxTemplate` (JSON) whose scheduling (node selector, tolerations,
    /// affinity, priority class, runtime class) and metadata the template keeps; refused
    /// unless its network policy is unmanaged.
    pub base_template: Option<Value>,
}

/// Every object of `r`, in the order `kubectl apply` wants them (what is used first).
pub fn render(r: &Rendering<'_>) -> Result<Vec<Value>, K8sError> {
    let name = r.pod.name;
    let mut docs = vec![secret(name, &r.secrets)];
    if let (Storage::Claims(_), Some(text)) = (r.pod.storage, &r.policy_text) {
        docs.push(config_map(name, text));
    }
    docs.push(fence::network_policy(name, &r.fence));
    match &r.kind {
        Kind::Pod => {
            if let Storage::Claims(c) = r.pod.storage {
                docs.push(claim(
                    &claim_name(WORKSPACE_VOLUME, name),
                    &c.workspace_size,
                ));
                if let Audit::Create(size) = &c.audit {
                    docs.push(claim(&claim_name(AUDIT_VOLUME, name), size));
                }
            }
            docs.push(pod(r.spec, &r.pod)?);
        }
        Kind::Sandbox => docs.push(sandbox(r.spec, &r.pod)?),
        Kind::Template { warm_pool, claims } => {
            let mut t = template(r.spec, &r.pod, !claims.is_empty())?;
            if let Some(base) = &r.base_template {
                keep_from_base(&mut t, base, r.pod.runtime_class.is_some())?;
            }
            fence::require_unmanaged(&t)?;
            docs.push(t);
            if warm_pool.is_some() || !claims.is_empty() {
                docs.push(warm_pool_object(name, warm_pool.unwrap_or(0)));
            }
            for (claim_name, branch) in claim_names(name, claims)? {
                docs.push(sandbox_claim(&claim_name, name, &branch));
            }
        }
    }
    Ok(docs)
}

/// The bare Pod.
pub fn pod(spec: &RunSpec, o: &PodOptions<'_>) -> Result<Value, K8sError> {
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": o.name,
            "labels": pod_labels(spec, o.name),
            "annotations": pod_annotations(spec),
        },
        "spec": pod_spec(spec, o)?,
    }))
}

/// A PersistentVolumeClaim of `size`, one node at a time (`ReadWriteOnce`), of the
/// cluster's default storage class.
pub fn claim(name: &str, size: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": { "name": name },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": size } },
        },
    })
}

/// The policy's ConfigMap (`<name>-policy`, key `policy.toml`).
pub fn config_map(name: &str, text: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": policy_name(name) },
        "data": { POLICY_KEY: text },
    })
}

/// The SIG's pod template and volume claim templates of `o` (its claims as templates).
fn blueprint(spec: &RunSpec, o: &PodOptions<'_>) -> Result<Value, K8sError> {
    let o = PodOptions {
        claim_templates: true,
        ..o.clone()
    };
    let mut vcts = Vec::new();
    if let Storage::Claims(c) = o.storage {
        vcts.push(claim_template(WORKSPACE_VOLUME, &c.workspace_size));
        if let Audit::Create(size) = &c.audit {
            vcts.push(claim_template(AUDIT_VOLUME, size));
        }
    }
    let mut b = json!({
        "podTemplate": {
            "metadata": {
                "labels": pod_labels(spec, o.name),
                "annotations": pod_annotations(spec),
            },
            "spec": pod_spec(spec, &o)?,
        },
    });
    if !vcts.is_empty() {
        b["volumeClaimTemplates"] = json!(vcts);
    }
    Ok(b)
}

fn claim_template(name: &str, size: &str) -> Value {
    json!({
        "metadata": { "name": name },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": size } },
        },
    })
}

/// The SIG's bare `Sandbox` named `o.name`.
pub fn sandbox(spec: &RunSpec, o: &PodOptions<'_>) -> Result<Value, K8sError> {
    Ok(json!({
        "apiVersion": SANDBOX_API,
        "kind": "Sandbox",
        "metadata": { "name": o.name },
        "spec": blueprint(spec, o)?,
    }))
}

/// The `SandboxTemplate` named `o.name`: its pod waits for its claim ([`wait_for_claim`]),
/// the NetworkPolicy left to airlock's fence (`Unmanaged`); `claims_set_branch`: claims may
/// add the seed's branch variable (`envVarsInjectionPolicy: Allowed`, which lets a claim add
/// any variable the template does not define: the admission policy ([`super::admission`])
/// refuses every one but that).
pub fn template(
    spec: &RunSpec,
    o: &PodOptions<'_>,
    claims_set_branch: bool,
) -> Result<Value, K8sError> {
    let mut s = blueprint(spec, o)?;
    wait_for_claim(&mut s["podTemplate"]["spec"]);
    s["networkPolicyManagement"] = json!("Unmanaged");
    if claims_set_branch {
        s["envVarsInjectionPolicy"] = json!("Allowed");
    }
    Ok(json!({
        "apiVersion": EXTENSIONS_API,
        "kind": "SandboxTemplate",
        "metadata": { "name": o.name },
        "spec": s,
    }))
}

/// Makes the airlock container of `pod_spec` (a template's: its pods may start warm, before
/// anyone claims them) wait for its claim: [`airlock_control::env::WAIT_FOR_CLAIM`] names
/// [`CLAIM_FILE`], a read-only downward-API volume at [`CLAIM_DIR`] of the pod's
/// [`BRANCH_ANNOTATION`], which a claim sets (`additionalPodMetadata`) and the kubelet writes
/// into the file in place. Until then PID 1 mints no session id, session key, placeholder or
/// CA, starts neither the proxy nor the git API, and the pod is not Ready. Root's alone
/// (0400): PID 1 reads it. The bare Pod and `Sandbox` are never warm and do not wait.
pub fn wait_for_claim(pod_spec: &mut Value) {
    if let Some(c) = pod_spec["containers"]
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["name"] == super::CONTAINER))
    {
        for (key, item) in [
            (
                "env",
                json!({ "name": airlock_control::env::WAIT_FOR_CLAIM, "value": CLAIM_FILE }),
            ),
            (
                "volumeMounts",
                json!({ "name": CLAIM_VOLUME, "mountPath": CLAIM_DIR, "readOnly": true }),
            ),
        ] {
            if !c[key].is_array() {
                c[key] = json!([]);
            }
            if let Some(a) = c[key].as_array_mut() {
                a.push(item);
            }
        }
    }
    if !pod_spec["volumes"].is_array() {
        pod_spec["volumes"] = json!([]);
    }
    if let Some(v) = pod_spec["volumes"].as_array_mut() {
        v.push(json!({
            "name": CLAIM_VOLUME,
            "downwardAPI": {
                "items": [{ "path": CLAIM_ITEM, "fieldRef": { "fieldPath": claim_field() } }],
                "defaultMode": 0o400,
            },
        }));
    }
}

/// What the template keeps of an existing one: refused unless that one's network policy is
/// unmanaged; its labels and annotations, and its pod's scheduling.
fn keep_from_base(t: &mut Value, base: &Value, runtime_class_given: bool) -> Result<(), K8sError> {
    if base["kind"] != "SandboxTemplate" {
        return Err(K8sError::Base(format!(
            "--base-template: the file holds a {}, not a SandboxTemplate (kubectl get sandboxtemplate NAME -o json)",
            base["kind"].as_str().unwrap_or("document without a kind")
        )));
    }
    fence::require_unmanaged(base)?;
    for key in ["labels", "annotations"] {
        if let Some(m) = base["metadata"][key].as_object() {
            t["metadata"][key] = json!(m);
        }
    }
    let from = &base["spec"]["podTemplate"]["spec"];
    let to = &mut t["spec"]["podTemplate"]["spec"];
    for key in [
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
        "runtimeClassName",
    ] {
        if key == "runtimeClassName" && runtime_class_given {
            continue;
        }
        if !from[key].is_null() {
            to[key] = from[key].clone();
        }
    }
    Ok(())
}

/// The `SandboxWarmPool` of the template `name`.
pub fn warm_pool_object(name: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": EXTENSIONS_API,
        "kind": "SandboxWarmPool",
        "metadata": { "name": name },
        "spec": { "replicas": replicas, "sandboxTemplateRef": { "name": name } },
    })
}

/// A `SandboxClaim` of the pool `pool` working on `branch`: the branch goes to the seed
/// container as its variable, so the claim starts its own pod (the SIG starts a claim that
/// sets variables cold, never from a warm pod: a warm pod was seeded before its claim), and
/// to the pod as its [`BRANCH_ANNOTATION`], the claim its airlock container waits for
/// ([`wait_for_claim`]): a claim without that annotation would leave its pod waiting.
pub fn sandbox_claim(name: &str, pool: &str, branch: &str) -> Value {
    json!({
        "apiVersion": EXTENSIONS_API,
        "kind": "SandboxClaim",
        "metadata": { "name": name, "annotations": { BRANCH_ANNOTATION: branch } },
        "spec": {
            "warmPoolRef": { "name": pool },
            "env": [{ "name": SEED_BRANCH, "value": branch, "containerName": SEED_CONTAINER }],
            "additionalPodMetadata": { "annotations": { BRANCH_ANNOTATION: branch } },
        },
    })
}

/// `(claim name, branch)` of each branch: `<name>-<branch, lowercase, '-' for the rest>`,
/// refused when a branch is not one or two make one name.
pub fn claim_names(name: &str, branches: &[String]) -> Result<Vec<(String, String)>, K8sError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for b in branches {
        super::check_branch(b)?;
        let mut slug = String::new();
        for c in b.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() {
                slug.push(c);
            } else if !slug.ends_with('-') {
                slug.push('-');
            }
        }
        let claim = format!("{name}-{}", slug.trim_matches('-'));
        if claim.len() > 63 {
            return Err(K8sError::Branch(format!(
                "--claim {b:?}: the claim's name {claim} is longer than 63 characters; give a shorter branch or render name"
            )));
        }
        if let Some((_, other)) = out.iter().find(|(c, _)| *c == claim) {
            return Err(K8sError::Branch(format!(
                "--claim {b:?} and --claim {other:?} both make the claim {claim}; give branches that differ in letters or digits"
            )));
        }
        out.push((claim, b.clone()));
    }
    Ok(out)
}
