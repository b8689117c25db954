//! What a push would change, path by path, read the way git stores it: `git log --raw -z`
//! over the pushed range (NUL-separated, so no name is quoted: `.github/workflows/ci-é.yml`
//! is that name, not `"\303\251"` in quotes that no glob matches), with each path's new
//! mode, and the target of every symbolic link read from its blob. [`crate::push`] judges
//! the list ([`crate::push::PushRules::judge_paths`]).
//!
//! Merges are read as `--cc` reads them: a path a merge takes unchanged from one side is
//! that side's (its own commits are in the range, or upstream already has them).

use crate::argv::Refusal;
use crate::push::{Kind, Touched};
use crate::rawdiff;
use crate::run::GitEnv;
use airlock_wire::Reason;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;

/// The paths the commits `new` (not in `old`, or not on `remote`'s tracking refs when the
/// remote has no such branch) change, in log order, each with what the commit leaves there.
///
/// # Errors
/// An internal refusal when git cannot list them.
pub fn list(
    env: &GitEnv,
    remote: &str,
    old: Option<&str>,
    new: &str,
) -> Result<Vec<Touched>, Refusal> {
    let remotes = format!("--remotes={remote}");
    let mut args = vec![
        "log",
        "--no-renames",
        "--raw",
        "-z",
        "--no-abbrev",
        "--format=format:",
        "--cc",
        new,
        "--not",
    ];
    args.push(old.unwrap_or(&remotes));
    let q = env
        .query(&args)
        .map_err(|e| internal(&format!("running git: {e}")))?;
    if !q.ok {
        return Err(internal(&format!(
            "listing pushed paths failed: {}",
            q.stderr.trim()
        )));
    }
    let records = rawdiff::records(&q.stdout);
    let links: Vec<&str> = records
        .iter()
        .filter(|r| r.mode() == "120000")
        .map(rawdiff::Record::oid)
        .collect();
    let targets = blobs(env, &links)?;
    Ok(records
        .iter()
        .map(|r| Touched {
            path: r.path.clone(),
            kind: match r.mode() {
                "000000" => Kind::Removed,
                "160000" => Kind::Gitlink,
                "120000" => Kind::Link {
                    target: targets.get(r.oid()).cloned().unwrap_or_default(),
                },
                _ => Kind::File,
            },
        })
        .collect())
}

fn internal(message: &str) -> Refusal {
    Refusal::new(Reason::Internal, message)
}

/// The contents of the blobs `oids` (symbolic link targets: short), read by one
/// `git cat-file --batch`.
fn blobs(env: &GitEnv, oids: &[&str]) -> Result<BTreeMap<String, String>, Refusal> {
    let mut out = BTreeMap::new();
    if oids.is_empty() {
        return Ok(out);
    }
    let args = ["cat-file".to_owned(), "--batch".to_owned()];
    let mut child = env
        .command(&env.work_tree, &BTreeMap::new(), &[], &args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| internal(&format!("running git: {e}")))?;
    let mut input = String::new();
    for oid in oids {
        input.push_str(oid);
        input.push('\n');
    }
    if let Some(mut stdin) = child.stdin.take() {
        // Dropped after writing: git sees the end of its input.
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| internal(&format!("writing to git: {e}")))?;
    }
    let done = child
        .wait_with_output()
        .map_err(|e| internal(&format!("waiting for git: {e}")))?;
    let mut rest = done.stdout.as_slice();
    while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        rest = &rest[nl + 1..];
        let mut parts = header.split(' ');
        let (Some(oid), Some(_kind), Some(size)) = (parts.next(), parts.next(), parts.next())
        else {
            // `<oid> missing`: no content to judge.
            continue;
        };
        let Ok(size) = size.parse::<usize>() else {
            continue;
        };
        let Some(content) = rest.get(..size) else {
            break;
        };
        out.insert(
            oid.to_owned(),
            String::from_utf8_lossy(content).into_owned(),
        );
        rest = rest.get(size + 1..).unwrap_or_default();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@example.invalid")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@example.invalid")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Names git would quote, a symbolic link and a deletion, over a range with a merge:
    /// each is listed as stored, with its target.
    #[test]
    fn lists_paths_as_stored_with_link_targets() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().canonicalize().unwrap();
        git(&d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("gone.txt"), "x").unwrap();
        git(&d, &["add", "-A"]);
        git(&d, &["commit", "-q", "-m", "base"]);
        let base = git(&d, &["rev-parse", "HEAD"]);
        git(&d, &["switch", "-q", "-c", "side"]);
        std::fs::create_dir_all(d.join(".github/workflows")).unwrap();
        std::fs::write(d.join(".github/workflows/ci-\u{e9}.yml"), "on: push").unwrap();
        std::fs::write(d.join("tab\there \"q\".txt"), "t").unwrap();
        std::os::unix::fs::symlink("tools/vsc", d.join(".vscode")).unwrap();
        git(&d, &["add", "-A"]);
        git(&d, &["commit", "-q", "-m", "side"]);
        git(&d, &["switch", "-q", "main"]);
        git(&d, &["rm", "-q", "gone.txt"]);
        git(&d, &["commit", "-q", "-m", "rm"]);
        git(&d, &["merge", "-q", "--no-edit", "side"]);
        let head = git(&d, &["rev-parse", "HEAD"]);
        let env = GitEnv {
            git: PathBuf::from("git"),
            git_dir: d.join(".git"),
            work_tree: d.clone(),
            home: d.join("home"),
            proxy_url: "http://127.0.0.1:9".into(),
            ca_file: None,
            ca_dir: None,
            test_upstreams: Vec::new(),
            system_config: None,
        };
        let mut got = list(&env, "origin", Some(&base), &head).unwrap();
        got.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            got,
            vec![
                Touched {
                    path: ".github/workflows/ci-\u{e9}.yml".into(),
                    kind: Kind::File
                },
                Touched {
                    path: ".vscode".into(),
                    kind: Kind::Link {
                        target: "tools/vsc".into()
                    }
                },
                Touched {
                    path: "gone.txt".into(),
                    kind: Kind::Removed
                },
                Touched {
                    path: "tab\there \"q\".txt".into(),
                    kind: Kind::File
                },
            ]
        );
    }
}
