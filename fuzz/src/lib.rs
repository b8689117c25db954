//! Fixed inputs shared by the fuzz targets: the policies they judge against, the session
//! key and clock of the wire target, and small helpers. Nothing here is fuzzed itself.
//!
//! A fixture that fails to build is a bug in this crate, so it panics (the fuzzer reports
//! it on the first input, never silently fuzzing nothing).

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::LazyLock;

use airlock_policy::{Host, Policy};

/// The policy of the `dns` target: names, a wildcard with a carved-out deny, a name on a
/// non-default port only, a public IP literal and a hard-denied one.
pub const DNS_POLICY: &str = r#"
[sandbox]
name = "fuzz"
mode = "enforce"
[network]
allow = ["allowed.test", "port.test:8443", "*.wild.test", "203.0.113.7", "127.0.0.1", "[2001:db8::7]"]
deny = ["deny.wild.test"]
"#;

/// The policy of the `l7_path` and `graphql` targets: the github preset on a sandbox with
/// the default git settings and one repository.
pub const GITHUB_POLICY: &str = r#"
[sandbox]
name = "fuzz"
[network]
allow = ["api.github.com", "github.com"]
[l7]
presets = ["github"]
[git]
repositories = ["github.com/o/r"]
"#;

fn parse(text: &str) -> Policy {
    Policy::parse(text, Path::new("fuzz.toml")).unwrap_or_else(|e| panic!("fixture policy: {e}"))
}

/// [`DNS_POLICY`], parsed once.
pub static DNS: LazyLock<Policy> = LazyLock::new(|| parse(DNS_POLICY));
/// [`GITHUB_POLICY`], parsed once.
pub static GITHUB: LazyLock<Policy> = LazyLock::new(|| parse(GITHUB_POLICY));
/// `api.github.com`, canonical.
pub static API_GITHUB: LazyLock<Host> =
    LazyLock::new(|| Host::parse("api.github.com").expect("fixture host"));

/// Whether `host` may be answered under [`DNS_POLICY`] (on any port): the oracle the
/// `dns` target checks `airlock_proxy::dns::plan` against, written independently of it.
#[must_use]
pub fn dns_answerable(host: &Host) -> bool {
    let s = host.as_str();
    let wild = Host::parse("wild.test").expect("fixture host");
    matches!(
        s,
        "allowed.test" | "port.test" | "203.0.113.7" | "2001:db8::7"
    ) || (host.is_strict_subdomain_of(&wild) && s != "deny.wild.test")
}

/// The wire target's session key (the same bytes as the wire crate's own tests).
#[must_use]
pub fn session_key_bytes() -> [u8; 32] {
    std::array::from_fn(|i| u8::try_from(i).unwrap_or(0))
}

/// The wire target's clock: seeds are signed at this second.
pub const WIRE_NOW: i64 = 1_700_000_000;

/// Tiny deterministic generator for choices derived from the input (never from the
/// system: a crash must reproduce from its input alone).
#[derive(Debug)]
pub struct Choices(u64);

impl Choices {
    /// Seeded from the input bytes (FNV-1a).
    #[must_use]
    pub fn new(data: &[u8]) -> Choices {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in data {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Choices(h | 1)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % u64::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
    }
}
