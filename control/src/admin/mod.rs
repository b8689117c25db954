//! The admin API's protocol: HTTP/1.1 with JSON bodies on a Unix socket ([`SOCKET`]) in
//! the control directory, served by the proxy, spoken by the host CLI.
//!
//! **Versioning.** Every path starts with the version ([`PREFIX`], `/v1`); a request for
//! another version is answered [`ErrorCode::UnknownVersion`] naming the one this side speaks.
//! Within a version, changes are additive only: a new field (older readers ignore it; a
//! missing one reads as its default), a new operation, response kind, state or code (older
//! readers read it as the enum's `Unknown` variant, `#[serde(other)]`). Renaming or removing
//! anything, or changing what a field means, is a new version. The JSON of every type is
//! pinned by golden files (`control/tests/golden/`), as cargo-credential pins its protocol.
//!
//! **Shape.** One operation, one [`Request`] variant, tagged `op`; one answer, one
//! [`Response`] variant, tagged `kind`. [`Request::from_http`] is the server's routing table
//! (method, path, query and body to a request, or the [`ErrorBody`] to answer);
//! [`Request::to_http`] is the client's. The event stream ([`path::EVENTS`]) answers NDJSON,
//! one [`StreamLine`] per line; the metrics ([`path::METRICS`]) answer Prometheus text.
//!
//! **Adding an operation:** a `path` constant, a [`Request`] variant (its query or body as a
//! struct), its row in `ROUTES` (request.rs), a [`Response`] variant for its answer, and a
//! golden file for each new type.

mod events;
mod request;
mod response;

pub use events::{Cursor, Event, EventsQuery, Log, Note, NoteCode, StreamLine};
pub use request::{
    AnswerRequest, ApprovalQuery, BeginSessionRequest, CheckQuery, HttpRequest, Method,
    ReloadRequest, Request, RevokeRequest,
};
pub use response::{
    Approval, Approvals, AuditState, BudgetUse, Checked, Counters, EffectiveRule, ErrorBody,
    ErrorCode, PolicyRevision, Reloaded, Response, Session, SessionBegun, SessionKind, Sessions,
};

/// The protocol version this crate speaks.
pub use crate::VERSION;
/// The path prefix of [`VERSION`].
pub const PREFIX: &str = "/v1";
/// The admin socket's file name inside the control directory
/// ([`crate::paths::CONTROL_DIR`]).
pub const SOCKET: &str = "admin.sock";

/// The paths of the operations.
pub mod path {
    /// `GET`: the start's [`crate::Status`] (readiness).
    pub const STATUS: &str = "/v1/status";
    /// `GET`: the sessions of this start ([`super::Sessions`]).
    pub const SESSIONS: &str = "/v1/sessions";
    /// `POST`: a second session begins ([`super::BeginSessionRequest`] →
    /// [`super::SessionBegun`]); root only (the entrypoint in the container, as it starts
    /// the session).
    pub const BEGIN_SESSION: &str = "/v1/sessions/begin";
    /// `GET`: the policy revision in force ([`super::PolicyRevision`]).
    pub const POLICY: &str = "/v1/policy";
    /// `POST`: load a new policy revision ([`super::ReloadRequest`] →
    /// [`super::Reloaded`]).
    pub const RELOAD: &str = "/v1/policy/reload";
    /// `GET`: what the revision in force would decide for a URL, nothing sent
    /// ([`super::CheckQuery`] in the query string → [`super::Checked`]).
    pub const CHECK: &str = "/v1/policy/check";
    /// `GET`: the counters ([`super::Counters`]).
    pub const COUNTERS: &str = "/v1/counters";
    /// `GET`: the event stream, NDJSON of [`super::StreamLine`] ([`super::EventsQuery`] in
    /// the query string).
    pub const EVENTS: &str = "/v1/events";
    /// `GET`: the operator's inbox ([`super::Approvals`]).
    pub const APPROVALS: &str = "/v1/approvals";
    /// `GET`: one item with its review token ([`super::ApprovalQuery`] in the query string
    /// → [`super::Approval`]).
    pub const APPROVAL: &str = "/v1/approval";
    /// `POST`: the operator's answer to one item ([`super::AnswerRequest`] →
    /// [`super::Approval`]).
    pub const ANSWER: &str = "/v1/approval/answer";
    /// `POST`: take back a standing grant (`approve`/`deny --always`;
    /// [`super::RevokeRequest`] → [`super::Reloaded`], the revision without it).
    pub const REVOKE: &str = "/v1/grants/revoke";
    /// `GET`: Prometheus metrics (text exposition format; unversioned, as scrapers expect).
    pub const METRICS: &str = "/metrics";
}
