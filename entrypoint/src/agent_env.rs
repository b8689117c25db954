//! The agent's environment, rebuilt from an allowlist.
//!
//! Nothing the container was started with reaches the agent unless it is on the allowlist
//! below or named by the operator in `AIRLOCK_PASS_ENV`; the proxy variables are set by us.
//! Names in `AIRLOCK_PASS_ENV` are refused (a start-up refusal, one line) when:
//! - the policy binds them to a credential (only the proxy ever holds those; no way round);
//! - airlock sets them itself (`AIRLOCK_*`, the proxy and CA variables, `PATH`, `LD_*`);
//! - they look like a credential ([`secret_shape`]: `GITHUB_TOKEN`, `AWS_ACCESS_KEY_ID`,
//!   `*_TOKEN`, `*SECRET*`, `*_PASSWORD`, `*_API_KEY`, ...), unless the operator also names
//!   them in `AIRLOCK_PASS_ENV_FORCE`: then they pass as they are and the caller warns.
//!
//! Pure: the caller supplies the inherited variables and prints the warnings.

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

/// Names in [`PASS_ENV_VAR`] that look like secrets and that the operator hands to the
/// agent as they are anyway (comma separated; each must also be in [`PASS_ENV_VAR`]).
pub const FORCE_VAR: &str = "AIRLOCK_PASS_ENV_FORCE";

/// Well-known names of variables that hold credentials (compared case-insensitively).
/// Patterns in [`secret_shape`] catch most of them too; the list also catches the ones no
/// pattern would (`AWS_ACCESS_KEY_ID`, `GOOGLE_APPLICATION_CREDENTIALS`, ...).
const SECRET_NAMES: &[&str] = &[
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "GITLAB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "NPM_TOKEN",
    "NODE_AUTH_TOKEN",
    "PYPI_TOKEN",
    "TWINE_PASSWORD",
    "CARGO_REGISTRY_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_CLIENT_SECRET",
    "DOCKER_PASSWORD",
    "TOKEN",
    "PASSWORD",
    "SECRET",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
];

/// Name endings that mark a credential (`HF_TOKEN`, `DB_PASSWORD`, `GEMINI_API_KEY`, ...).
const SECRET_SUFFIXES: &[&str] = &[
    "_TOKEN",
    "_PASSWORD",
    "_PASSWD",
    "_API_KEY",
    "_APIKEY",
    "_PRIVATE_KEY",
    "_ACCESS_KEY",
    "_CREDENTIALS",
];

/// Why a variable name looks like it holds a credential, or `None`. Case-insensitive; errs
/// on the side of refusing (the operator can force a false positive with [`FORCE_VAR`]).
pub fn secret_shape(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    if SECRET_NAMES.contains(&upper.as_str()) {
        return Some("a well-known credential name".to_owned());
    }
    if let Some(suffix) = SECRET_SUFFIXES.iter().find(|s| upper.ends_with(**s)) {
        return Some(format!("its name ends in {suffix}"));
    }
    if upper.contains("SECRET") {
        return Some("its name contains SECRET".to_owned());
    }
    if upper.starts_with("SLACK_") && upper.contains("TOKEN") {
        return Some("a Slack token name".to_owned());
    }
    None
}

/// The agent's environment and the secret-looking names the operator forced into it (the
/// caller warns about each).
#[derive(Debug)]
pub struct AgentEnv {
    pub vars: BTreeMap<String, String>,
    pub forced: Vec<String>,
}

/// The agent's session number (`1` for PID 1's agent, `k` for the second session `k`; see
/// `crate::second`): tools and the user see which session they are, and it is the last
/// octet of the address the proxy sees the session come from (`airlock_channels::session_addr`).
pub const SESSION_VAR: &str = "AIRLOCK_AGENT_SESSION";

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

/// The names of a comma separated list variable (empty when unset).
fn names(inherited: &BTreeMap<String, String>, var: &str) -> Vec<String> {
    inherited
        .get(var)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Build the agent's environment. Errors (one line naming the variable and the way out)
/// when the operator asks to pass through a name the policy binds, a name airlock sets, or a
/// secret-looking name not also listed in [`FORCE_VAR`].
pub fn build(
    inherited: impl IntoIterator<Item = (String, String)>,
    input: &AgentEnvInput<'_>,
) -> Result<AgentEnv> {
    let inherited: BTreeMap<String, String> = inherited.into_iter().collect();
    let extra = names(&inherited, PASS_ENV_VAR);
    let force = names(&inherited, FORCE_VAR);
    if let Some(name) = force.iter().find(|n| !extra.contains(n)) {
        bail!(
            "{FORCE_VAR} names {name:?}, which {PASS_ENV_VAR} does not pass; add it to {PASS_ENV_VAR} too or remove it from {FORCE_VAR}"
        );
    }
    let mut forced = Vec::new();
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
        if let Some(why) = secret_shape(name) {
            if !force.contains(name) {
                bail!(
                    "{PASS_ENV_VAR} names {name:?}, which looks like a credential ({why}): real secrets never reach the agent; bind it in the policy ([[credentials]]) so only the proxy holds it, or hand the agent the real value anyway with {FORCE_VAR}={name}"
                );
            }
            forced.push(name.clone());
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
    // PID 1's agent is session 1; a second session replaces it with its own number.
    set(&mut env, SESSION_VAR, "1");
    for (name, value) in input.trust {
        set(&mut env, name, value);
    }
    for (name, placeholder) in input.placeholders {
        set(&mut env, name, placeholder);
    }
    Ok(AgentEnv { vars: env, forced })
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
        Identity::test_agent()
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
        .unwrap()
        .vars;
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
        let env = build(vars(&[("ANTHROPIC_API_KEY", "sk-real")]), &input)
            .unwrap()
            .vars;
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
        .unwrap()
        .vars;
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["http_proxy"], "http://127.0.0.1:3128");
        assert_eq!(env["HOME"], "/home/agent");
        assert_eq!(env[SESSION_VAR], "1");
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
        .unwrap()
        .vars;
        assert_eq!(env["EDITOR"], "vim");
        assert!(!env.contains_key("VISUAL"));
        assert!(!env.contains_key(PASS_ENV_VAR));
    }

    #[test]
    fn passing_a_well_known_secret_name_is_refused_even_if_the_policy_does_not_bind_it() {
        let a = agent();
        for name in [
            "GITHUB_TOKEN",
            "GH_TOKEN",
            "GITLAB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "AWS_SESSION_TOKEN",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "NPM_TOKEN",
            "PYPI_TOKEN",
            "TWINE_PASSWORD",
            "CARGO_REGISTRY_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "SLACK_BOT_TOKEN",
            "SLACK_TOKEN",
        ] {
            let err = build(
                vars(&[(PASS_ENV_VAR, &format!("EDITOR,{name}")), (name, "x")]),
                &input(&a, &[]),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(&format!("{name:?}")), "{name}: {err}");
            assert!(err.contains(FORCE_VAR), "{name}: says how to force: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn secret_looking_patterns_are_refused_in_any_case() {
        let a = agent();
        for name in [
            "HF_TOKEN",
            "my_service_token",
            "DJANGO_SECRET_KEY",
            "AZURE_CLIENT_SECRET",
            "SECRET",
            "DB_PASSWORD",
            "GEMINI_API_KEY",
            "DEPLOY_PRIVATE_KEY",
        ] {
            assert!(
                build(vars(&[(PASS_ENV_VAR, name)]), &input(&a, &[])).is_err(),
                "{name} passed"
            );
        }
        for name in [
            "EDITOR",
            "PAGER",
            "TOKENIZERS_PARALLELISM",
            "GIT_AUTHOR_NAME",
        ] {
            assert!(
                build(vars(&[(PASS_ENV_VAR, name)]), &input(&a, &[])).is_ok(),
                "{name} refused"
            );
        }
    }

    #[test]
    fn a_forced_secret_name_passes_and_is_reported() {
        let a = agent();
        let built = build(
            vars(&[
                (PASS_ENV_VAR, "EDITOR,GITHUB_TOKEN"),
                (FORCE_VAR, "GITHUB_TOKEN"),
                ("GITHUB_TOKEN", "ghp_test"),
                ("EDITOR", "vi"),
            ]),
            &input(&a, &[]),
        )
        .unwrap();
        assert_eq!(built.vars["GITHUB_TOKEN"], "ghp_test");
        assert_eq!(built.forced, vec!["GITHUB_TOKEN".to_owned()]);
        assert!(!built.vars.contains_key(FORCE_VAR));
    }

    #[test]
    fn forcing_does_not_override_a_policy_binding_or_a_typo() {
        let a = agent();
        let secrets = vec!["GITHUB_TOKEN".to_owned()];
        let err = build(
            vars(&[(PASS_ENV_VAR, "GITHUB_TOKEN"), (FORCE_VAR, "GITHUB_TOKEN")]),
            &input(&a, &secrets),
        )
        .unwrap_err();
        assert!(err.to_string().contains("holds a credential"), "{err}");
        // Forcing a name that is not passed is an operator mistake, not a silent no-op.
        let err = build(vars(&[(FORCE_VAR, "GITHUB_TOKEN")]), &input(&a, &[])).unwrap_err();
        assert!(err.to_string().contains(PASS_ENV_VAR), "{err}");
    }

    #[test]
    fn passing_airlock_or_loader_variables_is_refused() {
        let a = agent();
        assert!(build(vars(&[(PASS_ENV_VAR, "LD_PRELOAD")]), &input(&a, &[])).is_err());
        assert!(build(vars(&[(PASS_ENV_VAR, "AIRLOCK_SESSION")]), &input(&a, &[])).is_err());
        assert!(build(vars(&[(PASS_ENV_VAR, SESSION_VAR)]), &input(&a, &[])).is_err());
        assert!(build(vars(&[(PASS_ENV_VAR, "ALL_PROXY")]), &input(&a, &[])).is_err());
    }
}
