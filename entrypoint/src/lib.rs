//! `airlock-entrypoint`: PID 1 of the airlock appliance, as a library.
//!
//! One job: bring the container from "root with NET_ADMIN" to "the agent runs behind a
//! verified firewall with no privileges", in the order of docs/design.md §3, and then stay as a small
//! supervisor. Validate the policy and environment → per-start session → scrub credentials
//! from what the agent inherits → start the proxy as its user and wait until it answers →
//! apply the firewall atomically (IPv4 and IPv6) → drop to the agent user (caps, groups,
//! uids, `no_new_privs`, seccomp, verified from `/proc/self/status`) → self-test as the agent
//! → run the agent command → reap, forward signals, keep the proxy alive, let it flush on exit.
//!
//! It does not proxy, filter or decide anything itself, holds no credentials after set-up,
//! and never touches the network except for the self-test's probes (sent as the agent).
//! Every failed step stops the container with one line: what failed and how to fix it.
//!
//! The binary (`main.rs`) only picks the [`Invocation`], calls in here and prints the one
//! line. What needs no privileges (the checks' pure cores, [`plan::Plan`], the privilege
//! drop's order through [`sys::Sys`]) is testable here, and the host CLI can reuse the flags
//! ([`config::Cli`]), the paths and the checks.

pub mod admin_relay;
pub mod admin_socket;
pub mod agent_env;
pub mod checks;
pub mod claim;
pub mod config;
pub mod console;
pub mod credentials;
pub mod effective;
pub mod git;
pub mod http_answer;
pub mod identity;
pub mod nested_repos;
pub mod netinfo;
pub mod plan;
pub mod preflight;
pub mod problems;
pub mod procfs;
pub mod proxy_ctl;
pub mod proxy_state;
pub mod readiness;
pub mod rescan;
pub mod seccomp;
pub mod second;
pub mod selftest;
pub mod session;
pub mod setup;
pub mod spawn;
pub mod start;
pub mod status;
pub mod supervise;
pub mod sys;
pub mod trust;
pub mod workspace_secrets;

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Exit status when the container refuses to start.
pub const EXIT_REFUSED: u8 = airlock_channels::EXIT_REFUSED;

/// What this process was started to do, read from its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `__self-test [MODE]`: run the self-test probes (as the agent, spawned by PID 1).
    SelfTest(Option<String>),
    /// `__rescan-scan ARGS`: the workspace-secrets rescan's scan (as the agent, spawned by
    /// PID 1 on SIGHUP; see [`rescan`]).
    RescanScan(Vec<OsString>),
    /// `__rescan-handoff ARGS`: the rescan's hand-off rewrite (as the proxy user).
    RescanHandoff(Vec<OsString>),
    /// `airlock-session [ARGS]` or `__session [ARGS]`: a second confined session.
    Session(Vec<OsString>),
    /// `__admin`: the admin socket on standard input and output ([`admin_relay`]), for an
    /// operator's `kubectl exec -i`.
    AdminRelay,
    /// Anything else: PID 1's start, with the command line [`config::Cli`] parses.
    Start,
}

impl Invocation {
    /// The invocation for `args` (the program name first). Pure.
    pub fn of(args: &[OsString]) -> Invocation {
        let first = args.get(1).map(OsString::as_os_str);
        if first == Some(OsStr::new(selftest::ARG)) {
            return Invocation::SelfTest(args.get(2).and_then(|a| a.to_str()).map(str::to_owned));
        }
        let rest = || args.iter().skip(2).cloned().collect();
        if first == Some(OsStr::new(admin_relay::ARG)) {
            return Invocation::AdminRelay;
        }
        if first == Some(OsStr::new(rescan::SCAN_ARG)) {
            return Invocation::RescanScan(rest());
        }
        if first == Some(OsStr::new(rescan::HANDOFF_ARG)) {
            return Invocation::RescanHandoff(rest());
        }
        let as_session = args
            .first()
            .map(Path::new)
            .and_then(Path::file_name)
            .is_some_and(|n| n == second::PROGRAM);
        if as_session {
            return Invocation::Session(args.iter().skip(1).cloned().collect());
        }
        if first == Some(OsStr::new(second::ARG)) {
            return Invocation::Session(args.iter().skip(2).cloned().collect());
        }
        Invocation::Start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_invocation_is_read_from_the_program_name_and_the_first_argument() {
        assert_eq!(
            Invocation::of(&os(&[
                "/usr/bin/airlock-entrypoint",
                "__self-test",
                "report"
            ])),
            Invocation::SelfTest(Some("report".into()))
        );
        assert_eq!(
            Invocation::of(&os(&["airlock-entrypoint", "__self-test"])),
            Invocation::SelfTest(None)
        );
        assert_eq!(
            Invocation::of(&os(&["/usr/local/bin/airlock-session", "--", "ls"])),
            Invocation::Session(os(&["--", "ls"]))
        );
        assert_eq!(
            Invocation::of(&os(&["airlock-entrypoint", "__session", "--", "ls"])),
            Invocation::Session(os(&["--", "ls"]))
        );
        assert_eq!(
            Invocation::of(&os(&["airlock-entrypoint", "--check"])),
            Invocation::Start
        );
        assert_eq!(
            Invocation::of(&os(&["airlock-entrypoint", "__rescan-scan", "/w", "/p"])),
            Invocation::RescanScan(os(&["/w", "/p"]))
        );
        assert_eq!(
            Invocation::of(&os(&["airlock-entrypoint", "__rescan-handoff", "/s"])),
            Invocation::RescanHandoff(os(&["/s"]))
        );
        assert_eq!(
            Invocation::of(&os(&["airlock-entrypoint", "__admin"])),
            Invocation::AdminRelay
        );
        assert_eq!(Invocation::of(&[]), Invocation::Start);
    }
}
