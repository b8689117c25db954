//! `docs/cli.md`, rendered from the command line's own definitions ([`crate::cli::Cli`]), so
//! the reference cannot drift from what `airlock --help` says: every subcommand with its
//! usage, arguments, options (defaults, environment variables, accepted values) and the
//! examples and notes of its `--help`. `cargo run -q -p airlock-cli --example cli-markdown >
//! docs/cli.md` writes it; a unit test fails when the committed file differs.

use clap::{Arg, Command, CommandFactory};
use std::fmt::Write;

/// The whole reference, as `docs/cli.md` holds it.
#[must_use]
pub fn markdown() -> String {
    let mut root = crate::cli::Cli::command();
    root.build();
    let mut out = String::new();
    out.push_str(
        "# The `airlock` command line\n\n\
         <!-- Generated from cli/src/cli.rs by `cargo run -q -p airlock-cli --example cli-markdown > docs/cli.md`; do not edit. -->\n\n\
         For users of the host CLI: every subcommand, its arguments and options, and the \
         examples `airlock <command> --help` prints. The README's \
         [daily use](../README.md#daily-use) shows them in context.\n\n",
    );
    if let Some(about) = root.get_about() {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    out.push_str("## Contents\n\n");
    out.push_str("- [Global options](#global-options)\n");
    for (path, _) in commands(&root, &[]) {
        let title = format!("airlock {}", path.join(" "));
        let _ = writeln!(out, "- [`{title}`](#{})", slug(&title));
    }
    out.push_str("\n## Global options\n\n");
    let _ = writeln!(out, "```text\n{}\n```\n", usage(&mut root.clone()));
    options(&mut out, &root, true);
    after_help(&mut out, &root);
    for (path, cmd) in commands(&root, &[]) {
        let title = format!("airlock {}", path.join(" "));
        let _ = writeln!(out, "## `{title}`\n");
        if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
            let _ = writeln!(out, "{}\n", prose(about.to_string().trim()));
        }
        let _ = writeln!(out, "```text\n{}\n```\n", usage(&mut cmd.clone()));
        positionals(&mut out, &cmd);
        options(&mut out, &cmd, false);
        after_help(&mut out, &cmd);
    }
    out
}

/// Every visible subcommand below `cmd`, depth first, with its path of names.
fn commands(cmd: &Command, path: &[String]) -> Vec<(Vec<String>, Command)> {
    let mut out = Vec::new();
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let mut p = path.to_vec();
        p.push(sub.get_name().to_owned());
        out.push((p.clone(), sub.clone()));
        out.extend(commands(sub, &p));
    }
    out
}

/// The usage line as `--help` prints it, with the binary's full path of names.
fn usage(cmd: &mut Command) -> String {
    let text = cmd.render_usage().to_string();
    text.trim().to_owned()
}

fn positionals(out: &mut String, cmd: &Command) {
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_positional() && !a.is_hide_set())
        .collect();
    if args.is_empty() {
        return;
    }
    out.push_str("Arguments:\n\n");
    for a in args {
        let name = a.get_value_names().and_then(|v| v.first()).map_or_else(
            || a.get_id().to_string().to_uppercase(),
            ToString::to_string,
        );
        let shown = if a.is_last_set() {
            format!("-- <{name}>...")
        } else {
            format!("<{name}>")
        };
        let _ = writeln!(out, "- `{shown}`: {}", details(a));
    }
    out.push('\n');
}

fn options(out: &mut String, cmd: &Command, globals: bool) {
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter(|a| a.is_global_set() == globals)
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if args.is_empty() {
        return;
    }
    out.push_str("Options:\n\n");
    for a in args {
        let mut names = Vec::new();
        if let Some(s) = a.get_short() {
            names.push(format!("-{s}"));
        }
        if let Some(l) = a.get_long() {
            names.push(format!("--{l}"));
        }
        let mut shown = names.join(", ");
        if a.get_action().takes_values() && !is_flag(a) {
            let value = a.get_value_names().and_then(|v| v.first()).map_or_else(
                || a.get_id().to_string().to_uppercase(),
                ToString::to_string,
            );
            let _ = write!(shown, " <{value}>");
        }
        let _ = writeln!(out, "- `{shown}`: {}", details(a));
    }
    out.push('\n');
}

/// An option that is a switch on the command line although it may take a value (`num_args =
/// 0..=1`, like `--build-missing`).
fn is_flag(a: &Arg) -> bool {
    a.get_num_args().is_some_and(|n| n.min_values() == 0)
}

/// An argument's help, accepted values, default and environment variable.
fn details(a: &Arg) -> String {
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| {
            prose(
                &h.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .unwrap_or_default();
    let mut extra = Vec::new();
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(h) => format!(
                "`{}` ({})",
                v.get_name(),
                prose(h.to_string().trim_end_matches('.'))
            ),
            None => format!("`{}`", v.get_name()),
        })
        .collect();
    let boolish = values.len() == 2 && values[0] == "`true`";
    if !values.is_empty() && !boolish {
        extra.push(format!("one of {}", values.join(", ")));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let switch_off = is_flag(a) && defaults == ["false"];
    if !defaults.is_empty() && !switch_off {
        extra.push(format!("default `{}`", defaults.join(",")));
    }
    if let Some(env) = a.get_env() {
        extra.push(format!("environment `{}`", env.to_string_lossy()));
    }
    if extra.is_empty() {
        help
    } else {
        format!("{help} ({})", extra.join("; "))
    }
}

/// Help text as Markdown prose: a `<` outside a code span is escaped, or `<name>` would be
/// read as an HTML tag and vanish.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut code = false;
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '<' if !code => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    out
}

/// The `--help` epilogue: its examples as a shell block (so the documentation checks read
/// them against these definitions), the rest as text.
fn after_help(out: &mut String, cmd: &Command) {
    let Some(text) = cmd.get_after_help() else {
        return;
    };
    let text = text.to_string();
    let mut examples: Vec<&str> = Vec::new();
    let mut notes: Vec<&str> = Vec::new();
    let mut in_examples = false;
    for line in text.lines() {
        if line.trim() == "Examples:" {
            in_examples = true;
            continue;
        }
        if in_examples && line.starts_with("  ") {
            examples.push(&line[2..]);
            continue;
        }
        in_examples = false;
        notes.push(line);
    }
    if !examples.is_empty() {
        let _ = writeln!(out, "Examples:\n\n```sh\n{}\n```\n", examples.join("\n"));
    }
    let notes = notes.join("\n");
    let notes = notes.trim();
    if !notes.is_empty() {
        let _ = writeln!(out, "```text\n{notes}\n```\n");
    }
}

/// The anchor GitHub gives a heading of `text` (letters, digits, `-` and `_` kept,
/// lowercased, spaces to `-`).
#[must_use]
pub fn slug(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// The committed reference is what the definitions render: a flag added, renamed or
    /// removed in `cli.rs` without regenerating `docs/cli.md` fails here.
    #[test]
    fn docs_cli_md_is_generated_from_the_current_definitions() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert!(
            committed == markdown(),
            "docs/cli.md is stale: regenerate it with `cargo run -q -p airlock-cli --example cli-markdown > docs/cli.md`"
        );
    }

    #[test]
    fn every_subcommand_and_option_is_in_the_reference() {
        let md = markdown();
        for (path, cmd) in commands(&crate::cli::Cli::command(), &[]) {
            assert!(md.contains(&format!("## `airlock {}`", path.join(" "))));
            for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(l) = a.get_long() {
                    assert!(md.contains(&format!("--{l}")), "--{l} of {path:?}");
                }
            }
        }
        assert!(
            md.contains("## `airlock secret set`"),
            "nested subcommands too"
        );
        assert!(
            md.contains("`--data-dir <DATA_DIR>`"),
            "global options once"
        );
    }

    #[test]
    fn help_text_keeps_its_angle_brackets_visible() {
        assert_eq!(
            prose("branch sandbox/<name>; `airlock logs <name>`"),
            "branch sandbox/&lt;name>; `airlock logs <name>`"
        );
    }

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(slug("airlock k8s render"), "airlock-k8s-render");
        assert_eq!(
            slug("The `airlock` CLI (sandboxes per branch)"),
            "the-airlock-cli-sandboxes-per-branch"
        );
        assert_eq!(
            slug("`[[detectors]]` and `[secrets]`"),
            "detectors-and-secrets"
        );
    }
}
