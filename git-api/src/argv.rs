//! The command policy: which git invocations the API runs, deny by default.
//!
//! An invocation is `[global options] <subcommand> [options and operands]`. Every option
//! must be on the subcommand's allowlist **exactly as written** (git's own abbreviation
//! of long options is refused here and disabled in the git we run). Options that would run
//! a program, read or write a file outside the workspace, change where git looks for its
//! repository, or need a terminal are refused with their own reason, as is every
//! abbreviation of them (`--up`, `--upload-p`, ... for `--upload-pack`).
//!
//! This module is pure: it neither runs git nor reads the repository. Push ref updates are
//! judged in [`crate::push`]; `git config` writes are judged here against
//! [`WRITABLE_CONFIG`].

use airlock_wire::Reason;

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

/// What the server must do around a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Reads the repository (runs concurrently with other reads, `GIT_OPTIONAL_LOCKS=0`).
    Read,
    /// May write the repository or the work tree (serialised by the repository lock).
    Write,
    /// Talks to a remote to fetch (`fetch`, `pull`): remote checked, then as `Write`.
    Fetch,
    /// `push`: judged by the push policy on its resolved ref updates.
    Push,
    /// `ls-remote`: remote checked, output filtered of other sandboxes' branches.
    ListRemote,
}

/// An allowed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The subcommand (`status`, `log`, ...); empty for `git --version`.
    pub subcommand: String,
    /// The full argv to run after the server's own options (global options included).
    pub argv: Vec<String>,
    /// Concurrency and policy class.
    pub class: Class,
    /// Whether the command writes output worth paging (the shim pages locally).
    pub pages: bool,
    /// Indices in `argv` of the subcommand's operands (not options, not option values).
    pub operands: Vec<usize>,
    /// Index in `argv` of the subcommand (after the global options and their values).
    pub sub_index: usize,
    /// Run git with `GIT_EDITOR=true`: the command keeps the message git prepared
    /// (`--continue` of a sequencer command, `commit --no-edit`, `-c core.editor=true`).
    pub editor_true: bool,
    /// One line for the agent's stderr before git runs (what the git API changed).
    pub notice: Option<String>,
}

/// Config keys `git config` may write (lowercase section and name; `*` is one subsection).
pub const WRITABLE_CONFIG: &[&str] = &[
    "user.name",
    "user.email",
    "pull.rebase",
    "pull.ff",
    "push.autosetupremote",
    "merge.conflictstyle",
    "rebase.autostash",
    "rebase.updaterefs",
    "color.ui",
    "core.quotepath",
    "init.defaultbranch",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
];

/// Long options refused wherever they appear, with why. An argument that abbreviates one of
/// them (`--upload-p`) is refused too.
const REFUSED_LONG: &[(&str, &str)] = &[
    (
        "upload-pack",
        "runs a program of the caller's choosing on the remote side",
    ),
    (
        "receive-pack",
        "runs a program of the caller's choosing on the remote side",
    ),
    ("exec", "runs a program of the caller's choosing"),
    ("exec-path", "changes where git finds the programs it runs"),
    (
        "git-dir",
        "the repository is chosen by the git API, not the caller",
    ),
    (
        "work-tree",
        "the work tree is chosen by the git API, not the caller",
    ),
    (
        "separate-git-dir",
        "the repository is chosen by the git API, not the caller",
    ),
    (
        "namespace",
        "the repository is chosen by the git API, not the caller",
    ),
    ("config-env", "configuration is fixed by the git API"),
    ("template", "templates can install hooks"),
    ("super-prefix", "internal option"),
    ("output", "writes a file chosen by the caller"),
    ("output-directory", "writes files chosen by the caller"),
    ("ext-diff", "runs an external diff program"),
    ("textconv", "runs a textconv filter program"),
    (
        "no-index",
        "reads files outside the repository; the shim runs git diff --no-index itself, as you",
    ),
    (
        "pathspec-from-file",
        "reads a file chosen by the caller; pass the paths as arguments",
    ),
    ("contents", "reads a file chosen by the caller"),
    ("ignore-revs-file", "reads a file chosen by the caller"),
    ("exclude-from", "reads a file chosen by the caller"),
    ("open-files-in-pager", "runs a program"),
    (
        "recurse-submodules",
        "submodules are not run by the git API",
    ),
    (
        "gpg-sign",
        "runs gpg; signing is not available in the sandbox",
    ),
    (
        "signed",
        "runs gpg; signing is not available in the sandbox",
    ),
    ("sign", "runs gpg; signing is not available in the sandbox"),
    (
        "interactive",
        "interactive modes need a terminal the git API does not have",
    ),
    (
        "patch",
        "interactive modes need a terminal the git API does not have",
    ),
    (
        "edit",
        "opens an editor the git API does not have; pass -m or -F",
    ),
    ("edit-todo", "opens an editor the git API does not have"),
    (
        "edit-description",
        "opens an editor the git API does not have",
    ),
    (
        "reedit-message",
        "opens an editor the git API does not have; use -C",
    ),
    ("list-cmds", "internal option"),
    ("attr-source", "attributes are read from the work tree only"),
    (
        "unsafe-paths",
        "patches are applied inside the workspace only",
    ),
    ("build-fake-ancestor", "writes a file chosen by the caller"),
    (
        "description-file",
        "reads a file chosen by the caller; put the text in the branch description or the cover letter",
    ),
    (
        "signature-file",
        "reads a file chosen by the caller; use --signature=<text>",
    ),
];

/// Global options (before the subcommand) that are refused, with why.
const REFUSED_GLOBAL: &[(&str, &str)] = &[
    ("-C", "run git from the directory instead"),
    ("--bare", "the repository is chosen by the git API"),
    ("--html-path", "not available"),
    ("--man-path", "not available"),
    ("--info-path", "not available"),
    ("-p", "the shim pages locally"),
    ("--paginate", "the shim pages locally"),
];

/// Global options that are allowed before the subcommand.
const ALLOWED_GLOBAL: &[&str] = &[
    "--no-pager",
    "-P",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-optional-locks",
    "--no-replace-objects",
    "--version",
    "-h",
    "--help",
];

// Option specs: `|`-separated names (one character = short, longer = long without `--`);
// a trailing `=` means the option takes a value (attached or next argument), `?` an
// optional value that must be attached (`--color=always`, `-M50%`).

const DIFF: &[&str] = &[
    "p|patch",
    "u",
    "s|no-patch",
    "U|unified?",
    "output-indicator-new=",
    "output-indicator-old=",
    "output-indicator-context=",
    "raw",
    "patch-with-raw",
    "t",
    "indent-heuristic",
    "no-indent-heuristic",
    "minimal",
    "patience",
    "histogram",
    "anchored=",
    "diff-algorithm=",
    "stat?",
    "stat-width=",
    "stat-name-width=",
    "stat-count=",
    "compact-summary",
    "numstat",
    "shortstat",
    "X|dirstat?",
    "cumulative",
    "dirstat-by-file?",
    "summary",
    "patch-with-stat",
    "z",
    "name-only",
    "name-status",
    "submodule?",
    "color?",
    "no-color",
    "color-moved?",
    "no-color-moved",
    "color-moved-ws=",
    "no-color-moved-ws",
    "word-diff?",
    "word-diff-regex=",
    "color-words?",
    "no-renames",
    "rename-empty",
    "no-rename-empty",
    "check",
    "ws-error-highlight=",
    "full-index",
    "binary",
    "abbrev?",
    "B|break-rewrites?",
    "M|find-renames?",
    "C|find-copies?",
    "find-copies-harder",
    "D|irreversible-delete",
    "l=",
    "diff-filter=",
    "S=",
    "G=",
    "find-object=",
    "pickaxe-all",
    "pickaxe-regex",
    "skip-to=",
    "rotate-to=",
    "R",
    "relative?",
    "no-relative",
    "a|text",
    "ignore-cr-at-eol",
    "ignore-space-at-eol",
    "b|ignore-space-change",
    "w|ignore-all-space",
    "ignore-blank-lines",
    "I|ignore-matching-lines=",
    "inter-hunk-context=",
    "W|function-context",
    "exit-code",
    "quiet",
    "no-ext-diff",
    "no-textconv",
    "ignore-submodules?",
    "src-prefix=",
    "dst-prefix=",
    "no-prefix",
    "default-prefix",
    "line-prefix=",
    "ita-invisible-in-index",
    "cached",
    "staged",
    "merge-base",
    "1|base",
    "2|ours",
    "3|theirs",
    "0",
    "c",
    "cc",
    "m",
    "diff-merges=",
    "no-diff-merges",
    "combined-all-paths",
    "dd",
    "remerge-diff",
    "follow",
];

/// Options of diff-tree, diff-index and diff-files beyond [`DIFF`] (no `--stdin`: the
/// commits are operands).
const DIFF_PLUMBING: &[&str] = &[
    "r",
    "root",
    "no-commit-id",
    "m",
    "c",
    "cc",
    "combined-all-paths",
    "v",
    "always",
    "merge-base",
    "pretty?",
    "format=",
    "abbrev?",
    "no-abbrev",
    "q",
    "0",
    "1",
    "2",
    "3",
    "ours",
    "theirs",
    "base",
];

/// `git stash show`: a display command (its `-p` is `--patch`, not the interactive
/// `stash push -p`), judged like `git show`'s diff options.
const STASH_SHOW: Sub = Sub {
    name: "stash",
    class: Class::Read,
    pages: true,
    numeric: false,
    refused_short: &[],
    opts: &[
        DIFF,
        &[
            "u|include-untracked",
            "only-untracked",
            "no-include-untracked",
        ],
    ],
};

const REVS: &[&str] = &[
    "n|max-count=",
    "skip=",
    "since=",
    "after=",
    "since-as-filter=",
    "until=",
    "before=",
    "author=",
    "committer=",
    "grep-reflog=",
    "grep=",
    "all-match",
    "invert-grep",
    "i|regexp-ignore-case",
    "basic-regexp",
    "E|extended-regexp",
    "F|fixed-strings",
    "P|perl-regexp",
    "remove-empty",
    "merges",
    "no-merges",
    "min-parents=",
    "max-parents=",
    "no-min-parents",
    "no-max-parents",
    "first-parent",
    "exclude-first-parent-only",
    "not",
    "all",
    "branches?",
    "tags?",
    "remotes?",
    "glob=",
    "exclude=",
    "exclude-hidden=",
    "reflog",
    "alternate-refs",
    "single-worktree",
    "ignore-missing",
    "bisect",
    "cherry-mark",
    "cherry-pick",
    "left-only",
    "right-only",
    "cherry",
    "g|walk-reflogs",
    "merge",
    "boundary",
    "simplify-by-decoration",
    "show-pulls",
    "full-history",
    "dense",
    "sparse",
    "simplify-merges",
    "ancestry-path?",
    "date-order",
    "author-date-order",
    "topo-order",
    "reverse",
    "no-walk?",
    "do-walk",
    "pretty?",
    "format=",
    "abbrev-commit",
    "no-abbrev-commit",
    "oneline",
    "encoding=",
    "expand-tabs?",
    "no-expand-tabs",
    "notes?",
    "no-notes",
    "show-notes?",
    "show-signature",
    "relative-date",
    "date=",
    "parents",
    "children",
    "left-right",
    "graph",
    "no-graph",
    "show-linear-break?",
    "decorate?",
    "no-decorate",
    "decorate-refs=",
    "decorate-refs-exclude=",
    "clear-decorations",
    "source",
    "mailmap",
    "no-mailmap",
    "use-mailmap",
    "no-use-mailmap",
    "full-diff",
    "log-size",
    "L=",
    "count",
    "stdin-never",
    "objects",
    "objects-edge",
    "no-object-names",
    "timestamp",
    "header",
    "unpacked",
    "show-origin",
];

const COMMIT: &[&str] = &[
    "a|all",
    "m|message=",
    "F|file=",
    "C|reuse-message=",
    "fixup=",
    "squash=",
    "reset-author",
    "author=",
    "date=",
    "s|signoff",
    "no-signoff",
    "trailer=",
    "n|no-verify",
    "verify",
    "allow-empty",
    "allow-empty-message",
    "cleanup=",
    "no-edit",
    "amend",
    "no-post-rewrite",
    "i|include",
    "o|only",
    "u|untracked-files?",
    "q|quiet",
    "v|verbose",
    "dry-run",
    "short",
    "branch",
    "porcelain",
    "long",
    "z|null",
    "status",
    "no-status",
];

const APPLY: &[&str] = &[
    "stat",
    "numstat",
    "summary",
    "check",
    "index",
    "cached",
    "intent-to-add",
    "N",
    "3|3way",
    "ours",
    "theirs",
    "union",
    "apply",
    "no-add",
    "R|reverse",
    "allow-binary-replacement",
    "binary",
    "reject",
    "z",
    "p=",
    "C=",
    "unidiff-zero",
    "inaccurate-eof",
    "recount",
    "directory=",
    "exclude=",
    "include=",
    "ignore-space-change",
    "ignore-whitespace",
    "whitespace=",
    "allow-empty",
    "q|quiet",
    "v|verbose",
];

const MERGE_OPTS: &[&str] = &[
    "commit",
    "no-commit",
    "no-edit",
    "cleanup=",
    "ff",
    "no-ff",
    "ff-only",
    "log?",
    "no-log",
    "signoff",
    "no-signoff",
    "stat",
    "n|no-stat",
    "squash",
    "no-squash",
    "verify",
    "no-verify",
    "s|strategy=",
    "X|strategy-option=",
    "verify-signatures",
    "no-verify-signatures",
    "summary",
    "no-summary",
    "q|quiet",
    "v|verbose",
    "progress",
    "no-progress",
    "autostash",
    "no-autostash",
    "allow-unrelated-histories",
    "rerere-autoupdate",
    "no-rerere-autoupdate",
    "m=",
    "F|file=",
    "into-name=",
    "abort",
    "quit",
    "continue",
];

const FETCH_OPTS: &[&str] = &[
    "all",
    "atomic",
    "depth=",
    "deepen=",
    "shallow-since=",
    "shallow-exclude=",
    "unshallow",
    "update-shallow",
    "dry-run",
    "f|force",
    "k|keep",
    "multiple",
    "p|prune",
    "P|prune-tags",
    "no-prune",
    "t|tags",
    "no-tags",
    "prefetch",
    "refetch",
    "set-upstream",
    "q|quiet",
    "v|verbose",
    "progress",
    "no-progress",
    "show-forced-updates",
    "no-show-forced-updates",
    "4|ipv4",
    "6|ipv6",
    "no-write-fetch-head",
    "write-fetch-head",
    "filter=",
];

/// One subcommand's table.
struct Sub {
    name: &'static str,
    class: Class,
    pages: bool,
    opts: &'static [&'static [&'static str]],
    /// Short options refused for this subcommand only (letter, why).
    refused_short: &'static [(char, &'static str)],
    /// `-<number>` is shorthand for `-n <number>` (log family).
    numeric: bool,
}

const INTERACTIVE: &str = "interactive modes need a terminal the git API does not have";
const EDITOR: &str = "opens an editor the git API does not have; pass -m or -F";

const SUBS: &[Sub] = &[
    Sub {
        name: "status",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "s|short",
            "b|branch",
            "show-stash",
            "porcelain?",
            "long",
            "v|verbose",
            "u|untracked-files?",
            "ignored?",
            "ignore-submodules?",
            "z",
            "column?",
            "no-column",
            "ahead-behind",
            "no-ahead-behind",
            "renames",
            "no-renames",
            "find-renames?",
            "q|quiet",
        ]],
    },
    Sub {
        name: "diff",
        class: Class::Read,
        pages: true,
        numeric: false,
        refused_short: &[],
        opts: &[DIFF],
    },
    Sub {
        name: "log",
        class: Class::Read,
        pages: true,
        numeric: true,
        refused_short: &[],
        opts: &[DIFF, REVS, &["q|quiet"]],
    },
    Sub {
        name: "show",
        class: Class::Read,
        pages: true,
        numeric: true,
        refused_short: &[],
        opts: &[DIFF, REVS, &["q|quiet"]],
    },
    // The diff plumbing agents use to list what a commit or the work tree changed
    // (`git diff-tree --no-commit-id --name-only -r HEAD`, `git diff-index --quiet HEAD --`).
    Sub {
        name: "diff-tree",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[DIFF, DIFF_PLUMBING],
    },
    Sub {
        name: "diff-index",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[DIFF, DIFF_PLUMBING],
    },
    Sub {
        name: "diff-files",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[DIFF, DIFF_PLUMBING],
    },
    Sub {
        name: "shortlog",
        class: Class::Read,
        pages: true,
        numeric: true,
        refused_short: &[],
        opts: &[
            REVS,
            &["s|summary", "e|email", "c|committer", "w?", "group="],
        ],
    },
    Sub {
        name: "rev-list",
        class: Class::Read,
        pages: false,
        numeric: true,
        refused_short: &[],
        opts: &[REVS, &["quiet"]],
    },
    Sub {
        name: "blame",
        class: Class::Read,
        pages: true,
        numeric: false,
        refused_short: &[('S', "reads a file chosen by the caller")],
        opts: &[&[
            "L=",
            "l",
            "t",
            "s",
            "e|show-email",
            "w",
            "M?",
            "C?",
            "p|porcelain",
            "line-porcelain",
            "incremental",
            "root",
            "show-stats",
            "date=",
            "c",
            "abbrev?",
            "f|show-name",
            "n|show-number",
            "color-lines",
            "color-by-age",
            "ignore-rev=",
            "reverse",
            "first-parent",
            "progress",
            "no-progress",
            "minimal",
            "encoding=",
            "b",
            "score-debug",
            "since=",
        ]],
    },
    Sub {
        name: "grep",
        class: Class::Read,
        pages: true,
        numeric: false,
        refused_short: &[
            ('f', "reads patterns from a file; pass them with -e"),
            ('O', "runs a program"),
        ],
        opts: &[&[
            "cached",
            "untracked",
            "no-exclude-standard",
            "exclude-standard",
            "a|text",
            "I",
            "no-textconv",
            "i|ignore-case",
            "max-depth=",
            "r|recursive",
            "no-recursive",
            "w|word-regexp",
            "v|invert-match",
            "h",
            "H",
            "full-name",
            "E|extended-regexp",
            "G|basic-regexp",
            "F|fixed-strings",
            "P|perl-regexp",
            "n|line-number",
            "column",
            "l|files-with-matches",
            "name-only",
            "L|files-without-match",
            "z|null",
            "o|only-matching",
            "c|count",
            "color?",
            "no-color",
            "break",
            "heading",
            "p|show-function",
            "C|context=",
            "A|after-context=",
            "B|before-context=",
            "W|function-context",
            "m|max-count=",
            "threads=",
            "e=",
            "and",
            "or",
            "not",
            "all-match",
            "q|quiet",
        ]],
    },
    Sub {
        name: "ls-files",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[('X', "reads a file chosen by the caller")],
        opts: &[&[
            "z",
            "t",
            "v",
            "f",
            "c|cached",
            "d|deleted",
            "m|modified",
            "o|others",
            "i|ignored",
            "s|stage",
            "k|killed",
            "directory",
            "no-empty-directory",
            "u|unmerged",
            "resolve-undo",
            "x|exclude=",
            "exclude-per-directory=",
            "exclude-standard",
            "error-unmatch",
            "with-tree=",
            "full-name",
            "abbrev?",
            "debug",
            "eol",
            "deduplicate",
            "sparse",
            "format=",
        ]],
    },
    Sub {
        name: "ls-tree",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "d",
            "r",
            "t",
            "l|long",
            "z",
            "name-only",
            "name-status",
            "object-only",
            "full-name",
            "full-tree",
            "abbrev?",
            "format=",
        ]],
    },
    Sub {
        name: "rev-parse",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "show-toplevel",
            "show-prefix",
            "show-cdup",
            "git-dir",
            "absolute-git-dir",
            "git-common-dir",
            "is-inside-work-tree",
            "is-inside-git-dir",
            "is-bare-repository",
            "is-shallow-repository",
            "abbrev-ref?",
            "short?",
            "verify",
            "q|quiet",
            "symbolic",
            "symbolic-full-name",
            "all",
            "branches?",
            "tags?",
            "remotes?",
            "glob=",
            "exclude=",
            "default=",
            "revs-only",
            "no-revs",
            "flags",
            "no-flags",
            "show-object-format?",
            "show-ref-format",
            "path-format=",
            "git-path=",
            "local-env-vars",
            "since=",
            "after=",
            "until=",
            "before=",
            "sq",
            "not",
            "prefix=",
            "disambiguate=",
            "end-of-options",
        ]],
    },
    Sub {
        name: "show-ref",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "head",
            "branches",
            "tags",
            "d|dereference",
            "s|hash?",
            "verify",
            "abbrev?",
            "q|quiet",
            "exists",
        ]],
    },
    Sub {
        name: "merge-base",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "a|all",
            "octopus",
            "independent",
            "is-ancestor",
            "fork-point",
        ]],
    },
    Sub {
        name: "describe",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "contains",
            "debug",
            "all",
            "tags",
            "long",
            "first-parent",
            "abbrev?",
            "exact-match",
            "candidates=",
            "match=",
            "exclude=",
            "always",
            "dirty?",
            "broken?",
        ]],
    },
    Sub {
        name: "cat-file",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "t",
            "s",
            "e",
            "p",
            "allow-unknown-type",
            "mailmap",
            "use-mailmap",
            "no-mailmap",
        ]],
    },
    Sub {
        name: "name-rev",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "tags",
            "refs=",
            "exclude=",
            "all",
            "name-only",
            "no-undefined",
            "always",
        ]],
    },
    Sub {
        name: "cherry",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["v", "abbrev?"]],
    },
    Sub {
        name: "reflog",
        class: Class::Read,
        pages: true,
        numeric: true,
        refused_short: &[],
        opts: &[REVS],
    },
    Sub {
        name: "version",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["build-options"]],
    },
    Sub {
        name: "add",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[('i', INTERACTIVE), ('p', INTERACTIVE), ('e', EDITOR)],
        opts: &[&[
            "n|dry-run",
            "v|verbose",
            "f|force",
            "sparse",
            "u|update",
            "renormalize",
            "N|intent-to-add",
            "A|all",
            "no-all",
            "ignore-removal",
            "no-ignore-removal",
            "refresh",
            "ignore-errors",
            "ignore-missing",
            "chmod=",
            "no-warn-embedded-repo",
        ]],
    },
    Sub {
        name: "rm",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "f|force",
            "n|dry-run",
            "r",
            "cached",
            "ignore-unmatch",
            "sparse",
            "q|quiet",
        ]],
    },
    Sub {
        name: "mv",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["f|force", "k", "n|dry-run", "v|verbose", "sparse"]],
    },
    Sub {
        name: "restore",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[('p', INTERACTIVE)],
        opts: &[&[
            "s|source=",
            "S|staged",
            "W|worktree",
            "ours",
            "theirs",
            "m|merge",
            "conflict=",
            "ignore-unmerged",
            "ignore-skip-worktree-bits",
            "overlay",
            "no-overlay",
            "q|quiet",
            "progress",
            "no-progress",
        ]],
    },
    Sub {
        name: "reset",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[('p', INTERACTIVE)],
        opts: &[&[
            "soft",
            "mixed",
            "hard",
            "merge",
            "keep",
            "q|quiet",
            "no-refresh",
            "refresh",
            "N|intent-to-add",
            "no-recurse-submodules",
        ]],
    },
    Sub {
        name: "commit",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('p', INTERACTIVE),
            ('e', EDITOR),
            ('c', EDITOR),
            ('t', "templates are not available; pass -m or -F"),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[COMMIT],
    },
    Sub {
        name: "checkout",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[('p', INTERACTIVE)],
        opts: &[&[
            "q|quiet",
            "progress",
            "no-progress",
            "f|force",
            "ours",
            "theirs",
            "b=",
            "B=",
            "t|track?",
            "no-track",
            "guess",
            "no-guess",
            "l",
            "d|detach",
            "orphan=",
            "ignore-skip-worktree-bits",
            "m|merge",
            "conflict=",
            "ignore-other-worktrees",
            "overwrite-ignore",
            "no-overwrite-ignore",
            "overlay",
            "no-overlay",
            "no-recurse-submodules",
        ]],
    },
    Sub {
        name: "switch",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "c|create=",
            "C|force-create=",
            "guess",
            "no-guess",
            "d|detach",
            "t|track?",
            "no-track",
            "orphan=",
            "f|force",
            "discard-changes",
            "m|merge",
            "conflict=",
            "q|quiet",
            "progress",
            "no-progress",
            "ignore-other-worktrees",
            "no-recurse-submodules",
        ]],
    },
    Sub {
        name: "branch",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "d|delete",
            "D",
            "m|move",
            "M",
            "c|copy",
            "C",
            "l|list",
            "a|all",
            "r|remotes",
            "show-current",
            "v|verbose",
            "q|quiet",
            "abbrev?",
            "no-abbrev",
            "column?",
            "no-column",
            "sort=",
            "merged?",
            "no-merged?",
            "contains?",
            "no-contains?",
            "points-at=",
            "format=",
            "i|ignore-case",
            "omit-empty",
            "color?",
            "no-color",
            "t|track?",
            "no-track",
            "u|set-upstream-to=",
            "unset-upstream",
            "f|force",
            "create-reflog",
        ]],
    },
    Sub {
        name: "tag",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('s', "runs gpg; signing is not available in the sandbox"),
            ('u', "runs gpg; signing is not available in the sandbox"),
            ('e', EDITOR),
        ],
        opts: &[&[
            "a|annotate",
            "m|message=",
            "F|file=",
            "f|force",
            "d|delete",
            "v|verify",
            "l|list",
            "n?",
            "sort=",
            "contains?",
            "no-contains?",
            "merged?",
            "no-merged?",
            "points-at=",
            "format=",
            "color?",
            "i|ignore-case",
            "omit-empty",
            "column?",
            "no-column",
            "cleanup=",
            "create-reflog",
            "trailer=",
        ]],
    },
    Sub {
        name: "merge",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('e', EDITOR),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[MERGE_OPTS],
    },
    Sub {
        name: "rebase",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('i', INTERACTIVE),
            ('x', "runs a program of the caller's choosing"),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[&[
            "onto=",
            "keep-base",
            "no-keep-base",
            "q|quiet",
            "v|verbose",
            "stat",
            "n|no-stat",
            "no-verify",
            "verify",
            "continue",
            "abort",
            "skip",
            "quit",
            "show-current-patch",
            "f|force-rebase",
            "no-ff",
            "fork-point",
            "no-fork-point",
            "m|merge",
            "apply",
            "s|strategy=",
            "X|strategy-option=",
            "empty=",
            "keep-empty",
            "no-keep-empty",
            "reapply-cherry-picks",
            "no-reapply-cherry-picks",
            "allow-empty-message",
            "r|rebase-merges?",
            "no-rebase-merges",
            "committer-date-is-author-date",
            "ignore-date",
            "reset-author-date",
            "ignore-whitespace",
            "whitespace=",
            "C=",
            "autosquash",
            "no-autosquash",
            "autostash",
            "no-autostash",
            "update-refs",
            "no-update-refs",
            "root",
            "rerere-autoupdate",
            "no-rerere-autoupdate",
            "signoff",
        ]],
    },
    Sub {
        name: "cherry-pick",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('e', EDITOR),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[&[
            "n|no-commit",
            "x",
            "s|signoff",
            "m|mainline=",
            "ff",
            "allow-empty",
            "allow-empty-message",
            "keep-redundant-commits",
            "empty=",
            "s|strategy=",
            "X|strategy-option=",
            "rerere-autoupdate",
            "no-rerere-autoupdate",
            "continue",
            "abort",
            "skip",
            "quit",
            "cleanup=",
            "no-edit",
        ]],
    },
    Sub {
        name: "revert",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('e', EDITOR),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[&[
            "n|no-commit",
            "s|signoff",
            "m|mainline=",
            "s|strategy=",
            "X|strategy-option=",
            "rerere-autoupdate",
            "no-rerere-autoupdate",
            "continue",
            "abort",
            "skip",
            "quit",
            "cleanup=",
            "no-edit",
            "reference",
        ]],
    },
    Sub {
        name: "stash",
        class: Class::Write,
        pages: true,
        numeric: false,
        refused_short: &[('p', INTERACTIVE)],
        opts: &[
            DIFF,
            &[
                "m|message=",
                "u|include-untracked",
                "no-include-untracked",
                "only-untracked",
                "a|all",
                "k|keep-index",
                "no-keep-index",
                "S|staged",
                "index",
                "q|quiet",
            ],
        ],
    },
    Sub {
        name: "clean",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[('i', INTERACTIVE)],
        opts: &[&[
            "n|dry-run",
            "f|force",
            "d",
            "x",
            "X",
            "q|quiet",
            "e|exclude=",
        ]],
    },
    Sub {
        name: "config",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "get",
            "get-all",
            "get-regexp",
            "get-urlmatch",
            "l|list",
            "local",
            "global",
            "name-only",
            "show-origin",
            "show-scope",
            "z|null",
            "type=",
            "bool",
            "int",
            "bool-or-int",
            "path",
            "expiry-date",
            "default=",
            "add",
            "unset",
            "unset-all",
            "replace-all",
            "all",
            "regexp",
            "value=",
            "fixed-value",
            "includes",
            "no-includes",
        ]],
    },
    Sub {
        name: "remote",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["v|verbose", "n", "push", "all"]],
    },
    Sub {
        name: "fetch",
        class: Class::Fetch,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[FETCH_OPTS],
    },
    Sub {
        name: "pull",
        class: Class::Fetch,
        pages: false,
        numeric: false,
        refused_short: &[
            ('e', EDITOR),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[FETCH_OPTS, MERGE_OPTS, &["r|rebase?", "no-rebase"]],
    },
    Sub {
        name: "ls-remote",
        class: Class::ListRemote,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "b|branches",
            "heads",
            "t|tags",
            "refs",
            "q|quiet",
            "exit-code",
            "get-url",
            "symref",
            "sort=",
            "o|server-option=",
        ]],
    },
    Sub {
        name: "symbolic-ref",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["q|quiet", "short", "recurse", "no-recurse"]],
    },
    Sub {
        name: "for-each-ref",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "format=",
            "sort=",
            "count=",
            "s|shell",
            "p|perl",
            "python",
            "tcl",
            "points-at=",
            "merged?",
            "no-merged?",
            "contains?",
            "no-contains?",
            "exclude=",
            "ignore-case",
            "omit-empty",
            "color?",
            "include-root-refs",
        ]],
    },
    Sub {
        name: "check-ignore",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["q|quiet", "v|verbose", "n|non-matching", "no-index", "z"]],
    },
    Sub {
        name: "count-objects",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["v|verbose", "H|human-readable"]],
    },
    Sub {
        name: "worktree",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["porcelain", "v|verbose", "z", "expire="]],
    },
    Sub {
        name: "submodule",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["q|quiet", "cached"]],
    },
    Sub {
        name: "bisect",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "term-old=",
            "term-good=",
            "term-new=",
            "term-bad=",
            "no-checkout",
            "first-parent",
        ]],
    },
    Sub {
        name: "notes",
        class: Class::Read,
        pages: true,
        numeric: false,
        refused_short: &[],
        opts: &[&["ref="]],
    },
    Sub {
        name: "archive",
        class: Class::Read,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&[
            "format=",
            "prefix=",
            "add-virtual-file=",
            "worktree-attributes",
            "mtime=",
            "l|list",
            "v|verbose",
            "0",
            "1",
            "2",
            "3",
            "4",
            "5",
            "6",
            "7",
            "8",
            "9",
        ]],
    },
    Sub {
        name: "gc",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[&["auto", "q|quiet"]],
    },
    Sub {
        name: "apply",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[],
        opts: &[APPLY],
    },
    Sub {
        name: "am",
        class: Class::Write,
        pages: false,
        numeric: false,
        refused_short: &[
            ('i', INTERACTIVE),
            ('S', "runs gpg; signing is not available in the sandbox"),
        ],
        opts: &[
            APPLY,
            &[
                "abort",
                "continue",
                "r|resolved",
                "skip",
                "quit",
                "show-current-patch?",
                "allow-empty",
                "s|signoff",
                "k|keep",
                "keep-non-patch",
                "keep-cr",
                "no-keep-cr",
                "c|scissors",
                "no-scissors",
                "quoted-cr=",
                "m|message-id",
                "no-message-id",
                "u|utf8",
                "no-utf8",
                "committer-date-is-author-date",
                "ignore-date",
                "empty=",
                "patch-format=",
                "rerere-autoupdate",
                "no-rerere-autoupdate",
                "no-verify",
            ],
        ],
    },
    Sub {
        name: "format-patch",
        class: Class::Read,
        pages: false,
        numeric: true,
        refused_short: &[(
            'o',
            "writes files chosen by the caller; the shim writes them",
        )],
        opts: &[
            DIFF,
            REVS,
            &[
                "stdout",
                "n|numbered",
                "N|no-numbered",
                "start-number=",
                "numbered-files",
                "k|keep-subject",
                "s|signoff",
                "no-signoff",
                "attach?",
                "no-attach",
                "inline?",
                "thread?",
                "no-thread",
                "in-reply-to=",
                "ignore-if-in-upstream",
                "no-ignore-if-in-upstream",
                "always",
                "no-always",
                "cover-from-description=",
                "subject-prefix=",
                "rfc?",
                "filename-max-length=",
                "v|reroll-count=",
                "to=",
                "no-to",
                "cc=",
                "no-cc",
                "from?",
                "no-from",
                "force-in-body-from",
                "no-force-in-body-from",
                "add-header=",
                "no-add-header",
                "cover-letter",
                "no-cover-letter",
                "suffix=",
                "q|quiet",
                "no-binary",
                "zero-commit",
                "base=",
                "no-base",
                "root",
                "progress",
                "interdiff=",
                "range-diff=",
                "creation-factor=",
                "signature=",
                "no-signature",
                "encode-email-headers",
                "no-encode-email-headers",
            ],
        ],
    },
    Sub {
        name: "push",
        class: Class::Push,
        pages: false,
        numeric: false,
        refused_short: &[
            (
                'f',
                "force pushes are refused: push a new commit on top instead",
            ),
            ('d', "deleting remote branches is refused"),
        ],
        opts: &[&[
            "u|set-upstream",
            "q|quiet",
            "v|verbose",
            "n|dry-run",
            "porcelain",
            "progress",
            "no-progress",
            "no-verify",
            "verify",
            "atomic",
            "no-atomic",
            "4|ipv4",
            "6|ipv6",
        ]],
    },
];

/// A parsed option spec.
#[derive(Debug, Clone, Copy)]
struct Spec<'a> {
    names: &'a str,
    value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    None,
    Required,
    Optional,
}

fn spec(text: &str) -> Spec<'_> {
    if let Some(n) = text.strip_suffix('=') {
        Spec {
            names: n,
            value: Value::Required,
        }
    } else if let Some(n) = text.strip_suffix('?') {
        Spec {
            names: n,
            value: Value::Optional,
        }
    } else {
        Spec {
            names: text,
            value: Value::None,
        }
    }
}

impl Sub {
    fn specs(&self) -> impl Iterator<Item = Spec<'static>> + '_ {
        self.opts
            .iter()
            .flat_map(|group| group.iter().map(|s| spec(s)))
    }

    fn long(&self, name: &str) -> Option<Value> {
        self.specs()
            .find(|s| s.names.split('|').any(|n| n.len() > 1 && n == name))
            .map(|s| s.value)
    }

    fn short(&self, c: char) -> Option<Value> {
        let mut buf = [0u8; 4];
        let c = &*c.encode_utf8(&mut buf);
        self.specs()
            .find(|s| s.names.split('|').any(|n| n == c))
            .map(|s| s.value)
    }
}

fn find_sub(name: &str) -> Option<&'static Sub> {
    SUBS.iter().find(|s| s.name == name)
}

/// What each subcommand's own rules say about its options and operands. Returns whether git
/// may take its prepared message as is (`GIT_EDITOR=true`) and whether a `config` writes.
fn check_sub(
    sub: &Sub,
    args: &[Arg],
    operands: &[String],
    mut editor_true: bool,
) -> Result<(bool, bool), Refusal> {
    let mut config_writes = false;
    match sub.name {
        "config" => config_writes = config(args, operands)?,
        "commit" => {
            commit(args, editor_true)?;
            // `--no-edit` keeps the message git prepared (a merge's, a squash's).
            editor_true |= has(args, &["no-edit"]);
        }
        "tag" => tag(args)?,
        "remote" => remote(operands)?,
        "stash" => stash(operands)?,
        "merge" | "cherry-pick" | "revert" | "rebase" | "pull" => {
            // After a conflict, `--continue` commits with the message git prepared: the
            // meaning of GIT_EDITOR=true, without an editor.
            editor_true |= has(args, &["continue"]);
            file_is_stdin(sub.name, args)?;
            strategy(sub.name, args)?;
            if sub.name == "pull" {
                pull_rebase(args)?;
            }
        }
        "reflog" => reflog(operands)?,
        "symbolic-ref" | "worktree" | "gc" => {
            crate::plumbing::check(sub.name, args, operands)?;
        }
        "apply" | "am" | "format-patch" => {
            crate::patch::check(sub.name, args, operands)?;
            editor_true |= sub.name == "am" && has(args, &["continue", "r", "resolved"]);
        }
        _ => {}
    }
    Ok((editor_true, config_writes))
}

/// The global options before the subcommand: each allowed, a `-c` key from the allowlist,
/// or refused by name. Returns them (as sent on), the `-c` pairs, and where the
/// subcommand starts.
fn check_globals(argv: &[String]) -> Result<(Vec<String>, Vec<&str>, usize), Refusal> {
    let mut i = 0;
    let mut global = Vec::new();
    let mut dash_c: Vec<&str> = Vec::new();
    while let Some(arg) = argv.get(i) {
        if !arg.starts_with('-') {
            break;
        }
        let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
        if arg == "-c" {
            let kv = argv.get(i + 1).ok_or_else(|| {
                Refusal::new(Reason::GlobalOptionRefused, "git -c needs key=value")
            })?;
            crate::dashc::check(kv)?;
            dash_c.push(kv);
            global.push(arg.clone());
            global.push(kv.clone());
            i += 2;
            continue;
        }
        if ALLOWED_GLOBAL.contains(&arg.as_str()) {
            global.push(arg.clone());
            i += 1;
            continue;
        }
        if let Some((_, why)) = REFUSED_GLOBAL.iter().find(|(o, _)| *o == name) {
            return Err(Refusal::new(
                Reason::GlobalOptionRefused,
                format!("git {name} is refused by the git API: {why}"),
            ));
        }
        if let Some((full, why)) = name.strip_prefix("--").and_then(refused_long) {
            return Err(Refusal::new(
                Reason::GlobalOptionRefused,
                refused_message(name, full, why),
            ));
        }
        // `-cfoo=bar` (attached value): git itself does not take it; say the form it does.
        if arg.starts_with("-c") || arg.starts_with("-C") {
            return Err(Refusal::new(
                Reason::GlobalOptionRefused,
                format!(
                    "git {arg} is refused by the git API: write {} {} (a separate argument)",
                    &arg[..2],
                    &arg[2..]
                ),
            ));
        }
        return Err(Refusal::new(
            Reason::GlobalOptionRefused,
            format!("global option {name} is not allowed by the git API"),
        ));
    }
    Ok((global, dash_c, i))
}

/// Check an invocation's argv (everything after `git`).
pub fn check(argv: &[String]) -> Result<Checked, Refusal> {
    let (global, dash_c, i) = check_globals(argv)?;
    let Some(sub_name) = argv.get(i) else {
        if global
            .iter()
            .any(|g| g == "--version" || g == "-h" || g == "--help")
        {
            let sub_index = global.len();
            return Ok(Checked {
                subcommand: String::new(),
                argv: global,
                class: Class::Read,
                pages: false,
                operands: Vec::new(),
                sub_index,
                editor_true: false,
                notice: None,
            });
        }
        return Err(Refusal::new(
            Reason::SubcommandNotAllowed,
            "no git subcommand given",
        ));
    };
    if global.iter().any(|g| g == "--version" || g == "--help") {
        return Err(Refusal::new(
            Reason::GlobalOptionRefused,
            "--version and --help take no subcommand here",
        ));
    }
    let Some(sub) = find_sub(sub_name) else {
        return Err(unknown_subcommand(sub_name));
    };
    let rest = &argv[i + 1..];
    let sub = if sub.name == "stash" && rest.first().is_some_and(|a| a == "show") {
        &STASH_SHOW
    } else {
        sub
    };
    crate::plumbing::check_verb(sub.name, rest)?;
    let (args, operands, positions) = check_args(sub, rest)?;
    let (editor_true, config_writes) =
        check_sub(sub, &args, &operands, crate::dashc::editor_is_true(&dash_c))?;
    let mut out = global;
    let sub_index = out.len();
    out.push(sub.name.to_owned());
    let base = out.len();
    out.extend(rest.iter().cloned());
    let mut checked = Checked {
        subcommand: sub.name.to_owned(),
        argv: out,
        class: sub.class,
        pages: sub.pages,
        operands: positions.into_iter().map(|p| base + p).collect(),
        sub_index,
        editor_true,
        notice: None,
    };
    if sub.name == "config" && has(&args, &["global"]) {
        global_config_is_local(&mut checked, config_writes);
    }
    Ok(checked)
}

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
fn unknown_subcommand(name: &str) -> Refusal {
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

/// The subcommand name of an argv (the first argument after the global options and the
/// values of `-c`), as written.
#[must_use]
pub fn subcommand_name(argv: &[String]) -> Option<&str> {
    let mut it = argv.iter().map(String::as_str);
    while let Some(a) = it.next() {
        if a == "-c" {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// One option as the caller wrote it, normalised to its spec's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg {
    /// The name as written, without dashes (`m`, `message`).
    pub name: String,
    pub value: Option<String>,
}

/// Walk a subcommand's arguments: options against the allowlist, operands collected.
#[allow(clippy::type_complexity)]
fn check_args(sub: &Sub, rest: &[String]) -> Result<(Vec<Arg>, Vec<String>, Vec<usize>), Refusal> {
    let mut args = Vec::new();
    let mut operands = Vec::new();
    let mut positions = Vec::new();
    let mut i = 0;
    while let Some(arg) = rest.get(i) {
        i += 1;
        if arg == "--" || arg == "--end-of-options" {
            operands.extend(rest[i..].iter().cloned());
            positions.extend(i..rest.len());
            break;
        }
        if arg == "-h" && sub.short('h').is_none() {
            // Usage text.
            args.push(Arg {
                name: "h".into(),
                value: None,
            });
            continue;
        }
        if arg == "-" || !arg.starts_with('-') {
            operands.push(arg.clone());
            positions.push(i - 1);
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            args.push(long_option(sub, long, rest, &mut i)?);
            continue;
        }
        // Short options, possibly clustered (`-am msg`, `-n5`, `-M50%`).
        let cluster: Vec<char> = arg[1..].chars().collect();
        if sub.numeric && cluster.iter().all(char::is_ascii_digit) {
            args.push(Arg {
                name: "n".into(),
                value: Some(arg[1..].to_owned()),
            });
            continue;
        }
        short_cluster(sub, &cluster, rest, &mut i, &mut args)?;
    }
    Ok((args, operands, positions))
}

/// The value of an option that requires one: `attached`, else the next argument (which
/// `i` then steps over).
fn required_value(
    sub: &Sub,
    name: &str,
    shown: &str,
    attached: Option<String>,
    rest: &[String],
    i: &mut usize,
) -> Result<String, Refusal> {
    if let Some(v) = attached {
        return Ok(v);
    }
    let v = rest.get(*i).cloned().ok_or_else(|| {
        Refusal::new(
            Reason::OptionNotAllowed,
            format!("git {} {shown} needs a value", sub.name),
        )
    })?;
    *i += 1;
    separate_value(name, &v)?;
    Ok(v)
}

/// `--name[=value]` against the subcommand's allowlist.
fn long_option(sub: &Sub, long: &str, rest: &[String], i: &mut usize) -> Result<Arg, Refusal> {
    let (name, attached) = match long.split_once('=') {
        Some((n, v)) => (n, Some(v.to_owned())),
        None => (long, None),
    };
    match sub.long(name) {
        Some(Value::None) if attached.is_some() => Err(Refusal::new(
            Reason::OptionNotAllowed,
            format!("git {} --{name} takes no value", sub.name),
        )),
        Some(Value::None | Value::Optional) => Ok(Arg {
            name: name.to_owned(),
            value: attached,
        }),
        Some(Value::Required) => Ok(Arg {
            name: name.to_owned(),
            value: Some(required_value(
                sub,
                name,
                &format!("--{name}"),
                attached,
                rest,
                i,
            )?),
        }),
        None => Err(unknown_long(sub, name)),
    }
}

/// A cluster of short options (`-am msg`): each against the allowlist; an option taking a
/// value ends the cluster (the rest of it, or the next argument, is the value).
fn short_cluster(
    sub: &Sub,
    cluster: &[char],
    rest: &[String],
    i: &mut usize,
    args: &mut Vec<Arg>,
) -> Result<(), Refusal> {
    for (j, &c) in cluster.iter().enumerate() {
        if let Some((_, why)) = sub.refused_short.iter().find(|(r, _)| *r == c) {
            let reason = if *why == INTERACTIVE {
                Reason::InteractiveRefused
            } else {
                Reason::OptionRefused
            };
            return Err(Refusal::new(
                reason,
                format!("git {} -{c} is refused by the git API: {why}", sub.name),
            ));
        }
        let attached: String = cluster[j + 1..].iter().collect();
        let attached = (!attached.is_empty()).then_some(attached);
        match sub.short(c) {
            Some(Value::None) => args.push(Arg {
                name: c.to_string(),
                value: None,
            }),
            Some(Value::Optional) => {
                args.push(Arg {
                    name: c.to_string(),
                    value: attached,
                });
                return Ok(());
            }
            Some(Value::Required) => {
                let name = c.to_string();
                let value = required_value(sub, &name, &format!("-{c}"), attached, rest, i)?;
                args.push(Arg {
                    name,
                    value: Some(value),
                });
                return Ok(());
            }
            None => {
                return Err(Refusal::new(
                    Reason::OptionNotAllowed,
                    format!(
                        "git {} -{c} is not on the git API's allowlist (only options known \
                         to run nothing and stay in the workspace are); run git {} without \
                         it, or git {} -h for its usage",
                        sub.name, sub.name, sub.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Options whose separate value git always takes as the value, whatever it looks like.
const TRUSTED_VALUE: &[&str] = &[
    "m",
    "message",
    "grep",
    "e",
    "author",
    "committer",
    "format",
    "S",
    "G",
    "trailer",
];

/// Belt and braces against a table that says "takes a value" where git says "optional":
/// a separate value that is (or abbreviates) a refused option is refused unless the option
/// certainly consumes it.
fn separate_value(option: &str, value: &str) -> Result<(), Refusal> {
    if TRUSTED_VALUE.contains(&option) {
        return Ok(());
    }
    if let Some(name) = value.strip_prefix("--") {
        let name = name.split_once('=').map_or(name, |(n, _)| n);
        if let Some((full, why)) = refused_long(name) {
            return Err(Refusal::new(
                Reason::OptionRefused,
                refused_message(value, full, why),
            ));
        }
    }
    Ok(())
}

/// The refused option that `name` (without dashes) names or abbreviates.
fn refused_long(name: &str) -> Option<(&'static str, &'static str)> {
    if name.is_empty() {
        return None;
    }
    REFUSED_LONG
        .iter()
        .find(|(full, _)| *full == name)
        .or_else(|| REFUSED_LONG.iter().find(|(full, _)| full.starts_with(name)))
        .copied()
}

fn refused_message(written: &str, full: &str, why: &str) -> String {
    if written.trim_start_matches('-') == full {
        format!("--{full} is refused by the git API: {why}")
    } else {
        format!("{written} abbreviates --{full}, which is refused by the git API: {why}")
    }
}

fn unknown_long(sub: &Sub, name: &str) -> Refusal {
    if let Some((full, why)) = refused_long(name) {
        let reason = if why == INTERACTIVE {
            Reason::InteractiveRefused
        } else {
            Reason::OptionRefused
        };
        return Refusal::new(reason, refused_message(&format!("--{name}"), full, why));
    }
    // Options git would accept as an abbreviation of an allowed one: ask for the full name.
    let candidates: Vec<&str> = sub
        .specs()
        .flat_map(|s| s.names.split('|'))
        .filter(|n| n.len() > 1 && n.starts_with(name))
        .collect();
    if candidates.len() == 1 {
        return Refusal::new(
            Reason::OptionNotAllowed,
            format!(
                "write --{} in full: the git API does not expand abbreviations",
                candidates[0]
            ),
        );
    }
    let force = matches!(
        name,
        "force" | "force-with-lease" | "force-if-includes" | "mirror"
    );
    let hint = if sub.name == "push" && force {
        "force pushes are refused: push a new commit on top instead".to_owned()
    } else if sub.name == "push" {
        "the git API pushes one branch at a time: git push origin <branch>".to_owned()
    } else if sub.name == "config" && matches!(name, "system" | "file" | "blob" | "worktree") {
        "the sandbox's configuration is the repository's: git config <key> <value> (or \
         git -c <key>=<value> <command> for one command)"
            .to_owned()
    } else {
        format!(
            "only options known to run nothing and stay in the workspace are; run git {} \
             without it",
            sub.name
        )
    };
    Refusal::new(
        Reason::OptionNotAllowed,
        format!(
            "git {} --{name} is not on the git API's allowlist; {hint}",
            sub.name
        ),
    )
}

fn has(args: &[Arg], names: &[&str]) -> bool {
    args.iter().any(|a| names.contains(&a.name.as_str()))
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
                format!("git pull --rebase=interactive: {INTERACTIVE}"),
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

/// Judge `git config`; whether it writes.
fn config(args: &[Arg], operands: &[String]) -> Result<bool, Refusal> {
    let mut ops = operands.iter().map(String::as_str);
    let first = operands.first().map(String::as_str);
    // `git config <verb> ...` (git 2.46+).
    let (verb, rest): (&str, Vec<&str>) = match first {
        Some(
            v @ ("get" | "list" | "set" | "unset" | "rename-section" | "remove-section" | "edit"),
        ) => {
            ops.next();
            (v, ops.collect())
        }
        _ => ("", ops.collect()),
    };
    let read_flag = has(
        args,
        &["get", "get-all", "get-regexp", "get-urlmatch", "l", "list"],
    );
    let write_flag = has(args, &["add", "unset", "unset-all", "replace-all"]);
    let writes = match verb {
        "get" | "list" => false,
        "set" | "unset" => true,
        "rename-section" | "remove-section" => {
            return Err(Refusal::new(
                Reason::ConfigKeyNotWritable,
                format!("git config {verb} is refused: only single allowlisted keys are writable"),
            ));
        }
        "edit" => {
            return Err(Refusal::new(
                Reason::InteractiveRefused,
                format!("git config edit: {EDITOR}"),
            ));
        }
        _ => write_flag || (!read_flag && rest.len() >= 2),
    };
    if !writes {
        return Ok(false);
    }
    let key = rest.first().copied().unwrap_or("");
    if !config_key_writable(key) {
        return Err(Refusal::new(
            Reason::ConfigKeyNotWritable,
            format!(
                "git config {key} is not writable from the sandbox (a key outside this list \
                 can run a program or point git elsewhere); writable keys: {}. Display keys \
                 work for one command as git -c <key>=<value> <command>",
                WRITABLE_CONFIG.join(", ")
            ),
        ));
    }
    Ok(true)
}

/// `git config --global ...` runs on the repository's config: the sandbox has no global
/// layer of its own (the git API's is empty), and the repository's is where an agent's
/// identity and preferences take effect. Writes say so once on stderr.
fn global_config_is_local(c: &mut Checked, writes: bool) {
    let Some(pos) = c.argv[c.sub_index..]
        .iter()
        .position(|a| a == "--global")
        .map(|p| p + c.sub_index)
    else {
        return;
    };
    c.argv.remove(pos);
    for o in &mut c.operands {
        if *o > pos {
            *o -= 1;
        }
    }
    if writes {
        c.notice = Some(
            "git: airlock: --global is the repository's config in the sandbox; \
             this was written there (git config without --global does the same)\n"
                .to_owned(),
        );
    }
    if c.argv.len() > c.sub_index + 1 && c.argv[c.sub_index + 1..].iter().any(|a| a == "--global") {
        global_config_is_local(c, writes);
    }
}

/// Whether `key` (as written) matches [`WRITABLE_CONFIG`]: section and name are
/// case-insensitive, the subsection is matched as one component without `.`-tricks.
#[must_use]
pub fn config_key_writable(key: &str) -> bool {
    let Some((section, rest)) = key.split_once('.') else {
        return false;
    };
    let Some((sub, name)) = rest.rsplit_once('.').map_or(Some(("", rest)), Some) else {
        return false;
    };
    if key.chars().any(|c| c.is_control() || c == '=') {
        return false;
    }
    let section = section.to_ascii_lowercase();
    let name = name.to_ascii_lowercase();
    WRITABLE_CONFIG.iter().any(|pattern| {
        let parts: Vec<&str> = pattern.split('.').collect();
        match parts.as_slice() {
            [s, n] => !rest.contains('.') && *s == section && *n == name,
            [s, "*", n] => !sub.is_empty() && *s == section && *n == name,
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn ok(s: &str) -> Checked {
        match check(&argv(s)) {
            Ok(c) => c,
            Err(r) => panic!("{s:?} refused: {r:?}"),
        }
    }

    fn refused(s: &str) -> Refusal {
        match check(&argv(s)) {
            Ok(c) => panic!("{s:?} allowed: {c:?}"),
            Err(r) => r,
        }
    }

    #[test]
    fn everyday_commands_are_allowed() {
        for s in [
            "status",
            "status --porcelain=v1 -b",
            "status -sb",
            "diff",
            "diff --cached --stat",
            "diff HEAD~1 -- src/lib.rs",
            "log -20 --oneline",
            "log --format=%H%x00%s -n 5 --graph --decorate",
            "log -p -- README.md",
            "show HEAD --stat",
            "show HEAD:README.md",
            "add -A",
            "add src/lib.rs",
            "rm --cached x",
            "mv a b",
            "restore --staged x",
            "reset --hard HEAD~1",
            "commit -m msg",
            "commit -am msg",
            "commit -F -",
            "commit --amend --no-edit",
            "checkout -b feature",
            "switch -c sandbox/demo/x",
            "branch -a",
            "branch --show-current",
            "merge --no-ff other",
            "rebase main",
            "rebase --continue",
            "stash",
            "stash pop",
            "stash push -m wip",
            "tag v1",
            "tag -a v1 -m release",
            "fetch origin",
            "pull --rebase origin main",
            "push -u origin sandbox/demo/x",
            "push",
            "remote -v",
            "rev-parse --show-toplevel",
            "rev-parse --abbrev-ref HEAD",
            "rev-parse --git-dir",
            "ls-files -z",
            "blame -L 1,10 README.md",
            "grep -n foo -- '*.rs'",
            "grep -e foo -C 3",
            "config user.name",
            "config --get remote.origin.url",
            "config user.email a@b",
            "config get user.name",
            "config set user.name A",
            "config --list",
            "--no-pager log",
            "--version",
            "status -h",
            "log -- --upload-pack=x",
            "commit -m --exec=x",
        ] {
            ok(s);
        }
    }

    #[test]
    fn global_options_that_redirect_git_are_refused() {
        for s in [
            "-c core.fsmonitor=/tmp/x status",
            "-c core.pager=less log",
            "-c color.ui=never -c core.sshCommand=x fetch",
            "-ccore.fsmonitor=/tmp/x status",
            "-ccolor.ui=never status",
            "-c",
            "-C /tmp status",
            "--exec-path=/tmp status",
            "--exec-path status",
            "--git-dir=/tmp/x status",
            "--git-dir /tmp/x status",
            "--work-tree=/ status",
            "--config-env=core.pager=X status",
            "--namespace=x status",
            "--super-prefix=x status",
            "--bare status",
            "-p log",
            "--paginate log",
            "--git status",
            "--exec status",
            "--work status",
            "--config status",
            "--unknown status",
        ] {
            let r = refused(s);
            assert_eq!(r.reason, Reason::GlobalOptionRefused, "{s}: {r:?}");
        }
    }

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
    fn options_off_the_allowlist_and_abbreviations_are_refused() {
        let r = refused("push --force");
        assert_eq!(r.reason, Reason::OptionNotAllowed);
        assert!(r.message.contains("force push"), "{r:?}");
        assert_eq!(refused("push -f").reason, Reason::OptionRefused);
        assert_eq!(refused("push --mirror").reason, Reason::OptionNotAllowed);
        assert_eq!(
            refused("push --force-with-lease").reason,
            Reason::OptionNotAllowed
        );
        assert_eq!(refused("push -d origin x").reason, Reason::OptionRefused);
        assert_eq!(
            refused("push --delete origin x").reason,
            Reason::OptionNotAllowed
        );
        let r = refused("status --porc");
        assert!(r.message.contains("--porcelain"), "{r:?}");
        assert_eq!(
            refused("commit --allow-em -m x").reason,
            Reason::OptionNotAllowed
        );
        assert_eq!(refused("status -Z").reason, Reason::OptionNotAllowed);
        assert_eq!(refused("status --short=x").reason, Reason::OptionNotAllowed);
    }

    #[test]
    fn option_values_are_not_mistaken_for_options() {
        // The value of -m is the message, even when it looks like an option.
        ok("commit -m --upload-pack=x");
        ok("commit -m -c");
        ok("log --grep --exec");
        // A value of an option that is not known to always consume it is still checked.
        assert_eq!(
            refused("log --since --exec=x").reason,
            Reason::OptionRefused
        );
        // But a refused option after a value is still seen.
        assert_eq!(
            refused("commit -m x --exec=y").reason,
            Reason::OptionRefused
        );
        // Clusters: -am takes the next argument as the message.
        ok("commit -am -p");
        assert_eq!(refused("commit -ap").reason, Reason::InteractiveRefused);
    }

    #[test]
    fn config_writes_only_allowlisted_keys() {
        for s in [
            "config core.fsmonitor /tmp/x",
            "config core.hooksPath /tmp",
            "config core.sshCommand x",
            "config alias.co checkout",
            "config include.path /tmp/x",
            "config filter.x.clean cat",
            "config remote.origin.url https://evil.example/x",
            "config set core.pager less",
            "config --add core.editor vi",
            "config --unset core.bare",
            "config user..name x",
            "config user.name.x y",
            "config branch.main.pushremote x",
            "config rename-section user foo",
            "config remove-section core",
        ] {
            assert_eq!(refused(s).reason, Reason::ConfigKeyNotWritable, "{s}");
        }
        for s in [
            "config --file=/tmp/x user.name x",
            "config -f /tmp/x a.b c",
            "config --system a.b c",
            "config --blob=HEAD:x --list",
        ] {
            let r = refused(s);
            assert!(
                matches!(r.reason, Reason::OptionNotAllowed | Reason::OptionRefused),
                "{s}: {r:?}"
            );
        }
        ok("config User.Name x");
        ok("config branch.sandbox/demo/x.remote origin");
        ok("config --unset user.email");
        assert!(config_key_writable("branch.a.b.merge"));
        assert!(!config_key_writable("branch.merge"));
        assert!(!config_key_writable("core.editor"));
    }

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
    fn display_and_identity_dash_c_keys_reach_git_before_the_subcommand() {
        let c = ok("-c color.ui=never -c core.quotepath=off status --short");
        assert_eq!(c.subcommand, "status");
        assert_eq!(c.sub_index, 4);
        assert_eq!(c.argv[..4], argv("-c color.ui=never -c core.quotepath=off"));
        let c = ok("-c user.name=A -c user.email=a@b commit -m x");
        assert_eq!(c.argv[c.sub_index], "commit");
        // A -c value that looks like a subcommand is the value.
        let c = ok("-c color.ui=push log");
        assert_eq!(c.subcommand, "log");
        assert!(ok("-c core.editor=true rebase --continue").editor_true);
        assert!(!ok("-c core.pager=cat log").editor_true);
    }

    #[test]
    fn the_agent_tries_dash_c_keys_that_run_programs_and_is_told_why() {
        for (s, why) in [
            ("-c core.pager=sh_-c_evil log", "runs a program"),
            ("-c core.editor=vi commit", "runs a program"),
            ("-c core.sshCommand=x fetch", "runs a program"),
            ("-c core.hooksPath=/tmp commit -m x", "hooks"),
            ("-c alias.st=!sh st", "aliases"),
            (
                "-c url.file:///tmp/x.insteadOf=https://github.com/ fetch",
                "rewrites",
            ),
            ("-c include.path=/tmp/x status", "includes"),
            ("-c protocol.file.allow=always fetch", "transport"),
            ("-c remote.origin.url=/tmp/x fetch", "remotes"),
        ] {
            // `_` is a space inside one argument.
            let a: Vec<String> = argv(s).iter().map(|x| x.replace('_', " ")).collect();
            let r = check(&a).expect_err(s);
            assert_eq!(r.reason, Reason::GlobalOptionRefused, "{s}");
            assert!(r.message.contains(why), "{s}: {r:?}");
            assert!(r.message.contains("without this -c"), "{s}: {r:?}");
        }
    }

    #[test]
    fn config_global_writes_the_repository_config_and_says_so() {
        let c = ok("config --global user.email a@b.c");
        assert_eq!(c.argv, argv("config user.email a@b.c"));
        assert!(c.notice.as_deref().unwrap().contains("--global"));
        let c = ok("config --global init.defaultBranch main");
        assert_eq!(c.argv, argv("config init.defaultBranch main"));
        let c = ok("config --global --get user.name");
        assert_eq!(c.argv, argv("config --get user.name"));
        assert!(c.notice.is_none());
        let c = ok("config --global --unset user.name");
        assert_eq!(c.argv, argv("config --unset user.name"));
        assert!(c.notice.is_some());
        let r = refused("config --global core.pager less");
        assert_eq!(r.reason, Reason::ConfigKeyNotWritable);
        let r = refused("config --global alias.co checkout");
        assert_eq!(r.reason, Reason::ConfigKeyNotWritable);
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
    fn read_only_plumbing_and_orientation_are_allowed() {
        for s in [
            "symbolic-ref --short HEAD",
            "symbolic-ref -q HEAD",
            "for-each-ref --format=%(refname:short) refs/heads",
            "for-each-ref --sort=-committerdate --count=5 refs/heads/",
            "check-ignore -v target/x",
            "check-ignore -q -- a b",
            "count-objects -v",
            "count-objects -vH",
            "worktree list",
            "worktree list --porcelain",
            "submodule status",
            "submodule",
            "bisect start",
            "bisect start HEAD HEAD~3",
            "bisect good",
            "bisect bad HEAD",
            "bisect skip",
            "bisect reset",
            "bisect log",
            "notes",
            "notes list",
            "notes show HEAD",
            "archive HEAD",
            "archive --format=tar --prefix=app/ HEAD",
            "archive --format=zip -9 HEAD src",
            "gc --auto",
            "gc --auto --quiet",
        ] {
            ok(s);
        }
        assert_eq!(ok("bisect start").class, Class::Write);
        assert_eq!(ok("symbolic-ref HEAD").class, Class::Read);
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
            ("notes add -m x", "read-only"),
            ("notes edit", "read-only"),
            ("notes remove HEAD", "read-only"),
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

    #[test]
    fn classes_and_paging() {
        assert_eq!(ok("status").class, Class::Read);
        assert_eq!(ok("commit -m x").class, Class::Write);
        assert_eq!(ok("fetch").class, Class::Fetch);
        assert_eq!(ok("push").class, Class::Push);
        assert!(ok("log").pages);
        assert!(!ok("status").pages);
        assert_eq!(ok("--no-pager log -3").argv, argv("--no-pager log -3"));
    }

    #[test]
    fn stash_show_p_is_the_patch_display_and_stash_push_p_stays_interactive() {
        let c = ok("stash show -p");
        assert_eq!(c.class, Class::Read);
        assert_eq!(c.argv, argv("stash show -p"));
        ok("stash show --stat stash@{0}");
        ok("stash show -p -u");
        assert_eq!(refused("stash -p").reason, Reason::InteractiveRefused);
        assert_eq!(refused("stash push -p").reason, Reason::InteractiveRefused);
        assert_eq!(ok("stash push -m x").class, Class::Write);
        assert_eq!(
            refused("stash show --ext-diff").reason,
            Reason::OptionRefused
        );
    }

    #[test]
    fn diff_plumbing_reads() {
        for s in [
            "diff-tree --no-commit-id --name-only -r HEAD",
            "diff-tree -r --root --stat HEAD",
            "diff-tree --pretty=oneline -p HEAD~1 HEAD",
            "diff-index --quiet HEAD --",
            "diff-index --cached --name-status HEAD",
            "diff-files --name-only",
        ] {
            assert_eq!(ok(s).class, Class::Read, "{s}");
        }
        assert_eq!(
            refused("diff-tree --ext-diff HEAD").reason,
            Reason::OptionRefused
        );
        assert_eq!(
            refused("diff-tree --textconv HEAD").reason,
            Reason::OptionRefused
        );
        assert_eq!(
            refused("diff-index --output=/tmp/x HEAD").reason,
            Reason::OptionRefused
        );
        assert_eq!(
            refused("diff-tree --stdin").reason,
            Reason::OptionNotAllowed
        );
    }
}
