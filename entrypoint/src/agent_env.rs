//! The agent's environment, rebuilt from an allowlist.
//!
//! Nothing the container was started with reaches the agent unless it is on the allowlist
//! below or named by the operator in `AIRLOCK_PASS_ENV`; the proxy variables are set by us.
//! Names bound to credentials are refused even if listed, so a real secret can only ever
//! reach the proxy. Pure: the caller supplies the inherited variables.

use crate::identity::Identity;
use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// Inherited variables that are harmless and that interactive tools expect.
const PASS_THROUGH: &[&str] = &[
    "TERM",
    "COLORTERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
];

/// The operator's extra pass-through list (comma separated names).
pub const PASS_ENV_VAR: &str = "AIRLOCK_PASS_ENV";

/// PATH of the agent: shims first (our `git` lands in /usr/local/lib/airlock/bin).
pub const AGENT_PATH: &str =
    "/usr/local/lib/airlock/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Inputs that are not inherited variables.
#[derive(Debug)]
pub struct AgentEnvInput<'a> {
    pub agent: &'a Identity,
    pub session: &'a str,
    pub proxy_url: &'a str,
    /// Environment variable names that hold real secrets (credential sources in the policy).
    pub secret_names: &'a [String],
    /// Placeholders the agent gets instead, under the secrets' variable names.
    pub placeholders: &'a [(String, String)],
    /// Variables that point the agent's tools at the CA bundle (`trust::agent_vars`).
    pub trust: &'a [(&'static str, String)],
}

/// Build the agent's environment. Errors when the operator asks to pass a secret through.
pub fn build(
    inherited: impl IntoIterator<Item = (String, String)>,
    input: &AgentEnvInput<'_>,
) -> Result<BTreeMap<String, String>> {
    let inherited: BTreeMap<String, String> = inherited.into_iter().collect();
    let extra: Vec<String> = inherited
        .get(PASS_ENV_VAR)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for name in &extra {
        if input.secret_names.iter().any(|s| s == name) {
            bail!(
                "{PASS_ENV_VAR} names {name:?}, which holds a credential: real secrets never reach the agent; remove it from {PASS_ENV_VAR}"
            );
        }
        if name.starts_with("AIRLOCK_")
            || is_proxy_var(name)
            || input.trust.iter().any(|(t, _)| t == name)
            || name == "PATH"
            || name.starts_with("LD_")
        {
            bail!(
                "{PASS_ENV_VAR} names {name:?}, which airlock sets itself; remove it from {PASS_ENV_VAR}"
            );
        }
    }
    let mut env = BTreeMap::new();
    for (name, value) in &inherited {
        let allowed = PASS_THROUGH.contains(&name.as_str())
            || name.starts_with("LC_")
            || extra.contains(name);
        if allowed && !input.secret_names.contains(name) {
            env.insert(name.clone(), value.clone());
        }
    }
    let agent = input.agent;
    let set = |env: &mut BTreeMap<String, String>, k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    set(&mut env, "HOME", &agent.home.to_string_lossy());
    set(&mut env, "USER", &agent.name);
    set(&mut env, "LOGNAME", &agent.name);
    set(&mut env, "SHELL", &agent.shell.to_string_lossy());
    set(&mut env, "PATH", AGENT_PATH);
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        set(&mut env, name, input.proxy_url);
    }
    for name in ["NO_PROXY", "no_proxy"] {
        set(&mut env, name, "localhost,127.0.0.1,::1");
    }
    set(&mut env, "AIRLOCK_SESSION", input.session);
    for (name, value) in input.trust {
        set(&mut env, name, value);
    }
    for (name, placeholder) in input.placeholders {
        set(&mut env, name, placeholder);
    }
    Ok(env)
}

fn is_proxy_var(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "http_proxy" | "https_proxy" | "all_proxy" | "no_proxy"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> Identity {
        Identity {
            name: "agent".into(),
            uid: 1000,
            gid: 1000,
            groups: vec![1000],
            home: "/home/agent".into(),
            shell: "/bin/bash".into(),
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn input<'a>(agent: &'a Identity, secrets: &'a [String]) -> AgentEnvInput<'a> {
        AgentEnvInput {
            agent,
            session: "s1",
            proxy_url: "http://127.0.0.1:3128",
            secret_names: secrets,
            placeholders: &[],
            trust: &[],
        }
    }

    #[test]
    fn the_agent_never_inherits_a_secret_or_an_unknown_variable() {
        let a = agent();
        let secrets = vec!["ANTHROPIC_API_KEY".to_owned()];
        let env = build(
            vars(&[
                ("ANTHROPIC_API_KEY", "sk-real"),
                ("GITHUB_TOKEN", "ghp_real"),
                ("TERM", "xterm"),
                ("LD_PRELOAD", "/x.so"),
            ]),
            &input(&a, &secrets),
        )
        .unwrap();
        assert!(!env.contains_key("ANTHROPIC_API_KEY"));
        assert!(
            !env.contains_key("GITHUB_TOKEN"),
            "not allowlisted, so not inherited"
        );
        assert!(!env.contains_key("LD_PRELOAD"));
        assert_eq!(env["TERM"], "xterm");
        assert!(
            env.values()
                .all(|v| !v.contains("sk-real") && !v.contains("ghp_real"))
        );
    }

    #[test]
    fn the_agent_gets_the_placeholder_under_the_secret_name() {
        let a = agent();
        let secrets = vec!["ANTHROPIC_API_KEY".to_owned()];
        let placeholders = vec![(
            "ANTHROPIC_API_KEY".to_owned(),
            "airlock-placeholder-anthropic-00".to_owned(),
        )];
        let input = AgentEnvInput {
            placeholders: &placeholders,
            ..input(&a, &secrets)
        };
        let env = build(vars(&[("ANTHROPIC_API_KEY", "sk-real")]), &input).unwrap();
        assert_eq!(env["ANTHROPIC_API_KEY"], "airlock-placeholder-anthropic-00");
    }

    #[test]
    fn proxy_variables_are_ours_even_if_the_caller_set_them() {
        let a = agent();
        let env = build(
            vars(&[
                ("HTTPS_PROXY", "http://evil:1"),
                ("http_proxy", "http://evil:1"),
            ]),
            &input(&a, &[]),
        )
        .unwrap();
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["http_proxy"], "http://127.0.0.1:3128");
        assert_eq!(env["HOME"], "/home/agent");
        assert!(env["PATH"].starts_with("/usr/local/lib/airlock/bin:"));
    }

    #[test]
    fn passing_a_secret_through_is_refused() {
        let a = agent();
        let secrets = vec!["OPENAI_API_KEY".to_owned()];
        let err = build(
            vars(&[
                (PASS_ENV_VAR, "FOO,OPENAI_API_KEY"),
                ("OPENAI_API_KEY", "x"),
            ]),
            &input(&a, &secrets),
        )
        .unwrap_err();
        assert!(err.to_string().contains("holds a credential"));
    }

    #[test]
    fn operator_pass_through_works_for_ordinary_names() {
        let a = agent();
        let env = build(
            vars(&[
                (PASS_ENV_VAR, "EDITOR"),
                ("EDITOR", "vim"),
                ("VISUAL", "emacs"),
            ]),
            &input(&a, &[]),
        )
        .unwrap();
        assert_eq!(env["EDITOR"], "vim");
        assert!(!env.contains_key("VISUAL"));
        assert!(!env.contains_key(PASS_ENV_VAR));
    }

    #[test]
    fn passing_airlock_or_loader_variables_is_refused() {
        let a = agent();
        assert!(build(vars(&[(PASS_ENV_VAR, "LD_PRELOAD")]), &input(&a, &[])).is_err());
        assert!(build(vars(&[(PASS_ENV_VAR, "AIRLOCK_SESSION")]), &input(&a, &[])).is_err());
        assert!(build(vars(&[(PASS_ENV_VAR, "ALL_PROXY")]), &input(&a, &[])).is_err());
    }
}
