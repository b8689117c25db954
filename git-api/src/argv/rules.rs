//! The rules a subcommand's parsed arguments go through after the allowlist, chosen by the
//! [`Rule`] column of its row: a message is required where git would open an editor, `-F`
//! reads standard input, merge strategies are built-in ones, `remote`, `stash` and `reflog`
//! stay read-only where they must, and the plumbing and patch forms are judged by
//! [`crate::plumbing`] and [`crate::patch`].

use super::config;
use super::parse::{Arg, Parsed, has};
use super::refusal::{Refusal, Why};
use super::table::{Class, Rule, Sub};
use airlock_wire::Reason;

/// What the rules add to an allowed invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct After {
    /// git may take its prepared message as is (`GIT_EDITOR=true`).
    pub(super) editor_true: bool,
    /// A `git config` that writes.
    pub(super) config_writes: bool,
    /// The class the invocation runs in, when the rule decides it (a `git remote` verb
    /// that writes the configuration runs as [`Class::Write`]); `None`: the row's.
    pub(super) class: Option<Class>,
}

/// What the subcommand's own rule (its row's [`Rule`]) says about its options and operands.
/// `editor_true` comes in from `-c core.editor=true` and may be set by the rule.
pub(super) fn check_sub(sub: &Sub, parsed: &Parsed, editor_true: bool) -> Result<After, Refusal> {
    let (args, operands) = (parsed.args.as_slice(), parsed.operands.as_slice());
    let mut after = After {
        editor_true,
        config_writes: false,
        class: None,
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
        Rule::Remote => after.class = remote(args, operands)?,
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

/// `git remote`: the listing, `show` and `get-url` read; `add` (and, for a remote the agent
/// added, `set-url`, `rename`, `remove`: the server checks whose it is) write a remote of
/// an https repository the sandbox may fetch from but never push to
/// ([`crate::url::readable_url`]). They write nothing but `remote.<name>.url` and
/// `.fetch`: a remote's program-valued keys (`uploadpack`, `receivepack`, `vcs`, `proxy`)
/// stay impossible, as every `remote.*` key is to `git config`. The class they run in.
fn remote(args: &[Arg], operands: &[String]) -> Result<Option<Class>, Refusal> {
    let verb = operands.first().map(String::as_str);
    let refuse = |why: String| Err(Refusal::new(Reason::SubcommandNotAllowed, why));
    let usage = |form: &str| {
        Refusal::new(
            Reason::SubcommandNotAllowed,
            format!("git remote {form} is the form the git API runs"),
        )
    };
    match verb {
        None | Some("show" | "get-url") => {
            if has(args, &["t", "tags", "no-tags", "f"]) {
                return refuse("those options belong to git remote add".into());
            }
            Ok(None)
        }
        Some("add") => {
            let [_, name, url] = operands else {
                return Err(usage(
                    "add [-t <branch>] [--no-tags] <name> <https://host/owner/repo>",
                ));
            };
            if has(args, &["f"]) {
                return refuse(format!(
                    "git remote add -f fetches with git's own fetch, which the git API does not \
                     run: add the remote, then git fetch {name}"
                ));
            }
            remote_name(name)?;
            for t in args.iter().filter(|a| a.name == "t") {
                let b = t.value.as_deref().unwrap_or("");
                if !plain_branch(b) {
                    return refuse(format!("git remote add -t {b:?}: name one branch"));
                }
            }
            readable(url)?;
            Ok(Some(Class::Write))
        }
        Some("set-url") => {
            if has(args, &["push"]) {
                return refuse(
                    "git remote set-url --push is refused: where a push goes is the operator's \
                     configuration"
                        .into(),
                );
            }
            let [_, name, url] = operands else {
                return Err(usage("set-url <name> <https://host/owner/repo>"));
            };
            remote_name(name)?;
            readable(url)?;
            only_flags(args, "set-url")?;
            Ok(Some(Class::Write))
        }
        Some("rename") => {
            let [_, old, new] = operands else {
                return Err(usage("rename <old> <new>"));
            };
            remote_name(old)?;
            remote_name(new)?;
            only_flags(args, "rename")?;
            Ok(Some(Class::Write))
        }
        Some("remove" | "rm") => {
            let [_, name] = operands else {
                return Err(usage("remove <name>"));
            };
            remote_name(name)?;
            only_flags(args, "remove")?;
            Ok(Some(Class::Write))
        }
        Some("update") => refuse(
            "git remote update is refused: git fetch --all (or git fetch <name>) fetches the same"
                .into(),
        ),
        Some(other) => refuse(format!(
            "git remote {other} is refused: `git remote -v`, `show`, `get-url` and `add` \
             (a remote the sandbox fetches from) are allowed; remotes the agent added can be \
             renamed, re-pointed and removed"
        )),
    }
}

/// No option but the listing's `-v` with a writing verb.
fn only_flags(args: &[Arg], verb: &str) -> Result<(), Refusal> {
    match args.iter().find(|a| a.name != "v" && a.name != "verbose") {
        None => Ok(()),
        Some(a) => Err(Refusal::new(
            Reason::OptionNotAllowed,
            format!("git remote {verb} takes no option -{}", a.name),
        )),
    }
}

/// A remote's name: letters, digits, `.`, `_`, `-`, not starting with `-` or `.`.
fn remote_name(name: &str) -> Result<(), Refusal> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['-', '.'])
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain {
        Ok(())
    } else {
        Err(Refusal::new(
            Reason::SubcommandNotAllowed,
            format!(
                "{:?} is not a remote name the git API writes: use letters, digits, '.', '_' and '-'",
                name.escape_debug().to_string()
            ),
        ))
    }
}

/// One branch name as `-t` takes it: no pattern, refspec or revision syntax.
fn plain_branch(b: &str) -> bool {
    !b.is_empty()
        && !b.starts_with(['-', '/'])
        && !b.contains("..")
        && !b.chars().any(|c| c.is_control() || " :*?[\\^~".contains(c))
}

/// A URL a remote the sandbox reads may have.
fn readable(url: &str) -> Result<(), Refusal> {
    crate::url::readable_url(url).map(|_| ()).map_err(|why| {
        Refusal::new(
            Reason::RepositoryNotAuthorized,
            format!("{:?} is refused: {why}", url.escape_debug().to_string()),
        )
    })
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
            "reflog expire --all",
            "reflog delete HEAD@{1}",
            "remote prune origin",
            "remote set-head origin main",
            "remote set-branches origin main",
            "remote update",
        ] {
            assert_eq!(refused(s).reason, Reason::SubcommandNotAllowed, "{s}");
        }
    }

    #[test]
    fn a_remote_is_added_only_for_a_repository_the_sandbox_can_read() {
        use crate::argv::Class;
        for s in [
            "remote add upstream https://github.com/other/app.git",
            "remote add upstream git@github.com:other/app.git",
            "remote add -t main --no-tags up-2 https://github.com/other/app",
            "remote set-url upstream https://github.com/other/app2",
            "remote rename upstream theirs",
            "remote remove upstream",
            "remote rm upstream",
        ] {
            assert_eq!(ok(s).class, Class::Write, "{s}");
        }
        assert_eq!(ok("remote -v").class, Class::Read);
        for s in [
            "remote add x /tmp/repo",
            "remote add x ../repo",
            "remote add x file:///tmp/repo",
            "remote add x ext::sh%20-c%20id",
            "remote add x https://user:pw@github.com/o/r",
            "remote add x https://token@github.com/o/r",
            "remote add x http://github.com/o/r",
            "remote set-url x /tmp/repo",
        ] {
            assert_eq!(refused(s).reason, Reason::RepositoryNotAuthorized, "{s}");
        }
        for s in [
            "remote add -f x https://github.com/o/r",
            "remote add x",
            "remote add -- -x https://github.com/o/r",
            "remote add x.. https://github.com/o/r",
            "remote add -t a:b x https://github.com/o/r",
            "remote set-url --push origin https://github.com/o/r",
            "remote rename origin",
        ] {
            assert_eq!(refused(s).reason, Reason::SubcommandNotAllowed, "{s}");
        }
        for s in [
            "remote add --mirror=fetch x https://github.com/o/r",
            "remote set-url --add x https://github.com/o/r",
            "remote set-url --delete x https://github.com/o/r",
            "remote add --upload-pack=x x https://github.com/o/r",
        ] {
            let r = refused(s);
            assert!(
                matches!(r.reason, Reason::OptionNotAllowed | Reason::OptionRefused),
                "{s}: {r:?}"
            );
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
