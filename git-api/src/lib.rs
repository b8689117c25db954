//! The git API: runs the real git on the agent's behalf against the hidden git dir, under
//! airlock's command policy ([`argv`]; `-c` keys from [`argv::dashc`]'s allowlist of display and
//! identity keys; the read-only forms of plumbing in [`argv::plumbing`]; patches as bytes in
//! [`argv::patch`]), push policy ([`push`]: SSH origins are their https repository; a refused
//! branch names the command that works) and branch visibility ([`visible`]: `ls-remote`,
//! `fetch` and `pull` never show another sandbox's branches), and the operator's default
//! commit identity as git's system layer ([`identity`]), and the agent's own `~/.gitconfig`,
//! kept to the keys it may write, as git's global layer ([`global`]).
//!
//! Its [`server`] authenticates every connection (`SO_PEERCRED` uid, then the wire HMAC),
//! decides, runs git with a cleared environment and protected configuration ([`run`]), and
//! streams the output back. Its log ([`log`]) is JSON lines with every field bounded. It does
//! not hold credentials (the proxy injects the token on the service port), does not page, and
//! does not install itself (the entrypoint starts it with the split identity described in
//! docs/design.md §5).

pub mod argv;
pub mod gitindex;
pub mod glob;
pub mod global;
pub mod identity;
pub mod log;
pub mod nested;
pub mod push;
pub mod pushed;
pub mod rawdiff;
pub mod run;
pub mod server;
pub mod url;
pub mod visible;
