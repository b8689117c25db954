//! Globs: URL path globs of `[[rules]]`, and the branch and file globs of `[git]`.
//!
//! A **`[git]` glob** (`push_branches`, `protected_branches`, `restricted_paths`) is
//! compiled by [`GitGlobs`], the one reading both the git API's push judge and the proxy's
//! GitHub contents judge use: `*` and `?` match across `/` (`release/*` covers
//! `release/a/b`), a `**` component matches any number of directories, none included
//! (`**/secrets.env` covers `secrets.env`, `src/**/*.pem` covers `src/a.pem`), `[...]`
//! and `{a,b}` as in globset, `\` literal, ASCII case-insensitive (the proxy judges the
//! lowercased readings of a path, and a deny list must not be spelled around).
//!
//! A **path glob** starts with `/` and is matched segment by segment against the
//! normalised forms of a request path ([`crate::path`]): `*` matches any run of characters
//! within one segment (`/v1/*` matches `/v1/messages`, not `/v1/a/b`; `*.json` matches
//! `a.json`), a segment that is exactly `**` matches any number of segments, zero
//! included (`/repos/**` matches `/repos` and `/repos/a/b/c`), anything else is literal.
//! Comparison is ASCII case-insensitive. The pattern is written **decoded** (no `%`), with
//! no empty, `.` or `..` segment, no trailing `/` (except the root `/` itself), no `?`,
//! `#`, `\`, whitespace or control character.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::path::Segments;

/// Most segments in a path glob.
pub const MAX_GLOB_SEGMENTS: usize = 64;

/// One segment of a path glob.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Seg {
    /// `**`: any number of segments.
    AnyDepth,
    /// A segment pattern (lowercase), `*` matching within the segment.
    Pattern(String),
}

/// A parsed path glob.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathGlob {
    segs: Vec<Seg>,
    text: String,
}

/// Why a path glob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// Does not start with `/`.
    #[error("a path glob starts with '/'")]
    NoLeadingSlash,
    /// A character paths are not matched on.
    #[error("{0:?} is not allowed in a path glob (write the path decoded, without query)")]
    Char(char),
    /// `//` or a trailing `/`.
    #[error("empty segment (double or trailing '/')")]
    EmptySegment,
    /// `.` or `..`.
    #[error("\".\" and \"..\" segments are not allowed (paths are matched normalised)")]
    DotSegment,
    /// `**` mixed with other characters in a segment.
    #[error("\"**\" must be a whole segment (\"/a/**\", not \"/a**\")")]
    DoubleStar,
    /// More than [`MAX_GLOB_SEGMENTS`] segments.
    #[error("more than {MAX_GLOB_SEGMENTS} segments")]
    TooLong,
}

impl PathGlob {
    /// Parse a path glob as written in the policy file.
    ///
    /// # Errors
    /// A [`GlobError`] saying what is wrong.
    pub fn parse(text: &str) -> Result<PathGlob, GlobError> {
        let rest = text.strip_prefix('/').ok_or(GlobError::NoLeadingSlash)?;
        if let Some(c) = text
            .chars()
            .find(|c| c.is_control() || c.is_whitespace() || matches!(c, '%' | '?' | '#' | '\\'))
        {
            return Err(GlobError::Char(c));
        }
        let mut segs = Vec::new();
        if !rest.is_empty() {
            for s in rest.split('/') {
                segs.push(match s {
                    "" => return Err(GlobError::EmptySegment),
                    "." | ".." => return Err(GlobError::DotSegment),
                    "**" => Seg::AnyDepth,
                    s if s.contains("**") => return Err(GlobError::DoubleStar),
                    s => Seg::Pattern(s.to_ascii_lowercase()),
                });
            }
        }
        if segs.len() > MAX_GLOB_SEGMENTS {
            return Err(GlobError::TooLong);
        }
        Ok(PathGlob {
            segs,
            text: text.to_owned(),
        })
    }

    /// The glob as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether one normalised form (lowercase segments) matches.
    #[must_use]
    pub fn matches(&self, path: &Segments) -> bool {
        self.match_from(path).is_some()
    }

    /// The segments matched by a trailing `**`, if the glob ends with one and matches:
    /// e.g. the file path of `/repos/*/*/contents/**`.
    #[must_use]
    pub fn tail<'p>(&self, path: &'p Segments) -> Option<&'p [String]> {
        if self.segs.last() != Some(&Seg::AnyDepth) {
            return None;
        }
        let head = self.segs.len() - 1;
        if self.segs.iter().take(head).any(|s| *s == Seg::AnyDepth) || path.len() < head {
            return None;
        }
        let ok = self
            .segs
            .iter()
            .zip(path)
            .take(head)
            .all(|(g, p)| matches!(g, Seg::Pattern(g) if wildcard(g.as_bytes(), p.as_bytes())));
        ok.then(|| path.get(head..)).flatten()
    }

    /// Dynamic programming over (glob segment, path segment): linear in their product,
    /// whatever the number of `**`.
    fn match_from(&self, path: &Segments) -> Option<()> {
        let n = path.len();
        // can[j]: the glob segments seen so far can match exactly path[..j].
        let mut can = vec![false; n + 1];
        can[0] = true;
        for seg in &self.segs {
            let mut next = vec![false; n + 1];
            match seg {
                Seg::AnyDepth => {
                    let mut any = false;
                    for j in 0..=n {
                        any |= can[j];
                        next[j] = any;
                    }
                }
                Seg::Pattern(g) => {
                    for j in 0..n {
                        if can[j] && wildcard(g.as_bytes(), path[j].as_bytes()) {
                            next[j + 1] = true;
                        }
                    }
                }
            }
            can = next;
        }
        can[n].then_some(())
    }
}

/// `*` matches any run of bytes (including none); everything else literally. Linear-ish
/// greedy matching with one backtrack point.
pub(crate) fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

/// How a set of `[git]` globs compares names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameCase {
    /// ASCII letters folded: the branch globs, and `restricted_paths` before its option.
    Ascii,
    /// Exactly as written (`git.restricted_paths_case_insensitive = false`): the reading of
    /// a case-sensitive checkout.
    Exact,
    /// As a case-insensitive checkout (macOS, Windows) names a file
    /// (`git.restricted_paths_case_insensitive = true`, the default): see [`fold_path`].
    Folded,
}

/// A name as a case-insensitive checkout reads it: Unicode lowercase, with the letters whose
/// case folding is an ASCII letter folded to it (`ſ` → `s`, the Kelvin sign → `k`), the
/// code points HFS+ ignores dropped (`.vs\u{200c}code` is `.vscode` there), and each
/// component's trailing dots and spaces dropped (NTFS opens `.vscode.` as `.vscode`).
#[must_use]
pub fn fold_path(name: &str) -> String {
    let folded = fold_chars(name);
    folded
        .split('/')
        .map(|c| {
            let t = c.trim_end_matches(['.', ' ']);
            if t.is_empty() { c } else { t }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// [`fold_path`] without the per-component trimming (what a pattern goes through).
fn fold_chars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{200c}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{206a}'..='\u{206f}'
            | '\u{feff}' => {}
            // Case-folded to an ASCII letter, though already lowercase (long s).
            '\u{17f}' => out.push('s'),
            c => out.extend(c.to_lowercase()),
        }
    }
    out
}

/// Compiled `[git]` globs (see the module documentation for the syntax), remembering how
/// they were written for refusal messages. Equal when written alike.
#[derive(Debug, Clone)]
pub struct GitGlobs {
    set: GlobSet,
    written: Vec<String>,
    case: NameCase,
    /// Each glob's regex, for [`GitGlobs::first_match_below`].
    regexes: Vec<String>,
}

/// A `[git]` glob that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("glob {pattern:?} does not compile: {why}")]
pub struct GitGlobError {
    /// The glob as written (empty when the set as a whole failed).
    pub pattern: String,
    /// globset's reason.
    pub why: String,
}

impl GitGlobs {
    /// Compile `patterns` with the one set of options every `[git]` glob uses, ASCII case
    /// folded ([`NameCase::Ascii`]).
    ///
    /// # Errors
    /// [`GitGlobError`] naming the first glob that does not compile.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<GitGlobs, GitGlobError> {
        GitGlobs::with_case(patterns, NameCase::Ascii)
    }

    /// Compile `patterns` comparing names as `case` says.
    ///
    /// # Errors
    /// [`GitGlobError`] naming the first glob that does not compile.
    pub fn with_case<S: AsRef<str>>(
        patterns: &[S],
        case: NameCase,
    ) -> Result<GitGlobs, GitGlobError> {
        let mut set = GlobSetBuilder::new();
        let mut regexes = Vec::with_capacity(patterns.len());
        for p in patterns {
            let p = p.as_ref();
            let glob = match case {
                NameCase::Folded => git_glob(&fold_chars(p), true),
                NameCase::Ascii => git_glob(p, true),
                NameCase::Exact => git_glob(p, false),
            }
            .map_err(|mut e| {
                p.clone_into(&mut e.pattern);
                e
            })?;
            regexes.push(glob.regex().to_owned());
            set.add(glob);
        }
        let set = set.build().map_err(|e| GitGlobError {
            pattern: String::new(),
            why: e.kind().to_string(),
        })?;
        Ok(GitGlobs {
            set,
            written: patterns.iter().map(|p| p.as_ref().to_owned()).collect(),
            case,
            regexes,
        })
    }

    /// How names are compared.
    #[must_use]
    pub fn case(&self) -> NameCase {
        self.case
    }

    /// `name` as the globs read it.
    fn key<'n>(&self, name: &'n str) -> std::borrow::Cow<'n, str> {
        match self.case {
            NameCase::Folded => std::borrow::Cow::Owned(fold_path(name)),
            NameCase::Ascii | NameCase::Exact => std::borrow::Cow::Borrowed(name),
        }
    }

    /// Whether any glob matches `name`.
    #[must_use]
    pub fn matches(&self, name: &str) -> bool {
        self.set.is_match(self.key(name).as_ref())
    }

    /// The first glob (in written order) that matches `name`, as written.
    #[must_use]
    pub fn first_match(&self, name: &str) -> Option<&str> {
        self.set
            .matches(self.key(name).as_ref())
            .first()
            .and_then(|i| self.written.get(*i))
            .map(String::as_str)
    }

    /// The first glob (in written order) that matches some path below the directory `dir`
    /// (`dir/...`), as written: what a symbolic link at `dir` (or one pointing at it) would
    /// let a checkout reach under that name. Decided on each glob's automaton (a lazy DFA
    /// walked over `dir/`: the glob can still match unless the walk is dead), never guessed;
    /// a glob whose automaton cannot be walked counts as matching.
    #[must_use]
    pub fn first_match_below(&self, dir: &str) -> Option<&str> {
        let key = format!("{}/", self.key(dir).trim_end_matches('/'));
        self.regexes
            .iter()
            .position(|re| can_continue(re, key.as_bytes()))
            .and_then(|i| self.written.get(i))
            .map(String::as_str)
    }

    /// The globs as written.
    #[must_use]
    pub fn written(&self) -> &[String] {
        &self.written
    }
}

/// Whether some text that starts with `prefix` matches the (anchored) regex `re`.
fn can_continue(re: &str, prefix: &[u8]) -> bool {
    use regex_automata::hybrid::dfa::DFA;
    use regex_automata::{Anchored, Input, nfa::thompson, util::syntax};
    let Ok(dfa) = DFA::builder()
        .syntax(syntax::Config::new().utf8(false))
        .thompson(thompson::Config::new().utf8(false))
        .build(re)
    else {
        return true;
    };
    let mut cache = dfa.create_cache();
    let input = Input::new(prefix).anchored(Anchored::Yes);
    let Ok(mut state) = dfa.start_state_forward(&mut cache, &input) else {
        return true;
    };
    for &b in prefix {
        match dfa.next_state(&mut cache, state, b) {
            Ok(next) if next.is_dead() => return false,
            Ok(next) => state = next,
            Err(_) => return true,
        }
    }
    true
}

impl PartialEq for GitGlobs {
    fn eq(&self, other: &GitGlobs) -> bool {
        self.written == other.written && self.case == other.case
    }
}

impl Eq for GitGlobs {}

/// One `[git]` glob with the options every one of them is compiled with.
fn git_glob(pattern: &str, case_insensitive: bool) -> Result<globset::Glob, GitGlobError> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(false)
        .empty_alternates(false)
        .case_insensitive(case_insensitive)
        .build()
        .map_err(|e| GitGlobError {
            pattern: pattern.to_owned(),
            why: e.kind().to_string(),
        })
}

/// Check that one `[git]` glob compiles (the policy loader's check, so a bad glob is a
/// file:line error, not a git API that cannot start).
pub(crate) fn check_git_glob(pattern: &str) -> Result<(), String> {
    git_glob(pattern, true).map(|_| ()).map_err(|e| e.why)
}

/// The `[git]` table's globs, compiled once when the policy is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRules {
    /// `git.push_branches`.
    pub push_branches: GitGlobs,
    /// `git.protected_branches`.
    pub protected_branches: GitGlobs,
    /// `git.restricted_paths`.
    pub restricted_paths: GitGlobs,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Segments {
        p.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
    fn m(glob: &str, path: &str) -> bool {
        PathGlob::parse(glob).unwrap().matches(&segs(path))
    }

    #[test]
    fn single_star_stays_in_its_segment() {
        assert!(m("/repos/*/*/pulls/*/merge", "/repos/a/b/pulls/1/merge"));
        assert!(!m("/repos/*/*/pulls/*/merge", "/repos/a/b/c/pulls/1/merge"));
        assert!(!m("/repos/*/*/pulls/*/merge", "/repos/a/b/pulls/1/merge/x"));
        assert!(m("/v1/*.json", "/v1/a.json"));
        assert!(!m("/v1/*.json", "/v1/a.jsonx"));
        assert!(m("/v1/*", "/v1/x"));
        assert!(!m("/v1/*", "/v1"));
        // `*` does not match an empty segment (there are none after normalisation).
        assert!(!m("/v1/*/x", "/v1/x"));
    }

    #[test]
    fn double_star_spans_any_depth_including_none() {
        assert!(m("/repos/**", "/repos"));
        assert!(m("/repos/**", "/repos/a/b/c"));
        assert!(m("/repos/*/*/git/refs/**", "/repos/a/b/git/refs/heads/x/y"));
        assert!(m(
            "/repos/*/*/branches/**/protection",
            "/repos/a/b/branches/release/v1/protection"
        ));
        assert!(!m(
            "/repos/*/*/branches/**/protection",
            "/repos/a/b/branches/x/protectionx"
        ));
        assert!(m("/**", "/"));
        assert!(m("/**/merge", "/a/b/c/merge"));
        assert!(m("/", "/"));
        assert!(!m("/", "/a"));
        // Many `**` stay fast (no exponential backtracking).
        let glob = "/**/".repeat(30) + "x";
        let path = "/a".repeat(4000) + "/y";
        assert!(!m(&glob.replace("//", "/"), &path));
    }

    #[test]
    fn globs_compare_lowercase() {
        assert!(m("/Repos/*/*/PULLS/*/merge", "/repos/a/b/pulls/1/merge"));
    }

    #[test]
    fn tail_is_what_the_trailing_double_star_matched() {
        let g = PathGlob::parse("/repos/*/*/contents/**").unwrap();
        let p = segs("/repos/a/b/contents/.github/workflows/x.yml");
        assert_eq!(g.tail(&p).unwrap(), [".github", "workflows", "x.yml"]);
        assert_eq!(g.tail(&segs("/repos/a/b/contents")).unwrap().len(), 0);
        assert!(g.tail(&segs("/repos/a/b/issues/x")).is_none());
    }

    #[test]
    fn bad_globs_are_refused() {
        for (bad, err) in [
            ("repos", GlobError::NoLeadingSlash),
            ("/a//b", GlobError::EmptySegment),
            ("/a/", GlobError::EmptySegment),
            ("/a/../b", GlobError::DotSegment),
            ("/a/./b", GlobError::DotSegment),
            ("/a**", GlobError::DoubleStar),
            ("/a%2Fb", GlobError::Char('%')),
            ("/a?x=1", GlobError::Char('?')),
            ("/a b", GlobError::Char(' ')),
            ("/a\\b", GlobError::Char('\\')),
        ] {
            assert_eq!(PathGlob::parse(bad), Err(err), "{bad}");
        }
        assert_eq!(PathGlob::parse(&"/a".repeat(65)), Err(GlobError::TooLong));
    }

    #[test]
    fn wildcard_basics() {
        assert!(wildcard(b"*", b""));
        assert!(wildcard(b"a*b*c", b"axxbyyc"));
        assert!(!wildcard(b"a*b*c", b"axxbyy"));
        assert!(wildcard(b"**", b"a/b"));
        assert!(!wildcard(b"", b"a"));
    }

    #[test]
    fn git_globs_cross_slashes_fold_case_and_let_double_star_match_nothing() {
        let g = GitGlobs::new(&[
            "release/*",
            ".github/workflows/**",
            "**/secrets.env",
            "src/**/*.pem",
            "**/main",
        ])
        .unwrap();
        for name in [
            "release/a/b",
            ".github/workflows/x.yml",
            ".GitHub/Workflows/x.yml",
            "secrets.env",
            "a/b/Secrets.env",
            "src/a.pem",
            "src/x/y/a.pem",
            "main",
            "MAIN",
            "sandbox/demo/main",
        ] {
            assert!(g.matches(name), "{name}");
        }
        for name in [
            "release",
            ".github/CODEOWNERS",
            "secrets.env.example",
            "src/a.pem.txt",
            "lib/a.pem",
            "mainx",
            "xmain",
        ] {
            assert!(!g.matches(name), "{name}");
        }
        assert_eq!(g.first_match("src/k.pem"), Some("src/**/*.pem"));
        assert_eq!(g.first_match("x/main"), Some("**/main"));
    }

    /// A case-insensitive checkout opens `.VSCode/`, `.vſcode/`, `.vscode./` and
    /// `.vs\u{200c}code/` as `.vscode/`: folded path globs match them all; exact ones only
    /// the name as written; branch globs keep ASCII folding.
    #[test]
    fn folded_path_globs_match_every_name_a_checkout_reads_alike() {
        let folded =
            GitGlobs::with_case(&[".vscode/**", ".github/workflows/**"], NameCase::Folded).unwrap();
        let exact =
            GitGlobs::with_case(&[".vscode/**", ".github/workflows/**"], NameCase::Exact).unwrap();
        for name in [
            ".vscode/settings.json",
            ".VSCode/settings.json",
            ".vſcode/tasks.json",
            ".vscode./tasks.json",
            ".vscode /tasks.json",
            ".vs\u{200c}code/tasks.json",
            ".github/wor\u{212a}flows/ci.yml",
            ".GITHUB/WORKFLOWS/CI-É.YML",
        ] {
            assert!(folded.matches(name), "{name}");
        }
        assert!(exact.matches(".vscode/settings.json"));
        for name in [".VSCode/settings.json", ".vſcode/tasks.json", ".vscode./x"] {
            assert!(!exact.matches(name), "{name}");
        }
        assert!(!folded.matches(".vscodex/settings.json"));
        assert_eq!(fold_path("A./B /c"), "a/b/c");
        assert_eq!(fold_path("../x"), "../x");
        let names = GitGlobs::new(&["Main"]).unwrap();
        assert!(names.matches("MAIN") && names.case() == NameCase::Ascii);
    }

    /// A symbolic link at `dir` shows whatever its target holds under `dir/`: it is judged by
    /// every glob that can match something below it.
    #[test]
    fn globs_that_match_below_a_directory_are_found() {
        let g = GitGlobs::with_case(
            &[
                ".github/workflows/**",
                ".vscode/settings.json",
                "src/**/*.pem",
                "Makefile",
            ],
            NameCase::Folded,
        )
        .unwrap();
        for (dir, glob) in [
            (".github", ".github/workflows/**"),
            (".github/workflows", ".github/workflows/**"),
            (".github/workflows/sub", ".github/workflows/**"),
            (".VSCode", ".vscode/settings.json"),
            ("src", "src/**/*.pem"),
            ("src/a/b", "src/**/*.pem"),
        ] {
            assert_eq!(g.first_match_below(dir), Some(glob), "{dir}");
        }
        for dir in [
            ".gitlab",
            "docs",
            ".vscode/settings.json",
            "Makefile",
            "lib",
        ] {
            assert_eq!(g.first_match_below(dir), None, "{dir}");
        }
        let anywhere = GitGlobs::new(&["**/secrets.env"]).unwrap();
        assert_eq!(
            anywhere.first_match_below("any/dir"),
            Some("**/secrets.env")
        );
        let star = GitGlobs::new(&["release/*"]).unwrap();
        assert_eq!(star.first_match_below("release"), Some("release/*"));
        assert_eq!(star.first_match_below("rel"), None);
    }

    #[test]
    fn git_glob_syntax_is_evaluated_not_guessed() {
        let g = GitGlobs::new(&["src/[ab]", "v?", "{x,y}/z", "a\\b"]).unwrap();
        assert!(g.matches("src/a") && g.matches("src/B") && !g.matches("src/c"));
        assert!(g.matches("v1") && !g.matches("v12"));
        assert!(g.matches("x/z") && g.matches("y/z") && !g.matches("w/z"));
        assert!(g.matches("a\\b"));
        assert!(GitGlobs::new(&["src/[a"]).is_err());
        assert!(check_git_glob("src/[a").is_err());
    }
}
