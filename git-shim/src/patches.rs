//! The local half of patch workflows: the files are the agent's, so the shim reads and
//! writes them with the agent's own permissions and the git API sees only bytes.
//!
//! * `git apply <file>...` / `git am <mbox>...`: the files (or the shim's standard input
//!   when none is named) are read here and sent as standard input; the operands are dropped.
//! * `git format-patch` without `--stdout`: the shim asks for `--stdout`, splits the
//!   mailbox at git's `From <sha> Mon Sep 17 00:00:00 2001` lines and writes one file per
//!   patch, named as git names them (`0001-<sanitized subject>.patch`), into `-o <dir>` or
//!   the working directory, and prints their names as git does.

use crate::ShimError;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Options of `apply`/`am` whose value may be the next argument.
const VALUE_OPTS: &[&str] = &[
    "-p",
    "-C",
    "--directory",
    "--exclude",
    "--include",
    "--whitespace",
    "--quoted-cr",
    "--empty",
    "--patch-format",
];

/// `am` operations that read no mailbox.
const AM_CONTROL: &[&str] = &[
    "--abort",
    "--continue",
    "--skip",
    "--quit",
    "-r",
    "--resolved",
    "--show-current-patch",
];

/// For `apply` and `am`: drop the patch operands and return the bytes to send as stdin.
pub fn patch_input(
    argv: &mut Vec<String>,
    sub_index: usize,
    cwd: &Path,
) -> Result<Option<Vec<u8>>, ShimError> {
    let sub = argv.get(sub_index).map(String::as_str);
    if !matches!(sub, Some("apply" | "am")) {
        return Ok(None);
    }
    let control = argv[sub_index + 1..].iter().any(|a| {
        AM_CONTROL
            .iter()
            .any(|c| a == c || a.starts_with(&format!("{c}=")))
    });
    if sub == Some("am") && control {
        return Ok(None);
    }
    let mut files = Vec::new();
    let mut keep = argv[..=sub_index].to_vec();
    let mut i = sub_index + 1;
    let mut dashes = false;
    while let Some(a) = argv.get(i) {
        i += 1;
        if !dashes && a == "--" {
            dashes = true;
        } else if !dashes && a.starts_with('-') && a != "-" {
            keep.push(a.clone());
            if VALUE_OPTS.contains(&a.as_str())
                && let Some(v) = argv.get(i)
            {
                keep.push(v.clone());
                i += 1;
            }
        } else {
            files.push(a.clone());
        }
    }
    let mut data = Vec::new();
    if files.is_empty() || files.iter().all(|f| f == "-") {
        std::io::stdin()
            .read_to_end(&mut data)
            .map_err(|e| ShimError::Input(format!("reading standard input: {e}")))?;
    }
    for f in files.iter().filter(|f| *f != "-") {
        let path = cwd.join(f);
        if path.is_dir() {
            return Err(ShimError::Input(format!(
                "{f} is a directory: name the patch or mailbox files"
            )));
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| ShimError::Input(format!("could not read patch {f}: {e}")))?;
        data.extend_from_slice(&bytes);
    }
    *argv = keep;
    Ok(Some(data))
}

/// How `format-patch` names its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatPatch {
    /// Where the files go.
    pub dir: PathBuf,
    /// The directory as the agent wrote it (for the names printed), `None` for the cwd.
    pub shown_dir: Option<String>,
    start: usize,
    numbered_files: bool,
    suffix: String,
    reroll: Option<String>,
    name_max: usize,
}

/// For `format-patch` without `--stdout`: strip `-o`, add `--stdout`, and return the plan.
pub fn format_patch_plan(
    argv: &mut Vec<String>,
    sub_index: usize,
    cwd: &Path,
) -> Option<FormatPatch> {
    if argv.get(sub_index).map(String::as_str) != Some("format-patch") {
        return None;
    }
    let opts: Vec<&String> = argv[sub_index + 1..]
        .iter()
        .take_while(|a| *a != "--")
        .collect();
    if opts.iter().any(|a| *a == "--stdout") {
        return None;
    }
    let value = |name: &str| -> Option<String> {
        let eq = format!("{name}=");
        opts.iter().enumerate().rev().find_map(|(i, a)| {
            a.strip_prefix(&eq).map(str::to_owned).or_else(|| {
                (a.as_str() == name)
                    .then(|| opts.get(i + 1).map(|v| (*v).clone()))
                    .flatten()
            })
        })
    };
    let mut plan = FormatPatch {
        dir: cwd.to_path_buf(),
        shown_dir: None,
        start: value("--start-number")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
        numbered_files: opts.iter().any(|a| *a == "--numbered-files"),
        suffix: value("--suffix").unwrap_or_else(|| ".patch".to_owned()),
        reroll: value("--reroll-count").or_else(|| value("-v")),
        name_max: value("--filename-max-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(64),
    };
    let mut i = sub_index + 1;
    while i < argv.len() && argv[i] != "--" {
        let (dir, span) = match argv[i].as_str() {
            "-o" | "--output-directory" => (argv.get(i + 1).cloned(), 2),
            s if s.starts_with("--output-directory=") => {
                (Some(s["--output-directory=".len()..].to_owned()), 1)
            }
            s if s.starts_with("-o") && s.len() > 2 => (Some(s[2..].to_owned()), 1),
            _ => {
                i += 1;
                continue;
            }
        };
        let end = (i + span).min(argv.len());
        argv.drain(i..end);
        if let Some(d) = dir {
            plan.dir = cwd.join(&d);
            plan.shown_dir = Some(d);
        }
    }
    argv.insert(sub_index + 1, "--stdout".to_owned());
    Some(plan)
}

/// git's `%f`: runs of characters other than letters, digits, `.` and `_` become one `-`;
/// `..` becomes `.`; trailing `.` and `-` are dropped.
#[must_use]
pub fn sanitized_subject(subject: &str) -> String {
    let mut out = String::new();
    let mut space = 2u8;
    let bytes = subject.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' {
            if space == 1 {
                out.push('-');
            }
            space = 0;
            out.push(c as char);
            if c == b'.' {
                while bytes.get(i + 1) == Some(&b'.') {
                    i += 1;
                }
            }
        } else {
            space |= 1;
        }
        i += 1;
    }
    out.trim_end_matches(['.', '-']).to_owned()
}

/// Whether a line starts a patch in `format-patch --stdout` output.
fn is_separator(line: &str) -> bool {
    line.strip_prefix("From ")
        .and_then(|r| r.strip_suffix(" Mon Sep 17 00:00:00 2001"))
        .is_some_and(|h| h.len() >= 40 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The subject of one mail, `[PATCH ...]` prefix removed, folded lines joined.
fn subject(mail: &str) -> String {
    let mut lines = mail.lines().skip_while(|l| !l.starts_with("Subject: "));
    let Some(first) = lines.next() else {
        return String::new();
    };
    let mut s = first["Subject: ".len()..].to_owned();
    for l in lines.take_while(|l| l.starts_with([' ', '\t'])) {
        s.push_str(l);
    }
    if s.starts_with('[')
        && let Some(end) = s.find(']')
    {
        s = s[end + 1..].trim_start().to_owned();
    }
    s
}

impl FormatPatch {
    /// Split `mbox` into the files git would write and write them; the names, one a line,
    /// as git prints them.
    pub fn write(&self, mbox: &[u8]) -> Result<String, ShimError> {
        let text = String::from_utf8_lossy(mbox);
        let mut mails: Vec<String> = Vec::new();
        for line in text.split_inclusive('\n') {
            if is_separator(line.trim_end_matches('\n')) || mails.is_empty() {
                mails.push(String::new());
            }
            if let Some(m) = mails.last_mut() {
                m.push_str(line);
            }
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| ShimError::Input(format!("cannot create {}: {e}", self.dir.display())))?;
        let mut listing = String::new();
        let mut nr = self.start;
        for mail in mails.iter().filter(|m| !m.is_empty()) {
            let subj = subject(mail);
            let cover = subj.contains("*** SUBJECT HERE ***");
            let name = self.name(
                if cover { 0 } else { nr },
                if cover { "cover-letter" } else { &subj },
            );
            if !cover {
                nr += 1;
            }
            let path = self.dir.join(&name);
            std::fs::write(&path, mail.as_bytes())
                .map_err(|e| ShimError::Input(format!("cannot write {}: {e}", path.display())))?;
            match &self.shown_dir {
                Some(d) => listing.push_str(&format!("{}/{name}\n", d.trim_end_matches('/'))),
                None => listing.push_str(&format!("{name}\n")),
            }
        }
        Ok(listing)
    }

    fn name(&self, nr: usize, subject: &str) -> String {
        if self.numbered_files {
            return nr.to_string();
        }
        let mut n = String::new();
        if let Some(v) = &self.reroll {
            n.push_str(&format!("v{v}-"));
        }
        n.push_str(&format!("{nr:04}-"));
        if subject == "cover-letter" {
            n.push_str(subject);
        } else {
            n.push_str(&sanitized_subject(subject));
        }
        let max = self.name_max.saturating_sub(self.suffix.len() + 1);
        if n.len() > max {
            n.truncate(max);
        }
        n.push_str(&self.suffix);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn subjects_are_sanitized_as_git_does() {
        assert_eq!(sanitized_subject("Add f"), "Add-f");
        assert_eq!(
            sanitized_subject("fix: the (login) bug..."),
            "fix-the-login-bug"
        );
        assert_eq!(sanitized_subject("v1..v2 a_b"), "v1.v2-a_b");
        assert_eq!(sanitized_subject("  x  "), "x");
    }

    #[test]
    fn apply_and_am_files_become_stdin() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.patch"), "A").unwrap();
        std::fs::write(dir.path().join("b.patch"), "B").unwrap();
        let mut a = v("apply -p 1 --check a.patch b.patch");
        assert_eq!(patch_input(&mut a, 0, dir.path()).unwrap().unwrap(), b"AB");
        assert_eq!(a, v("apply -p 1 --check"));
        let mut a = v("-c color.ui=never am -3 a.patch");
        assert_eq!(patch_input(&mut a, 2, dir.path()).unwrap().unwrap(), b"A");
        assert_eq!(a, v("-c color.ui=never am -3"));
        let mut a = v("am --abort");
        assert!(patch_input(&mut a, 0, dir.path()).unwrap().is_none());
        assert!(patch_input(&mut v("apply missing.patch"), 0, dir.path()).is_err());
        assert!(patch_input(&mut v("apply ."), 0, dir.path()).is_err());
        let mut a = v("log a.patch");
        assert!(patch_input(&mut a, 0, dir.path()).unwrap().is_none());
    }

    #[test]
    fn format_patch_asks_for_stdout_and_writes_git_names() {
        let mut a = v("format-patch -o out -2");
        let plan = format_patch_plan(&mut a, 0, Path::new("/w")).unwrap();
        assert_eq!(a, v("format-patch --stdout -2"));
        assert_eq!(plan.dir, PathBuf::from("/w/out"));
        let mut a = v("format-patch --stdout -1");
        assert!(format_patch_plan(&mut a, 0, Path::new("/w")).is_none());
        let dir = tempfile::tempdir().unwrap();
        let sha = "a".repeat(40);
        let mbox = format!(
            "From {sha} Mon Sep 17 00:00:00 2001\nSubject: [PATCH 1/2] Add f\n\nx\n\
             From {sha} Mon Sep 17 00:00:00 2001\nSubject: [PATCH 2/2] a very long subject\n that is folded\n\ny\n"
        );
        let mut a = v("format-patch -1");
        let mut plan = format_patch_plan(&mut a, 0, dir.path()).unwrap();
        plan.dir = dir.path().to_path_buf();
        let listing = plan.write(mbox.as_bytes()).unwrap();
        assert_eq!(
            listing,
            "0001-Add-f.patch\n0002-a-very-long-subject-that-is-folded.patch\n"
        );
        assert!(
            std::fs::read_to_string(dir.path().join("0001-Add-f.patch"))
                .unwrap()
                .starts_with("From ")
        );
    }
}
