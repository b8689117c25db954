//! Secrets the proxy was never told about: well-known credential formats, each bound to
//! its provider's hosts (the only places it may legitimately go), and the exact values
//! found in the workspace's own secret files.
//!
//! The formats are [`airlock_policy::detect`] as the policy changes them (`[[detectors]]`,
//! `[secrets]`: detectors of its own, an action per detector, more provider hosts, example
//! values allowed; [`airlock_policy::secrets`]): one set, shared with the entrypoint, which
//! classifies the workspace's values with it. The workspace's values come in the
//! hand-off ([`airlock_handoff::WorkspaceSecret`]): each is an exact needle of a
//! detector named `workspace:<file>`, searched in one Aho-Corasick pass (linear time),
//! without regard to ASCII case, in every form an agent's tools send it in (as is,
//! percent-encoded in the common ways, form-encoded, JSON-escaped, reversed, without its
//! whitespace, inside base64 and base32); it may go to no host, unless a format recognised
//! the value, whose provider hosts it may then go to, and whose action it has, as that
//! format. A needle is at most [`MAX_NEEDLE`] bytes (a longer form is matched by its
//! start), so a streamed body's hold-back always sees it whole.
//!
//! Both the formats and the needles search the bytes as sent **and** as
//! [`crate::normalize`] decodes them (escapes in rounds, hex runs, spaced runs), so a
//! secret JSON-escaped, double-percent-encoded, hex-encoded in either case or spaced out is
//! found; a hit in a decoded piece is reported (and redacted) where its encoded form
//! stands.
//!
//! A secret on its way to a host that is not its provider's gets its detector's action
//! ([`SecretAction`]), decided here ([`Detectors::judge`] for the URL and headers,
//! [`Detectors::judge_body`] for a body or a WebSocket payload) and written on the record by
//! the request pipeline ([`Verdict::note`]):
//! - `deny` (the default): refused `foreign-secret` with the detector's name (never the
//!   value) in the audit line and the 403; in a body to an LLM API host, where agents send
//!   file contents as context, redacted instead (same length) and the request goes on;
//! - `redact`: in a body, redacted on every host; in the URL or a header, refused;
//! - `log`: the request goes on as it is, its line says `decision: report`,
//!   `reason: foreign-secret` and the detector;
//! - `off`: the detector is not in the set.
//!
//! Base64 and base32 forms: the value's stable run at each alignment (three for base64,
//! standard and URL-safe; five for base32), a line break of wrapped base64 inside the run
//! hides it (the signals see the blob instead).
//!
//! A search may be given the end of what went before it to the same host (`skip`: the
//! bytes that already left), so a value split over two requests or frames is found in the
//! second; a hit wholly inside what went before is not reported again.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use airlock_handoff::WorkspaceSecret;
use airlock_policy::Host;
use airlock_policy::Reason;
use airlock_policy::detect::{Format, Formats};
use airlock_policy::rule::HostRule;
use airlock_policy::secrets::Secrets;

use crate::audit::{Event, Record, Verdict as Decision};

pub use airlock_policy::detect::{BUILTIN_VERSION, DetectError};
pub use airlock_policy::secrets::SecretAction;

/// The longest needle, in bytes: below the streamed hold-back ([`Detectors::hold`]), so a
/// needle split across chunks is always seen whole.
pub const MAX_NEEDLE: usize = 512;
const _: () = assert!(
    MAX_NEEDLE < MIN_HOLD,
    "below the hold-back of a streamed body"
);

/// Prefix of the detectors of the workspace's values (`workspace:.env`).
pub const WORKSPACE_PREFIX: &str = "workspace:";

/// One detector: a known format, or the workspace's values of one file.
#[derive(Debug)]
pub struct Detector {
    /// Stable name (audit `rule`, the 403 body).
    pub name: Cow<'static, str>,
    /// Hosts the secret may go to (its provider's); empty: nowhere.
    providers: Vec<HostRule>,
    /// What happens to the secret on its way to any other host (never `Off`).
    pub action: SecretAction,
}

impl Detector {
    /// Whether `host` is one of the detector's provider hosts.
    #[must_use]
    pub fn provider(&self, host: &Host) -> bool {
        self.providers.iter().any(|r| r.matches_host(host))
    }
}

/// A secret found: which detector, and where in the scanned bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Index into [`Detectors::get`].
    pub detector: usize,
    /// Byte range of the secret.
    pub range: std::ops::Range<usize>,
}

/// The compiled set: the formats, then the workspace's detectors.
#[derive(Debug)]
pub struct Detectors {
    formats: Formats,
    /// The formats' detectors (same index), then the workspace's.
    detectors: Vec<Detector>,
    /// Every form of every workspace value; `exact_of[pattern]` is its detector.
    exact: Option<AhoCorasick>,
    /// The quick first pass for them ([`sieve`]); `None`: a needle too short for it.
    sieve: Option<sieve::Sieve>,
    exact_of: Vec<usize>,
    /// How far either side of an escape [`crate::normalize`] decodes: the longest secret
    /// searched for, as decoded.
    reach: usize,
    /// The longest workspace value (at most [`MAX_NEEDLE`]).
    longest: usize,
}

/// The smallest hold-back of a streamed body ([`Detectors::hold`]).
pub const MIN_HOLD: usize = 1024;
/// The largest.
pub const MAX_HOLD: usize = 3 * 1024;

/// The longest a format's match is, as decoded: the AWS pair at its widest
/// ([`airlock_policy::detect::PAIR_DISTANCE`] apart), and room for the others.
pub const FORMAT_REACH: usize = airlock_policy::detect::PAIR_DISTANCE + 128;

impl Detectors {
    /// The built-in set.
    ///
    /// # Errors
    /// [`DetectError::Compile`].
    pub fn builtin() -> Result<Self, DetectError> {
        Self::with_workspace(&[])
    }

    /// The built-in set and the workspace's values as exact needles.
    ///
    /// # Errors
    /// [`DetectError::Compile`].
    pub fn with_workspace(secrets: &[WorkspaceSecret]) -> Result<Self, DetectError> {
        Self::new(&Secrets::default(), secrets)
    }

    /// The formats as the policy changes them ([`Formats::with_policy`]) and the
    /// workspace's values as exact needles (a value the policy allows is none).
    ///
    /// # Errors
    /// [`DetectError::Compile`].
    pub fn new(policy: &Secrets, secrets: &[WorkspaceSecret]) -> Result<Self, DetectError> {
        let formats = Formats::with_policy(policy)?;
        let mut detectors: Vec<Detector> = formats
            .all()
            .iter()
            .map(|f| Detector {
                name: f.name.clone(),
                providers: f.providers().to_vec(),
                action: f.action,
            })
            .collect();
        // One detector per (file, format that recognised the value).
        let mut keys: Vec<(&str, Option<&str>)> = Vec::new();
        let mut needles: Vec<Vec<u8>> = Vec::new();
        let mut exact_of = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut longest = 0;
        for s in secrets {
            let value = s.value.expose();
            if formats.needle_refusal(value).is_some() {
                continue; // the entrypoint applies the same rule: a hand-edited hand-off
            }
            let format = s.detector.as_deref().and_then(|n| formats.named(n));
            let key = (s.file.as_str(), format.map(|f| f.name.as_ref()));
            let index = if let Some(k) = keys.iter().position(|k| *k == key) {
                formats.all().len() + k
            } else {
                keys.push(key);
                detectors.push(Detector {
                    name: Cow::Owned(format!("{WORKSPACE_PREFIX}{}", s.file)),
                    providers: format.map(|f| f.providers().to_vec()).unwrap_or_default(),
                    action: format.map_or(SecretAction::Deny, Format::workspace_action),
                });
                detectors.len() - 1
            };
            longest = longest.max(value.trim().len().min(MAX_NEEDLE));
            for form in forms(value.trim().as_bytes()) {
                if seen.insert(form.to_ascii_lowercase()) {
                    needles.push(form);
                    exact_of.push(index);
                }
            }
        }
        let exact = if needles.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .ascii_case_insensitive(true)
                    .start_kind(aho_corasick::StartKind::Both)
                    .build(&needles)
                    .map_err(|e| DetectError::Compile {
                        name: WORKSPACE_PREFIX.into(),
                        detail: e.to_string(),
                    })?,
            )
        };
        let sieve = sieve::Sieve::new(&needles);
        Ok(Self {
            formats,
            detectors,
            exact,
            sieve,
            exact_of,
            reach: FORMAT_REACH.max(longest),
            longest,
        })
    }

    /// The detector at `i`.
    #[must_use]
    pub fn get(&self, i: usize) -> &Detector {
        &self.detectors[i]
    }

    /// How many exact needles (every form of every workspace value) are searched.
    #[must_use]
    pub fn workspace_needles(&self) -> usize {
        self.exact_of.len()
    }

    /// Every secret in `bytes` (documented examples excluded), as sent and as decoded
    /// ([`crate::normalize`]; a decoded hit's range is that of its encoded form): the
    /// formats' hits, then the workspace's values.
    #[must_use]
    pub fn find(&self, bytes: &[u8]) -> Vec<Hit> {
        let mut hits = self.find_plain(bytes);
        let decoded = crate::normalize::Decoded::of(bytes, self.reach);
        if !decoded.is_empty() {
            hits.extend(self.find_plain(&decoded.bytes).into_iter().map(|h| Hit {
                detector: h.detector,
                range: decoded.raw_range(&h.range),
            }));
        }
        hits
    }

    /// The hits of [`Detectors::find`] that end past `skip` (the bytes before it already
    /// left: a hit wholly inside them was judged when they did), cut to start at `skip`.
    fn find_after(&self, bytes: &[u8], skip: usize) -> Vec<Hit> {
        let mut hits = self.find(bytes);
        hits.retain(|h| h.range.end > skip);
        // A hit that starts where one was found in what went before alone is that one
        // grown by the new bytes (a token of what went before glued to the next one's
        // first letters): it was judged when it left.
        if skip > 0 && hits.iter().any(|h| h.range.start < skip) {
            let judged = self.find(&bytes[..skip]);
            hits.retain(|h| {
                h.range.start >= skip
                    || !judged
                        .iter()
                        .any(|j| j.detector == h.detector && j.range.start == h.range.start)
            });
        }
        for h in &mut hits {
            h.range.start = h.range.start.max(skip);
        }
        hits
    }

    /// Every secret in `bytes` as sent, nothing decoded.
    fn find_plain(&self, bytes: &[u8]) -> Vec<Hit> {
        let mut hits: Vec<Hit> = self
            .formats
            .find(bytes)
            .into_iter()
            .map(|h| Hit {
                detector: h.format,
                range: h.range,
            })
            .collect();
        if let Some(ac) = &self.exact {
            let hit = |m: aho_corasick::Match| Hit {
                detector: self.exact_of[m.pattern().as_usize()],
                range: m.range(),
            };
            match &self.sieve {
                Some(sieve) => sieve.find_iter(ac, bytes, |m| hits.push(hit(m))),
                None => hits.extend(ac.find_iter(bytes).map(hit)),
            }
        }
        hits
    }

    /// The first secret in `bytes` that refuses them on their way to `host`
    /// ([`Detectors::judge`]).
    #[must_use]
    pub fn foreign(&self, bytes: &[u8], host: &Host) -> Option<&Detector> {
        self.judge(bytes, host).refused
    }

    /// Bytes that are not rewritten (the URL, a header) on their way to `host`: the first
    /// secret not for `host` whose action is `deny` or `redact` refuses them; those whose
    /// action is `log` are named.
    #[must_use]
    pub fn judge(&self, bytes: &[u8], host: &Host) -> Verdict<'_> {
        self.judge_after(bytes, 0, host)
    }

    /// [`Detectors::judge`] of `bytes` whose first `skip` bytes already left (the end of
    /// what went before to the same host): only a secret that ends past them counts.
    #[must_use]
    pub fn judge_after(&self, bytes: &[u8], skip: usize, host: &Host) -> Verdict<'_> {
        let mut v = Verdict::default();
        for hit in self.find_after(bytes, skip) {
            let d = &self.detectors[hit.detector];
            if d.provider(host) {
                continue;
            }
            match d.action {
                SecretAction::Log => add(&mut v.logged, d),
                SecretAction::Off => {}
                SecretAction::Deny | SecretAction::Redact => {
                    return Verdict {
                        refused: Some(d),
                        ..Verdict::default()
                    };
                }
            }
        }
        v
    }

    /// A body read whole ([`Detectors::judge_body`]): copied only when a secret is found
    /// (most bodies hold none), and the copy sent only when something was rewritten.
    #[must_use]
    pub fn judge_whole(&self, bytes: bytes::Bytes, host: &Host) -> (bytes::Bytes, Verdict<'_>) {
        if self.find(&bytes).is_empty() {
            return (bytes, Verdict::default());
        }
        let mut body = bytes.to_vec();
        let v = self.judge_body(&mut body, host);
        if v.redacted.is_empty() {
            (bytes, v)
        } else {
            (bytes::Bytes::from(body), v)
        }
    }

    /// [`Detectors::judge_whole`] of a body that follows `before` (the end of what went
    /// to the same host before it, already sent): a secret that `before` begins and the
    /// body completes counts too (searched in `before` joined to the body's first
    /// [`Detectors::hold`] bytes); only the body's bytes are ever rewritten.
    #[must_use]
    pub fn judge_whole_after(
        &self,
        before: &[u8],
        bytes: bytes::Bytes,
        host: &Host,
    ) -> (bytes::Bytes, Verdict<'_>) {
        let (body, mut v) = self.judge_whole(bytes, host);
        if v.refused.is_some() || before.is_empty() {
            return (body, v);
        }
        let head = body.len().min(self.hold());
        let mut junction = before.to_vec();
        junction.extend_from_slice(&body[..head]);
        if self.find_after(&junction, before.len()).is_empty() {
            return (body, v);
        }
        let joined = self.judge_body_after(&mut junction, before.len(), host);
        if joined.refused.is_some() {
            return (body, joined);
        }
        for (to, from) in [
            (&mut v.redacted, &joined.redacted),
            (&mut v.logged, &joined.logged),
        ] {
            for n in from {
                if !to.contains(n) {
                    to.push(n);
                }
            }
        }
        if joined.redacted.is_empty() {
            return (body, v);
        }
        let mut out = body.to_vec();
        out[..head].copy_from_slice(&junction[before.len()..]);
        (bytes::Bytes::from(out), v)
    }

    /// How much of a streamed body is held back so that a secret is seen whole before any
    /// of it is sent: 1 KiB (a format's longest prefix, the widest pair), or six times the
    /// longest workspace value (as JSON-escaped), at most 3 KiB.
    #[must_use]
    pub fn hold(&self) -> usize {
        (6 * self.longest).clamp(MIN_HOLD, MAX_HOLD)
    }

    /// A body (or a WebSocket payload) on its way to `host`, rewritten in place: the first
    /// secret not for `host` whose action is `deny` refuses it (nothing is rewritten),
    /// except on an LLM API host ([`llm_host`]) where it is redacted like one whose action
    /// is `redact` (overwritten with `*`, same length, so framing stays valid); those whose
    /// action is `log` stay and are named.
    #[must_use]
    pub fn judge_body(&self, body: &mut [u8], host: &Host) -> Verdict<'_> {
        self.judge_body_after(body, 0, host)
    }

    /// [`Detectors::judge_body`] of `body` whose first `skip` bytes already left: only a
    /// secret that ends past them counts, and only its bytes past them are overwritten.
    #[must_use]
    pub fn judge_body_after(&self, body: &mut [u8], skip: usize, host: &Host) -> Verdict<'_> {
        let hits = self.find_after(body, skip);
        let mut v = Verdict::default();
        if hits.is_empty() {
            return v;
        }
        let llm = llm_host(host);
        let foreign: Vec<(&Hit, &Detector)> = hits
            .iter()
            .map(|h| (h, &self.detectors[h.detector]))
            .filter(|(_, d)| !d.provider(host))
            .collect();
        if !llm && let Some((_, d)) = foreign.iter().find(|(_, d)| d.action == SecretAction::Deny) {
            v.refused = Some(d);
            return v;
        }
        for (hit, d) in foreign {
            match d.action {
                SecretAction::Deny | SecretAction::Redact => {
                    body[hit.range.clone()].fill(b'*');
                    add(&mut v.redacted, d);
                }
                SecretAction::Log => add(&mut v.logged, d),
                SecretAction::Off => {}
            }
        }
        v
    }
}

/// Adds `d`'s name to `names` once.
fn add<'d>(names: &mut Vec<&'d str>, d: &'d Detector) {
    if !names.contains(&d.name.as_ref()) {
        names.push(d.name.as_ref());
    }
}

/// What the detectors make of bytes on their way to a host ([`Detectors::judge`],
/// [`Detectors::judge_body`]).
#[derive(Debug, Default)]
pub struct Verdict<'d> {
    /// The secret that refuses the request (`foreign-secret`); nothing else is then set.
    pub refused: Option<&'d Detector>,
    /// Detectors whose secrets were overwritten in place, by name.
    pub redacted: Vec<&'d str>,
    /// Detectors whose secrets go on as they are (action `log`), by name.
    pub logged: Vec<&'d str>,
}

/// The record's `rule` for the detectors that fired: `secret detector <name>,<name>`.
pub const RULE_PREFIX: &str = "secret detector ";

impl Verdict<'_> {
    /// Whether anything fired.
    #[must_use]
    pub fn any(&self) -> bool {
        self.refused.is_some() || !self.redacted.is_empty() || !self.logged.is_empty()
    }

    /// Writes what was let through on the request's record ([`note`]). Nothing for a
    /// refusal (the pipeline refuses with [`Verdict::refused`]).
    pub fn note(&self, rec: &mut Record) {
        if self.refused.is_none() {
            note(rec, &self.redacted, &self.logged);
        }
    }
}

/// Writes secrets let through on a request's record: redacted ones as
/// `event: secret-redacted`, logged ones as `decision: report`, `reason: foreign-secret`;
/// both name their detectors in `rule` (`secret detector a,b`, merged with the names
/// already there). Nothing when both are empty.
pub fn note<S: AsRef<str>>(rec: &mut Record, redacted: &[S], logged: &[S]) {
    if redacted.is_empty() && logged.is_empty() {
        return;
    }
    if !redacted.is_empty() {
        rec.event = Some(Event::SecretRedacted);
    }
    if !logged.is_empty() {
        rec.decision = Decision::Report;
        rec.reason = Some(Reason::ForeignSecret);
    }
    let mut names: Vec<String> = rec
        .rule
        .as_deref()
        .and_then(|r| r.strip_prefix(RULE_PREFIX))
        .map(|r| r.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    for n in redacted.iter().chain(logged) {
        if !names.iter().any(|m| m == n.as_ref()) {
            names.push(n.as_ref().to_owned());
        }
    }
    rec.rule = Some(format!("{RULE_PREFIX}{}", names.join(",")));
}

/// What a streamed body's detectors let through, kept for the request's final line (the
/// body may still stream when its `open` line is long written): [`Note::add`] as it goes,
/// [`Note::apply`] when the line is written.
#[derive(Debug, Default, Clone)]
pub struct Note(std::sync::Arc<std::sync::Mutex<(Vec<String>, Vec<String>)>>);

impl Note {
    /// Keeps `v`'s redacted and logged detectors (each name once).
    pub fn add(&self, v: &Verdict<'_>) {
        if v.redacted.is_empty() && v.logged.is_empty() {
            return;
        }
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (redacted, logged) = &mut *kept;
        for (to, from) in [(redacted, &v.redacted), (logged, &v.logged)] {
            for n in from {
                if !to.iter().any(|m| m == n) {
                    to.push((*n).to_owned());
                }
            }
        }
    }

    /// Writes what was kept on `rec` ([`note`]).
    pub fn apply(&self, rec: &mut Record) {
        let kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        note(rec, &kept.0, &kept.1);
    }
}

/// The forms a value travels in, each cut to [`MAX_NEEDLE`] bytes: as is, percent-encoded
/// (every byte but the unreserved ones, upper- and lower-case hex; as JavaScript's
/// `encodeURIComponent` and Python's `quote` leave them), form-encoded (space as `+`, also
/// with nothing else encoded), JSON-escaped, reversed, without its whitespace (as a spaced
/// run reads once [`crate::normalize`] drops the spaces), and inside base64 and base32.
/// Duplicates (without regard to ASCII case) removed. Hex and further escapes need no form:
/// the searches decode them ([`crate::normalize`]).
pub(crate) fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let percent = |keep: &dyn Fn(u8) -> bool, lower: bool, plus: bool| -> Vec<u8> {
        let mut out = Vec::with_capacity(value.len() * 3);
        for &b in value {
            if plus && b == b' ' {
                out.push(b'+');
            } else if keep(b) {
                out.push(b);
            } else if lower {
                out.extend_from_slice(format!("%{b:02x}").as_bytes());
            } else {
                out.extend_from_slice(format!("%{b:02X}").as_bytes());
            }
        }
        out
    };
    let json = serde_json::to_string(&String::from_utf8_lossy(value))
        .map(|s| s.as_bytes()[1..s.len() - 1].to_vec())
        .unwrap_or_default();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for mut form in [
        value.to_vec(),
        percent(&unreserved, false, false),
        percent(&unreserved, true, false),
        percent(&|b| unreserved(b) || b"!'()*".contains(&b), false, false),
        percent(&|b| unreserved(b) || b == b'/', false, false),
        percent(
            &|b| b.is_ascii_alphanumeric() || b"*-._".contains(&b),
            false,
            true,
        ),
        json,
        value
            .iter()
            .map(|&b| if b == b' ' { b'+' } else { b })
            .collect(),
        value.iter().rev().copied().collect(),
        compact(value),
    ]
    .into_iter()
    .chain(base64_forms(value))
    .chain(base32_forms(value))
    {
        form.truncate(MAX_NEEDLE);
        if form.len() >= airlock_policy::detect::MIN_NEEDLE
            && !out.iter().any(|f| f.eq_ignore_ascii_case(&form))
        {
            out.push(form);
        }
    }
    out
}

/// `value` without its ASCII whitespace.
fn compact(value: &[u8]) -> Vec<u8> {
    value
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect()
}

/// The value as it appears inside base32 of a larger text (RFC 4648's alphabet; the
/// lower-case spelling is found too, needles being matched without regard to case): at
/// each of the five alignments a value can start at, the characters that depend on the
/// value's bytes alone.
fn base32_forms(value: &[u8]) -> Vec<Vec<u8>> {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = Vec::new();
    for shift in 0..5 {
        let mut bits: Vec<bool> = vec![false; 8 * shift];
        bits.extend(
            value
                .iter()
                .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1 == 1)),
        );
        // Character i covers bits [5i, 5i + 5).
        let first = (8 * shift).div_ceil(5);
        let end = 8 * (shift + value.len()) / 5;
        if end < first + MIN_BASE64_FORM {
            continue;
        }
        let form = (first..end)
            .map(|i| {
                let v = bits[5 * i..5 * i + 5]
                    .iter()
                    .fold(0usize, |v, &bit| v << 1 | usize::from(bit));
                ALPHABET[v]
            })
            .collect();
        out.push(form);
    }
    out
}

/// The shortest base64 form that is a needle: shorter stable runs (a short value, an
/// unlucky alignment) would be a few random-looking characters.
const MIN_BASE64_FORM: usize = 12;

/// The value as it appears inside base64 of a larger text (`base64 .env`, a JSON field of
/// an encoded file): at each of the three alignments a value can start at, standard and
/// URL-safe alphabets, the characters that depend on the value's bytes alone (the first
/// and last characters of the run share bits with its neighbours and are left out).
fn base64_forms(value: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let mut out = Vec::new();
    for shift in 0..3 {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(value);
        // Character i covers bits [6i, 6i + 6): the first stable one starts after the
        // shift's bits, the last ends before the value's end.
        let first = (8 * shift).div_ceil(6);
        let end = 8 * (shift + value.len()) / 6;
        if end < first + MIN_BASE64_FORM {
            continue;
        }
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let text = engine.encode(&shifted);
            out.push(text.as_bytes()[first..end].to_vec());
        }
    }
    out
}

/// Hosts where agents legitimately send file contents (the LLM APIs): a foreign secret in
/// a request body there is redacted instead of refused.
pub const LLM_HOSTS: &[&str] = &[
    "api.anthropic.com",
    "api.openai.com",
    "generativelanguage.googleapis.com",
    "api.mistral.ai",
    "openrouter.ai",
];

/// Whether `host` is an LLM API host ([`LLM_HOSTS`]).
#[must_use]
pub fn llm_host(host: &Host) -> bool {
    LLM_HOSTS.contains(&host.as_str())
}

mod sieve;

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_handoff::Secret;

    fn set() -> Detectors {
        Detectors::builtin().unwrap()
    }

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    fn ws(file: &str, detector: Option<&str>, value: &str) -> WorkspaceSecret {
        WorkspaceSecret {
            file: file.into(),
            name: "X".into(),
            detector: detector.map(Into::into),
            value: Secret::new(value.into()),
        }
    }

    fn foreign_name(d: &Detectors, bytes: &[u8], to: &str) -> Option<String> {
        d.foreign(bytes, &host(to)).map(|x| x.name.to_string())
    }

    #[test]
    fn a_secret_may_go_to_its_provider_only() {
        let d = set();
        let gh = format!("token ghp_{}", "a1B2".repeat(9));
        assert!(d.foreign(gh.as_bytes(), &host("api.github.com")).is_none());
        assert_eq!(
            foreign_name(&d, gh.as_bytes(), "allowed.test").as_deref(),
            Some("github-token")
        );
        let pem = b"-----BEGIN RSA PRIVATE KEY-----\nMIIE";
        assert!(
            d.foreign(pem, &host("github.com")).is_some(),
            "a private key goes nowhere"
        );
        let docs = "aws_access_key_id=AKIAIOSFODNN7EXAMPLE\naws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n";
        assert!(d.find(docs.as_bytes()).is_empty());
    }

    #[test]
    fn redaction_keeps_the_length_and_the_providers_own() {
        let d = set();
        let gh = format!("ghp_{}", "a1B2".repeat(9));
        let text = format!("{{\"file\": \"TOKEN={gh}\"}}");
        let mut body = text.clone().into_bytes();
        let names = d.judge_body(&mut body, &host("api.anthropic.com")).redacted;
        assert_eq!(names, ["github-token"]);
        assert_eq!(body.len(), text.len());
        assert!(!String::from_utf8_lossy(&body).contains(&gh));
        let mut body = text.clone().into_bytes();
        assert!(!d.judge_body(&mut body, &host("api.github.com")).any());
        assert_eq!(body, text.into_bytes());
    }

    /// A workspace value of no known format is foreign to every host, in every form a
    /// tool sends it in; one a format recognised may go to that format's providers.
    #[test]
    fn a_workspace_value_is_caught_exactly_in_its_usual_forms() {
        let gh = format!("ghp_{}", "c3D4".repeat(9));
        let d = Detectors::with_workspace(&[
            ws(".env", None, "s3cr3t/p@ss word!"),
            ws(".env", None, "hunter2-correct-horse"),
            ws("deploy/.env", Some("github-token"), &gh),
            ws(".env", None, "short"),
        ])
        .unwrap();
        for body in [
            "password=s3cr3t/p@ss word!",
            "password=s3cr3t%2Fp%40ss%20word%21",
            "password=s3cr3t%2fp%40ss%20word%21",
            "password=s3cr3t%2Fp%40ss+word%21",
            "p=s3cr3t/p%40ss%20word%21",
            "{\"p\":\"hunter2-correct-horse\"}",
        ] {
            for to in ["allowed.test", "api.github.com", "api.anthropic.com"] {
                assert_eq!(
                    foreign_name(&d, body.as_bytes(), to).as_deref(),
                    Some("workspace:.env"),
                    "{body} to {to}"
                );
            }
        }
        let token = format!("t={gh}");
        assert!(
            d.foreign(token.as_bytes(), &host("api.github.com"))
                .is_none()
        );
        assert!(d.foreign(token.as_bytes(), &host("allowed.test")).is_some());
        assert!(
            d.find(b"a short word").is_empty(),
            "short values are no needles"
        );
        let mut body = b"x hunter2-correct-horse y".to_vec();
        assert_eq!(
            d.judge_body(&mut body, &host("api.anthropic.com")).redacted,
            ["workspace:.env"]
        );
        assert_eq!(body, b"x ********************* y");
    }

    /// `base64 -w0 .env | curl -d @- ...`: the value inside the encoded file is found at
    /// any offset, in either alphabet; a value too short for a stable run is not a base64
    /// needle.
    #[test]
    fn a_workspace_value_is_caught_inside_base64_of_the_file() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let value = "hunter2-correct-horse";
        let d = Detectors::with_workspace(&[ws(".env", None, value)]).unwrap();
        for pad in 0..6 {
            let file = format!("{}DB_PASSWORD={value}\nOTHER=1\n", "#".repeat(pad));
            for encoded in [STANDARD.encode(&file), URL_SAFE.encode(&file)] {
                assert_eq!(
                    foreign_name(&d, encoded.as_bytes(), "allowed.test").as_deref(),
                    Some("workspace:.env"),
                    "offset {pad}: {encoded}"
                );
            }
        }
        let other = STANDARD.encode("DB_PASSWORD=something-else-entirely\n");
        assert!(d.find(other.as_bytes()).is_empty());
        assert!(
            base64_forms(b"12345678").is_empty(),
            "too short to be stable"
        );
        assert_eq!(base64_forms(value.as_bytes()).len(), 6);
        assert_eq!(base32_forms(value.as_bytes()).len(), 5);
    }

    /// The spellings an agent's tools (or an agent hiding a value) give it: each is the
    /// workspace's value, reported where its encoded form stands.
    #[test]
    fn a_workspace_value_is_caught_however_it_is_spelled() {
        let value = "hunter2-correct-horse";
        let d = Detectors::with_workspace(&[ws(".env", None, value)]).unwrap();
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let escaped: String = value.bytes().map(|b| format!("\\u{b:04x}")).collect();
        let spaced: Vec<String> = value.chars().map(String::from).collect();
        let reversed: String = value.chars().rev().collect();
        let b32: String = base32_forms(format!("X={value}\n").as_bytes())
            .into_iter()
            .map(|f| String::from_utf8(f).unwrap())
            .max_by_key(String::len)
            .unwrap();
        for body in [
            format!("d={hex}"),
            format!("d={}", hex.to_uppercase()),
            format!("{{\"d\":\"{escaped}\"}}"),
            format!("p={}", value.to_uppercase()),
            format!("p={reversed}"),
            format!("p={}", b32.to_lowercase()),
            format!("p={}", spaced.join(" ")),
            format!("p={}", value.replace('-', "%252D")),
        ] {
            let hits = d.find(body.as_bytes());
            assert!(!hits.is_empty(), "{body}");
            // The hit covers the spelling that carried the value.
            let hit = hits.iter().max_by_key(|h| h.range.len()).unwrap();
            assert!(hit.range.len() >= value.len() / 2, "{body}: {hit:?}");
        }
        assert!(d.find(b"hunter2 is the horse, correct").is_empty());
    }

    /// With what went before (already sent) in front: the value completed by the new
    /// bytes is found, one wholly in what went before is not reported again, and only the
    /// new bytes are overwritten.
    #[test]
    fn what_went_before_completes_a_split_value() {
        let value = "hunter2-correct-horse";
        let d = Detectors::with_workspace(&[ws(".env", None, value)]).unwrap();
        let to = host("allowed.test");
        let before = b"xx hunter2-co";
        let mut window = before.to_vec();
        window.extend_from_slice(b"rrect-horse yy");
        assert!(d.judge_after(&window, before.len(), &to).refused.is_some());
        let whole = format!("{value} then nothing");
        assert!(
            d.judge_after(whole.as_bytes(), value.len() + 1, &to)
                .refused
                .is_none()
        );
        let llm = host("api.anthropic.com");
        let v = d.judge_body_after(&mut window, before.len(), &llm);
        assert_eq!(v.redacted, ["workspace:.env"]);
        assert_eq!(&window[..before.len()], before, "what left is left alone");
        assert_eq!(&window[before.len()..], b"*********** yy");
    }

    #[test]
    fn a_needle_is_never_longer_than_the_hold_back() {
        let long = "Z9/".repeat(1000);
        let d = Detectors::with_workspace(&[ws(".env", None, &long)]).unwrap();
        assert!(d.workspace_needles() >= 2);
        let encoded = long.replace('/', "%2F");
        assert!(
            d.foreign(encoded.as_bytes(), &host("allowed.test"))
                .is_some()
        );
        assert!(d.foreign(long.as_bytes(), &host("allowed.test")).is_some());
        assert!(forms(long.as_bytes()).iter().all(|f| f.len() <= MAX_NEEDLE));
    }

    /// A set as a policy changes it: `acme-token` of its own (to `api.acme.example`),
    /// `slack-token` also to `hooks.example.com`, `stripe-live-key` logged,
    /// `github-token` redacted, `npm-token` off, one example value allowed.
    fn policy_set(workspace: &[WorkspaceSecret]) -> Detectors {
        let text = format!(
            "[sandbox]\nname = \"t\"\n[secrets]\nallow = [\"{ALLOWED}\"]\n\
             [[detectors]]\nname = \"acme-token\"\npattern = '\\bacme_[A-Za-z0-9]{{32}}\\b'\nhosts = [\"api.acme.example\"]\n\
             [[detectors]]\nname = \"slack-token\"\nhosts = [\"hooks.example.com\"]\n\
             [[detectors]]\nname = \"stripe-live-key\"\naction = \"log\"\n\
             [[detectors]]\nname = \"github-token\"\naction = \"redact\"\n\
             [[detectors]]\nname = \"npm-token\"\naction = \"off\"\n"
        );
        let policy = airlock_policy::Policy::parse(&text, std::path::Path::new("p.toml")).unwrap();
        Detectors::new(&policy.secrets, workspace).unwrap()
    }

    const ACME: &str = "acme_0123456789abcdefghijABCDEFGHIJkl";
    const ALLOWED: &str = "acme_EXAMPLEEXAMPLEEXAMPLEEXAMPLE0000";
    const SLACK: &str = "xoxb-1234567890-abcdefghijkl";
    const STRIPE: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";

    #[test]
    fn the_policys_detectors_and_actions_decide() {
        let d = policy_set(&[]);
        // Its own detector: refused to another host, fine to its provider's.
        let body = format!("token={ACME}");
        assert_eq!(
            foreign_name(&d, body.as_bytes(), "allowed.test").as_deref(),
            Some("acme-token")
        );
        assert!(
            d.foreign(body.as_bytes(), &host("api.acme.example"))
                .is_none()
        );
        // An allowed example value is no secret.
        assert!(d.find(format!("token={ALLOWED}").as_bytes()).is_empty());
        // A host added to a built-in.
        assert!(
            d.foreign(SLACK.as_bytes(), &host("hooks.example.com"))
                .is_none()
        );
        assert!(d.foreign(SLACK.as_bytes(), &host("allowed.test")).is_some());
        // Off: not searched.
        let npm = format!("npm_{}", "k".repeat(36));
        assert!(d.find(npm.as_bytes()).is_empty());
        // Log: goes on as it is, named.
        let mut body = format!("key={STRIPE}").into_bytes();
        let before = body.clone();
        let v = d.judge_body(&mut body, &host("allowed.test"));
        assert!(v.refused.is_none());
        assert_eq!(v.logged, ["stripe-live-key"]);
        assert_eq!(body, before);
        assert_eq!(
            d.judge(STRIPE.as_bytes(), &host("allowed.test")).logged,
            ["stripe-live-key"]
        );
        // Redact: rewritten in a body on any host, refused in a URL or header.
        let gh = format!("ghp_{}", "a1B2".repeat(9));
        let mut body = format!("t={gh}&k={STRIPE}").into_bytes();
        let v = d.judge_body(&mut body, &host("allowed.test"));
        assert!(v.refused.is_none());
        assert_eq!(
            (v.redacted.as_slice(), v.logged.as_slice()),
            (&["github-token"][..], &["stripe-live-key"][..])
        );
        assert_eq!(
            body,
            format!("t={}&k={STRIPE}", "*".repeat(gh.len())).into_bytes()
        );
        assert_eq!(
            d.judge(gh.as_bytes(), &host("allowed.test"))
                .refused
                .map(|x| x.name.as_ref()),
            Some("github-token")
        );
        // Deny: refused, nothing rewritten; on an LLM API host redacted instead.
        let mut body = format!("t={gh} a={ACME}").into_bytes();
        let before = body.clone();
        let v = d.judge_body(&mut body, &host("allowed.test"));
        assert_eq!(v.refused.map(|x| x.name.as_ref()), Some("acme-token"));
        assert_eq!(body, before);
        let v = d.judge_body(&mut body, &host("api.anthropic.com"));
        assert!(v.refused.is_none());
        assert_eq!(v.redacted, ["github-token", "acme-token"]);
        assert!(!String::from_utf8_lossy(&body).contains("acme_"));
    }

    #[test]
    fn a_workspace_value_takes_its_formats_action_and_hosts() {
        let d = policy_set(&[
            ws(".env", Some("stripe-live-key"), STRIPE),
            ws(".env", Some("slack-token"), SLACK),
            ws(".env", None, ALLOWED),
            ws(".env", None, "hunter2-correct-horse"),
        ]);
        // A form only the workspace's needle finds (base64 of the file) is the workspace
        // detector's, with the format's action.
        use base64::Engine as _;
        let file = base64::engine::general_purpose::STANDARD.encode(format!("KEY={STRIPE}\n"));
        let v = d.judge(file.as_bytes(), &host("allowed.test"));
        assert!(v.refused.is_none());
        assert_eq!(v.logged, ["workspace:.env"]);
        assert!(
            d.foreign(SLACK.as_bytes(), &host("hooks.example.com"))
                .is_none()
        );
        assert!(
            d.find(ALLOWED.as_bytes()).is_empty(),
            "an allowed value is no needle"
        );
        assert_eq!(
            foreign_name(&d, b"p=hunter2-correct-horse", "hooks.example.com").as_deref(),
            Some("workspace:.env")
        );
    }

    /// A JWT in the workspace's `.env` is the repository's own secret: the built-in `jwt`
    /// logs a token found in traffic (it has no provider host), but the workspace's value
    /// is refused everywhere.
    #[test]
    fn a_workspace_jwt_is_refused_though_the_format_only_logs() {
        let jwt = format!(
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.{}",
            "c2lnbmF0dXJl".repeat(3)
        );
        let d = Detectors::new(&Secrets::default(), &[ws(".env", Some("jwt"), &jwt)]).unwrap();
        let v = d.judge(format!("t={jwt}").as_bytes(), &host("allowed.test"));
        assert_eq!(
            v.refused.map(|x| x.name.to_string()).as_deref(),
            Some("workspace:.env")
        );
        let other = format!(
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZXYifQ.{}",
            "b3RoZXJzaWc".repeat(3)
        );
        let v = d.judge(format!("t={other}").as_bytes(), &host("allowed.test"));
        assert!(v.refused.is_none(), "another JWT is only logged");
        assert_eq!(v.logged, ["jwt"]);
    }

    #[test]
    fn what_went_on_is_noted_on_the_record() {
        use crate::audit::{Kind, Who};
        let who = Who::new("s", "t", None);
        let mut rec = Record::new(&who, std::time::SystemTime::now(), Kind::Http, None);
        rec.rule = Some("allowed.test".into());
        rec.decision = Decision::Allow;
        note::<&str>(&mut rec, &[], &[]);
        assert_eq!(rec.rule.as_deref(), Some("allowed.test"), "nothing fired");
        note(&mut rec, &["github-token"], &[]);
        assert_eq!(rec.event, Some(Event::SecretRedacted));
        assert_eq!(rec.decision, Decision::Allow);
        note(&mut rec, &[], &["stripe-live-key", "github-token"]);
        assert_eq!(rec.decision, Decision::Report);
        assert_eq!(rec.reason, Some(Reason::ForeignSecret));
        assert_eq!(
            rec.rule.as_deref(),
            Some("secret detector github-token,stripe-live-key")
        );
        let kept = Note::default();
        let d = policy_set(&[]);
        let mut body = format!("{STRIPE} {STRIPE}").into_bytes();
        kept.add(&d.judge_body(&mut body, &host("allowed.test")));
        kept.add(&d.judge_body(&mut body, &host("allowed.test")));
        let mut rec = Record::new(&who, std::time::SystemTime::now(), Kind::Http, None);
        rec.decision = Decision::Allow;
        kept.apply(&mut rec);
        assert_eq!(rec.rule.as_deref(), Some("secret detector stripe-live-key"));
        assert_eq!(rec.decision, Decision::Report);
    }
}
