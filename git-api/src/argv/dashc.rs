//! `git -c <key>=<value>`: the keys an agent (and the IDE tooling it runs) may set for one
//! command. Only keys that change what git *displays* or *records* and that run nothing:
//! colour, quoting, pager off, diff/log formatting, identity, `core.editor=true`/`:`,
//! `commit.gpgsign=false`, `init.defaultBranch`, advice. Everything else is refused, and
//! the keys that would run a program or point git elsewhere are refused by name with why.
//!
//! The command line of the git the server runs puts the agent's `-c` after the protected
//! configuration, so an allowed key overrides it: that is why values are pinned where the
//! protected value matters (`core.editor`, `core.pager`, `commit.gpgsign`, `gc.auto`).
//! The git API's environment (`GIT_EDITOR`, `GIT_PAGER`) still wins over all of them.

use super::refusal::Refusal;
use airlock_wire::Reason;

/// What values a key takes.
#[derive(Debug, Clone, Copy)]
enum Values {
    /// Any value.
    Any,
    /// Only these (compared case-insensitively; `""` is `-c key` or `-c key=`).
    Only(&'static [&'static str]),
}

const BOOL: Values = Values::Only(&["", "true", "false", "yes", "no", "on", "off", "1", "0"]);

/// Patterns: `section.name`, `section.*` (any name, no subsection), `section.<>.*` (any
/// subsection, any name). Section and name lowercase.
const ALLOWED: &[(&str, Values)] = &[
    ("color.*", Values::Any),
    ("color.<>.*", Values::Any),
    ("advice.*", Values::Any),
    ("pretty.*", Values::Any),
    ("column.ui", Values::Any),
    ("core.quotepath", Values::Any),
    ("core.abbrev", Values::Any),
    ("core.autocrlf", Values::Any),
    ("core.safecrlf", Values::Any),
    ("core.whitespace", Values::Any),
    ("core.commentchar", Values::Any),
    ("core.commentstring", Values::Any),
    ("core.pager", Values::Only(&["", "cat", "off"])),
    ("core.editor", Values::Only(&["true", ":"])),
    ("pager.*", BOOL),
    ("user.name", Values::Any),
    ("user.email", Values::Any),
    ("author.name", Values::Any),
    ("author.email", Values::Any),
    ("committer.name", Values::Any),
    ("committer.email", Values::Any),
    ("commit.gpgsign", Values::Only(&["false", "no", "off", "0"])),
    ("tag.gpgsign", Values::Only(&["false", "no", "off", "0"])),
    ("commit.verbose", Values::Any),
    ("commit.status", Values::Any),
    ("commit.cleanup", Values::Any),
    ("init.defaultbranch", Values::Any),
    ("diff.noprefix", Values::Any),
    ("diff.mnemonicprefix", Values::Any),
    ("diff.renames", Values::Any),
    ("diff.renamelimit", Values::Any),
    ("diff.algorithm", Values::Any),
    ("diff.indentheuristic", Values::Any),
    ("diff.colormoved", Values::Any),
    ("diff.colormovedws", Values::Any),
    ("diff.relative", Values::Any),
    ("diff.statgraphwidth", Values::Any),
    ("diff.statnamewidth", Values::Any),
    ("diff.context", Values::Any),
    ("diff.interhunkcontext", Values::Any),
    ("diff.dirstat", Values::Any),
    ("diff.suppressblankempty", Values::Any),
    ("diff.wserrorhighlight", Values::Any),
    ("diff.srcprefix", Values::Any),
    ("diff.dstprefix", Values::Any),
    // The git API pins `all` after the agent's options: nested repositories are never
    // entered (their configuration would run); the same value is accepted.
    ("diff.ignoresubmodules", Values::Only(&["all"])),
    ("log.date", Values::Any),
    ("log.decorate", Values::Any),
    ("log.abbrevcommit", Values::Any),
    ("log.follow", Values::Any),
    ("log.showroot", Values::Any),
    ("log.mailmap", Values::Any),
    ("log.initialdecorationset", Values::Any),
    ("log.excludedecoration", Values::Any),
    ("status.showuntrackedfiles", Values::Any),
    ("status.short", Values::Any),
    ("status.branch", Values::Any),
    ("status.relativepaths", Values::Any),
    ("status.renames", Values::Any),
    ("status.aheadbehind", Values::Any),
    ("status.showstash", Values::Any),
    ("i18n.logoutputencoding", Values::Any),
    ("i18n.commitencoding", Values::Any),
    ("merge.conflictstyle", Values::Any),
    ("merge.renames", Values::Any),
    ("merge.stat", Values::Any),
    ("merge.log", Values::Any),
    ("merge.ff", Values::Any),
    ("pull.rebase", Values::Only(&["true", "false", "merges"])),
    ("pull.ff", Values::Any),
    ("rebase.autostash", Values::Any),
    ("rebase.autosquash", Values::Any),
    ("rebase.updaterefs", Values::Any),
    ("rebase.stat", Values::Any),
    ("tag.sort", Values::Any),
    ("branch.sort", Values::Any),
    ("gc.auto", Values::Only(&["0"])),
    (
        "maintenance.auto",
        Values::Only(&["false", "no", "off", "0"]),
    ),
];

/// Keys (or sections, ending in `.`) refused with their own reason: what they would do.
const DANGEROUS: &[(&str, &str)] = &[
    ("core.pager", "a pager other than cat/off runs a program"),
    (
        "core.editor",
        "an editor other than true or : runs a program",
    ),
    ("core.sshcommand", "runs a program"),
    ("core.fsmonitor", "runs a program"),
    (
        "core.hookspath",
        "runs hooks from a directory of the caller's choosing",
    ),
    ("core.gitproxy", "runs a program"),
    ("core.askpass", "runs a program"),
    ("core.worktree", "the work tree is chosen by the git API"),
    ("core.bare", "the repository is chosen by the git API"),
    ("core.attributesfile", "reads a file outside the workspace"),
    ("core.excludesfile", "reads a file outside the workspace"),
    ("diff.external", "runs a program"),
    ("diff.orderfile", "reads a file outside the workspace"),
    ("sequence.editor", "runs a program"),
    ("gpg.", "runs a program"),
    ("filter.", "filter drivers run programs"),
    ("credential.", "credentials belong to the proxy"),
    ("url.", "rewrites where git connects"),
    ("alias.", "aliases run programs and other commands"),
    ("include.", "includes read files outside the workspace"),
    ("includeif.", "includes read files outside the workspace"),
    ("protocol.", "the transport is fixed by the git API"),
    ("http.", "the transport is fixed by the git API"),
    ("remote.", "remotes are configured by the operator"),
    ("safe.", "safety checks are fixed by the git API"),
    ("submodule.", "submodules are not run by the git API"),
    ("uploadpack.", "runs programs on the serving side"),
    ("receive.", "runs programs on the serving side"),
    ("mergetool.", "runs a program"),
    ("difftool.", "runs a program"),
];

/// The key of a `-c key[=value]` argument, its parts (section and name lowercased), and
/// the value (`""` when absent).
fn split(kv: &str) -> Option<(String, Option<&str>, String, &str)> {
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    let (section, rest) = key.split_once('.')?;
    let (sub, name) = match rest.rsplit_once('.') {
        Some((s, n)) => (Some(s), n),
        None => (None, rest),
    };
    let clean =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !clean(section)
        || !clean(name)
        || sub.is_some_and(|s| s.is_empty() || s.contains(['\n', '\0']))
    {
        return None;
    }
    Some((
        section.to_ascii_lowercase(),
        sub,
        name.to_ascii_lowercase(),
        value,
    ))
}

fn matches(pattern: &str, section: &str, sub: Option<&str>, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('.').collect();
    match (parts.as_slice(), sub) {
        ([s, "*"], None) => *s == section,
        ([s, n], None) => *s == section && *n == name,
        ([s, "<>", "*"], Some(_)) => *s == section,
        _ => false,
    }
}

/// Judge one `-c` argument (the text after `-c`).
pub fn check(kv: &str) -> Result<(), Refusal> {
    let Some((section, sub, name, value)) = split(kv) else {
        return Err(Refusal::new(
            Reason::GlobalOptionRefused,
            format!("git -c {kv:?}: not a configuration key (write -c section.name=value)"),
        ));
    };
    let flat = format!("{section}.{name}");
    let allowed = ALLOWED
        .iter()
        .find(|(p, _)| matches(p, &section, sub, &name));
    if let Some((_, values)) = allowed {
        let ok = match values {
            Values::Any => true,
            Values::Only(vs) => vs.iter().any(|v| v.eq_ignore_ascii_case(value)),
        };
        if ok {
            return Ok(());
        }
    }
    let key = kv.split_once('=').map_or(kv, |(k, _)| k);
    let why = DANGEROUS
        .iter()
        .find(|(d, _)| {
            if d.ends_with('.') {
                flat.starts_with(d) || format!("{section}.").as_str() == *d
            } else {
                *d == flat && sub.is_none()
            }
        })
        .map(|(_, w)| *w)
        .or_else(|| {
            sub.is_some()
                .then_some("its drivers and subsections can run programs")
        });
    let why = why.unwrap_or("it is not on the git API's list of display and identity keys");
    Err(Refusal::new(
        Reason::GlobalOptionRefused,
        format!(
            "git -c {key} is refused by the git API: {why}. Allowed with -c: colour, \
             core.quotepath, core.pager=cat, core.editor=true, diff/log/status formatting, \
             user.name, user.email, commit.gpgsign=false, init.defaultBranch, advice.*; \
             run the command without this -c"
        ),
    ))
}

/// Whether the `-c` arguments ask for an editor that accepts the prepared message
/// (`core.editor=true` or `:`).
#[must_use]
pub fn editor_is_true(kvs: &[&str]) -> bool {
    kvs.iter().any(|kv| {
        split(kv).is_some_and(|(s, sub, n, v)| {
            s == "core" && sub.is_none() && n == "editor" && (v == "true" || v == ":")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_identity_keys_are_allowed() {
        for kv in [
            "color.ui=never",
            "color.ui",
            "Color.UI=always",
            "color.diff.meta=blue bold",
            "core.quotepath=off",
            "core.quotePath=false",
            "core.pager=cat",
            "core.pager=",
            "core.editor=true",
            "core.editor=:",
            "user.name=Agent Smith",
            "user.email=agent@example.invalid",
            "commit.gpgsign=false",
            "init.defaultBranch=main",
            "advice.detachedHead=false",
            "diff.noprefix=true",
            "log.date=iso",
            "pager.log=false",
            "gc.auto=0",
            "status.showUntrackedFiles=no",
            "merge.conflictStyle=diff3",
        ] {
            assert!(check(kv).is_ok(), "{kv}: {:?}", check(kv));
        }
    }

    #[test]
    fn escape_attempts_are_refused_by_name() {
        for (kv, why) in [
            ("core.pager=sh -c evil", "runs a program"),
            ("core.pager=less", "runs a program"),
            ("core.editor=vi", "runs a program"),
            ("core.editor=sh -c 'touch /tmp/x'", "runs a program"),
            ("core.sshCommand=touch /tmp/x", "runs a program"),
            ("core.fsmonitor=touch /tmp/x", "runs a program"),
            ("core.hooksPath=/tmp/hooks", "hooks"),
            ("diff.external=/tmp/x", "runs a program"),
            ("diff.evil.textconv=sh", "subsections"),
            ("diff.evil.command=sh", "subsections"),
            ("filter.x.clean=sh", "filter"),
            ("filter.x.process=sh", "filter"),
            ("credential.helper=!sh", "credentials"),
            ("credential.https://x.helper=!sh", "credentials"),
            (
                "url.https://evil/.insteadOf=https://github.com/",
                "rewrites",
            ),
            ("alias.st=!sh", "aliases"),
            ("include.path=/tmp/x", "includes"),
            ("includeIf.gitdir:/.path=/tmp/x", "includes"),
            ("protocol.ext.allow=always", "transport"),
            ("protocol.allow=always", "transport"),
            ("http.proxy=http://evil", "transport"),
            ("http.https://x.extraHeader=x", "transport"),
            ("remote.origin.url=https://evil/x", "remotes"),
            ("remote.origin.uploadpack=sh", "remotes"),
            ("gpg.program=sh", "runs a program"),
            ("sequence.editor=sh", "runs a program"),
            ("commit.gpgsign=true", "not on the git API's list"),
            ("gc.auto=1", "not on the git API's list"),
            ("pager.log=sh -c evil", "not on the git API's list"),
            ("color.ui\n[alias]\nx=!sh", "not a configuration key"),
            ("core.worktree=/", "work tree"),
            ("diff.ignoreSubmodules=none", "not on the git API's list"),
            ("diff.ignoreSubmodules=dirty", "not on the git API's list"),
            ("status.submoduleSummary=true", "not on the git API's list"),
            ("diff.submodule=diff", "not on the git API's list"),
            ("submodule.recurse=true", "submodules are not run"),
            ("core.protectNTFS=false", "not on the git API's list"),
            ("nosuchkey", "not a configuration key"),
            ("=x", "not a configuration key"),
            ("a..b=x", "not a configuration key"),
        ] {
            let r = check(kv).expect_err(kv);
            assert_eq!(r.reason, Reason::GlobalOptionRefused, "{kv}");
            assert!(r.message.contains(why), "{kv}: {}", r.message);
        }
    }

    #[test]
    fn editor_true_is_recognised() {
        assert!(editor_is_true(&["core.editor=true"]));
        assert!(editor_is_true(&["color.ui=never", "Core.Editor=:"]));
        assert!(!editor_is_true(&["core.editor=vi"]));
        assert!(!editor_is_true(&[]));
    }
}
