//! How a checked argv is reshaped before git runs: its global options and subcommand, its
//! options and operands, `--no-ext-diff`/`--no-textconv` added, and the builtin helpers of
//! the commands a shell script would run (a shell drops the split identity, docs/design.md §5).

use super::Server;
use crate::argv::Checked;
use crate::nested;
use std::path::Path;

impl Server {
    /// git < 2.40 (Debian bookworm's 2.39) runs `git bisect` as a shell script, and a shell
    /// drops the split identity (docs/design.md §5): every bisect step then fails on the hidden git
    /// dir. Such a git ships the builtin `bisect--helper` the script calls.
    pub(super) fn bisect_is_script(&self) -> bool {
        *self.bisect_script.get_or_init(|| {
            let Some(dir) = self.env.query(&["--exec-path"]).ok().and_then(|q| q.line()) else {
                return false;
            };
            let dir = Path::new(&dir);
            let script = std::fs::read(dir.join("git-bisect")).unwrap_or_default();
            script.starts_with(b"#!") && dir.join("git-bisect--helper").exists()
        })
    }
}

/// The global options and the subcommand of a checked invocation.
pub(super) fn global_and_sub(c: &Checked) -> Vec<String> {
    let end = (c.sub_index + 1).min(c.argv.len());
    c.argv[..end].to_vec()
}

/// The subcommand's options (with their values, in order; `--` dropped) and its operands.
pub(super) fn split_operands(c: &Checked) -> (Vec<String>, Vec<String>) {
    let start = global_and_sub(c).len();
    let mut options = Vec::new();
    let mut operands = Vec::new();
    for (i, a) in c.argv.iter().enumerate().skip(start) {
        if c.operands.contains(&i) {
            operands.push(a.clone());
        } else if a != "--" && a != "--end-of-options" {
            options.push(a.clone());
        }
    }
    (options, operands)
}

/// The options that keep git out of nested repositories ([`nested::tail_options`]) after
/// the agent's options: before its `--`, else before its first operand (git refuses an
/// option after a path: "option must come before non-option arguments"), else at the end.
/// An option of the agent's written after an operand could then come later and win, so
/// the values that would look inside a submodule are refused first
/// ([`nested::check_options`]). Runs before [`harden_args`] (which inserts before this
/// point).
pub(super) fn pin_tail(c: &Checked, args: &mut Vec<String>) {
    let first = c
        .operands
        .first()
        .and_then(|&i| c.argv.get(i))
        .map(String::as_str);
    let tail = nested::tail_options(&c.subcommand, first);
    if tail.is_empty() {
        return;
    }
    // `git stash show`: the verb is the first operand; the diff's options follow it.
    let skip = usize::from(c.subcommand == "stash");
    let before_operand = c.operands.get(skip).copied().unwrap_or(usize::MAX);
    let at = c.options_end.min(before_operand).min(args.len());
    args.splice(at..at, tail.iter().map(|s| (*s).to_owned()));
}

/// [`nested::PINNED_CONFIG`] as `-c` options right before the subcommand: after the
/// agent's own `-c` options, so they win. `args` starts with `c`'s global options. Not for
/// `git --version` / `-h` alone, which has no subcommand to put them before (after
/// `--version`, git reads `-c` as an option of `git version`) and walks nothing.
pub(super) fn pin_config(c: &Checked, args: &mut Vec<String>) {
    if c.subcommand.is_empty() {
        return;
    }
    let at = c.sub_index.min(args.len());
    args.splice(at..at, nested::pinned_args());
}

/// Add the row's hardening options after the subcommand ([`Checked::harden`]: `--no-ext-diff`,
/// `--no-textconv`); `git remote show` never queries the remote (`-n`): its listing would
/// include other sandboxes' branches.
pub(super) fn harden_args(c: &Checked, args: &mut Vec<String>) {
    // `git submodule` is a shell script, and a shell drops the split identity (docs/design.md §5):
    // its status is the builtin helper's.
    if c.subcommand == "submodule" {
        if let Some(&p) = c.operands.first()
            && args.get(p).is_some_and(|a| a == "status")
        {
            args.remove(p);
        }
        args[c.sub_index] = "submodule--helper".to_owned();
        args.insert(c.sub_index + 1, "status".to_owned());
        return;
    }
    if c.subcommand == "remote"
        && let Some(&p) = c.operands.first()
        && args.get(p).is_some_and(|a| a == "show")
    {
        args.insert(p + 1, "-n".to_owned());
        return;
    }
    if args.get(c.sub_index) == Some(&c.subcommand) {
        for (i, e) in c.harden.iter().enumerate() {
            args.insert(c.sub_index + 1 + i, (*e).to_owned());
        }
    }
}

/// `git apply --index` / `--3way` compare the work tree with the index by its stat data:
/// a file changed and changed back since the index was written looks changed ("does not
/// match index") unless the index is refreshed first.
pub(super) fn needs_fresh_index(c: &Checked) -> bool {
    c.subcommand == "apply"
        && c.argv[c.sub_index + 1..]
            .iter()
            .take_while(|a| *a != "--")
            .any(|a| a == "--index" || a == "--3way" || a == "-3")
}

/// `git bisect <step> ...` as git-bisect.sh (git < 2.40) runs it, without the shell:
/// `bisect--helper state <verdict> ...` for bad, good, new and old (the policy admits no
/// custom terms), `bisect--helper <step> ...` for the rest.
pub(super) fn bisect_helper(c: &Checked, args: &mut Vec<String>) {
    let Some(step) = args.get(c.sub_index + 1) else {
        return;
    };
    let verdict = ["bad", "good", "new", "old"].contains(&step.as_str());
    args[c.sub_index] = "bisect--helper".to_owned();
    if verdict {
        args.insert(c.sub_index + 1, "state".to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argv::{self, Class};

    fn checked(s: &str) -> Checked {
        let argv: Vec<String> = s.split(' ').map(str::to_owned).collect();
        argv::check(&argv).unwrap()
    }

    #[test]
    fn fetch_options_keep_their_values_and_operands_are_found() {
        let c = checked("--no-pager fetch --depth 1 -v origin -- main");
        assert_eq!(global_and_sub(&c), ["--no-pager", "fetch"]);
        let (options, operands) = split_operands(&c);
        assert_eq!(options, ["--depth", "1", "-v"]);
        assert_eq!(operands, ["origin", "main"]);
        let c = checked("pull -X ours --rebase origin sandbox/nstest/x");
        let (options, operands) = split_operands(&c);
        assert_eq!(options, ["-X", "ours", "--rebase"]);
        assert_eq!(operands, ["origin", "sandbox/nstest/x"]);
        let c = checked("ls-remote --heads --sort=-refname origin sandbox/*");
        assert_eq!(c.class, Class::ListRemote);
        assert_eq!(split_operands(&c).1, ["origin", "sandbox/*"]);
    }

    #[test]
    fn bisect_steps_run_as_the_helper_of_a_scripted_bisect() {
        let run = |s: &str| {
            let c = checked(s);
            let mut args = c.argv.clone();
            bisect_helper(&c, &mut args);
            args.join(" ")
        };
        assert_eq!(
            run("bisect start HEAD v1.0"),
            "bisect--helper start HEAD v1.0"
        );
        assert_eq!(run("bisect bad"), "bisect--helper state bad");
        assert_eq!(run("bisect good v1.0"), "bisect--helper state good v1.0");
        assert_eq!(run("bisect reset"), "bisect--helper reset");
        assert_eq!(run("bisect log"), "bisect--helper log");
        assert_eq!(
            run("-c color.ui=never bisect skip"),
            "-c color.ui=never bisect--helper skip"
        );
    }

    #[test]
    fn apply_to_the_index_refreshes_it_first() {
        // The shim sends the patch on standard input: no file operand reaches the API.
        assert!(needs_fresh_index(&checked("apply --index")));
        assert!(needs_fresh_index(&checked("apply -3")));
        assert!(!needs_fresh_index(&checked("apply --cached")));
        assert!(!needs_fresh_index(&checked("apply --check")));
        assert!(!needs_fresh_index(&checked("status --short")));
    }

    #[test]
    fn diff_programs_and_textconv_are_off_where_git_would_run_them() {
        for (s, want) in [
            ("diff HEAD", "diff --no-ext-diff --no-textconv HEAD"),
            (
                "--no-pager log -p",
                "--no-pager log --no-ext-diff --no-textconv -p",
            ),
            ("show HEAD", "show --no-ext-diff --no-textconv HEAD"),
            (
                "diff-tree -r HEAD",
                "diff-tree --no-ext-diff --no-textconv -r HEAD",
            ),
            (
                "diff-index HEAD",
                "diff-index --no-ext-diff --no-textconv HEAD",
            ),
            ("diff-files", "diff-files --no-ext-diff --no-textconv"),
            ("grep -n x", "grep --no-textconv -n x"),
            ("blame f", "blame --no-textconv f"),
            ("stash show -p", "stash show -p"),
            ("status --short", "status --short"),
        ] {
            let c = checked(s);
            let mut args = c.argv.clone();
            harden_args(&c, &mut args);
            assert_eq!(args.join(" "), want);
        }
    }

    #[test]
    fn remote_show_never_queries_the_remote() {
        for (s, want) in [
            ("remote show origin", "remote show -n origin"),
            ("remote -v show origin", "remote -v show -n origin"),
            ("remote -v", "remote -v"),
        ] {
            let c = checked(s);
            let mut args = c.argv.clone();
            harden_args(&c, &mut args);
            assert_eq!(args.join(" "), want);
        }
    }

    #[test]
    fn submodule_status_runs_the_builtin_helper_not_the_shell_script() {
        for (s, want) in [
            ("submodule", "submodule--helper status"),
            ("submodule status", "submodule--helper status"),
            (
                "submodule --cached status",
                "submodule--helper status --cached",
            ),
            ("submodule status -- x", "submodule--helper status -- x"),
        ] {
            let c = checked(s);
            let mut args = c.argv.clone();
            harden_args(&c, &mut args);
            assert_eq!(args.join(" "), want);
        }
    }
}
