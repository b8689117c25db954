//! What a fetched branch brought into the operator's repository, as [`crate::review`] judges
//! it: every path any commit of the range changed (and the net change from the base), with
//! modes from git's trees, symlink targets and `.gitattributes` contents from its blobs, and
//! the tip's whole tree. Read in the operator's repository with git's plumbing (raw,
//! NUL-separated output; no textconv, no external diff, no submodule entered).

use super::CheckoutError;
use super::git::{self, run};
use crate::review::{Change, Entry, MODE_SYMLINK, fold};
use std::collections::BTreeMap;
use std::path::Path;

/// The largest blob read for a symlink target or a `.gitattributes` (what lies beyond is not
/// judged; a symlink target is at most a path).
const BLOB_LIMIT: usize = 1 << 20;

/// One raw record: `(old mode, new mode, new oid, status, path)`.
type Raw = (u32, u32, String, u8, Vec<u8>);

/// Parse git's `--raw -z` records (as `diff-tree` and `log` print them, commit headers in
/// between skipped): `:oldmode newmode oldoid newoid status NUL path NUL`.
fn parse_raw(out: &[u8]) -> Vec<Raw> {
    let mut records = Vec::new();
    let mut tokens = out.split(|b| *b == 0);
    while let Some(token) = tokens.next() {
        let token = token.strip_prefix(b"\n").unwrap_or(token);
        let Some(meta) = token.strip_prefix(b":") else {
            continue;
        };
        let Some(path) = tokens.next() else {
            break;
        };
        let meta = String::from_utf8_lossy(meta);
        let f: Vec<&str> = meta.split(' ').collect();
        if f.len() < 5 {
            continue;
        }
        let mode = |m: &str| u32::from_str_radix(m, 8).unwrap_or(0);
        let status = f[4].bytes().next().unwrap_or(b'M');
        records.push((
            mode(f[0]),
            mode(f[1]),
            f[3].to_string(),
            status,
            path.to_vec(),
        ));
    }
    records
}

/// Parse `ls-tree -r -z`: `mode type oid TAB path NUL`.
fn parse_tree(out: &[u8]) -> Vec<(u32, String, Vec<u8>)> {
    out.split(|b| *b == 0)
        .filter_map(|rec| {
            let tab = rec.iter().position(|b| *b == b'\t')?;
            let meta = String::from_utf8_lossy(&rec[..tab]);
            let mut f = meta.split(' ');
            let mode = u32::from_str_radix(f.next()?, 8).ok()?;
            let oid = f.nth(1)?.to_string();
            Some((mode, oid, rec[tab + 1..].to_vec()))
        })
        .collect()
}

/// The contents of the blobs `oids` (`cat-file --batch`), each cut at [`BLOB_LIMIT`].
fn blobs(top: &Path, oids: &[String]) -> Result<BTreeMap<String, Vec<u8>>, CheckoutError> {
    let mut found = BTreeMap::new();
    if oids.is_empty() {
        return Ok(found);
    }
    let input: String = oids.iter().map(|o| format!("{o}\n")).collect();
    let out = git::run_with_input(
        "cat-file",
        top,
        git::operator(top).args(["cat-file", "--batch"]),
        input.as_bytes(),
    )?;
    let mut rest = out.stdout.as_slice();
    while !rest.is_empty() {
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
            break;
        };
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        rest = &rest[nl + 1..];
        let f: Vec<&str> = header.split(' ').collect();
        if f.len() != 3 {
            continue; // `<oid> missing`
        }
        let size: usize = f[2].parse().unwrap_or(0);
        let body = &rest[..size.min(rest.len())];
        found.insert(
            f[0].to_string(),
            body[..body.len().min(BLOB_LIMIT)].to_vec(),
        );
        rest = &rest[(size + 1).min(rest.len())..];
    }
    Ok(found)
}

fn is_attributes(path: &[u8]) -> bool {
    let last = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    fold(last) == ".gitattributes"
}

/// What the range `base..tip` brought, in the operator's repository at `top`: the changes of
/// every commit of the range and the net change, and the tip's tree. When `base` is not
/// there (gone from the operator's repository), every path of the tip counts as changed.
pub fn brought(
    top: &Path,
    base: &str,
    tip: &str,
) -> Result<(Vec<Change>, Vec<Entry>), CheckoutError> {
    let tree_out = run(
        "ls-tree",
        top,
        git::operator(top).args(["ls-tree", "-r", "-z", "--full-tree", tip]),
    )?;
    let tree = parse_tree(&tree_out.stdout);
    let base_known = git::operator(top)
        .args(["cat-file", "-e", &format!("{base}^{{commit}}")])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut raw: Vec<Raw> = Vec::new();
    if base_known {
        let log = run(
            "log",
            top,
            git::operator(top).args([
                "-c",
                "log.showRoot=true",
                "log",
                "-z",
                "--raw",
                "--no-abbrev",
                "--no-renames",
                "--diff-merges=first-parent",
                "--format=%x01%H",
                &format!("{base}..{tip}"),
            ]),
        )?;
        raw.extend(parse_raw(&log.stdout));
        let net = run(
            "diff-tree",
            top,
            git::operator(top).args(["diff-tree", "-r", "-z", "--no-renames", base, tip]),
        )?;
        raw.extend(parse_raw(&net.stdout));
    } else {
        raw.extend(
            tree.iter()
                .map(|(mode, oid, path)| (0, *mode, oid.clone(), b'A', path.clone())),
        );
    }
    // One change per (path, deleted, mode, oid); the blobs symlinks and attributes need.
    let mut changes: BTreeMap<(Vec<u8>, bool, u32, String), ()> = BTreeMap::new();
    for (old, new, oid, status, path) in raw {
        let deleted = status == b'D';
        changes.insert((path, deleted, if deleted { old } else { new }, oid), ());
    }
    let mut wanted: Vec<String> = tree
        .iter()
        .filter(|(mode, _, _)| *mode == MODE_SYMLINK)
        .map(|(_, oid, _)| oid.clone())
        .collect();
    for (path, deleted, mode, oid) in changes.keys() {
        if !deleted && (*mode == MODE_SYMLINK || is_attributes(path)) {
            wanted.push(oid.clone());
        }
    }
    wanted.sort();
    wanted.dedup();
    let content = blobs(top, &wanted)?;
    let changes = changes
        .into_keys()
        .map(|(path, deleted, mode, oid)| {
            let blob = (!deleted).then(|| content.get(&oid).cloned()).flatten();
            Change {
                target: blob.clone().filter(|_| mode == MODE_SYMLINK),
                content: blob.filter(|_| is_attributes(&path)),
                path,
                mode,
                deleted,
            }
        })
        .collect();
    let tree = tree
        .into_iter()
        .map(|(mode, oid, path)| Entry {
            target: (mode == MODE_SYMLINK)
                .then(|| content.get(&oid).cloned())
                .flatten(),
            path,
            mode,
        })
        .collect();
    Ok((changes, tree))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_records_are_read_between_commit_headers_whatever_the_names() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let out = format!(
            "\u{1}{a}\0\n:000000 100644 {z} {a} A\0.vscode/tasks.json\0:120000 120000 {a} {a} M\0:odd\nname\0\u{1}{a}\0\n:100644 000000 {a} {z} D\0.envrc\0"
        );
        let got = parse_raw(out.as_bytes());
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0],
            (0, 0o100644, a.clone(), b'A', b".vscode/tasks.json".to_vec())
        );
        assert_eq!(got[1].4, b":odd\nname".to_vec());
        assert_eq!((got[1].0, got[1].1), (MODE_SYMLINK, MODE_SYMLINK));
        assert_eq!((got[2].3, got[2].0), (b'D', 0o100644));
    }

    #[test]
    fn tree_entries_keep_tabs_and_newlines_in_names() {
        let a = "a".repeat(40);
        let out = format!("160000 commit {a}\tsub\0100644 blob {a}\tx\ty\nz\0");
        let got = parse_tree(out.as_bytes());
        assert_eq!(got[0], (0o160000, a.clone(), b"sub".to_vec()));
        assert_eq!(got[1].2, b"x\ty\nz".to_vec());
    }
}
