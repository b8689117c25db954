//! A Kubernetes Pod manifest for a [`RunSpec`], for when one machine is not enough.
//!
//! What maps one to one: capabilities (`drop: [ALL]` and the same `add`), `no_new_privs`
//! (`allowPrivilegeEscalation: false`), the read-only root, the memory and CPU limits, every
//! tmpfs as a memory-backed `emptyDir` with the same `sizeLimit`, every mount at the same
//! path with the same read-only flag, secrets as a Secret volume, the engine's default
//! seccomp profile (`RuntimeDefault`, which Kubernetes does not apply unless asked), and a
//! readiness probe that reads the entrypoint's readiness record. What differs
//! (docs/kubernetes.md, "What differs"): the pids limit is the kubelet's `podPidsLimit`, not
//! a pod field (kept as an annotation); tmpfs options other than the size (`nosuid`,
//! `noexec`, `uid`, `mode`) have no `emptyDir` spelling; host paths become `hostPath`
//! volumes, which only make sense on a single node; the cluster's DNS replaces Docker's
//! embedded resolver.

use super::{RunSpec, Source};
use serde_json::{Value, json};

/// The Secret the Pod of [`pod`] named `name` mounts: `<name>-secrets`, one key per secret
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

/// The name of the Secret of the Pod `name`.
pub fn secret_name(name: &str) -> String {
    format!("{name}-secrets")
}

/// The Secret and the Pod as one YAML stream (`---` between JSON documents, which YAML
/// reads as they are): what `kubectl apply -f -` takes.
pub fn manifests(spec: &RunSpec, name: &str, values: &[(String, Vec<u8>)]) -> String {
    let docs = [secret(name, values), pod(spec, name)];
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

/// The Pod `name` (a DNS label) running `spec`.
pub fn pod(spec: &RunSpec, name: &str) -> Value {
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
    let secret_prefix = format!("{}/", super::SECRETS_DIR);
    let mut secret_items = Vec::new();
    for (i, m) in spec.mounts.iter().enumerate() {
        if let Some(key) = m.target.strip_prefix(&secret_prefix) {
            secret_items.push(json!({ "key": key, "path": key }));
            mounts.push(json!({
                "name": "secrets", "mountPath": m.target, "subPath": key, "readOnly": true,
            }));
            continue;
        }
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
    }
    if !secret_items.is_empty() {
        volumes.push(json!({
            "name": "secrets",
            "secret": { "secretName": secret_name(name), "items": secret_items, "defaultMode": 0o400 },
        }));
    }
    let env: Vec<Value> = spec
        .env
        .iter()
        .map(|(k, v)| json!({ "name": k, "value": v }))
        .collect();
    let labels: serde_json::Map<String, Value> = spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let mut container = json!({
        "name": "airlock",
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
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": { "airlock.dev/pids-limit": spec.pids_limit.to_string() },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "containers": [container],
            "volumes": volumes,
        },
    })
}
