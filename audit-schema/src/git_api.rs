//! `git-api.jsonl`: the git API's lines.
//!
//! Every line carries `ts`, `session` (the per-start session id the git API was given, else
//! `null`), `component` (`git-api`) and `event`, in that order, then the event's fields in
//! alphabetical order. The git API cuts every string the agent chooses to a budget (with a
//! `…[truncated N bytes]` marker) and then says `"truncated": true`.

use serde::{Deserialize, Serialize};

use crate::proxy::Verdict;
use crate::time::Timestamp;

/// `component` of every git API line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Component {
    #[serde(rename = "git-api")]
    GitApi,
}

/// One line of `git-api.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GitApiRecord {
    pub ts: Timestamp,
    pub session: Option<String>,
    pub component: Component,
    /// The event and its fields (`event` is written here, after `component`).
    #[serde(flatten)]
    pub event: GitApiEvent,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What a git API line records. Fields are declared (and so written) alphabetically.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum GitApiEvent {
    /// The git API started and listens.
    Start {
        agent_uid: u32,
        default_identity: bool,
        max_connections: usize,
        rate_burst: u32,
        rate_per_second: u32,
        socket: String,
        start_branch: Option<String>,
        #[serde(default, skip_serializing_if = "is_false")]
        truncated: bool,
    },
    /// One request's outcome: git ran (`allow`, its `exit`) or the request was refused
    /// (`deny`, its `reason` code and `message`).
    Decision {
        /// git's arguments as the agent sent them (empty before the body was read).
        argv: Vec<String>,
        decision: Verdict,
        exit: Option<i32>,
        message: Option<String>,
        reason: Option<String>,
        /// Refusals before authentication left out of the log since the last one logged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
        #[serde(default, skip_serializing_if = "is_false")]
        truncated: bool,
        /// The peer's uid (`SO_PEERCRED`).
        uid: Option<u32>,
    },
    /// The git API could not start or go on; it exits.
    Fatal {
        message: String,
        #[serde(default, skip_serializing_if = "is_false")]
        truncated: bool,
    },
    /// A panic (the git API exits).
    Panic {
        message: String,
        #[serde(default, skip_serializing_if = "is_false")]
        truncated: bool,
    },
    /// The log rotated and lines left it: how many, from when, and which. The first
    /// refusal of each kind, the git commands that ran and the git API's own lines are
    /// carried into `git-api.jsonl.1` within a reserve, newest first; the rest of what
    /// `git-api.jsonl.1` held is dropped.
    Rotated {
        /// Bytes dropped.
        bytes: u64,
        /// Lines carried over.
        carried: u64,
        /// Lines dropped, per event, decision, reason and subcommand.
        dropped: Vec<GitApiDropped>,
        /// Lines dropped.
        lines: u64,
        /// The oldest `ts` among them.
        since: Option<Timestamp>,
        /// The newest `ts` among them.
        until: Option<Timestamp>,
    },
}

/// Lines of one kind a rotation of `git-api.jsonl` dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitApiDropped {
    /// `allow` or `deny` (decision lines), `null` for the git API's own lines.
    pub decision: Option<Verdict>,
    /// The lines' `event`.
    pub event: String,
    pub lines: u64,
    /// The refusal code.
    pub reason: Option<String>,
    /// git's subcommand (the first argument), when the line had one.
    pub subcommand: Option<String>,
}
