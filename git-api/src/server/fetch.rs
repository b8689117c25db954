//! `git fetch`, `git pull` and `git ls-remote`: the remote checked, git run with explicit
//! refspecs of visible branches only, and remote-tracking refs of hidden (or, with prune,
//! vanished) branches deleted.

use super::Server;
use super::rewrite::{global_and_sub, split_operands};
use super::spawn::Job;
use crate::argv::{Checked, Refusal};
use crate::visible::{self, FetchSpec};
use airlock_ticket::Op;
use airlock_wire::frame::{CHUNK, write_frame, write_json};
use airlock_wire::{Exit, FrameKind, Reason};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

impl Server {
    /// The remote's refs as `ls-remote` lists them through the proxy (unfiltered; never
    /// shown to the agent as such). `Err(Ok(query))`: git failed, pass its words on.
    pub(super) fn list_remote(
        &self,
        remote: &str,
        config: &[String],
    ) -> Result<Result<String, crate::run::Query>, Refusal> {
        let q = self
            .env
            .query_with(config, &["ls-remote", "--", remote])
            .map_err(|e| Refusal::new(Reason::Internal, format!("running git: {e}")))?;
        Ok(if q.ok { Ok(q.stdout) } else { Err(q) })
    }

    /// Delete `refs`; one line per ref on the agent's stderr when `say`.
    pub(super) fn delete_refs(
        &self,
        stream: &mut UnixStream,
        refs: &[String],
        say: bool,
    ) -> Result<(), Refusal> {
        for r in refs {
            let q = self.query(&["update-ref", "--no-deref", "-d", r])?;
            if !q.ok {
                return Err(Refusal::new(
                    Reason::Internal,
                    format!("deleting a hidden ref failed: {}", q.stderr.trim()),
                ));
            }
            if say {
                let short = r.strip_prefix("refs/remotes/").unwrap_or(r);
                let _ = write_frame(
                    stream,
                    FrameKind::Stderr,
                    format!(" - [deleted]         (none)     -> {short}\n").as_bytes(),
                );
            }
        }
        Ok(())
    }

    /// Remote-tracking refs of hidden branches (and, with `prune`, of branches the remote
    /// no longer lists) of `remote`, deleted.
    pub(super) fn prune_remote(
        &self,
        stream: Option<&mut UnixStream>,
        remote: &str,
        specs: &[FetchSpec],
        listed: Option<&[String]>,
        prune: bool,
    ) -> Result<(), Refusal> {
        let q = self.query(&["for-each-ref", "--format=%(refname)"])?;
        if !q.ok {
            return Err(Refusal::new(
                Reason::Internal,
                format!("listing refs failed: {}", q.stderr.trim()),
            ));
        }
        let local: Vec<String> = q.stdout.lines().map(str::to_owned).collect();
        let mut config = self.config_fetch_specs(remote)?;
        config.extend(specs.iter().cloned());
        let hidden = visible::stale_tracking_refs(&local, remote, &config, None, false, &self.vis);
        let pruned: Vec<String> = if prune {
            visible::stale_tracking_refs(&local, remote, specs, listed, true, &self.vis)
                .into_iter()
                .filter(|r| !hidden.contains(r))
                .collect()
        } else {
            Vec::new()
        };
        match stream {
            Some(s) => {
                self.delete_refs(s, &hidden, false)?;
                self.delete_refs(s, &pruned, true)
            }
            None => {
                for r in hidden.iter().chain(&pruned) {
                    self.query(&["update-ref", "--no-deref", "-d", r])?;
                }
                Ok(())
            }
        }
    }

    /// Delete remote-tracking refs of hidden branches of every configured remote (the
    /// operator's clone may have them). Run when the server starts.
    pub fn hide_existing(&self) -> Result<(), Refusal> {
        for r in self.remotes()? {
            self.prune_remote(None, &r, &[], None, false)?;
        }
        Ok(())
    }

    /// `git ls-remote`: the remote checked, its output filtered of hidden refs.
    pub(super) fn ls_remote(&self, job: &mut Job<'_>, c: &Checked) -> Result<i32, Refusal> {
        let (options, operands) = split_operands(c);
        let mut operands = operands.into_iter();
        let remote = match operands.next() {
            Some(r) => r,
            None => self.fetch_remote(self.current_branch()?.as_deref())?,
        };
        let checked = self.check_remote(&remote, false)?;
        job.config.extend(checked.transport);
        job.config
            .extend(self.ticket(Op::Fetch, &checked.repositories, Vec::new())?);
        let mut args = global_and_sub(c);
        args.extend(options);
        args.push("--".into());
        args.push(remote);
        args.extend(operands);
        let out = job
            .command(self, &args)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Refusal::new(Reason::Internal, format!("running git: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (shown, kept) = visible::filter_ls_remote(&text, &self.vis);
        let mut code = out
            .status
            .code()
            .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
        // `--exit-code` must not tell a hidden match from no match.
        if code == 0 && kept == 0 && c.argv.iter().any(|a| a == "--exit-code") {
            code = 2;
        }
        for chunk in shown.as_bytes().chunks(CHUNK) {
            let _ = write_frame(job.stream, FrameKind::Stdout, chunk);
        }
        if !out.stderr.is_empty() {
            let _ = write_frame(job.stream, FrameKind::Stderr, &out.stderr);
        }
        let _ = write_json(job.stream, FrameKind::Exit, &Exit { code }, "exit");
        Ok(code)
    }

    /// `git fetch` / `git pull`: every remote checked, then git runs per remote with
    /// explicit refspecs for visible refs only (see [`crate::visible`]).
    pub(super) fn fetch(&self, job: &mut Job<'_>, c: &Checked) -> Result<i32, Refusal> {
        let pull = c.subcommand == "pull";
        let (mut options, operands) = split_operands(c);
        let all = options.iter().any(|a| a == "--all");
        let multiple = options.iter().any(|a| a == "--multiple");
        // fetch's short options take no value, so `-pv` is `-p -v`.
        let short_p = |a: &str| {
            a == "-p" || (!pull && !a.starts_with("--") && a.starts_with('-') && a.contains('p'))
        };
        let prune = options.iter().any(|a| a == "--prune" || short_p(a))
            || (!options.iter().any(|a| a == "--no-prune") && self.prune_configured(&operands)?);
        options.retain(|a| a != "--all" && a != "--multiple");
        if pull && (all || multiple) {
            return Err(Refusal::new(
                Reason::FetchFormNotSupported,
                "git pull --all/--multiple is not run by the git API: run git fetch --all, then git pull",
            ));
        }
        let branch = self.current_branch()?;
        // (remote, refspecs as written)
        let plan: Vec<(String, Vec<String>)> = if all || multiple {
            if all && !operands.is_empty() {
                return Err(Refusal::new(
                    Reason::FetchFormNotSupported,
                    "git fetch --all takes no remote or refspec",
                ));
            }
            let remotes = if all { self.remotes()? } else { operands };
            remotes.into_iter().map(|r| (r, Vec::new())).collect()
        } else {
            let mut ops = operands.into_iter();
            let remote = match ops.next() {
                Some(r) => r,
                None => self.fetch_remote(branch.as_deref())?,
            };
            vec![(remote, ops.collect())]
        };
        let mut repositories = Vec::new();
        for (remote, _) in &plan {
            let checked = self.check_remote(remote, false)?;
            job.config.extend(checked.transport);
            repositories.extend(checked.repositories);
        }
        // One ticket for every remote of the command: git sends it on each request, and the
        // proxy checks it names the request's repository.
        job.config
            .extend(self.ticket(Op::Fetch, &repositories, Vec::new())?);
        let mut status = 0;
        for (remote, written) in plan {
            let user_specs: Vec<FetchSpec> = written.iter().map(|s| FetchSpec::parse(s)).collect();
            let specs = if !user_specs.is_empty() {
                user_specs.clone()
            } else if pull {
                self.pull_merge_specs(&remote, branch.as_deref())?
            } else {
                self.config_fetch_specs(&remote)?
            };
            // Refuse by name before anything goes on the wire.
            visible::expand(&specs, &[], &self.vis)?;
            let listed = match self.list_remote(&remote, &job.config)? {
                Ok(l) => l,
                Err(q) => {
                    let _ = write_frame(job.stream, FrameKind::Stderr, q.stderr.as_bytes());
                    status = q.code.unwrap_or(128);
                    continue;
                }
            };
            let listed = visible::remote_refs(&listed);
            let explicit = visible::expand(&specs, &listed, &self.vis)?;
            self.prune_remote(Some(job.stream), &remote, &[], None, false)?;
            if !explicit.is_empty() {
                let mut args = global_and_sub(c);
                args.extend(options.iter().cloned());
                args.push(remote.clone());
                args.extend(explicit);
                let code = self.run_streamed(job, &args, false)?;
                if code != 0 && status == 0 {
                    status = code;
                }
            }
            let wildcards: Vec<FetchSpec> = if user_specs.is_empty() && !pull {
                specs.clone()
            } else {
                user_specs
            };
            self.prune_remote(Some(job.stream), &remote, &wildcards, Some(&listed), prune)?;
        }
        let _ = write_json(job.stream, FrameKind::Exit, &Exit { code: status }, "exit");
        Ok(status)
    }

    /// `fetch.prune` / `remote.<name>.prune` of the first remote named (or origin).
    pub(super) fn prune_configured(&self, operands: &[String]) -> Result<bool, Refusal> {
        let remote = operands.first().map_or("origin", String::as_str);
        for key in [format!("remote.{remote}.prune"), "fetch.prune".into()] {
            if let Some(v) = self
                .query(&["config", "--type=bool", "--get", &key])?
                .line()
            {
                return Ok(v == "true");
            }
        }
        Ok(false)
    }

    /// What a `git pull` without refspecs merges: the current branch's `branch.<b>.merge`
    /// when its remote is `remote`.
    pub(super) fn pull_merge_specs(
        &self,
        remote: &str,
        branch: Option<&str>,
    ) -> Result<Vec<FetchSpec>, Refusal> {
        let none = || {
            Refusal::new(
                Reason::FetchFormNotSupported,
                format!(
                    "the current branch has no upstream on {remote}: name the branch, \
                     git pull {remote} <branch> (or git branch --set-upstream-to={remote}/<branch>)"
                ),
            )
        };
        let Some(b) = branch else {
            return Err(none());
        };
        let configured = self
            .query(&["config", "--get", &format!("branch.{b}.remote")])?
            .line();
        if configured.as_deref() != Some(remote) {
            return Err(none());
        }
        let merges: Vec<FetchSpec> = self
            .query(&["config", "--get-all", &format!("branch.{b}.merge")])?
            .stdout
            .lines()
            .filter(|l| !l.is_empty())
            .map(FetchSpec::parse)
            .collect();
        if merges.is_empty() || merges.iter().any(|m| m.negative || m.src.contains('*')) {
            return Err(none());
        }
        Ok(merges)
    }
}
