//! `[limits]`: how fast the agent may send to one host, and when an upstream that keeps
//! failing is answered at once.
//! - A token bucket per session and host: `request_burst` requests at once, refilled at
//!   `requests_per_second`; past it, a request is refused `rate-limited` (`429` with
//!   `Retry-After`) before any policy work.
//! - A circuit breaker per upstream: after `circuit_failures` consecutive failures
//!   (connection failed, `5xx`) requests to it are refused `upstream-circuit-open` (`503`)
//!   for `circuit_cooldown_seconds`, then one probe decides.
//! - Budgets per hour: bytes the agent sends upstream per session and host
//!   (`upload_bytes_per_hour`) and for the whole sandbox (`sandbox_upload_bytes_per_hour`),
//!   and the sandbox's requests (`sandbox_requests_per_hour`). An exhausted budget refuses
//!   new requests `budget-exhausted` (`429`, the budget and its reset named) and cuts a
//!   connection or body still sending: the bound on what can leave, whatever its
//!   encoding.
//! - LLM token budgets per hour, per session (`llm_tokens_per_hour`, warned at
//!   `llm_tokens_warn_per_hour`) and for the sandbox (`sandbox_llm_tokens_per_hour`),
//!   read from the providers' own usage fields: past the hard one, the next request to an
//!   LLM API is refused `budget-exhausted` (an answer under way always finishes).
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
    /// Bytes a session may send to one host per hour.
    pub upload_bytes_per_hour: u64,
    /// Bytes the whole sandbox may send per hour.
    pub sandbox_upload_bytes_per_hour: u64,
    /// Requests (connections and intercepted requests) the whole sandbox may make per hour.
    pub sandbox_requests_per_hour: u64,
    /// LLM tokens (input and output, as the providers count them) a session may use per
    /// hour.
    pub llm_tokens_per_hour: u64,
    /// Past this many in an hour the operator is warned (`None`: 80% of
    /// `llm_tokens_per_hour`).
    pub llm_tokens_warn_per_hour: Option<u64>,
    /// LLM tokens the whole sandbox may use per hour.
    pub sandbox_llm_tokens_per_hour: u64,
    /// Items of the operator's inbox one session may hold pending (`unlisted = "ask"`).
    pub approvals_pending: u32,
    /// New items one session may file per minute.
    pub approvals_per_minute: u32,
    /// How long an asked request still pending is held open for the operator's answer
    /// before it is refused `approval-required` (`0`, the default: refused at once, so an
    /// autonomous run never hangs).
    pub approvals_hold_seconds: u32,
    /// Requests one session may have held at once; past it, refused at once.
    pub approvals_holds: u32,
}

/// Default `requests_per_second`.
pub const DEFAULT_REQUESTS_PER_SECOND: u32 = 1000;
/// Default `request_burst`.
pub const DEFAULT_REQUEST_BURST: u32 = 10_000;

/// Default `circuit_failures`.
pub const DEFAULT_CIRCUIT_FAILURES: u32 = 10;
/// Default `circuit_cooldown_seconds`.
pub const DEFAULT_CIRCUIT_COOLDOWN_SECONDS: u32 = 10;

/// Default `upload_bytes_per_hour`: 1 GiB, above an LLM client sending its whole context
/// with every request for an hour.
pub const DEFAULT_UPLOAD_BYTES_PER_HOUR: u64 = 1 << 30;
/// Default `sandbox_upload_bytes_per_hour`: 4 GiB.
pub const DEFAULT_SANDBOX_UPLOAD_BYTES_PER_HOUR: u64 = 4 << 30;
/// Default `sandbox_requests_per_hour`.
pub const DEFAULT_SANDBOX_REQUESTS_PER_HOUR: u64 = 1_000_000;

/// Default `llm_tokens_per_hour`: far above a busy interactive session, below a loop.
pub const DEFAULT_LLM_TOKENS_PER_HOUR: u64 = 50_000_000;
/// Default `sandbox_llm_tokens_per_hour`.
pub const DEFAULT_SANDBOX_LLM_TOKENS_PER_HOUR: u64 = 200_000_000;
/// Default `approvals_pending`.
pub const DEFAULT_APPROVALS_PENDING: u32 = 16;
/// Default `approvals_per_minute`.
pub const DEFAULT_APPROVALS_PER_MINUTE: u32 = 30;
/// Default `approvals_hold_seconds`: no hold.
pub const DEFAULT_APPROVALS_HOLD_SECONDS: u32 = 0;
/// Default `approvals_holds`.
pub const DEFAULT_APPROVALS_HOLDS: u32 = 4;
/// The bounds of `approvals_hold_seconds` and `approvals_holds`.
const HOLD_RANGE: std::ops::RangeInclusive<i64> = 0..=300;
const HOLDS_RANGE: std::ops::RangeInclusive<i64> = 1..=64;
/// The bounds of the inbox's knobs.
const APPROVALS_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000;

/// The bounds of the token budgets.
const TOKENS_RANGE: std::ops::RangeInclusive<i64> = 1000..=1_000_000_000_000;

/// The bounds of the byte budgets (1 KiB to 1 TiB) and of the request budget.
const BYTES_RANGE: std::ops::RangeInclusive<i64> = 1024..=(1 << 40);
const REQUESTS_RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000_000;

/// The bounds of the rate's knobs.
const RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000;
/// The bounds of the breaker's knobs.
const CIRCUIT_RANGE: std::ops::RangeInclusive<i64> = 1..=3600;

impl Limits {
    /// Every knob at its default.
    pub const DEFAULT: Self = Self {
        requests_per_second: DEFAULT_REQUESTS_PER_SECOND,
        request_burst: DEFAULT_REQUEST_BURST,
        circuit_failures: DEFAULT_CIRCUIT_FAILURES,
        circuit_cooldown_seconds: DEFAULT_CIRCUIT_COOLDOWN_SECONDS,
        upload_bytes_per_hour: DEFAULT_UPLOAD_BYTES_PER_HOUR,
        sandbox_upload_bytes_per_hour: DEFAULT_SANDBOX_UPLOAD_BYTES_PER_HOUR,
        sandbox_requests_per_hour: DEFAULT_SANDBOX_REQUESTS_PER_HOUR,
        llm_tokens_per_hour: DEFAULT_LLM_TOKENS_PER_HOUR,
        llm_tokens_warn_per_hour: None,
        sandbox_llm_tokens_per_hour: DEFAULT_SANDBOX_LLM_TOKENS_PER_HOUR,
        approvals_pending: DEFAULT_APPROVALS_PENDING,
        approvals_per_minute: DEFAULT_APPROVALS_PER_MINUTE,
        approvals_hold_seconds: DEFAULT_APPROVALS_HOLD_SECONDS,
        approvals_holds: DEFAULT_APPROVALS_HOLDS,
    };

    /// The session's token warning threshold in force.
    #[must_use]
    pub const fn llm_tokens_warn(&self) -> u64 {
        match self.llm_tokens_warn_per_hour {
            Some(n) => n,
            None => self.llm_tokens_per_hour / 5 * 4,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
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
    upload_bytes_per_hour: Option<Spanned<i64>>,
    sandbox_upload_bytes_per_hour: Option<Spanned<i64>>,
    sandbox_requests_per_hour: Option<Spanned<i64>>,
    llm_tokens_per_hour: Option<Spanned<i64>>,
    llm_tokens_warn_per_hour: Option<Spanned<i64>>,
    sandbox_llm_tokens_per_hour: Option<Spanned<i64>>,
    approvals_pending: Option<Spanned<i64>>,
    approvals_per_minute: Option<Spanned<i64>>,
    approvals_hold_seconds: Option<Spanned<i64>>,
    approvals_holds: Option<Spanned<i64>>,
}

impl RawLimits {
    /// The limits, defaults filled in.
    pub(crate) fn check(self) -> Result<Limits, Invalid> {
        let d = Limits::default();
        // Each knob: its value when given and within `range` (the ranges fit its type), else
        // an error naming it; the default when not given.
        fn within<T: TryFrom<i64>>(
            range: &std::ops::RangeInclusive<i64>,
        ) -> impl Fn(Option<Spanned<i64>>, &'static str, T) -> Result<T, Invalid> + '_ {
            move |v, key, default| match v {
                None => Ok(default),
                Some(v) if range.contains(v.get_ref()) => {
                    Ok(T::try_from(*v.get_ref()).unwrap_or(default))
                }
                Some(v) => Err(Invalid {
                    span: v.span(),
                    key,
                    reason: format!("must be between {} and {}", range.start(), range.end()),
                }),
            }
        }
        let (knob, circuit) = (within::<u32>(&RANGE), within::<u32>(&CIRCUIT_RANGE));
        let (bytes, requests) = (within::<u64>(&BYTES_RANGE), within::<u64>(&REQUESTS_RANGE));
        let tokens = within::<u64>(&TOKENS_RANGE);
        let inbox = within::<u32>(&APPROVALS_RANGE);
        let (hold, holds) = (within::<u32>(&HOLD_RANGE), within::<u32>(&HOLDS_RANGE));
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
            upload_bytes_per_hour: bytes(
                self.upload_bytes_per_hour,
                "limits.upload_bytes_per_hour",
                d.upload_bytes_per_hour,
            )?,
            sandbox_upload_bytes_per_hour: bytes(
                self.sandbox_upload_bytes_per_hour,
                "limits.sandbox_upload_bytes_per_hour",
                d.sandbox_upload_bytes_per_hour,
            )?,
            sandbox_requests_per_hour: requests(
                self.sandbox_requests_per_hour,
                "limits.sandbox_requests_per_hour",
                d.sandbox_requests_per_hour,
            )?,
            llm_tokens_per_hour: tokens(
                self.llm_tokens_per_hour,
                "limits.llm_tokens_per_hour",
                d.llm_tokens_per_hour,
            )?,
            llm_tokens_warn_per_hour: match self.llm_tokens_warn_per_hour {
                None => None,
                v => Some(tokens(v, "limits.llm_tokens_warn_per_hour", 0)?),
            },
            sandbox_llm_tokens_per_hour: tokens(
                self.sandbox_llm_tokens_per_hour,
                "limits.sandbox_llm_tokens_per_hour",
                d.sandbox_llm_tokens_per_hour,
            )?,
            approvals_pending: inbox(
                self.approvals_pending,
                "limits.approvals_pending",
                d.approvals_pending,
            )?,
            approvals_per_minute: inbox(
                self.approvals_per_minute,
                "limits.approvals_per_minute",
                d.approvals_per_minute,
            )?,
            approvals_hold_seconds: hold(
                self.approvals_hold_seconds,
                "limits.approvals_hold_seconds",
                d.approvals_hold_seconds,
            )?,
            approvals_holds: holds(
                self.approvals_holds,
                "limits.approvals_holds",
                d.approvals_holds,
            )?,
        })
    }
}
