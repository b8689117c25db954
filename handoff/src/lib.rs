//! The credential hand-off from the entrypoint to the proxy: the one crate whose types
//! carry real secrets.
//!
//! The entrypoint reads each credential of the policy exactly once (from its environment
//! variable or secret file), invents a per-start placeholder for the agent, and writes this
//! value as JSON to a file that only the proxy user can read (`channels::CREDENTIALS_FILE`,
//! mode 0400 in a 0700 directory on tmpfs). The proxy reads it at every start, so a
//! restarted proxy gets the same secrets without PID 1 holding them and without any argv or
//! environment carrying them. The real values never reach the agent: it only ever sees the
//! placeholders, which are worthless anywhere but through this proxy.
//!
//! A credential the operator did not configure (its environment variable unset or empty,
//! its secret file absent) is handed over in [`Handoff::missing`] instead: no value, the
//! agent's placeholder, and the fix in the operator's terms. The sandbox starts without it
//! and the proxy refuses what it would have authenticated (`credential-missing`, naming it
//! and the fix).
//!
//! This crate holds the file's types only ([`Secret`] never prints its value). It does not
//! read or write the file (the entrypoint writes it 0400 for the proxy user; the proxy
//! reads it), and it knows nothing of the policy: the proxy checks the hand-off against
//! its policy when it loads it. It lives apart from `airlock-policy`, whose types hold no
//! secrets, so that a crate that needs the policy never links the secret types by accident.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Format version of the hand-off file; bumped on any incompatible change.
pub const HANDOFF_VERSION: u32 = 1;

/// What the proxy receives.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    pub version: u32,
    pub session: String,
    pub credentials: Vec<ResolvedCredential>,
    /// This session's `git-credential-airlock` placeholder password
    /// (`airlock_wire::placeholder`): on agent ports the proxy swaps it for the git
    /// credential on read operations of authorized repositories only. `None` without git.
    #[serde(default)]
    pub git_placeholder: Option<String>,
    /// Exact needles from the workspace's obvious secret files (`.env*`, `*.pem`, ...),
    /// read by the entrypoint at start: the proxy refuses each value on its way to any host
    /// (`foreign-secret`, detector `workspace:<file>`), or redacts it on an LLM API host.
    #[serde(default)]
    pub workspace_secrets: Vec<WorkspaceSecret>,
    /// The policy's credentials that were not configured at this start: every credential
    /// of the policy is in exactly one of `credentials` and `missing`.
    #[serde(default)]
    pub missing: Vec<MissingCredential>,
    /// The git service port's proof (`airlock-ticket`): the key the git API seals its
    /// tickets with, and the branch the sandbox started on. `None` without git: the proxy
    /// then refuses every request on the service port.
    #[serde(default)]
    pub git_service: Option<GitService>,
}

/// What the proxy needs to judge the git service port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GitService {
    /// This start's service key, 64 hex digits (never printed: [`Secret`]).
    pub key: Secret,
    /// The branch checked out when the sandbox started (`None`: detached): pushable like
    /// the policy's `push_branches`, as the git API allows it.
    #[serde(default)]
    pub start_branch: Option<String>,
}

/// A credential of the policy that was not configured at start (no value).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MissingCredential {
    /// The policy's credential name.
    pub name: String,
    /// What the agent holds all the same (its CLI starts; the value is worthless).
    pub placeholder: String,
    /// How the operator provides it, in the terms they start the sandbox with (one
    /// sentence, e.g. "set ANTHROPIC_API_KEY for scripts/docker-run ..."): the refusal
    /// of every request it would have authenticated says it.
    pub fix: String,
}

/// One credential of the policy with its real value and the agent's placeholder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ResolvedCredential {
    /// The policy's credential name.
    pub name: String,
    /// The real secret.
    pub value: Secret,
    /// What the agent holds instead (same variable name, worthless elsewhere).
    pub placeholder: String,
}

/// A value found in one of the workspace's secret files (never printed: [`Secret`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSecret {
    /// The file, relative to the workspace (`.env`, `deploy/id.pem`).
    pub file: String,
    /// What the value is called there (`DB_PASSWORD`, `private key`): names, never values,
    /// are reported.
    pub name: String,
    /// The built-in detector that recognised the value, if one did: it may then go to that
    /// detector's provider hosts. `None`: to no host.
    #[serde(default)]
    pub detector: Option<String>,
    /// The value itself, matched exactly.
    pub value: Secret,
}

/// A real secret: never printed.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The secret itself, for the one place that injects it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("REDACTED")
    }
}

/// The placeholder for credential `name` in this session: recognisable in logs and by the
/// proxy, unique per start (`nonce` is random), and useless to anyone but the proxy.
pub fn placeholder(name: &str, nonce: &str) -> String {
    format!("airlock-placeholder-{name}-{nonce}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let h = Handoff {
            version: HANDOFF_VERSION,
            session: "s".into(),
            credentials: vec![ResolvedCredential {
                name: "anthropic".into(),
                value: Secret::new("sk-ant-real".into()),
                placeholder: placeholder("anthropic", "00ff"),
            }],
            git_placeholder: None,
            workspace_secrets: vec![WorkspaceSecret {
                file: ".env".into(),
                name: "DB_PASSWORD".into(),
                detector: None,
                value: Secret::new("hunter2-correct-horse".into()),
            }],
            missing: vec![],
            git_service: Some(GitService {
                key: Secret::new("00ff".repeat(16)),
                start_branch: Some("main".into()),
            }),
        };
        let shown = format!("{h:?}");
        assert!(!shown.contains("sk-ant-real") && shown.contains("REDACTED"));
        assert!(!shown.contains("hunter2") && shown.contains("DB_PASSWORD"));
        assert!(
            !shown.contains("00ff00ff"),
            "the service key never prints: {shown}"
        );
        assert_eq!(h.credentials[0].value.expose(), "sk-ant-real");
    }

    #[test]
    fn the_file_round_trips_and_refuses_unknown_fields() {
        let h = Handoff {
            version: 1,
            session: "s".into(),
            credentials: vec![],
            git_placeholder: Some("airlock-git.s.00".into()),
            workspace_secrets: vec![],
            missing: vec![MissingCredential {
                name: "github".into(),
                placeholder: placeholder("github", "00"),
                fix: "set GITHUB_TOKEN_FILE".into(),
            }],
            git_service: None,
        };
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<Handoff>(&json).unwrap(), h);
        // A hand-off written without the field reads as "nothing missing".
        let old: Handoff =
            serde_json::from_str(r#"{"version":1,"session":"s","credentials":[]}"#).unwrap();
        assert!(old.missing.is_empty());
        assert_eq!(old.git_service, None);
        assert!(
            serde_json::from_str::<Handoff>(
                r#"{"version":1,"session":"s","credentials":[],"x":1}"#
            )
            .is_err()
        );
    }
}
