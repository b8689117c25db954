//! Length-prefixed frames: `[kind: u8][length: u32 big-endian][payload]`.

use crate::WireError;
use crate::reason::Reason;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// The largest payload a reader accepts unless told otherwise (request bodies carry stdin).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// Output is forwarded in frames of at most this size.
pub const CHUNK: usize = 64 * 1024;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// shim -> server: JSON [`crate::Auth`].
    Auth = 1,
    /// shim -> server: JSON [`crate::Invocation`] (the signed bytes).
    Body = 2,
    /// server -> shim: bytes git wrote to stdout.
    Stdout = 3,
    /// server -> shim: bytes git wrote to stderr.
    Stderr = 4,
    /// server -> shim: JSON [`Exit`]; last frame.
    Exit = 5,
    /// server -> shim: JSON [`Denied`]; last frame.
    Denied = 6,
}

impl FrameKind {
    fn from_byte(b: u8) -> Result<FrameKind, WireError> {
        Ok(match b {
            1 => FrameKind::Auth,
            2 => FrameKind::Body,
            3 => FrameKind::Stdout,
            4 => FrameKind::Stderr,
            5 => FrameKind::Exit,
            6 => FrameKind::Denied,
            other => return Err(WireError::UnknownFrameKind(other)),
        })
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What it carries.
    pub kind: FrameKind,
    /// The payload.
    pub payload: Vec<u8>,
}

/// git's exit: `code` is the shell-style status (128 + signal when git was killed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exit {
    /// Exit status to exit with.
    pub code: i32,
}

/// A refusal: the stable reason code and a one-line human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Denied {
    /// [`Reason::as_str`].
    pub reason: String,
    /// Which rule refused, and how an operator would allow it.
    pub message: String,
}

impl Denied {
    /// A denial for `reason`.
    #[must_use]
    pub fn new(reason: Reason, message: impl Into<String>) -> Denied {
        Denied {
            reason: reason.as_str().to_owned(),
            message: message.into(),
        }
    }
}

/// Write one frame (header and payload in one `write_all` so frames never interleave when
/// the writer is shared behind a lock).
pub fn write_frame(w: &mut impl Write, kind: FrameKind, payload: &[u8]) -> Result<(), WireError> {
    let len = u32::try_from(payload.len()).map_err(|_| WireError::FrameTooLarge {
        len: payload.len(),
        max: u32::MAX as usize,
    })?;
    let mut buf = Vec::with_capacity(5 + payload.len());
    buf.push(kind as u8);
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf).map_err(WireError::WriteFrame)?;
    w.flush().map_err(WireError::WriteFrame)
}

/// Write a JSON frame.
pub fn write_json<T: Serialize>(
    w: &mut impl Write,
    kind: FrameKind,
    value: &T,
    what: &'static str,
) -> Result<(), WireError> {
    let bytes = serde_json::to_vec(value).map_err(|source| WireError::Encode { what, source })?;
    write_frame(w, kind, &bytes)
}

/// Read one frame; `Ok(None)` on a clean end of stream before the first header byte.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Option<Frame>, WireError> {
    let mut header = [0u8; 5];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(WireError::ReadFrame(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame header",
                )));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(WireError::ReadFrame(e)),
        }
    }
    let kind = FrameKind::from_byte(header[0])?;
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > max {
        return Err(WireError::FrameTooLarge { len, max });
    }
    // Grow with the bytes that actually arrive: five bytes announcing `max` must not make
    // the reader allocate `max` up front (per connection).
    let mut payload = Vec::with_capacity(len.min(64 * 1024));
    let read = r
        .take(len as u64)
        .read_to_end(&mut payload)
        .map_err(WireError::ReadFrame)?;
    if read < len {
        return Err(WireError::ReadFrame(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "truncated frame payload",
        )));
    }
    Ok(Some(Frame { kind, payload }))
}

/// Decode a frame's JSON payload.
pub fn decode<'a, T: Deserialize<'a>>(
    payload: &'a [u8],
    what: &'static str,
) -> Result<T, WireError> {
    serde_json::from_slice(payload).map_err(|source| WireError::Decode { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_announcing_the_maximum_allocates_only_what_arrives() {
        // The attack: five bytes claiming MAX_FRAME, then a few bytes and EOF.
        let mut buf = vec![FrameKind::Stdout as u8];
        buf.extend_from_slice(&u32::try_from(MAX_FRAME).unwrap().to_be_bytes());
        buf.extend_from_slice(b"abc");
        let err = read_frame(&mut buf.as_slice(), MAX_FRAME).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, FrameKind::Stdout, b"hello").unwrap();
        write_json(&mut buf, FrameKind::Exit, &Exit { code: 130 }, "exit").unwrap();
        let mut r = buf.as_slice();
        let f = read_frame(&mut r, MAX_FRAME).unwrap().unwrap();
        assert_eq!(
            (f.kind, f.payload.as_slice()),
            (FrameKind::Stdout, &b"hello"[..])
        );
        let f = read_frame(&mut r, MAX_FRAME).unwrap().unwrap();
        assert_eq!(decode::<Exit>(&f.payload, "exit").unwrap().code, 130);
        assert!(read_frame(&mut r, MAX_FRAME).unwrap().is_none());
    }

    #[test]
    fn oversized_truncated_and_unknown_frames_are_errors() {
        let mut buf = Vec::new();
        write_frame(&mut buf, FrameKind::Body, &[0u8; 100]).unwrap();
        assert!(matches!(
            read_frame(&mut buf.as_slice(), 99),
            Err(WireError::FrameTooLarge { len: 100, max: 99 })
        ));
        assert!(read_frame(&mut &buf[..3], MAX_FRAME).is_err());
        assert!(read_frame(&mut &buf[..50], MAX_FRAME).is_err());
        assert!(matches!(
            read_frame(&mut &[9u8, 0, 0, 0, 0][..], MAX_FRAME),
            Err(WireError::UnknownFrameKind(9))
        ));
    }
}
