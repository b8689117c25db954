//! `airlock`, the host CLI: its one job is to create, list and manage airlock sandboxes on the
//! operator's machine, one container per sandbox, each on its own branch of a repository,
//! through the Docker Engine API (bollard; `DOCKER_HOST` honoured).
//!
//! It does not enforce anything itself: the firewall, the proxy, the git API and the
//! privilege drop all run inside the container (`entrypoint/`), and no in-container crate
//! depends on this one. It never shells out to the `docker` CLI (but for `airlock build`,
//! which runs airlock's own `scripts/build-image`), never puts a secret in a host process's
//! argv or environment (secrets are host files whose values the engine writes root-only
//! into each sandbox's own volume, [`secrets`], [`engine::volumes`]), and never runs
//! anything a sandbox wrote: a sandbox's git
//! dir and work tree are read only through a git dir of the CLI's own, and what its branch
//! brings back is listed by what would run without being asked ([`checkout`], [`review`]).
//!
//! Modules: [`admin`] (the client of a sandbox's admin API), [`flags`] (the one definition
//! of the run flags and its renderings), [`names`] (sandbox name and branch rules),
//! [`registry`] (SQLite), [`paths`] (XDG directories), [`checkout`] (host-side git:
//! checkouts, per-base object stores, the fetch-back), [`review`] (what a branch brings
//! back), [`files`] (writing into a project without following a symlink), [`engine`]
//! (Docker), [`exit`] (exit codes), [`lock`] (a live `new` or `run`'s hold on its sandbox
//! name), [`cli_doc`] (`docs/cli.md`, rendered from [`cli`]), [`top`] (`airlock top`'s
//! screen); the unit tier's documentation checks are `doc_check`.

pub mod admin;
pub mod audit_view;
pub mod checkout;
pub mod cli;
pub mod cli_doc;
#[cfg(test)]
mod doc_check;
pub mod engine;
pub mod exit;
pub mod files;
pub mod flags;
pub mod kube;
pub mod lock;
pub mod names;
pub mod paths;
pub mod registry;
pub mod review;
pub mod secrets;
pub mod span;
pub mod suggest;
pub mod term;
pub mod top;
