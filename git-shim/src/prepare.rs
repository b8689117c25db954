//! Turning the agent's argv into an [`Invocation`]: the local parts of git's behaviour.
//!
//! * leading `-C <dir>` options move the working directory (so `git -C /tmp/x` outside the
//!   workspace runs natively);
//! * `--no-pager`/`-P` and `-p`/`--paginate` decide local paging and are not sent;
//! * a message file (`commit -F file`, `tag -F`, `merge -F`) is read here, with the agent's
//!   own permissions, and sent as standard input (`-F -`): the server never opens a path
//!   the agent names.

use airlock_wire::invocation::PASSED_ENV;
use airlock_wire::{Invocation, PROTOCOL_VERSION};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Paging wish from the global options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    /// git's default for the subcommand.
    Default,
    /// `--no-pager` / `-P`.
    Never,
    /// `-p` / `--paginate`.
    Always,
}

/// The argv after local processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Effective working directory (after `-C`).
    pub cwd: PathBuf,
    /// Arguments to send (no `-C`, no paging options).
    pub argv: Vec<String>,
    /// Paging wish.
    pub paging: Paging,
}

/// The agent's editor says "keep git's prepared message" (`GIT_EDITOR=true`, or `:`; as
/// git reads it, `GIT_EDITOR`, else `VISUAL`, else `EDITOR`): the git API runs no editor and
/// does not take the agent's environment, so the same wish is sent as the allowed
/// `-c core.editor=true` in front of the command.
pub fn editor_from_env(argv: &mut Vec<String>, editor: Option<&str>) {
    if matches!(editor.map(str::trim), Some("true" | ":")) {
        argv.splice(0..0, ["-c".to_owned(), "core.editor=true".to_owned()]);
    }
}

/// The editor git would run, from the environment.
#[must_use]
pub fn editor_env() -> Option<String> {
    ["GIT_EDITOR", "VISUAL", "EDITOR"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
}

/// Apply leading `-C` and paging options.
pub fn globals(cwd: &Path, argv: &[String]) -> Prepared {
    let mut cwd = cwd.to_path_buf();
    let mut paging = Paging::Default;
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(a) = argv.get(i) {
        match a.as_str() {
            "-C" if i + 1 < argv.len() => {
                let d = &argv[i + 1];
                if !d.is_empty() {
                    cwd = cwd.join(d);
                }
                i += 2;
                continue;
            }
            // `-c key=value` stays (the server judges it); its value is not the subcommand.
            "-c" if i + 1 < argv.len() => {
                let kv = &argv[i + 1];
                if pager_off(kv) {
                    paging = Paging::Never;
                }
                out.push(a.clone());
                out.push(kv.clone());
                i += 2;
                continue;
            }
            "--no-pager" | "-P" => paging = Paging::Never,
            "-p" | "--paginate" => paging = Paging::Always,
            s if !s.starts_with('-') => {
                out.extend(argv[i..].iter().cloned());
                break;
            }
            _ => out.push(a.clone()),
        }
        i += 1;
    }
    Prepared {
        cwd,
        argv: out,
        paging,
    }
}

/// The index of the subcommand (first non-option argument; the value of `-c` is not one).
#[must_use]
pub fn subcommand_index(argv: &[String]) -> Option<usize> {
    let mut i = 0;
    while let Some(a) = argv.get(i) {
        if a == "-c" {
            i += 2;
        } else if !a.starts_with('-') {
            return Some(i);
        } else {
            i += 1;
        }
    }
    None
}

/// `-c core.pager=cat` (or empty, or `off`) and `-c pager.<cmd>=false` turn local paging off.
fn pager_off(kv: &str) -> bool {
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    let key = key.to_ascii_lowercase();
    (key == "core.pager" && matches!(value, "" | "cat" | "off"))
        || (key.starts_with("pager.") && matches!(value, "false" | "no" | "off" | "0"))
}

/// The subcommand (first non-option argument; the value of `-c` is not one): the wire's
/// reading, the one the git API uses too.
pub use airlock_wire::invocation::subcommand;

/// Whether git would page this subcommand by default.
#[must_use]
pub fn pages_by_default(argv: &[String]) -> bool {
    matches!(
        subcommand(argv),
        Some("log" | "show" | "diff" | "blame" | "grep" | "shortlog" | "reflog")
    )
}

/// Replace `-F <file>` / `--file=<file>` of commit/tag/merge by `-F -` with the file's
/// contents as stdin; `-F -` reads the shim's stdin. Returns the stdin to send, if any.
pub fn message_files(
    argv: &mut Vec<String>,
    cwd: &Path,
) -> Result<Option<Vec<u8>>, crate::ShimError> {
    if !matches!(subcommand(argv), Some("commit" | "tag" | "merge")) {
        return Ok(None);
    }
    let mut stdin = None;
    let mut i = 0;
    while i < argv.len() {
        if argv[i] == "--" {
            break;
        }
        let (file, span) = match argv[i].as_str() {
            "-F" | "--file" => (argv.get(i + 1).cloned(), 2),
            s if s.starts_with("--file=") => (Some(s["--file=".len()..].to_owned()), 1),
            s if s.starts_with("-F") && s.len() > 2 && !s.starts_with("--") => {
                (Some(s[2..].to_owned()), 1)
            }
            // Skip the value of -m so a message "-F" is not taken for the option.
            "-m" | "--message" => {
                i += 2;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let Some(file) = file else {
            return Err(crate::ShimError::Input("-F needs a file".into()));
        };
        let data = if file == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| crate::ShimError::Input(format!("reading standard input: {e}")))?;
            buf
        } else {
            let path = cwd.join(&file);
            std::fs::read(&path).map_err(|e| {
                crate::ShimError::Input(format!("could not read message file {file}: {e}"))
            })?
        };
        stdin = Some(data);
        argv.splice(i..i + span, ["-F".to_owned(), "-".to_owned()]);
        i += 2;
    }
    Ok(stdin)
}

/// Commands the shim runs with the real git itself, as the agent, even in the workspace:
/// they need no repository and write nothing to it, so the git API (whose file access is
/// not the agent's) never opens the paths they name. `diff --no-index <a> <b>` and
/// `hash-object` without `-w` read only files the agent can read anyway.
#[must_use]
pub fn runs_natively(argv: &[String]) -> bool {
    let Some(sub) = subcommand(argv) else {
        return false;
    };
    let after: Vec<&str> = argv
        .iter()
        .map(String::as_str)
        .skip_while(|a| *a != sub)
        .skip(1)
        .take_while(|a| *a != "--")
        .collect();
    match sub {
        "diff" => after.contains(&"--no-index"),
        "hash-object" => !after
            .iter()
            .any(|a| *a == "-w" || (a.starts_with('-') && !a.starts_with("--") && a.contains('w'))),
        _ => false,
    }
}

/// `git archive -o <file>` / `--output=<file>`: the option is removed (the git API never
/// writes a path the agent names) and the file the shim should write the archive to, as
/// the agent, is returned; the format follows the file's extension as git's would.
pub fn archive_output(argv: &mut Vec<String>, cwd: &Path) -> Option<PathBuf> {
    if subcommand(argv) != Some("archive") {
        return None;
    }
    let mut out = None;
    let mut i = 0;
    while i < argv.len() && argv[i] != "--" {
        let (file, span) = match argv[i].as_str() {
            "-o" | "--output" => (argv.get(i + 1).cloned(), 2),
            s if s.starts_with("--output=") => (Some(s["--output=".len()..].to_owned()), 1),
            s if s.starts_with("-o") && s.len() > 2 => (Some(s[2..].to_owned()), 1),
            _ => {
                i += 1;
                continue;
            }
        };
        let end = (i + span).min(argv.len());
        argv.drain(i..end);
        out = file.map(|f| cwd.join(f));
    }
    let path = out?;
    let name = path.to_string_lossy().to_ascii_lowercase();
    let has_format = argv.iter().any(|a| a.starts_with("--format"));
    let format = [
        (".tar.gz", "tar.gz"),
        (".tgz", "tgz"),
        (".zip", "zip"),
        (".tar", "tar"),
    ]
    .iter()
    .find(|(ext, _)| name.ends_with(ext))
    .map(|(_, f)| *f);
    if let (false, Some(f), Some(pos)) =
        (has_format, format, argv.iter().position(|a| a == "archive"))
    {
        argv.insert(pos + 1, format!("--format={f}"));
    }
    Some(path)
}

/// `cwd` relative to `workspace` if it is inside it (`""` for the root).
#[must_use]
pub fn relative_to(workspace: &Path, cwd: &Path) -> Option<String> {
    let ws = workspace.canonicalize().ok()?;
    let cwd = cwd.canonicalize().ok()?;
    let rel = cwd.strip_prefix(&ws).ok()?;
    rel.to_str().map(str::to_owned)
}

/// Build the invocation.
#[must_use]
pub fn invocation(
    argv: Vec<String>,
    cwd_rel: String,
    stdin: Option<Vec<u8>>,
    stdout_tty: bool,
    term_width: Option<u16>,
) -> Invocation {
    let env: BTreeMap<String, String> = PASSED_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect();
    Invocation {
        version: PROTOCOL_VERSION,
        argv,
        cwd: cwd_rel,
        env,
        stdin,
        term_width,
        stdout_tty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn dash_c_and_paging_are_local() {
        let p = globals(Path::new("/workspace"), &v("-C sub --no-pager log -p"));
        assert_eq!(p.cwd, PathBuf::from("/workspace/sub"));
        assert_eq!(p.argv, v("log -p"));
        assert_eq!(p.paging, Paging::Never);
        let p = globals(Path::new("/workspace"), &v("-C /tmp/x status"));
        assert_eq!(p.cwd, PathBuf::from("/tmp/x"));
        // -c stays: the server judges it; its value is not the subcommand.
        assert_eq!(
            globals(Path::new("/w"), &v("-c a=b status")).argv,
            v("-c a=b status")
        );
        let p = globals(Path::new("/w"), &v("-c color.ui=never --no-pager log"));
        assert_eq!(p.argv, v("-c color.ui=never log"));
        assert_eq!(p.paging, Paging::Never);
        assert_eq!(subcommand(&p.argv), Some("log"));
        let p = globals(Path::new("/w"), &v("-c core.pager=cat log"));
        assert_eq!(p.paging, Paging::Never);
        assert!(pages_by_default(&v("-c color.ui=never log")));
        assert_eq!(subcommand(&v("-c user.name=x commit -F m")), Some("commit"));
    }

    #[test]
    fn message_files_become_stdin() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("msg"), "hello\n").unwrap();
        let mut a = v("commit -F msg");
        assert_eq!(
            message_files(&mut a, dir.path()).unwrap().unwrap(),
            b"hello\n"
        );
        assert_eq!(a, v("commit -F -"));
        let mut a = v("commit --file=msg -a");
        assert_eq!(
            message_files(&mut a, dir.path()).unwrap().unwrap(),
            b"hello\n"
        );
        assert_eq!(a, v("commit -F - -a"));
        let mut a = v("commit -m -F");
        assert!(message_files(&mut a, dir.path()).unwrap().is_none());
        let mut a = v("log -F x");
        assert!(message_files(&mut a, dir.path()).unwrap().is_none());
        assert!(message_files(&mut v("commit -F missing"), dir.path()).is_err());
    }

    #[test]
    fn repository_less_reads_run_natively_and_archive_output_is_the_shims() {
        assert!(runs_natively(&v("diff --no-index a b")));
        assert!(runs_natively(&v(
            "-c color.ui=never diff --stat --no-index a b"
        )));
        assert!(!runs_natively(&v("diff -- --no-index")));
        assert!(!runs_natively(&v("diff HEAD")));
        assert!(runs_natively(&v("hash-object README.md")));
        assert!(runs_natively(&v("hash-object -t blob --stdin")));
        assert!(!runs_natively(&v("hash-object -w README.md")));
        assert!(!runs_natively(&v("hash-object -tw x")));
        assert!(!runs_natively(&v("status")));
        let mut a = v("archive -o out.zip HEAD");
        let p = archive_output(&mut a, Path::new("/w")).unwrap();
        assert_eq!(p, PathBuf::from("/w/out.zip"));
        assert_eq!(a, v("archive --format=zip HEAD"));
        let mut a = v("archive --format=tar --output=/tmp/x.tar.gz HEAD");
        assert_eq!(
            archive_output(&mut a, Path::new("/w")).unwrap(),
            PathBuf::from("/tmp/x.tar.gz")
        );
        assert_eq!(a, v("archive --format=tar HEAD"));
        let mut a = v("archive HEAD");
        assert!(archive_output(&mut a, Path::new("/w")).is_none());
    }

    #[test]
    fn workspace_relative_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        assert_eq!(relative_to(dir.path(), dir.path()).as_deref(), Some(""));
        assert_eq!(
            relative_to(dir.path(), &dir.path().join("a")).as_deref(),
            Some("a")
        );
        assert_eq!(relative_to(&dir.path().join("a"), dir.path()), None);
    }

    #[test]
    fn an_editor_that_keeps_the_message_is_sent_as_core_editor_true() {
        for e in ["true", ":", " true "] {
            let mut a = v("rebase --continue");
            editor_from_env(&mut a, Some(e));
            assert_eq!(a, v("-c core.editor=true rebase --continue"), "{e}");
        }
        for e in [None, Some("vim"), Some("true --wait"), Some("")] {
            let mut a = v("commit --amend");
            editor_from_env(&mut a, e);
            assert_eq!(a, v("commit --amend"), "{e:?}");
        }
    }
}
