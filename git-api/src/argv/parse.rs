//! The parser: global options before the subcommand, then the subcommand's options against
//! its row of the table, each exactly as written. Operands are collected, not judged.

use super::refusal::Refusal;
use super::refused::{REFUSED_GLOBAL, refused_long, refused_message};
use super::table::{ALLOWED_GLOBAL, Sub, Value};
use airlock_wire::Reason;

/// The global options before the subcommand, read.
pub(super) struct Globals<'a> {
    /// As sent on to git.
    pub(super) args: Vec<String>,
    /// The `-c key=value` pairs.
    pub(super) dash_c: Vec<&'a str>,
    /// Where the subcommand starts.
    pub(super) end: usize,
}

/// The global options before the subcommand: each allowed, a `-c` key from the allowlist,
/// or refused by name.
pub(super) fn check_globals(argv: &[String]) -> Result<Globals<'_>, Refusal> {
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
            super::dashc::check(kv)?;
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
    Ok(Globals {
        args: global,
        dash_c,
        end: i,
    })
}

/// The subcommand name of an argv (the first argument after the global options and the
/// values of `-c`), as written: the wire's reading, the one the shim uses too.
pub use airlock_wire::invocation::subcommand as subcommand_name;

/// One option as the caller wrote it, normalised to its spec's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg {
    /// The name as written, without dashes (`m`, `message`).
    pub name: String,
    pub value: Option<String>,
}

/// A subcommand's arguments, read.
pub(super) struct Parsed {
    /// The options, normalised to their specs' names.
    pub(super) args: Vec<Arg>,
    /// The operands, as written.
    pub(super) operands: Vec<String>,
    /// Where each operand is among the subcommand's arguments.
    pub(super) positions: Vec<usize>,
    /// Where `--` (or `--end-of-options`) is among them, when written.
    pub(super) separator: Option<usize>,
}

/// Whether any option in `args` is one of `names`.
pub(super) fn has(args: &[Arg], names: &[&str]) -> bool {
    args.iter().any(|a| names.contains(&a.name.as_str()))
}

/// Walk a subcommand's arguments: options against the allowlist, operands collected.
pub(super) fn check_args(sub: &Sub, rest: &[String]) -> Result<Parsed, Refusal> {
    let mut args = Vec::new();
    let mut operands = Vec::new();
    let mut positions = Vec::new();
    let mut separator = None;
    let mut i = 0;
    while let Some(arg) = rest.get(i) {
        i += 1;
        if arg == "--" || arg == "--end-of-options" {
            separator = Some(i - 1);
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
    Ok(Parsed {
        args,
        operands,
        positions,
        separator,
    })
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
            return Err(Refusal::new(
                why.reason(),
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

fn unknown_long(sub: &Sub, name: &str) -> Refusal {
    if let Some((full, why)) = refused_long(name) {
        return Refusal::new(
            why.reason(),
            refused_message(&format!("--{name}"), full, why),
        );
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
#[cfg(test)]
mod tests {
    use crate::argv::check;
    use crate::argv::test_util::{argv, ok, refused};
    use airlock_wire::Reason;

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
}
