//! What a secret detector is, before any set is compiled: its action
//! ([`SecretAction`]), the rules a pattern must keep (linear time, a bounded compiled size,
//! a shortest match of [`MIN_MATCH`] to [`MAX_SHORTEST_MATCH`] bytes: [`check_pattern`]),
//! and the versioned built-in table ([`BUILTIN_VERSION`]) with the documented example
//! values.
//!
//! Two readers build on it: the policy's `[[detectors]]` and `[secrets]` section
//! ([`crate::secrets`]) checks what an operator writes against it, and the compiled set
//! ([`crate::detect`]) compiles the built-in table as that section changes it. This module
//! imports neither.

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// What happens to a secret on its way to a host that is not one of its detector's
/// provider hosts (to a provider host it simply goes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretAction {
    /// Refused, `foreign-secret`, the detector named in the audit line and the 403; in a
    /// request body to an LLM API host (where agents send files as context) redacted in
    /// place instead, `secret-redacted`.
    #[default]
    Deny,
    /// In a request body (or WebSocket frame): overwritten in place with `*` (same length),
    /// audited `secret-redacted`, and the request goes on, on every host. In the URL or a
    /// header (which are not rewritten): refused as `deny`.
    Redact,
    /// Let through as it is; the request's audit line says so (`decision: report`,
    /// `reason: foreign-secret`, the detector in `rule`).
    Log,
    /// The detector is not run.
    Off,
}

impl SecretAction {
    /// The value as written in the policy.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            SecretAction::Deny => "deny",
            SecretAction::Redact => "redact",
            SecretAction::Log => "log",
            SecretAction::Off => "off",
        }
    }
}

/// The compiled size a pattern may reach (`regex::bytes::RegexBuilder::size_limit`): four
/// times the largest built-in's, far below what a Unicode class repeated a hundred times
/// costs.
pub const PATTERN_SIZE_LIMIT: usize = 128 * 1024;
/// The shortest a detector's shortest match may be, in bytes (as an exact needle's).
pub const MIN_MATCH: usize = 8;
/// The longest a detector's shortest match may be, in bytes: half the streamed hold-back
/// of the proxy, so a secret split across a body's chunks is seen whole.
pub const MAX_SHORTEST_MATCH: usize = 512;
/// Version of the built-in set; bump when a detector is added or changed (2: `jwt`; 3: the
/// AWS pair in either order, up to [`PAIR_DISTANCE`] apart, `=` after the secret).
pub const BUILTIN_VERSION: u32 = 3;
/// How far apart (bytes of anything between them) the two halves of a paired format (the
/// AWS access key id and its secret) are still one secret.
pub const PAIR_DISTANCE: usize = 256;

/// One built-in detector.
#[derive(Debug)]
pub(crate) struct Builtin {
    /// Stable name (audit `rule`, the 403 body, `[[detectors]] name`).
    pub name: &'static str,
    /// The pattern (`regex` syntax, ASCII mode).
    pub pattern: &'static str,
    /// What the set searches for in its place, when the pattern itself would take the
    /// set's literal prefilter away (a case-insensitive word, a pair that may begin with
    /// a class run): a pattern that matches wherever [`Builtin::pattern`] does, beginning
    /// with a literal, so the set still skips from literal to literal. Where it matches,
    /// the pattern itself is searched for ([`crate::detect::Formats::find`]). `None`: the
    /// pattern is its own trigger.
    pub trigger: Option<&'static str>,
    /// Provider host rules: where the secret may go; empty: nowhere.
    pub hosts: &'static [&'static str],
    /// The action unless the policy changes it.
    pub action: SecretAction,
}

/// The built-in formats, written from the providers' documented formats.
pub(crate) const BUILTIN: &[Builtin] = &[
    Builtin {
        name: "github-token",
        pattern: r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
        trigger: None,
        hosts: &["github.com", "api.github.com", "uploads.github.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "github-fine-grained-token",
        pattern: r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b",
        trigger: None,
        hosts: &["github.com", "api.github.com", "uploads.github.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        // A key pair: an access key id and a 40-character secret standing alone (not part
        // of a longer run), in either order, at most [`PAIR_DISTANCE`] bytes of anything
        // apart (as in a credentials file, an environment dump, a JSON object, or two
        // requests the proxy searches joined): the id alone is not a secret.
        name: "aws-access-key",
        pattern: r"(?s)(?:(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}.{0,256}?(?:^|[^A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+]|$)|(?:^|[^A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+]|$).{0,256}?(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})",
        // The key id, which either order holds.
        trigger: Some(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"),
        hosts: &["amazonaws.com", "*.amazonaws.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        // The secret named as such (its quotes JSON-escaped or not).
        name: "aws-secret-key",
        pattern: r#"(?i)aws_?secret_?access_?key\\?["']?\s*[:=]\s*\\?["']?[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+]|$)"#,
        // Its name, each placement of the optional underscores spelled out (written
        // `aws_?secret_?access_?key` the set's prefilter gives up on the word).
        trigger: Some(
            r"(?i)(?:aws_secret_access_key|aws_secret_accesskey|aws_secretaccess_key|aws_secretaccesskey|awssecret_access_key|awssecret_accesskey|awssecretaccess_key|awssecretaccesskey)",
        ),
        hosts: &["amazonaws.com", "*.amazonaws.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "private-key",
        pattern: r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
        trigger: None,
        hosts: &[],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "gcp-service-account",
        pattern: r#""private_key_id"\s*:\s*"[a-f0-9]{40}""#,
        trigger: None,
        hosts: &["googleapis.com", "*.googleapis.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "slack-token",
        pattern: r"\bxox[baprs]-[A-Za-z0-9]{10,}-[A-Za-z0-9-]{10,}",
        trigger: None,
        hosts: &["slack.com", "*.slack.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "stripe-live-key",
        pattern: r"\b(?:sk|rk)_live_[A-Za-z0-9]{24,}\b",
        trigger: None,
        hosts: &["api.stripe.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        // Project, service-account and admin keys carry "OpenAI" in base64 (T3BlbkFJ).
        name: "openai-key",
        pattern: r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,}",
        trigger: None,
        hosts: &["api.openai.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "anthropic-key",
        pattern: r"\bsk-ant-(?:api|admin|oat)\d{2}-[A-Za-z0-9_-]{80,}",
        trigger: None,
        hosts: &["api.anthropic.com"],
        action: SecretAction::Deny,
    },
    Builtin {
        name: "npm-token",
        pattern: r"\bnpm_[A-Za-z0-9]{36}\b",
        trigger: None,
        hosts: &["registry.npmjs.org"],
        action: SecretAction::Deny,
    },
    Builtin {
        // A PyPI API token is a macaroon whose location is "pypi.org".
        name: "pypi-token",
        pattern: r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
        trigger: None,
        hosts: &["upload.pypi.org", "pypi.org", "test.pypi.org"],
        action: SecretAction::Deny,
    },
    Builtin {
        // A JSON Web Token: a base64url header and payload that both open with `{"`
        // (`eyJ`), then a signature. A JWT has no provider host of its own (any service
        // issues them), so it is logged wherever it goes, never refused, unless the policy
        // names its hosts and `action = "deny"`.
        name: "jwt",
        pattern: r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}",
        trigger: None,
        hosts: &[],
        action: SecretAction::Log,
    },
];

/// Example values the providers publish in their documentation.
pub(crate) const DOCUMENTED_EXAMPLES: &[&[u8]] = &[
    b"AKIAIOSFODNN7EXAMPLE",
    b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
];

/// ASCII-only classes and word boundaries (`(?-u)`): every built-in format is ASCII, and
/// the Unicode tables would cost resident memory for nothing.
pub(crate) fn ascii(pattern: &str) -> String {
    format!("(?-u){pattern}")
}

/// One detector's pattern, compiled as the set compiles it (ASCII mode, bounded size).
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(&ascii(pattern))
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => format!(
                "compiles to more than {} KiB: write a smaller pattern (shorter repetitions, ASCII classes)",
                PATTERN_SIZE_LIMIT / 1024
            ),
            other => {
                // The syntax error's last line says what is wrong (the lines above draw
                // the pattern with a caret, ASCII-mode prefix included).
                let text = other.to_string();
                let what = text
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("error: "))
                    .unwrap_or(&text)
                    .to_owned();
                if what.contains("look-around") || what.contains("backreference") {
                    format!(
                        "does not compile: {what} (a detector must match in linear time: no look-around, no backreferences)"
                    )
                } else {
                    format!("does not compile: {what}")
                }
            }
        })
}

/// Whether a policy's pattern may be a detector: it compiles (linear time, at most
/// [`PATTERN_SIZE_LIMIT`]) and its shortest match is [`MIN_MATCH`] to
/// [`MAX_SHORTEST_MATCH`] bytes. The error is the reason, one line.
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    compile(pattern)?;
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .build()
        .parse(&ascii(pattern))
        .map_err(|e| format!("does not compile: {e}"))?;
    match hir.properties().minimum_len() {
        Some(0) => Err("matches the empty string: a detector must match a secret".into()),
        Some(n) if n < MIN_MATCH => Err(format!(
            "matches as few as {n} bytes: a detector's shortest match must be at least {MIN_MATCH} bytes, or it refuses honest requests that merely contain a short word"
        )),
        Some(n) if n > MAX_SHORTEST_MATCH => Err(format!(
            "its shortest match is {n} bytes: at most {MAX_SHORTEST_MATCH}, so a secret split across a streamed body's chunks is seen whole"
        )),
        Some(_) => Ok(()),
        None => Err("can never match".into()),
    }
}

/// The names of the built-in detectors, in order.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|b| b.name)
}
