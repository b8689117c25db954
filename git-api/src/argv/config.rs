//! `git config`: reads are free; writes only to the keys of [`WRITABLE_CONFIG`], with
//! values that fit them ([`config_value_fits`]); `--global` is the agent's `~/.gitconfig`
//! (written by the server on a copy: [`crate::global`]).

use super::parse::{Arg, has};
use super::refusal::{Refusal, Why};
use airlock_wire::Reason;

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

/// Judge `git config`; whether it writes.
pub(super) fn config(args: &[Arg], operands: &[String]) -> Result<bool, Refusal> {
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
                format!("git config edit: {}", Why::Editor),
            ));
        }
        _ => write_flag || (!read_flag && rest.len() >= 2),
    };
    if !writes {
        return Ok(false);
    }
    let key = rest.first().copied().unwrap_or("");
    let unsets = verb == "unset" || has(args, &["unset", "unset-all"]);
    if config_key_writable(key)
        && !unsets
        && let Some(value) = rest.get(1)
        && let Err(why) = config_value_fits(key, value)
    {
        return Err(Refusal::new(
            Reason::ConfigKeyNotWritable,
            format!("git config {key} {value:?} is refused: {why}"),
        ));
    }
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

/// Whether `value` is one `key` (writable) takes: values that would send git elsewhere or
/// into an editor are refused (a URL as a branch's remote, an interactive rebase, a control
/// character).
pub fn config_value_fits(key: &str, value: &str) -> Result<(), &'static str> {
    if value.chars().any(char::is_control) {
        return Err("a value with a control character (a newline, a tab, ...) is not written");
    }
    let name = key.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    let section = key.split('.').next().unwrap_or("").to_ascii_lowercase();
    let v = value.to_ascii_lowercase();
    let boolean = ["true", "false", "yes", "no", "on", "off", "1", "0"];
    match (section.as_str(), name.as_str()) {
        ("branch", "remote") => {
            let plain = value == "."
                || (!value.is_empty()
                    && !value.starts_with('-')
                    && value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
            if plain {
                Ok(())
            } else {
                Err(
                    "a branch's remote is the name of a configured remote (git remote -v), not a URL",
                )
            }
        }
        ("branch" | "pull", "rebase") => {
            if boolean.contains(&v.as_str()) || v == "merges" {
                Ok(())
            } else {
                Err(
                    "an interactive rebase needs an editor the git API does not have; use true, false or merges",
                )
            }
        }
        ("branch", "merge") => {
            if value.is_empty() || value.contains([' ', ':', '\\']) || value.starts_with('-') {
                Err("a branch's merge is a ref name (refs/heads/<branch>)")
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
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
    use crate::argv::test_util::{argv, ok, refused};

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
        ok("config branch.x.remote origin");
        ok("config branch.x.remote .");
        ok("config branch.x.merge refs/heads/x");
        ok("config pull.rebase merges");
        ok("config --unset branch.x.remote");
        for s in [
            "config branch.main.remote ext::sh",
            "config branch.main.remote https://evil.example/x",
            "config set branch.main.remote /tmp/repo",
            "config branch.main.rebase interactive",
            "config pull.rebase i",
            "config --add branch.x.merge a:b",
        ] {
            assert_eq!(refused(s).reason, Reason::ConfigKeyNotWritable, "{s}");
        }
        let newline = vec![
            "config".to_owned(),
            "user.name".to_owned(),
            "x\n[core]\n\tfsmonitor = /tmp/evil".to_owned(),
        ];
        assert_eq!(
            crate::argv::check(&newline).unwrap_err().reason,
            Reason::ConfigKeyNotWritable
        );
        ok("config branch.sandbox/demo/x.remote origin");
        ok("config --unset user.email");
        assert!(config_key_writable("branch.a.b.merge"));
        assert!(!config_key_writable("branch.merge"));
        assert!(!config_key_writable("core.editor"));
    }

    #[test]
    fn config_global_is_the_agents_own_file_under_the_same_rules() {
        let c = ok("config --global user.email a@b.c");
        assert_eq!(c.argv, argv("config --global user.email a@b.c"));
        assert!(c.global_write);
        assert!(c.notice.is_none());
        assert!(ok("config --global --unset user.name").global_write);
        assert!(ok("config set --global init.defaultBranch main").global_write);
        let c = ok("config --global --get user.name");
        assert_eq!(c.argv, argv("config --global --get user.name"));
        assert!(!c.global_write);
        assert!(!ok("config user.name x").global_write);
        for s in [
            "config --global core.pager less",
            "config --global alias.co checkout",
            "config --global include.path /tmp/x",
            "config --global credential.helper store",
            "config --global url.https://evil.example/.insteadOf https://github.com/",
        ] {
            assert_eq!(refused(s).reason, Reason::ConfigKeyNotWritable, "{s}");
        }
    }
}
