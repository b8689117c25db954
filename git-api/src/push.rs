//! The push policy, judged on the ref updates a push would perform.
//!
//! The server never lets git choose what to push: it resolves the agent's `git push`
//! (remote, refspecs given or implied by the current branch and its upstream) into explicit
//! `<src>:<refs/...>` updates, judges each one here, and then runs git with exactly those
//! refspecs and no `+`, so git itself also refuses a non-fast-forward against the remote's
//! real state. Config refspecs (`remote.<name>.push`) are never consulted because explicit
//! refspecs replace them; `--all`, `--mirror`, `--tags`, wildcards, `+` and deletions are
//! refused before any of that.
//!
//! Restricted paths are judged on what git pushes ([`PushRules::judge_paths`], the paths
//! read NUL-separated by [`crate::pushed`]): each path as stored (a name with a quote, a
//! newline or a non-ASCII byte is not quoted and missed), a symbolic link by its own path,
//! as the directory a checkout shows there, and by where it points, and a gitlink is never
//! pushed. `git.restricted_paths_case_insensitive` (default on) matches names as a
//! case-insensitive checkout reads them.
//!
//! This module is pure: facts about commits (ancestry, touched paths) are computed by the
//! server with git and passed in.

use crate::argv::Refusal;
use crate::glob::{GlobError, Globs};
pub use crate::url::{https_form, repository_id};
use airlock_policy::GitPolicy;
use airlock_wire::Reason;

/// The rules for one sandbox.
#[derive(Debug, Clone)]
pub struct PushRules {
    repositories: Vec<String>,
    allowed: Globs,
    protected: Globs,
    restricted: Globs,
    allow_tags: bool,
}

/// One ref update a push would perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// Full destination ref (`refs/heads/x`, `refs/tags/v1`).
    pub dst: String,
    /// The commit the remote has there as far as we know (`None`: a new ref).
    pub old: Option<String>,
    /// The commit to push (`None`: a deletion).
    pub new: Option<String>,
}

/// What git says about an update's commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `old` is an ancestor of `new` (true for a new ref).
    pub fast_forward: bool,
    /// Paths touched by the commits being pushed.
    pub touched: Vec<String>,
}

/// One path a push would change, as git stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// The path (relative to the repository root, `/`-separated, not quoted).
    pub path: String,
    /// What the pushed commit leaves there.
    pub kind: Kind,
}

/// What a pushed commit leaves at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Nothing (the path is deleted).
    Removed,
    /// A file (regular or executable).
    File,
    /// A symbolic link, with its target as stored.
    Link {
        /// The link's target.
        target: String,
    },
    /// A gitlink (mode 160000): a nested repository's commit.
    Gitlink,
}

/// A refspec as written by the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refspec {
    /// Source revision as written.
    pub src: String,
    /// Destination as written, if any.
    pub dst: Option<String>,
}

impl PushRules {
    /// The rules from the policy; `start_branch` (the branch checked out when the sandbox
    /// started) is added to the allowed patterns.
    pub fn new(policy: &GitPolicy, start_branch: Option<&str>) -> Result<PushRules, GlobError> {
        let mut allowed = policy.push_branches.clone();
        if let Some(b) = start_branch {
            allowed.push(escape_glob(b));
        }
        Ok(PushRules {
            repositories: policy.repositories.clone(),
            allowed: Globs::new(&allowed)?,
            protected: Globs::new(&policy.protected_branches)?,
            restricted: Globs::with_case(&policy.restricted_paths, policy.restricted_paths_case())?,
            allow_tags: policy.allow_tags,
        })
    }

    /// The repository id of `url` if it is authorized, else the refusal.
    pub fn check_repository(&self, remote: &str, url: &str) -> Result<String, Refusal> {
        let Some(id) = repository_id(url) else {
            return Err(Refusal::new(
                Reason::RepositoryNotAuthorized,
                format!(
                    "remote {remote} ({url}) is not an https://host/owner/repo or \
                     git@host:owner/repo URL, so it names no repository the policy can \
                     authorize; the operator sets it on the host with git remote set-url \
                     {remote} https://<host>/<owner>/<repo>"
                ),
            ));
        };
        if self.repositories.iter().any(|r| r == &id) {
            Ok(id)
        } else {
            Err(Refusal::new(
                Reason::RepositoryNotAuthorized,
                format!(
                    "remote {remote} is {id}, which is not an authorized repository; an operator \
                     allows it with repositories = [\"{id}\"] in the policy's [git] table"
                ),
            ))
        }
    }

    /// Judge the destination of an update (before any commit is looked at).
    pub fn judge_target(&self, u: &Update) -> Result<(), Refusal> {
        if u.new.is_none() {
            return Err(Refusal::new(
                Reason::Deletion,
                format!(
                    "deleting {} upstream is refused: the sandbox never deletes remote refs; an \
                     operator can delete it on the forge",
                    u.dst
                ),
            ));
        }
        if let Some(tag) = u.dst.strip_prefix("refs/tags/") {
            if self.allow_tags && u.old.is_none() {
                return Ok(());
            }
            let why = if self.allow_tags {
                "moving an existing tag is refused"
            } else {
                "tags are not pushed from the sandbox; an operator allows new tags with allow_tags = true in [git]"
            };
            return Err(Refusal::new(
                Reason::TagPush,
                format!("pushing tag {tag}: {why}"),
            ));
        }
        let Some(branch) = u.dst.strip_prefix("refs/heads/") else {
            return Err(Refusal::new(
                Reason::PushFormNotSupported,
                format!(
                    "pushing to {} is refused: only branches (refs/heads/) are pushed",
                    u.dst
                ),
            ));
        };
        if let Some(p) = self.protected.first_match(branch) {
            return Err(Refusal::new(
                Reason::BranchProtected,
                format!(
                    "branch {branch} is protected (pattern {p:?} in git.protected_branches); push \
                     to a sandbox branch and open a pull request"
                ),
            ));
        }
        if !self.allowed.matches(branch) {
            return Err(Refusal::new(
                Reason::BranchNotAllowed,
                format!(
                    "branch {branch} is not one this sandbox may push to (it pushes to {}); an \
                     operator can add a pattern to git.push_branches",
                    self.pushable().join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// [`PushRules::judge_target`] for a push of `src` to `remote`: a refused branch names
    /// the exact command that pushes the same commits to the sandbox's own namespace.
    pub fn judge_push(&self, u: &Update, remote: &str, src: &str) -> Result<(), Refusal> {
        let Err(mut r) = self.judge_target(u) else {
            return Ok(());
        };
        if !matches!(r.reason, Reason::BranchNotAllowed | Reason::BranchProtected) {
            return Err(r);
        }
        let branch = u.dst.strip_prefix("refs/heads/").unwrap_or(&u.dst);
        if let Some(to) = self.suggested_branch(branch) {
            r.message = format!(
                "{}. Push it to this sandbox's branch instead: git push {remote} {src}:{to}",
                r.message.trim_end_matches('.')
            );
        }
        Err(r)
    }

    /// The allowed patterns that a push can actually use: a pattern every branch of which
    /// is protected (a protected start branch, `main`) is not offered.
    fn pushable(&self) -> Vec<String> {
        let shown: Vec<String> = self
            .allowed
            .written()
            .iter()
            .filter(|p| {
                let literal = unescape_glob(p);
                !(literal.is_some_and(|l| self.protected.matches(&l)))
            })
            .cloned()
            .collect();
        if shown.is_empty() {
            vec!["no branch at all".to_owned()]
        } else {
            shown
        }
    }

    /// `sandbox/<name>/<branch>` (the first allowed `<prefix>/*` or `<prefix>/**` pattern with
    /// `branch` in place of the star), when that branch is allowed and not protected.
    #[must_use]
    pub fn suggested_branch(&self, branch: &str) -> Option<String> {
        self.allowed.written().iter().find_map(|p| {
            let prefix = p.strip_suffix("/**").or_else(|| p.strip_suffix("/*"))?;
            if prefix.contains(['*', '?', '[', '{', '\\']) {
                return None;
            }
            let to = format!("{prefix}/{branch}");
            (self.allowed.matches(&to) && !self.protected.matches(&to)).then_some(to)
        })
    }

    /// Judge an update's commits.
    pub fn judge_facts(&self, u: &Update, f: &Facts) -> Result<(), Refusal> {
        if !f.fast_forward {
            return Err(Refusal::new(
                Reason::NotFastForward,
                format!(
                    "{} is not a fast-forward of the remote's {}: history upstream is never \
                     rewritten; merge or rebase onto the remote branch and push again",
                    u.dst,
                    u.old.as_deref().map_or("(none)", |o| &o[..o.len().min(12)])
                ),
            ));
        }
        for path in &f.touched {
            if let Some(p) = self.restricted.first_match(path) {
                return Err(restricted(path, p));
            }
        }
        Ok(())
    }
}

impl PushRules {
    /// Judge the paths an update's commits change, as git stores them: a restricted path,
    /// a symbolic link that shows a restricted path under its name or points at one, and a
    /// gitlink are refused.
    pub fn judge_paths(&self, u: &Update, touched: &[Touched]) -> Result<(), Refusal> {
        for t in touched {
            let path = &t.path;
            if let Some(p) = self.restricted.first_match(path) {
                return Err(restricted(path, p));
            }
            match &t.kind {
                Kind::Link { target } => self.judge_link(path, target)?,
                Kind::Gitlink => {
                    return Err(Refusal::new(
                        Reason::NestedRepository,
                        format!(
                            "a pushed commit to {} records {} as a nested repository (a \
                             gitlink, mode 160000); the sandbox never pushes one: commit its \
                             files as ordinary files, or leave it out of the commit",
                            u.dst,
                            shown(path)
                        ),
                    ));
                }
                Kind::Removed | Kind::File => {}
            }
        }
        Ok(())
    }

    /// A symbolic link at `path`: what a checkout shows below it is under `path` (a link
    /// named `.vscode` shows its target's files as `.vscode/...`), and where it points is
    /// judged as the same path would be.
    fn judge_link(&self, path: &str, target: &str) -> Result<(), Refusal> {
        let link = shown(path);
        let to = shown(target);
        if let Some(p) = self.restricted.first_match_below(path) {
            return Err(Refusal::new(
                Reason::RestrictedPath,
                format!(
                    "a pushed commit makes {link} a symbolic link (to {to}); a checkout shows \
                     the target's files under {link}/, which {p:?} in git.restricted_paths \
                     restricts; push the files themselves outside the restricted paths, or an \
                     operator pushes it"
                ),
            ));
        }
        let Some(at) = resolve_link(path, target) else {
            // Absolute, or out of the repository: nothing the push carries is there.
            return Ok(());
        };
        let hit = if at.is_empty() {
            self.restricted.written().first().map(String::as_str)
        } else {
            self.restricted
                .first_match(&at)
                .or_else(|| self.restricted.first_match_below(&at))
        };
        match hit {
            None => Ok(()),
            Some(p) => Err(Refusal::new(
                Reason::RestrictedPath,
                format!(
                    "a pushed commit adds the symbolic link {link}, which points at {}, \
                     restricted by {p:?} in git.restricted_paths; leave that path alone, or an \
                     operator pushes it",
                    if at.is_empty() {
                        "the repository's top".to_owned()
                    } else {
                        shown(&at)
                    }
                ),
            )),
        }
    }
}

/// A path for a refusal message: control characters escaped (the message ends on the
/// agent's terminal).
fn shown(path: &str) -> String {
    path.escape_debug().to_string()
}

fn restricted(path: &str, pattern: &str) -> Refusal {
    Refusal::new(
        Reason::RestrictedPath,
        format!(
            "a pushed commit touches {}, restricted by {pattern:?} in git.restricted_paths; \
             leave that path unchanged, or an operator pushes it",
            shown(path)
        ),
    )
}

/// Where a symbolic link at `link` with target `target` points, relative to the
/// repository's top (`""`: the top itself); `None` when absolute or outside the repository.
#[must_use]
pub fn resolve_link(link: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.is_empty() {
        return None;
    }
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// The branch a pattern made by [`escape_glob`] (or free of glob characters) matches, if it
/// matches exactly one.
fn unescape_glob(pattern: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '[' => {
                let inner = chars.next()?;
                if chars.next()? != ']' {
                    return None;
                }
                out.push(inner);
            }
            '*' | '?' | ']' | '{' | '}' | '\\' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// Escape a branch name so it matches only itself as a glob.
pub(crate) fn escape_glob(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('[');
            out.push(c);
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

/// Parse one refspec operand of `git push`.
pub fn parse_refspec(spec: &str) -> Result<Refspec, Refusal> {
    if spec.starts_with('+') {
        return Err(Refusal::new(
            Reason::NotFastForward,
            format!("refspec {spec}: '+' forces the update; force pushes are never allowed"),
        ));
    }
    if spec.starts_with('^') || spec.contains('*') {
        return Err(Refusal::new(
            Reason::PushFormNotSupported,
            format!(
                "refspec {spec}: wildcard and negative refspecs are not pushed; name one branch"
            ),
        ));
    }
    let (src, dst) = match spec.split_once(':') {
        Some((s, d)) => (s, Some(d)),
        None => (spec, None),
    };
    if src.is_empty() {
        return Err(Refusal::new(
            Reason::Deletion,
            format!("refspec {spec} deletes a remote ref: the sandbox never deletes remote refs"),
        ));
    }
    if dst.is_some_and(str::is_empty) || src == "." {
        return Err(Refusal::new(
            Reason::PushFormNotSupported,
            format!("refspec {spec}: name a destination branch"),
        ));
    }
    Ok(Refspec {
        src: src.to_owned(),
        dst: dst.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow_tags: bool) -> PushRules {
        let mut p = GitPolicy::defaults_for("demo");
        p.repositories = vec!["github.com/acme/app".into()];
        p.allow_tags = allow_tags;
        PushRules::new(&p, Some("feature/x")).unwrap()
    }

    fn up(dst: &str, old: Option<&str>, new: Option<&str>) -> Update {
        Update {
            dst: dst.into(),
            old: old.map(String::from),
            new: new.map(String::from),
        }
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// The workspace's remote spells the authorized host with a trailing dot, in capitals
    /// or in an IDN form: the git API reads it as the policy and the proxy do
    /// (`airlock_policy::repo::repository_id`), so the three never drift apart.
    #[test]
    fn repository_ids_read_hosts_as_the_policy_does() {
        for url in [
            "https://GitHub.com./acme/app.git",
            "https://ｇｉｔｈｕｂ.com/acme/app",
            "git@GITHUB.COM.:acme/app.GIT",
            "ssh://git@github\u{ff0e}com/acme/app",
        ] {
            assert_eq!(
                repository_id(url).as_deref(),
                Some("github.com/acme/app"),
                "{url}"
            );
        }
        assert_eq!(
            repository_id("https://bücher.example/o/r").as_deref(),
            Some("xn--bcher-kva.example/o/r")
        );
        for url in [
            "https://203.0.113.7/acme/app",
            "https://0x7f.1/acme/app",
            "https://xn--a.com/acme/app",
        ] {
            assert_eq!(repository_id(url), None, "{url}");
        }
    }

    /// The operator writes the repository one way in the policy, the workspace's remote
    /// spells it another: the push is judged for the same repository, and a look-alike
    /// host or another repository stays refused.
    #[test]
    fn policy_and_remote_spellings_name_one_repository() {
        let text = "[sandbox]\nname = \"demo\"\n[git]\n\
                    repositories = [\"GitHub.com./Acme/App\", \"bücher.example/o/r\"]\n";
        let policy = airlock_policy::Policy::parse(text, std::path::Path::new("t.toml")).unwrap();
        let rules = PushRules::new(&policy.git, None).unwrap();
        for url in [
            "https://github.com/acme/app",
            "git@ＧＩＴＨＵＢ.com:Acme/App.git",
            "https://GitHub.com./acme/app",
            "https://xn--bcher-kva.example/o/r.git",
            "ssh://git@BÜCHER.example/o/r",
        ] {
            assert!(rules.check_repository("origin", url).is_ok(), "{url}");
        }
        for url in [
            "https://g\u{456}thub.com/acme/app",
            "https://github.com/acme/app2",
            "https://github.com.evil/acme/app",
            "https://bucher.example/o/r",
        ] {
            assert!(rules.check_repository("origin", url).is_err(), "{url}");
        }
    }

    #[test]
    fn repository_ids() {
        // Every spelling of a remote URL is read by airlock_policy::repo::remote_repository_id
        // (its table: policy::repo::tests::remote_urls); here, what the rules make of it.
        assert_eq!(
            repository_id("git@github.com:Acme/App").as_deref(),
            Some("github.com/acme/app")
        );
        let r = rules(false);
        assert!(
            r.check_repository("origin", "https://github.com/acme/app.git")
                .is_ok()
        );
        let e = r
            .check_repository("evil", "https://github.com/evil/app.git")
            .unwrap_err();
        assert_eq!(e.reason, Reason::RepositoryNotAuthorized);
        assert!(
            e.message
                .contains("repositories = [\"github.com/evil/app\"]"),
            "{e:?}"
        );
    }

    #[test]
    fn destinations() {
        let r = rules(false);
        assert!(
            r.judge_target(&up("refs/heads/sandbox/demo/fix", Some(A), Some(B)))
                .is_ok()
        );
        assert!(
            r.judge_target(&up("refs/heads/sandbox/demo/a/b", None, Some(B)))
                .is_ok()
        );
        assert!(
            r.judge_target(&up("refs/heads/feature/x", Some(A), Some(B)))
                .is_ok()
        );
        for (dst, reason) in [
            ("refs/heads/main", Reason::BranchProtected),
            ("refs/heads/master", Reason::BranchProtected),
            ("refs/heads/release/1.2", Reason::BranchProtected),
            ("refs/heads/sandbox/other/fix", Reason::BranchNotAllowed),
            ("refs/heads/sandbox/demox/fix", Reason::BranchNotAllowed),
            ("refs/heads/feature/xy", Reason::BranchNotAllowed),
            ("refs/heads/anything", Reason::BranchNotAllowed),
            ("refs/tags/v1", Reason::TagPush),
            ("refs/notes/commits", Reason::PushFormNotSupported),
            ("refs/remotes/origin/main", Reason::PushFormNotSupported),
        ] {
            let e = r.judge_target(&up(dst, None, Some(B))).unwrap_err();
            assert_eq!(e.reason, reason, "{dst}: {e:?}");
        }
        let e = r
            .judge_target(&up("refs/heads/sandbox/demo/x", Some(A), None))
            .unwrap_err();
        assert_eq!(e.reason, Reason::Deletion);
        // With tags allowed: new tags only.
        let t = rules(true);
        assert!(t.judge_target(&up("refs/tags/v1", None, Some(B))).is_ok());
        assert_eq!(
            t.judge_target(&up("refs/tags/v1", Some(A), Some(B)))
                .unwrap_err()
                .reason,
            Reason::TagPush
        );
    }

    #[test]
    fn a_branch_outside_the_namespace_is_refused_with_the_command_that_works() {
        // The start branch is main (protected): it is never offered.
        let mut p = GitPolicy::defaults_for("demo");
        p.repositories = vec!["github.com/acme/app".into()];
        let r = PushRules::new(&p, Some("main")).unwrap();
        let e = r
            .judge_push(&up("refs/heads/fix/login", None, Some(B)), "origin", "HEAD")
            .unwrap_err();
        assert_eq!(e.reason, Reason::BranchNotAllowed);
        assert!(
            e.message
                .contains("git push origin HEAD:sandbox/demo/fix/login"),
            "{e:?}"
        );
        assert!(
            !e.message.contains("main"),
            "a protected target is offered: {e:?}"
        );
        // What it offers works.
        assert!(
            r.judge_target(&up("refs/heads/sandbox/demo/fix/login", None, Some(B)))
                .is_ok()
        );
        let e = r
            .judge_push(
                &up("refs/heads/main", Some(A), Some(B)),
                "upstream",
                "feature",
            )
            .unwrap_err();
        assert_eq!(e.reason, Reason::BranchProtected);
        assert!(
            e.message
                .contains("git push upstream feature:sandbox/demo/main"),
            "{e:?}"
        );
        // Other reasons are unchanged.
        assert_eq!(
            r.judge_push(&up("refs/tags/v1", None, Some(B)), "origin", "v1")
                .unwrap_err()
                .reason,
            Reason::TagPush
        );
        assert!(
            r.judge_push(
                &up("refs/heads/sandbox/demo/x", None, Some(B)),
                "origin",
                "HEAD"
            )
            .is_ok()
        );
        assert_eq!(unescape_glob("odd[x][*]").as_deref(), Some("oddx*"));
        assert_eq!(unescape_glob("sandbox/demo/*"), None);
    }

    #[test]
    fn a_start_branch_with_glob_characters_matches_only_itself() {
        let mut p = GitPolicy::defaults_for("demo");
        p.push_branches = vec![];
        let r = PushRules::new(&p, Some("odd[x]*")).unwrap();
        assert!(
            r.judge_target(&up("refs/heads/odd[x]*", None, Some(B)))
                .is_ok()
        );
        assert!(
            r.judge_target(&up("refs/heads/oddx-anything", None, Some(B)))
                .is_err()
        );
    }

    #[test]
    fn commits() {
        let r = rules(false);
        let u = up("refs/heads/sandbox/demo/x", Some(A), Some(B));
        let ok = Facts {
            fast_forward: true,
            touched: vec!["src/lib.rs".into(), ".github/CODEOWNERS".into()],
        };
        assert!(r.judge_facts(&u, &ok).is_ok());
        let force = Facts {
            fast_forward: false,
            touched: vec![],
        };
        assert_eq!(
            r.judge_facts(&u, &force).unwrap_err().reason,
            Reason::NotFastForward
        );
        let wf = Facts {
            fast_forward: true,
            touched: vec![".github/workflows/x.yml".into()],
        };
        let e = r.judge_facts(&u, &wf).unwrap_err();
        assert_eq!(e.reason, Reason::RestrictedPath);
        assert!(
            e.message.contains(".github/workflows/x.yml") && e.message.contains("restricted_paths")
        );
        let deep = Facts {
            fast_forward: true,
            touched: vec![".github/workflows/sub/y.yaml".into()],
        };
        assert_eq!(
            r.judge_facts(&u, &deep).unwrap_err().reason,
            Reason::RestrictedPath
        );
    }

    fn touched(path: &str, kind: Kind) -> Touched {
        Touched {
            path: path.into(),
            kind,
        }
    }

    fn link(path: &str, target: &str) -> Touched {
        touched(
            path,
            Kind::Link {
                target: target.into(),
            },
        )
    }

    /// Paths as git stores them (no quoting), symbolic links by their own path, as a
    /// directory and by where they point, gitlinks never, case as a case-insensitive
    /// checkout reads it.
    #[test]
    fn paths_are_judged_as_stored_links_by_both_ends_and_case_folded() {
        let mut p = GitPolicy::defaults_for("demo");
        p.restricted_paths = vec![".github/workflows/**".into(), ".vscode/**".into()];
        let r = PushRules::new(&p, None).unwrap();
        let u = up("refs/heads/sandbox/demo/x", Some(A), Some(B));
        let refused = |t: Touched| {
            let shown = format!("{t:?}");
            r.judge_paths(&u, &[t])
                .expect_err(&format!("allowed: {shown}"))
        };
        for t in [
            touched(".github/workflows/ci-\u{e9}.yml", Kind::File),
            touched(".github/workflows/a\"b\nc.yml", Kind::File),
            touched(".GitHub/Workflows/ci.yml", Kind::File),
            touched(".vscode./settings.json", Kind::File),
            touched(".github/workflows/gone.yml", Kind::Removed),
            link(".vscode", "tools/vsc"),
            link(".github", "ci"),
            link(".VSCode", "x"),
            link("docs/ci", "../.github/workflows"),
            link("docs/settings.json", "../.vscode/settings.json"),
            link("a/top", ".."),
        ] {
            let shown = format!("{t:?}");
            let e = refused(t);
            assert_eq!(e.reason, Reason::RestrictedPath, "{shown}: {e:?}");
            assert!(!e.message.contains('\n'), "{e:?}");
        }
        let e = refused(touched("vendor/lib", Kind::Gitlink));
        assert_eq!(e.reason, Reason::NestedRepository);
        for t in [
            touched("src/lib.rs", Kind::File),
            touched(".github/CODEOWNERS", Kind::File),
            link("docs/readme", "../README.md"),
            link("bin/python", "/usr/bin/python3"),
            link("out", "../../elsewhere"),
            touched(".vscodex/settings.json", Kind::File),
        ] {
            assert!(r.judge_paths(&u, std::slice::from_ref(&t)).is_ok(), "{t:?}");
        }
        // Case as written only, when the operator says so.
        p.restricted_paths_case_insensitive = false;
        let exact = PushRules::new(&p, None).unwrap();
        assert!(
            exact
                .judge_paths(&u, &[touched(".GitHub/Workflows/ci.yml", Kind::File)])
                .is_ok()
        );
        assert!(
            exact
                .judge_paths(&u, &[touched(".github/workflows/ci.yml", Kind::File)])
                .is_err()
        );
        assert_eq!(resolve_link("a/b/l", "../c").as_deref(), Some("a/c"));
        assert_eq!(resolve_link("l", "./x/./y/").as_deref(), Some("x/y"));
        assert_eq!(resolve_link("a/l", ".."), Some(String::new()));
        assert_eq!(resolve_link("l", ".."), None);
        assert_eq!(resolve_link("l", "/etc"), None);
    }

    #[test]
    fn refspecs() {
        assert_eq!(
            parse_refspec("HEAD").unwrap(),
            Refspec {
                src: "HEAD".into(),
                dst: None
            }
        );
        assert_eq!(
            parse_refspec("HEAD:sandbox/demo/x").unwrap(),
            Refspec {
                src: "HEAD".into(),
                dst: Some("sandbox/demo/x".into())
            }
        );
        assert_eq!(
            parse_refspec("+HEAD:x").unwrap_err().reason,
            Reason::NotFastForward
        );
        assert_eq!(parse_refspec(":x").unwrap_err().reason, Reason::Deletion);
        assert_eq!(
            parse_refspec("refs/heads/*:refs/heads/*")
                .unwrap_err()
                .reason,
            Reason::PushFormNotSupported
        );
        assert_eq!(
            parse_refspec("^main").unwrap_err().reason,
            Reason::PushFormNotSupported
        );
        assert_eq!(
            parse_refspec("HEAD:").unwrap_err().reason,
            Reason::PushFormNotSupported
        );
    }
}
