//! What is refused wherever it appears, each with why and what works instead: long options
//! (and every abbreviation of them), global options, and subcommands.

use super::refusal::{Refusal, Why};
use super::table::{SUBS, find_sub};
use airlock_wire::Reason;

/// Long options refused wherever they appear, with why. An argument that abbreviates one of
/// them (`--upload-p`) is refused too.
pub(super) const REFUSED_LONG: &[(&str, Why)] = &[
    ("upload-pack", Why::RemoteProgram),
    ("receive-pack", Why::RemoteProgram),
    ("exec", Why::CallersProgram),
    ("exec-path", Why::ExecPath),
    ("git-dir", Why::Repository),
    ("work-tree", Why::WorkTree),
    ("separate-git-dir", Why::Repository),
    ("namespace", Why::Repository),
    ("config-env", Why::Configuration),
    ("template", Why::Hooks),
    ("super-prefix", Why::Internal),
    ("output", Why::WritesFile),
    ("output-directory", Why::WritesFiles),
    ("ext-diff", Why::ExtDiff),
    ("textconv", Why::Textconv),
    ("no-index", Why::NoIndex),
    ("pathspec-from-file", Why::PathspecFile),
    ("contents", Why::ReadsFile),
    ("ignore-revs-file", Why::ReadsFile),
    ("exclude-from", Why::ReadsFile),
    ("open-files-in-pager", Why::Program),
    ("recurse-submodules", Why::Submodules),
    ("gpg-sign", Why::Signing),
    ("signed", Why::Signing),
    ("sign", Why::Signing),
    ("interactive", Why::Interactive),
    ("patch", Why::Interactive),
    ("edit", Why::Editor),
    ("edit-todo", Why::EditorNoMessage),
    ("edit-description", Why::EditorNoMessage),
    ("reedit-message", Why::ReeditMessage),
    ("list-cmds", Why::Internal),
    ("attr-source", Why::AttrSource),
    ("unsafe-paths", Why::UnsafePaths),
    ("build-fake-ancestor", Why::WritesFile),
    ("description-file", Why::DescriptionFile),
    ("signature-file", Why::SignatureFile),
];

/// Global options (before the subcommand) that are refused, with why.
pub(super) const REFUSED_GLOBAL: &[(&str, &str)] = &[
    ("-C", "run git from the directory instead"),
    ("--bare", "the repository is chosen by the git API"),
    ("--html-path", "not available"),
    ("--man-path", "not available"),
    ("--info-path", "not available"),
    ("-p", "the shim pages locally"),
    ("--paginate", "the shim pages locally"),
];

/// git commands the git API does not run, each with why and what works instead.
const REFUSED_SUBS: &[(&str, &str)] = &[
    (
        "clone",
        "the workspace is already a clone; to clone another repository, clone it outside /workspace (in /tmp git runs natively)",
    ),
    (
        "init",
        "the workspace's repository is the operator's; git init in /tmp runs natively",
    ),
    (
        "filter-branch",
        "it rewrites history, which is never pushed; make new commits instead",
    ),
    (
        "filter-repo",
        "it rewrites history, which is never pushed; make new commits instead",
    ),
    (
        "replace",
        "replacement refs rewrite what history shows; make new commits instead",
    ),
    (
        "update-ref",
        "it moves refs behind git's back; use git branch -f <branch> <commit>, git reset or git switch",
    ),
    (
        "gc",
        "housekeeping is the operator's and nothing needs it in the sandbox; git gc --auto is accepted and does nothing",
    ),
    (
        "hash-object",
        "with -w it writes objects behind the index; git add stores a file (git hash-object \
         without -w prints its id, run by the shim as you)",
    ),
    (
        "repack",
        "housekeeping is the operator's; nothing needs it in the sandbox",
    ),
    (
        "prune",
        "housekeeping is the operator's; nothing needs it in the sandbox",
    ),
    (
        "maintenance",
        "housekeeping is the operator's; nothing needs it in the sandbox",
    ),
    (
        "fsck",
        "housekeeping is the operator's; git count-objects -v shows the object store",
    ),
    ("difftool", "it runs an external diff program; use git diff"),
    (
        "mergetool",
        "it runs an external merge program; edit the conflict markers, then git add <file> and --continue",
    ),
    (
        "send-email",
        "mail does not leave the sandbox; git format-patch writes the patches",
    ),
    (
        "request-pull",
        "it talks to remotes of the caller's choosing; push a sandbox branch and open a pull request",
    ),
    ("instaweb", "it runs a web server"),
    ("daemon", "it runs a server"),
    ("upload-pack", "internal transport command"),
    ("receive-pack", "internal transport command"),
    ("upload-archive", "internal transport command"),
    ("credential", "credentials belong to the proxy"),
    ("credential-store", "credentials belong to the proxy"),
    ("credential-cache", "credentials belong to the proxy"),
    (
        "bundle",
        "bundles read and write files outside the repository; push a sandbox branch instead",
    ),
    (
        "fast-import",
        "it writes objects and refs in bulk behind the policy's back",
    ),
    (
        "fast-export",
        "it exports the whole repository; git format-patch or git archive export what you need",
    ),
    (
        "submodule",
        "submodules are not run by the git API (git submodule status works)",
    ),
    (
        "worktree",
        "worktrees are not supported in the sandbox (git worktree list works); use git switch or git stash",
    ),
    ("sparse-checkout", "the work tree's shape is the operator's"),
    ("config-alias", "aliases are not expanded"),
    (
        "commit-tree",
        "it writes commits behind the policy's back; use git commit",
    ),
    (
        "mktree",
        "it writes objects behind the policy's back; use git commit",
    ),
    (
        "mktag",
        "it writes objects behind the policy's back; use git tag",
    ),
    (
        "unpack-objects",
        "it writes objects behind the policy's back",
    ),
    ("index-pack", "it writes objects behind the policy's back"),
    ("pack-objects", "housekeeping is the operator's"),
    ("remote-ext", "it runs a program"),
    ("shell", "it runs a program"),
    ("web--browse", "it runs a program"),
    (
        "help",
        "there are no manual pages in the sandbox; git <command> -h prints the usage",
    ),
];

/// The refusal of a subcommand that is not on the allowlist: why, and what works.
pub(super) fn unknown_subcommand(name: &str) -> Refusal {
    if let Some((_, why)) = REFUSED_SUBS.iter().find(|(n, _)| *n == name) {
        return Refusal::new(
            Reason::SubcommandNotAllowed,
            format!("git {name} is refused by the git API: {why}"),
        );
    }
    Refusal::new(
        Reason::SubcommandNotAllowed,
        format!(
            "git {name} is not a command the git API runs in the workspace (aliases are not \
             expanded; spell the command out). It runs: {}",
            SUBS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        ),
    )
}

/// Whether a refused subcommand name is one git ships or the git API knows (so a refusal of
/// it is a policy decision, not a missing tool). The server asks the filesystem for the rest.
#[must_use]
pub fn known_subcommand(name: &str) -> bool {
    find_sub(name).is_some() || REFUSED_SUBS.iter().any(|(n, _)| *n == name)
}

/// The refused option that `name` (without dashes) names or abbreviates.
pub(super) fn refused_long(name: &str) -> Option<(&'static str, Why)> {
    if name.is_empty() {
        return None;
    }
    REFUSED_LONG
        .iter()
        .find(|(full, _)| *full == name)
        .or_else(|| REFUSED_LONG.iter().find(|(full, _)| full.starts_with(name)))
        .copied()
}

pub(super) fn refused_message(written: &str, full: &str, why: Why) -> String {
    if written.trim_start_matches('-') == full {
        format!("--{full} is refused by the git API: {why}")
    } else {
        format!("{written} abbreviates --{full}, which is refused by the git API: {why}")
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::argv::test_util::{argv, ok, refused};
    use crate::argv::{check, subcommand_name};

    #[test]
    fn every_refused_long_option_and_each_prefix_of_it_is_refused() {
        for (full, _) in REFUSED_LONG {
            for len in 1..=full.len() {
                let prefix = &full[..len];
                for sub in ["fetch", "push", "pull", "rebase", "log", "commit", "add"] {
                    // An exact allowed name is that option, not an abbreviation (git
                    // matches exact names first): `log --exclude=` is not `--exclude-from`.
                    if find_sub(sub).unwrap().long(prefix).is_some() {
                        assert!(
                            !REFUSED_LONG.iter().any(|(f, _)| *f == prefix) || prefix == "patch"
                        );
                        continue;
                    }
                    let argv = vec![sub.to_owned(), format!("--{prefix}=x")];
                    let r = check(&argv).expect_err(&format!("{argv:?}"));
                    assert!(
                        matches!(
                            r.reason,
                            Reason::OptionRefused
                                | Reason::InteractiveRefused
                                | Reason::OptionNotAllowed
                        ),
                        "{argv:?}: {r:?}"
                    );
                    // The full name (and every prefix that no allowed option shares) names
                    // the refused option.
                    if len == full.len() {
                        assert!(r.message.contains(full), "{argv:?}: {r:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn upload_pack_and_friends_are_refused_with_their_name() {
        for (s, name) in [
            ("fetch --upload-pack=/tmp/x origin", "upload-pack"),
            ("fetch --upload-pack /tmp/x origin", "upload-pack"),
            ("fetch --upload-p=/tmp/x origin", "upload-pack"),
            ("fetch --up=/tmp/x origin", "upload-pack"),
            ("pull --upload-pack=x", "upload-pack"),
            ("push --receive-pack=x", "receive-pack"),
            ("push --rec=x", "receive-pack"),
            ("push --exec=x", "exec"),
            ("rebase --exec=make", "exec"),
            ("rebase --exe=make", "exec"),
            ("diff --ext-diff", "ext-diff"),
            ("log --textconv", "textconv"),
            ("diff --no-index /etc/passwd x", "no-index"),
            ("diff --output=/tmp/x", "output"),
            ("log --outp=/tmp/x", "output"),
            ("add --pathspec-from-file=/etc/x", "pathspec-from-file"),
            ("checkout --recurse-submodules main", "recurse-submodules"),
            ("commit --template=x -m y", "template"),
            ("commit --gpg-sign -m y", "gpg-sign"),
            ("blame --contents /etc/passwd x", "contents"),
            ("grep --open-files-in-pager=vi x", "open-files-in-pager"),
        ] {
            let r = refused(s);
            assert_eq!(r.reason, Reason::OptionRefused, "{s}: {r:?}");
            assert!(r.message.contains(&format!("--{name}")), "{s}: {r:?}");
        }
    }

    #[test]
    fn interactive_modes_are_refused() {
        for s in [
            "rebase -i main",
            "rebase --interactive main",
            "add -p",
            "add -i",
            "add --patch",
            "checkout -p",
            "reset -p",
            "restore -p x",
            "stash -p",
            "clean -i",
            "pull --rebase=interactive",
        ] {
            assert_eq!(refused(s).reason, Reason::InteractiveRefused, "{s}");
        }
        for s in [
            "add -e",
            "commit -e -m x",
            "commit --edit -m x",
            "config edit",
            "branch --edit-description",
        ] {
            let r = refused(s);
            assert!(
                matches!(r.reason, Reason::OptionRefused | Reason::InteractiveRefused),
                "{s}: {r:?}"
            );
        }
        assert_eq!(refused("rebase -x make main").reason, Reason::OptionRefused);
        assert_eq!(
            refused("rebase -ix make main").reason,
            Reason::InteractiveRefused
        );
    }

    #[test]
    fn editors_and_files_are_refused() {
        assert_eq!(refused("commit").reason, Reason::MessageRequired);
        assert_eq!(refused("commit -a").reason, Reason::MessageRequired);
        assert_eq!(
            refused("commit -F /etc/shadow").reason,
            Reason::OutsideWorkspace
        );
        assert_eq!(
            refused("commit --file=msg.txt").reason,
            Reason::OutsideWorkspace
        );
        assert_eq!(refused("commit -Fmsg").reason, Reason::OutsideWorkspace);
        assert_eq!(refused("tag -a v1").reason, Reason::MessageRequired);
        assert_eq!(refused("merge -F /x b").reason, Reason::OutsideWorkspace);
        assert_eq!(
            refused("merge -s ../../tmp/x b").reason,
            Reason::OptionRefused
        );
        assert_eq!(
            refused("merge --strategy=evil b").reason,
            Reason::OptionRefused
        );
        ok("merge -s ort b");
        assert_eq!(refused("grep -f /etc/passwd").reason, Reason::OptionRefused);
        assert_eq!(
            refused("ls-files -X /etc/passwd").reason,
            Reason::OptionRefused
        );
        assert_eq!(refused("blame -S /etc/x f").reason, Reason::OptionRefused);
    }

    #[test]
    fn unknown_subcommands_and_aliases_are_refused() {
        for s in [
            "clone x",
            "init",
            "filter-branch",
            "daemon",
            "upload-pack .",
            "bundle create x",
            "credential fill",
            "config-alias",
            "co main",
            "repack",
            "fsck",
            "update-ref refs/heads/main x",
            "send-email",
            "instaweb",
            "difftool",
            "mergetool",
        ] {
            assert_eq!(refused(s).reason, Reason::SubcommandNotAllowed, "{s}");
        }
    }

    #[test]
    fn every_refusal_says_why_and_what_works_instead() {
        let everything = [
            "clone https://x/y",
            "init",
            "gc",
            "filter-branch",
            "update-ref refs/heads/main HEAD",
            "difftool",
            "mergetool",
            "co main",
            "status --bogus",
            "status -Z",
            "config --system a.b c",
            "config --file=/tmp/x user.name x",
            "config core.pager less",
            "push --force",
            "push --all",
            "-c core.pager=less log",
        ];
        for s in everything {
            let r = refused(s);
            assert!(!r.message.contains("docker exec"), "{s}: {r:?}");
        }
        assert!(refused("clone x").message.contains("/tmp"));
        assert!(
            refused("co main")
                .message
                .contains("aliases are not expanded")
        );
        assert!(
            refused("config --system a.b c")
                .message
                .contains("git config <key> <value>")
        );
        assert!(refused("status -Z").message.contains("without it"));
        assert!(refused("mergetool").message.contains("git add"));
        assert!(known_subcommand("clone") && known_subcommand("status"));
        assert!(!known_subcommand("lfs"));
        assert_eq!(
            subcommand_name(&argv("-c a.b=lfs --no-pager lfs x")),
            Some("lfs")
        );
    }
}
