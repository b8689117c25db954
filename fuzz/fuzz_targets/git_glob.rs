//! `[git]` globs (`protected_branches`, `restricted_paths`): one engine
//! (`airlock_policy::glob::GitGlobs`) read by the git API's push judge and by the proxy's
//! GitHub contents judge. A differential target: the same glob and name go to both old
//! call sites and to the matcher itself.
//!
//! Input: the first byte picks the list (even: `restricted_paths`, odd:
//! `protected_branches`); the rest is `glob \0 name`.
//!
//! Invariants: never panics; ASCII case never changes a match (the proxy judges lowercased
//! readings of a path); everything the old hand-written matcher of the proxy matched
//! (`*` any run of characters, the rest literal, ASCII case-folded) still matches (the one
//! engine never lets through what either old reader refused); and when the glob is a valid
//! policy, **the git API refuses exactly what the matcher matches, and the proxy refuses
//! everything the git API refuses** (the branch or file of a contents write through
//! `api.github.com`).
#![no_main]

use std::path::Path;

use airlock_fuzz::API_GITHUB;
use airlock_git_api::push::{Facts, PushRules, Update};
use airlock_policy::glob::GitGlobs;
use airlock_policy::{Policy, RequestView};
use libfuzzer_sys::fuzz_target;

/// The proxy's matcher before issue 20, for the superset check.
fn old_wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

/// A git path the contents API can name: non-empty components, no `.`/`..`, printable.
fn git_like_path(name: &str) -> bool {
    !name.is_empty()
        && name
            .split('/')
            .all(|c| !matches!(c, "" | "." | ".."))
        && !name.chars().any(|c| c.is_control())
}

/// `name` as a request path tail: every byte but unreserved ones and `/` percent-encoded.
fn encode(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn policy(restricted: bool, glob: &str) -> Option<Policy> {
    let quoted = serde_json::to_string(glob).ok()?;
    let (protected, paths) = if restricted {
        ("[]".to_owned(), format!("[{quoted}]"))
    } else {
        (format!("[{quoted}]"), "[]".to_owned())
    };
    let text = format!(
        "[sandbox]\nname = \"fuzz\"\n[l7]\npresets = [\"github\"]\n[git]\n\
         repositories = [\"github.com/o/r\"]\npush_branches = [\"**\"]\n\
         protected_branches = {protected}\nrestricted_paths = {paths}\n"
    );
    Policy::parse(&text, Path::new("fuzz.toml")).ok()
}

fn contents_put(p: &Policy, file: &str, branch: &str) -> Result<(), String> {
    let path = format!("/repos/o/r/contents/{}", encode(file));
    let req = RequestView {
        host: &API_GITHUB,
        method: "PUT",
        path: &path,
        query: None,
    };
    let body = serde_json::json!({"message": "m", "content": "eA==", "branch": branch});
    match p.judge_body(&req, body.to_string().as_bytes()) {
        airlock_policy::L7Verdict::Pass { .. } | airlock_policy::L7Verdict::Ask { .. } => Ok(()),
        airlock_policy::L7Verdict::Deny { rule, .. } => Err(rule),
    }
}

fn update(branch: &str) -> Update {
    Update {
        dst: format!("refs/heads/{branch}"),
        old: None,
        new: Some("1".repeat(40)),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Some((glob, name)) = text.split_once('\0') else {
        return;
    };
    if glob.len() > 256 || name.len() > 1024 {
        return;
    }
    let restricted = kind % 2 == 0;
    let Ok(globs) = GitGlobs::new(&[glob]) else {
        return;
    };
    let matched = globs.matches(name);

    assert_eq!(
        matched,
        globs.matches(&name.to_ascii_lowercase()),
        "{glob:?} {name:?}: case"
    );
    assert_eq!(
        matched,
        globs.matches(&name.to_ascii_uppercase()),
        "{glob:?} {name:?}: case"
    );
    if !glob.contains(['?', '[', ']', '{', '}', '\\'])
        && old_wildcard(
            glob.to_ascii_lowercase().as_bytes(),
            name.to_ascii_lowercase().as_bytes(),
        )
    {
        assert!(matched, "{glob:?} matched {name:?} in the old proxy reader");
    }

    let Some(p) = policy(restricted, glob) else {
        return;
    };
    let push = PushRules::new(&p.git, None).unwrap_or_else(|e| panic!("{glob:?}: {e}"));
    if restricted {
        if !git_like_path(name) {
            return;
        }
        let facts = Facts {
            fast_forward: true,
            touched: vec![name.to_owned()],
        };
        let by_push = push.judge_facts(&update("x"), &facts);
        assert_eq!(by_push.is_err(), matched, "{glob:?} {name:?}: {by_push:?}");
        if by_push.is_err() {
            let by_proxy = contents_put(&p, name, "x");
            assert!(
                by_proxy.is_err(),
                "git push touching {name:?} is refused by {glob:?}, a contents PUT passes"
            );
        }
    } else {
        // The contents API reads `refs/heads/x` as `x`; git pushes it as a branch named so.
        if name.starts_with("refs/heads/") {
            return;
        }
        let by_push = push.judge_target(&update(name));
        let refused_as_protected = by_push
            .as_ref()
            .is_err_and(|r| r.reason == airlock_wire::Reason::BranchProtected);
        assert_eq!(refused_as_protected, matched, "{glob:?} {name:?}: {by_push:?}");
        let by_proxy = contents_put(&p, "a.rs", name);
        if matched {
            assert!(
                by_proxy.as_ref().is_err_and(|r| r.contains("protected")),
                "git push to {name:?} is refused by {glob:?}, a contents PUT: {by_proxy:?}"
            );
        }
    }
});
