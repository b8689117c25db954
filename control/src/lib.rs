//! The contract between the host and the appliance, in one crate both sides link.
//!
//! The host (the `airlock` CLI, and what it renders for Docker, compose, devcontainers and
//! Kubernetes) and the container (PID 1's preflight and readiness record; the proxy's admin
//! API) never share memory, yet each reads what the other writes. Every such fact is defined
//! here once:
//!
//! - how the container is run: the mount points it expects ([`paths`]), the capabilities
//!   PID 1 keeps and the job each does ([`caps`]), the sized tmpfs mounts ([`tmpfs`]) and
//!   the limits they must fit ([`limits`]), the environment variables that cross
//!   ([`env`]), and what its exit status means ([`exit`]);
//! - the readiness record PID 1 writes into the control directory, which the CLI reads to
//!   know a start is ready and the admin API's status serves ([`status`]);
//! - the admin protocol: versioned paths (`/v1/...`), tagged requests and responses that
//!   read a variant they do not know as `Unknown`, golden-tested JSON ([`admin`]).
//!
//! The CLI renders its run flags from these facts and the entrypoint's preflight checks a
//! container against them, so a run the CLI writes is a run the preflight accepts; the
//! tests of both compare `docker/run-flags.sh` and `compose.yaml` with them.
//!
//! Host-safe and small: constants, serde types and the reading and writing of the readiness
//! record; no process, kernel or network interface. The in-container names it shares with
//! the other appliance processes stay in `airlock-channels`, which it re-exports where the
//! host needs them. The CLI links this crate and `airlock-channels`, and nothing that runs in
//! the container.

pub mod admin;
pub mod caps;
pub mod env;
pub mod exit;
pub mod limits;
pub mod paths;
pub mod status;
pub mod tmpfs;

/// The admin protocol's version ([`admin::PREFIX`] is its path prefix), also the `api` of
/// every readiness record ([`Status::api`]).
pub const VERSION: u32 = 1;

pub use caps::Capability;
pub use status::{State, Status, Steps};
pub use tmpfs::Tmpfs;
