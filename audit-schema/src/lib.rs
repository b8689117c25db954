//! The record schema of airlock's two audit logs, in one place: what the proxy and the git
//! API serialize, and what the tests, the host CLI and any other reader deserialize.
//!
//! - `audit.jsonl` (the proxy; also its rotated files and its archives,
//!   `audit.jsonl.allowed` and `audit.jsonl.first`): one [`Line`] per line: a request's
//!   [`Record`], a [`Suppressed`] count of folded denials, an [`Outage`] of the log itself, a
//!   [`Reload`] of the rules in force, or a [`Rotated`] account of lines that left the log.
//! - `git-api.jsonl` (the git API; also `git-api.jsonl.1`): one [`GitApiRecord`] per line.
//!
//! The proxy writes its records with [`Record::write_json`], a hand-written writer for its
//! hottest line (two per allowed request, before the request is answered) whose bytes the
//! tests hold to serde_json's for the same record; everything else goes through serde.
//!
//! The closed sets ([`Kind`], [`Event`], [`Verdict`], [`Signal`], [`GitApiEvent`]) are
//! interfaces: their strings are never renamed. The refusal code (`reason`) is
//! `airlock_policy::Reason` in the proxy; this crate keeps it a type parameter (a `String`
//! by default), so that reading a log needs nothing but serde.
//!
//! # Versioning
//!
//! [`SCHEMA_VERSION`] names the schema these types describe. The rule: a change an existing
//! reader could not read (a field removed or renamed, a type or meaning changed, a new
//! value of a closed set) increments it and is noted in the README's audit section; a new
//! field that readers may ignore (absent reads as its default) does not. Lines do not carry
//! the version (so every line stays byte-identical to what the writers wrote before this
//! crate existed); a reader that needs it takes it from the appliance's version.
//!
//! Version 1: the proxy's record as of issue 13 (`decision: abandoned` included) and the
//! git API's `start`, `decision`, `fatal` and `panic` records.
//!
//! Version 2: the proxy's `kind: audit`, `event: reload` line ([`Reload`]), which a
//! version-1 reader of [`Line`] cannot read.
//!
//! Version 3: the proxy's `kind: audit`, `event: rotated` line ([`Rotated`]: what just left
//! the log, and the [`Total`] its session has dropped), which a version-2 reader of [`Line`]
//! cannot read; and [`Suppressed`] counts one destination
//! (`host`, `port`, `since`..`until`) or, with `overflow`, the destinations past the table
//! (`first_host`, `host`): new fields that a version-2 reader ignores, and that read as
//! `null`/false from a version-2 line. The git API's `rotated` record (what a rotation of
//! its log dropped), which a version-2 reader of [`GitApiRecord`] cannot read.
//!
//! Still version 3, new fields a version-3 reader ignores: every line of `audit.jsonl` ends
//! with `chain`, its link in the log's hash chain ([`chain`]: sealed by the proxy's writer,
//! absent from lines written before, read as `null`), and the [`Rotated`] line of the
//! stream names in `after` the `chain` of the last line that aged out (`null` on the other
//! parts and on older lines).

pub mod chain;
mod git_api;
mod json;
mod line;
mod proxy;
mod rotated;
mod time;

pub use chain::ChainHash;
pub use git_api::{Component, GitApiDropped, GitApiEvent, GitApiRecord};
pub use line::Line;
pub use proxy::{
    Alphabet, AuditKind, Event, Kind, Outage, OutageEvent, PolicyReload, Record, Reload,
    ReloadEvent, Signal, Suppressed, Verdict, Who,
};
pub use rotated::{Dropped, DroppedHost, Part, Rotated, RotatedEvent, Total};
pub use time::{Timestamp, rfc3339_ms};

/// The version of the schema this crate describes (see the crate docs for the rule).
pub const SCHEMA_VERSION: u32 = 3;
