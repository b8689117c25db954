//! airlock's namespace test harness (docs/design.md §6, tier 2) and the fake internet it runs.
//!
//! One job: give a test a disposable, observable network to run the real airlock in — a
//! sandbox network namespace wired to a fake internet — and tell the test what reached that
//! internet, both as the servers saw it (fakenet's log) and as it crossed the wire (tcpdump).
//! It does not start airlock, make policy decisions or assert anything itself: the test files
//! in `tests/tests/` do.
//!
//! # Requirements
//!
//! Root (no Docker), Linux with network namespaces and veth, and on `PATH` (or in
//! `/usr/sbin`, `/sbin`): `ip` (iproute2), `unshare` (util-linux), `tcpdump`; the smoke test
//! also uses `curl` and `dig`. [`World::new`] fails with a clear message when any is missing:
//! tests never skip. Run with `cargo test -p airlock-tests` or
//! `cargo nextest run -p airlock-tests`; Worlds are independent, so tests run in parallel.
//!
//! # Topology
//!
//! Each [`World`] has a unique id `<pid base36>-<seq base36>` and owns:
//!
//! - the **sandbox** namespace `alk-s-<id>`: `lo` up, `eth0` 198.51.100.2/24 and
//!   2001:db8:100::2/64 (`nodad`, IPv6 stays enabled), default routes for both families via
//!   the upstream side. Processes run there through [`World::sandbox_command`] as PID 1 of
//!   their own pid + mount namespace, with the World's `/etc/resolv.conf` (nameserver
//!   203.0.113.53), `/etc/hosts` (localhost only), `/etc/passwd` and `/etc/group` (the host's
//!   plus `airlock` 64101, `airlock-git` 64102, `agent` 64103, each with a same-named group,
//!   gid == uid), written to `/etc/netns/alk-s-<id>/` which `ip netns exec` bind-mounts;
//! - the **upstream** namespace `alk-u-<id>`: the veth's other end `alk-u<id>`
//!   198.51.100.1/24 and 2001:db8:100::1/64, and the service addresses on its `lo`
//!   (accepted locally, so nothing forwards):
//!
//! | address | name | served by fakenet |
//! |---|---|---|
//! | 203.0.113.10 | `allowed.test` | HTTP 80, 8080; HTTPS 443, 8443; UDP sink 443 |
//! | 203.0.113.11 | `blocked.test` | HTTP 80; HTTPS 443 |
//! | 203.0.113.12 | `other.test` | HTTP 80; HTTPS 443 |
//! | 203.0.113.20 | `github.com` | HTTPS 443: git smart HTTP ([`World::git_upstream`]) |
//! | 203.0.113.53 | (resolver of the sandbox) | DNS 53 UDP+TCP |
//! | 203.0.113.54 | ("foreign" DNS server) | DNS 53 UDP+TCP |
//! | 2001:db8:113::10 | `allowed.test`, `v6.test` | HTTP 80; HTTPS 443; DNS 53 |
//! | 169.254.169.254 | `meta.test` (fake metadata) | HTTP 80 |
//!
//! Zone: `allowed.test` → 203.0.113.10 + 2001:db8:113::10, `blocked.test` → .11,
//! `other.test` → .12, `v6.test` → only 2001:db8:113::10, `rebind.test` → 127.0.0.1,
//! `meta.test` → 169.254.169.254, `github.com` → 203.0.113.20; other names NXDOMAIN; TXT for any name answers
//! [`fakenet::TXT_ANSWER`]. HTTPS certificates (names above plus the listener's IP) chain to a
//! per-World test CA at [`World::ca_pem_path`]. The constants are in [`topology`]; what the
//! servers answer and log is in [`fakenet`].
//!
//! # Observing
//!
//! - [`World::upstream_log`]: every TCP connection, TLS failure, HTTP request, DNS query and
//!   UDP datagram fakenet received, one JSON object each (`kind`: `conn`, `tls`,
//!   `tls_error`, `http`, `http_error`, `upload_end` (how an `/upload` body ended: `len`,
//!   `error`), `dns`, `udp`), so "nothing reached upstream" is assertable. Lines are written before the response is sent, except `tls_error` and a
//!   `tls` for a client that then hangs up, which can land just after the client exits.
//! - [`World::start_capture`] / [`World::stop_capture`]: tcpdump on `alk-u<id>`, parsed into a
//!   [`Capture`]. [`Capture::from_sandbox`] selects what the sandbox sent (by MAC or source
//!   address), [`Capture::egress`] drops the kernel's own ARP / neighbour discovery / MLD
//!   ([`Packet::is_housekeeping`]), [`Capture::dns_queries`] lists every DNS question on port
//!   53. Packets the sandbox sends to an address with no listener still show up here (as a
//!   SYN answered by RST, or a datagram), so a broken firewall is visible.
//!
//! # Lifetime
//!
//! Dropping a World (also while a test panics) kills fakenet, tcpdump and every process left
//! in its namespaces, deletes both namespaces (which removes the veth pair), removes
//! `/etc/netns/alk-s-<id>` and the World's directory `/tmp/alk-<id>`. A process killed before
//! it could drop its Worlds leaves them behind; the next [`World::new`] in any process removes
//! every `alk-*` namespace, `/etc/netns` entry and `/tmp` directory whose creator pid is dead.
//! While panicking, the drop prints the tail of fakenet's log.
//!
//! Environment: `AIRLOCK_KEEP_WORLD=1` keeps the World's directory (logs, captures, config)
//! for inspection; `AIRLOCK_BIN_DIR` says where the workspace binaries are (default: the
//! target directory of the running test, see [`workspace_binary`]).
//!
//! # Example
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use airlock_tests::World;
//! let mut world = World::new()?;
//! world.start_capture()?;
//! let out = world
//!     .sandbox_command("curl".as_ref())
//!     .arg("--cacert").arg(world.ca_pem_path())
//!     .arg("https://allowed.test/")
//!     .output()?;
//! let capture = world.stop_capture()?;
//! assert!(out.status.success());
//! assert!(capture.egress(&world).iter().any(|p| p.dst_port == Some(443)));
//! # Ok(()) }
//! ```

pub mod ca;
pub mod capture;
pub mod fakenet;
mod netns;
pub mod seed;
pub mod tools;
pub mod topology;
pub mod users;
mod world;

pub use capture::{Capture, Frame, Packet, Proto, TcpFlags};
pub use seed::seed_git;
pub use tools::workspace_binary;
pub use users::Users;
pub use world::World;
