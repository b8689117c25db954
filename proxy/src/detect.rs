//! Secrets the proxy was never told about: well-known credential formats, each bound to
//! its provider's hosts (the only places it may legitimately go), and the exact values
//! found in the workspace's own secret files.
//!
//! The formats are [`airlock_policy::detect`] (one set, shared with the entrypoint, which
//! classifies the workspace's values with it). The workspace's values come in the
//! hand-off ([`airlock_handoff::WorkspaceSecret`]): each is an exact needle of a
//! detector named `workspace:<file>`, searched in one Aho-Corasick pass (linear time) in
//! every form an agent's tools send it in (as is, percent-encoded in the common ways,
//! form-encoded, JSON-escaped); it may go to no host, unless a built-in format recognised
//! the value, whose provider hosts it may then go to as that format may.
//! A needle is at most [`MAX_NEEDLE`] bytes (a longer form is matched by its start), so a
//! streamed body's hold-back always sees it whole.
//!
//! What the proxy does with a hit is the request pipeline's business (`intercept`): a secret
//! on its way to a host that is not its provider's is refused `foreign-secret` with the
//! detector's name (never the value) in the audit line; on an LLM API host, where agents
//! send file contents as context, it is redacted in the body instead (same length) and the
//! request goes on.
//!
//! Base64 forms: the value's stable run at each of the three alignments, standard and
//! URL-safe (a line break of wrapped base64 inside the run hides it: the signals see the
//! blob instead).
//!
//! Not here (yet): detectors from the policy, per-detector actions, DNS labels.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use airlock_handoff::WorkspaceSecret;
use airlock_policy::Host;
use airlock_policy::detect::Formats;
use airlock_policy::rule::HostRule;

pub use airlock_policy::detect::{BUILTIN_VERSION, DetectError};

/// The longest needle, in bytes: below the streamed hold-back (`intercept::SECRET_HOLD`),
/// so a needle split across chunks is always seen whole.
pub const MAX_NEEDLE: usize = 512;
const _: () = assert!(MAX_NEEDLE < 1024, "below intercept::SECRET_HOLD");

/// Prefix of the detectors of the workspace's values (`workspace:.env`).
pub const WORKSPACE_PREFIX: &str = "workspace:";

/// One detector: a known format, or the workspace's values of one file.
#[derive(Debug)]
pub struct Detector {
    /// Stable name (audit `rule`, the 403 body).
    pub name: Cow<'static, str>,
    /// Hosts the secret may go to (its provider's); empty: nowhere.
    providers: Vec<HostRule>,
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
    exact_of: Vec<usize>,
}

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
        let formats = Formats::builtin()?;
        let mut detectors: Vec<Detector> = formats
            .all()
            .iter()
            .map(|f| Detector {
                name: Cow::Borrowed(f.name),
                providers: f.providers().to_vec(),
            })
            .collect();
        // One detector per (file, format that recognised the value).
        let mut keys: Vec<(&str, Option<&str>)> = Vec::new();
        let mut needles: Vec<Vec<u8>> = Vec::new();
        let mut exact_of = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for s in secrets {
            let value = s.value.expose();
            if airlock_policy::detect::needle_refusal(value).is_some() {
                continue; // the entrypoint applies the same rule: a hand-edited hand-off
            }
            let format = s.detector.as_deref().and_then(|n| formats.named(n));
            let key = (s.file.as_str(), format.map(|f| f.name));
            let index = if let Some(k) = keys.iter().position(|k| *k == key) {
                formats.all().len() + k
            } else {
                keys.push(key);
                detectors.push(Detector {
                    name: Cow::Owned(format!("{WORKSPACE_PREFIX}{}", s.file)),
                    providers: format.map(|f| f.providers().to_vec()).unwrap_or_default(),
                });
                detectors.len() - 1
            };
            for form in forms(value.trim().as_bytes()) {
                if seen.insert(form.clone()) {
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
                    .build(&needles)
                    .map_err(|e| DetectError::Compile {
                        name: WORKSPACE_PREFIX.into(),
                        detail: e.to_string(),
                    })?,
            )
        };
        Ok(Self {
            formats,
            detectors,
            exact,
            exact_of,
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

    /// Every secret in `bytes` (documented examples excluded): the formats' hits in
    /// format order, then the workspace's values.
    #[must_use]
    pub fn find(&self, bytes: &[u8]) -> Vec<Hit> {
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
            hits.extend(ac.find_iter(bytes).map(|m| Hit {
                detector: self.exact_of[m.pattern().as_usize()],
                range: m.range(),
            }));
        }
        hits
    }

    /// The first secret in `bytes` that may not go to `host`.
    #[must_use]
    pub fn foreign(&self, bytes: &[u8], host: &Host) -> Option<&Detector> {
        self.find(bytes)
            .into_iter()
            .map(|h| &self.detectors[h.detector])
            .find(|d| !d.provider(host))
    }
}

/// The forms a value travels in, each cut to [`MAX_NEEDLE`] bytes: as is, percent-encoded
/// (every byte but the unreserved ones, upper- and lower-case hex; as JavaScript's
/// `encodeURIComponent` and Python's `quote` leave them), form-encoded (space as `+`) and
/// JSON-escaped. Duplicates removed.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
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
    ]
    .into_iter()
    .chain(base64_forms(value))
    {
        form.truncate(MAX_NEEDLE);
        if !form.is_empty() && !out.contains(&form) {
            out.push(form);
        }
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

/// Overwrites every foreign secret in `body` with `*` (same length: framing stays valid);
/// returns the detectors that fired, by name.
#[must_use]
pub fn redact<'d>(detectors: &'d Detectors, body: &mut [u8], host: &Host) -> Vec<&'d str> {
    let mut names = Vec::new();
    for hit in detectors.find(body) {
        let d = detectors.get(hit.detector);
        if d.provider(host) {
            continue;
        }
        body[hit.range].fill(b'*');
        if !names.contains(&d.name.as_ref()) {
            names.push(d.name.as_ref());
        }
    }
    names
}

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
        let names = redact(&d, &mut body, &host("api.anthropic.com"));
        assert_eq!(names, ["github-token"]);
        assert_eq!(body.len(), text.len());
        assert!(!String::from_utf8_lossy(&body).contains(&gh));
        let mut body = text.clone().into_bytes();
        assert!(redact(&d, &mut body, &host("api.github.com")).is_empty());
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
            redact(&d, &mut body, &host("api.anthropic.com")),
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
}
