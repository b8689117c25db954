//! Request paths as an upstream might understand them: the input of L7 path matching.
//!
//! A path rule is only as strong as the agreement between the proxy and the upstream on
//! what a path *means*. Servers disagree: some decode `%2F` into a separator and some
//! don't, some resolve `..`, some treat `\` as `/`, some strip `;params` (Java) or a
//! `.json` format suffix (Rails), some decode twice. So [`PathForms::analyse`] does not
//! pick one reading: it computes every reading we know of, and the rules use them so that
//! no reading can dodge a deny:
//!
//! - **strict forms** (two at most):
//!   - *segment-preserving*: split on `/`, then percent-decode each segment once (a
//!     `%2F` stays inside its segment);
//!   - *fully decoded*: percent-decode until nothing changes (`%252F` → `%2F` → `/`),
//!     turn `\` into `/`, then split;
//! - **all forms**: each strict form and the *segment-preserving, fully decoded* form
//!   (split on `/`, then each segment decoded until nothing changes: a server that keeps
//!   `%2F` inside a segment and decodes again later), and each of these with `;...`
//!   stripped from every segment, with a `.ext` suffix stripped from the last segment,
//!   and with both.
//!
//! In every form, empty segments (`//`, a trailing `/`) and `.` segments are dropped and
//! `..` removes the previous segment (never climbing above the root, RFC 3986), after
//! decoding (so `%2e%2e` is `..`), and ASCII letters are lowercased (rules compare
//! case-insensitively: `/Repos/A/B/PULLS/1/MERGE` is the same request to a
//! case-insensitive router).
//!
//! A deny rule matches if it matches **any** form; an allow rule must match **every strict
//! form**. A path that cannot be judged is refused ([`PathError`]): not origin-form (no
//! leading `/`), longer than [`MAX_PATH_LEN`], decoding to a control character (`%00`
//! truncates paths in C code) or to bytes that are not UTF-8 (overlong encodings such as
//! `%C0%AF` for `/`), or still changing after [`MAX_DECODE_ROUNDS`] rounds of decoding.

/// Longest request path judged, in bytes (before decoding).
pub const MAX_PATH_LEN: usize = 8192;
/// How many rounds of percent-decoding the fully decoded form may take.
pub const MAX_DECODE_ROUNDS: usize = 4;

/// Why a path cannot be judged (the request is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not an origin-form path (`*`, an absolute URL, an empty path).
    #[error("not an origin-form path")]
    NotOriginForm,
    /// Longer than [`MAX_PATH_LEN`].
    #[error("path longer than {MAX_PATH_LEN} bytes")]
    TooLong,
    /// Decodes to a control character.
    #[error("path decodes to a control character")]
    ControlChar,
    /// Decodes to bytes that are not UTF-8.
    #[error("path decodes to invalid UTF-8")]
    NotUtf8,
    /// Still encoded after [`MAX_DECODE_ROUNDS`] rounds.
    #[error("path is encoded more than {MAX_DECODE_ROUNDS} times")]
    TooManyEncodings,
}

/// One reading of a path: its segments, decoded, normalised and lowercased.
pub type Segments = Vec<String>;

/// Every reading of one request path (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathForms {
    strict: Vec<Segments>,
    all: Vec<Segments>,
}

impl PathForms {
    /// Analyse an origin-form path (without the query).
    ///
    /// # Errors
    /// A [`PathError`] when the path cannot be judged.
    pub fn analyse(path: &str) -> Result<PathForms, PathError> {
        if !path.starts_with('/') {
            return Err(PathError::NotOriginForm);
        }
        if path.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong);
        }
        let preserving = path
            .split('/')
            .map(|s| checked(percent_decode(s.as_bytes())))
            .collect::<Result<Vec<_>, _>>()?;

        let decoded = checked(decode_fully(path.as_bytes())?)?.replace('\\', "/");
        let full: Vec<String> = decoded.split('/').map(str::to_owned).collect();
        // An escape never spans a `/`, so each segment needs no more rounds than the whole
        // path and decodes to the same bytes: this form adds no error, only a reading.
        let preserving_full = path
            .split('/')
            .map(|s| checked(decode_fully(s.as_bytes())?))
            .collect::<Result<Vec<_>, _>>()?;

        let mut strict = Vec::with_capacity(2);
        for raw in [preserving, full] {
            push_unique(&mut strict, normalise(raw.iter().map(String::as_str)));
        }
        let mut bases = strict.clone();
        push_unique(
            &mut bases,
            normalise(preserving_full.iter().map(String::as_str)),
        );
        let mut all = bases.clone();
        for form in &bases {
            let no_params = normalise(form.iter().map(|s| s.split(';').next().unwrap_or("")));
            let variants = [strip_ext(form), strip_ext(&no_params), no_params];
            for v in variants {
                push_unique(&mut all, v);
            }
        }
        Ok(PathForms { strict, all })
    }

    /// The strict forms (at most two): what an allow rule must match, every one.
    #[must_use]
    pub fn strict(&self) -> &[Segments] {
        &self.strict
    }

    /// Every form (at most twelve): a deny rule matching any one denies.
    #[must_use]
    pub fn all(&self) -> &[Segments] {
        &self.all
    }
}

fn push_unique(out: &mut Vec<Segments>, form: Segments) {
    if !out.contains(&form) {
        out.push(form);
    }
}

/// Decoded bytes → text, refusing control characters and invalid UTF-8.
fn checked(bytes: Vec<u8>) -> Result<String, PathError> {
    let text = String::from_utf8(bytes).map_err(|_| PathError::NotUtf8)?;
    if text.chars().any(char::is_control) {
        return Err(PathError::ControlChar);
    }
    Ok(text)
}

/// Percent-decode until nothing changes, at most [`MAX_DECODE_ROUNDS`] rounds.
fn decode_fully(input: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut rounds = decode_rounds(input);
    if rounds.len() > MAX_DECODE_ROUNDS {
        return Err(PathError::TooManyEncodings);
    }
    Ok(rounds.pop().unwrap_or_else(|| input.to_vec()))
}

/// The readings of `input` after one, two, ... rounds of [`percent_decode`], each
/// different from the one before: empty when `input` has no escape, and at most
/// [`MAX_DECODE_ROUNDS`]` + 1` readings (one more than a judged path may take, so a caller
/// can tell a path still encoded after the limit, which [`PathForms::analyse`] refuses).
/// The one decoding schedule of every place that reads a request path: the L7 judge, the
/// git push check and the credential leak check.
#[must_use]
pub fn decode_rounds(input: &[u8]) -> Vec<Vec<u8>> {
    let mut rounds: Vec<Vec<u8>> = Vec::new();
    while rounds.len() <= MAX_DECODE_ROUNDS {
        let last = rounds.last().map_or(input, Vec::as_slice);
        let next = percent_decode(last);
        if next == last {
            break;
        }
        rounds.push(next);
    }
    rounds
}

/// Whether `input` is still percent-encoded after [`MAX_DECODE_ROUNDS`] rounds.
#[must_use]
pub fn too_many_encodings(rounds: &[Vec<u8>]) -> bool {
    rounds.len() > MAX_DECODE_ROUNDS
}

/// One round of percent-decoding (RFC 3986 `%XX`, by the `percent-encoding` crate): an
/// invalid escape (`%zz`, a lone `%`) stays literal and `+` is not a space. The one
/// percent-decoder of airlock.
#[must_use]
pub fn percent_decode(input: &[u8]) -> Vec<u8> {
    percent_encoding::percent_decode(input).collect()
}

/// Drop empty and `.` segments, resolve `..` (never above the root), lowercase ASCII.
fn normalise<'a>(segments: impl Iterator<Item = &'a str>) -> Segments {
    let mut out: Segments = Vec::new();
    for s in segments {
        match s {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s.to_ascii_lowercase()),
        }
    }
    out
}

/// The form with a `.ext` suffix removed from the last segment (Rails formats). A stem
/// that would be a dot segment (`..json`, `...x`) is not stripped: no form holds `.` or
/// `..` (a glob never names them, and the unstripped segment already matches `*`).
fn strip_ext(form: &[String]) -> Segments {
    let mut out = form.to_vec();
    if let Some(last) = out.last_mut()
        && let Some((stem, _)) = last.rsplit_once('.')
        && !matches!(stem, "" | "." | "..")
    {
        *last = stem.to_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forms(path: &str) -> PathForms {
        PathForms::analyse(path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
    }
    fn joined(f: &[Segments]) -> Vec<String> {
        f.iter().map(|s| format!("/{}", s.join("/"))).collect()
    }

    #[test]
    fn a_plain_path_has_one_strict_form() {
        let f = forms("/v1/messages");
        assert_eq!(joined(f.strict()), ["/v1/messages"]);
        assert_eq!(joined(f.all()), ["/v1/messages"]);
        assert_eq!(joined(forms("/").strict()), ["/"]);
    }

    #[test]
    fn attack_dot_segments_double_slashes_and_case_normalise() {
        for p in [
            "/repos/a/b/pulls/1/merge",
            "//repos//a/b/pulls/1/merge/",
            "/repos/a/b/x/../pulls/./1/merge",
            "/repos/x/y/../../a/b/pulls/1/merge",
            "/../../repos/a/b/pulls/1/merge",
            "/REPOS/A/B/PULLS/1/MERGE",
            "/repos/a/b/pulls/1/%2e%2e/1/merge",
            "/repos/a/b/pulls/1/%2E/merge",
            "/repos/a/b/pulls/1/%6d%65%72%67%65",
        ] {
            assert!(
                joined(forms(p).strict()).contains(&"/repos/a/b/pulls/1/merge".to_owned()),
                "{p}: {:?}",
                joined(forms(p).strict())
            );
        }
    }

    #[test]
    fn attack_encoded_separators_yield_both_readings() {
        let f = forms("/repos/a/b/pulls%2F1%2Fmerge");
        let j = joined(f.strict());
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()), "{j:?}");
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()));
        assert_eq!(f.strict()[0], ["repos", "a", "b", "pulls/1/merge"]);
        // Double encoding and backslashes.
        let j = joined(forms("/repos/a/b/pulls%252F1%255Cmerge").strict());
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()), "{j:?}");
        let j = joined(forms("/repos\\a\\b\\pulls\\1\\merge").strict());
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()), "{j:?}");
        // An encoded "../" climbs in the decoded reading.
        let j = joined(forms("/v1/messages%2F..%2F..%2Fadmin").strict());
        assert!(j.contains(&"/admin".to_owned()), "{j:?}");
    }

    #[test]
    fn attack_params_and_formats_are_stripped_in_extra_forms() {
        let j = joined(forms("/repos/a/b/pulls/1/merge;x=1").all());
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()), "{j:?}");
        let j = joined(forms("/repos/a/b/pulls/1/merge.json").all());
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()), "{j:?}");
        let j = joined(forms("/repos/a/b/pulls;x/1;y/merge.json;z").all());
        assert!(j.contains(&"/repos/a/b/pulls/1/merge".to_owned()), "{j:?}");
        // But not in the strict forms an allow rule must match.
        let j = joined(forms("/repos/a/b/pulls/1/merge.json").strict());
        assert_eq!(j, ["/repos/a/b/pulls/1/merge.json"]);
    }

    #[test]
    fn attack_unjudgeable_paths_are_refused() {
        assert_eq!(
            PathForms::analyse("/a%00/merge"),
            Err(PathError::ControlChar)
        );
        assert_eq!(PathForms::analyse("/a%0a"), Err(PathError::ControlChar));
        assert_eq!(PathForms::analyse("/a%C0%AF"), Err(PathError::NotUtf8));
        assert_eq!(PathForms::analyse("/%ff"), Err(PathError::NotUtf8));
        assert_eq!(PathForms::analyse("*"), Err(PathError::NotOriginForm));
        assert_eq!(
            PathForms::analyse("https://api.github.com/x"),
            Err(PathError::NotOriginForm)
        );
        assert_eq!(PathForms::analyse(""), Err(PathError::NotOriginForm));
        assert_eq!(
            PathForms::analyse(&format!("/{}", "a".repeat(MAX_PATH_LEN))),
            Err(PathError::TooLong)
        );
        assert_eq!(
            PathForms::analyse("/%2525252525252F"),
            Err(PathError::TooManyEncodings)
        );
    }

    /// Found by fuzz/l7_path: `%6%44erge` is `%6Derge` after one round and `merge` after
    /// two, while the `%2F` after `;` splits the path only in the fully decoded reading.
    /// A server that keeps `%2F` in its segment, decodes again and drops `;params` and
    /// the format sees `merge`: the segment-preserving fully decoded form catches it.
    #[test]
    fn attack_double_encoding_inside_a_segment_that_keeps_its_encoded_slash() {
        let f = forms("/repos/o/r/pulls/1/%6%44erge.json;%2Fx");
        let j = joined(f.all());
        assert!(j.contains(&"/repos/o/r/pulls/1/merge".to_owned()), "{j:?}");
        // A deny-only reading: allow rules still match the two strict forms.
        assert_eq!(f.strict().len(), 2);
        assert!(!joined(f.strict()).contains(&"/repos/o/r/pulls/1/merge".to_owned()));
        assert!(f.all().len() <= 12);
    }

    /// Found by fuzz/l7_path: stripping `.xo` from `..xo` left a `..` segment in a form.
    #[test]
    fn no_form_holds_a_dot_segment_after_stripping_a_format() {
        for p in ["/rep..///..xo", "/a/..json", "/a/...json", "/a/.json;x"] {
            for seg in forms(p).all().iter().flatten() {
                assert!(!matches!(seg.as_str(), "" | "." | ".."), "{p}: {seg:?}");
            }
        }
        let j = joined(forms("/a/..json").all());
        assert_eq!(j, ["/a/..json"]);
    }

    #[test]
    fn one_round_at_a_time_up_to_one_past_the_limit() {
        assert!(decode_rounds(b"/plain").is_empty());
        assert_eq!(decode_rounds(b"a%2541"), [b"a%41".to_vec(), b"aA".to_vec()]);
        assert_eq!(percent_decode(b"a%2Db%2dc%zz%4%"), b"a-b-c%zz%4%");
        let deep = decode_rounds(b"%2525252525252F");
        assert_eq!(deep.len(), MAX_DECODE_ROUNDS + 1);
        assert!(too_many_encodings(&deep));
        assert!(!too_many_encodings(&decode_rounds(b"%252F")));
    }

    #[test]
    fn invalid_escapes_and_unicode_stay_literal() {
        assert_eq!(joined(forms("/a%zz/b%").strict()), ["/a%zz/b%"]);
        assert_eq!(joined(forms("/caf%C3%A9").strict()), ["/café"]);
        // A literal percent that decodes once is not decoded again into something else.
        assert_eq!(joined(forms("/100%25.txt").strict()), ["/100%.txt"]);
    }
}
