//! The crate's only effects: read the current nat table, apply rendered rules, probe IPv6.
//!
//! One `iptables-restore` / `ip6tables-restore` process per family, the rules on its stdin:
//! each table is replaced as a whole (no `--noflush`), never rule by rule. The tools are run
//! through a [`Runner`], whose only knob is a command prefix (e.g. `ip netns exec <ns>`) so
//! tests can apply inside a throwaway network namespace; production uses [`Runner::host`].
//! The tools are found on `PATH` (PID 1's own environment, which the agent cannot touch).

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::{Command, Stdio};

use crate::{Family, FirewallError};

/// How long the tools wait for the xtables lock (legacy backend; nf_tables ignores it).
const WAIT_SECONDS: &str = "--wait=5";
/// Cap on the stderr line carried in an error.
const MAX_STDERR: usize = 300;

/// Whether the container has an IPv6 stack that needs filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv6State {
    /// No `/proc/net/if_inet6`, or `net.ipv6.conf.all.disable_ipv6 = 1` and no interface
    /// but loopback holds an IPv6 address.
    Disabled,
    /// Anything else, including "could not tell": then we filter (fail closed).
    Enabled,
}

impl Ipv6State {
    /// The pure decision behind [`ipv6_state`]: `if_inet6` is the content of
    /// `/proc/net/if_inet6` (`None` if it does not exist), `all_disable_ipv6` the content of
    /// `/proc/sys/net/ipv6/conf/all/disable_ipv6` if it could be read.
    ///
    /// `all.disable_ipv6 = 1` alone does not mean "no IPv6": Docker sets it in every
    /// container and then enables IPv6 per interface on an `--ipv6` network (seen with
    /// Docker 20.10: `all` = 1, `eth0` = 0 with a global address). So an address on any
    /// interface other than `lo` means the stack is live and must be filtered.
    #[must_use]
    pub fn from_proc(if_inet6: Option<&str>, all_disable_ipv6: Option<&str>) -> Self {
        let Some(addrs) = if_inet6 else {
            return Self::Disabled;
        };
        let beyond_loopback = addrs
            .lines()
            .filter(|l| !l.trim().is_empty())
            .any(|l| l.split_whitespace().nth(5) != Some("lo"));
        if all_disable_ipv6.map(str::trim) == Some("1") && !beyond_loopback {
            Self::Disabled
        } else {
            Self::Enabled
        }
    }
}

/// Probe the current network namespace's IPv6 state.
#[must_use]
pub fn ipv6_state() -> Ipv6State {
    let addrs = std::fs::read_to_string("/proc/net/if_inet6").ok();
    let all = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6").ok();
    Ipv6State::from_proc(addrs.as_deref(), all.as_deref())
}

/// Run `iptables-save -t nat` on the host (the current namespace).
///
/// # Errors
/// The tool could not run, failed, or printed non-UTF-8.
pub fn save_nat_v4() -> Result<String, FirewallError> {
    Runner::host().save_nat_v4()
}

/// Apply `rules` (from [`crate::render_v4`] / [`crate::render_v6`]) with one
/// `iptables-restore` / `ip6tables-restore` process, input on stdin.
///
/// # Errors
/// [`FirewallError::Restore`] with the tool's name and the first line of its stderr if it
/// refused the rules; spawn / write / wait errors otherwise.
pub fn apply(family: Family, rules: &str) -> Result<(), FirewallError> {
    Runner::host().apply(family, rules)
}

/// Runs the iptables tools, optionally behind a command prefix.
#[derive(Debug, Clone, Default)]
pub struct Runner {
    prefix: Vec<OsString>,
}

impl Runner {
    /// Run the tools directly, in the current network namespace.
    #[must_use]
    pub fn host() -> Self {
        Self::default()
    }

    /// Run the tools behind `prefix`, e.g. `["ip", "netns", "exec", "<ns>"]`.
    #[must_use]
    pub fn with_prefix<I, S>(prefix: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self {
            prefix: prefix.into_iter().map(Into::into).collect(),
        }
    }

    /// `iptables-save -t nat`.
    ///
    /// # Errors
    /// As [`Runner::save`].
    pub fn save_nat_v4(&self) -> Result<String, FirewallError> {
        self.save(Family::V4, "nat")
    }

    /// `iptables-save -t <table>` / `ip6tables-save -t <table>`.
    ///
    /// # Errors
    /// [`FirewallError::Spawn`], [`FirewallError::Save`] (non-zero exit, with the first line
    /// of stderr), [`FirewallError::DecodeSave`].
    pub fn save(&self, family: Family, table: &str) -> Result<String, FirewallError> {
        let tool = family.save_binary();
        let binary = self.describe(tool);
        let output = self
            .command(tool)
            .args(["-t", table])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| FirewallError::Spawn {
                binary: binary.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(FirewallError::Save {
                binary,
                status: output.status,
                stderr: first_line(&output.stderr),
            });
        }
        String::from_utf8(output.stdout).map_err(|_| FirewallError::DecodeSave { binary })
    }

    /// Feed `rules` to one `iptables-restore` / `ip6tables-restore` process.
    ///
    /// # Errors
    /// As [`apply`].
    pub fn apply(&self, family: Family, rules: &str) -> Result<(), FirewallError> {
        let tool = family.restore_binary();
        let binary = self.describe(tool);
        let mut child = self
            .command(tool)
            .arg(WAIT_SECONDS)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| FirewallError::Spawn {
                binary: binary.clone(),
                source,
            })?;
        let stdin = child.stdin.take();
        // Write from a second thread while this one drains stderr: a tool that complains at
        // length before reading all its input must not deadlock us.
        let (written, waited) = std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> io::Result<()> {
                let mut stdin = stdin.ok_or_else(|| io::Error::other("no stdin pipe"))?;
                stdin.write_all(rules.as_bytes())?;
                stdin.flush()
                // Dropping stdin closes the pipe: end of input.
            });
            let waited = child.wait_with_output();
            let written = writer
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("stdin writer thread panicked")));
            (written, waited)
        });
        let output = waited.map_err(|source| FirewallError::Wait {
            binary: binary.clone(),
            source,
        })?;
        // The tool's own complaint explains a broken pipe better than the pipe does.
        if !output.status.success() {
            return Err(FirewallError::Restore {
                binary,
                status: output.status,
                stderr: first_line(&output.stderr),
            });
        }
        written.map_err(|source| FirewallError::WriteRules { binary, source })
    }

    fn command(&self, tool: &str) -> Command {
        match self.prefix.split_first() {
            None => Command::new(tool),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(tool);
                command
            }
        }
    }

    /// The tool's name, with the prefix if there is one.
    fn describe(&self, tool: &str) -> String {
        if self.prefix.is_empty() {
            return tool.to_owned();
        }
        let prefix: Vec<String> = self
            .prefix
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        format!("{} {tool}", prefix.join(" "))
    }
}

/// The first meaningful line of a tool's stderr (skipping blank lines and `#` warnings such
/// as "iptables-legacy tables present"), capped in length.
fn first_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .or_else(|| text.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("(nothing on stderr)");
    line.chars().take(MAX_STDERR).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_state_fails_closed_when_unsure() {
        const LO: &str = "00000000000000000000000000000001 01 80 10 80       lo\n";
        assert_eq!(Ipv6State::from_proc(None, None), Ipv6State::Disabled);
        assert_eq!(Ipv6State::from_proc(None, Some("0\n")), Ipv6State::Disabled);
        assert_eq!(
            Ipv6State::from_proc(Some(LO), Some("1\n")),
            Ipv6State::Disabled
        );
        assert_eq!(
            Ipv6State::from_proc(Some(""), Some("1\n")),
            Ipv6State::Disabled
        );
        assert_eq!(
            Ipv6State::from_proc(Some(LO), Some("0\n")),
            Ipv6State::Enabled
        );
        // Present but unreadable or odd: filter it.
        assert_eq!(Ipv6State::from_proc(Some(LO), None), Ipv6State::Enabled);
        assert_eq!(
            Ipv6State::from_proc(Some(LO), Some("garbage")),
            Ipv6State::Enabled
        );
        assert_eq!(
            Ipv6State::from_proc(Some("garbage"), Some("1")),
            Ipv6State::Enabled
        );
    }

    #[test]
    fn attack_docker_ipv6_network_with_all_disabled_but_eth0_live_is_filtered() {
        // /proc in a container on `docker network create --ipv6`: all.disable_ipv6 = 1,
        // but eth0 has a global and a link-local address. Unfiltered, that is a way out.
        let docker = "20010db8011400000000000000000002 3d 40 00 82     eth0\n\
                      00000000000000000000000000000001 01 80 10 80       lo\n\
                      fe800000000000000042c6fffe336402 3d 40 20 c0     eth0\n";
        assert_eq!(
            Ipv6State::from_proc(Some(docker), Some("1\n")),
            Ipv6State::Enabled
        );
    }

    #[test]
    fn first_line_skips_warnings_and_blank_lines() {
        assert_eq!(
            first_line(b"\n# Warning: iptables-legacy tables present\niptables-restore: line 7 failed\nmore\n"),
            "iptables-restore: line 7 failed"
        );
        assert_eq!(first_line(b""), "(nothing on stderr)");
        assert_eq!(first_line(b"# only a warning\n"), "# only a warning");
        assert_eq!(first_line(&[b'x'; 1000]).len(), MAX_STDERR);
    }

    #[test]
    fn a_refusing_tool_reports_its_name_and_first_stderr_line() {
        // `sh -c '...' <tool>`: the prefix seam runs a stand-in that reads stdin and refuses.
        let runner = Runner::with_prefix([
            "sh",
            "-c",
            "cat >/dev/null; echo \"$0: line 3 failed\" >&2; echo detail >&2; exit 2",
        ]);
        let err = runner.apply(Family::V6, "*filter\nCOMMIT\n").unwrap_err();
        match err {
            FirewallError::Restore {
                binary,
                status,
                stderr,
            } => {
                assert!(binary.ends_with("ip6tables-restore"), "{binary}");
                assert_eq!(status.code(), Some(2));
                assert_eq!(stderr, "ip6tables-restore: line 3 failed");
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn the_rules_arrive_whole_on_stdin_of_one_process() {
        let dir = std::env::temp_dir().join(format!("airlock-fw-apply-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sink = dir.join("stdin");
        let script = format!("cat >'{}'; test \"$1\" = {WAIT_SECONDS}", sink.display());
        let runner = Runner::with_prefix(["sh", "-c", script.as_str()]);
        let rules = "*filter\n:OUTPUT DROP [0:0]\nCOMMIT\n".repeat(5000);
        runner.apply(Family::V4, &rules).unwrap();
        assert_eq!(std::fs::read_to_string(&sink).unwrap(), rules);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_tool_is_a_spawn_error_naming_it() {
        let runner = Runner::with_prefix(["/nonexistent/airlock-no-such-tool"]);
        let err = runner.save_nat_v4().unwrap_err();
        assert!(
            matches!(err, FirewallError::Spawn { ref binary, .. } if binary.ends_with("iptables-save")),
            "{err}"
        );
    }
}
