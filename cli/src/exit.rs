//! Exit codes: documented in `airlock --help` and docs/cli.md, stable for scripts.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | any other failure (one line on stderr says what and what to do) |
//! | 2 | bad usage (clap) or bad input: a bad name, a path that is not a repository, a policy that does not load (`policy reload`) |
//! | 3 | no such sandbox (or secret) |
//! | 4 | refused: the name is taken, the action would lose work (`--force`), or a reload needs a restart |
//! | 5 | the container engine is unreachable |
//! | 6 | the image is missing (`airlock build` / `scripts/build-image`) |
//! | 7 | an audit log is not intact (`airlock audit verify`) |
//!
//! `airlock exec` exits with the command's own status.

use std::fmt;

/// A failure with the exit code it maps to; carried through `anyhow` and found by downcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 1
    Failure = 1,
    /// 2
    Usage = 2,
    /// 3
    NotFound = 3,
    /// 4
    Refused = 4,
    /// 5
    EngineDown = 5,
    /// 6
    ImageMissing = 6,
    /// 7
    NotIntact = 7,
}

/// The exit-code table as printed under `airlock --help`.
pub const TABLE: &str = "\
Exit codes:
  0  success
  1  any other failure (one line on stderr says what is wrong and what to do)
  2  bad usage or bad input (a bad name, a path that is not a repository, a policy
     that does not load)
  3  no such sandbox (or secret)
  4  refused: the name is taken, the action would lose work (see --force), or a policy
     change needs a restart
  5  the container engine is unreachable (DOCKER_HOST)
  6  the image is missing (run `airlock build`)
  7  an audit log is not intact (`airlock audit verify` names the line)
  `airlock exec` exits with the command's own status.";

/// An error that knows its exit code; the message is the whole line the user sees.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: Code,
    /// What is wrong and what to do.
    pub message: String,
}

impl Failure {
    /// A failure with `code` saying `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The code of one error, if it has one.
fn code_of_one(e: &(dyn std::error::Error + 'static)) -> Option<Code> {
    use crate::admin::AdminError;
    use crate::checkout::CheckoutError;
    use crate::engine::EngineError;
    use crate::registry::RegistryError;
    use crate::secrets::SecretError;
    use airlock_control::admin::ErrorCode;
    if let Some(f) = e.downcast_ref::<Failure>() {
        return Some(f.code);
    }
    if e.downcast_ref::<crate::names::NameError>().is_some() {
        return Some(Code::Usage);
    }
    if let Some(CheckoutError::NotARepository { .. } | CheckoutError::Refused { .. }) =
        e.downcast_ref::<CheckoutError>()
    {
        return Some(Code::Usage);
    }
    match e.downcast_ref::<crate::secrets::SecretError>() {
        Some(SecretError::BadName { .. } | SecretError::Empty { .. }) => return Some(Code::Usage),
        Some(SecretError::Missing { .. }) => return Some(Code::NotFound),
        _ => {}
    }
    if let Some(RegistryError::Taken { .. }) = e.downcast_ref::<RegistryError>() {
        return Some(Code::Refused);
    }
    match e.downcast_ref::<AdminError>().and_then(AdminError::code) {
        Some(ErrorCode::InvalidPolicy | ErrorCode::BadRequest) => return Some(Code::Usage),
        Some(ErrorCode::RestartNeeded) => return Some(Code::Refused),
        _ => {}
    }
    match e.downcast_ref::<EngineError>() {
        Some(EngineError::Connect { .. }) => Some(Code::EngineDown),
        Some(EngineError::ImageMissing { .. }) => Some(Code::ImageMissing),
        _ => None,
    }
}

/// The code of an error chain: the first error in it that has one, else [`Code::Failure`].
pub fn code_of(err: &anyhow::Error) -> i32 {
    err.chain().find_map(code_of_one).unwrap_or(Code::Failure) as i32
}
