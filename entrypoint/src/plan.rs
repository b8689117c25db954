//! What a start will do, as a value: every path, decision and command PID 1 derives from the
//! command line and the checks before its first effect. Pure: [`Plan::new`] reads nothing
//! (the process environment comes in as a lookup), so it is testable without privileges;
//! `start` carries it out, one function per effect.

use crate::agent_env::AgentEnv;
use crate::config::Cli;
use crate::identity::Identity;
use crate::{git, selftest};
use airlock_channels as ch;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What [`Plan::new`] needs besides the command line: what the checks found.
#[derive(Debug)]
pub struct Found<'a> {
    /// The user the agent runs as (its ids chosen by `--agent-uid`).
    pub agent: &'a Identity,
    /// The git layout's verdict.
    pub git: &'a git::Decision,
    /// Whether the git API runs (its binary was found; only when git is enabled).
    pub git_api: bool,
    /// The agent's environment as the checks built it.
    pub agent_env: AgentEnv,
    /// The policy's mode.
    pub mode: airlock_policy::Mode,
    /// Whether the workspace is a directory.
    pub workdir_is_dir: bool,
}

/// This start, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The session key file (`<run_dir>/session.key`).
    pub key_file: PathBuf,
    /// The proxy's state directory (credential hand-off, CA files).
    pub state_dir: PathBuf,
    /// The git API's socket; `None` when no git API runs.
    pub git_socket: Option<PathBuf>,
    /// The agent's environment: the checked variables and the git shim's.
    pub agent_env: BTreeMap<String, String>,
    /// Secret-looking variables the operator forced in (one warning each).
    pub forced: Vec<String>,
    /// The agent command and its arguments (default: the agent's shell).
    pub command: Vec<OsString>,
    /// Where the agent starts: the workspace, or its home when there is none.
    pub cwd: PathBuf,
    /// Which self-test probes run.
    pub self_test: selftest::Mode,
}

impl Plan {
    /// The plan for `cli` and what the checks found; `env` reads the process environment.
    pub fn new(cli: &Cli, found: Found<'_>, env: impl Fn(&str) -> Option<String>) -> Plan {
        let key_file = cli.run_dir.join(git::KEY_FILE);
        let git_socket = found
            .git_api
            .then(|| cli.run_dir.join(git::SOCKET_SUBDIR).join(git::SOCKET_FILE));
        let why = match found.git {
            git::Decision::Unavailable(why) => Some(why.as_str()),
            git::Decision::Enabled => None,
        };
        let mut agent_env = found.agent_env.vars;
        agent_env.extend(git::agent_vars_from(
            &key_file,
            &cli.workdir,
            git_socket.as_deref(),
            why,
            env,
        ));
        let command = if cli.command.is_empty() {
            vec![found.agent.shell.clone().into_os_string()]
        } else {
            cli.command.clone()
        };
        let cwd = if found.workdir_is_dir {
            cli.workdir.clone()
        } else {
            found.agent.home.clone()
        };
        Plan {
            key_file,
            state_dir: cli.run_dir.join(ch::PROXY_STATE_SUBDIR),
            git_socket,
            agent_env,
            forced: found.agent_env.forced,
            command,
            cwd,
            self_test: selftest::Mode::of(found.mode),
        }
    }

    /// The program the agent command runs.
    pub fn program(&self) -> Option<&Path> {
        self.command.first().map(Path::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn agent() -> Identity {
        Identity::test_agent()
    }

    fn cli(extra: &[&str]) -> Cli {
        let mut args = vec![
            "airlock-entrypoint",
            "--run-dir",
            "/run/airlock",
            "--workdir",
            "/workspace",
        ];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args).unwrap()
    }

    fn found<'a>(agent: &'a Identity, git: &'a git::Decision) -> Found<'a> {
        Found {
            agent,
            git,
            git_api: *git == git::Decision::Enabled,
            agent_env: AgentEnv {
                vars: BTreeMap::from([("HOME".to_owned(), "/home/agent".to_owned())]),
                forced: vec!["FORCED_TOKEN".to_owned()],
            },
            mode: airlock_policy::Mode::Enforce,
            workdir_is_dir: true,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn with_git_the_agent_is_told_the_socket_and_the_key() {
        let (a, git) = (agent(), git::Decision::Enabled);
        let plan = Plan::new(&cli(&[]), found(&a, &git), no_env);
        assert_eq!(plan.key_file, Path::new("/run/airlock/session.key"));
        assert_eq!(
            plan.git_socket.as_deref(),
            Some(Path::new("/run/airlock/git/git.sock"))
        );
        let env = &plan.agent_env;
        assert_eq!(env["AIRLOCK_GIT_SOCKET"], "/run/airlock/git/git.sock");
        assert_eq!(env["AIRLOCK_SESSION_KEY_FILE"], "/run/airlock/session.key");
        assert_eq!(env["AIRLOCK_WORKSPACE"], "/workspace");
        assert_eq!(env["HOME"], "/home/agent");
        assert!(!env.contains_key("AIRLOCK_GIT_UNAVAILABLE"));
        assert_eq!(plan.forced, ["FORCED_TOKEN"]);
        assert_eq!(
            plan.state_dir,
            Path::new("/run/airlock").join(ch::PROXY_STATE_SUBDIR)
        );
    }

    #[test]
    fn without_git_no_socket_and_the_reason_instead() {
        let (a, git) = (agent(), git::Decision::Unavailable("not a repo".into()));
        let plan = Plan::new(&cli(&[]), found(&a, &git), no_env);
        assert_eq!(plan.git_socket, None);
        assert!(!plan.agent_env.contains_key("AIRLOCK_GIT_SOCKET"));
        assert_eq!(plan.agent_env["AIRLOCK_GIT_UNAVAILABLE"], "not a repo");
    }

    #[test]
    fn the_command_defaults_to_the_shell_and_the_cwd_to_the_home() {
        let (a, git) = (agent(), git::Decision::Enabled);
        let plan = Plan::new(&cli(&[]), found(&a, &git), no_env);
        assert_eq!(plan.command, [OsString::from("/bin/bash")]);
        assert_eq!(plan.cwd, Path::new("/workspace"));
        let mut f = found(&a, &git);
        f.workdir_is_dir = false;
        let plan = Plan::new(&cli(&["--", "claude", "--resume"]), f, no_env);
        assert_eq!(plan.program(), Some(Path::new("claude")));
        assert_eq!(plan.command, [OsString::from("claude"), "--resume".into()]);
        assert_eq!(plan.cwd, Path::new("/home/agent"));
    }

    #[test]
    fn the_policy_mode_picks_the_probes_and_the_commit_identity_comes_from_env() {
        let (a, git) = (agent(), git::Decision::Enabled);
        let mut f = found(&a, &git);
        f.mode = airlock_policy::Mode::Report;
        let env = |k: &str| (k == "AIRLOCK_GIT_USER_NAME").then(|| "Ada".to_owned());
        let plan = Plan::new(&cli(&[]), f, env);
        assert_eq!(plan.self_test, selftest::Mode::Report);
        assert_eq!(plan.agent_env["AIRLOCK_GIT_USER_NAME"], "Ada");
        assert!(!plan.agent_env.contains_key("AIRLOCK_GIT_USER_EMAIL"));
    }
}
