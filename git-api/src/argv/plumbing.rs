//! The read-only and orientation forms of commands whose other forms write or run things:
//! `symbolic-ref <ref>` (reading), `worktree list`, `submodule status`, `bisect` without
//! `run`, `notes` listing and showing, `archive` to standard output, `gc --auto`.
//!
//! Pure, like [`crate::argv`]: the operands decide. `bisect run` is refused here because it
//! would run the agent's command inside the git API; the shim runs that loop itself, as
//! the agent, sending `bisect good`/`bad`/`skip` after each run.

use super::parse::Arg;
use super::refusal::Refusal;
use airlock_wire::Reason;

fn refuse(message: String) -> Result<(), Refusal> {
    Err(Refusal::new(Reason::SubcommandNotAllowed, message))
}

/// Judge the verb (the first argument that is not an option) of a command whose verbs
/// write or run things, before its options: `notes add -m x` is refused as `notes add`.
pub(crate) fn check_verb(sub: &str, rest: &[String]) -> Result<(), Refusal> {
    let first = rest
        .iter()
        .map(String::as_str)
        .find(|a| !a.starts_with('-'));
    match sub {
        "worktree" => match first {
            Some("list") => Ok(()),
            other => refuse(format!(
                "git worktree {} is refused: worktrees are not supported in the sandbox (their \
                 git dir would be outside the workspace); git worktree list works, and git \
                 switch or git stash change what the work tree holds",
                other.unwrap_or("")
            )),
        },
        "submodule" => match first {
            None | Some("status") => Ok(()),
            Some(other) => refuse(format!(
                "git submodule {other} is refused: submodules are not fetched or run by the git \
                 API; git submodule status works"
            )),
        },
        "bisect" => bisect(first),
        "notes" => match first {
            None
            | Some("list" | "show" | "get-ref" | "add" | "append" | "copy" | "remove" | "prune") => {
                Ok(())
            }
            Some(other) => refuse(format!(
                "git notes {other} is refused: it opens an editor or merges notes refs; git \
                 notes add|append -m <text>, copy, remove, list and show work"
            )),
        },
        _ => Ok(()),
    }
}

/// Judge the operands of a plumbing command that passed its option allowlist.
pub(crate) fn check(sub: &str, args: &[Arg], operands: &[String]) -> Result<(), Refusal> {
    match sub {
        "notes"
            if matches!(operands.first().map(String::as_str), Some("add" | "append"))
                && !args
                    .iter()
                    .any(|a| ["m", "message", "C", "reuse-message"].contains(&a.name.as_str())) =>
        {
            refuse(
                "git notes add/append without -m opens an editor the git API does not have; \
                 pass -m <text> (or -C <blob>)"
                    .to_owned(),
            )
        }
        "symbolic-ref" => symbolic_ref(operands),
        "worktree" if operands.len() != 1 => check_verb(sub, &[String::new()]),
        "gc" => {
            if args.iter().any(|a| a.name == "auto") {
                Ok(())
            } else {
                refuse(
                    "git gc is refused: housekeeping is the operator's and nothing needs it in \
                     the sandbox; git gc --auto is accepted and does nothing"
                        .to_owned(),
                )
            }
        }
        _ => Ok(()),
    }
}

fn symbolic_ref(operands: &[String]) -> Result<(), Refusal> {
    if operands.len() == 1 {
        return Ok(());
    }
    refuse(
        "git symbolic-ref reads one ref here (git symbolic-ref --short HEAD, or git rev-parse \
         --abbrev-ref HEAD); to change the branch HEAD names, run git switch <branch>"
            .to_owned(),
    )
}

fn bisect(first: Option<&str>) -> Result<(), Refusal> {
    match first {
        Some("run") => refuse(
            "git bisect run is not run inside the git API (it would run your command there); \
             the git shim runs the loop itself, as you: git bisect run <command> through the \
             shim, or git bisect good/bad after running the test yourself"
                .to_owned(),
        ),
        Some("replay") => refuse(
            "git bisect replay reads a file chosen by the caller; repeat the good/bad steps \
             instead"
                .to_owned(),
        ),
        Some("visualize" | "view") => refuse(
            "git bisect visualize runs a viewer; git bisect log, or git log --oneline \
             refs/bisect/bad, shows the state"
                .to_owned(),
        ),
        None
        | Some(
            "start" | "good" | "bad" | "new" | "old" | "skip" | "reset" | "log" | "terms" | "next"
            | "help",
        ) => Ok(()),
        Some(other) => refuse(format!(
            "git bisect {other} is not a bisect step the git API knows; use start, good, bad, \
             skip, reset, log or terms"
        )),
    }
}
