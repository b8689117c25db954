//! Signals, not verdicts: what a request body looks like when no detector names a secret in
//! it. Two measures, both linear and allocation-free over the bytes as they stream:
//!
//! - **encoded blob**: the longest run of base64 (standard or URL-safe, `=` padding) or hex
//!   characters, wrapped at any width: a line break continues a run after a line of at
//!   least [`WRAP_MIN`] characters of it (`base64` wraps at 76, PEM at 64), or after a line
//!   wholly of it at least [`MIN_WIDTH`] long that is as long as the run's lines before it
//!   and is not, like the line before it, alike its predecessor in many columns (an encoder
//!   wraps at one width, its last line may be shorter, and its lines share no structure), so
//!   prose, word lists
//!   (short lines of many lengths) and lists of identifiers of one shape (`item-00042-17`)
//!   never add up to a run. Also the longest run spelled in
//!   any alphabet of at most [`MAX_SYMBOLS`] symbols (gzip mapped onto `ghijklmnopqrstuv`,
//!   whitespace apart) whose symbols are used as evenly as data uses them (its entropy within
//!   [`UNIFORM_SLACK`] bits of the most its symbols can carry): named as hex, a 16-symbol
//!   alphabet;
//! - **high entropy**: Shannon entropy of the body's byte histogram, judged once at least
//!   `entropy_min_bytes` were seen: compressed and encrypted data is near 8 bits per byte.
//!
//! What a signal leads to is the policy's (`[signals]`, [`airlock_policy::signals`]): an
//! audit entry on the request's line (`signals`), or a refusal (`encoded-blob`,
//! `high-entropy`). The request pipeline (`intercept`) measures bodies to hosts outside the
//! LLM APIs (where agents legitimately send files as context), never the git service's.

use airlock_policy::Reason;
use airlock_policy::signals::{HIGH_ENTROPY_BITS, SignalAction, Signals};

/// A line break continues an encoded run after a line of the run at least this long.
pub const WRAP_MIN: usize = 60;
/// ... or after a line wholly of the run, at least this long, as long as its lines before.
pub const MIN_WIDTH: usize = 16;
/// The most symbols an alphabet of the agent's own may have to be measured.
pub const MAX_SYMBOLS: usize = 16;
/// The fewest: a run of ten digits or fewer symbols is a number, not an encoding.
pub const MIN_SYMBOLS: usize = 10;
/// How far (bits per symbol) below the most its symbols can carry a run's entropy may be
/// for it to count as data: encoded data is within a few hundredths, text and numbers
/// (digits, separators) a tenth or more below.
pub const UNIFORM_SLACK: f64 = 0.05;

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
const SPACE: u8 = 8;

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
        if matches!(c, b' ' | b'\t' | 0x0B | 0x0C) {
            k |= SPACE;
        }
        t[b] = k;
        b += 1;
    }
    t
}

static CLASS: [u8; 256] = classes();

/// A run of one alphabet across line breaks.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    /// Its length (line breaks excluded) and its length on the current line.
    len: usize,
    line: usize,
    /// The length of its lines (0: its first line is not over).
    width: usize,
}

impl Run {
    /// A line of `line_len` bytes ended (`varied`: it differs from the line before it in
    /// most columns): whether the run goes on past the break (see the module docs); if
    /// not, its length so far is a candidate for the longest.
    fn wrap(&mut self, line_len: usize, varied: bool, longest: &mut usize) {
        let whole_line = self.line == line_len;
        let first_line = self.len == self.line;
        let width = if first_line { 0 } else { self.width };
        let goes_on = self.line >= WRAP_MIN
            || (whole_line
                && self.line >= MIN_WIDTH
                && (width == 0 || (self.line == width && varied)));
        if goes_on {
            if first_line {
                self.width = self.line;
            }
        } else {
            *longest = (*longest).max(self.len);
            self.len = 0;
            self.width = 0;
        }
        self.line = 0;
    }
}

/// The run spelled in the agent's own alphabet: the symbols it has used (at most
/// [`MAX_SYMBOLS`]), how often, and how long it is.
#[derive(Debug, Clone)]
struct Symbols {
    /// `slot[b]`: the symbol's index in `seen`, or `NONE`.
    slot: Box<[u8; 256]>,
    seen: Vec<u8>,
    counts: [u64; MAX_SYMBOLS],
    run: Run,
    /// The longest run of near-uniform symbols.
    longest: usize,
}

const NONE: u8 = u8::MAX;

impl Symbols {
    fn new() -> Self {
        Self {
            slot: Box::new([NONE; 256]),
            seen: Vec::with_capacity(MAX_SYMBOLS),
            counts: [0; MAX_SYMBOLS],
            run: Run::default(),
            longest: 0,
        }
    }

    fn byte(&mut self, b: u8) {
        let mut slot = self.slot[usize::from(b)];
        if slot == NONE {
            if self.seen.len() == MAX_SYMBOLS {
                // A symbol past the alphabet: the run ends, a new one starts here.
                self.close();
                self.run = Run::default();
            }
            slot = u8::try_from(self.seen.len()).unwrap_or(0);
            self.slot[usize::from(b)] = slot;
            self.seen.push(b);
        }
        self.counts[usize::from(slot)] += 1;
        self.run.len += 1;
        self.run.line += 1;
    }

    fn line_break(&mut self, line_len: usize, varied: bool) {
        let mut ended = 0;
        self.run.wrap(line_len, varied, &mut ended);
        if self.run.len == 0 && ended > 0 {
            self.run.len = ended;
            self.close();
            self.run = Run::default();
        }
    }

    /// The run is over: measured, then forgotten.
    fn close(&mut self) {
        // Measured only when it would be the longest (most runs of text are short, and a
        // measure is a logarithm per symbol).
        if self.run.len > self.longest {
            self.longest = self.longest.max(self.current());
        }
        for &b in &self.seen {
            self.slot[usize::from(b)] = NONE;
        }
        // Slots are handed out in order: only the first `seen.len()` counts were used.
        self.counts[..self.seen.len()].fill(0);
        self.seen.clear();
    }

    /// The current run's length if it looks like data, else 0.
    fn current(&self) -> usize {
        let k = self.seen.len();
        if k < MIN_SYMBOLS || self.run.len == 0 {
            return 0;
        }
        let counts = &self.counts[..k];
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let n: f64 = counts.iter().sum::<u64>() as f64;
        let bits: f64 = counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                #[allow(clippy::cast_precision_loss)]
                let p = c as f64 / n;
                -p * p.log2()
            })
            .sum();
        #[allow(clippy::cast_precision_loss)] // at most 16
        let most = (k as f64).log2();
        if bits >= most - UNIFORM_SLACK {
            self.run.len
        } else {
            0
        }
    }
}

/// The measures of one body, fed chunk by chunk.
#[derive(Debug, Clone)]
pub struct Analyzer {
    knobs: Signals,
    /// The current base64 and hex runs.
    b64: Run,
    hex: Run,
    /// Bytes on the current line (line breaks excluded), its first [`WRAP_MIN`] bytes, and
    /// those of the line before it (a narrow wrap's lines are compared column by column).
    line_len: usize,
    line: [u8; WRAP_MIN],
    prev: [u8; WRAP_MIN],
    prev_len: usize,
    alike_before: bool,
    /// Whether the byte before was a line break (so `\r\n` is one break).
    in_break: bool,
    longest_b64: usize,
    longest_hex: usize,
    symbols: Symbols,
    histogram: Box<[u64; 256]>,
    total: u64,
}

impl Analyzer {
    /// A fresh analyzer for the policy's knobs.
    #[must_use]
    pub fn new(knobs: Signals) -> Self {
        Analyzer {
            knobs,
            b64: Run::default(),
            hex: Run::default(),
            line_len: 0,
            line: [0; WRAP_MIN],
            prev: [0; WRAP_MIN],
            prev_len: 0,
            alike_before: false,
            in_break: false,
            longest_b64: 0,
            longest_hex: 0,
            symbols: Symbols::new(),
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
        let (mut b64, mut hex) = (self.b64, self.hex);
        let (mut longest_b64, mut longest_hex) = (self.longest_b64, self.longest_hex);
        let mut line_len = self.line_len;
        let mut in_break = self.in_break;
        // The agent's own alphabet's run is followed only up to here: the bytes from a
        // space to the next one in this chunk, when fewer than `blob_min_bytes`, hold
        // only runs too short to be a signal (a space ends a run, and a shorter run's
        // length is never reported: a signal's run is at least `blob_min_bytes`).
        let mut words_until = 0;
        let min = self.knobs.blob_min_bytes;
        for (i, &b) in bytes.iter().enumerate() {
            let k = CLASS[usize::from(b)];
            if k & BREAK != 0 {
                if !in_break {
                    let varied = self.varied(line_len);
                    b64.wrap(line_len, varied, &mut longest_b64);
                    hex.wrap(line_len, varied, &mut longest_hex);
                    if i >= words_until {
                        self.symbols.line_break(line_len, varied);
                    }
                    line_len = 0;
                }
                in_break = true;
                continue;
            }
            in_break = false;
            if k & SPACE != 0 {
                // Whitespace within a line: no alphabet's, and the agent's own alphabet's
                // run ends (a space is how text separates words).
                if i >= words_until {
                    self.symbols.close();
                    self.symbols.run = Run::default();
                }
                if let Some(next) = bytes[i + 1..]
                    .iter()
                    .take(min)
                    .position(|&c| CLASS[usize::from(c)] & SPACE != 0)
                {
                    words_until = i + 1 + next;
                }
            } else if i >= words_until {
                self.symbols.byte(b);
            }
            if let Some(at) = self.line.get_mut(line_len) {
                *at = b;
            }
            line_len += 1;
            // Branch-free: a byte outside the alphabet multiplies the run back to 0 (code
            // and prose alternate classes every few bytes, which a branch mispredicts).
            let in_b64 = usize::from(k & B64 != 0);
            let in_hex = usize::from(k & HEX != 0);
            b64.len = (b64.len + 1) * in_b64;
            b64.line = (b64.line + 1) * in_b64;
            hex.len = (hex.len + 1) * in_hex;
            hex.line = (hex.line + 1) * in_hex;
            longest_b64 = longest_b64.max(b64.len);
            longest_hex = longest_hex.max(hex.len);
        }
        self.longest_b64 = longest_b64.max(b64.len);
        self.longest_hex = longest_hex.max(hex.len);
        (self.b64, self.hex) = (b64, hex);
        self.line_len = line_len;
        self.in_break = in_break;
    }

    /// Whether the line that just ended (`len` bytes) and the one before it are not both
    /// like their predecessors: alike is the same in more than a quarter of the columns
    /// (random lines of 16 symbols share a sixteenth; two alike in a row is one chance in
    /// ten thousand, where every line of a list of one shape is alike). A line of another
    /// length, or past [`WRAP_MIN`], is not alike. The line becomes the one before.
    fn varied(&mut self, len: usize) -> bool {
        let alike = len < WRAP_MIN && len == self.prev_len && {
            let differing = self.line[..len]
                .iter()
                .zip(&self.prev[..len])
                .filter(|(a, b)| a != b)
                .count();
            differing * 4 < len * 3
        };
        let varied = !(alike && self.alike_before);
        self.alike_before = alike;
        self.prev = self.line;
        self.prev_len = len;
        varied
    }

    /// The longest run in the agent's own alphabet that looks like data (the current one
    /// included).
    fn longest_symbols(&self) -> usize {
        self.symbols.longest.max(self.symbols.current())
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
            // Hex is also base64's alphabet: a hex run is named as hex, and so is a run in
            // an alphabet of 16 symbols or fewer of the agent's own.
            let hexlike = self.longest_hex.max(self.longest_symbols());
            if hexlike >= min {
                out.push(Signal::EncodedBlob {
                    alphabet: Alphabet::Hex,
                    run: hexlike,
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

    fn wrap(text: &str, width: usize) -> String {
        text.as_bytes()
            .chunks(width)
            .map(|l| format!("{}\n", std::str::from_utf8(l).unwrap()))
            .collect()
    }

    /// Encoded data wrapped at any width (`xxd -p -c 30` wraps hex at 60, an agent at 59 or
    /// 17), and gzip'd data spelled in 16 symbols of the agent's choosing, are one run.
    #[test]
    fn a_run_is_found_at_any_line_width_and_in_any_sixteen_symbols() {
        let data = random(6000);
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        for width in [17, 59, 60, 64, 1000] {
            let s = of(knobs(), wrap(&hex, width).as_bytes());
            assert!(
                matches!(s[..], [Signal::EncodedBlob { alphabet: Alphabet::Hex, run }, ..] if run >= 11_000),
                "hex at {width}: {s:?}"
            );
        }
        let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
        let s = of(knobs(), wrap(&b64, 50).as_bytes());
        assert!(
            matches!(s[..], [Signal::EncodedBlob { alphabet: Alphabet::Base64, run }, ..] if run >= 7_900),
            "base64 at 50: {s:?}"
        );
        let symbols = b"ghijklmnopqrstuv";
        let mapped: String = random(3000)
            .iter()
            .flat_map(|b| [symbols[usize::from(b >> 4)], symbols[usize::from(b & 15)]])
            .map(char::from)
            .collect();
        let among_words = format!(
            "{}{}\n{} ",
            "a few words of prose, then the run: ".repeat(20),
            wrap(&mapped, 59),
            "and words again".repeat(20)
        );
        for text in [mapped.clone(), wrap(&mapped, 59), among_words] {
            let s = of(knobs(), text.as_bytes());
            assert!(
                matches!(s[..], [Signal::EncodedBlob { alphabet: Alphabet::Hex, run }, ..] if run >= 5_900),
                "{s:?}"
            );
            // Fed in chunks (words are skipped within a chunk only): the same.
            for cut in [1, 7, 64, 1000] {
                let mut a = Analyzer::new(knobs());
                text.as_bytes().chunks(cut).for_each(|c| a.feed(c));
                assert_eq!(a.signals(), s, "chunks of {cut}");
            }
        }
    }

    /// What looks alike and is not encoded data: lines of many lengths, numbers, prose.
    #[test]
    fn word_lists_numbers_and_prose_are_no_runs() {
        let words: String = (0..3000)
            .map(|i| format!("word{}\n", i * 7 % 1013))
            .collect();
        let floats: String = (0..3000)
            .map(|i| format!("{:.6},", f64::from(i).sin()))
            .collect();
        let csv: String = (0..2000)
            .map(|i| format!("{i},{},{}\n", i * 31, i % 7))
            .collect();
        let ids: String = (0..400)
            .map(|i| format!("item-{i:05}-{}\n", i * 7919))
            .collect();
        for (what, text) in [
            ("words", words),
            ("floats", format!("[{floats}0]")),
            ("csv", csv),
            ("ids", ids),
            (
                "prose",
                "The quick brown fox jumps over the lazy dog.\n".repeat(300),
            ),
        ] {
            let s = of(knobs(), text.as_bytes());
            assert!(
                !s.iter().any(|s| matches!(s, Signal::EncodedBlob { .. })),
                "{what}: {s:?}"
            );
        }
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
