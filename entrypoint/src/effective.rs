//! The policy this start runs under: the user's file with what the start knows better.
//!
//! Two things a newcomer should not have to write a policy for:
//! - the sandbox's name: `--sandbox` / `AIRLOCK_SANDBOX` sets it for this start (N sandboxes
//!   from one policy file, each its own branch namespace `sandbox/<name>/…`);
//! - the authorized repository: when the policy lists none (`[git] repositories` empty or
//!   absent), the workspace's own `origin` is the one (its id read as the git API and the
//!   proxy read repositories, `airlock_policy::repo::remote_repository_id`, so SSH and HTTPS
//!   spellings agree).
//!
//! When either applies, [`render`] (pure) writes the user's policy with those values into a
//! new TOML text, which the entrypoint saves as [`FILE`] in the runtime directory (root's,
//! 0644: the agent can read, not write it) and hands to the proxy and the git API instead of
//! the user's file; the result is validated by the policy crate like any policy. Otherwise
//! the user's file is used as it is.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The effective policy inside the runtime directory.
pub const FILE: &str = "policy.toml";

/// What this start knows better than the policy file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The sandbox name from `--sandbox` / `AIRLOCK_SANDBOX`.
    pub name: Option<String>,
    /// The repository id of the workspace's `origin` (`host/owner/repo`).
    pub origin: Option<String>,
}

/// The documented rule for a sandbox name (`airlock_policy::effective::valid_name`).
pub fn valid_name(name: &str) -> bool {
    airlock_policy::effective::valid_name(name)
}

/// The URL of `[remote "origin"]` in a git config file's text (the last `url` wins, as in
/// git). Pure.
pub fn origin_url(config: &str) -> Option<String> {
    let mut in_origin = false;
    let mut url = None;
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let section: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            in_origin = section.eq_ignore_ascii_case("[remote\"origin\"]");
            continue;
        }
        if !in_origin {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("url")
        {
            url = Some(value.trim().trim_matches('"').to_owned());
        }
    }
    url
}

/// The effective policy's text, or `None` when the user's file applies as it is
/// (`airlock_policy::effective::render`, which the proxy's reload applies too). Pure.
pub fn render(
    text: &str,
    name_now: &str,
    repositories_now: &[String],
    o: &Overrides,
) -> Result<Option<String>> {
    airlock_policy::effective::render(
        text,
        name_now,
        repositories_now,
        airlock_policy::effective::Overrides {
            name: o.name.as_deref(),
            origin: o.origin.as_deref(),
        },
        ("AIRLOCK_SANDBOX", "the workspace's origin"),
    )
    .map_err(|e| match e {
        airlock_policy::effective::EffectiveError::BadName(n) => anyhow::anyhow!(
            "AIRLOCK_SANDBOX={n:?} is not a sandbox name: 1-40 characters of a-z, 0-9 and -, not starting or ending with -"
        ),
        other => anyhow::Error::new(other),
    })
}

/// The origin's repository id of the hidden git dir, if it has one git's way.
pub fn workspace_origin(git_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(git_dir.join("config")).ok()?;
    airlock_policy::repo::remote_repository_id(&origin_url(&text)?)
}

/// Write the effective policy into `run_dir` (root's, 0644) when there is one, validate it,
/// and return the path the proxy and the git API read; else `user`.
pub fn install(
    user: &Path,
    run_dir: &Path,
    policy: &airlock_policy::Policy,
    o: &Overrides,
) -> Result<PathBuf> {
    let text = std::fs::read_to_string(user)
        .with_context(|| format!("cannot read the policy {}", user.display()))?;
    let Some(effective) = render(&text, &policy.sandbox.name, &policy.git.repositories, o)? else {
        return Ok(user.to_path_buf());
    };
    let path = run_dir.join(FILE);
    let tmp = run_dir.join(format!(".{FILE}.tmp"));
    std::fs::write(&tmp, effective)
        .with_context(|| format!("cannot write the effective policy {}", tmp.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("cannot set the mode of {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot install {}", path.display()))?;
    airlock_policy::Policy::load(&path)
        .map_err(|e| anyhow::anyhow!("the effective policy is invalid: {e}"))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str =
        "[sandbox]\nname = \"demo\" # the example's\n\n[network]\nallow = [\"a.test\"]\n";

    fn names(text: &str) -> (String, Vec<String>) {
        let p = airlock_policy::Policy::parse(text, Path::new("p.toml")).unwrap();
        (p.sandbox.name.clone(), p.git.repositories.clone())
    }

    #[test]
    fn nothing_to_override_keeps_the_users_file() {
        let o = Overrides {
            name: Some("demo".into()),
            origin: Some("github.com/a/b".into()),
        };
        let listed = vec!["github.com/x/y".to_owned()];
        assert_eq!(render(POLICY, "demo", &listed, &o).unwrap(), None);
        assert_eq!(
            render(POLICY, "demo", &[], &Overrides::default()).unwrap(),
            None
        );
    }

    #[test]
    fn the_name_and_the_origin_are_written_into_a_valid_policy() {
        let o = Overrides {
            name: Some("fix-login".into()),
            origin: Some("github.com/acme/app".into()),
        };
        let text = render(POLICY, "demo", &[], &o).unwrap().unwrap();
        assert!(text.starts_with("# Written by airlock:"), "{text}");
        let (name, repos) = names(&text);
        assert_eq!(name, "fix-login");
        assert_eq!(repos, vec!["github.com/acme/app".to_owned()]);
        // The policy's own list wins over the origin.
        let listed = vec!["github.com/x/y".to_owned()];
        let text = render(POLICY, "demo", &listed, &o).unwrap().unwrap();
        assert_eq!(names(&text), ("fix-login".into(), Vec::new()));
    }

    #[test]
    fn a_bad_name_is_refused_naming_the_variable() {
        let o = Overrides {
            name: Some("Fix_Login".into()),
            origin: None,
        };
        let e = render(POLICY, "demo", &[], &o).unwrap_err().to_string();
        assert!(e.contains("AIRLOCK_SANDBOX"), "{e}");
        assert!(valid_name("a-1") && !valid_name("-a") && !valid_name("") && !valid_name("a-"));
        assert!(!valid_name(&"a".repeat(41)));
    }

    #[test]
    fn the_origin_url_is_read_from_git_config() {
        let cfg = "[core]\n\tbare = false\n[remote \"upstream\"]\n\turl = https://github.com/u/v\n[remote \"origin\"]\n\turl = git@github.com:Acme/App.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n";
        assert_eq!(
            origin_url(cfg).as_deref(),
            Some("git@github.com:Acme/App.git")
        );
        assert_eq!(
            airlock_policy::repo::remote_repository_id(&origin_url(cfg).unwrap()).as_deref(),
            Some("github.com/acme/app")
        );
        assert_eq!(origin_url("[remote \"upstream\"]\nurl = x\n"), None);
    }
}
