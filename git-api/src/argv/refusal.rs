//! A refusal: the wire's reason code and the one line the agent reads; and [`Why`], the
//! closed set of reasons an option is refused, which picks the code.

use airlock_wire::Reason;
use std::fmt;

/// A refusal: the reason code and a message naming the rule and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable code.
    pub reason: Reason,
    /// One line for the agent.
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(reason: Reason, message: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            message: message.into(),
        }
    }
}

macro_rules! whys {
    ($( $(#[$doc:meta])* $variant:ident => $text:literal, )*) => {
        /// Why an option is refused: each variant's text is what the agent reads after "is
        /// refused by the git API: ". `as_str` is stable (never change an existing string);
        /// the wire code follows from the variant ([`Why::reason`]), never from the text.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Why {
            $( $(#[$doc])* $variant, )*
        }

        impl Why {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Why] = &[ $( Why::$variant, )* ];

            /// The stable text.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self { $( Why::$variant => $text, )* }
            }
        }
    };
}

whys! {
    /// `--upload-pack`, `--receive-pack`.
    RemoteProgram => "runs a program of the caller's choosing on the remote side",
    /// `--exec`, `rebase -x`.
    CallersProgram => "runs a program of the caller's choosing",
    /// `--exec-path`.
    ExecPath => "changes where git finds the programs it runs",
    /// `--git-dir`, `--separate-git-dir`, `--namespace`.
    Repository => "the repository is chosen by the git API, not the caller",
    /// `--work-tree`.
    WorkTree => "the work tree is chosen by the git API, not the caller",
    /// `--config-env`.
    Configuration => "configuration is fixed by the git API",
    /// `--template`.
    Hooks => "templates can install hooks",
    /// `--super-prefix`, `--list-cmds`.
    Internal => "internal option",
    /// `--output`, `--build-fake-ancestor`.
    WritesFile => "writes a file chosen by the caller",
    /// `--output-directory`.
    WritesFiles => "writes files chosen by the caller",
    /// `format-patch -o`.
    ShimWrites => "writes files chosen by the caller; the shim writes them",
    /// `--ext-diff`.
    ExtDiff => "runs an external diff program",
    /// `--textconv`.
    Textconv => "runs a textconv filter program",
    /// `--no-index`.
    NoIndex => "reads files outside the repository; the shim runs git diff --no-index itself, as you",
    /// `--pathspec-from-file`.
    PathspecFile => "reads a file chosen by the caller; pass the paths as arguments",
    /// `--contents`, `--exclude-from`, `blame -S`, `ls-files -X`.
    ReadsFile => "reads a file chosen by the caller",
    /// `--description-file`.
    DescriptionFile => "reads a file chosen by the caller; put the text in the branch description or the cover letter",
    /// `--signature-file`.
    SignatureFile => "reads a file chosen by the caller; use --signature=<text>",
    /// `grep -f`.
    PatternsFile => "reads patterns from a file; pass them with -e",
    /// `--open-files-in-pager`, `grep -O`.
    Program => "runs a program",
    /// `--recurse-submodules`.
    Submodules => "submodules are not run by the git API",
    /// `--gpg-sign`, `-S`.
    Signing => "runs gpg; signing is not available in the sandbox",
    /// `--interactive`, `--patch`, `-i`, `-p`; the one reason with its own code.
    Interactive => "interactive modes need a terminal the git API does not have",
    /// `--edit`, `-e`.
    Editor => "opens an editor the git API does not have; pass -m or -F",
    /// `--edit-todo`, `--edit-description`.
    EditorNoMessage => "opens an editor the git API does not have",
    /// `--reedit-message`.
    ReeditMessage => "opens an editor the git API does not have; use -C",
    /// `commit -t`.
    Template => "templates are not available; pass -m or -F",
    /// `--attr-source`.
    AttrSource => "attributes are read from the work tree only",
    /// `--unsafe-paths`.
    UnsafePaths => "patches are applied inside the workspace only",
    /// `push -f`.
    Force => "force pushes are refused: push a new commit on top instead",
    /// `push -d`.
    RemoteDelete => "deleting remote branches is refused",
}

impl Why {
    /// The wire code of a refusal for this reason: an interactive mode has its own.
    #[must_use]
    pub const fn reason(self) -> Reason {
        match self {
            Why::Interactive => Reason::InteractiveRefused,
            _ => Reason::OptionRefused,
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts agents read (and tests elsewhere match): pinned, one per reason.
    #[test]
    fn every_why_keeps_its_text_and_only_interactive_has_its_own_code() {
        let pinned = [
            (
                Why::RemoteProgram,
                "runs a program of the caller's choosing on the remote side",
            ),
            (
                Why::CallersProgram,
                "runs a program of the caller's choosing",
            ),
            (
                Why::ExecPath,
                "changes where git finds the programs it runs",
            ),
            (
                Why::Repository,
                "the repository is chosen by the git API, not the caller",
            ),
            (
                Why::WorkTree,
                "the work tree is chosen by the git API, not the caller",
            ),
            (Why::Configuration, "configuration is fixed by the git API"),
            (Why::Hooks, "templates can install hooks"),
            (Why::Internal, "internal option"),
            (Why::WritesFile, "writes a file chosen by the caller"),
            (Why::WritesFiles, "writes files chosen by the caller"),
            (
                Why::ShimWrites,
                "writes files chosen by the caller; the shim writes them",
            ),
            (Why::ExtDiff, "runs an external diff program"),
            (Why::Textconv, "runs a textconv filter program"),
            (
                Why::NoIndex,
                "reads files outside the repository; the shim runs git diff --no-index itself, as you",
            ),
            (
                Why::PathspecFile,
                "reads a file chosen by the caller; pass the paths as arguments",
            ),
            (Why::ReadsFile, "reads a file chosen by the caller"),
            (
                Why::DescriptionFile,
                "reads a file chosen by the caller; put the text in the branch description or the cover letter",
            ),
            (
                Why::SignatureFile,
                "reads a file chosen by the caller; use --signature=<text>",
            ),
            (
                Why::PatternsFile,
                "reads patterns from a file; pass them with -e",
            ),
            (Why::Program, "runs a program"),
            (Why::Submodules, "submodules are not run by the git API"),
            (
                Why::Signing,
                "runs gpg; signing is not available in the sandbox",
            ),
            (
                Why::Interactive,
                "interactive modes need a terminal the git API does not have",
            ),
            (
                Why::Editor,
                "opens an editor the git API does not have; pass -m or -F",
            ),
            (
                Why::EditorNoMessage,
                "opens an editor the git API does not have",
            ),
            (
                Why::ReeditMessage,
                "opens an editor the git API does not have; use -C",
            ),
            (Why::Template, "templates are not available; pass -m or -F"),
            (
                Why::AttrSource,
                "attributes are read from the work tree only",
            ),
            (
                Why::UnsafePaths,
                "patches are applied inside the workspace only",
            ),
            (
                Why::Force,
                "force pushes are refused: push a new commit on top instead",
            ),
            (Why::RemoteDelete, "deleting remote branches is refused"),
        ];
        assert_eq!(pinned.len(), Why::ALL.len());
        for (why, text) in pinned {
            assert_eq!(why.as_str(), text);
            assert_eq!(why.to_string(), text);
        }
        let mut seen = std::collections::HashSet::new();
        for why in Why::ALL {
            assert!(seen.insert(why.as_str()), "{why:?} shares its text");
            let code = if *why == Why::Interactive {
                Reason::InteractiveRefused
            } else {
                Reason::OptionRefused
            };
            assert_eq!(why.reason(), code, "{why:?}");
        }
    }
}
