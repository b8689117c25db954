//! `git push`: resolved into explicit ref updates, each judged by the push policy on its
//! facts (fast-forward, paths touched) before git runs.

use super::Server;
use crate::argv::{Checked, Refusal};
use crate::push::{self, Facts, Update};
use airlock_ticket::Op;
use airlock_wire::Reason;

/// A refspec's source resolved to a ref, its destination, and the object id the source
/// names (`rev-parse --verify -q` of that ref; `None`: it names none).
pub(super) struct Resolved {
    src_ref: String,
    dst: String,
    oid: Option<String>,
}

impl Server {
    /// Resolve `git push ...` into explicit updates, judge them, and return the argv to run.
    /// Also returns the configuration git runs with: the remote's transport (see
    /// `check_remote`) and the ticket that signs exactly the judged updates (see `ticket`).
    pub(super) fn resolve_push(&self, c: &Checked) -> Result<(Vec<String>, Vec<String>), Refusal> {
        let (global, rest) = c.argv.split_at((c.sub_index + 1).min(c.argv.len()));
        let mut options = Vec::new();
        let mut operands = Vec::new();
        let mut after_dashes = false;
        for a in rest {
            if !after_dashes && a == "--" {
                after_dashes = true;
            } else if !after_dashes && a.starts_with('-') {
                options.push(a.clone());
            } else {
                operands.push(a.clone());
            }
        }
        let branch = self.current_branch()?;
        let remote = match operands.first() {
            Some(r) => r.clone(),
            None => self.default_remote(branch.as_deref())?,
        };
        let checked = self.check_remote(&remote, true)?;
        let specs: Vec<push::Refspec> = if operands.len() > 1 {
            operands[1..]
                .iter()
                .map(|s| push::parse_refspec(s))
                .collect::<Result<_, _>>()?
        } else {
            let Some(b) = &branch else {
                return Err(Refusal::new(
                    Reason::PushFormNotSupported,
                    "HEAD is detached: name the branch to push (git push origin HEAD:sandbox/<name>/<branch>)",
                ));
            };
            vec![push::Refspec {
                src: b.clone(),
                dst: None,
            }]
        };
        let mut refspecs = Vec::new();
        let mut signed = Vec::new();
        for spec in specs {
            let Resolved { src_ref, dst, oid } = self.resolve_refspec(&spec, branch.as_deref())?;
            let new = oid.ok_or_else(|| {
                Refusal::new(
                    Reason::PushFormNotSupported,
                    format!("{} does not name a commit", spec.src),
                )
            })?;
            let old = match dst.strip_prefix("refs/heads/") {
                Some(b) => self
                    .query(&[
                        "rev-parse",
                        "--verify",
                        "-q",
                        &format!("refs/remotes/{remote}/{b}^{{commit}}"),
                    ])?
                    .line(),
                None => None,
            };
            let update = Update {
                dst: dst.clone(),
                old: old.clone(),
                new: Some(new.clone()),
            };
            self.rules.judge_push(&update, &remote, &spec.src)?;
            let facts = self.facts(old.as_deref(), &new)?;
            self.rules.judge_facts(&update, &facts)?;
            let touched = crate::pushed::list(&self.env, &remote, old.as_deref(), &new)?;
            self.rules.judge_paths(&update, &touched)?;
            signed.push(super::ticket::update(&dst, old.as_deref(), &new)?);
            refspecs.push(format!("{src_ref}:{dst}"));
        }
        let mut config = checked.transport;
        config.extend(self.ticket(Op::Push, &checked.repositories, signed)?);
        let mut out: Vec<String> = global.to_vec();
        out.extend(options);
        out.push(remote);
        out.extend(refspecs);
        Ok((out, config))
    }

    pub(super) fn resolve_refspec(
        &self,
        spec: &push::Refspec,
        branch: Option<&str>,
    ) -> Result<Resolved, Refusal> {
        // The object id `r` names, when it names one.
        let lookup = |r: &str| -> Result<Option<String>, Refusal> {
            Ok(self.query(&["rev-parse", "--verify", "-q", r])?.line())
        };
        let mut oid = None;
        let (src_ref, default_dst) = if spec.src == "HEAD" || spec.src == "@" {
            match branch {
                Some(b) => (format!("refs/heads/{b}"), Some(format!("refs/heads/{b}"))),
                None => ("HEAD".to_owned(), None),
            }
        } else if spec.src.starts_with("refs/heads/") || spec.src.starts_with("refs/tags/") {
            (spec.src.clone(), Some(spec.src.clone()))
        } else if let Some(id) = lookup(&format!("refs/heads/{}", spec.src))? {
            oid = Some(id);
            (
                format!("refs/heads/{}", spec.src),
                Some(format!("refs/heads/{}", spec.src)),
            )
        } else if let Some(id) = lookup(&format!("refs/tags/{}", spec.src))? {
            oid = Some(id);
            (
                format!("refs/tags/{}", spec.src),
                Some(format!("refs/tags/{}", spec.src)),
            )
        } else {
            (spec.src.clone(), None)
        };
        let dst = match (&spec.dst, default_dst) {
            (Some(d), _) if d.starts_with("refs/") => d.clone(),
            (Some(d), _) if src_ref.starts_with("refs/tags/") => format!("refs/tags/{d}"),
            (Some(d), _) => format!("refs/heads/{d}"),
            (None, Some(d)) => d,
            (None, None) => {
                return Err(Refusal::new(
                    Reason::PushFormNotSupported,
                    format!(
                        "name the destination: git push <remote> {}:<branch>",
                        spec.src
                    ),
                ));
            }
        };
        if dst.contains("..") || dst.contains(['*', ' ', '~', '^', ':', '?', '[', '\\']) {
            return Err(Refusal::new(
                Reason::PushFormNotSupported,
                format!("{dst} is not a valid ref name"),
            ));
        }
        // Read once: the ref's lookup above already gave it when it chose the ref.
        let oid = match oid {
            Some(oid) => Some(oid),
            None => lookup(&src_ref)?,
        };
        Ok(Resolved { src_ref, dst, oid })
    }

    /// Whether `new` fast-forwards `old` (a new ref always does). The paths it changes are
    /// read as git stores them, by [`crate::pushed::list`].
    pub(super) fn facts(&self, old: Option<&str>, new: &str) -> Result<Facts, Refusal> {
        let fast_forward = match old {
            None => true,
            Some(o) => {
                let q = self.query(&["merge-base", "--is-ancestor", o, new])?;
                match q.code {
                    Some(0) => true,
                    Some(1) => false,
                    _ => {
                        return Err(Refusal::new(
                            Reason::Internal,
                            format!("merge-base failed: {}", q.stderr.trim()),
                        ));
                    }
                }
            }
        };
        Ok(Facts {
            fast_forward,
            touched: Vec::new(),
        })
    }
}
