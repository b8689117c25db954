//! The proxy's in-process tier: one test binary (linked once) whose modules attack the real
//! proxy (its listeners, policy, interception and audit) over loopback, with the test seams
//! of `common` standing in for DNS and the network.
//!
//! `cargo test -p airlock-proxy --test integration intercept::` runs one module.

// Tests may unwrap and panic (clippy.toml); clippy only knows that inside `#[test]` fns, and
// the modules' helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod admin;
mod approvals;
mod budget;
mod dns;
mod encodings;
mod explicit;
mod headers;
mod intercept;
mod missing;
mod names;
mod rate;
mod read_only_body;
mod refusals;
mod service;
mod signals;
mod transparent;
mod websocket;
mod workspace;
