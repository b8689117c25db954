//! The protocol between the agent's `git` shim and the git API, and nothing else.
//!
//! One connection carries one git invocation over a Unix socket:
//!
//! ```text
//! shim -> server   Auth frame   (JSON [`Auth`]: version, method, path, timestamp, nonce, MAC)
//! shim -> server   Body frame   (JSON [`Invocation`]: argv, cwd, env, stdin, terminal facts)
//! server -> shim   Stdout / Stderr frames as git produces them, then exactly one
//!                  Exit frame (JSON [`Exit`]) or Denied frame (JSON [`Denied`]).
//! ```
//!
//! The MAC is HMAC-SHA256 with the per-start session key over a canonical string
//! ([`auth::canonical_string`]) of the method, the path, the SHA-256 of the exact body bytes,
//! the timestamp and the nonce. The server accepts a timestamp within
//! [`auth::DEFAULT_WINDOW`] of its clock and each nonce once ([`auth::NonceCache`]), and at
//! most [`auth::DEFAULT_RATE`] signed requests (a token bucket checked before the nonce cache,
//! sized so that a flood from whoever holds the key cannot fill the cache).
//!
//! The HMAC is identity and integrity, not authorization: the agent can read the key. This
//! crate does not decide what git may do (the git API does), does not open sockets and does
//! not run git.

pub mod auth;
pub mod frame;
pub mod invocation;
pub mod placeholder;
pub mod reason;

pub use auth::{Auth, NonceCache, RateLimit, SessionKey, Verifier};
pub use frame::{Denied, Exit, Frame, FrameKind};
pub use invocation::Invocation;
pub use reason::Reason;

/// The protocol version this crate speaks; a request with another version is refused.
pub const PROTOCOL_VERSION: u32 = 1;
/// The method every git invocation is signed with.
pub const METHOD_RUN: &str = "RUN";
/// The path every git invocation is signed with.
pub const PATH_GIT: &str = "/v1/git";

/// Errors of this crate's operations (not denials: a denial is a [`Reason`]).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Reading a frame from the peer failed.
    #[error("reading a frame: {0}")]
    ReadFrame(#[source] std::io::Error),
    /// Writing a frame to the peer failed.
    #[error("writing a frame: {0}")]
    WriteFrame(#[source] std::io::Error),
    /// A frame announced more bytes than allowed.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge { len: usize, max: usize },
    /// A frame had an unknown kind byte.
    #[error("unknown frame kind {0}")]
    UnknownFrameKind(u8),
    /// A frame's JSON did not parse as the expected type.
    #[error("decoding {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// Encoding a value as JSON failed.
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A session key was not 64 hex digits (32 bytes).
    #[error("session key {origin}: {problem}")]
    ParseKey { origin: String, problem: String },
    /// Reading a session key file failed.
    #[error("reading session key file {path}: {source}")]
    ReadKey {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The kernel's random source failed.
    #[error("reading the kernel's random source: {0}")]
    Random(String),
    /// The clock is before 1970.
    #[error("the system clock is before 1970")]
    Clock,
}
