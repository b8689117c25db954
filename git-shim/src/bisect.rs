//! `git bisect run <command>...`: the loop runs here, in the agent's own process, so the
//! agent's command runs as the agent and never inside the git API. After each run the shim
//! sends `git bisect good`, `bad` or `skip` (git's exit-code convention: 0 good, 125 skip,
//! 1-127 bad, anything else stops) and stops when git names the first bad commit.

use std::process::Command;

/// What one run of the agent's command says about the checked-out commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0.
    Good,
    /// Exit 1-127 except 125.
    Bad,
    /// Exit 125: this commit cannot be tested.
    Skip,
    /// Killed by a signal or exit 128 and above: bisect run stops.
    Abort,
}

impl Verdict {
    /// git's convention for `bisect run`.
    #[must_use]
    pub fn from_code(code: Option<i32>) -> Verdict {
        match code {
            Some(0) => Verdict::Good,
            Some(125) => Verdict::Skip,
            Some(1..=127) => Verdict::Bad,
            _ => Verdict::Abort,
        }
    }

    /// The bisect step to send.
    #[must_use]
    pub fn step(self) -> Option<&'static str> {
        match self {
            Verdict::Good => Some("good"),
            Verdict::Bad => Some("bad"),
            Verdict::Skip => Some("skip"),
            Verdict::Abort => None,
        }
    }
}

/// The command after `bisect run`, if `argv` is one.
#[must_use]
pub fn run_command(argv: &[String], sub_index: usize) -> Option<&[String]> {
    if argv.get(sub_index).map(String::as_str) != Some("bisect")
        || argv.get(sub_index + 1).map(String::as_str) != Some("run")
    {
        return None;
    }
    let cmd = &argv[sub_index + 2..];
    (!cmd.is_empty()).then_some(cmd)
}

/// Run the agent's command once, in `cwd`, as the agent.
pub fn run_once(cmd: &[String], cwd: &std::path::Path) -> Verdict {
    let Some((program, args)) = cmd.split_first() else {
        return Verdict::Abort;
    };
    match Command::new(program).args(args).current_dir(cwd).status() {
        Ok(s) => Verdict::from_code(s.code()),
        Err(_) => Verdict::Abort,
    }
}

/// Whether git's answer to a step ends the bisection.
#[must_use]
pub fn finished(output: &str) -> bool {
    output.contains("is the first bad commit")
        || output.contains("only 'skip'ped commits left")
        || output.contains("The first bad commit could be any of")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_git_bisect_run() {
        assert_eq!(Verdict::from_code(Some(0)), Verdict::Good);
        assert_eq!(Verdict::from_code(Some(1)), Verdict::Bad);
        assert_eq!(Verdict::from_code(Some(127)), Verdict::Bad);
        assert_eq!(Verdict::from_code(Some(125)), Verdict::Skip);
        assert_eq!(Verdict::from_code(Some(128)), Verdict::Abort);
        assert_eq!(Verdict::from_code(None), Verdict::Abort);
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            run_command(&v("bisect run make test"), 0),
            Some(&v("make test")[..])
        );
        assert_eq!(run_command(&v("bisect run"), 0), None);
        assert_eq!(run_command(&v("bisect good"), 0), None);
    }
}
