//! The rules a subcommand's parsed arguments go through after the allowlist, chosen by the
//! [`Rule`] column of its row: a message is required where git would open an editor, `-F`
//! reads standard input, merge strategies are built-in ones, `remote`, `stash` and `reflog`
//! stay read-only where they must, and the plumbing and patch forms are judged by
//! [`crate::plumbing`] and [`crate::patch`].

use super::config;
use super::parse::{Arg, Parsed, has};
use super::refusal::{Refusal, Why};
use super::table::{Rule, Sub};
use airlock_wire::Reason;

/// What the rules add to an allowed invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct After {
    /// git may take its prepared message as is (`GIT_EDITOR=true`).
    pub(super) editor_true: bool,
    /// A `git config` that writes.
    pub(super) config_writes: bool,
}

/// What the subcommand's own rule (its row's [`Rule`]) says about its options and operands.
/// `editor_true` comes in from `-c core.editor=true` and may be set by the rule.
pub(super) fn check_sub(sub: &Sub, parsed: &Parsed, editor_true: bool) -> Result<After, Refusal> {
    let (args, operands) = (parsed.args.as_slice(), parsed.operands.as_slice());
    let mut after = After {
        editor_true,
        config_writes: false,
    };
    match sub.rule {
        Rule::None => {}
        Rule::Config => after.config_writes = config::config(args, operands)?,
        Rule::Commit => {
            commit(args, editor_true)?;
            // `--no-edit` keeps the message git prepared (a merge's, a squash's).
            after.editor_true |= has(args, &["no-edit"]);
        }
        Rule::Tag => tag(args)?,
        Rule::Remote => remote(operands)?,
        Rule::Stash => stash(operands)?,
        Rule::Reflog => reflog(operands)?,
        Rule::Sequencer | Rule::Pull => {
            // After a conflict, `--continue` commits with the message git prepared: the
            // meaning of GIT_EDITOR=true, without an editor.
            after.editor_true |= has(args, &["continue"]);
            file_is_stdin(sub.name, args)?;
            strategy(sub.name, args)?;
            if sub.rule == Rule::Pull {
                pull_rebase(args)?;
            }
        }
        Rule::Plumbing => super::plumbing::check(sub.name, args, operands)?,
        Rule::Patch | Rule::Am => {
            super::patch::check(sub.name, args, operands)?;
            after.editor_true |= sub.rule == Rule::Am && has(args, &["continue", "r", "resolved"]);
        }
    }
    Ok(after)
}

fn file_is_stdin(sub: &str, args: &[Arg]) -> Result<(), Refusal> {
    for a in args.iter().filter(|a| a.name == "F" || a.name == "file") {
        if a.value.as_deref() != Some("-") {
            return Err(Refusal::new(
                Reason::OutsideWorkspace,
                format!(
                    "git {sub} -F must read standard input here (the shim sends the file's contents)"
                ),
            ));
        }
    }
    Ok(())
}

fn commit(args: &[Arg], editor_true: bool) -> Result<(), Refusal> {
    file_is_stdin("commit", args)?;
    // `--no-edit` (with or without --amend) or `-c core.editor=true`: git's prepared
    // message (a merge's, a conflicted pick's, the amended commit's) is kept as it is.
    let amend_no_edit = has(args, &["no-edit"]) || editor_true;
    let dry = has(
        args,
        &[
            "dry-run",
            "short",
            "porcelain",
            "long",
            "branch",
            "z",
            "null",
        ],
    );
    if !(has(
        args,
        &["m", "message", "F", "file", "C", "reuse-message", "fixup"],
    ) || amend_no_edit
        || dry)
    {
        return Err(Refusal::new(
            Reason::MessageRequired,
            "git commit needs a message here: the git API has no editor. Pass -m <message> \
             (or -F <file>, -C <commit>); after a merge or a conflict, git commit --no-edit \
             keeps the message git prepared",
        ));
    }
    if let Some(f) = args.iter().find(|a| a.name == "fixup") {
        let v = f.value.as_deref().unwrap_or("");
        if v.starts_with("amend:") || v.starts_with("reword:") {
            return Err(Refusal::new(
                Reason::MessageRequired,
                "git commit --fixup=amend:/reword: opens an editor the git API does not have",
            ));
        }
    }
    Ok(())
}

fn tag(args: &[Arg]) -> Result<(), Refusal> {
    file_is_stdin("tag", args)?;
    if has(args, &["a", "annotate"]) && !has(args, &["m", "message", "F", "file"]) {
        return Err(Refusal::new(
            Reason::MessageRequired,
            "git tag -a needs -m or -F here: the git API has no editor",
        ));
    }
    Ok(())
}

const STRATEGIES: &[&str] = &["ort", "recursive", "resolve", "octopus", "ours", "subtree"];

fn strategy(sub: &str, args: &[Arg]) -> Result<(), Refusal> {
    for a in args
        .iter()
        .filter(|a| a.name == "s" || a.name == "strategy")
    {
        let v = a.value.as_deref().unwrap_or("");
        if !STRATEGIES.contains(&v) {
            return Err(Refusal::new(
                Reason::OptionRefused,
                format!(
                    "git {sub} --strategy={v} is refused: a custom strategy runs a program; built-in ones are {}",
                    STRATEGIES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn pull_rebase(args: &[Arg]) -> Result<(), Refusal> {
    for a in args.iter().filter(|a| a.name == "r" || a.name == "rebase") {
        if matches!(a.value.as_deref(), Some("interactive" | "i")) {
            return Err(Refusal::new(
                Reason::InteractiveRefused,
                format!("git pull --rebase=interactive: {}", Why::Interactive),
            ));
        }
    }
    Ok(())
}

fn remote(operands: &[String]) -> Result<(), Refusal> {
    match operands.first().map(String::as_str) {
        None | Some("show" | "get-url") => Ok(()),
        Some(other) => Err(Refusal::new(
            Reason::SubcommandNotAllowed,
            format!(
                "git remote {other} is refused: remotes are configured by the operator; `git remote -v`, `show` and `get-url` are allowed"
            ),
        )),
    }
}

fn stash(operands: &[String]) -> Result<(), Refusal> {
    match operands.first().map(String::as_str) {
        None
        | Some(
            "push" | "pop" | "apply" | "list" | "show" | "drop" | "clear" | "branch" | "save"
            | "create" | "store",
        ) => Ok(()),
        Some(other) if !other.starts_with('-') && operands.len() == 1 => Err(Refusal::new(
            Reason::SubcommandNotAllowed,
            format!("git stash {other} is not a stash subcommand the git API runs"),
        )),
        Some(_) => Ok(()),
    }
}

fn reflog(operands: &[String]) -> Result<(), Refusal> {
    match operands.first().map(String::as_str) {
        Some("expire" | "delete" | "drop") => Err(Refusal::new(
            Reason::SubcommandNotAllowed,
            "git reflog expire/delete/drop is refused: the reflog is the record of what happened",
        )),
        _ => Ok(()),
    }
}
#[cfg(test)]
mod tests {
    use crate::argv::test_util::{ok, refused};
    use airlock_wire::Reason;

    #[test]
    fn remote_and_reflog_are_read_only() {
        ok("remote");
        ok("remote show origin");
        for s in [
            "remote add x https://e.example/x",
            "remote set-url origin x",
            "remote rename origin x",
            "reflog expire --all",
            "reflog delete HEAD@{1}",
        ] {
            assert_eq!(refused(s).reason, Reason::SubcommandNotAllowed, "{s}");
        }
    }

    #[test]
    fn conflicts_finish_with_the_prepared_message() {
        for s in [
            "rebase --continue",
            "merge --continue",
            "cherry-pick --continue",
            "revert --continue",
            "commit --no-edit",
            "-c core.editor=true commit",
            "-c core.editor=: commit",
            "commit --amend --no-edit",
        ] {
            assert!(ok(s).editor_true, "{s}");
        }
        for s in [
            "rebase main",
            "rebase --abort",
            "commit -m x",
            "merge x",
            "status",
        ] {
            assert!(!ok(s).editor_true, "{s}");
        }
        // Still no editor of the agent's choosing.
        assert_eq!(
            refused("-c core.editor=vi commit").reason,
            Reason::GlobalOptionRefused
        );
        assert_eq!(refused("commit -e -m x").reason, Reason::OptionRefused);
        let r = refused("commit");
        assert!(r.message.contains("--no-edit"), "{r:?}");
    }

    #[test]
    fn the_writing_and_running_forms_of_plumbing_are_refused_with_what_works() {
        for (s, hint) in [
            ("symbolic-ref HEAD refs/heads/x", "git switch"),
            ("symbolic-ref -d HEAD", "without it"),
            ("symbolic-ref -m x HEAD refs/heads/y", "without it"),
            ("worktree add /tmp/x", "worktree list"),
            ("worktree remove x", "worktree list"),
            ("submodule update", "submodule status"),
            ("submodule foreach sh", "submodule status"),
            ("bisect run make test", "as you"),
            ("bisect replay /tmp/log", "good/bad"),
            ("bisect visualize", "bisect log"),
            ("notes add", "pass -m"),
            ("notes append HEAD", "pass -m"),
            ("notes edit", "notes add|append -m"),
            ("notes merge x", "notes add|append -m"),
            ("gc", "--auto"),
            ("gc --aggressive", "without it"),
            ("gc --prune=now", "without it"),
            ("archive --remote=https://x/y HEAD", "without it"),
            ("archive -o /etc/x HEAD", "without it"),
            ("archive --output=/etc/x HEAD", "--output"),
            ("archive --exec=sh HEAD", "--exec"),
            ("hash-object -w x", "git add"),
            ("for-each-ref --stdin", "without it"),
        ] {
            let r = refused(s);
            assert!(r.message.contains(hint), "{s}: {r:?}");
            assert!(!r.message.contains("docker exec"), "{s}: {r:?}");
        }
    }

    #[test]
    fn notes_are_written_like_a_commit_message() {
        use crate::argv::Class;
        for s in [
            "notes add -m reviewed",
            "notes add -f -m again HEAD~1",
            "notes append -m more",
            "notes --ref=review add -m x",
            "notes add -C HEAD:README.md",
            "notes copy HEAD HEAD~1",
            "notes remove HEAD",
            "notes prune -n",
        ] {
            assert_eq!(ok(s).class, Class::Write, "{s}");
        }
        assert_eq!(ok("notes show HEAD").class, Class::Read);
        assert_eq!(refused("notes add -c HEAD").reason, Reason::OptionRefused);
    }

    #[test]
    fn patch_workflows_take_their_patch_on_stdin_and_stay_in_the_work_tree() {
        for s in [
            "apply",
            "apply -",
            "apply --check",
            "apply -R",
            "apply --index",
            "apply --cached -p1",
            "apply -p 0 --stat",
            "apply --3way",
            "am",
            "am -3",
            "am --abort",
            "am --continue",
            "am --skip",
            "format-patch --stdout -1",
            "format-patch --stdout -3 HEAD",
            "format-patch --stdout origin/main..HEAD",
            "format-patch --stdout --cover-letter --subject-prefix=PATCH\u{20}v2 -2",
        ] {
            ok(s);
        }
        assert!(ok("am --continue").editor_true);
        for (s, reason) in [
            ("apply /etc/shadow", Reason::OutsideWorkspace),
            ("apply ../x.patch", Reason::OutsideWorkspace),
            ("apply /proc/self/fd/3", Reason::OutsideWorkspace),
            ("apply --unsafe-paths", Reason::OptionRefused),
            ("apply --unsafe", Reason::OptionRefused),
            ("apply --directory=.git", Reason::OutsideWorkspace),
            ("apply --directory=sub/.GIT/", Reason::OutsideWorkspace),
            ("apply --build-fake-ancestor=/tmp/x", Reason::OptionRefused),
            ("am /tmp/x.mbox", Reason::OutsideWorkspace),
            ("am -i", Reason::InteractiveRefused),
            ("am --interactive", Reason::InteractiveRefused),
            ("am --gpg-sign", Reason::OptionRefused),
            ("format-patch -1", Reason::OptionRefused),
            ("format-patch -o /tmp -1", Reason::OptionRefused),
            (
                "format-patch --output-directory=/etc --stdout -1",
                Reason::OptionRefused,
            ),
            (
                "format-patch --output=/etc/x --stdout -1",
                Reason::OptionRefused,
            ),
            (
                "format-patch --stdout --signature-file=/etc/shadow -1",
                Reason::OptionRefused,
            ),
            (
                "format-patch --stdout --description-file=/etc/shadow -1",
                Reason::OptionRefused,
            ),
        ] {
            assert_eq!(refused(s).reason, reason, "{s}: {:?}", refused(s));
        }
    }
}
