//! The firewall's integration tier: one test binary (linked once). `golden` and
//! `properties` read the rendered rules without privileges; `netns_apply` applies them with
//! the real `iptables-restore` in throwaway namespaces (root).
//!
//! `cargo test -p airlock-firewall --test integration golden::` runs one module.

// Tests may unwrap and panic (clippy.toml); clippy only knows that inside `#[test]` fns, and
// the modules' helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod golden;
mod netns_apply;
mod properties;
