//! `[limits]`: how fast the agent may send to one host. A token bucket per session and
//! host: `request_burst` requests at once, refilled at `requests_per_second`; past it, a
//! request is refused `rate-limited` (`429` with `Retry-After`) before any policy work.
//!
//! The defaults are far above what an honest agent sends (a package manager installing a
//! large project, an LLM client streaming) and far below a flood. The counting is the
//! proxy's (`proxy/src/rate.rs`); this module holds the knobs.

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
}

/// Default `requests_per_second`.
pub const DEFAULT_REQUESTS_PER_SECOND: u32 = 1000;
/// Default `request_burst`.
pub const DEFAULT_REQUEST_BURST: u32 = 10_000;

/// The bounds of both knobs.
const RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_per_second: DEFAULT_REQUESTS_PER_SECOND,
            request_burst: DEFAULT_REQUEST_BURST,
        }
    }
}

/// `[limits]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    requests_per_second: Option<Spanned<i64>>,
    request_burst: Option<Spanned<i64>>,
}

impl RawLimits {
    /// The limits, defaults filled in.
    pub(crate) fn check(self) -> Result<Limits, Invalid> {
        let d = Limits::default();
        let knob = |v: Option<Spanned<i64>>, key: &'static str, default: u32| match v {
            None => Ok(default),
            Some(v) if RANGE.contains(v.get_ref()) => {
                Ok(u32::try_from(*v.get_ref()).unwrap_or(default))
            }
            Some(v) => Err(Invalid {
                span: v.span(),
                key,
                reason: format!("must be between {} and {}", RANGE.start(), RANGE.end()),
            }),
        };
        Ok(Limits {
            requests_per_second: knob(
                self.requests_per_second,
                "limits.requests_per_second",
                d.requests_per_second,
            )?,
            request_burst: knob(self.request_burst, "limits.request_burst", d.request_burst)?,
        })
    }
}
