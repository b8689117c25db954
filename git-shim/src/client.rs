//! One request to the git API: connect, sign, send, stream the answer.

use crate::ShimError;
use airlock_wire::frame::{self, MAX_FRAME, write_frame, write_json};
use airlock_wire::{Denied, Exit, FrameKind, Invocation, SessionKey, auth};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// How the request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// git ran and exited with this status.
    Exited(i32),
    /// The git API refused.
    Denied(Denied),
}

/// Send `inv` and copy git's stdout to `out` and stderr to `err` as frames arrive.
pub fn run(
    socket: &Path,
    key: &SessionKey,
    inv: &Invocation,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, ShimError> {
    let body = inv
        .to_body()
        .map_err(|e| ShimError::Protocol(e.to_string()))?;
    let signed = auth::sign(key, &body).map_err(|e| ShimError::Protocol(e.to_string()))?;
    let mut stream = UnixStream::connect(socket).map_err(|source| ShimError::Connect {
        socket: socket.display().to_string(),
        source,
    })?;
    send_raw(&mut stream, &signed, &body)?;
    receive(&mut stream, out, err)
}

/// Write the two request frames (tests use this to replay or forge).
pub fn send_raw(
    stream: &mut UnixStream,
    signed: &airlock_wire::Auth,
    body: &[u8],
) -> Result<(), ShimError> {
    write_json(stream, FrameKind::Auth, signed, "auth")
        .map_err(|e| ShimError::Protocol(e.to_string()))?;
    write_frame(stream, FrameKind::Body, body).map_err(|e| ShimError::Protocol(e.to_string()))
}

/// Read frames until the exit or the denial.
pub fn receive(
    stream: &mut UnixStream,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, ShimError> {
    let mut out_open = true;
    loop {
        let f = frame::read_frame(stream, MAX_FRAME)
            .map_err(|e| ShimError::Protocol(e.to_string()))?
            .ok_or_else(|| {
                ShimError::Protocol(
                    "the git API closed the connection without an exit status".into(),
                )
            })?;
        match f.kind {
            FrameKind::Stdout => {
                // A pager that quit early is not an error; keep draining until the exit.
                if out_open && (out.write_all(&f.payload).is_err() || out.flush().is_err()) {
                    out_open = false;
                }
            }
            FrameKind::Stderr => {
                let _ = err.write_all(&f.payload);
                let _ = err.flush();
            }
            FrameKind::Exit => {
                let e: Exit = frame::decode(&f.payload, "exit")
                    .map_err(|e| ShimError::Protocol(e.to_string()))?;
                return Ok(Outcome::Exited(e.code));
            }
            FrameKind::Denied => {
                let d: Denied = frame::decode(&f.payload, "denied")
                    .map_err(|e| ShimError::Protocol(e.to_string()))?;
                return Ok(Outcome::Denied(d));
            }
            FrameKind::Auth | FrameKind::Body => {
                return Err(ShimError::Protocol(
                    "unexpected frame from the server".into(),
                ));
            }
        }
    }
}
