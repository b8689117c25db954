//! Start-up problems, all of them at once, in the user's terms.
//!
//! Every check that can run before anything starts runs, whatever the others found; the
//! start is then refused (exit 78) with one `airlock:` line per problem ([`Problems`]), so a
//! newcomer fixes everything in one round instead of one problem per attempt. A check that
//! depends on another's result (the credentials on the policy, the workspace on the users) is
//! not run when that one failed: its line would only repeat the first.
//!
//! The lines speak of what the user set on the host, not only of paths inside the container:
//! [`Knobs`] maps the image's mount points to the `scripts/docker-run` / compose variables
//! that fill them, and to the host paths `scripts/docker-run` passes in (`AIRLOCK_HOST_*`:
//! labels for messages, never read as files).

use std::fmt;
use std::path::Path;

/// The problems found so far.
#[derive(Debug, Default)]
pub struct Problems(Vec<String>);

impl Problems {
    /// Keep the value, or record the error and return `None`: a [`Refused`] is several
    /// problems, any other error one (its lines joined).
    pub fn take<T>(&mut self, result: anyhow::Result<T>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                match e.downcast_ref::<Refused>() {
                    Some(Refused(lines)) => self.0.extend(lines.iter().cloned()),
                    None => self.push(&format!("{e:#}")),
                }
                None
            }
        }
    }

    /// Record one problem, on one line.
    pub fn push(&mut self, message: &str) {
        let line: Vec<&str> = message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        self.0.push(line.join(" / "));
    }

    /// `Ok` when nothing was found, else the error carrying every line.
    pub fn finish(self) -> anyhow::Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(anyhow::Error::new(Refused(self.0)))
        }
    }
}

/// The refusal: one line per problem (printed `airlock: <line>` each by `main`).
#[derive(Debug)]
pub struct Refused(pub Vec<String>);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for Refused {}

/// The image's secret mount of the GitHub token (the default policy's git credential).
pub const GITHUB_TOKEN_MOUNT: &str = "/run/secrets/github_token";
/// The image's policy path.
pub const POLICY_MOUNT: &str = airlock_channels::DEFAULT_POLICY_PATH;

/// The host side of the mounts, as `scripts/docker-run` passes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Knobs {
    /// `AIRLOCK_HOST_REPO`: the repository on the host.
    pub repo: Option<String>,
    /// `AIRLOCK_HOST_POLICY`: the policy file the user edited.
    pub policy: Option<String>,
    /// `AIRLOCK_HOST_GITHUB_TOKEN_FILE`: what `GITHUB_TOKEN_FILE` named.
    pub github_token: Option<String>,
    /// `AIRLOCK_HOST_EXTRA_CA`: what `EXTRA_CA_FILE` named.
    pub extra_ca: Option<String>,
    /// `AIRLOCK_LAUNCHER=cli`: the host CLI started this sandbox, so a fix speaks of its
    /// secret store and `--secret`, not of `scripts/docker-run` variables.
    pub cli: bool,
}

impl Knobs {
    /// From the entrypoint's environment.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Knobs {
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        Knobs {
            repo: get("AIRLOCK_HOST_REPO"),
            policy: get("AIRLOCK_HOST_POLICY"),
            github_token: get("AIRLOCK_HOST_GITHUB_TOKEN_FILE"),
            extra_ca: get("AIRLOCK_HOST_EXTRA_CA"),
            cli: get("AIRLOCK_LAUNCHER").is_some_and(|v| v == "cli"),
        }
    }

    /// The user's name for a secret file the policy reads: the host file and its knob.
    pub fn secret_file(&self, path: &Path) -> String {
        if let Some(name) = self.cli_secret(path) {
            return format!(
                "{} (the airlock CLI's secret {name}: `airlock secret set {name}`, or `--secret {name}=FILE`)",
                path.display()
            );
        }
        if path == Path::new(GITHUB_TOKEN_MOUNT) {
            match &self.github_token {
                Some(host) => {
                    format!("{host} (GITHUB_TOKEN_FILE, mounted at {GITHUB_TOKEN_MOUNT})")
                }
                None => format!(
                    "{GITHUB_TOKEN_MOUNT} (set GITHUB_TOKEN_FILE=<host file> for scripts/docker-run or docker compose)"
                ),
            }
        } else {
            format!(
                "{} (mount the host file there: -v HOST:{}:ro in AIRLOCK_DOCKER_ARGS)",
                path.display(),
                path.display()
            )
        }
    }

    /// How to make a secret file root-owned 0400, on the host when it is known.
    pub fn secret_fix(&self, path: &Path) -> String {
        if let Some(name) = self.cli_secret(path) {
            return format!(
                "the airlock CLI writes each secret root-only itself: start the sandbox again with the CLI (`airlock run ... --secret {name}` or the stored secret), not with a file mounted by hand"
            );
        }
        match (&self.github_token, path == Path::new(GITHUB_TOKEN_MOUNT)) {
            (Some(host), true) => {
                format!("on the host: sudo chown root:root {host} && sudo chmod 0400 {host}")
            }
            _ => "make it root-owned mode 0400 (on the host: sudo chown root:root FILE && sudo chmod 0400 FILE; compose: `mode: 0400`)".to_owned(),
        }
    }

    /// The user's name for the extra CA file: the host file and its knob.
    pub fn extra_ca_file(&self, path: &Path) -> String {
        match &self.extra_ca {
            Some(host) => format!("{host} (EXTRA_CA_FILE, mounted at {})", path.display()),
            None => format!(
                "{} (AIRLOCK_EXTRA_CA; scripts/docker-run: EXTRA_CA_FILE=<host file>)",
                path.display()
            ),
        }
    }

    /// The user's name for the policy file.
    pub fn policy_file(&self, path: &Path) -> String {
        match &self.policy {
            Some(host) => format!("{host} (AIRLOCK_POLICY, mounted at {})", path.display()),
            None if path == Path::new(POLICY_MOUNT) => format!(
                "{} (AIRLOCK_POLICY=<host file> for scripts/docker-run; compose: the policy.toml volume line)",
                path.display()
            ),
            None => path.display().to_string(),
        }
    }

    /// How to provide a credential whose environment variable was not set: one sentence
    /// for the start's warning and the proxy's refusals.
    pub fn env_missing_fix(&self, var: &str) -> String {
        if self.cli {
            return format!(
                "the airlock CLI passes secrets as files only: give the credential a file in your policy (source = {{ env = \"{var}\", file = \"/run/secrets/NAME\" }}), store the value with `airlock secret set NAME` and start with `--secret NAME`"
            );
        }
        format!(
            "set {var} on the host and start the sandbox again: `{var}=... scripts/docker-run REPO` (scripts/docker-run passes ANTHROPIC_API_KEY and OPENAI_API_KEY, other names need AIRLOCK_DOCKER_ARGS=\"-e {var}\"; docker compose: an `environment:` line; docker run: -e {var})"
        )
    }

    /// How to provide a credential whose secret file is absent: one sentence for the
    /// start's warning and the proxy's refusals.
    pub fn secret_missing_fix(&self, path: &Path) -> String {
        if let Some(name) = self.cli_secret(path) {
            return format!(
                "store it with `airlock secret set {name}` and start a new sandbox (a stored secret that a credential reads is given to it; or `--secret {name}=FILE`, a host file holding it)"
            );
        }
        if path == Path::new(GITHUB_TOKEN_MOUNT) {
            let named = match &self.github_token {
                Some(host) => format!(" (GITHUB_TOKEN_FILE names {host}, which is absent)"),
                None => String::new(),
            };
            format!(
                "put the token in a root-owned mode 0400 file on the host and start the sandbox again with GITHUB_TOKEN_FILE=<that file> scripts/docker-run REPO{named} (docker compose reads the same variable; docker run: -v FILE:{GITHUB_TOKEN_MOUNT}:ro)"
            )
        } else {
            format!(
                "mount the secret file at {} and start the sandbox again (-v HOST:{}:ro in AIRLOCK_DOCKER_ARGS; root-owned mode 0400)",
                path.display(),
                path.display()
            )
        }
    }

    /// How to provide a credential read from a variable or, when unset, a secret file: the
    /// launcher's own way first.
    pub fn env_or_file_missing_fix(&self, var: &str, path: &Path) -> String {
        if self.cli_secret(path).is_some() {
            return self.secret_missing_fix(path);
        }
        format!(
            "{}; or {}",
            self.env_missing_fix(var),
            self.secret_missing_fix(path)
        )
    }

    /// The host CLI's secret name for `path` (`/run/secrets/<name>`, where `--secret NAME`
    /// mounts it), when the CLI started this sandbox.
    fn cli_secret<'p>(&self, path: &'p Path) -> Option<&'p str> {
        if !self.cli {
            return None;
        }
        path.strip_prefix("/run/secrets")
            .ok()
            .and_then(Path::to_str)
            .filter(|n| !n.is_empty() && !n.contains('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::anyhow;

    #[test]
    fn every_problem_is_one_line_and_an_empty_list_is_ok() {
        let mut p = Problems::default();
        assert_eq!(p.take(Ok::<_, anyhow::Error>(3)), Some(3));
        assert_eq!(p.take::<()>(Err(anyhow!("a\n  b").context("c"))), None);
        let several = anyhow::Error::new(Refused(vec!["e".into(), "f".into()]));
        assert_eq!(p.take::<()>(Err(several)), None);
        p.push("d");
        let err = p.finish().unwrap_err();
        let refused = err.downcast_ref::<Refused>().unwrap();
        assert_eq!(refused.0, vec!["c: a / b", "e", "f", "d"]);
        assert!(Problems::default().finish().is_ok());
    }

    #[test]
    fn the_token_file_is_named_by_its_knob_and_host_path() {
        let none = Knobs::default();
        let token = Path::new(GITHUB_TOKEN_MOUNT);
        assert!(
            none.secret_file(token)
                .contains("GITHUB_TOKEN_FILE=<host file>")
        );
        let k = Knobs::from_env(|v| {
            (v == "AIRLOCK_HOST_GITHUB_TOKEN_FILE").then(|| "/home/me/tok".to_owned())
        });
        assert!(
            k.secret_file(token)
                .starts_with("/home/me/tok (GITHUB_TOKEN_FILE")
        );
        assert!(k.secret_fix(token).contains("sudo chmod 0400 /home/me/tok"));
        assert!(k.secret_fix(Path::new("/x")).contains("chmod 0400 FILE"));
    }

    #[test]
    fn a_cli_sandbox_s_secret_fixes_speak_of_the_cli() {
        let cli = Knobs::from_env(|v| (v == "AIRLOCK_LAUNCHER").then(|| "cli".to_owned()));
        let p = Path::new("/run/secrets/anthropic_api_key");
        for text in [
            cli.secret_file(p),
            cli.secret_fix(p),
            cli.secret_missing_fix(p),
        ] {
            assert!(text.contains("airlock"), "{text}");
            assert!(!text.contains("scripts/docker-run"), "{text}");
            assert!(!text.contains("chown"), "{text}");
        }
    }

    #[test]
    fn the_policy_is_named_by_the_host_file() {
        let k = Knobs::from_env(|v| (v == "AIRLOCK_HOST_POLICY").then(|| "/h/p.toml".to_owned()));
        assert!(
            k.policy_file(Path::new(POLICY_MOUNT))
                .starts_with("/h/p.toml (AIRLOCK_POLICY")
        );
        assert!(
            Knobs::default()
                .policy_file(Path::new(POLICY_MOUNT))
                .contains("AIRLOCK_POLICY=<host file>")
        );
        assert!(
            Knobs::default()
                .env_missing_fix("K")
                .contains("AIRLOCK_DOCKER_ARGS=\"-e K\"")
        );
    }

    #[test]
    fn a_missing_credential_is_provided_by_its_knob() {
        let fix = Knobs::default().env_missing_fix("ANTHROPIC_API_KEY");
        assert!(
            fix.starts_with("set ANTHROPIC_API_KEY on the host"),
            "{fix}"
        );
        assert!(fix.contains("scripts/docker-run") && fix.contains("-e ANTHROPIC_API_KEY"));
        let token = Path::new(GITHUB_TOKEN_MOUNT);
        let fix = Knobs::default().secret_missing_fix(token);
        assert!(
            fix.contains("GITHUB_TOKEN_FILE=<that file> scripts/docker-run"),
            "{fix}"
        );
        let k = Knobs::from_env(|v| {
            (v == "AIRLOCK_HOST_GITHUB_TOKEN_FILE").then(|| "/home/me/tok".to_owned())
        });
        assert!(
            k.secret_missing_fix(token)
                .contains("names /home/me/tok, which is absent")
        );
        let other = Knobs::default().secret_missing_fix(Path::new("/run/secrets/x"));
        assert!(other.contains("-v HOST:/run/secrets/x:ro"), "{other}");
    }

    #[test]
    fn a_cli_sandbox_is_told_the_cli_s_way() {
        let cli = Knobs::from_env(|v| (v == "AIRLOCK_LAUNCHER").then(|| "cli".to_owned()));
        let key = Path::new("/run/secrets/anthropic_api_key");
        let fix = cli.env_or_file_missing_fix("ANTHROPIC_API_KEY", key);
        assert!(
            fix.contains("airlock secret set anthropic_api_key")
                && fix.contains("--secret anthropic_api_key")
                && !fix.contains("scripts/docker-run"),
            "{fix}"
        );
        let token = cli.secret_missing_fix(Path::new(GITHUB_TOKEN_MOUNT));
        assert!(token.contains("airlock secret set github_token"), "{token}");
        let env = cli.env_missing_fix("K");
        assert!(env.contains("file = \"/run/secrets/NAME\""), "{env}");
        // docker run: both ways, the variable first.
        let fix = Knobs::default().env_or_file_missing_fix("ANTHROPIC_API_KEY", key);
        assert!(
            fix.starts_with("set ANTHROPIC_API_KEY on the host")
                && fix.contains("-v HOST:/run/secrets/anthropic_api_key:ro"),
            "{fix}"
        );
    }
}
