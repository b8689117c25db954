//! The documentation stays true: the manual's commands, variables, paths and links are read
//! against the code, so a flag renamed in `cli.rs`, a variable the code no longer reads or
//! a heading renamed under a link fails the unit tier instead of misleading a reader.
//!
//! For every checked Markdown file (the README, `CONTRIBUTING.md`, `docs/*.md` but the design
//! brief, the crates' READMEs):
//!
//! - every `airlock …` / `scripts/airlock …` command in a shell block (```` ```sh ````,
//!   `bash`, `shell`, `console` prompts) or a code span names a subcommand the clap
//!   definitions have, and only options that subcommand (or the top level) has;
//! - every `AIRLOCK_*` variable anywhere in the text, and every `NAME=` assignment and
//!   `-e NAME` in code, appears in the source (any non-Markdown file of the repository), or is
//!   a variable another program reads ([`EXTERNAL_ENV`]);
//! - every repository path in code (`scripts/…`, `tests/smoke/…`) exists;
//! - every relative link resolves to a file, and its `#anchor` to a heading there.
//!
//! The Markdown is read with pulldown-cmark (code spans, fences and links as CommonMark
//! defines them); the checks themselves are pure functions of the text, the command tree and
//! a set of source identifiers, so the tests can feed them doctored input.

use clap::Command;
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests;

/// Variables the docs show that other programs read, not airlock: each with who reads it.
pub const EXTERNAL_ENV: &[(&str, &str)] = &[
    (
        "ANTHROPIC_BASE_URL",
        "Claude Code and the Anthropic SDKs: the base-URL mode's example",
    ),
    ("CARGO_HOME", "cargo and rustup"),
    ("RUSTUP_HOME", "rustup"),
];

/// One thing the documentation says that is not so.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// The Markdown file, relative to the repository root.
    pub file: String,
    /// Its 1-based line.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.what)
    }
}

/// What a Markdown file shows: its code (with the line each piece starts on), its links and
/// its headings' anchors.
#[derive(Debug, Default)]
pub struct Doc {
    /// Code that may hold commands: shell blocks (one entry per block) and code spans.
    pub code: Vec<(usize, String)>,
    /// All text of the file (prose and code) for the `AIRLOCK_*` scan, by line.
    pub text: String,
    /// Link destinations, with their lines.
    pub links: Vec<(usize, String)>,
    /// The anchors GitHub gives the headings.
    pub anchors: HashSet<String>,
}

/// Reads `text` as CommonMark.
#[must_use]
pub fn parse(text: &str) -> Doc {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let mut doc = Doc {
        text: text.to_owned(),
        ..Doc::default()
    };
    let mut seen: Vec<String> = Vec::new();
    let mut heading: Option<String> = None;
    let mut block: Option<(usize, bool, String)> = None;
    let parser = Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter();
    for (event, range) in parser {
        match event {
            Event::Start(Tag::Heading { .. }) => {
                heading = Some(String::new());
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    let base = crate::cli_doc::slug(&h);
                    let n = seen.iter().filter(|s| **s == base).count();
                    doc.anchors.insert(if n == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    });
                    seen.push(base);
                }
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let shell = match &kind {
                    CodeBlockKind::Fenced(info) => {
                        let lang = info.split_whitespace().next().unwrap_or("");
                        matches!(lang, "sh" | "bash" | "shell" | "console")
                            .then(|| lang == "console")
                    }
                    CodeBlockKind::Indented => None,
                };
                block = shell.map(|console| (line_of(range.start) + 1, console, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((line, console, body)) = block.take() {
                    let body = if console {
                        body.lines()
                            .map(|l| l.strip_prefix("$ ").unwrap_or(""))
                            .collect::<Vec<_>>()
                            .join("\n")
                    } else {
                        body
                    };
                    doc.code.push((line, body));
                }
            }
            Event::Text(t) => {
                if let Some((_, _, body)) = &mut block {
                    body.push_str(&t);
                }
                if let Some(h) = &mut heading {
                    h.push_str(&t);
                }
            }
            Event::Code(c) => {
                if let Some(h) = &mut heading {
                    h.push_str(&c);
                }
                doc.code.push((line_of(range.start), c.to_string()));
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                doc.links.push((line_of(range.start), dest_url.to_string()));
            }
            _ => {}
        }
    }
    doc
}

/// The shell words of `code` that form commands, one list per command: comments dropped,
/// continuation lines joined, split at `&&`, `||`, `;`, `|` and parentheses; quotes kept
/// together.
#[must_use]
pub fn commands(code: &str) -> Vec<Vec<String>> {
    let joined = code.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let mut words: Vec<String> = Vec::new();
        let mut word = String::new();
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        let flush = |word: &mut String, words: &mut Vec<String>| {
            if !word.is_empty() {
                words.push(std::mem::take(word));
            }
        };
        while let Some(c) = chars.next() {
            if let Some(q) = quote {
                if c == q {
                    quote = None;
                }
                word.push(c);
                continue;
            }
            match c {
                '\'' | '"' => {
                    quote = Some(c);
                    word.push(c);
                }
                '#' if word.is_empty() => break,
                c if c.is_whitespace() => flush(&mut word, &mut words),
                ';' | '|' | '&' | '(' | ')' => {
                    flush(&mut word, &mut words);
                    if !words.is_empty() {
                        out.push(std::mem::take(&mut words));
                    }
                    while chars.peek().is_some_and(|n| matches!(n, '|' | '&')) {
                        chars.next();
                    }
                }
                _ => word.push(c),
            }
        }
        flush(&mut word, &mut words);
        if !words.is_empty() {
            out.push(words);
        }
    }
    out
}

/// The words after `airlock` when `words` runs the CLI (after `sudo`, `exec`, `env` and
/// variable assignments): `airlock`, `scripts/airlock`, `target/<profile>/airlock`.
#[must_use]
pub fn airlock_args(words: &[String]) -> Option<&[String]> {
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let assignment = w.split_once('=').is_some_and(|(name, _)| is_env_name(name));
        if matches!(w, "sudo" | "exec" | "env" | "time") || assignment {
            i += 1;
            continue;
        }
        let program = matches!(
            w,
            "airlock"
                | "scripts/airlock"
                | "./scripts/airlock"
                | "target/release/airlock"
                | "target/debug/airlock"
        );
        return program.then(|| &words[i + 1..]);
    }
    None
}

/// A word that stands for something the reader fills in (`NAME`, `<name>`, `[N]`, `...`).
fn placeholder(w: &str) -> bool {
    w.starts_with(['<', '[', '{', '$'])
        || w.contains('…')
        || w.contains("...")
        || (w.chars().any(|c| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-'))
}

/// What is wrong with `airlock <args>` against the command tree `root` (built).
#[must_use]
pub fn check_command(root: &Command, args: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let globals: Vec<&clap::Arg> = root.get_arguments().collect();
    let mut cmd = root;
    let mut path = vec!["airlock".to_owned()];
    let mut i = 0;
    while i < args.len() {
        let w = args[i].as_str();
        i += 1;
        if w == "--" {
            break;
        }
        if let Some(flag) = w.strip_prefix("--") {
            let name = flag.split_once('=').map_or(flag, |(n, _)| n);
            if name.is_empty() || placeholder(name) {
                continue;
            }
            let found = cmd
                .get_arguments()
                .chain(globals.iter().copied())
                .find(|a| {
                    a.get_long() == Some(name)
                        || a.get_all_aliases().is_some_and(|al| al.contains(&name))
                });
            match found {
                None => problems.push(format!("`{}` has no option --{name}", path.join(" "))),
                Some(a) => {
                    let takes = a.get_action().takes_values()
                        && a.get_num_args().is_none_or(|n| n.min_values() > 0);
                    if takes && !flag.contains('=') {
                        i += 1;
                    }
                }
            }
            continue;
        }
        if w.len() > 1 && w.starts_with('-') && !w[1..].starts_with(|c: char| c.is_ascii_digit()) {
            for s in w[1..].chars() {
                let found = cmd
                    .get_arguments()
                    .chain(globals.iter().copied())
                    .any(|a| a.get_short() == Some(s));
                if !found {
                    problems.push(format!("`{}` has no option -{s}", path.join(" ")));
                }
            }
            continue;
        }
        if cmd.has_subcommands() {
            if placeholder(w) {
                break;
            }
            match cmd.find_subcommand(w) {
                Some(sub) => {
                    path.push(w.to_owned());
                    cmd = sub;
                }
                // A command that takes either a subcommand or its own positional argument
                // (`approvals [NAME]`, `approvals show ID`): the word is the argument.
                None if cmd.is_args_conflicts_with_subcommands_set()
                    && cmd.get_positionals().next().is_some() => {}
                None => {
                    problems.push(format!("`{}` has no subcommand {w}", path.join(" ")));
                    break;
                }
            }
        }
    }
    problems
}

/// `[A-Z][A-Z0-9_]*` with at least one `_`: how a variable looks in these docs.
fn is_env_name(s: &str) -> bool {
    s.len() > 2
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.contains('_')
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The variables `doc` shows: every `AIRLOCK_*` word of its text, and in its code every
/// `NAME=` assignment and `-e NAME`, with their lines.
#[must_use]
pub fn env_names(doc: &Doc) -> BTreeSet<(usize, String)> {
    let mut out = BTreeSet::new();
    for (n, line) in doc.text.lines().enumerate() {
        for w in identifiers(line) {
            if w.starts_with("AIRLOCK_") && w.len() > "AIRLOCK_".len() {
                out.insert((n + 1, w.to_owned()));
            }
        }
    }
    for (line, code) in &doc.code {
        for words in commands(code) {
            for (k, w) in words.iter().enumerate() {
                let w = w.trim_start_matches(['`', '(']);
                if let Some((name, _)) = w.split_once('=')
                    && is_env_name(name)
                {
                    out.insert((*line, name.to_owned()));
                }
                if w == "-e"
                    && let Some(next) = words.get(k + 1)
                {
                    let name = next.split_once('=').map_or(next.as_str(), |(n, _)| n);
                    if is_env_name(name) {
                        out.insert((*line, name.to_owned()));
                    }
                }
            }
        }
    }
    out
}

/// The words of `text` made of `[A-Za-z0-9_]`.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// Every identifier of every source file under `root` (not Markdown, not build output, not
/// this module: its tests name variables that must not exist).
#[must_use]
pub fn source_identifiers(root: &Path) -> HashSet<String> {
    let mut out = HashSet::new();
    let skip_dirs = [
        "target",
        ".git",
        ".cache",
        "node_modules",
        "corpus",
        "artifacts",
    ];
    let this = root.join("cli/src/doc_check");
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                if !skip_dirs.contains(&name.as_str()) && p != this {
                    stack.push(p);
                }
                continue;
            }
            if !kind.is_file() || name.ends_with(".md") {
                continue;
            }
            if e.metadata().is_ok_and(|m| m.len() > 2 << 20) {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&p) {
                out.extend(identifiers(&text).map(str::to_owned));
            }
        }
    }
    out
}

/// Repository paths in code (`scripts/fuzz`, `tests/smoke/egress.sh`, `docs/`): words whose
/// first component is one of `dirs` (the repository's tracked top-level directories).
#[must_use]
pub fn repo_paths(doc: &Doc, dirs: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (line, code) in &doc.code {
        for words in commands(code) {
            for w in words {
                let w = w.trim_matches(|c: char| {
                    matches!(c, '`' | '\'' | '"' | ',' | '.' | ':' | ')' | '(')
                });
                let Some((first, _)) = w.split_once('/') else {
                    continue;
                };
                let ok_chars = w
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'));
                // `agents/NAME.toml` stands for any profile.
                let placeholder_part = w.split('/').any(|part| {
                    let stem = part.split('.').next().unwrap_or(part);
                    stem.len() > 1 && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                });
                if ok_chars
                    && !placeholder_part
                    && dirs.iter().any(|d| d == first)
                    && !w.contains("//")
                {
                    out.push((*line, w.to_owned()));
                }
            }
        }
    }
    out
}

/// Whether `path` is build output a `.gitignore` names (`/target` in `fuzz/.gitignore`
/// covers `fuzz/target/...`): documented, but absent from a fresh checkout.
fn ignored(root: &Path, path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    (0..parts.len()).any(|i| {
        let dir = root.join(parts[..i].join("/"));
        std::fs::read_to_string(dir.join(".gitignore")).is_ok_and(|text| {
            text.lines()
                .map(|l| l.trim().trim_end_matches('/'))
                .any(|l| l.strip_prefix('/') == Some(parts[i]))
        })
    })
}

/// Checks one file's links: relative files exist, anchors name headings (`anchors_of` gives
/// a Markdown file's anchors).
pub fn check_links(
    doc: &Doc,
    file: &Path,
    root: &Path,
    anchors_of: &mut dyn FnMut(&Path) -> Option<HashSet<String>>,
) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (line, dest) in &doc.links {
        if dest.contains("://") || dest.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = dest.split_once('#').unwrap_or((dest.as_str(), ""));
        let target: PathBuf = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap_or(root).join(path)
        };
        if !target.exists() {
            out.push((*line, format!("link to {dest}: {path} does not exist")));
            continue;
        }
        if anchor.is_empty() || target.extension().is_none_or(|e| e != "md") {
            continue;
        }
        match anchors_of(&target) {
            Some(anchors) if anchors.contains(anchor) => {}
            _ => out.push((*line, format!("link to {dest}: no heading #{anchor} there"))),
        }
    }
    out
}

/// Everything wrong with one Markdown file.
pub fn check_file(
    root: &Path,
    rel: &str,
    cli: &Command,
    source: &HashSet<String>,
    dirs: &[String],
    commands_too: bool,
) -> Vec<Finding> {
    let file = root.join(rel);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return vec![Finding {
            file: rel.to_owned(),
            line: 0,
            what: "cannot be read".into(),
        }];
    };
    let doc = parse(&text);
    let mut found = Vec::new();
    let mut at = |line: usize, what: String| {
        found.push(Finding {
            file: rel.to_owned(),
            line,
            what,
        });
    };
    if commands_too {
        for (line, code) in &doc.code {
            for words in commands(code) {
                if let Some(args) = airlock_args(&words) {
                    for p in check_command(cli, args) {
                        at(*line, format!("{p} (in `{}`)", words.join(" ")));
                    }
                }
            }
        }
        for (line, name) in env_names(&doc) {
            let external = EXTERNAL_ENV.iter().any(|(n, _)| *n == name);
            if !external && !source.contains(&name) {
                at(
                    line,
                    format!("the variable {name} appears in no source file"),
                );
            }
        }
        for (line, path) in repo_paths(&doc, dirs) {
            if !root.join(&path).exists() && !ignored(root, &path) {
                at(line, format!("the path {path} does not exist"));
            }
        }
    }
    let mut anchors_of = |p: &Path| std::fs::read_to_string(p).ok().map(|t| parse(&t).anchors);
    for (line, what) in check_links(&doc, &file, root, &mut anchors_of) {
        at(line, what);
    }
    found
}
