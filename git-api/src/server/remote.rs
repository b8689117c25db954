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

    /// The remote must be configured and every URL it uses authorized.
    pub(super) fn check_remote(&self, remote: &str, push: bool) -> Result<Remote, Refusal> {
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
