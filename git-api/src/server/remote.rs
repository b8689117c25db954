//! The repository's remotes as git's configuration names them, and the check that every URL
//! a remote uses is one of the policy's repositories, or, for a fetch, `pull` or
//! `ls-remote`, a repository on a host the policy allows the sandbox to read (a *read-only
//! remote*: fetched over the git service port with no credential, never pushed to). The
//! remotes the agent adds itself (`git remote add`) are recorded in `airlock.agentRemote`
//! (a key the agent cannot write), and only those can be re-pointed, renamed or removed: the
//! others are the operator's, whose configuration may be the one on their host.

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
    /// The repositories its URLs name (what its ticket lets git talk to): authorized ones,
    /// and for a fetch read-only ones too.
    pub(super) repositories: Vec<String>,
}

/// Where the remotes the agent added are recorded (one value per remote name).
const AGENT_REMOTE: &str = "airlock.agentRemote";

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
            let id = match self.rules.check_repository(remote, &url) {
                Ok(id) => id,
                Err(r) => match crate::url::readable_url(&url) {
                    Ok(id) if push => return Err(self.read_only_push(remote, &id, r)),
                    Ok(id) => {
                        self.readable_host(remote, &id)?;
                        id
                    }
                    Err(_) => return Err(r),
                },
            };
            if let Some(https) = push::https_form(&url, &id) {
                checked.transport.push(self.env.rewrite(&url, &https, &id));
            }
            checked.repositories.push(id);
        }
        Ok(checked)
    }

    /// The refusal of a push to a read-only remote: what the sandbox pushes to instead.
    fn read_only_push(&self, remote: &str, id: &str, r: Refusal) -> Refusal {
        let origins: Vec<String> = self
            .remotes()
            .unwrap_or_default()
            .into_iter()
            .filter(|name| name != remote && self.pushable(name))
            .collect();
        let instead = match origins.first() {
            Some(o) => format!(
                "push your branch to {o} (git push {o} HEAD:<branch>) and open the pull request there"
            ),
            None => "commit your work: the operator takes it from this sandbox".to_owned(),
        };
        Refusal::new(
            r.reason,
            format!(
                "remote {remote} is {id}, which this sandbox may fetch from but not push to (it \
                 is not in the policy's [git] repositories): {instead}; an operator allows pushes \
                 there with repositories = [\"{id}\"] in [git]"
            ),
        )
    }

    /// Whether every URL `name` pushes to is an authorized repository.
    fn pushable(&self, name: &str) -> bool {
        let urls = |key: &str| -> Vec<String> {
            self.query(&["config", "--get-all", &format!("remote.{name}.{key}")])
                .map(|q| q.stdout.lines().map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let mut all = urls("pushurl");
        if all.is_empty() {
            all = urls("url");
        }
        !all.is_empty()
            && all
                .iter()
                .all(|u| self.rules.check_repository(name, u).is_ok())
    }

    /// A read-only remote's host must be one the policy lets the sandbox reach: the proxy
    /// would refuse it anyway, in words git does not show well.
    fn readable_host(&self, remote: &str, id: &str) -> Result<(), Refusal> {
        let host = id.split('/').next().unwrap_or("");
        let allowed = self.network.as_ref().is_some_and(|p| {
            airlock_policy::Host::parse(host).is_ok_and(|h| p.decide(&h, 443).is_allowed())
        });
        if allowed {
            return Ok(());
        }
        Err(Refusal::new(
            Reason::RepositoryNotAuthorized,
            format!(
                "remote {remote} is {id}, on {host}, which the policy's [network] table does not \
                 allow, so the sandbox cannot read it; an operator allows it with allow = \
                 [\"{host}\"] in [network] (or repositories = [\"{id}\"] in [git] to push there too)"
            ),
        ))
    }

    /// The remotes the agent added (`git remote add`).
    pub(super) fn agent_remotes(&self) -> Result<Vec<String>, Refusal> {
        Ok(self
            .query(&["config", "--get-all", AGENT_REMOTE])?
            .stdout
            .lines()
            .map(str::to_owned)
            .collect())
    }

    /// `git remote add|set-url|rename|remove` (checked by the argv rules): the URL's host
    /// readable, the remote one the agent added (except for `add`), then git, then the record
    /// of the agent's remotes updated.
    pub(super) fn remote_write(
        &self,
        job: &mut super::spawn::Job<'_>,
        c: &crate::argv::Checked,
        args: &[String],
    ) -> Result<i32, Refusal> {
        let (_, operands) = super::rewrite::split_operands(c);
        let verb = operands.first().map(String::as_str).unwrap_or("");
        let name = operands.get(1).cloned().unwrap_or_default();
        let mine = self.agent_remotes()?;
        if verb != "add" && !mine.contains(&name) {
            return Err(Refusal::new(
                Reason::SubcommandNotAllowed,
                format!(
                    "git remote {verb} {name} is refused: {name} is not a remote the agent added \
                     (the operator's remotes stay as they are; their configuration may be their \
                     own repository's); add one of your own with git remote add <name> \
                     https://<host>/<owner>/<repo>"
                ),
            ));
        }
        if matches!(verb, "add" | "set-url")
            && let Some(url) = operands.last()
        {
            let id = crate::url::readable_url(url)
                .map_err(|why| Refusal::new(Reason::RepositoryNotAuthorized, why))?;
            if self.rules.check_repository(&name, url).is_err() {
                self.readable_host(&name, &id)?;
            }
        }
        let code = self.run_streamed(job, args, false)?;
        if code == 0 {
            let record = |a: &[&str]| -> Result<(), Refusal> {
                let q = self.query(a)?;
                if q.ok || q.code == Some(5) {
                    Ok(())
                } else {
                    Err(Refusal::new(
                        Reason::Internal,
                        format!("recording the agent's remotes: {}", q.stderr.trim()),
                    ))
                }
            };
            let forget = [
                "config",
                "--fixed-value",
                "--unset-all",
                AGENT_REMOTE,
                &name,
            ];
            match verb {
                "add" => record(&["config", "--add", AGENT_REMOTE, &name])?,
                "rename" => {
                    record(&forget)?;
                    let new = operands.get(2).cloned().unwrap_or_default();
                    record(&["config", "--add", AGENT_REMOTE, &new])?;
                }
                "remove" | "rm" => record(&forget)?,
                _ => {}
            }
        }
        let _ = airlock_wire::frame::write_json(
            job.stream,
            airlock_wire::FrameKind::Exit,
            &airlock_wire::Exit { code },
            "exit",
        );
        Ok(code)
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
