//! Well-known credential formats, each bound to its provider's hosts (the only places it
//! may legitimately go), and the rule for which values become exact needles.
//!
//! [`Formats::builtin`] is a versioned set ([`BUILTIN_VERSION`]) written from the
//! providers' documented formats; [`Formats::with_policy`] is that set as the policy
//! changes it (`[[detectors]]`, `[secrets]`: [`crate::secrets`]): detectors of its own
//! added, a built-in one's action changed or provider hosts added, `off` ones left out,
//! the policy's example values allowed. All patterns run as one [`RegexSet`] (the `regex`
//! crate: linear time, no backtracking); a hit is then located by its own pattern and
//! checked against the allowlist of documented example values (AWS's documentation key,
//! ...). A built-in whose pattern would take the set's literal prefilter away (the AWS
//! pair, which may begin with the secret's class run; the secret named without regard to
//! case) is in the set as its trigger, a literal-led pattern that matches wherever it
//! does (the key id; the name spelled out), and is searched for where that matched: an
//! honest body costs the set's skip from literal to literal. A policy that adds nothing runs the very same set as the built-in one.
//!
//! Two readers: the proxy (`airlock_proxy::detect`) searches every inspected request with
//! them, and the entrypoint classifies the values it finds in the workspace's secret files
//! with them (which detector a value is, and so where it may go). Both go through here, with
//! the same policy, so they agree.
//!
//! **Exact needles** ([`needle_refusal`], [`Formats::needle_refusal`]): a value from the
//! workspace becomes a needle only if it is at least [`MIN_NEEDLE`] bytes long, is not one
//! of [`COMMON_VALUES`] (compared without case), is not a reference to something else
//! (`${VAR}`, `$VAR`, `<...>`), does not repeat one character, and is not a documented
//! example (the policy's included). A shorter or common value would refuse honest requests
//! that merely contain the same word.

use std::borrow::Cow;

use crate::Host;
use crate::detector::{BUILTIN, DOCUMENTED_EXAMPLES, SecretAction, ascii, compile};
use crate::rule::HostRule;
use crate::secrets::Secrets;
use regex::bytes::{Regex, RegexSet, RegexSetBuilder};

pub use crate::detector::{BUILTIN_VERSION, PAIR_DISTANCE, builtin_names};

/// One known credential format.
#[derive(Debug)]
pub struct Format {
    /// Stable name (audit `rule`, the 403 body): a built-in's, or one the policy added.
    pub name: Cow<'static, str>,
    pattern: Regex,
    /// Hosts the secret may go to (its provider's, and the policy's); empty: nowhere.
    providers: Vec<HostRule>,
    /// What happens to the secret on its way to any other host (never `Off`: an `off`
    /// detector is left out of the set).
    pub action: SecretAction,
    /// Whether the policy chose `action` (`false`: the built-in's own default).
    chosen: bool,
}

impl Format {
    /// Whether `host` is one of the format's provider hosts.
    #[must_use]
    pub fn provider(&self, host: &Host) -> bool {
        self.providers.iter().any(|r| r.matches_host(host))
    }

    /// The provider host rules (empty: the secret may go nowhere).
    #[must_use]
    pub fn providers(&self) -> &[HostRule] {
        &self.providers
    }

    /// The action for a value of this format found in the workspace's secret files: the
    /// policy's choice if it made one, else `deny`. A value from those files is the
    /// repository's own secret, so a built-in default that lets the format pass where it
    /// goes (`jwt` logs, having no provider host) does not apply to it.
    #[must_use]
    pub fn workspace_action(&self) -> SecretAction {
        if self.chosen {
            self.action
        } else {
            SecretAction::Deny
        }
    }
}

/// A secret found: which format, and where in the scanned bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Index into [`Formats::get`].
    pub format: usize,
    /// Byte range of the secret.
    pub range: std::ops::Range<usize>,
}

/// The compiled set.
#[derive(Debug)]
pub struct Formats {
    set: RegexSet,
    formats: Vec<Format>,
    /// Documented example values that are never secrets (the built-in ones, then the
    /// policy's).
    allowed: Vec<Cow<'static, [u8]>>,
}

/// Setting up the detectors failed: a built-in pattern or host rule that does not compile
/// (a bug, caught by the unit tests), or a policy's pattern that was never checked (a
/// [`Secrets`] built by hand rather than read by `Policy::parse`), or a set past the
/// `regex` crate's size limit.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// A pattern did not compile.
    #[error("secret detector {name}: {detail}")]
    Compile { name: String, detail: String },
}

impl Formats {
    /// The built-in set.
    ///
    /// # Errors
    /// [`DetectError::Compile`].
    pub fn builtin() -> Result<Self, DetectError> {
        Self::with_policy(&Secrets::default())
    }

    /// The built-in set as the policy changes it (see the module docs): each built-in
    /// detector with its action and added hosts (left out when `off`), then the policy's
    /// own in file order, and the policy's example values allowed.
    ///
    /// # Errors
    /// [`DetectError::Compile`] (a built-in that does not compile is a bug; a policy's
    /// pattern was checked when the policy was read).
    pub fn with_policy(secrets: &Secrets) -> Result<Self, DetectError> {
        let err = |name: &str, detail: String| DetectError::Compile {
            name: name.to_owned(),
            detail,
        };
        let mut formats = Vec::new();
        let mut patterns = Vec::new();
        for builtin in BUILTIN {
            let (name, pattern) = (builtin.name, builtin.pattern);
            let change = secrets.change_of(name);
            let action = change.and_then(|c| c.action).unwrap_or(builtin.action);
            if action == SecretAction::Off {
                continue;
            }
            let mut providers = builtin
                .hosts
                .iter()
                .map(|h| HostRule::parse(h).map_err(|e| err(name, e.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            providers.extend(change.iter().flat_map(|c| c.hosts.iter().cloned()));
            formats.push(Format {
                name: Cow::Borrowed(name),
                pattern: compile(pattern).map_err(|e| err(name, e))?,
                providers,
                action,
                chosen: change.is_some_and(|c| c.action.is_some()),
            });
            patterns.push(ascii(builtin.trigger.unwrap_or(pattern)));
        }
        for d in secrets.added() {
            let action = d.action.unwrap_or_default();
            let Some(pattern) = d.pattern.as_deref() else {
                continue;
            };
            if action == SecretAction::Off {
                continue;
            }
            formats.push(Format {
                name: Cow::Owned(d.name.clone()),
                pattern: compile(pattern).map_err(|e| err(&d.name, e))?,
                providers: d.hosts.clone(),
                action,
                chosen: d.action.is_some(),
            });
            patterns.push(ascii(pattern));
        }
        let set = RegexSetBuilder::new(patterns)
            .build()
            .map_err(|e| err("set", e.to_string()))?;
        let mut allowed: Vec<Cow<'static, [u8]>> = DOCUMENTED_EXAMPLES
            .iter()
            .map(|e| Cow::Borrowed(*e))
            .collect();
        allowed.extend(
            secrets
                .allow
                .iter()
                .map(|v| Cow::Owned(v.as_bytes().to_vec())),
        );
        Ok(Self {
            set,
            formats,
            allowed,
        })
    }

    /// The format at `i`.
    #[must_use]
    pub fn get(&self, i: usize) -> &Format {
        &self.formats[i]
    }

    /// Every format, in order (a [`Hit::format`] indexes this).
    #[must_use]
    pub fn all(&self) -> &[Format] {
        &self.formats
    }

    /// The format named `name`.
    #[must_use]
    pub fn named(&self, name: &str) -> Option<&Format> {
        self.formats.iter().find(|f| f.name == name)
    }

    /// Every secret in `bytes` (documented examples excluded), in format order.
    #[must_use]
    pub fn find(&self, bytes: &[u8]) -> Vec<Hit> {
        let matched = self.set.matches(bytes);
        if !matched.matched_any() {
            return Vec::new();
        }
        let mut hits = Vec::new();
        for i in matched.iter() {
            for m in self.formats[i].pattern.find_iter(bytes) {
                if !self.is_example(m.as_bytes()) {
                    hits.push(Hit {
                        format: i,
                        range: m.range(),
                    });
                }
            }
        }
        hits
    }

    /// Whether `bytes` holds one of the documented example values (the policy's included).
    #[must_use]
    pub fn is_example(&self, bytes: &[u8]) -> bool {
        self.allowed
            .iter()
            .any(|ex| bytes.windows(ex.len()).any(|w| w == ex.as_ref()))
    }

    /// Why `value` may not be an exact needle, the policy's example values included
    /// ([`needle_refusal`], then [`Formats::is_example`]); `None`: it may.
    #[must_use]
    pub fn needle_refusal(&self, value: &str) -> Option<&'static str> {
        needle_refusal(value).or_else(|| {
            self.is_example(value.trim().as_bytes())
                .then_some("a documented example value")
        })
    }
}

/// The shortest value that becomes an exact needle, in bytes.
pub const MIN_NEEDLE: usize = 8;

/// Values that are never needles, whatever their name (compared without case): settings,
/// not secrets, and words an honest request carries all the time.
pub const COMMON_VALUES: &[&str] = &[
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "null",
    "none",
    "undefined",
    "localhost",
    "127.0.0.1",
    "0.0.0.0",
    "changeme",
    "change-me",
    "changeit",
    "password",
    "passw0rd",
    "secret",
    "example",
    "12345678",
    "123456789",
    "development",
    "production",
    "staging",
    "disabled",
    "enabled",
    "required",
    "optional",
    "your-api-key",
    "your_api_key",
    "your-secret",
    "your_secret",
    "placeholder",
];

/// Why `value` may not be an exact needle (`None`: it may). See the module docs.
#[must_use]
pub fn needle_refusal(value: &str) -> Option<&'static str> {
    let v = value.trim();
    if v.len() < MIN_NEEDLE {
        return Some("shorter than 8 bytes");
    }
    if COMMON_VALUES.iter().any(|c| c.eq_ignore_ascii_case(v)) {
        return Some("a common value");
    }
    let reference = (v.starts_with("${") && v.ends_with('}'))
        || (v.starts_with('$')
            && v[1..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        || (v.starts_with('<') && v.ends_with('>'));
    if reference {
        return Some("a reference, not a value");
    }
    let first = v.as_bytes()[0];
    if v.bytes().all(|b| b == first) {
        return Some("one repeated character");
    }
    if DOCUMENTED_EXAMPLES
        .iter()
        .any(|ex| v.as_bytes().windows(ex.len()).any(|w| w == *ex))
    {
        return Some("a documented example value");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Formats {
        Formats::builtin().unwrap()
    }

    fn names<'f>(f: &'f Formats, text: &str) -> Vec<&'f str> {
        f.find(text.as_bytes())
            .iter()
            .map(|h| f.get(h.format).name.as_ref())
            .collect()
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
        let cases: [(&str, String, String); 12] = [
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
            (
                "jwt",
                format!(
                    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.{}",
                    "s1G".repeat(14)
                ),
                "eyJhbGciOiJIUzI1NiJ9 alone, or eyJ.eyJ.sig".into(),
            ),
        ];
        for (name, yes, no) in cases {
            let found = names(&d, &yes);
            assert!(found.contains(&name), "{name} missed {yes:?}: {found:?}");
            assert!(!names(&d, &no).contains(&name), "{name} fired on {no:?}");
        }
        let npm = format!("//registry.npmjs.org/:_authToken=npm_{}", "k".repeat(36));
        assert_eq!(names(&d, &npm), ["npm-token"]);
        assert!(d.named("npm-token").is_some() && d.named("nope").is_none());
    }

    /// The AWS pair however it is laid out: either order, any separator (`=` right after
    /// the secret too), up to [`PAIR_DISTANCE`] bytes apart; not further, and not a 40-character
    /// window of a longer run.
    #[test]
    fn the_aws_pair_is_found_in_either_order_within_the_distance() {
        let d = set();
        let (id, secret) = (
            "AKIA2Z3Y4X5W6V7U2T3S",
            "abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB",
        );
        let pair = |text: &str| names(&d, text).contains(&"aws-access-key");
        for text in [
            format!("{id}:{secret}="),
            format!("{id}\n{secret}"),
            format!("s={secret}&i={id}"),
            format!("{secret}|{}|{id}", "-".repeat(PAIR_DISTANCE - 1)),
            format!("{id} {} {secret}", "x".repeat(PAIR_DISTANCE - 1)),
            format!("_{id}_ {secret}"),
        ] {
            assert!(pair(&text), "{text}");
        }
        for text in [
            format!("{id} {} {secret}", "x".repeat(PAIR_DISTANCE + 2)),
            format!("{secret} {} {id}", "x".repeat(PAIR_DISTANCE + 2)),
            format!("{id} {secret}Q"),
            format!("{id} Q{secret}"),
            id.to_owned(),
        ] {
            assert!(!pair(&text), "{text}");
        }
        assert!(
            BUILTIN
                .iter()
                .any(|b| b.pattern.contains(&format!(".{{0,{PAIR_DISTANCE}}}?"))),
            "the documented distance is the pattern's"
        );
        // Named as such, however the name is written (the set searches for the name: every
        // spelling the pattern takes is one it searches for).
        for name in [
            "AwsSecretAccessKey",
            "aws_secretAccess_KEY",
            "AWSSECRET_ACCESSKEY",
        ] {
            let text = format!("{name}: {secret}\n");
            assert!(names(&d, &text).contains(&"aws-secret-key"), "{text}");
        }
        // Named as such, in a JSON-escaped string, and ending in a character `\b` misses.
        let escaped = format!(
            r#"{{"env":"{{\"aws_secret_access_key\": \"{}/\"}}"}}"#,
            &secret[..39]
        );
        assert!(names(&d, &escaped).contains(&"aws-secret-key"), "{escaped}");
    }

    #[test]
    fn a_format_names_its_providers() {
        let d = set();
        let gh = d.named("github-token").unwrap();
        assert!(gh.provider(&Host::parse("api.github.com").unwrap()));
        assert!(!gh.provider(&Host::parse("allowed.test").unwrap()));
        assert!(
            d.named("private-key").unwrap().providers().is_empty(),
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
        assert!(d.is_example(b"AKIAIOSFODNN7EXAMPLE"));
    }

    /// The needle rule: long enough, not a common value, a reference, one repeated
    /// character or a documented example.
    #[test]
    fn short_and_common_values_are_not_needles() {
        for (v, why) in [
            ("hunter2", "shorter than 8 bytes"),
            ("  abc  ", "shorter than 8 bytes"),
            ("LOCALHOST", "a common value"),
            ("changeme", "a common value"),
            ("${DB_PASSWORD}", "a reference, not a value"),
            ("$DB_PASSWORD", "a reference, not a value"),
            ("<your password here>", "a reference, not a value"),
            ("xxxxxxxxxxxx", "one repeated character"),
            ("AKIAIOSFODNN7EXAMPLE", "a documented example value"),
        ] {
            assert_eq!(needle_refusal(v), Some(why), "{v:?}");
        }
        for v in [
            "hunter2-correct-horse",
            "s3cr3t/p@ss+word!",
            "AKIA2Z3Y4X5W6V7U2T3S",
            "$ecretValue-9",
        ] {
            assert_eq!(needle_refusal(v), None, "{v:?}");
        }
    }
}
