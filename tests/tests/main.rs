//! The namespace integration tier: one test binary (linked once) whose modules are the
//! attack suites, each against the real binaries (`cargo build --workspace` first) in its
//! own network namespaces (`airlock_tests::World`). Root only; a test that cannot set up
//! its world fails, never skips.
//!
//! `cargo test -p airlock-tests --test namespace git::` runs one module.

// Tests may unwrap and panic (clippy.toml); clippy only knows that inside `#[test]` fns, and
// the modules' helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod audit;
mod build_scripts;
mod control;
mod credentials;
mod dns_content;
mod dns_uid;
mod egress;
mod foundation;
mod git;
mod git_service;
mod github_api;
mod harness;
mod intercept;
mod newcomer;
mod rescan;
mod startup_refusals;
mod trust;
