//! Branch and path globs from the policy: `*` and `**` match across `/` (a pattern such as
//! `release/*` protects `release/a/b` too; `.github/workflows/**` covers every depth).

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// A set of globs that remembers how they were written (for refusal messages).
#[derive(Debug, Clone)]
pub struct Globs {
    set: GlobSet,
    written: Vec<String>,
}

/// A glob did not compile.
#[derive(Debug, thiserror::Error)]
#[error("compiling glob {pattern:?}: {source}")]
pub struct GlobError {
    pattern: String,
    #[source]
    source: globset::Error,
}

impl Globs {
    /// Compile `patterns` (case-sensitive, `/` not special, no `{}` alternation).
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Globs, GlobError> {
        let mut b = GlobSetBuilder::new();
        for p in patterns {
            let p = p.as_ref();
            let g = GlobBuilder::new(p)
                .literal_separator(false)
                .backslash_escape(false)
                .empty_alternates(false)
                .build()
                .map_err(|source| GlobError {
                    pattern: p.to_owned(),
                    source,
                })?;
            b.add(g);
        }
        let set = b.build().map_err(|source| GlobError {
            pattern: String::new(),
            source,
        })?;
        Ok(Globs {
            set,
            written: patterns.iter().map(|p| p.as_ref().to_owned()).collect(),
        })
    }

    /// Whether any glob matches `text`.
    #[must_use]
    pub fn matches(&self, text: &str) -> bool {
        self.set.is_match(text)
    }

    /// The first glob that matches `text`, as written.
    #[must_use]
    pub fn first_match(&self, text: &str) -> Option<&str> {
        self.set
            .matches(text)
            .first()
            .and_then(|i| self.written.get(*i))
            .map(String::as_str)
    }

    /// The globs as written.
    #[must_use]
    pub fn written(&self) -> &[String] {
        &self.written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_cross_slashes() {
        let g = Globs::new(&["release/*", "main", ".github/workflows/**"]).unwrap();
        assert!(g.matches("release/1.0"));
        assert!(g.matches("release/a/b"));
        assert!(g.matches("main"));
        assert!(!g.matches("mainx"));
        assert!(!g.matches("xmain"));
        assert!(g.matches(".github/workflows/x.yml"));
        assert!(g.matches(".github/workflows/a/b.yml"));
        assert!(!g.matches(".github/CODEOWNERS"));
        assert_eq!(g.first_match("release/2"), Some("release/*"));
    }
}
