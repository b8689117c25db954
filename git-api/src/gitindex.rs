//! The gitlinks (mode 160000 entries) of a git index file, read from its bytes.
//!
//! The git API asks after every `git add` and `git commit` whether the index now records a
//! nested repository ([`crate::nested`]), so this read is on the hot path of the commands
//! agents run most: it reads only the fixed fields of each entry (mode, object id, flags)
//! and the path, in one pass over the file, without a git process (~1-3 ms each) and
//! without the rest of the format. A crate that reads the whole index (gix-index) brings
//! the gitoxide object, hash, lock and file-time crates for the one field needed here.
//!
//! Versions 2, 3 and 4 (path prefix compression) with SHA-1 or SHA-256 object ids are read.
//! Anything else this reader does not know, a split index (`link` extension: entries live
//! in a second file) included, is [`IndexError::Unsupported`], and the caller asks git
//! instead (`git ls-files --stage -z`): the answer is never guessed. Sparse directory
//! entries (mode 040000) are not gitlinks and are skipped.

/// One gitlink entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Gitlink {
    /// The path, as git stores it (bytes, `/`-separated).
    pub path: Vec<u8>,
    /// The commit it records, as hex.
    pub oid: String,
    /// The merge stage (0 unless conflicted).
    pub stage: u8,
}

/// Why an index could not be read here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Not an index file this reader knows (the caller asks git).
    #[error("index format not read here: {0}")]
    Unsupported(&'static str),
    /// A split index: entries live in a second file too (the caller asks git).
    #[error("a split index is not read here")]
    Split,
}

const GITLINK: u32 = 0o160000;
const TYPE_MASK: u32 = 0o170000;
/// ctime, mtime (8 bytes each), dev, ino, mode, uid, gid, size (4 each).
const STAT_LEN: usize = 40;
const MODE_AT: usize = 24;
/// The flags' extended bit (version 3 and later: two more bytes of flags follow).
const EXTENDED: u16 = 0x4000;
const NAME_MASK: u16 = 0x0fff;

/// The gitlinks of the index file `data`, in index order.
///
/// # Errors
/// [`IndexError::Unsupported`] when the bytes are not an index this reader knows.
pub fn gitlinks(data: &[u8]) -> Result<Vec<Gitlink>, IndexError> {
    if data.len() < 12 || &data[..4] != b"DIRC" {
        return Err(IndexError::Unsupported("no DIRC signature"));
    }
    let version = be32(data, 4).ok_or(IndexError::Unsupported("short header"))?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Unsupported("unknown version"));
    }
    let count = be32(data, 8).ok_or(IndexError::Unsupported("short header"))? as usize;
    // The object id length is not in the index: SHA-1 unless the entries only read as
    // SHA-256 ones.
    match read(data, version, count, 20) {
        Err(IndexError::Unsupported(_)) => read(data, version, count, 32),
        other => other,
    }
}

fn read(data: &[u8], version: u32, count: usize, hash: usize) -> Result<Vec<Gitlink>, IndexError> {
    let bad = IndexError::Unsupported("entries do not parse");
    let mut out = Vec::new();
    let mut at = 12;
    let mut path: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        let mode = be32(data, start + MODE_AT).ok_or(bad.clone())?;
        let oid_at = start + STAT_LEN;
        let flags = be16(data, oid_at + hash).ok_or(bad.clone())?;
        at = oid_at + hash + 2;
        if flags & EXTENDED != 0 {
            if version < 3 {
                return Err(bad);
            }
            at += 2;
        }
        let name_len = usize::from(flags & NAME_MASK);
        if version == 4 {
            let (strip, used) = varint(data.get(at..).ok_or(bad.clone())?).ok_or(bad.clone())?;
            at += used;
            if strip > path.len() {
                return Err(bad);
            }
            path.truncate(path.len() - strip);
            let suffix = nul_terminated(data, at).ok_or(bad.clone())?;
            path.extend_from_slice(suffix);
            at += suffix.len() + 1;
        } else {
            let name = nul_terminated(data, at).ok_or(bad.clone())?;
            path.clear();
            path.extend_from_slice(name);
            // Entries are padded with 1-8 NULs to a multiple of 8 bytes.
            let len = at - start + name.len();
            at = start + (len + 8) / 8 * 8;
            if at > data.len() {
                return Err(bad);
            }
        }
        if name_len != usize::from(NAME_MASK) && name_len != path.len() {
            return Err(bad);
        }
        if mode & TYPE_MASK == GITLINK {
            out.push(Gitlink {
                path: path.clone(),
                oid: hex(&data[oid_at..oid_at + hash]),
                stage: ((flags >> 12) & 3) as u8,
            });
        }
    }
    // Extensions, up to the trailing checksum: a split index keeps entries elsewhere.
    while at + 8 + hash <= data.len() {
        let sig = &data[at..at + 4];
        if sig == b"link" {
            return Err(IndexError::Split);
        }
        let size = be32(data, at + 4).ok_or(bad.clone())? as usize;
        at = at.checked_add(8 + size).ok_or(bad.clone())?;
    }
    if at + hash != data.len() {
        return Err(bad);
    }
    Ok(out)
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    let b = data.get(at..at + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn nul_terminated(data: &[u8], at: usize) -> Option<&[u8]> {
    let rest = data.get(at..)?;
    let end = rest.iter().position(|b| *b == 0)?;
    Some(&rest[..end])
}

/// git's offset varint (`varint.c`): 7 bits a byte, most significant first, each
/// continuation adding one. The value and the bytes used.
fn varint(data: &[u8]) -> Option<(usize, usize)> {
    let mut used = 0;
    let mut c = *data.get(used)?;
    used += 1;
    let mut val = usize::from(c & 127);
    while c & 128 != 0 {
        val = val.checked_add(1)?;
        c = *data.get(used)?;
        used += 1;
        val = val.checked_mul(128)?.checked_add(usize::from(c & 127))?;
    }
    Some((val, used))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }

    /// What git itself lists: `ls-files --stage`, gitlinks only.
    fn by_git(dir: &Path) -> Vec<Gitlink> {
        let out = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["ls-files", "--stage", "-z"])
            .output()
            .unwrap();
        out.stdout
            .split(|b| *b == 0)
            .filter(|r| r.starts_with(b"160000 "))
            .map(|r| {
                let (meta, path) = r.split_at(r.iter().position(|b| *b == b'\t').unwrap());
                let meta = String::from_utf8_lossy(meta);
                let parts: Vec<&str> = meta.split(' ').collect();
                Gitlink {
                    path: path[1..].to_vec(),
                    oid: parts[1].to_owned(),
                    stage: parts[2].parse().unwrap(),
                }
            })
            .collect()
    }

    /// An index with ordinary files (one with a long, non-ASCII name), gitlinks at several
    /// depths, written by git in each index version and object format: this reader lists
    /// exactly the gitlinks `git ls-files --stage` lists.
    #[test]
    fn reads_what_git_lists_in_every_version_and_object_format() {
        for format in ["sha1", "sha256"] {
            for version in ["2", "3", "4"] {
                let tmp = tempfile::tempdir().unwrap();
                let d = tmp.path();
                git(d, &["init", "-q", &format!("--object-format={format}")]);
                std::fs::create_dir_all(d.join("a/b")).unwrap();
                std::fs::write(d.join("a/b/file.txt"), "x").unwrap();
                std::fs::write(d.join("z.txt"), "z").unwrap();
                git(d, &["add", "-A"]);
                // A path longer than the flags' 12 bits can say (4095), with a non-ASCII
                // byte: an index entry only (no file system takes such a name).
                let long = format!("a/{}/é.txt", vec!["n".repeat(200); 24].join("/"));
                let z = Command::new("git")
                    .current_dir(d)
                    .args(["ls-files", "-s", "z.txt"])
                    .output()
                    .unwrap();
                let z = String::from_utf8(z.stdout).unwrap();
                let z_oid = z.split(' ').nth(1).unwrap().to_owned();
                git(
                    d,
                    &[
                        "update-index",
                        "--add",
                        "--cacheinfo",
                        &format!("100644,{z_oid},{long}"),
                    ],
                );
                let oid = if format == "sha1" {
                    "1".repeat(40)
                } else {
                    "2".repeat(64)
                };
                for p in ["a/b/link", "m", "zz/deep/er"] {
                    git(
                        d,
                        &[
                            "update-index",
                            "--add",
                            "--cacheinfo",
                            &format!("160000,{oid},{p}"),
                        ],
                    );
                }
                git(d, &["update-index", "--index-version", version]);
                if version == "3" {
                    // Extended flags (two more bytes): skip-worktree and intent-to-add.
                    git(d, &["update-index", "--skip-worktree", "z.txt"]);
                    std::fs::write(d.join("ita.txt"), "i").unwrap();
                    git(d, &["add", "-N", "ita.txt"]);
                }
                let data = std::fs::read(d.join(".git/index")).unwrap();
                let got = gitlinks(&data).unwrap();
                assert_eq!(got, by_git(d), "{format} v{version}");
                assert_eq!(got.len(), 3, "{format} v{version}");
            }
        }
    }

    #[test]
    fn what_is_not_an_index_it_knows_is_unsupported() {
        assert!(gitlinks(b"").is_err());
        assert!(gitlinks(b"DIRC\0\0\0\x05\0\0\0\0").is_err());
        assert!(gitlinks(b"DIRC\0\0\0\x02\0\0\0\x01short").is_err());
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("a"), "a").unwrap();
        git(d, &["add", "a"]);
        let mut data = std::fs::read(d.join(".git/index")).unwrap();
        assert_eq!(gitlinks(&data).unwrap(), vec![]);
        data.truncate(data.len() - 1);
        assert!(gitlinks(&data).is_err(), "a cut index");
        git(d, &["update-index", "--split-index"]);
        let data = std::fs::read(d.join(".git/index")).unwrap();
        assert_eq!(gitlinks(&data), Err(IndexError::Split));
    }
}
