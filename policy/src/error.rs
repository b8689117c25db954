//! Why a policy file was refused, as one line: `<path>:<line>:<col>: <reason>`.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A policy file that cannot be used. Display is always one line.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read policy {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// TOML syntax, or a shape error from deserialisation (unknown key, wrong type,
    /// missing key).
    #[error("{}:{line}:{column}: {reason}", path.display())]
    Parse {
        /// The file (as given to `Policy::load` / `Policy::parse`).
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What is wrong (one line).
        reason: String,
    },
    /// A well-formed file whose values are not valid (bad host pattern, duplicate name,
    /// bad header, ...).
    #[error("{}:{line}:{column}: {reason}", path.display())]
    Validate {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What is wrong (one line), prefixed with the key path, e.g. `network.allow[2]: ...`.
        reason: String,
    },
}

impl PolicyError {
    /// The 1-based line the error points at, if it points into the file.
    #[must_use]
    pub fn line(&self) -> Option<usize> {
        match self {
            PolicyError::Read { .. } => None,
            PolicyError::Parse { line, .. } | PolicyError::Validate { line, .. } => Some(*line),
        }
    }
}

/// Where an error points: the file text and its name, to turn byte spans into line:col.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub text: &'a str,
    pub path: &'a Path,
}

impl Source<'_> {
    pub fn parse_error(&self, span: Option<Range<usize>>, reason: &str) -> PolicyError {
        let (line, column) = span.map_or((1, 1), |s| line_col(self.text, s.start));
        PolicyError::Parse {
            path: self.path.to_path_buf(),
            line,
            column,
            reason: one_line(reason),
        }
    }

    pub fn validate_error(&self, span: Range<usize>, reason: &str) -> PolicyError {
        let (line, column) = line_col(self.text, span.start);
        PolicyError::Validate {
            path: self.path.to_path_buf(),
            line,
            column,
            reason: one_line(reason),
        }
    }

    /// The 1-based line of a byte offset (for "first defined on line N").
    pub fn line_of(&self, offset: usize) -> usize {
        line_col(self.text, offset).0
    }
}

/// 1-based line and character column of a byte offset (clamped into the text).
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or_default();
    let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (line, column)
}

/// Collapse any line breaks so the error stays one line.
fn one_line(reason: &str) -> String {
    reason.trim().replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let text = "ab\ncdé\nfg";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 5), (2, 3));
        assert_eq!(line_col(text, 7), (2, 4));
        assert_eq!(line_col(text, 8), (3, 1));
        assert_eq!(line_col(text, 6), (2, 3)); // inside 'é': clamps back
        assert_eq!(line_col(text, 999), (3, 3));
    }

    #[test]
    fn read_error_is_one_line() {
        let e = PolicyError::Read {
            path: "/nope.toml".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(
            e.to_string(),
            "cannot read policy /nope.toml: entity not found"
        );
        assert_eq!(e.line(), None);
    }
}
