//! The workspace-secrets rescan (issue 21): the operator's explicit "read the workspace's
//! secret files again", for a `.env` the agent wrote after start.
//!
//! PID 1 starts it on SIGHUP ([`crate::supervise`]; `airlock rescan <name>` on the host
//! sends it); a later admin socket (docs/design.md §10) calls the same [`Rescan::run`].
//! PID 1 itself can read neither the agent's files nor the proxy's (it keeps only
//! `CAP_SETUID/SETGID/SETPCAP/KILL`), and it never holds a secret value:
//!
//! 1. the **scanner**, this binary run as the agent ([`SCAN_ARG`], the agent's uid, groups
//!    and seccomp filters, through [`crate::spawn`]), walks the workspace exactly as at
//!    start ([`workspace_secrets::scan`], same bounds, the policy's detectors) and writes
//!    the needles and the report's lines to a pipe. It reads what the agent can read: a
//!    file the agent cannot read is no leak risk;
//! 2. the **writer**, this binary run as the proxy user ([`HANDOFF_ARG`]), reads that pipe
//!    (bounded), reads the current hand-off, adds the needles it does not hold yet
//!    ([`merge`]: every other field, and every needle already there, stays) and replaces
//!    the hand-off atomically (a 0400 temporary file in the proxy's state directory,
//!    renamed); it prints the report's lines and the counts, never a value;
//! 3. PID 1 sends the proxy SIGHUP (it re-reads the hand-off and swaps its rules) and
//!    rewrites [`workspace_secrets::REPORT_FILE`] with the new lines and when.
//!
//! Needles only accumulate: a value found at start or by an earlier rescan stays a needle
//! until the container stops, whatever the agent did to its file since (deleted it, made
//! it unreadable, huge or binary): an agent cannot unprotect a secret by hiding its file
//! before a rescan. Every step is bounded by [`TIMEOUT`] (children killed after it); a
//! failure is one line on PID 1's stderr naming what failed, and the hand-off and the
//! proxy's needles are then the ones it had. While the rescan runs PID 1 does not reap
//! (at most [`TIMEOUT`]); signals wait and are handled after it.
//!
//! Not done: the admin socket; an audit line for the reload (the audit schema has no event
//! outside a connection: the proxy's reload is a line on its stderr).

use crate::console;
use crate::spawn::RunAs;
use crate::workspace_secrets;
use airlock_handoff::{Handoff, WorkspaceSecret};
use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Argument of the scanner (this binary as the agent): `__rescan-scan WORKDIR POLICY`.
pub const SCAN_ARG: &str = "__rescan-scan";
/// Argument of the writer (this binary as the proxy user): `__rescan-handoff STATE_DIR`.
pub const HANDOFF_ARG: &str = "__rescan-handoff";
/// Time a whole rescan may take; its children are killed after it.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of the scanner's output the writer reads (64 files of 64 KiB, JSON-escaped, fit).
const MAX_SCAN_OUTPUT: u64 = 16 * 1024 * 1024;
/// Bytes of the writer's output PID 1 reads.
const MAX_WRITER_OUTPUT: usize = 1024 * 1024;

/// What the scanner hands the writer.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanOutput {
    /// The needles found now.
    pub secrets: Vec<WorkspaceSecret>,
    /// The report's lines (names and files, never values).
    pub report: Vec<String>,
}

/// Adds to `handoff` the needles of `found` it does not hold yet (same value, whatever the
/// file: the first finding names it) and changes nothing else. Returns how many were added.
/// Pure.
pub fn merge(handoff: &mut Handoff, found: Vec<WorkspaceSecret>) -> usize {
    let mut added = 0;
    for secret in found {
        let known = handoff
            .workspace_secrets
            .iter()
            .any(|s| s.value.expose() == secret.value.expose());
        if !known {
            handoff.workspace_secrets.push(secret);
            added += 1;
        }
    }
    added
}

/// The counts line of a rescan (PID 1's and the report file's last line).
#[must_use]
pub fn summary(added: usize, total: usize, at: SystemTime) -> String {
    format!(
        "workspace secrets rescanned at {}: {added} new needles, {total} in all (needles found earlier stay until the container stops)",
        airlock_audit_schema::rfc3339_ms(at)
    )
}

/// Everything PID 1 needs for a rescan.
#[derive(Debug, Clone)]
pub struct Rescan {
    /// The scanner's identity: the agent's, with its seccomp filters.
    pub agent: RunAs,
    /// The writer's identity: the proxy user's.
    pub proxy: RunAs,
    /// The workspace.
    pub workdir: PathBuf,
    /// The effective policy (0644: the agent reads it; its `[secrets]` shape the detectors).
    pub policy: PathBuf,
    /// The proxy's state directory (the hand-off).
    pub state_dir: PathBuf,
    /// The run directory (the report file).
    pub run_dir: PathBuf,
}

impl Rescan {
    /// One rescan, then SIGHUP to `proxy`. Never fails: what went wrong is one line and the
    /// proxy keeps the needles it has.
    pub fn run(&self, proxy: Pid) {
        match self.try_run(proxy) {
            Ok(lines) => lines.iter().for_each(|l| console::info(l)),
            Err(e) => console::info(&format!(
                "workspace secrets rescan failed: {e:#}; the proxy keeps the needles it had"
            )),
        }
    }

    fn try_run(&self, proxy: Pid) -> Result<Vec<String>> {
        let deadline = Instant::now() + TIMEOUT;
        let exe = std::env::current_exe().context("cannot locate the entrypoint binary")?;
        let env = BTreeMap::new();
        let (from_scanner, to_writer) = std::io::pipe().context("cannot create a pipe")?;
        let mut scanner = self.agent.command(&exe, &env, Path::new("/"));
        scanner
            .arg(SCAN_ARG)
            .arg(&self.workdir)
            .arg(&self.policy)
            .stdin(Stdio::null())
            .stdout(to_writer);
        // On a terminal, their lines go to airlock's log (as the proxy's), not the agent's
        // screen.
        if let Some(log) = console::child_stream()? {
            scanner.stderr(log);
        }
        let spawned = scanner.spawn();
        // The command holds PID 1's copy of the pipe's write end: gone now, so the writer
        // sees end of file when the scanner exits.
        drop(scanner);
        let spawned = spawned
            .with_context(|| format!("cannot start the scan as {}", self.agent.identity.name));
        let mut scanner = Reaped(Some(spawned?));
        let mut writer = self.proxy.command(&exe, &env, Path::new("/"));
        writer
            .arg(HANDOFF_ARG)
            .arg(&self.state_dir)
            .stdin(from_scanner)
            .stdout(Stdio::piped());
        if let Some(log) = console::child_stream()? {
            writer.stderr(log);
        }
        let spawned = writer.spawn();
        drop(writer);
        let spawned = spawned.with_context(|| {
            format!(
                "cannot start the hand-off rewrite as {}",
                self.proxy.identity.name
            )
        });
        let mut writer = Reaped(Some(spawned?));
        let out = writer.read_stdout(deadline)?;
        let scanned = scanner.wait(deadline)?;
        let written = writer.wait(deadline)?;
        if !scanned.success() {
            bail!(
                "the scan as {} failed ({scanned}; its reason is the line above)",
                self.agent.identity.name
            );
        }
        if !written.success() {
            bail!(
                "rewriting the hand-off as {} failed ({written}; its reason is the line above)",
                self.proxy.identity.name
            );
        }
        kill(proxy, Signal::SIGHUP).context("cannot signal the proxy to reload")?;
        let lines: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_owned)
            .collect();
        let mut text = lines.join("\n");
        text.push('\n');
        // The needles are the proxy's already: a report that cannot be written is its own
        // line, not a failed rescan.
        if let Err(e) = crate::proxy_state::write_atomic(
            &self.run_dir,
            workspace_secrets::REPORT_FILE,
            text.as_bytes(),
            0o644,
            None,
        ) {
            console::info(&format!("workspace secrets: no report file: {e:#}"));
        }
        Ok(lines)
    }
}

/// A child killed and reaped if dropped before it was waited for.
struct Reaped(Option<Child>);

impl Reaped {
    /// Its stdout, until end of file, at most [`MAX_WRITER_OUTPUT`] bytes, by `deadline`.
    fn read_stdout(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        use std::os::fd::AsFd;
        let child = self.0.as_mut().context("child gone")?;
        let mut stdout = child.stdout.take().context("no pipe from the child")?;
        let flags = nix::fcntl::fcntl(stdout.as_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(stdout.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) => return Ok(out),
                Ok(n) if out.len() + n > MAX_WRITER_OUTPUT => {
                    bail!("the hand-off rewrite said more than {MAX_WRITER_OUTPUT} bytes")
                }
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        bail!("timed out after {}s", TIMEOUT.as_secs());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading the hand-off rewrite's answer"),
            }
        }
    }

    /// Its exit status, by `deadline` (killed after it).
    fn wait(&mut self, deadline: Instant) -> Result<ExitStatus> {
        let child = self.0.as_mut().context("child gone")?;
        loop {
            if let Some(status) = child.try_wait().context("waiting for a rescan child")? {
                self.0 = None;
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("timed out after {}s", TIMEOUT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The scanner's `main` (as the agent): `args` are the workspace and the policy file.
pub fn scan_main(args: &[OsString]) -> ExitCode {
    match scan_to_stdout(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("airlock: workspace secrets rescan: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn scan_to_stdout(args: &[OsString]) -> Result<()> {
    let [workdir, policy] = args else {
        bail!("usage: {SCAN_ARG} WORKDIR POLICY");
    };
    let policy = airlock_policy::Policy::load(Path::new(policy))
        .map_err(|e| anyhow!("cannot read the policy: {e}"))?;
    let formats = airlock_policy::detect::Formats::with_policy(&policy.secrets)
        .map_err(|e| anyhow!("cannot build the detectors: {e}"))?;
    let scan = workspace_secrets::scan(Path::new(workdir), &formats);
    let report = workspace_secrets::report(&scan);
    let out = ScanOutput {
        secrets: workspace_secrets::needles(scan.found),
        report,
    };
    let json = serde_json::to_vec(&out).context("cannot encode the scan")?;
    std::io::stdout()
        .lock()
        .write_all(&json)
        .context("cannot hand the scan on")
}

/// The writer's `main` (as the proxy user): `args` are the proxy's state directory; the
/// scan comes on stdin.
pub fn handoff_main(args: &[OsString]) -> ExitCode {
    match rewrite_handoff(args) {
        Ok(lines) => {
            let mut out = std::io::stdout().lock();
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("airlock: workspace secrets rescan: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn rewrite_handoff(args: &[OsString]) -> Result<Vec<String>> {
    let [state_dir] = args else {
        bail!("usage: {HANDOFF_ARG} STATE_DIR");
    };
    let dir = Path::new(state_dir);
    let mut input = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_SCAN_OUTPUT + 1)
        .read_to_end(&mut input)
        .context("cannot read the scan")?;
    if input.len() as u64 > MAX_SCAN_OUTPUT {
        bail!("the scan's output is over {MAX_SCAN_OUTPUT} bytes: not used");
    }
    let scan: ScanOutput = serde_json::from_slice(&input)
        .map_err(|e| anyhow!("the scan's output is not whole ({e}): not used"))?;
    let path = dir.join(airlock_channels::CREDENTIALS_FILE);
    let old = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut handoff: Handoff = serde_json::from_slice(&old)
        .map_err(|e| anyhow!("the hand-off {} is malformed: {e}", path.display()))?;
    let added = merge(&mut handoff, scan.secrets);
    let json = serde_json::to_vec(&handoff).context("cannot encode the hand-off")?;
    crate::proxy_state::write_atomic(dir, airlock_channels::CREDENTIALS_FILE, &json, 0o400, None)?;
    let mut lines = scan.report;
    lines.push(summary(
        added,
        handoff.workspace_secrets.len(),
        SystemTime::now(),
    ));
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_handoff::{HANDOFF_VERSION, MissingCredential, ResolvedCredential, Secret};
    use std::time::UNIX_EPOCH;

    fn needle(file: &str, name: &str, value: &str) -> WorkspaceSecret {
        WorkspaceSecret {
            file: file.into(),
            name: name.into(),
            detector: None,
            value: Secret::new(value.into()),
        }
    }

    /// The rewrite keeps the credentials, the placeholders, the missing list and every
    /// needle already there (a file deleted or made unreadable before the rescan unprotects
    /// nothing); it adds only values it did not hold.
    #[test]
    fn a_rescan_adds_needles_and_changes_nothing_else() {
        let start = Handoff {
            version: HANDOFF_VERSION,
            session: "s1".into(),
            credentials: vec![ResolvedCredential {
                name: "api".into(),
                value: Secret::new("sk-real".into()),
                placeholder: "airlock-placeholder-api-1".into(),
            }],
            git_placeholder: Some("airlock-git.s1.1".into()),
            workspace_secrets: vec![needle(".env", "DB_PASSWORD", "first-Secret-0001")],
            missing: vec![MissingCredential {
                name: "gh".into(),
                placeholder: "airlock-placeholder-gh-1".into(),
                fix: "set it".into(),
            }],
            git_service: None,
        };
        let mut h = start.clone();
        // The agent rewrote .env: the old value gone from it, a new one and a copy of a
        // known value elsewhere.
        let added = merge(
            &mut h,
            vec![
                needle(".env", "AWS_SECRET_ACCESS_KEY", "second-Secret-0002"),
                needle("copy/.env", "PASS", "first-Secret-0001"),
            ],
        );
        assert_eq!(added, 1);
        let mut want = start.clone();
        want.workspace_secrets.push(needle(
            ".env",
            "AWS_SECRET_ACCESS_KEY",
            "second-Secret-0002",
        ));
        assert_eq!(h, want);
        // A scan that found nothing (the file unreadable now) drops nothing.
        assert_eq!(merge(&mut h, Vec::new()), 0);
        assert_eq!(h, want);
    }

    #[test]
    fn the_summary_names_counts_and_the_time_never_values() {
        let t = UNIX_EPOCH + Duration::from_secs(1_764_084_000);
        assert_eq!(
            summary(1, 3, t),
            "workspace secrets rescanned at 2025-11-25T15:20:00.000Z: 1 new needles, 3 in all (needles found earlier stay until the container stops)"
        );
    }
}
