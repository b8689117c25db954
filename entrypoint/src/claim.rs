//! Claim-time secrets: a warm pod waits, holding nothing, until it is claimed.
//!
//! A pod of a Kubernetes warm pool starts before anyone claims it. Whatever PID 1 minted by
//! then (the session id, the HMAC session key the proxy and the git API share, the
//! credential placeholders, the proxy's CA) would go to whoever claims the pod later. With
//! `--wait-for-claim FILE` PID 1 therefore does nothing that depends on a session until the
//! file holds a claim (non-empty: a downward-API file of a claim annotation is empty until
//! the annotation is set); only then do the checks, the minting and the start run, as in
//! any start. Meanwhile the readiness record says `starting`, so the pod is not Ready, and
//! SIGTERM/SIGINT end the wait at once (PID 1 has no default action for them).

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};

/// How often the file is looked at.
const POLL: Duration = Duration::from_millis(100);
/// The longest claim read (an id, not a document).
const MAX_CLAIM: usize = 256;

/// The claim in `file`, once there is one: its first line, trimmed. `Err` when a stop
/// signal came first.
///
/// # Errors
/// When SIGTERM or SIGINT arrives while waiting: the start is over before it began.
pub fn wait(file: &Path) -> Result<String> {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    // Blocked, so that they are taken here (and stay pending for the supervisor's handling
    // if they come right after the claim).
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&stop), None)?;
    eprintln!(
        "airlock: waiting for a claim in {} (nothing is minted or started until then)",
        file.display()
    );
    loop {
        if let Some(claim) = read(file) {
            return Ok(claim);
        }
        if let Some(sig) = timed_wait(&stop, POLL) {
            bail!("{sig} while waiting for a claim: stopping before anything started");
        }
    }
}

/// The claim `file` holds, if any.
fn read(file: &Path) -> Option<String> {
    let bytes = std::fs::read(file).ok()?;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_CLAIM)]).into_owned();
    let claim = text.lines().next().unwrap_or("").trim().to_owned();
    (!claim.is_empty()).then_some(claim)
}

/// Waits up to `timeout` for one of `set` (blocked); the signal taken, if one came.
fn timed_wait(set: &SigSet, timeout: Duration) -> Option<Signal> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(0),
        tv_nsec: libc::c_long::from(i32::try_from(timeout.subsec_nanos()).unwrap_or(0)),
    };
    // SAFETY: `set` is a valid, initialised sigset_t; a null siginfo pointer is allowed; the
    // timespec lives across the call.
    let n = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
    (n > 0).then(|| Signal::try_from(n).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_missing_file_is_no_claim_and_the_first_line_is() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("claimed");
        assert_eq!(read(&f), None);
        std::fs::write(&f, b"").unwrap();
        assert_eq!(
            read(&f),
            None,
            "a downward-API file before the annotation is set"
        );
        std::fs::write(&f, b"  \n").unwrap();
        assert_eq!(read(&f), None);
        std::fs::write(&f, b"claim-7f3a\nmore\n").unwrap();
        assert_eq!(read(&f).as_deref(), Some("claim-7f3a"));
    }

    #[test]
    fn the_wait_ends_when_the_claim_appears() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("claimed");
        let g = f.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(250));
            std::fs::write(g, b"c1\n").unwrap();
        });
        assert_eq!(wait(&f).unwrap(), "c1");
        t.join().unwrap();
    }
}
