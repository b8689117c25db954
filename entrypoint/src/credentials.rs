//! Credentials: read each real secret once, hand it to the proxy, give the agent a placeholder.
//!
//! A secret comes from the entrypoint's environment (`-e NAME`) or from a secret file. It is
//! written, with its per-start placeholder, to the hand-off file that only the proxy user can
//! read (see `airlock_policy::handoff`); it never appears in any process's argv or in the
//! agent's environment, which gets the placeholder under the same variable name instead. A
//! secret file the agent could read itself is refused: a placeholder is pointless if the
//! real value sits next to it.

use crate::identity::Identity;
use crate::proxy_state;
use airlock_policy::handoff::{HANDOFF_VERSION, Handoff, ResolvedCredential, Secret, placeholder};
use airlock_policy::{CredentialSource, Policy};
use anyhow::{Context, Result, bail};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The result of resolving the policy's credentials.
#[derive(Debug)]
pub struct Resolved {
    pub handoff: Handoff,
    /// Agent variables to set: (environment variable name, placeholder).
    pub agent_vars: Vec<(String, String)>,
    /// Every environment variable name that held a real secret.
    pub secret_env_names: Vec<String>,
}

/// Resolve every credential of `policy`. `env` looks a variable up in the entrypoint's own
/// environment; `nonce` supplies the random part of each placeholder.
pub fn resolve(
    policy: &Policy,
    session: &str,
    agent: &Identity,
    env: impl Fn(&str) -> Option<String>,
    mut nonce: impl FnMut() -> Result<String>,
) -> Result<Resolved> {
    let mut out = Resolved {
        handoff: Handoff {
            version: HANDOFF_VERSION,
            session: session.to_owned(),
            credentials: Vec::new(),
            git_placeholder: None,
            workspace_secrets: Vec::new(),
            missing: Vec::new(),
        },
        agent_vars: Vec::new(),
        secret_env_names: Vec::new(),
    };
    let knobs = crate::problems::Knobs::from_env(&env);
    // Every credential is checked: one line per problem, all of them in one start.
    let mut problems = Vec::new();
    for cred in &policy.credentials {
        let value = match &cred.source {
            CredentialSource::Env(var) => {
                let value = env(var).unwrap_or_default();
                if value.trim().is_empty() {
                    problems.push(format!(
                        "credential {:?} reads environment variable {var}, which is not set: {}; or remove the credential from the policy",
                        cred.name,
                        crate::problems::Knobs::env_fix(var)
                    ));
                    continue;
                }
                out.secret_env_names.push(var.clone());
                value
            }
            CredentialSource::File(path) => match read_secret_file(&cred.name, path, agent, &knobs)
            {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{e:#}"));
                    continue;
                }
            },
        };
        let placeholder = placeholder(&cred.name, &nonce()?);
        if let CredentialSource::Env(var) = &cred.source {
            out.agent_vars.push((var.clone(), placeholder.clone()));
        }
        out.handoff.credentials.push(ResolvedCredential {
            name: cred.name.clone(),
            value: Secret::new(value),
            placeholder,
        });
    }
    if !problems.is_empty() {
        return Err(crate::problems::Refused(problems).into());
    }
    Ok(out)
}

fn read_secret_file(
    name: &str,
    path: &Path,
    agent: &Identity,
    knobs: &crate::problems::Knobs,
) -> Result<String> {
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "credential {name:?}: cannot read secret file {}",
            knobs.secret_file(path)
        )
    })?;
    if agent.can_read(&meta) {
        bail!(
            "credential {name:?}: secret file {} is readable by the agent (owner {}, mode {:o}): {}",
            knobs.secret_file(path),
            meta.uid(),
            meta.mode() & 0o7777,
            knobs.secret_fix(path)
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "credential {name:?}: cannot read secret file {}",
            knobs.secret_file(path)
        )
    })?;
    let value = text.trim_end_matches(['\n', '\r']).to_owned();
    if value.trim().is_empty() {
        bail!(
            "credential {name:?}: secret file {} is empty",
            knobs.secret_file(path)
        );
    }
    Ok(value)
}

/// Write the hand-off into the proxy's state directory `dir` as a 0400 file the proxy user
/// owns (see [`proxy_state::install`]).
pub fn write_handoff(dir: &Path, handoff: &Handoff, proxy: &Identity) -> Result<PathBuf> {
    let json = serde_json::to_vec(handoff).context("cannot encode the credential hand-off")?;
    proxy_state::install(dir, airlock_channels::CREDENTIALS_FILE, &json, 0o400, proxy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn agent() -> Identity {
        Identity {
            name: "agent".into(),
            uid: 64103,
            gid: 64103,
            groups: vec![64103],
            home: "/".into(),
            shell: "/bin/sh".into(),
        }
    }

    fn policy(creds: &str) -> Policy {
        let text =
            format!("[sandbox]\nname = \"t\"\n[network]\nallow = [\"api.example.com\"]\n{creds}");
        Policy::parse(&text, Path::new("t.toml")).unwrap()
    }

    const ENV_CRED: &str = "[[credentials]]\nname = \"api\"\nsource = { env = \"API_KEY\" }\nhosts = [\"api.example.com\"]\nheader = \"x-api-key\"\nformat = \"{}\"\n";

    #[test]
    fn an_env_secret_becomes_a_placeholder_for_the_agent() {
        let env = |k: &str| (k == "API_KEY").then(|| "sk-real".to_owned());
        let r = resolve(&policy(ENV_CRED), "s1", &agent(), env, || Ok("abcd".into())).unwrap();
        assert_eq!(
            r.agent_vars,
            vec![(
                "API_KEY".to_owned(),
                "airlock-placeholder-api-abcd".to_owned()
            )]
        );
        assert_eq!(r.secret_env_names, vec!["API_KEY".to_owned()]);
        assert_eq!(r.handoff.credentials[0].value.expose(), "sk-real");
        assert!(!format!("{r:?}").contains("sk-real"));
    }

    #[test]
    fn a_missing_secret_is_refused_with_the_fix() {
        let err = resolve(
            &policy(ENV_CRED),
            "s1",
            &agent(),
            |_| None,
            || Ok("x".into()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("-e API_KEY"), "{err}");
        assert!(err.to_string().contains("scripts/docker-run"), "{err}");
    }

    #[test]
    fn a_secret_file_the_agent_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-file\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        let creds = format!(
            "[[credentials]]\nname = \"api\"\nsource = {{ file = \"{}\" }}\nhosts = [\"api.example.com\"]\nheader = \"x-api-key\"\nformat = \"{{}}\"\n",
            file.display()
        );
        let err =
            resolve(&policy(&creds), "s1", &agent(), |_| None, || Ok("x".into())).unwrap_err();
        assert!(err.to_string().contains("readable by the agent"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        let r = resolve(&policy(&creds), "s1", &agent(), |_| None, || Ok("x".into())).unwrap();
        assert_eq!(r.handoff.credentials[0].value.expose(), "sk-file");
        assert!(r.agent_vars.is_empty());
    }
}
