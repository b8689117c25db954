//! The repository's remotes as git's configuration names them, and the check that every URL
//! a remote uses is one of the policy's repositories.

use super::Server;
use crate::argv::Refusal;
use crate::push;
use crate::visible::FetchSpec;
use airlock_wire::Reason;

/// A remote the git API may talk to.
pub(super) struct Remote {
    /// The configuration that makes git talk HTTPS to an authorized SSH URL
    /// (`url.<https>.insteadOf=<the URL>`); the agent's configuration keeps the URL as
    /// written.
    pub(super) transport: Vec<String>,
    /// The authorized repositories its URLs name (what its ticket lets git talk to).
    pub(super) repositories: Vec<String>,
}

impl Server {
    /// A git query of the repository (`git config --get ...`, `git rev-parse ...`); git that
    /// does not start is an internal refusal.
    pub(super) fn query(&self, args: &[&str]) -> Result<crate::run::Query, Refusal> {
        self.env
            .query(args)
            .map_err(|e| Refusal::new(Reason::Internal, format!("running git: {e}")))
    }

    pub(super) fn remotes(&self) -> Result<Vec<String>, Refusal> {
        Ok(self
            .query(&["remote"])?
            .stdout
            .lines()
            .map(str::to_owned)
            .collect())
    }

    pub(super) fn current_branch(&self) -> Result<Option<String>, Refusal> {
        Ok(self
            .query(&["symbolic-ref", "-q", "--short", "HEAD"])?
            .line())
    }

    pub(super) fn default_remote(&self, branch: Option<&str>) -> Result<String, Refusal> {
        if let Some(b) = branch {
            for key in [
                format!("branch.{b}.pushRemote"),
                "remote.pushDefault".into(),
                format!("branch.{b}.remote"),
            ] {
                if let Some(r) = self.query(&["config", "--get", &key])?.line() {
                    return Ok(r);
                }
            }
        }
        Ok("origin".into())
    }

    /// The remote must be configured and every URL it uses authorized. A refusal says, in a
    /// sandbox the host CLI made, how the work comes back instead ([`way_back`]).
    pub(super) fn check_remote(&self, remote: &str, push: bool) -> Result<Remote, Refusal> {
        self.check_remote_inner(remote, push).map_err(|r| {
            if r.reason != Reason::RepositoryNotAuthorized {
                return r;
            }
            let key = |k: &str| {
                self.query(&["config", "--get", k])
                    .ok()
                    .and_then(|q| q.line())
            };
            match way_back(key("airlock.sandbox"), key("airlock.branch")) {
                Some(why) => Refusal::new(r.reason, format!("{}; {why}", r.message)),
                None => r,
            }
        })
    }

    fn check_remote_inner(&self, remote: &str, push: bool) -> Result<Remote, Refusal> {
        if !self.remotes()?.iter().any(|r| r == remote) {
            return Err(Refusal::new(
                Reason::RepositoryNotAuthorized,
                format!(
                    "{remote} is not a configured remote: the git API talks only to the operator's remotes (see `git remote -v`)"
                ),
            ));
        }
        let mut urls = Vec::new();
        if push {
            urls = self
                .query(&["config", "--get-all", &format!("remote.{remote}.pushurl")])?
                .stdout
                .lines()
                .map(str::to_owned)
                .collect();
        }
        if urls.is_empty() {
            urls = self
                .query(&["config", "--get-all", &format!("remote.{remote}.url")])?
                .stdout
                .lines()
                .map(str::to_owned)
                .collect();
        }
        if urls.is_empty() {
            return Err(Refusal::new(
                Reason::RepositoryNotAuthorized,
                format!("remote {remote} has no URL"),
            ));
        }
        let mut checked = Remote {
            transport: Vec::new(),
            repositories: Vec::new(),
        };
        for url in urls {
            let id = self.rules.check_repository(remote, &url)?;
            if let Some(https) = push::https_form(&url, &id) {
                checked.transport.push(self.env.rewrite(&url, &https, &id));
            }
            checked.repositories.push(id);
        }
        Ok(checked)
    }

    /// The remote `fetch`, `pull` and `ls-remote` use when none is named.
    pub(super) fn fetch_remote(&self, branch: Option<&str>) -> Result<String, Refusal> {
        if let Some(b) = branch
            && let Some(r) = self
                .query(&["config", "--get", &format!("branch.{b}.remote")])?
                .line()
        {
            return Ok(r);
        }
        Ok("origin".into())
    }

    pub(super) fn config_fetch_specs(&self, remote: &str) -> Result<Vec<FetchSpec>, Refusal> {
        Ok(self
            .query(&["config", "--get-all", &format!("remote.{remote}.fetch")])?
            .stdout
            .lines()
            .map(FetchSpec::parse)
            .collect())
    }
}

/// What a sandbox the host CLI made (its git dir names it: `airlock.sandbox`,
/// `airlock.branch`, keys the agent cannot write) does instead of reaching a remote it may
/// not: its branch comes back to the operator's repository. Pure.
pub(super) fn way_back(sandbox: Option<String>, branch: Option<String>) -> Option<String> {
    let (sandbox, branch) = (sandbox?, branch?);
    Some(format!(
        "your commits still reach the operator: this sandbox's branch {branch} comes back to their repository as {branch} when the session ends (they can bring it sooner with `airlock fetch {sandbox}`), so commit your work and tell them"
    ))
}

#[cfg(test)]
mod tests {
    use super::way_back;

    #[test]
    fn a_cli_sandbox_refusal_says_how_the_work_comes_back() {
        let w = way_back(Some("fix".into()), Some("sandbox/fix".into())).unwrap_or_default();
        assert!(
            w.contains("sandbox/fix") && w.contains("airlock fetch fix"),
            "{w}"
        );
        assert_eq!(way_back(None, Some("b".into())), None);
    }
}
