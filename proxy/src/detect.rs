//! Secrets the proxy was never told about: well-known credential formats, each bound to
//! its provider's hosts (the only places it may legitimately go).
//!
//! [`Detectors::builtin`] is a versioned set ([`BUILTIN_VERSION`]) written from the
//! providers' documented formats. All patterns run as one [`RegexSet`] (the `regex` crate:
//! linear time, no backtracking); a hit is then located by its own pattern and checked
//! against the allowlist of documented example values (AWS's documentation key, ...).
//!
//! What the proxy does with a hit is the request pipeline's business (`intercept`): a secret
//! on its way to a host that is not its provider's is refused `foreign-secret` with the
//! detector's name (never the value) in the audit line; on an LLM API host, where agents
//! send file contents as context, it is redacted in the body instead (same length) and the
//! request goes on.
//!
//! Not here (yet): detectors from the policy, per-detector actions, the workspace's own
//! secret files as exact needles, DNS labels, streamed bodies.

use airlock_policy::Host;
use airlock_policy::rule::HostRule;
use regex::bytes::{Regex, RegexSet};

/// Version of the built-in set; bump when a detector is added or changed.
pub const BUILTIN_VERSION: u32 = 1;

/// One known credential format.
#[derive(Debug)]
pub struct Detector {
    /// Stable name (audit `rule`, the 403 body).
    pub name: &'static str,
    pattern: Regex,
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

/// The compiled set.
#[derive(Debug)]
pub struct Detectors {
    set: RegexSet,
    detectors: Vec<Detector>,
    /// Documented example values that are never secrets.
    allowed: Vec<&'static [u8]>,
}

/// `(name, pattern, provider host rules)`: the built-in formats.
const BUILTIN: &[(&str, &str, &[&str])] = &[
    (
        "github-token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
        &["github.com", "api.github.com", "uploads.github.com"],
    ),
    (
        "github-fine-grained-token",
        r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b",
        &["github.com", "api.github.com", "uploads.github.com"],
    ),
    (
        // An access key id with a 40-character secret at most 100 bytes after it (as in a
        // credentials file, an environment dump or a JSON object): the id alone is not a
        // secret.
        "aws-access-key",
        r"(?s)\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b.{0,100}?(?:^|[^A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+=]|$)",
        &["amazonaws.com", "*.amazonaws.com"],
    ),
    (
        "aws-secret-key",
        r#"(?i)aws_?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+]{40}\b"#,
        &["amazonaws.com", "*.amazonaws.com"],
    ),
    (
        "private-key",
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
        &[],
    ),
    (
        "gcp-service-account",
        r#""private_key_id"\s*:\s*"[a-f0-9]{40}""#,
        &["googleapis.com", "*.googleapis.com"],
    ),
    (
        "slack-token",
        r"\bxox[baprs]-[A-Za-z0-9]{10,}-[A-Za-z0-9-]{10,}",
        &["slack.com", "*.slack.com"],
    ),
    (
        "stripe-live-key",
        r"\b(?:sk|rk)_live_[A-Za-z0-9]{24,}\b",
        &["api.stripe.com"],
    ),
    (
        // Project, service-account and admin keys carry "OpenAI" in base64 (T3BlbkFJ).
        "openai-key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,}",
        &["api.openai.com"],
    ),
    (
        "anthropic-key",
        r"\bsk-ant-(?:api|admin|oat)\d{2}-[A-Za-z0-9_-]{80,}",
        &["api.anthropic.com"],
    ),
    (
        "npm-token",
        r"\bnpm_[A-Za-z0-9]{36}\b",
        &["registry.npmjs.org"],
    ),
    (
        // A PyPI API token is a macaroon whose location is "pypi.org".
        "pypi-token",
        r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
        &["upload.pypi.org", "pypi.org", "test.pypi.org"],
    ),
];

/// Example values the providers publish in their documentation.
const DOCUMENTED_EXAMPLES: &[&[u8]] = &[
    b"AKIAIOSFODNN7EXAMPLE",
    b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
];

/// Setting up the detectors failed (a built-in pattern or host rule that does not compile:
/// a bug, caught by the unit tests).
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// A pattern did not compile.
    #[error("secret detector {name}: {detail}")]
    Compile { name: String, detail: String },
}

impl Detectors {
    /// The built-in set.
    ///
    /// # Errors
    /// [`DetectError::Compile`].
    pub fn builtin() -> Result<Self, DetectError> {
        let err = |name: &str, detail: String| DetectError::Compile {
            name: name.to_owned(),
            detail,
        };
        // ASCII-only classes and word boundaries (`(?-u)`): every format is ASCII, and the
        // Unicode tables would cost resident memory for nothing.
        let ascii = |p: &str| format!("(?-u){p}");
        let mut detectors = Vec::new();
        for (name, pattern, hosts) in BUILTIN {
            let regex = Regex::new(&ascii(pattern)).map_err(|e| err(name, e.to_string()))?;
            let providers = hosts
                .iter()
                .map(|h| HostRule::parse(h).map_err(|e| err(name, e.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            detectors.push(Detector {
                name,
                pattern: regex,
                providers,
            });
        }
        let set = RegexSet::new(BUILTIN.iter().map(|(_, p, _)| ascii(p)))
            .map_err(|e| err("set", e.to_string()))?;
        Ok(Self {
            set,
            detectors,
            allowed: DOCUMENTED_EXAMPLES.to_vec(),
        })
    }

    /// The detector at `i`.
    #[must_use]
    pub fn get(&self, i: usize) -> &Detector {
        &self.detectors[i]
    }

    /// Every secret in `bytes` (documented examples excluded), in detector order.
    #[must_use]
    pub fn find(&self, bytes: &[u8]) -> Vec<Hit> {
        let matched = self.set.matches(bytes);
        if !matched.matched_any() {
            return Vec::new();
        }
        let mut hits = Vec::new();
        for i in matched.iter() {
            for m in self.detectors[i].pattern.find_iter(bytes) {
                if !self.is_example(m.as_bytes()) {
                    hits.push(Hit {
                        detector: i,
                        range: m.range(),
                    });
                }
            }
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

    fn is_example(&self, matched: &[u8]) -> bool {
        self.allowed
            .iter()
            .any(|ex| matched.windows(ex.len()).any(|w| w == *ex))
    }
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
pub fn redact(detectors: &Detectors, body: &mut [u8], host: &Host) -> Vec<&'static str> {
    let mut names = Vec::new();
    for hit in detectors.find(body) {
        let d = detectors.get(hit.detector);
        if d.provider(host) {
            continue;
        }
        body[hit.range].fill(b'*');
        if !names.contains(&d.name) {
            names.push(d.name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Detectors {
        Detectors::builtin().unwrap()
    }

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    /// Each detector against a true example (built from the documented format, not a real
    /// key) and a false one that a naive pattern would take.
    #[test]
    fn every_detector_has_a_true_and_a_false_example() {
        let d = set();
        let gh = format!("ghp_{}", "a1B2".repeat(9));
        let fine = format!("github_pat_{}_{}", "A1".repeat(11), "b2".repeat(29) + "c");
        let aws = "aws_access_key_id = AKIA2Z3Y4X5W6V7U2T3S\naws_secret_access_key = abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB\n";
        let openai = format!("sk-proj-{}T3BlbkFJ{}", "x".repeat(20), "y".repeat(20));
        let anthropic = format!("sk-ant-api03-{}", "Z".repeat(90));
        let pypi = format!("pypi-AgEIcHlwaS5vcmc{}", "q".repeat(60));
        let cases: [(&str, String, String); 11] = [
            ("github-token", gh.clone(), format!("ghp_{}", "short")),
            (
                "github-fine-grained-token",
                fine,
                "github_pat_tooshort".into(),
            ),
            (
                "aws-access-key",
                aws.into(),
                "AKIA2Z3Y4X5W6V7U2T3S alone".into(),
            ),
            (
                "aws-secret-key",
                "AWS_SECRET_ACCESS_KEY=abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB".into(),
                "aws_secret_access_key = ${SECRET}".into(),
            ),
            (
                "private-key",
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...".into(),
                "-----BEGIN PUBLIC KEY-----".into(),
            ),
            (
                "gcp-service-account",
                format!("{{\"private_key_id\": \"{}\"}}", "0f".repeat(20)),
                "{\"private_key_id\": \"\"}".into(),
            ),
            (
                "slack-token",
                "xoxb-1234567890-abcdefghijkl".into(),
                "xoxq-1234567890-abcdefghijkl".into(),
            ),
            (
                "stripe-live-key",
                format!("sk_live_{}", "4eC39HqLyjWDarjtT1zdp7dc"),
                format!("sk_test_{}", "4eC39HqLyjWDarjtT1zdp7dc"),
            ),
            (
                "openai-key",
                openai,
                "sk-proj-no-marker-in-this-one-at-all".into(),
            ),
            (
                "anthropic-key",
                anthropic,
                "sk-ant-REALSECRET-5d1b7e".into(),
            ),
            ("pypi-token", pypi, "pypi-AgEIcHlwaS5vcmcshort".into()),
        ];
        for (name, yes, no) in cases {
            let found: Vec<_> = d
                .find(yes.as_bytes())
                .iter()
                .map(|h| d.get(h.detector).name)
                .collect();
            assert!(found.contains(&name), "{name} missed {yes:?}: {found:?}");
            let found: Vec<_> = d
                .find(no.as_bytes())
                .iter()
                .map(|h| d.get(h.detector).name)
                .collect();
            assert!(!found.contains(&name), "{name} fired on {no:?}");
        }
        let npm = format!("//registry.npmjs.org/:_authToken=npm_{}", "k".repeat(36));
        assert_eq!(d.get(d.find(npm.as_bytes())[0].detector).name, "npm-token");
    }

    #[test]
    fn a_secret_may_go_to_its_provider_only() {
        let d = set();
        let gh = format!("token ghp_{}", "a1B2".repeat(9));
        assert!(d.foreign(gh.as_bytes(), &host("api.github.com")).is_none());
        assert_eq!(
            d.foreign(gh.as_bytes(), &host("allowed.test"))
                .map(|x| x.name),
            Some("github-token")
        );
        let pem = b"-----BEGIN RSA PRIVATE KEY-----\nMIIE";
        assert!(
            d.foreign(pem, &host("github.com")).is_some(),
            "a private key goes nowhere"
        );
    }

    #[test]
    fn documented_example_values_are_never_secrets() {
        let d = set();
        let docs = "aws_access_key_id=AKIAIOSFODNN7EXAMPLE\naws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n";
        assert!(
            d.find(docs.as_bytes()).is_empty(),
            "{:?}",
            d.find(docs.as_bytes())
        );
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
}
