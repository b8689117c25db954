//! A sandbox's branch tip, read by the CLI itself: the loose ref file, else its line in
//! `packed-refs`, each a plain file (never through a symlink) holding one object id. A
//! symbolic ref, a reftable, anything but an object id is refused: git is never asked to
//! resolve a ref in a git dir the agent wrote to.

use super::CheckoutError;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest `packed-refs` read (a sandbox has one branch; this is far above any real one).
const PACKED_LIMIT: u64 = 16 << 20;

/// `text` (a ref file's content, one trailing newline allowed) as an object id: 40 (SHA-1) or
/// 64 (SHA-256) lowercase hexadecimal digits.
pub fn parse_oid(text: &[u8]) -> Option<String> {
    let t = text.strip_suffix(b"\n").unwrap_or(text);
    let ok = matches!(t.len(), 40 | 64)
        && t.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    ok.then(|| String::from_utf8_lossy(t).into_owned())
}

/// The object id `packed-refs` gives `refname`: `None` when it has no line for it, an error
/// when the line is not an object id.
pub fn packed(text: &[u8], refname: &str) -> Option<Result<String, String>> {
    for line in text.split(|b| *b == b'\n') {
        if line.starts_with(b"#") || line.starts_with(b"^") {
            continue;
        }
        let Some(space) = line.iter().position(|b| *b == b' ') else {
            continue;
        };
        if &line[space + 1..] == refname.as_bytes() {
            return Some(
                parse_oid(&line[..space])
                    .ok_or_else(|| "its packed-refs line is not an object id".into()),
            );
        }
    }
    None
}

fn bad(path: &Path, why: impl Into<String>) -> CheckoutError {
    CheckoutError::BadRef {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// Read a regular file at `path` (its last component never a symlink) up to `limit` bytes;
/// `None` when there is none.
pub fn read_plain(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CheckoutError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(bad(path, "it is a symlink"));
        }
        Err(e) => return Err(bad(path, e.to_string())),
    };
    let meta = file.metadata().map_err(|e| bad(path, e.to_string()))?;
    if !meta.is_file() {
        return Err(bad(path, "it is not a regular file"));
    }
    if meta.len() > limit {
        return Err(bad(path, format!("it is larger than {limit} bytes")));
    }
    let mut buf = Vec::new();
    file.take(limit)
        .read_to_end(&mut buf)
        .map_err(|e| bad(path, e.to_string()))?;
    Ok(Some(buf))
}

/// The tip of `refs/heads/<branch>` in the git dir `git_dir`, as an object id.
pub fn branch_tip(git_dir: &Path, branch: &str) -> Result<String, CheckoutError> {
    let refname = format!("refs/heads/{branch}");
    // Every directory on the way is a real directory, not a symlink out of the git dir.
    let mut dir = git_dir.to_path_buf();
    let parts: Vec<&str> = refname.split('/').collect();
    let mut loose: Option<PathBuf> = Some(git_dir.join(&refname));
    for part in &parts[..parts.len() - 1] {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(bad(&dir, "it is not a directory")),
            Err(_) => {
                loose = None;
                break;
            }
        }
    }
    if let Some(path) = loose
        && let Some(text) = read_plain(&path, 256)?
    {
        if text.starts_with(b"ref:") {
            return Err(bad(&path, "it is a symbolic ref"));
        }
        return parse_oid(&text).ok_or_else(|| bad(&path, "it does not hold an object id"));
    }
    let packed_path = git_dir.join("packed-refs");
    match read_plain(&packed_path, PACKED_LIMIT)? {
        Some(text) => match packed(&text, &refname) {
            Some(found) => found.map_err(|why| bad(&packed_path, why)),
            None => Err(bad(&git_dir.join(&refname), "the branch does not exist")),
        },
        None => Err(bad(&git_dir.join(&refname), "the branch does not exist")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn only_an_object_id_is_a_tip() {
        assert_eq!(parse_oid(format!("{A}\n").as_bytes()).as_deref(), Some(A));
        let long = "a".repeat(64);
        assert_eq!(parse_oid(long.as_bytes()), Some(long.clone()));
        for bad in [
            "ref: refs/heads/main\n".to_string(),
            A.to_uppercase(),
            format!("{A}\n\n"),
            format!(" {A}"),
            A[..39].to_string(),
            "HEAD".into(),
        ] {
            assert_eq!(parse_oid(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn packed_refs_give_the_exact_name() {
        let text = format!(
            "# pack-refs with: peeled fully-peeled sorted\n{A} refs/heads/sandbox/x-y\n^{A}\n{A} refs/heads/sandbox/x\n"
        );
        assert_eq!(
            packed(text.as_bytes(), "refs/heads/sandbox/x"),
            Some(Ok(A.into()))
        );
        assert_eq!(packed(text.as_bytes(), "refs/heads/sandbox"), None);
        assert!(matches!(
            packed(b"zz refs/heads/x\n", "refs/heads/x"),
            Some(Err(_))
        ));
    }

    #[test]
    fn a_loose_ref_wins_and_symlinks_and_symbolic_refs_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        std::fs::write(
            g.join("packed-refs"),
            format!("{A} refs/heads/sandbox/one\n"),
        )
        .unwrap();
        assert_eq!(branch_tip(g, "sandbox/one").unwrap(), A);
        std::fs::create_dir_all(g.join("refs/heads/sandbox")).unwrap();
        let b = "b".repeat(40);
        std::fs::write(g.join("refs/heads/sandbox/one"), format!("{b}\n")).unwrap();
        assert_eq!(branch_tip(g, "sandbox/one").unwrap(), b);
        std::fs::write(g.join("refs/heads/sandbox/one"), "ref: refs/heads/main\n").unwrap();
        let e = branch_tip(g, "sandbox/one").unwrap_err().to_string();
        assert!(e.contains("symbolic ref"), "{e}");
        std::fs::remove_file(g.join("refs/heads/sandbox/one")).unwrap();
        std::os::unix::fs::symlink(g.join("packed-refs"), g.join("refs/heads/sandbox/one"))
            .unwrap();
        let e = branch_tip(g, "sandbox/one").unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        let e = branch_tip(g, "sandbox/none").unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        // A directory on the way that is a symlink.
        std::fs::remove_dir_all(g.join("refs/heads/sandbox")).unwrap();
        std::os::unix::fs::symlink("/tmp", g.join("refs/heads/sandbox")).unwrap();
        let e = branch_tip(g, "sandbox/one").unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
}
