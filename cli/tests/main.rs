//! The CLI's integration tier: one test binary (linked once) whose modules drive the real
//! `airlock` binary, most of them against the real engine and image (`scripts/build-image`).
//!
//! `cargo test -p airlock-cli --test integration session::` runs one module.

// Tests may unwrap and panic (clippy.toml); clippy only knows that inside `#[test]` fns, and
// the modules' helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod admin;
mod docker;
mod fake;
mod host;
mod k8s;
mod logs;
mod policy;
mod session;
mod sessions;
mod surface;
mod top;
