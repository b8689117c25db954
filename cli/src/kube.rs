//! Reaching a sandbox on Kubernetes: the operator's commands name a pod as
//! `k8s:NAMESPACE/POD` where they take a sandbox's NAME, and speak the admin API through
//! `kubectl exec -i` of the in-pod relay (`airlock-entrypoint __admin`, which copies its
//! standard input and output to the admin socket). `kubectl` is run as found on `PATH`, or
//! as [`KUBECTL_ENV`] says (`microk8s kubectl`, `oc`): its context, credentials and RBAC are
//! the operator's (whoever holds `pods/exec` in the namespace is an operator).
//!
//! Pure except [`kubectl`] (reads the environment) and [`api_versions`] (runs kubectl):
//! the target's syntax, the relay's command line and the reading of `kubectl
//! api-versions` are tested here without a cluster.

use crate::flags::k8s::CONTAINER;
use std::fmt;

/// The prefix of a pod target.
pub const PREFIX: &str = "k8s:";
/// The variable naming the kubectl command (words split on spaces; default `kubectl`).
pub const KUBECTL_ENV: &str = "AIRLOCK_KUBECTL";
/// The entrypoint's relay mode (`airlock_entrypoint::admin_relay::ARG`).
pub const RELAY: [&str; 2] = ["airlock-entrypoint", "__admin"];

/// A sandbox pod: `k8s:NAMESPACE/POD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Pod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}/{}", self.namespace, self.name)
    }
}

/// Whether `s` reads as a Kubernetes name (lowercase letters, digits, '-' and '.', starting
/// and ending with a letter or digit, at most 253 bytes).
fn is_name(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| alnum(b) || b == b'-' || b == b'.')
        && s.bytes().next().is_some_and(alnum)
        && s.bytes().last().is_some_and(alnum)
}

/// The pod `target` names: `None` when it is not a pod target (a sandbox's name), an error
/// line when it starts like one but does not read.
///
/// # Errors
/// The line saying what is wrong and what a target looks like.
pub fn target(target: &str) -> Option<Result<Pod, String>> {
    let rest = target.strip_prefix(PREFIX)?;
    let parsed = rest
        .split_once('/')
        .filter(|(ns, pod)| is_name(ns) && is_name(pod))
        .map(|(ns, pod)| Pod {
            namespace: ns.to_owned(),
            name: pod.to_owned(),
        });
    Some(parsed.ok_or_else(|| {
        format!(
            "{target:?} is not a pod: write {PREFIX}NAMESPACE/POD (lowercase Kubernetes names, e.g. {PREFIX}sandboxes/fix-login)"
        )
    }))
}

/// The kubectl command: [`KUBECTL_ENV`]'s words, else `kubectl`.
#[must_use]
pub fn kubectl() -> Vec<String> {
    words(std::env::var(KUBECTL_ENV).ok().as_deref())
}

fn words(setting: Option<&str>) -> Vec<String> {
    let w: Vec<String> = setting
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if w.is_empty() {
        vec!["kubectl".to_owned()]
    } else {
        w
    }
}

/// The command line whose standard input and output are a connection to `pod`'s admin
/// socket: `kubectl -n NS exec -i POD -c airlock -- airlock-entrypoint __admin`.
#[must_use]
pub fn relay_argv(kubectl: &[String], pod: &Pod) -> Vec<String> {
    let mut argv = kubectl.to_vec();
    for a in [
        "-n",
        &pod.namespace,
        "exec",
        "-i",
        &pod.name,
        "-c",
        CONTAINER,
        "--",
    ] {
        argv.push(a.to_owned());
    }
    argv.extend(RELAY.iter().map(|s| (*s).to_owned()));
    argv
}

/// The agent-sandbox API groups and the version `airlock k8s render` writes.
pub const SIG_GROUPS: [&str; 2] = ["agents.x-k8s.io", "extensions.agents.x-k8s.io"];
/// The version rendered (served since agent-sandbox v0.5.0).
pub const SIG_VERSION: &str = "v1beta1";
/// The version a controller older than v0.5.0 serves alone.
pub const SIG_OLD_VERSION: &str = "v1alpha1";

/// What a cluster serves of the agent-sandbox API, read from `kubectl api-versions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// Both groups at [`SIG_VERSION`]: the rendered objects apply.
    Current,
    /// A group only at [`SIG_OLD_VERSION`]: the controller predates v0.5.0.
    Old(&'static str),
    /// A group not served at all: the controller (or its extensions) is not installed.
    Missing(&'static str),
}

impl Served {
    /// One line for the operator: what the cluster serves and what to do.
    #[must_use]
    pub fn line(&self) -> String {
        match self {
            Served::Current => format!(
                "agent-sandbox: {} and {} served at {SIG_VERSION}: `airlock k8s render --sandbox/--template` objects apply",
                SIG_GROUPS[0], SIG_GROUPS[1]
            ),
            Served::Old(g) => format!(
                "agent-sandbox: {g} is served at {SIG_OLD_VERSION} only: the controller predates v0.5.0 and would refuse the {SIG_VERSION} objects airlock renders; upgrade it (docs/kubernetes.md), or use the bare Pod (`airlock k8s render NAME`)"
            ),
            Served::Missing(g) => format!(
                "agent-sandbox: {g} is not served: install the controller with its extensions (docs/kubernetes.md), or use the bare Pod (`airlock k8s render NAME`)"
            ),
        }
    }
}

/// What `kubectl api-versions` output (one `GROUP/VERSION` per line) says of the SIG's API.
#[must_use]
pub fn served(api_versions: &str) -> Served {
    let has = |group: &str, version: &str| {
        api_versions
            .lines()
            .any(|l| l.trim().split_once('/') == Some((group, version)))
    };
    for g in SIG_GROUPS {
        if !has(g, SIG_VERSION) {
            return if has(g, SIG_OLD_VERSION) {
                Served::Old(g)
            } else {
                Served::Missing(g)
            };
        }
    }
    Served::Current
}

/// Runs `kubectl api-versions`.
///
/// # Errors
/// kubectl cannot be run, or fails (its own last line).
pub fn api_versions(kubectl: &[String]) -> Result<String, String> {
    let (program, args) = kubectl.split_first().ok_or("no kubectl command")?;
    let out = std::process::Command::new(program)
        .args(args)
        .arg("api-versions")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!("cannot run {program}: {e} (install kubectl, or set {KUBECTL_ENV})")
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} api-versions failed: {}",
            kubectl.join(" "),
            err.lines().last().unwrap_or("no message").trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_target_is_a_namespace_and_a_pod_and_anything_else_is_a_sandbox() {
        assert_eq!(target("fix-login"), None);
        let p = target("k8s:sandboxes/fix-login").unwrap().unwrap();
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("sandboxes", "fix-login")
        );
        assert_eq!(p.to_string(), "k8s:sandboxes/fix-login");
        for bad in [
            "k8s:",
            "k8s:fix-login",
            "k8s:/fix-login",
            "k8s:ns/",
            "k8s:NS/pod",
            "k8s:ns/pod/x",
            "k8s:ns/-pod",
            "k8s:ns/pod;rm",
        ] {
            let e = target(bad).unwrap().unwrap_err();
            assert!(e.contains("k8s:NAMESPACE/POD"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_relay_is_an_exec_of_the_entrypoint_in_the_airlock_container() {
        let pod = target("k8s:sb/p-1").unwrap().unwrap();
        assert_eq!(
            relay_argv(&words(None), &pod).join(" "),
            "kubectl -n sb exec -i p-1 -c airlock -- airlock-entrypoint __admin"
        );
        assert_eq!(
            relay_argv(&words(Some(" microk8s  kubectl ")), &pod)[..3].join(" "),
            "microk8s kubectl -n"
        );
        assert_eq!(words(Some("  ")), vec!["kubectl"]);
    }

    #[test]
    fn the_served_versions_say_whether_the_rendered_objects_apply() {
        let current = "apps/v1\nagents.x-k8s.io/v1alpha1\nagents.x-k8s.io/v1beta1\nextensions.agents.x-k8s.io/v1alpha1\nextensions.agents.x-k8s.io/v1beta1\nv1\n";
        assert_eq!(served(current), Served::Current);
        let old = "agents.x-k8s.io/v1alpha1\nextensions.agents.x-k8s.io/v1alpha1\n";
        assert_eq!(served(old), Served::Old("agents.x-k8s.io"));
        assert!(served(old).line().contains("predates v0.5.0"));
        let no_ext = "agents.x-k8s.io/v1beta1\napps/v1\n";
        assert_eq!(
            served(no_ext),
            Served::Missing("extensions.agents.x-k8s.io")
        );
        assert_eq!(served(""), Served::Missing("agents.x-k8s.io"));
        // A group whose name merely ends like the SIG's is not it.
        assert_eq!(
            served("notagents.x-k8s.io/v1beta1\nextensions.agents.x-k8s.io/v1beta1\n"),
            Served::Missing("agents.x-k8s.io")
        );
    }
}
