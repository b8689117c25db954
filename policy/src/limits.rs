//! `[limits]`: how fast the agent may send to one host, and when an upstream that keeps
//! failing is answered at once.
//! - A token bucket per session and host: `request_burst` requests at once, refilled at
//!   `requests_per_second`; past it, a request is refused `rate-limited` (`429` with
//!   `Retry-After`) before any policy work.
//! - A circuit breaker per upstream: after `circuit_failures` consecutive failures
//!   (connection failed, `5xx`) requests to it are refused `upstream-circuit-open` (`503`)
//!   for `circuit_cooldown_seconds`, then one probe decides.
//!
//! The defaults are far above what an honest agent sends (a package manager installing a
//! large project, an LLM client streaming) and far below a flood. The counting is the
//! proxy's (`proxy/src/rate.rs`, `proxy/src/breaker.rs`); this module holds the knobs.

use serde::Deserialize;
use toml::Spanned;

use crate::signals::Invalid;

/// `[limits]`, with defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sustained requests per second per session and host.
    pub requests_per_second: u32,
    /// Requests a session may send to one host at once (the bucket's size).
    pub request_burst: u32,
    /// Consecutive failures of one upstream that open its circuit.
    pub circuit_failures: u32,
    /// How long an open circuit refuses before one probe may go.
    pub circuit_cooldown_seconds: u32,
}

/// Default `requests_per_second`.
pub const DEFAULT_REQUESTS_PER_SECOND: u32 = 1000;
/// Default `request_burst`.
pub const DEFAULT_REQUEST_BURST: u32 = 10_000;

/// Default `circuit_failures`.
pub const DEFAULT_CIRCUIT_FAILURES: u32 = 10;
/// Default `circuit_cooldown_seconds`.
pub const DEFAULT_CIRCUIT_COOLDOWN_SECONDS: u32 = 10;

/// The bounds of the rate's knobs.
const RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000;
/// The bounds of the breaker's knobs.
const CIRCUIT_RANGE: std::ops::RangeInclusive<i64> = 1..=3600;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_per_second: DEFAULT_REQUESTS_PER_SECOND,
            request_burst: DEFAULT_REQUEST_BURST,
            circuit_failures: DEFAULT_CIRCUIT_FAILURES,
            circuit_cooldown_seconds: DEFAULT_CIRCUIT_COOLDOWN_SECONDS,
        }
    }
}

/// `[limits]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    requests_per_second: Option<Spanned<i64>>,
    request_burst: Option<Spanned<i64>>,
    circuit_failures: Option<Spanned<i64>>,
    circuit_cooldown_seconds: Option<Spanned<i64>>,
}

impl RawLimits {
    /// The limits, defaults filled in.
    pub(crate) fn check(self) -> Result<Limits, Invalid> {
        let d = Limits::default();
        let bounded = |range: std::ops::RangeInclusive<i64>| {
            move |v: Option<Spanned<i64>>, key: &'static str, default: u32| match v {
                None => Ok(default),
                Some(v) if range.contains(v.get_ref()) => {
                    Ok(u32::try_from(*v.get_ref()).unwrap_or(default))
                }
                Some(v) => Err(Invalid {
                    span: v.span(),
                    key,
                    reason: format!("must be between {} and {}", range.start(), range.end()),
                }),
            }
        };
        let (knob, circuit) = (bounded(RANGE), bounded(CIRCUIT_RANGE));
        Ok(Limits {
            requests_per_second: knob(
                self.requests_per_second,
                "limits.requests_per_second",
                d.requests_per_second,
            )?,
            request_burst: knob(self.request_burst, "limits.request_burst", d.request_burst)?,
            circuit_failures: circuit(
                self.circuit_failures,
                "limits.circuit_failures",
                d.circuit_failures,
            )?,
            circuit_cooldown_seconds: circuit(
                self.circuit_cooldown_seconds,
                "limits.circuit_cooldown_seconds",
                d.circuit_cooldown_seconds,
            )?,
        })
    }
}
