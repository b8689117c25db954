//! Credentials: read each real secret once, hand it to the proxy, give the agent a placeholder.
//!
//! A secret comes from the entrypoint's environment (`-e NAME`) or from a secret file. It is
//! written, with its per-start placeholder, to the hand-off file that only the proxy user can
//! read (see `airlock_handoff`); it never appears in any process's argv or in the
//! agent's environment, which gets the placeholder under the same variable name instead. A
//! secret file the agent could read itself is refused: a placeholder is pointless if the
//! real value sits next to it.
//!
//! A credential that is simply not configured (its variable unset or empty, its secret file
//! absent) does not stop the start: a newcomer can try the sandbox with neither key. It goes
//! to the hand-off's `missing` list with the fix in the operator's terms, the agent still
//! gets a placeholder under the variable's name (so an agent CLI that insists on a key
//! starts), one warning line says what is missing and how to provide it, and the proxy
//! refuses every request the credential would have authenticated (`credential-missing`,
//! naming it and the fix). A credential that *is* configured but unusable (a file the agent
//! can read, a directory, unreadable, empty) still stops the start, every such problem in
//! one refusal.

use crate::identity::Identity;
use crate::proxy_state;
use airlock_handoff::{
    HANDOFF_VERSION, Handoff, MissingCredential, ResolvedCredential, Secret, placeholder,
};
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
    /// Every environment variable name a credential reads (set or not): never passed on.
    pub secret_env_names: Vec<String>,
    /// One line per credential that is not configured (see the module docs).
    pub warnings: Vec<String>,
}

/// Print the warnings of credentials that are not configured (the start goes on).
pub fn warn_missing(resolved: &Resolved) {
    for line in &resolved.warnings {
        crate::console::stderr_line(&format!("warning: {line}"));
    }
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
            git_service: None,
        },
        agent_vars: Vec::new(),
        secret_env_names: Vec::new(),
        warnings: Vec::new(),
    };
    let knobs = crate::problems::Knobs::from_env(&env);
    // Every credential is checked: one line per problem, all of them in one start.
    let mut problems = Vec::new();
    for cred in &policy.credentials {
        if let Some(var) = cred.source.env() {
            out.secret_env_names.push(var.to_owned());
        }
        let from_env = cred
            .source
            .env()
            .and_then(&env)
            .filter(|v| !v.trim().is_empty());
        let value = match (from_env, cred.source.file()) {
            (Some(value), _) => Some(value),
            (None, None) => None,
            (None, Some(path)) => match read_secret_file(&cred.name, path, agent, &knobs) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{e:#}"));
                    continue;
                }
            },
        };
        let placeholder = placeholder(&cred.name, &nonce()?);
        if let Some(var) = cred.source.env() {
            out.agent_vars.push((var.to_owned(), placeholder.clone()));
        }
        match value {
            Some(value) => out.handoff.credentials.push(ResolvedCredential {
                name: cred.name.clone(),
                value: Secret::new(value),
                placeholder,
            }),
            None => {
                let (absent, fix) = match &cred.source {
                    CredentialSource::Env(var) => {
                        (format!("{var} is not set"), knobs.env_missing_fix(var))
                    }
                    CredentialSource::File(path) => (
                        format!("no secret file at {}", path.display()),
                        knobs.secret_missing_fix(path),
                    ),
                    CredentialSource::EnvOrFile { env, file } => (
                        format!("{env} is not set and no secret file at {}", file.display()),
                        knobs.env_or_file_missing_fix(env, file),
                    ),
                };
                out.warnings.push(missing_warning(cred, &absent, &fix));
                out.handoff.missing.push(MissingCredential {
                    name: cred.name.clone(),
                    placeholder,
                    fix,
                });
            }
        }
    }
    if !problems.is_empty() {
        return Err(crate::problems::Refused(problems).into());
    }
    Ok(out)
}

/// The start's line for a credential that is not configured: what is missing, what the
/// sandbox does without it, and how to provide it.
fn missing_warning(cred: &airlock_policy::Credential, absent: &str, fix: &str) -> String {
    let hosts: Vec<String> = cred.hosts.iter().map(|h| h.pattern.to_string()).collect();
    let refused = if matches!(cred.format, airlock_policy::CredentialFormat::GitBasic) {
        format!(
            "git push and the requests it would authenticate on {} are refused (credential-missing), public fetches go anonymously",
            hosts.join(", ")
        )
    } else {
        format!(
            "requests to {} are refused (credential-missing)",
            hosts.join(", ")
        )
    };
    format!(
        "credential {:?} is not configured ({absent}): the sandbox starts without it and {refused}; to provide it, {fix}",
        cred.name
    )
}

/// The secret in `path`: `None` when there is no file there (not configured), an error when
/// there is one that cannot be used.
fn read_secret_file(
    name: &str,
    path: &Path,
    agent: &Identity,
    knobs: &crate::problems::Knobs,
) -> Result<Option<String>> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "credential {name:?}: cannot read secret file {}",
                    knobs.secret_file(path)
                )
            });
        }
    };
    if meta.is_dir() {
        bail!(
            "credential {name:?}: secret file {} is a directory (docker run -v creates one when the host file does not exist): give the path of the file holding the secret",
            knobs.secret_file(path)
        );
    }
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
    Ok(Some(value))
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
    fn an_unset_variable_starts_without_the_credential_and_says_how_to_set_it() {
        for value in [None, Some(""), Some("  ")] {
            let env = |k: &str| value.filter(|_| k == "API_KEY").map(str::to_owned);
            let r = resolve(&policy(ENV_CRED), "s1", &agent(), env, || Ok("abcd".into())).unwrap();
            assert!(r.handoff.credentials.is_empty());
            let m = &r.handoff.missing;
            assert_eq!(m.len(), 1);
            assert_eq!(m[0].name, "api");
            assert_eq!(m[0].placeholder, "airlock-placeholder-api-abcd");
            assert!(
                m[0].fix.starts_with("set API_KEY on the host"),
                "{}",
                m[0].fix
            );
            // The agent's CLI still finds a (worthless) key; the name is never passed on.
            assert_eq!(
                r.agent_vars,
                vec![("API_KEY".to_owned(), m[0].placeholder.clone())]
            );
            assert_eq!(r.secret_env_names, vec!["API_KEY".to_owned()]);
            assert_eq!(r.warnings.len(), 1);
            let w = &r.warnings[0];
            assert!(
                w.contains("\"api\" is not configured (API_KEY is not set)"),
                "{w}"
            );
            assert!(w.contains("requests to api.example.com are refused"), "{w}");
            assert!(
                w.contains("-e API_KEY") && w.contains("scripts/docker-run"),
                "{w}"
            );
            assert!(!w.contains('\n'));
        }
    }

    fn file_cred(path: &Path) -> String {
        format!(
            "[[credentials]]\nname = \"api\"\nsource = {{ file = \"{}\" }}\nhosts = [\"api.example.com\"]\nheader = \"x-api-key\"\nformat = \"{{}}\"\n",
            path.display()
        )
    }

    #[test]
    fn an_absent_secret_file_starts_without_the_credential() {
        let dir = tempfile::tempdir().unwrap();
        let creds = file_cred(&dir.path().join("absent"));
        let r = resolve(&policy(&creds), "s1", &agent(), |_| None, || Ok("x".into())).unwrap();
        assert_eq!(r.handoff.missing.len(), 1);
        assert!(r.agent_vars.is_empty());
        assert!(
            r.warnings[0].contains("no secret file at"),
            "{}",
            r.warnings[0]
        );
        // The image's token mount names its knob.
        let github = "[[credentials]]\npreset = \"github\"\nsource = { file = \"/run/secrets/github_token\" }\n";
        let r = resolve(&policy(github), "s1", &agent(), |_| None, || Ok("x".into())).unwrap();
        let w = &r.warnings[0];
        assert!(
            w.contains("GITHUB_TOKEN_FILE=<that file> scripts/docker-run"),
            "{w}"
        );
        assert!(w.contains("git push"), "{w}");
        assert_eq!(r.handoff.missing[0].name, "github");
    }

    #[test]
    fn configured_but_unusable_credentials_are_all_refused_at_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let readable = dir.path().join("readable");
        std::fs::write(&readable, "sk\n").unwrap();
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
        let a_dir = dir.path().join("a-dir");
        std::fs::create_dir(&a_dir).unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o400)).unwrap();
        let mut creds = String::new();
        for (name, path) in [("one", &readable), ("two", &a_dir), ("three", &empty)] {
            creds += &file_cred(path).replace("\"api\"", &format!("\"{name}\""));
        }
        // An unset variable beside them is no problem of its own.
        creds += &ENV_CRED.replace("\"api\"", "\"four\"");
        let err =
            resolve(&policy(&creds), "s1", &agent(), |_| None, || Ok("x".into())).unwrap_err();
        let lines = &err.downcast_ref::<crate::problems::Refused>().unwrap().0;
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("readable by the agent"), "{}", lines[0]);
        assert!(lines[1].contains("is a directory"), "{}", lines[1]);
        assert!(lines[2].contains("is empty"), "{}", lines[2]);
    }

    #[test]
    fn a_secret_file_the_agent_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-file\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        let creds = file_cred(&file);
        let err =
            resolve(&policy(&creds), "s1", &agent(), |_| None, || Ok("x".into())).unwrap_err();
        assert!(err.to_string().contains("readable by the agent"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        let r = resolve(&policy(&creds), "s1", &agent(), |_| None, || Ok("x".into())).unwrap();
        assert_eq!(r.handoff.credentials[0].value.expose(), "sk-file");
        assert!(r.agent_vars.is_empty());
    }
}
