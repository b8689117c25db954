//! `[signals]`: what the proxy notices in a request body that no detector names: a long
//! base64 or hex run (encoded data) and a high-entropy body (compressed or encrypted data),
//! on their way to a host outside the LLM APIs. Each is audited as a signal by default
//! (`log`); the policy can make it a refusal (`deny`, reasons `encoded-blob` and
//! `high-entropy`) or turn it off.
//!
//! The measuring is the proxy's (`proxy/src/signal.rs`); this module holds the knobs.

use serde::Deserialize;
use toml::Spanned;

/// What the proxy does with a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignalAction {
    /// Not measured.
    Off,
    /// Audited (`signals` on the request's line), the request goes on.
    #[default]
    Log,
    /// Refused (in report mode: audited as what would have been refused, and sent).
    Deny,
}

/// `[signals]`, with defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signals {
    /// A base64 or hex run of at least `blob_min_bytes` bytes.
    pub encoded_blob: SignalAction,
    /// The shortest run that is a signal.
    pub blob_min_bytes: usize,
    /// A body of at least `entropy_min_bytes` bytes whose byte entropy is at least
    /// [`HIGH_ENTROPY_BITS`] bits per byte.
    pub high_entropy: SignalAction,
    /// The smallest body whose entropy is judged.
    pub entropy_min_bytes: usize,
}

/// Bits per byte from which a body counts as compressed or encrypted: random bytes and
/// gzip come out above 7.9, base64 text at 6, source code and English near 4.5 to 5.
pub const HIGH_ENTROPY_BITS: f64 = 7.5;

/// Default `blob_min_bytes`: 4 KiB of base64 is 3 KiB of data, more than any token or key
/// and less than a file worth stealing.
pub const DEFAULT_BLOB_MIN: usize = 4096;
/// Default `entropy_min_bytes`: below it a body's entropy says little.
pub const DEFAULT_ENTROPY_MIN: usize = 4096;

/// The bounds of both sizes.
const SIZE_RANGE: std::ops::RangeInclusive<i64> = 256..=(64 << 20);

impl Default for Signals {
    fn default() -> Self {
        Signals {
            encoded_blob: SignalAction::Log,
            blob_min_bytes: DEFAULT_BLOB_MIN,
            high_entropy: SignalAction::Log,
            entropy_min_bytes: DEFAULT_ENTROPY_MIN,
        }
    }
}

impl Signals {
    /// Whether any signal is measured.
    #[must_use]
    pub fn any(&self) -> bool {
        self.encoded_blob != SignalAction::Off || self.high_entropy != SignalAction::Off
    }
}

/// `[signals]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSignals {
    encoded_blob: Option<SignalAction>,
    blob_min_bytes: Option<Spanned<i64>>,
    high_entropy: Option<SignalAction>,
    entropy_min_bytes: Option<Spanned<i64>>,
}

/// A value out of bounds: where, which key, why.
pub(crate) struct Invalid {
    pub span: std::ops::Range<usize>,
    pub key: &'static str,
    pub reason: String,
}

impl RawSignals {
    /// The knobs, defaults filled in.
    pub(crate) fn check(self) -> Result<Signals, Invalid> {
        let d = Signals::default();
        let size = |v: Option<Spanned<i64>>, key: &'static str, default: usize| match v {
            None => Ok(default),
            Some(v) if SIZE_RANGE.contains(v.get_ref()) => {
                Ok(usize::try_from(*v.get_ref()).unwrap_or(default))
            }
            Some(v) => Err(Invalid {
                span: v.span(),
                key,
                reason: format!(
                    "must be between {} and {} bytes",
                    SIZE_RANGE.start(),
                    SIZE_RANGE.end()
                ),
            }),
        };
        Ok(Signals {
            encoded_blob: self.encoded_blob.unwrap_or(d.encoded_blob),
            blob_min_bytes: size(
                self.blob_min_bytes,
                "signals.blob_min_bytes",
                d.blob_min_bytes,
            )?,
            high_entropy: self.high_entropy.unwrap_or(d.high_entropy),
            entropy_min_bytes: size(
                self.entropy_min_bytes,
                "signals.entropy_min_bytes",
                d.entropy_min_bytes,
            )?,
        })
    }
}
