//! Signals, not verdicts: what a request body looks like when no detector names a secret in
//! it. Two measures, both linear and allocation-free over the bytes as they stream:
//!
//! - **encoded blob**: the longest run of base64 (standard or URL-safe, `=` padding) or hex
//!   characters. A line break continues a run only after a line of at least
//!   [`WRAP_MIN`] characters (`base64` wraps at 76, PEM at 64), so prose and word lists
//!   (short lines) never add up to a run;
//! - **high entropy**: Shannon entropy of the body's byte histogram, judged once at least
//!   `entropy_min_bytes` were seen: compressed and encrypted data is near 8 bits per byte.
//!
//! What a signal leads to is the policy's (`[signals]`, [`airlock_policy::signals`]): an
//! audit entry on the request's line (`signals`), or a refusal (`encoded-blob`,
//! `high-entropy`). The request pipeline (`intercept`) measures bodies to hosts outside the
//! LLM APIs (where agents legitimately send files as context), never the git service's.

use airlock_policy::Reason;
use airlock_policy::signals::{HIGH_ENTROPY_BITS, SignalAction, Signals};

/// A line break continues an encoded run only after a line at least this long.
pub const WRAP_MIN: usize = 60;

// The shape of a signal on the audit line is the log's schema (`airlock-audit-schema`).
pub use airlock_audit_schema::{Alphabet, Signal};

/// What the policy makes of a [`Signal`].
pub trait SignalPolicy {
    /// The refusal this signal is when the policy denies it.
    fn reason(&self) -> Reason;
    /// The policy's action for this signal.
    fn action(&self, knobs: &Signals) -> SignalAction;
}

impl SignalPolicy for Signal {
    fn reason(&self) -> Reason {
        match self {
            Signal::EncodedBlob { .. } => Reason::EncodedBlob,
            Signal::HighEntropy { .. } => Reason::HighEntropy,
        }
    }

    fn action(&self, knobs: &Signals) -> SignalAction {
        match self {
            Signal::EncodedBlob { .. } => knobs.encoded_blob,
            Signal::HighEntropy { .. } => knobs.high_entropy,
        }
    }
}

/// Byte classes, one table lookup per byte.
const B64: u8 = 1;
const HEX: u8 = 2;
const BREAK: u8 = 4;

const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let mut k = 0;
        if c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_' | b'=') {
            k |= B64;
        }
        if c.is_ascii_hexdigit() {
            k |= HEX;
        }
        if matches!(c, b'\n' | b'\r') {
            k |= BREAK;
        }
        t[b] = k;
        b += 1;
    }
    t
}

static CLASS: [u8; 256] = classes();

/// The measures of one body, fed chunk by chunk.
#[derive(Debug, Clone)]
pub struct Analyzer {
    knobs: Signals,
    /// Current base64 run (line breaks excluded) and the length of its current line.
    b64_run: usize,
    b64_line: usize,
    /// Current hex run and its current line.
    hex_run: usize,
    hex_line: usize,
    /// Whether the byte before was a line break (so `\r\n` is one break).
    in_break: bool,
    longest_b64: usize,
    longest_hex: usize,
    histogram: Box<[u64; 256]>,
    total: u64,
}

impl Analyzer {
    /// A fresh analyzer for the policy's knobs.
    #[must_use]
    pub fn new(knobs: Signals) -> Self {
        Analyzer {
            knobs,
            b64_run: 0,
            b64_line: 0,
            hex_run: 0,
            hex_line: 0,
            in_break: false,
            longest_b64: 0,
            longest_hex: 0,
            histogram: Box::new([0; 256]),
            total: 0,
        }
    }

    /// Feeds the next bytes of the body.
    pub fn feed(&mut self, bytes: &[u8]) {
        let entropy = self.knobs.high_entropy != SignalAction::Off;
        let blobs = self.knobs.encoded_blob != SignalAction::Off;
        if entropy {
            let h = &mut *self.histogram;
            for &b in bytes {
                h[usize::from(b)] += 1;
            }
        }
        self.total += bytes.len() as u64;
        if blobs {
            self.runs(bytes);
        }
    }

    fn runs(&mut self, bytes: &[u8]) {
        // Locals, not fields, in the loop: one table lookup and a few register updates per
        // byte; the longest run is a running maximum.
        let (mut b64, mut b64_line) = (self.b64_run, self.b64_line);
        let (mut hex, mut hex_line) = (self.hex_run, self.hex_line);
        let (mut longest_b64, mut longest_hex) = (self.longest_b64, self.longest_hex);
        let mut in_break = self.in_break;
        for &b in bytes {
            let k = CLASS[usize::from(b)];
            if k & BREAK != 0 {
                if !in_break {
                    // A break continues a run only after a long line (wrapped base64).
                    if b64_line < WRAP_MIN {
                        longest_b64 = longest_b64.max(b64);
                        b64 = 0;
                    }
                    if hex_line < WRAP_MIN {
                        longest_hex = longest_hex.max(hex);
                        hex = 0;
                    }
                    b64_line = 0;
                    hex_line = 0;
                }
                in_break = true;
                continue;
            }
            in_break = false;
            // Branch-free: a byte outside the alphabet multiplies the run back to 0 (code
            // and prose alternate classes every few bytes, which a branch mispredicts).
            let in_b64 = usize::from(k & B64 != 0);
            let in_hex = usize::from(k & HEX != 0);
            b64 = (b64 + 1) * in_b64;
            b64_line = (b64_line + 1) * in_b64;
            hex = (hex + 1) * in_hex;
            hex_line = (hex_line + 1) * in_hex;
            longest_b64 = longest_b64.max(b64);
            longest_hex = longest_hex.max(hex);
        }
        self.longest_b64 = longest_b64.max(b64);
        self.longest_hex = longest_hex.max(hex);
        (self.b64_run, self.b64_line, self.hex_run, self.hex_line) = (b64, b64_line, hex, hex_line);
        self.in_break = in_break;
    }

    /// Bits per byte of what was fed.
    #[must_use]
    pub fn entropy(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let n = self.total as f64;
        self.histogram
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                #[allow(clippy::cast_precision_loss)]
                let p = c as f64 / n;
                -p * p.log2()
            })
            .sum()
    }

    /// The signals of what was fed so far (an entropy signal needs `entropy_min_bytes`).
    #[must_use]
    pub fn signals(&self) -> Vec<Signal> {
        let mut out = Vec::new();
        if self.knobs.encoded_blob != SignalAction::Off {
            let min = self.knobs.blob_min_bytes;
            // Hex is also base64's alphabet: a hex run is named as hex.
            if self.longest_hex >= min {
                out.push(Signal::EncodedBlob {
                    alphabet: Alphabet::Hex,
                    run: self.longest_hex,
                });
            } else if self.longest_b64 >= min {
                out.push(Signal::EncodedBlob {
                    alphabet: Alphabet::Base64,
                    run: self.longest_b64,
                });
            }
        }
        if self.knobs.high_entropy != SignalAction::Off
            && self.total >= self.knobs.entropy_min_bytes as u64
        {
            let bits = self.entropy();
            if bits >= HIGH_ENTROPY_BITS {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=800
                out.push(Signal::HighEntropy {
                    centibits: (bits * 100.0) as u16,
                    bytes: self.total,
                });
            }
        }
        out
    }

    /// The first signal the policy denies, if any.
    #[must_use]
    pub fn denied(&self) -> Option<Signal> {
        self.signals()
            .into_iter()
            .find(|s| s.action(&self.knobs) == SignalAction::Deny)
    }
}

/// The smallest body in which any signal can be found: shorter bodies are not read (a run
/// cannot reach `blob_min_bytes`, entropy is not judged below `entropy_min_bytes`).
#[must_use]
pub fn min_body(knobs: &Signals) -> usize {
    let blob = (knobs.encoded_blob != SignalAction::Off).then_some(knobs.blob_min_bytes);
    let entropy = (knobs.high_entropy != SignalAction::Off).then_some(knobs.entropy_min_bytes);
    blob.into_iter().chain(entropy).min().unwrap_or(usize::MAX)
}

/// The signals of a whole body.
#[must_use]
pub fn of(knobs: Signals, bytes: &[u8]) -> Vec<Signal> {
    if bytes.len() < min_body(&knobs) {
        return Vec::new();
    }
    let mut a = Analyzer::new(knobs);
    a.feed(bytes);
    a.signals()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn knobs() -> Signals {
        Signals::default()
    }

    /// Deterministic pseudo-random bytes (xorshift), as encrypted data looks.
    fn random(n: usize) -> Vec<u8> {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn a_base64_file_is_an_encoded_blob_wrapped_or_not() {
        let data = random(6000);
        let flat = base64::engine::general_purpose::STANDARD.encode(&data);
        let s = of(knobs(), flat.as_bytes());
        assert!(
            matches!(s[..], [Signal::EncodedBlob { alphabet: Alphabet::Base64, run }] if run == flat.len()),
            "{s:?}"
        );
        // `base64` wraps at 76 columns: the lines still make one run.
        let wrapped: String = flat
            .as_bytes()
            .chunks(76)
            .map(|l| format!("{}\r\n", std::str::from_utf8(l).unwrap()))
            .collect();
        let s = of(knobs(), wrapped.as_bytes());
        assert!(
            matches!(s[..], [Signal::EncodedBlob { run, .. }] if run == flat.len()),
            "{s:?}"
        );
        // In a JSON string, split across chunks at every size: the same run.
        let json = format!("{{\"file\":\"{flat}\"}}");
        for cut in [1, 7, 1000, 4096] {
            let mut a = Analyzer::new(knobs());
            json.as_bytes().chunks(cut).for_each(|c| a.feed(c));
            assert_eq!(a.signals(), s, "chunks of {cut}");
        }
    }

    #[test]
    fn hex_is_named_hex() {
        let hex: String = random(3000).iter().map(|b| format!("{b:02x}")).collect();
        let s = of(knobs(), hex.as_bytes());
        assert!(
            matches!(
                s[..],
                [Signal::EncodedBlob {
                    alphabet: Alphabet::Hex,
                    run: 6000
                }]
            ),
            "{s:?}"
        );
    }

    #[test]
    fn random_bytes_are_high_entropy_and_below_the_minimum_say_nothing() {
        let s = of(knobs(), &random(8192));
        assert!(
            s.iter().any(
                |s| matches!(s, Signal::HighEntropy { centibits, bytes: 8192 } if *centibits > 790)
            ),
            "{s:?}"
        );
        assert!(of(knobs(), &random(1024)).is_empty());
    }

    #[test]
    fn honest_bodies_raise_nothing() {
        // Source code, prose, a word list, JSON with short tokens and a few hashes.
        let code = include_str!("signal.rs").repeat(2);
        assert!(of(knobs(), code.as_bytes()).is_empty());
        let words: String = (0..2000).map(|i| format!("word{i}\n")).collect();
        assert!(of(knobs(), words.as_bytes()).is_empty(), "short lines");
        let json: String = (0..200)
            .map(|i| {
                format!(
                    "{{\"id\":{i},\"sha\":\"{:064x}\",\"name\":\"pkg-{i}\"}},",
                    i * 7919
                )
            })
            .collect();
        assert!(of(knobs(), json.as_bytes()).is_empty(), "hashes in JSON");
    }

    #[test]
    fn off_measures_nothing_and_deny_is_found() {
        let data = random(8192);
        let off = Signals {
            encoded_blob: SignalAction::Off,
            high_entropy: SignalAction::Off,
            ..knobs()
        };
        assert!(of(off, &data).is_empty());
        let deny = Signals {
            high_entropy: SignalAction::Deny,
            ..knobs()
        };
        let mut a = Analyzer::new(deny);
        a.feed(&data);
        assert_eq!(a.denied().map(|s| s.reason()), Some(Reason::HighEntropy));
        let mut a = Analyzer::new(knobs());
        a.feed(&data);
        assert_eq!(a.denied(), None, "log only by default");
    }

    #[test]
    fn the_audit_form_is_tagged() {
        let v = serde_json::to_value(Signal::EncodedBlob {
            alphabet: Alphabet::Base64,
            run: 5000,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"signal": "encoded-blob", "alphabet": "base64", "run": 5000})
        );
    }
}
