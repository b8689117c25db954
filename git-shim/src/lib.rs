//! The agent's `git` and `git-credential-airlock`.
//!
//! Inside the workspace the shim does not run git: it signs the invocation with the session
//! key and sends it to the git API over its Unix socket ([`client`]), streams git's output
//! back as it arrives, pages locally ([`pager`]) and exits with git's status. Patch files
//! are read and written here, as the agent ([`patches`]). Outside the
//! workspace it execs the real git with protected configuration ([`native`]). When the
//! workspace has no repository the entrypoint starts no git API and sets
//! `AIRLOCK_GIT_UNAVAILABLE`; git in the workspace then fails with that reason (it does not
//! fall back to native git, which could create a `.git` in the host's checkout). It makes no
//! policy decision (the server does) and starts no async runtime.

pub mod bisect;
pub mod client;
pub mod credential;
pub mod env;
pub mod native;
pub mod pager;
pub mod patches;
pub mod prepare;

/// Errors of the shim's operations.
#[derive(Debug)]
pub enum ShimError {
    /// The session key could not be read.
    Key(String),
    /// The git API socket could not be reached.
    Connect {
        socket: String,
        source: std::io::Error,
    },
    /// Talking to the git API failed mid-request.
    Protocol(String),
    /// An argument or file the shim must read was unusable.
    Input(String),
}

impl std::fmt::Display for ShimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShimError::Key(m) => write!(f, "cannot read the session key: {m}"),
            ShimError::Connect { socket, source } => write!(
                f,
                "the airlock git API is not answering at {socket} ({source}); git in the workspace runs only through it"
            ),
            ShimError::Protocol(m) => write!(f, "talking to the airlock git API: {m}"),
            ShimError::Input(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for ShimError {}
