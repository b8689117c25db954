//! The operator's remotes, as a sandbox sees them: `git remote -v`, `git fetch`, `git pull`
//! and `git push` of its own branch work as in the operator's repository (the git API judges
//! each under the policy, as with `scripts/docker-run`).
//!
//! Only what names a remote is copied (`remote.<name>.url`, `.pushurl`, `.fetch`); nothing
//! that runs a program or changes a transport (`uploadpack`, `receivepack`, `proxy`,
//! `vcs`, ...), and never a password or token written into a URL (`https://user:TOKEN@host`
//! loses its user part: the proxy writes the credential). Two keys of airlock's own tell
//! the git API which sandbox this is, so a refusal to reach a remote can say how the work
//! comes back instead ([`SANDBOX_KEY`], [`BRANCH_KEY`]); the agent cannot write `airlock.*`
//! (the git API's config allowlist).

use super::{CheckoutError, git, run};
use std::path::Path;

/// The sandbox's name, in its git dir's config.
pub const SANDBOX_KEY: &str = "airlock.sandbox";
/// The branch that comes back to the operator's repository, in its git dir's config.
pub const BRANCH_KEY: &str = "airlock.branch";

/// The `remote.*` entries of the operator's repository (its config as git reads it there,
/// the user's global config included), filtered and cleaned ([`keep`]).
pub fn of_operator(top: &Path) -> Result<Vec<(String, String)>, CheckoutError> {
    let mut c = git::operator(top);
    c.args(["config", "-z", "--get-regexp", r"^remote\."]);
    let out = c
        .output()
        .map_err(|source| CheckoutError::Spawn { source })?;
    // Exit 1: no such key (no remote).
    if !out.status.success() && out.status.code() != Some(1) {
        return Err(CheckoutError::Git {
            step: "config --get-regexp remote.",
            path: top.into(),
            stderr: git::reason(&out.stderr),
        });
    }
    Ok(parse(&out.stdout))
}

/// `git config -z --get-regexp` records (`key\nvalue\0`), kept and cleaned. Pure.
pub fn parse(records: &[u8]) -> Vec<(String, String)> {
    records
        .split(|b| *b == 0)
        .filter_map(|r| {
            let r = std::str::from_utf8(r).ok()?;
            let (key, value) = r.split_once('\n')?;
            keep(key, value)
        })
        .collect()
}

/// The entry a sandbox gets for `key = value`, if any: `remote.<name>.url`, `.pushurl` and
/// `.fetch` only (the remote's name a plain one), URLs without a user or password, no
/// control character anywhere. Pure.
pub fn keep(key: &str, value: &str) -> Option<(String, String)> {
    let rest = key.strip_prefix("remote.")?;
    let (name, var) = rest.rsplit_once('.')?;
    let var = var.to_ascii_lowercase();
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && !name.starts_with(['-', '.']);
    if !plain || value.chars().any(char::is_control) {
        return None;
    }
    let value = match var.as_str() {
        "url" | "pushurl" => without_userinfo(value),
        "fetch" => value.to_string(),
        _ => return None,
    };
    Some((format!("remote.{name}.{var}"), value))
}

/// `scheme://user:secret@host/path` → `scheme://host/path`; any other form as it is (an
/// scp-like `git@host:path` names a user, never a password). Pure.
pub fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://{}{path}", &authority[at + 1..]),
        None => url.to_string(),
    }
}

/// Write `entries` and airlock's own keys into the sandbox's git dir `gd` (before the agent
/// runs: our config only).
pub fn write(
    gd: &Path,
    entries: &[(String, String)],
    sandbox: &str,
    branch: &str,
) -> Result<(), CheckoutError> {
    let own = [
        (SANDBOX_KEY.to_string(), sandbox.to_string()),
        (BRANCH_KEY.to_string(), branch.to_string()),
    ];
    for (k, v) in entries.iter().chain(own.iter()) {
        run(
            "config --add",
            gd,
            git::ours(gd).args(["config", "--add", k, v]),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_names_a_remote_is_kept_and_never_a_password() {
        let records = b"remote.origin.url\nhttps://me:ghp_SECRET@github.com/acme/app.git\0\
remote.origin.fetch\n+refs/heads/*:refs/remotes/origin/*\0\
remote.origin.uploadpack\ntouch /tmp/pwned; git-upload-pack\0\
remote.origin.proxy\nhttp://evil.example\0\
remote.mirror.pushURL\ngit@github.com:acme/app.git\0\
remote.-x.url\nhttps://a/b\0\
remote.up.url\nhttps://a/b\nc\0";
        assert_eq!(
            parse(records),
            vec![
                (
                    "remote.origin.url".to_string(),
                    "https://github.com/acme/app.git".to_string()
                ),
                (
                    "remote.origin.fetch".into(),
                    "+refs/heads/*:refs/remotes/origin/*".into()
                ),
                (
                    "remote.mirror.pushurl".into(),
                    "git@github.com:acme/app.git".into()
                ),
            ]
        );
    }

    #[test]
    fn userinfo_goes_and_everything_else_stays() {
        assert_eq!(
            without_userinfo("https://x:y@github.com/a/b"),
            "https://github.com/a/b"
        );
        assert_eq!(
            without_userinfo("ssh://git@github.com/a/b"),
            "ssh://github.com/a/b"
        );
        assert_eq!(without_userinfo("git@github.com:a/b"), "git@github.com:a/b");
        assert_eq!(without_userinfo("/srv/git/app.git"), "/srv/git/app.git");
        assert_eq!(
            without_userinfo("https://github.com/a/b@c"),
            "https://github.com/a/b@c"
        );
    }
}
