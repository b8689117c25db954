//! Which remote branches this sandbox may see, and the fetch refspecs that respect it.
//!
//! Sandboxes sharing a repository must not read each other's work. The rule, derived from
//! the policy (no key of its own):
//!
//! - The *sandbox branch families* are `sandbox/*/*` (the default convention) plus, for each
//!   `git.push_branches` pattern that has this sandbox's name as a whole path component,
//!   that pattern with the component replaced by `*` (`agent/{sandbox}/*` →
//!   `agent/*/*`). Globs match across `/`, as everywhere in the `[git]` table.
//! - A branch is **hidden** when it is in a sandbox branch family and matches none of this
//!   sandbox's own push patterns (`git.push_branches` plus the start branch).
//! - Everything else is visible: `main`, feature branches, this sandbox's own branches,
//!   tags, and any ref outside `refs/heads/`.
//!
//! The server applies it on every path that shows remote refs: `ls-remote` output is
//! filtered; `fetch` and `pull` never let git choose what to fetch: the remote's refs are
//! listed first (one `ls-remote` through the proxy) and git runs with explicit
//! `<ref>:<dst>` refspecs for visible refs only (see [`expand`]), so hidden branches never
//! reach remote-tracking refs, `FETCH_HEAD` or the object store; a refspec that names a
//! hidden branch is refused by its name (whether or not it exists upstream). Remote-tracking
//! refs of hidden branches already in the repository are deleted when the git API starts
//! and after every fetch ([`stale_tracking_refs`]).
//!
//! This module is pure: listing and deleting refs is the server's.

use crate::argv::Refusal;
use crate::glob::{GlobError, Globs};
use airlock_policy::GitPolicy;
use airlock_wire::Reason;

/// What this sandbox may see of a remote.
#[derive(Debug, Clone)]
pub struct Visibility {
    families: Globs,
    own: Globs,
}

impl Visibility {
    /// The rule for `sandbox` (its `sandbox.name`) under `policy`; `start_branch` is its own.
    pub fn new(
        policy: &GitPolicy,
        sandbox: &str,
        start_branch: Option<&str>,
    ) -> Result<Visibility, GlobError> {
        let mut families = vec!["sandbox/*/*".to_owned()];
        for p in &policy.push_branches {
            let parts: Vec<&str> = p.split('/').collect();
            if !sandbox.is_empty() && parts.contains(&sandbox) {
                let family = parts
                    .iter()
                    .map(|c| if *c == sandbox { "*" } else { c })
                    .collect::<Vec<_>>()
                    .join("/");
                if !families.contains(&family) {
                    families.push(family);
                }
            }
        }
        let mut own = policy.push_branches.clone();
        if let Some(b) = start_branch {
            own.push(crate::push::escape_glob(b));
        }
        Ok(Visibility {
            families: Globs::new(&families)?,
            own: Globs::new(&own)?,
        })
    }

    /// Whether branch `name` (without `refs/heads/`) belongs to another sandbox.
    #[must_use]
    pub fn hidden_branch(&self, name: &str) -> bool {
        self.families.matches(name) && !self.own.matches(name)
    }

    /// Whether the full ref name `r` is another sandbox's branch (a peeled `^{}` suffix is
    /// ignored).
    #[must_use]
    pub fn hidden_ref(&self, r: &str) -> bool {
        let r = r.strip_suffix("^{}").unwrap_or(r);
        r.strip_prefix("refs/heads/")
            .is_some_and(|b| self.hidden_branch(b))
    }

    /// The refusal for a refspec naming a hidden branch. It says nothing about whether the
    /// branch exists, and does not repeat the name (the agent wrote it).
    #[must_use]
    pub fn refusal(&self) -> Refusal {
        Refusal::new(
            Reason::BranchHidden,
            format!(
                "the refspec names another sandbox's branch: sandboxes do not see each other's \
                 branches (sandbox branch families: {}; this sandbox's: {})",
                self.families.written().join(", "),
                self.own.written().join(", ")
            ),
        )
    }
}

/// `ls-remote` output with the lines of hidden refs removed, and how many ref lines remain.
/// Lines are `<oid>\t<ref>` or, with `--symref`, `ref: <target>\t<name>`; a line in any
/// other shape (`--get-url`) is kept.
#[must_use]
pub fn filter_ls_remote(stdout: &str, vis: &Visibility) -> (String, usize) {
    let mut out = String::with_capacity(stdout.len());
    let mut kept = 0;
    for line in stdout.split_inclusive('\n') {
        let text = line.trim_end_matches('\n');
        let hidden = match text.split_once('\t') {
            Some((left, name)) => {
                let target = left.strip_prefix("ref: ").unwrap_or("");
                vis.hidden_ref(name) || vis.hidden_ref(target)
            }
            None => false,
        };
        if !hidden {
            if text.contains('\t') {
                kept += 1;
            }
            out.push_str(line);
        }
    }
    (out, kept)
}

/// The refs an `ls-remote` listed (peeled `^{}` lines and symref lines skipped).
#[must_use]
pub fn remote_refs(ls_remote: &str) -> Vec<String> {
    ls_remote
        .lines()
        .filter(|l| !l.starts_with("ref: "))
        .filter_map(|l| l.split_once('\t'))
        .map(|(_, r)| r)
        .filter(|r| !r.ends_with("^{}"))
        .map(str::to_owned)
        .collect()
}

/// One fetch refspec as written (`[+]src[:dst]`, `^src`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSpec {
    /// Leading `+`.
    pub force: bool,
    /// A negative refspec (`^src`).
    pub negative: bool,
    /// Source as written.
    pub src: String,
    /// Destination as written (`None`: no colon).
    pub dst: Option<String>,
}

impl FetchSpec {
    /// Parse one refspec.
    #[must_use]
    pub fn parse(spec: &str) -> FetchSpec {
        let (force, rest) = match spec.strip_prefix('+') {
            Some(r) => (true, r),
            None => (false, spec),
        };
        let (negative, rest) = match rest.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let (src, dst) = match rest.split_once(':') {
            Some((s, d)) => (s.to_owned(), Some(d.to_owned())),
            None => (rest.to_owned(), None),
        };
        FetchSpec {
            force,
            negative,
            src,
            dst,
        }
    }

    fn wildcard(&self) -> bool {
        self.src.contains('*')
    }
}

/// What `*` in `pattern` (at most one) captures in `name`, if it matches.
fn capture<'a>(pattern: &str, name: &'a str) -> Option<&'a str> {
    match pattern.split_once('*') {
        None => (pattern == name).then_some(""),
        Some((pre, post)) => {
            if name.len() < pre.len() + post.len() {
                return None;
            }
            name.strip_prefix(pre)?.strip_suffix(post)
        }
    }
}

/// The full ref names git would try for a short fetch source (its `ref_rev_parse_rules`).
fn candidates(src: &str) -> Vec<String> {
    vec![
        src.to_owned(),
        format!("refs/{src}"),
        format!("refs/tags/{src}"),
        format!("refs/heads/{src}"),
        format!("refs/remotes/{src}"),
        format!("refs/remotes/{src}/HEAD"),
    ]
}

fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Turn the refspecs of a fetch (the agent's, or the remote's configured ones) into
/// explicit refspecs for the visible refs of `remote_refs` (what `ls-remote` listed):
/// wildcards are expanded here (hidden refs and refs excluded by a negative refspec are
/// left out; a ref the listing did not have is not fetched, so a branch created after the
/// listing cannot slip in); an exact source naming a hidden branch, in any spelling git
/// would resolve, is refused; other exact sources and object ids are passed on as written.
/// An empty result means: fetch nothing (never run git fetch without refspecs, which
/// would fetch the configured ones).
pub fn expand(
    specs: &[FetchSpec],
    remote_refs: &[String],
    vis: &Visibility,
) -> Result<Vec<String>, Refusal> {
    let negatives: Vec<&FetchSpec> = specs.iter().filter(|s| s.negative).collect();
    let excluded = |r: &str| negatives.iter().any(|n| capture(&n.src, r).is_some());
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for spec in specs.iter().filter(|s| !s.negative) {
        let plus = if spec.force { "+" } else { "" };
        if spec.wildcard() {
            for r in remote_refs {
                if vis.hidden_ref(r) || excluded(r) {
                    continue;
                }
                let Some(star) = capture(&spec.src, r) else {
                    continue;
                };
                match &spec.dst {
                    Some(d) if !d.is_empty() => {
                        push(format!("{plus}{r}:{}", d.replacen('*', star, 1)))
                    }
                    _ => push(format!("{plus}{r}")),
                }
            }
            continue;
        }
        if spec.src.is_empty() || is_object_id(&spec.src) {
            push(format!(
                "{plus}{}{}",
                spec.src,
                spec.dst
                    .as_ref()
                    .map(|d| format!(":{d}"))
                    .unwrap_or_default()
            ));
            continue;
        }
        if candidates(&spec.src).iter().any(|c| vis.hidden_ref(c)) {
            return Err(vis.refusal());
        }
        push(format!(
            "{plus}{}{}",
            spec.src,
            spec.dst
                .as_ref()
                .map(|d| format!(":{d}"))
                .unwrap_or_default()
        ));
    }
    Ok(out)
}

/// Local refs to delete: remote-tracking refs of hidden branches. `local` is every local
/// ref name; a ref is stale when it is `refs/remotes/<remote>/<branch>` with `<branch>`
/// hidden, or when a wildcard refspec of `specs` maps a hidden source onto it. With
/// `prune`, refs a wildcard refspec maps from a source the remote no longer has (as
/// `git fetch --prune` does) are stale too.
#[must_use]
pub fn stale_tracking_refs(
    local: &[String],
    remote: &str,
    specs: &[FetchSpec],
    remote_refs: Option<&[String]>,
    prune: bool,
    vis: &Visibility,
) -> Vec<String> {
    let prefix = format!("refs/remotes/{remote}/");
    let mut out = Vec::new();
    for l in local {
        let mut stale = l
            .strip_prefix(&prefix)
            .is_some_and(|b| b != "HEAD" && vis.hidden_branch(b));
        for spec in specs.iter().filter(|s| s.wildcard() && !s.negative) {
            let Some(dst) = spec.dst.as_deref().filter(|d| !d.is_empty()) else {
                continue;
            };
            let Some(star) = capture(dst, l) else {
                continue;
            };
            let src = spec.src.replacen('*', star, 1);
            if vis.hidden_ref(&src) {
                stale = true;
            } else if prune
                && !l.ends_with("/HEAD")
                && let Some(refs) = remote_refs
                && !refs.contains(&src)
            {
                stale = true;
            }
        }
        if stale {
            out.push(l.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vis() -> Visibility {
        let mut p = GitPolicy::defaults_for("nstest");
        p.push_branches.push("agent/nstest/*".into());
        Visibility::new(&p, "nstest", Some("feature/start")).unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn other_sandboxes_branches_are_hidden_and_nothing_else() {
        let v = vis();
        for hidden in [
            "sandbox/other/secret",
            "sandbox/other/a/b",
            "sandbox/nstest-evil/x",
            "sandbox/nstes/x",
            "agent/other/x",
        ] {
            assert!(v.hidden_branch(hidden), "{hidden}");
            assert!(v.hidden_ref(&format!("refs/heads/{hidden}")), "{hidden}");
        }
        for visible in [
            "main",
            "feature/x",
            "feature/start",
            "sandbox/nstest/mine",
            "sandbox/nstest/a/b",
            "agent/nstest/x",
            "sandbox",
            "sandbox/loose",
            "release/1",
        ] {
            assert!(!v.hidden_branch(visible), "{visible}");
        }
        assert!(!v.hidden_ref("refs/tags/sandbox/other/secret"));
        assert!(!v.hidden_ref("refs/remotes/origin/sandbox/other/secret"));
        assert!(v.hidden_ref("refs/heads/sandbox/other/secret^{}"));
    }

    #[test]
    fn the_start_branch_is_visible_even_in_another_family() {
        let p = GitPolicy::defaults_for("nstest");
        let v = Visibility::new(&p, "nstest", Some("sandbox/other/handed-over")).unwrap();
        assert!(!v.hidden_branch("sandbox/other/handed-over"));
        assert!(v.hidden_branch("sandbox/other/secret"));
    }

    #[test]
    fn ls_remote_output_loses_hidden_lines_and_their_symrefs() {
        let text = "ref: refs/heads/main\tHEAD\n\
                    aaa\tHEAD\n\
                    aaa\trefs/heads/main\n\
                    bbb\trefs/heads/sandbox/other/secret\n\
                    ccc\trefs/heads/sandbox/nstest/mine\n\
                    ref: refs/heads/sandbox/other/secret\trefs/remotes/x\n\
                    ddd\trefs/tags/v1\n\
                    eee\trefs/tags/v1^{}\n";
        let (out, kept) = filter_ls_remote(text, &vis());
        assert!(!out.contains("other"), "{out}");
        assert!(!out.contains("bbb"), "{out}");
        assert_eq!(kept, 6);
        assert!(out.contains("ccc\trefs/heads/sandbox/nstest/mine\n"));
        let (out, kept) = filter_ls_remote("bbb\trefs/heads/sandbox/other/secret\n", &vis());
        assert_eq!((out.as_str(), kept), ("", 0));
        assert_eq!(filter_ls_remote("https://x/y\n", &vis()).0, "https://x/y\n");
    }

    #[test]
    fn wildcards_expand_to_visible_listed_refs_only() {
        let listed = strings(&[
            "HEAD",
            "refs/heads/main",
            "refs/heads/sandbox/other/secret",
            "refs/heads/sandbox/nstest/mine",
            "refs/tags/v1",
            "refs/pull/1/head",
        ]);
        let v = vis();
        let default = [FetchSpec::parse("+refs/heads/*:refs/remotes/origin/*")];
        assert_eq!(
            expand(&default, &listed, &v).unwrap(),
            strings(&[
                "+refs/heads/main:refs/remotes/origin/main",
                "+refs/heads/sandbox/nstest/mine:refs/remotes/origin/sandbox/nstest/mine",
            ])
        );
        let all = [FetchSpec::parse("refs/*:refs/x/*")];
        let got = expand(&all, &listed, &v).unwrap();
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got.iter().all(|s| !s.contains("other")), "{got:?}");
        let mid = [FetchSpec::parse("refs/heads/sandbox/*/secret:refs/y/*")];
        assert_eq!(expand(&mid, &listed, &v).unwrap(), Vec::<String>::new());
        let neg = [
            FetchSpec::parse("refs/heads/*:refs/r/*"),
            FetchSpec::parse("^refs/heads/main"),
        ];
        assert_eq!(
            expand(&neg, &listed, &v).unwrap(),
            strings(&["refs/heads/sandbox/nstest/mine:refs/r/sandbox/nstest/mine"])
        );
        let fetch_head_only = [FetchSpec::parse("refs/heads/sandbox/*")];
        assert_eq!(
            expand(&fetch_head_only, &listed, &v).unwrap(),
            strings(&["refs/heads/sandbox/nstest/mine"])
        );
    }

    #[test]
    fn exact_sources_naming_hidden_branches_are_refused_in_every_spelling() {
        let v = vis();
        for s in [
            "sandbox/other/secret",
            "heads/sandbox/other/secret",
            "refs/heads/sandbox/other/secret",
            "+sandbox/other/secret:refs/remotes/origin/x",
            "sandbox/other/does-not-exist",
            "sandbox/other/secret:",
        ] {
            let r = expand(&[FetchSpec::parse(s)], &[], &v).unwrap_err();
            assert_eq!(r.reason, Reason::BranchHidden, "{s}");
            assert!(r.message.contains("another sandbox"), "{r:?}");
        }
        for s in [
            "main",
            "sandbox/nstest/mine",
            "refs/heads/main:refs/remotes/origin/main",
            "v1",
            "0123456789abcdef0123456789abcdef01234567",
        ] {
            assert_eq!(expand(&[FetchSpec::parse(s)], &[], &v).unwrap(), [s], "{s}");
        }
    }

    #[test]
    fn stale_tracking_refs_of_hidden_branches_and_pruned_ones() {
        let v = vis();
        let local = strings(&[
            "refs/heads/main",
            "refs/heads/sandbox/other/copy",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
            "refs/remotes/origin/gone",
            "refs/remotes/origin/sandbox/other/secret",
            "refs/remotes/origin/sandbox/nstest/mine",
            "refs/x/sandbox/other/secret",
            "refs/remotes/upstream/sandbox/other/secret",
        ]);
        let specs = [
            FetchSpec::parse("+refs/heads/*:refs/remotes/origin/*"),
            FetchSpec::parse("refs/heads/*:refs/x/*"),
        ];
        assert_eq!(
            stale_tracking_refs(&local, "origin", &specs, None, false, &v),
            strings(&[
                "refs/remotes/origin/sandbox/other/secret",
                "refs/x/sandbox/other/secret",
            ])
        );
        let listed = strings(&["refs/heads/main", "refs/heads/sandbox/nstest/mine"]);
        let pruned = stale_tracking_refs(&local, "origin", &specs[..1], Some(&listed), true, &v);
        assert_eq!(
            pruned,
            strings(&[
                "refs/remotes/origin/gone",
                "refs/remotes/origin/sandbox/other/secret",
            ])
        );
    }
}
