//! `airlock-entrypoint __admin`: the admin socket on standard input and output, for an
//! operator who reaches the container only through an exec (`kubectl exec -i POD -c airlock
//! -- airlock-entrypoint __admin`, or `docker exec -i` on a remote engine).
//!
//! It connects to [`airlock_control::admin::SOCKET`] in the control directory and copies
//! bytes both ways until the proxy closes the connection: the host CLI speaks the admin
//! protocol through it exactly as through the socket itself (one connection per request,
//! the event stream included). It reads and decides nothing. The socket's own walls stay:
//! only root in the container may enter the control directory, and the proxy checks the
//! peer (`SO_PEERCRED`), so the agent running this gets "permission denied".

use airlock_control::{admin, paths};
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Hidden first argument of this mode.
pub const ARG: &str = "__admin";

/// Relays standard input and output to the admin socket under `run_dir` until the proxy
/// closes the connection.
///
/// # Errors
/// The socket cannot be reached (one line: where, and why), or a copy fails.
pub fn main(run_dir: &Path) -> Result<()> {
    let path = paths::control_dir(run_dir).join(admin::SOCKET);
    let socket = UnixStream::connect(&path).with_context(|| {
        format!(
            "cannot connect to the admin socket {} (is the sandbox started, and is this root in its container?)",
            path.display()
        )
    })?;
    let mut up = socket
        .try_clone()
        .context("cannot duplicate the admin socket")?;
    // The request side: when the client closes its end, the proxy is told (half-close), so
    // a request without a length still ends; the answer keeps coming.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut up);
        let _ = up.shutdown(Shutdown::Write);
    });
    // The answer side, flushed as it comes: the event stream is read line by line.
    let mut down = socket;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match down.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("reading the admin socket"),
        };
        match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
            Ok(()) => {}
            // The client went away: nothing to answer to.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("writing the answer to standard output"),
        }
    }
}
