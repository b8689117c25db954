//! The Pod Security answer: airlock's pod needs root and `NET_ADMIN` (the firewall), which
//! the Pod Security Standards' `baseline` and `restricted` levels refuse, so its namespace
//! enforces `privileged`, and in its place a `ValidatingAdmissionPolicy` (CEL,
//! `admissionregistration.k8s.io/v1`) admits in that namespace only airlock's pod shape:
//! its image, `drop: [ALL]` and exactly airlock's capabilities (the seed: `CHOWN` at most),
//! no privileged container, no escalation, `RuntimeDefault` seccomp, a read-only root, no
//! host network, PID or IPC, no service account token, no ephemeral container, the fence's
//! label, only the variables airlock's rendering sets in each container (a claim may add
//! the seed's branch, no other; a template's pod waits for its claim, so
//! [`airlock_control::env::WAIT_FOR_CLAIM`] too), only the volume kinds it uses (a
//! `downwardAPI` volume only of the claim's annotation, [`objects::wait_for_claim`]), and no
//! `hostPath` unless the namespace is labelled [`SINGLE_NODE_LABEL`] (`--host-paths`).

use super::objects;
use super::{FENCE_LABEL, SEED_BRANCH, SEED_CONTAINER};
use serde_json::{Value, json};

/// The namespace's Pod Security labels.
pub const POD_SECURITY_LABELS: [(&str, &str); 2] = [
    ("pod-security.kubernetes.io/enforce", "privileged"),
    ("pod-security.kubernetes.io/enforce-version", "latest"),
];
/// The namespace label that admits `hostPath` volumes (one node).
pub const SINGLE_NODE_LABEL: &str = "airlock.dev/single-node";

/// The policy's and its binding's name for the namespace `ns`.
pub fn policy_name(ns: &str) -> String {
    format!("airlock-pod-shape-{ns}")
}

/// The namespace `ns`, with [`POD_SECURITY_LABELS`] and, `single_node`, [`SINGLE_NODE_LABEL`].
pub fn namespace(ns: &str, single_node: bool) -> Value {
    let mut labels: serde_json::Map<String, Value> = POD_SECURITY_LABELS
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    if single_node {
        labels.insert(SINGLE_NODE_LABEL.into(), json!("true"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": ns, "labels": labels },
    })
}

/// A CEL string list.
fn cel_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// What the policy admits: the pod as rendered (its image, capabilities, variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The image.
    pub image: String,
    /// The airlock container's capabilities (exactly these).
    pub caps: Vec<String>,
    /// The variable names the rendering sets in the airlock container (a template's pod's
    /// included: [`objects::wait_for_claim`]).
    pub env: Vec<String>,
    /// The variable names the rendering sets in the seed, and a claim's branch.
    pub seed_env: Vec<String>,
}

impl Shape {
    /// The shape of a rendered pod spec.
    pub fn of(pod_spec: &Value) -> Shape {
        let containers = pod_spec["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let init = pod_spec["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let main = containers.first().cloned().unwrap_or_default();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let names = |cs: &[Value]| -> Vec<String> {
            let mut n: Vec<String> = cs
                .iter()
                .flat_map(|c| {
                    c["env"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|e| e["name"].as_str().map(String::from))
                })
                .collect();
            n.sort();
            n.dedup();
            n
        };
        // The pods of a template wait for their claim (the Pod's shape is the template's
        // pod's but for that): one policy admits both. Its value is not checked, nor is the
        // wait required: another file only delays the start, and a pod that does not wait is
        // the bare Pod, which is admitted.
        let mut env = names(&containers);
        env.push(airlock_control::env::WAIT_FOR_CLAIM.into());
        env.sort();
        env.dedup();
        let mut seed_env = names(&init);
        seed_env.push(SEED_BRANCH.into());
        seed_env.sort();
        seed_env.dedup();
        Shape {
            image: main["image"].as_str().unwrap_or_default().to_string(),
            caps: strings(&main["securityContext"]["capabilities"]["add"]),
            env,
            seed_env,
        }
    }
}

/// The `ValidatingAdmissionPolicy` that admits in `ns` only pods of `shape`.
pub fn policy(ns: &str, shape: &Shape) -> Value {
    let caps = cel_list(&shape.caps);
    let env = cel_list(&shape.env);
    let seed_env = cel_list(&shape.seed_env);
    let image = &shape.image;
    let claim_field = objects::claim_field();
    let sc = "has(c.securityContext)";
    let validations: Vec<(String, String)> = vec![
        (
            format!("object.spec.containers.size() == 1 && object.spec.containers[0].name == 'airlock' && (!has(object.spec.initContainers) || object.spec.initContainers.all(c, c.name == '{SEED_CONTAINER}'))"),
            "only airlock's container and its seed".into(),
        ),
        (
            "!has(object.spec.ephemeralContainers) || size(object.spec.ephemeralContainers) == 0".into(),
            "no ephemeral (debug) container".into(),
        ),
        (
            format!("variables.containers.all(c, c.image == '{image}')"),
            format!("only the image {image}"),
        ),
        (
            format!("variables.containers.all(c, {sc} && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.drop) && c.securityContext.capabilities.drop == ['ALL'])"),
            "every container drops ALL capabilities".into(),
        ),
        (
            format!("object.spec.containers.all(c, has(c.securityContext.capabilities.add) && c.securityContext.capabilities.add.all(a, a in {caps}) && {caps}.all(a, a in c.securityContext.capabilities.add))"),
            format!("airlock's container adds exactly {caps}"),
        ),
        (
            "!has(object.spec.initContainers) || object.spec.initContainers.all(c, !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(a, a == 'CHOWN'))".into(),
            "the seed adds CHOWN at most".into(),
        ),
        (
            format!("variables.containers.all(c, {sc} && (!has(c.securityContext.privileged) || c.securityContext.privileged == false))"),
            "no privileged container".into(),
        ),
        (
            format!("variables.containers.all(c, {sc} && has(c.securityContext.allowPrivilegeEscalation) && c.securityContext.allowPrivilegeEscalation == false)"),
            "allowPrivilegeEscalation: false (no_new_privs)".into(),
        ),
        (
            format!("variables.containers.all(c, {sc} && has(c.securityContext.seccompProfile) && c.securityContext.seccompProfile.type == 'RuntimeDefault')"),
            "the runtime's default seccomp profile".into(),
        ),
        (
            format!("variables.containers.all(c, {sc} && has(c.securityContext.readOnlyRootFilesystem) && c.securityContext.readOnlyRootFilesystem == true)"),
            "a read-only root filesystem".into(),
        ),
        (
            "!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)".into(),
            "no host network, PID or IPC namespace".into(),
        ),
        (
            "has(object.spec.automountServiceAccountToken) && object.spec.automountServiceAccountToken == false".into(),
            "no service account token".into(),
        ),
        (
            format!("has(object.metadata.labels) && '{FENCE_LABEL}' in object.metadata.labels"),
            format!("the fence's label {FENCE_LABEL}"),
        ),
        (
            format!("object.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name in {env}))"),
            "only the variables airlock's rendering sets in its container".into(),
        ),
        (
            format!("!has(object.spec.initContainers) || object.spec.initContainers.all(c, !has(c.env) || c.env.all(e, e.name in {seed_env}))"),
            "only the variables airlock's rendering sets in the seed (and a claim's branch)".into(),
        ),
        (
            format!("!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.emptyDir) || has(v.persistentVolumeClaim) || has(v.secret) || has(v.configMap) || (has(v.downwardAPI) && (!has(v.downwardAPI.items) || v.downwardAPI.items.all(i, has(i.fieldRef) && i.fieldRef.fieldPath == \"{claim_field}\"))) || (variables.singleNode && has(v.hostPath)))"),
            format!("only emptyDir, persistentVolumeClaim, secret and configMap volumes, and downwardAPI of {claim_field} alone (hostPath only in a namespace labelled {SINGLE_NODE_LABEL}=true)"),
        ),
    ];
    let validations: Vec<Value> = validations
        .into_iter()
        .map(|(expression, what)| {
            json!({
                "expression": expression,
                "message": format!("airlock admits only its own pod shape: {what}"),
                "reason": "Forbidden",
            })
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": policy_name(ns) },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["pods", "pods/ephemeralcontainers"],
                }],
            },
            "variables": [
                {
                    "name": "containers",
                    "expression": "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])",
                },
                {
                    "name": "singleNode",
                    "expression": format!("has(namespaceObject.metadata.labels) && '{SINGLE_NODE_LABEL}' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['{SINGLE_NODE_LABEL}'] == 'true'"),
                },
            ],
            "validations": validations,
        },
    })
}

/// The binding of [`policy`] to the namespace `ns`: refusals deny.
pub fn binding(ns: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": policy_name(ns) },
        "spec": {
            "policyName": policy_name(ns),
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
            },
        },
    })
}

/// The namespace, the policy and its binding.
pub fn objects(ns: &str, single_node: bool, shape: &Shape) -> Vec<Value> {
    vec![namespace(ns, single_node), policy(ns, shape), binding(ns)]
}
