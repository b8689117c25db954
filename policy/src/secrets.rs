//! `[[detectors]]` and `[secrets]`: what the policy changes in the secret detectors
//! ([`crate::detect`]): detectors of its own, the action of each detector (built-in ones
//! included), more provider hosts for one, and documented example values that are never
//! secrets.
//!
//! ```toml
//! [secrets]
//! allow = ["xoxb-000000000000-EXAMPLEONLY00"]   # never a secret, anywhere
//!
//! [[detectors]]                # a detector of the policy's own
//! name = "acme-token"
//! pattern = '\bacme_[A-Za-z0-9]{32}\b'
//! hosts = ["api.acme.example"] # its provider's hosts: the only places it may go
//!
//! [[detectors]]                # a built-in one, by name (no `pattern`): changed
//! name = "slack-token"
//! hosts = ["hooks.example.com"]   # added to slack.com, *.slack.com
//!
//! [[detectors]]
//! name = "aws-access-key"
//! action = "log"
//! ```
//!
//! An entry **with** `pattern` adds a detector (its name may not be a built-in's); one
//! **without** changes the built-in detector of that name (an unknown name is an error, and
//! so is an entry that changes nothing). `hosts` are host rules without ports, **added** to
//! the detector's provider hosts (a new detector has none: without `hosts` its secret may go
//! nowhere). `action` is what happens to a secret on its way to any other host
//! ([`SecretAction`]; default `deny`).
//!
//! A pattern is `regex` crate syntax, matched on bytes with ASCII classes (`(?-u)`:
//! `\w`, `\d`, `\b` are ASCII; write `(?u)` to opt back in), in linear time: look-around
//! and backreferences do not compile. It must compile within [`PATTERN_SIZE_LIMIT`] bytes,
//! and its shortest match must be [`MIN_MATCH`] to [`MAX_SHORTEST_MATCH`] bytes (a pattern
//! that can match nothing, or a few bytes, would refuse honest requests; one whose every
//! match is long could be split across a streamed body's chunks unseen). A secret longer
//! than 1 KiB in a streamed body is caught when a shorter start of it matches too, as with
//! an open repetition (`[A-Za-z0-9]{32,}`).
//!
//! `[secrets] allow`: values of at least [`MIN_ALLOW`] bytes; a hit that contains one is
//! not a secret, for every detector (added to the built-in documented examples, e.g.
//! AWS's `AKIAIOSFODNN7EXAMPLE`), and no workspace value that contains one is a needle.

use serde::Deserialize;
use toml::Spanned;

use crate::detector::{builtin_names, check_pattern};
use crate::rule::{HostRule, RuleError};

pub use crate::detector::{MAX_SHORTEST_MATCH, MIN_MATCH, PATTERN_SIZE_LIMIT, SecretAction};

/// One `[[detectors]]` entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectorRule {
    /// The detector's name (audit `rule`, the 403 body): 1-64 characters of `[a-z0-9_-]`.
    pub name: String,
    /// The pattern as written: `Some` for a detector of the policy's own, `None` for a
    /// change to the built-in detector `name`.
    pub pattern: Option<String>,
    /// Provider hosts (rules without ports), added to the built-in's own.
    pub hosts: Vec<HostRule>,
    /// The action; `None`: the default ([`SecretAction::Deny`]).
    pub action: Option<SecretAction>,
}

/// `[[detectors]]` and `[secrets]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Secrets {
    /// `[[detectors]]`, in file order; names are unique.
    pub detectors: Vec<DetectorRule>,
    /// `[secrets] allow`: documented example values, never secrets.
    pub allow: Vec<String>,
}

impl Secrets {
    /// The entry that changes the built-in detector `name`, if any.
    #[must_use]
    pub fn change_of(&self, name: &str) -> Option<&DetectorRule> {
        self.detectors
            .iter()
            .find(|d| d.pattern.is_none() && d.name == name)
    }

    /// The detectors of the policy's own, in file order.
    pub fn added(&self) -> impl Iterator<Item = &DetectorRule> {
        self.detectors.iter().filter(|d| d.pattern.is_some())
    }
}

/// The most `[[detectors]]` entries a policy may have.
pub const MAX_DETECTORS: usize = 64;
/// Longest detector name.
pub const MAX_DETECTOR_NAME_LEN: usize = 64;
/// The shortest `[secrets] allow` value, in bytes: a hit that merely contains a shorter
/// one (a word, a prefix) would no longer be a secret.
pub const MIN_ALLOW: usize = 16;

/// `[[detectors]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDetector {
    name: Spanned<String>,
    pattern: Option<Spanned<String>>,
    hosts: Option<Vec<Spanned<String>>>,
    action: Option<Spanned<SecretAction>>,
}

/// `[secrets]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSecrets {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
}

/// A value that is not valid: where, which key, why.
pub(crate) struct Invalid {
    pub span: std::ops::Range<usize>,
    pub key: String,
    pub reason: String,
}

/// `[[detectors]]` and `[secrets]`, checked; `line_of` turns a byte offset into its line
/// (for "first defined on line N").
pub(crate) fn check(
    detectors: Vec<Spanned<RawDetector>>,
    secrets: RawSecrets,
    line_of: &dyn Fn(usize) -> usize,
) -> Result<Secrets, Invalid> {
    let mut out = Secrets::default();
    // Where each name was written (same index as `out.detectors`).
    let mut name_at: Vec<usize> = Vec::new();
    for (i, at) in detectors.into_iter().enumerate() {
        let table = at.span();
        let raw = at.into_inner();
        let key = |field: &str| format!("detectors[{i}].{field}");
        if i == MAX_DETECTORS {
            return Err(Invalid {
                span: table,
                key: format!("detectors[{i}]"),
                reason: format!("more than {MAX_DETECTORS} detectors"),
            });
        }
        let name = raw.name.get_ref();
        let bad_name = |reason: String| Invalid {
            span: raw.name.span(),
            key: key("name"),
            reason: format!("{name:?}: {reason}"),
        };
        let name_ok = (1..=MAX_DETECTOR_NAME_LEN).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(bad_name(format!(
                "must be 1-{MAX_DETECTOR_NAME_LEN} characters of [a-z0-9_-]"
            )));
        }
        if let Some(first) = out.detectors.iter().position(|d| d.name == *name) {
            return Err(bad_name(format!(
                "duplicate detector name (first defined on line {})",
                line_of(name_at[first])
            )));
        }
        let builtin = builtin_names().any(|b| b == name);
        let pattern = match (&raw.pattern, builtin) {
            (Some(_), true) => {
                return Err(bad_name(
                    "is a built-in detector: leave out `pattern` to change it, or choose another name"
                        .into(),
                ));
            }
            (None, false) => {
                return Err(bad_name(format!(
                    "is not a built-in detector ({}); a detector of the policy's own needs a `pattern`",
                    builtin_names().collect::<Vec<_>>().join(", ")
                )));
            }
            (Some(p), false) => {
                check_pattern(p.get_ref()).map_err(|reason| Invalid {
                    span: p.span(),
                    key: key("pattern"),
                    reason: format!("{:?}: {reason}", p.get_ref()),
                })?;
                Some(p.get_ref().clone())
            }
            (None, true) => None,
        };
        if pattern.is_none() && raw.hosts.is_none() && raw.action.is_none() {
            return Err(Invalid {
                span: table,
                key: format!("detectors[{i}]"),
                reason: format!(
                    "{name:?} changes nothing: set `action` or `hosts` (or remove the entry)"
                ),
            });
        }
        let mut hosts = Vec::new();
        for (j, text) in raw.hosts.iter().flatten().enumerate() {
            let bad = |e: RuleError| Invalid {
                span: text.span(),
                key: format!("detectors[{i}].hosts[{j}]"),
                reason: format!("{:?}: {e}", text.get_ref()),
            };
            let rule = HostRule::parse(text.get_ref()).map_err(bad)?;
            if rule.port.is_some() {
                return Err(bad(RuleError::PortNotAllowed));
            }
            hosts.push(rule);
        }
        out.detectors.push(DetectorRule {
            name: name.clone(),
            pattern,
            hosts,
            action: raw.action.map(Spanned::into_inner),
        });
        name_at.push(raw.name.span().start);
    }
    for (i, v) in secrets.allow.into_iter().enumerate() {
        let value = v.get_ref();
        if value.trim().len() < MIN_ALLOW {
            return Err(Invalid {
                span: v.span(),
                key: format!("secrets.allow[{i}]"),
                reason: format!(
                    "{value:?}: shorter than {MIN_ALLOW} bytes (a hit containing it would no longer be a secret: write the whole example value)"
                ),
            });
        }
        out.allow.push(value.trim().to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::Host;
    use crate::Policy;
    use crate::detect::Formats;
    use crate::load::tests::refused;

    const BASE: &str = "[sandbox]\nname = \"demo\"\n";

    fn parse(text: &str) -> Result<Policy, crate::PolicyError> {
        Policy::parse(text, Path::new("policy.toml"))
    }

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    const ACME: &str = "[[detectors]]\nname = \"acme-token\"\npattern = '\\bacme_[A-Za-z0-9]{32}\\b'\nhosts = [\"api.acme.example\", \"*.acme.example\"]\n";

    #[test]
    fn no_detectors_and_no_secrets_change_nothing() {
        let p = parse(BASE).unwrap();
        assert_eq!(p.secrets, Secrets::default());
        let f = Formats::with_policy(&p.secrets).unwrap();
        let b = Formats::builtin().unwrap();
        let names = |f: &Formats| {
            f.all()
                .iter()
                .map(|x| x.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&f), names(&b));
        // Every built-in keeps its own action: deny, but `jwt` (no provider host) logs.
        assert!(f.all().iter().all(|x| x.action
            == if x.name == "jwt" {
                SecretAction::Log
            } else {
                SecretAction::Deny
            }));
    }

    #[test]
    fn a_detector_of_the_policys_own_finds_its_secret_and_knows_its_hosts() {
        let p = parse(&format!("{BASE}{ACME}")).unwrap();
        let d = &p.secrets.detectors[0];
        assert_eq!(d.name, "acme-token");
        assert_eq!(d.action, None);
        assert_eq!(d.hosts.len(), 2);
        let f = Formats::with_policy(&p.secrets).unwrap();
        let token = format!("key=acme_{}", "Zq9".repeat(10) + "x1");
        let hits = f.find(token.as_bytes());
        assert_eq!(hits.len(), 1, "{hits:?}");
        let acme = f.get(hits[0].format);
        assert_eq!(acme.name, "acme-token");
        assert_eq!(acme.action, SecretAction::Deny);
        assert!(acme.provider(&host("api.acme.example")));
        assert!(acme.provider(&host("eu.acme.example")));
        assert!(!acme.provider(&host("allowed.test")));
        assert!(f.find(b"acme_short").is_empty());
        assert!(f.named("github-token").is_some(), "the built-ins stay");
    }

    #[test]
    fn a_built_in_detector_is_changed_by_name() {
        let text = format!(
            "{BASE}[[detectors]]\nname = \"slack-token\"\nhosts = [\"hooks.example.com\"]\n\
             [[detectors]]\nname = \"stripe-live-key\"\naction = \"log\"\n\
             [[detectors]]\nname = \"npm-token\"\naction = \"off\"\n\
             [[detectors]]\nname = \"github-token\"\naction = \"redact\"\nhosts = [\"ghe.example.com\"]\n"
        );
        let f = Formats::with_policy(&parse(&text).unwrap().secrets).unwrap();
        let slack = f.named("slack-token").unwrap();
        assert!(slack.provider(&host("hooks.example.com")), "added");
        assert!(slack.provider(&host("api.slack.com")), "its own stay");
        assert_eq!(slack.action, SecretAction::Deny);
        assert_eq!(
            f.named("stripe-live-key").unwrap().action,
            SecretAction::Log
        );
        let gh = f.named("github-token").unwrap();
        assert_eq!(gh.action, SecretAction::Redact);
        assert!(gh.provider(&host("ghe.example.com")) && gh.provider(&host("api.github.com")));
        assert!(f.named("npm-token").is_none(), "off: not run");
        let npm = format!("npm_{}", "k".repeat(36));
        assert!(f.find(npm.as_bytes()).is_empty());
        assert_eq!(f.all().len(), Formats::builtin().unwrap().all().len() - 1);
    }

    #[test]
    fn allowed_values_are_never_secrets_nor_needles() {
        let token = format!("ghp_{}", "EXAMPLE0".repeat(4) + "exam");
        let text = format!("{BASE}[secrets]\nallow = [\"{token}\"]\n");
        let p = parse(&text).unwrap();
        assert_eq!(p.secrets.allow, [token.as_str()]);
        let f = Formats::with_policy(&p.secrets).unwrap();
        assert!(f.find(format!("t={token}").as_bytes()).is_empty());
        let other = format!("ghp_{}", "a1B2".repeat(9));
        assert_eq!(
            f.find(other.as_bytes()).len(),
            1,
            "only the example is allowed"
        );
        assert!(
            f.is_example(b"AKIAIOSFODNN7EXAMPLE"),
            "the built-in ones stay"
        );
        assert_eq!(f.needle_refusal(&token), Some("a documented example value"));
        assert_eq!(crate::detect::needle_refusal(&token), None);
        assert_eq!(f.needle_refusal("hunter2-correct-horse"), None);
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_refused_with_its_line() {
        let t = format!("{BASE}[[detectors]]\nname = \"x-token\"\npattern = 'x_[a-z{{32}}'\n");
        refused(
            &t,
            5,
            "detectors[0].pattern: \"x_[a-z{32}\": does not compile: unclosed character class",
        );
    }

    #[test]
    fn look_around_and_backreferences_are_refused_as_super_linear() {
        for (p, what) in [
            (r"(?<=key=)[a-z0-9]{32}", "look-around"),
            (r"tok_(?=[a-z]{8})[a-z]{32}", "look-around"),
            (r"([:=])[a-z0-9]{32}\1", "backreferences"),
        ] {
            let t = format!("{BASE}\n[[detectors]]\nname = \"x\"\npattern = '{p}'\n");
            let msg = refused(&t, 6, what);
            assert!(msg.contains("linear time"), "{msg}");
        }
    }

    #[test]
    fn a_pattern_over_the_size_limit_is_refused() {
        let t = format!("{BASE}[[detectors]]\nname = \"big\"\npattern = '(?u)\\w{{100}}'\n");
        refused(&t, 5, "compiles to more than 128 KiB");
        let t = format!("{BASE}[[detectors]]\nname = \"big\"\npattern = '[A-Za-z0-9]{{3000}}'\n");
        refused(&t, 5, "detectors[0].pattern");
    }

    #[test]
    fn empty_short_and_long_matching_patterns_are_refused() {
        for (p, what) in [
            ("a*", "matches the empty string"),
            ("tok_[a-z]{32}|", "matches the empty string"),
            (r"\b", "matches the empty string"),
            ("[0-9]{4}", "matches as few as 4 bytes"),
            ("k_[a-z]{600}", "its shortest match is 602 bytes"),
        ] {
            let t = format!("{BASE}[[detectors]]\nname = \"x\"\npattern = '{p}'\n");
            refused(&t, 5, what);
        }
    }

    #[test]
    fn names_are_checked_with_their_line() {
        let dup = format!("{BASE}{ACME}\n{ACME}");
        let msg = refused(
            &dup,
            9,
            "detectors[1].name: \"acme-token\": duplicate detector name",
        );
        assert!(msg.contains("first defined on line 4"), "{msg}");
        let clash =
            format!("{BASE}[[detectors]]\nname = \"github-token\"\npattern = 'ghx_[a-z]{{30}}'\n");
        refused(&clash, 4, "is a built-in detector: leave out `pattern`");
        let unknown = format!("{BASE}[[detectors]]\nname = \"jwt-token\"\naction = \"log\"\n");
        let msg = refused(
            &unknown,
            4,
            "\"jwt-token\": is not a built-in detector (github-token,",
        );
        assert!(msg.contains("needs a `pattern`"), "{msg}");
        let bad =
            format!("{BASE}[[detectors]]\nname = \"Acme Token\"\npattern = 'acme_[a-z]{{32}}'\n");
        refused(&bad, 4, "must be 1-64 characters of [a-z0-9_-]");
        let workspace = format!(
            "{BASE}[[detectors]]\nname = \"workspace:.env\"\npattern = 'acme_[a-z]{{32}}'\n"
        );
        refused(&workspace, 4, "[a-z0-9_-]");
    }

    #[test]
    fn hosts_actions_and_allow_values_are_checked_with_their_line() {
        let port = format!(
            "{BASE}[[detectors]]\nname = \"slack-token\"\nhosts = [\"ok.example\",\n  \"hooks.example.com:443\"]\n"
        );
        refused(&port, 6, "detectors[0].hosts[1]: \"hooks.example.com:443\"");
        let bad = format!("{BASE}[[detectors]]\nname = \"slack-token\"\nhosts = [\"*.\"]\n");
        refused(&bad, 5, "detectors[0].hosts[0]");
        let action = format!("{BASE}[[detectors]]\nname = \"slack-token\"\naction = \"allow\"\n");
        refused(&action, 5, "unknown variant `allow`");
        let nothing = format!("{BASE}\n[[detectors]]\nname = \"slack-token\"\n");
        refused(&nothing, 4, "\"slack-token\" changes nothing");
        let key =
            format!("{BASE}[[detectors]]\nname = \"slack-token\"\nproviders = [\"x.example\"]\n");
        refused(&key, 5, "unknown field `providers`");
        let short = format!("{BASE}[secrets]\nallow = [\n  \"AKIAEXAMPLE\",\n]\n");
        refused(
            &short,
            5,
            "secrets.allow[0]: \"AKIAEXAMPLE\": shorter than 16 bytes",
        );
    }

    /// The example policy's commented `[secrets]` and `[[detectors]]` block, uncommented,
    /// is a valid policy that does what its comments say.
    #[test]
    fn the_example_policys_commented_detectors_parse() {
        let example = include_str!("../../examples/policy.toml");
        let block: String = example
            .lines()
            .skip_while(|l| *l != "#   [secrets]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim_start())
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(block.contains("[[detectors]]"), "{block}");
        let p = parse(&format!("{BASE}{block}")).unwrap_or_else(|e| panic!("{e}\n{block}"));
        let f = Formats::with_policy(&p.secrets).unwrap();
        assert!(f.named("acme-token").is_some());
        assert!(
            f.named("slack-token")
                .unwrap()
                .provider(&host("hooks.example.com"))
        );
        assert!(f.find(b"acme_EXAMPLEEXAMPLEEXAMPLEEXAMPLE0000").is_empty());
    }

    #[test]
    fn more_than_the_most_detectors_is_refused() {
        let mut t = BASE.to_owned();
        for i in 0..=MAX_DETECTORS {
            t.push_str(&format!(
                "[[detectors]]\nname = \"d{i}\"\npattern = 'd{i}_[a-z]{{30}}'\n"
            ));
        }
        refused(&t, 3 + 3 * MAX_DETECTORS, "more than 64 detectors");
    }
}
