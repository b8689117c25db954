//! The crate's one error type: each variant names the operation that failed.

use std::io;
use std::process::ExitStatus;

/// Why rendering input could not be trusted, or why applying it failed.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// The existing nat table holds something that is neither Docker's embedded-DNS rules nor
    /// ours: refusing beats silently dropping it (it may matter) or keeping it (it may leak).
    #[error(
        "unexpected line in the existing nat table (only DOCKER* chains and airlock's own are understood): {line:?}"
    )]
    UnexpectedNatRule {
        /// The offending line, verbatim.
        line: String,
    },
    /// A line that would be copied into our `iptables-restore` input could change its
    /// meaning (table switch, `COMMIT`, quoting, control bytes).
    #[error("refusing to preserve nat line {line:?}: {reason}")]
    UnsafeNatLine {
        /// The offending line, verbatim.
        line: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The `iptables-save -t nat` output ended inside the table.
    #[error("the nat table save output ends without COMMIT (truncated?)")]
    UnterminatedNatSave,
    /// The plan itself is inconsistent.
    #[error("firewall plan rejected: {reason}")]
    CheckPlan {
        /// What is inconsistent.
        reason: String,
    },
    /// The iptables tool could not be started.
    #[error("could not start {binary}: {source}")]
    Spawn {
        /// The tool (with its prefix, if any).
        binary: String,
        /// The OS error.
        source: io::Error,
    },
    /// The rules could not be written to the restore tool's stdin.
    #[error("could not write the rules to {binary}'s stdin: {source}")]
    WriteRules {
        /// The restore tool.
        binary: String,
        /// The OS error.
        source: io::Error,
    },
    /// Waiting for the tool failed.
    #[error("could not wait for {binary}: {source}")]
    Wait {
        /// The tool.
        binary: String,
        /// The OS error.
        source: io::Error,
    },
    /// `iptables-restore` / `ip6tables-restore` refused the rules; nothing was changed for
    /// the table that failed.
    #[error("{binary} refused the rules ({status}): {stderr}")]
    Restore {
        /// The restore tool.
        binary: String,
        /// Its exit status.
        status: ExitStatus,
        /// The first meaningful line of its stderr.
        stderr: String,
    },
    /// `iptables-save` failed.
    #[error("{binary} failed ({status}): {stderr}")]
    Save {
        /// The save tool.
        binary: String,
        /// Its exit status.
        status: ExitStatus,
        /// The first meaningful line of its stderr.
        stderr: String,
    },
    /// `iptables-save` printed something that is not UTF-8.
    #[error("{binary} printed output that is not UTF-8")]
    DecodeSave {
        /// The save tool.
        binary: String,
    },
}
