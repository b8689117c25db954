//! Remote URLs as repositories: the `host/owner/repo` id a URL names (its https and SSH
//! spellings alike, read as the policy and the proxy read theirs), and which URLs a
//! read-only remote may have. Pure.

/// `https://[user@]host[:443]/owner/repo[.git][/]` and its SSH spellings → `host/owner/repo`:
/// [`airlock_policy::repo::remote_repository_id`], the one reading the policy, the proxy and
/// the entrypoint use (the git API talks HTTPS to it: the sandbox has no SSH).
#[must_use]
pub fn repository_id(url: &str) -> Option<String> {
    airlock_policy::repo::remote_repository_id(url)
}

/// The repository id of `url` when it may be a read-only remote (one the sandbox fetches
/// from but never pushes to): `https://host/owner/repo[.git]` with no user name or password
/// in it, or the SSH forms of the same repository (`git@host:owner/repo`,
/// `ssh://git@host/owner/repo`), which the git API fetches over HTTPS. Never a local path,
/// `file://`, `http://`, a transport helper (`ext::`, any `<transport>::`) or a URL with a
/// control character or a space. `Err`: why not, in words for the agent. Pure.
pub fn readable_url(url: &str) -> Result<String, &'static str> {
    const FORMS: &str = "a remote the sandbox reads is https://<host>/<owner>/<repo> (or \
                         git@<host>:<owner>/<repo>)";
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) || url.contains("::") {
        return Err(FORMS);
    }
    if let Some(rest) = url.strip_prefix("https://") {
        let authority = rest.split('/').next().unwrap_or("");
        if authority.contains('@') {
            return Err(
                "a remote URL carries no user name or password (the proxy authenticates the sandbox's git)",
            );
        }
    } else if let Some(rest) = url.strip_prefix("ssh://") {
        let authority = rest.split('/').next().unwrap_or("");
        if authority
            .rsplit_once('@')
            .is_some_and(|(user, _)| user.contains(':'))
        {
            return Err("a remote URL carries no password");
        }
    } else if url.contains("://") || url.starts_with('/') || url.starts_with('.') {
        return Err(FORMS);
    } else if url.split_once(':').is_some_and(|(authority, _)| {
        authority
            .rsplit_once('@')
            .is_some_and(|(u, _)| u.contains(':'))
    }) {
        return Err("a remote URL carries no password");
    }
    repository_id(url).ok_or(FORMS)
}

/// The `https://` URL git uses for a remote URL whose repository is `id`: the URL itself
/// when it already is https, else `https://<id>.git`.
#[must_use]
pub fn https_form(url: &str, id: &str) -> Option<String> {
    (!url.starts_with("https://")).then(|| format!("https://{id}.git"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_remotes_are_repositories_never_paths_helpers_or_credentials() {
        for (url, id) in [
            ("https://github.com/Other/App.git", "github.com/other/app"),
            ("https://github.com/other/app", "github.com/other/app"),
            ("git@github.com:other/app.git", "github.com/other/app"),
            ("ssh://git@github.com/other/app", "github.com/other/app"),
        ] {
            assert_eq!(readable_url(url).as_deref(), Ok(id), "{url}");
        }
        for url in [
            "https://user:pass@github.com/other/app",
            "https://token@github.com/other/app",
            "ssh://git:pw@github.com/other/app",
            "git:pw@github.com:other/app",
            "http://github.com/other/app",
            "file:///tmp/app.git",
            "/tmp/app.git",
            "./app.git",
            "../app",
            "ext::sh -c touch% /tmp/x",
            "fd::3",
            "https://github.com/other/app\n",
            "https://github.com/other/app extra",
            "https://203.0.113.7/o/r",
            "https://github.com/other",
            "",
        ] {
            assert!(readable_url(url).is_err(), "{url}");
        }
    }
}
