//! The `kind: audit`, `event: rotated` line of `audit.jsonl`: what left the log when its files
//! were kept within their cap, so that nothing leaves it unsaid.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::chain::ChainHash;
use crate::proxy::{AuditKind, Verdict};
use crate::time::Timestamp;

/// `event` of a [`Rotated`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RotatedEvent {
    #[serde(rename = "rotated")]
    Rotated,
}

/// The part of the log lines left (each part has its own share of the cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The stream (`audit.jsonl` and its rotated files, every line in the order written): its
    /// oldest file aged out. Its allowed lines moved to the allowed archive, its first lines
    /// to the first archive, the rest were dropped.
    Stream,
    /// The allowed archive (`audit.jsonl.allowed` and its rotated files): its oldest file was
    /// deleted.
    Allowed,
    /// The first archive (`audit.jsonl.first` and its rotated files): its oldest file was
    /// deleted.
    First,
}

impl Part {
    /// The stable string written to the log.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Allowed => "allowed",
            Self::First => "first",
        }
    }
}

/// Lines left the log (`kind: audit`, `event: rotated`): how many just left and from where,
/// and everything this session's log has dropped so far, so that the newest such line of a
/// session accounts for all of it (an older one of the same session may itself be dropped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rotated {
    /// When they left.
    pub ts: Timestamp,
    pub session: Arc<str>,
    pub sandbox: Arc<str>,
    pub container: Option<Arc<str>>,
    pub kind: AuditKind,
    pub event: RotatedEvent,
    /// Where they left from.
    pub part: Part,
    /// Lines dropped just now: gone from the log.
    pub lines: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The oldest `ts` among them (`null` when none had one).
    pub since: Option<Timestamp>,
    /// The newest `ts` among them.
    pub until: Option<Timestamp>,
    /// Lines moved to the allowed archive just now (from the stream only; 0 otherwise).
    pub to_allowed: u64,
    /// Lines moved to the first archive just now (from the stream only; 0 otherwise).
    pub to_first: u64,
    /// Everything dropped since this session's proxy started, these lines included.
    pub total: Total,
    /// From the stream only: the `chain` of the last line of the file that aged out, which
    /// the first line still in the stream follows (so that a verifier knows the stream's
    /// beginning was not cut off); `null` otherwise, and on lines written before the chain.
    #[serde(default)]
    pub after: Option<ChainHash>,
    /// The line's link in the log's hash chain (see [`crate::chain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainHash>,
}

/// Every line a session's log dropped, by what they were.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Total {
    pub lines: u64,
    pub bytes: u64,
    /// The oldest `ts` among them.
    pub since: Option<Timestamp>,
    /// The newest `ts` among them.
    pub until: Option<Timestamp>,
    /// One entry per `kind`, `event`, `decision` and `reason`.
    pub dropped: Vec<Dropped>,
    /// Dropped lines in no entry of `dropped`: unreadable (not an audit line), or past the
    /// bound on its entries.
    pub unlisted: u64,
}

/// Dropped lines of one `kind`, `event`, `decision` and `reason` (the lines' own values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dropped {
    /// `connect`, `http`, `transparent`, `dns`, `git-service`, `audit` (the log's own), or
    /// `*`: lines the allowed archive dropped, counted without being read (their kinds and
    /// destinations unknown: `lines`, `bytes`, `since`, `until` of the files' first and last
    /// lines, every line in `other_lines`).
    pub kind: String,
    pub event: Option<String>,
    pub decision: Option<Verdict>,
    pub reason: Option<String>,
    pub lines: u64,
    pub bytes: u64,
    /// Denials that the dropped `suppressed` lines had counted (0 for other lines): with
    /// `lines`, every decision the dropped lines recorded.
    pub folded: u64,
    /// The oldest `ts` among them.
    pub since: Option<Timestamp>,
    /// The newest `ts` among them.
    pub until: Option<Timestamp>,
    /// Their destinations, each with its lines and folded denials: the first ones met, up to
    /// a bound the writer documents.
    pub hosts: Vec<DroppedHost>,
    /// Lines to destinations past that bound.
    pub other_lines: u64,
    /// Denials their `suppressed` lines had counted.
    pub other_folded: u64,
}

/// The dropped lines of one entry that went to one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedHost {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub lines: u64,
    pub folded: u64,
}
