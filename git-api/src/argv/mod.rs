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
//!
//! The modules, by job: `table` is what each subcommand accepts (one row each, as data:
//! class, paging, allowlist, refused short options, rule, hardening options), `parse` reads
//! an argv against it, `refused` lists what is refused everywhere and why, `rules` are the
//! per-subcommand rules after the allowlist (chosen by the row's `Rule`), `config` judges
//! `git config`, `gitdirs` refuses paths that name a `.git` directory and patches that
//! record a gitlink, and `refusal` is the refusal with [`Why`], the closed set of reasons an
//! option is refused (which picks the wire code). Only [`check`] and what it returns are the
//! module's interface. The modules import one another in one direction (mod → rules →
//! config → parse → refused → table → refusal; patch → gitdirs → refusal), never back.

mod config;
pub mod dashc;
pub mod gitdirs;
mod parse;
pub mod patch;
pub mod plumbing;
mod refusal;
mod refused;
mod rules;
mod table;

pub use config::{WRITABLE_CONFIG, config_key_writable, config_value_fits};
pub use parse::subcommand_name;
pub use refusal::{Refusal, Why};
pub use refused::known_subcommand;
pub use table::Class;

use airlock_wire::Reason;

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
    /// A `git config --global` that writes: the server runs it on a copy of the agent's
    /// `~/.gitconfig` and puts the result in place ([`crate::global`]).
    pub global_write: bool,
    /// Options the server adds right after the subcommand (`--no-ext-diff`, `--no-textconv`):
    /// what would run a program the repository's attributes name is off.
    pub harden: &'static [&'static str],
    /// Index in `argv` where the subcommand's options end: its `--` (or `--end-of-options`)
    /// when written, else the end. What the server adds here comes after every option the
    /// agent wrote, so it wins.
    pub options_end: usize,
}

/// Check an invocation's argv (everything after `git`).
pub fn check(argv: &[String]) -> Result<Checked, Refusal> {
    let globals = parse::check_globals(argv)?;
    let global = globals.args;
    let Some(sub_name) = argv.get(globals.end) else {
        return no_subcommand(global);
    };
    if global.iter().any(|g| g == "--version" || g == "--help") {
        return Err(Refusal::new(
            Reason::GlobalOptionRefused,
            "--version and --help take no subcommand here",
        ));
    }
    let rest = &argv[globals.end + 1..];
    let Some(sub) = table::find(sub_name, rest) else {
        return Err(refused::unknown_subcommand(sub_name));
    };
    plumbing::check_verb(sub.name, rest)?;
    let parsed = parse::check_args(sub, rest)?;
    let after = rules::check_sub(sub, &parsed, dashc::editor_is_true(&globals.dash_c))?;
    gitdirs::check_operands(sub.name, &parsed.operands)?;
    let mut out = global;
    let sub_index = out.len();
    out.push(sub.name.to_owned());
    let base = out.len();
    out.extend(rest.iter().cloned());
    let options_end = parsed.separator.map_or(out.len(), |s| base + s);
    let mut checked = Checked {
        subcommand: sub.name.to_owned(),
        argv: out,
        class: after.class.unwrap_or(sub.class),
        pages: sub.pages,
        operands: parsed.positions.iter().map(|p| base + p).collect(),
        sub_index,
        editor_true: after.editor_true,
        notice: None,
        global_write: false,
        harden: sub.harden,
        options_end,
    };
    checked.global_write = sub.rule == table::Rule::Config
        && after.config_writes
        && parse::has(&parsed.args, &["global"]);
    Ok(checked)
}

/// Every subcommand the git API runs (one per row of the command table), in table order.
#[must_use]
pub fn subcommands() -> Vec<&'static str> {
    table::SUBS.iter().map(|s| s.name).collect()
}

/// `git --version`, `git -h`, `git --help` alone; any other argv without a subcommand is
/// refused.
fn no_subcommand(global: Vec<String>) -> Result<Checked, Refusal> {
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
            global_write: false,
            harden: &[],
            options_end: sub_index,
        });
    }
    Err(Refusal::new(
        Reason::SubcommandNotAllowed,
        "no git subcommand given",
    ))
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::{Checked, Refusal, check};

    pub(crate) fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    pub(crate) fn ok(s: &str) -> Checked {
        match check(&argv(s)) {
            Ok(c) => c,
            Err(r) => panic!("{s:?} refused: {r:?}"),
        }
    }

    pub(crate) fn refused(s: &str) -> Refusal {
        match check(&argv(s)) {
            Ok(c) => panic!("{s:?} allowed: {c:?}"),
            Err(r) => r,
        }
    }
}
