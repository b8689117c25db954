//! Responses: one tagged answer per operation, and the error body every failure carries.

use crate::status::Status;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One answer of the admin API (the event stream and the metrics excepted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Response {
    /// The start's readiness: the record PID 1 writes ([`crate::status`]).
    Status(Status),
    /// The sessions of this start.
    Sessions(Sessions),
    /// A second session began (answered only once what the number's previous session left
    /// is forgotten).
    SessionBegun(SessionBegun),
    /// The policy revision in force.
    Policy(PolicyRevision),
    /// The counters.
    Counters(Counters),
    /// A reload's outcome (returned only after the swap).
    Reloaded(Reloaded),
    /// A dry run's verdict.
    Checked(Checked),
    /// The operator's inbox: every asked host, pending ones first.
    Approvals(Approvals),
    /// One item of the inbox, with its review token (`GET`), or as an answer left it
    /// (`POST`).
    Approval(Approval),
    /// A refused or failed request.
    Error(ErrorBody),
    /// An answer this side does not know (a newer peer's).
    #[serde(other)]
    Unknown,
}

/// What kind of session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionKind {
    /// The agent command PID 1 started.
    Agent,
    /// A second session (`airlock exec`).
    Exec,
    /// A kind this reader does not know.
    #[serde(other)]
    Unknown,
}

/// One session: a confined process tree the proxy tells apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id, as on its audit lines (their `session`: the start's id, which every session
    /// of the start shares; [`Session::number`] tells them apart).
    pub id: String,
    /// What started it.
    pub kind: SessionKind,
    /// The uid it runs as, when the proxy knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// When it started, in Unix milliseconds.
    pub started_at_ms: u64,
    /// Its number `k`, as audit lines name it (`agent_session`): 1 for the agent's first
    /// process, `2..=MAX_SESSIONS` for a second session; it reaches the proxy from
    /// `127.77.0.k`. 0: not said (an older proxy's answer).
    #[serde(default)]
    pub number: u16,
}

/// A second session began: what the proxy kept for the ended session that had its number
/// before was dropped, now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionBegun {
    /// Its number.
    pub session: u16,
    /// When it began, in Unix milliseconds.
    pub started_at_ms: u64,
    /// The previous session's pending items, dropped.
    pub dropped_pending: u64,
    /// Its approvals (`once`, `session`; a spent `once` too), dropped: the new session is
    /// asked again. `always` answers are grants, for every session, and stay.
    pub dropped_approvals: u64,
    /// Its denials for that session only, dropped (`always` ones stay).
    pub dropped_denials: u64,
}

/// The sessions of this start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sessions {
    /// Oldest first.
    pub sessions: Vec<Session>,
}

/// A policy revision: every accepted policy is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRevision {
    /// Its number: 1 for the policy the start loaded, one more per accepted reload.
    pub revision: u64,
    /// The hash of the effective policy (hex), as the `reload` audit line names it.
    pub hash: String,
    /// When it was loaded, in Unix milliseconds.
    pub loaded_at_ms: u64,
    /// Where it came from (a path in the container, or the reload's origin).
    pub origin: String,
    /// Its effective rules, each with where it came from (`GET /v1/policy` only; empty and
    /// left out elsewhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<EffectiveRule>,
}

/// One rule in force (`airlock policy show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveRule {
    /// The list it is in, as the policy file names it (`network.allow`, `rules`,
    /// `credentials`).
    pub list: String,
    /// The rule as written.
    pub rule: String,
    /// Where it came from: `file KEY`, `registry NAME (KEY)`, `preset NAME (KEY)` or
    /// `built-in: WHAT`.
    pub origin: String,
}

/// The outcome of a reload; answered only after the swap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// The revision in force now.
    pub revision: u64,
    /// Its hash.
    pub hash: String,
    /// When it was loaded, in Unix milliseconds.
    pub loaded_at_ms: u64,
    /// Whether anything changed (an unchanged hash loads nothing).
    pub changed: bool,
    /// Open connections the new revision refused, and closed.
    pub closed: u64,
}

/// What the revision in force decides for a URL (nothing is sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    /// The revision that decided.
    pub revision: u64,
    /// `allow`, `deny` or `report` (denied, but only reported: the sandbox's report mode).
    pub decision: String,
    /// Which step decided: `host` (the host and port) or `request` (the method and path of
    /// an intercepted host: `[[rules]]`, presets, read-only hosts).
    pub stage: String,
    /// The stable reason code of a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rule that decided: its name, or its host pattern, as the audit log names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Whether requests to the host are inspected (TLS terminated, each request judged);
    /// `false` for a `network.passthrough` host, whose tunnel is not looked into.
    pub intercepted: bool,
    /// For a person: what decided and, for a denial, how to allow it.
    pub message: String,
}

/// The operator's inbox (`[network] unlisted = "ask"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approvals {
    /// Pending items first (oldest first), then the answered ones (newest first).
    pub items: Vec<Approval>,
}

/// One asked destination of one session, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Its id (8 hex digits), as the agent's refusal and the audit lines name it.
    pub id: String,
    /// The session that asked (`uid 1000`).
    pub session: String,
    /// The host asked for.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// Requests that asked for it.
    pub hits: u64,
    /// When it was first asked for, in Unix milliseconds.
    pub first_ms: u64,
    /// When it was last asked for, in Unix milliseconds.
    pub last_ms: u64,
    /// `pending`, `approved`, `spent` (an approval for one connection, used), `denied` or
    /// `revoked` (an `always` answer whose grant was taken back).
    pub state: String,
    /// An approval's scope: `once` or `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Who answered (the operator's uid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<u32>,
    /// When an answer runs out, in Unix milliseconds (none: when the sandbox stops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// A denial's reason, as the agent reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the agent says it needs the host, when it asked ahead of need: the agent's own
    /// words, untrusted (show them as such, escaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub said: Option<String>,
    /// The `action = "ask"` rule that asked (its name, or its host, methods and path):
    /// approving lets the session's requests that rule matches through, nothing else.
    /// Absent when the host itself was asked about (`unlisted = "ask"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What approving would open beyond the host itself (a credential bound to it, an
    /// uninspected tunnel), for the operator to weigh.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The review token binding what is shown (the item and the policy revision); only
    /// on `GET` of one item. An answer given with a stale one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The audit log's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditState {
    /// Every line is written.
    Writing,
    /// The log cannot be written (its volume is full or gone): requests are refused.
    Outage,
    /// A state this reader does not know.
    #[serde(other)]
    Unknown,
}

/// The proxy's counters since the start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Decisions made.
    pub requests: u64,
    /// Of which allowed.
    pub allowed: u64,
    /// Of which denied.
    pub denied: u64,
    /// Denials by reason code.
    #[serde(default)]
    pub denied_by_reason: BTreeMap<String, u64>,
    /// Bytes sent upstream, by host.
    #[serde(default)]
    pub bytes_out_by_host: BTreeMap<String, u64>,
    /// Connections open now.
    pub open_connections: u64,
    /// Upstreams (`host:port`) whose circuit is open now (`[limits]`): answered
    /// `upstream-circuit-open` until a probe finds them well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_circuits: Vec<String>,
    /// The hourly budgets (`[limits]`) and how much of each this hour has spent: the
    /// sandbox's, each session's LLM tokens, and the uploads to the hosts that spent most;
    /// empty when the proxy keeps none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetUse>,
    /// The audit log's state.
    pub audit: AuditState,
}

/// One of the sandbox's hourly budgets (`[limits]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// The knob, as the policy names it (`sandbox_upload_bytes_per_hour`, ...).
    pub budget: String,
    /// Whose: absent for the sandbox's own budgets, else the session (`uid 1000`) and, for
    /// an upload budget, the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Spent in the current window.
    pub used: u64,
    /// The knob's value.
    pub limit: u64,
    /// When the current window resets, in Unix milliseconds.
    pub resets_at_ms: u64,
}

/// Why a request failed: a stable code and one line for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The stable code.
    pub code: ErrorCode,
    /// What is wrong and, where there is one, what to do instead.
    pub message: String,
}

/// The stable codes of [`ErrorBody`]; never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// The request is malformed: a query or body the operation does not take.
    BadRequest,
    /// The path names another version of the API.
    UnknownVersion,
    /// No operation at that path.
    NotFound,
    /// The operation takes another method.
    MethodNotAllowed,
    /// The peer may not use the API (its uid).
    Forbidden,
    /// A reload's policy does not load; the old revision stays (the message says where).
    InvalidPolicy,
    /// A reload changes what only a restart applies.
    RestartNeeded,
    /// The answer conflicts with the item's state: answered already, or a stale review
    /// token.
    Conflict,
    /// The service cannot answer now (starting, stopping).
    Unavailable,
    /// A fault on the server's side.
    Internal,
    /// A code this reader does not know.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The HTTP status the error is answered with.
    #[must_use]
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Forbidden => 403,
            ErrorCode::UnknownVersion | ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::RestartNeeded | ErrorCode::Conflict => 409,
            ErrorCode::InvalidPolicy => 422,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal | ErrorCode::Unknown => 500,
        }
    }
}
