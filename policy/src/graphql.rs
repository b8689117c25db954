//! Which mutation fields a GraphQL document would run: the input of the GitHub preset's
//! GraphQL judge.
//!
//! [`mutation_fields`] tokenizes the document (GraphQL October 2021 lexical grammar:
//! names, punctuators, numbers, strings and block strings with their escapes, `#`
//! comments, commas as whitespace) and parses just enough of the executable grammar to
//! list the **top-level fields of every `mutation` operation**, whatever hides them:
//! aliases (`ok: mergePullRequest(...)`), fragment spreads (`...F` with
//! `fragment F on Mutation { mergePullRequest ... }`, chained, in any order), inline
//! fragments (`... on Mutation { ... }`, `... @include(if: true) { ... }`), directives,
//! variable definitions with default object values, several operations in one document.
//! Names inside strings, block strings and comments are never fields.
//!
//! Anything it does not understand is an error, and the caller denies: an unknown
//! definition keyword (`Mutation`, type-system definitions), an unknown fragment, a
//! duplicate fragment name, unbalanced brackets, an unterminated string, a character
//! outside the grammar, more than [`MAX_DEPTH`] nested selections or fragment spreads,
//! more than [`MAX_TOKENS`] tokens. Query and subscription operations are parsed (so that
//! a malformed one is still an error) but their fields are not reported: GitHub's
//! mutations live on the `Mutation` type only.

use std::collections::{HashMap, HashSet};

/// Most nested selection sets / fragment spreads followed.
pub const MAX_DEPTH: usize = 64;
/// Most tokens in one document.
pub const MAX_TOKENS: usize = 200_000;

/// Why a document cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphqlError {
    /// A lexical error (bad character, unterminated string, bad escape).
    #[error("GraphQL lexical error at byte {0}")]
    Lex(usize),
    /// The document is not an executable document this reader understands.
    #[error("GraphQL syntax not understood: {0}")]
    Syntax(&'static str),
    /// A spread of a fragment the document does not define.
    #[error("GraphQL fragment {0:?} is not defined")]
    UnknownFragment(String),
    /// A fragment name defined twice.
    #[error("GraphQL fragment {0:?} is defined twice")]
    DuplicateFragment(String),
    /// Too deep or too long.
    #[error("GraphQL document too deep or too long")]
    TooComplex,
}

/// One lexical token. Strings carry their decoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A name (`[_A-Za-z][_0-9A-Za-z]*`).
    Name(String),
    /// A string or block string value, escapes decoded.
    Str(String),
    /// A number (its text).
    Num(String),
    /// One of `! $ & ( ) : = @ [ ] { } |`.
    Punct(char),
    /// `...`.
    Spread,
}

/// A top-level field of a mutation operation: its name (not its alias) and the tokens of
/// its arguments (between the parentheses, may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutationField {
    /// The schema field name.
    pub name: String,
    /// The argument tokens.
    pub args: Vec<Token>,
}

/// The top-level fields of every mutation operation in `document`, fragments resolved.
///
/// # Errors
/// A [`GraphqlError`] when the document cannot be judged (the caller must deny).
pub fn mutation_fields(document: &str) -> Result<Vec<MutationField>, GraphqlError> {
    let tokens = tokenize(document)?;
    let mut p = Parser { t: &tokens, i: 0 };
    let mut operations: Vec<(bool, Vec<Item>)> = Vec::new();
    let mut fragments: HashMap<String, Vec<Item>> = HashMap::new();
    if tokens.is_empty() {
        return Err(GraphqlError::Syntax("empty document"));
    }
    while p.i < tokens.len() {
        match p.peek() {
            Some(Token::Punct('{')) => operations.push((false, p.selection_set(0)?)),
            Some(Token::Name(k)) if matches!(k.as_str(), "query" | "mutation" | "subscription") => {
                let is_mutation = k == "mutation";
                p.i += 1;
                if let Some(Token::Name(_)) = p.peek() {
                    p.i += 1;
                }
                p.skip_to_selection_set()?;
                operations.push((is_mutation, p.selection_set(0)?));
            }
            Some(Token::Name(k)) if k == "fragment" => {
                p.i += 1;
                let name = match p.next() {
                    Some(Token::Name(n)) if n != "on" => n.clone(),
                    _ => return Err(GraphqlError::Syntax("fragment name")),
                };
                if p.next() != Some(&Token::Name("on".into())) {
                    return Err(GraphqlError::Syntax("fragment without `on`"));
                }
                match p.next() {
                    Some(Token::Name(_)) => {}
                    _ => return Err(GraphqlError::Syntax("fragment type condition")),
                }
                p.skip_to_selection_set()?;
                let items = p.selection_set(0)?;
                if fragments.insert(name.clone(), items).is_some() {
                    return Err(GraphqlError::DuplicateFragment(name));
                }
            }
            _ => return Err(GraphqlError::Syntax("unknown definition")),
        }
    }
    let mut out = Vec::new();
    let mut done = HashSet::new();
    for (_, items) in operations.iter().filter(|(m, _)| *m) {
        flatten(items, &fragments, &mut Vec::new(), &mut done, 0, &mut out)?;
    }
    Ok(out)
}

/// A selection at one level.
#[derive(Debug)]
enum Item {
    Field(MutationField),
    Spread(String),
    Inline(Vec<Item>),
}

/// Appends the fields of `items` to `out`, following spreads. Each fragment is expanded
/// once (`done`): spreading it again adds the same fields, and expanding it every time
/// would let a small document of fragments that each spread the next twice cost 2^n.
fn flatten(
    items: &[Item],
    fragments: &HashMap<String, Vec<Item>>,
    stack: &mut Vec<String>,
    done: &mut HashSet<String>,
    depth: usize,
    out: &mut Vec<MutationField>,
) -> Result<(), GraphqlError> {
    if depth > MAX_DEPTH {
        return Err(GraphqlError::TooComplex);
    }
    for item in items {
        match item {
            Item::Field(f) => out.push(f.clone()),
            Item::Inline(inner) => flatten(inner, fragments, stack, done, depth + 1, out)?,
            Item::Spread(name) => {
                let inner = fragments
                    .get(name)
                    .ok_or_else(|| GraphqlError::UnknownFragment(name.clone()))?;
                if stack.contains(name) {
                    // A cycle is invalid GraphQL; refusing it is the safe reading.
                    return Err(GraphqlError::Syntax("fragment cycle"));
                }
                if done.contains(name) {
                    continue;
                }
                stack.push(name.clone());
                flatten(inner, fragments, stack, done, depth + 1, out)?;
                stack.pop();
                done.insert(name.clone());
            }
        }
    }
    Ok(())
}

struct Parser<'t> {
    t: &'t [Token],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.t.get(self.i)
    }

    fn next(&mut self) -> Option<&Token> {
        let t = self.t.get(self.i);
        self.i += 1;
        t
    }

    /// Skip variable definitions and directives (anything, brackets balanced) up to the
    /// `{` of the selection set, which is left to read.
    fn skip_to_selection_set(&mut self) -> Result<(), GraphqlError> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                None => return Err(GraphqlError::Syntax("missing selection set")),
                Some(Token::Punct('{')) if depth == 0 => return Ok(()),
                Some(Token::Punct('(' | '[' | '{')) => depth += 1,
                Some(Token::Punct(')' | ']' | '}')) => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or(GraphqlError::Syntax("unbalanced brackets"))?;
                }
                Some(_) => {}
            }
            self.i += 1;
        }
    }

    /// The tokens of a balanced `( ... )` group starting at the current `(` (excluded).
    fn group(&mut self) -> Result<Vec<Token>, GraphqlError> {
        let start = self.i + 1;
        let mut depth = 0usize;
        loop {
            match self.next() {
                None => return Err(GraphqlError::Syntax("unbalanced brackets")),
                Some(Token::Punct('(' | '[' | '{')) => depth += 1,
                Some(Token::Punct(')' | ']' | '}')) => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or(GraphqlError::Syntax("unbalanced brackets"))?;
                    if depth == 0 {
                        return Ok(self.t.get(start..self.i - 1).unwrap_or_default().to_vec());
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// `@name(args)` repeated.
    fn directives(&mut self) -> Result<(), GraphqlError> {
        while self.peek() == Some(&Token::Punct('@')) {
            self.i += 1;
            match self.next() {
                Some(Token::Name(_)) => {}
                _ => return Err(GraphqlError::Syntax("directive name")),
            }
            if self.peek() == Some(&Token::Punct('(')) {
                self.group()?;
            }
        }
        Ok(())
    }

    /// `{ selection+ }` at the current position.
    fn selection_set(&mut self, depth: usize) -> Result<Vec<Item>, GraphqlError> {
        if depth > MAX_DEPTH {
            return Err(GraphqlError::TooComplex);
        }
        if self.next() != Some(&Token::Punct('{')) {
            return Err(GraphqlError::Syntax("expected `{`"));
        }
        let mut items = Vec::new();
        loop {
            match self.next().cloned() {
                Some(Token::Punct('}')) if !items.is_empty() => return Ok(items),
                Some(Token::Spread) => match self.peek().cloned() {
                    Some(Token::Name(n)) if n != "on" => {
                        self.i += 1;
                        self.directives()?;
                        items.push(Item::Spread(n));
                    }
                    Some(Token::Name(_)) => {
                        self.i += 1;
                        match self.next() {
                            Some(Token::Name(_)) => {}
                            _ => return Err(GraphqlError::Syntax("inline fragment type")),
                        }
                        self.directives()?;
                        items.push(Item::Inline(self.selection_set(depth + 1)?));
                    }
                    _ => {
                        self.directives()?;
                        items.push(Item::Inline(self.selection_set(depth + 1)?));
                    }
                },
                Some(Token::Name(first)) => {
                    let name = if self.peek() == Some(&Token::Punct(':')) {
                        self.i += 1;
                        match self.next() {
                            Some(Token::Name(n)) => n.clone(),
                            _ => return Err(GraphqlError::Syntax("field after alias")),
                        }
                    } else {
                        first
                    };
                    let args = if self.peek() == Some(&Token::Punct('(')) {
                        self.group()?
                    } else {
                        Vec::new()
                    };
                    self.directives()?;
                    if self.peek() == Some(&Token::Punct('{')) {
                        // Sub-selections are parsed (to find their end) and dropped.
                        self.selection_set(depth + 1)?;
                    }
                    items.push(Item::Field(MutationField { name, args }));
                }
                _ => return Err(GraphqlError::Syntax("selection")),
            }
        }
    }
}

/// The lexer. Commas, whitespace, line terminators, a BOM and comments are ignored.
pub fn tokenize(src: &str) -> Result<Vec<Token>, GraphqlError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if out.len() > MAX_TOKENS {
            return Err(GraphqlError::TooComplex);
        }
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
            }
            b'!' | b'$' | b'&' | b'(' | b')' | b':' | b'=' | b'@' | b'[' | b']' | b'{' | b'}'
            | b'|' => {
                out.push(Token::Punct(char::from(c)));
                i += 1;
            }
            b'.' => {
                if b.get(i..i + 3) != Some(b"...") {
                    return Err(GraphqlError::Lex(i));
                }
                out.push(Token::Spread);
                i += 3;
            }
            b'_' | b'a'..=b'z' | b'A'..=b'Z' => {
                let start = i;
                while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                out.push(Token::Name(src[start..i].to_owned()));
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'+' | b'-'))
                {
                    i += 1;
                }
                out.push(Token::Num(src[start..i].to_owned()));
            }
            b'"' if b.get(i..i + 3) == Some(b"\"\"\"") => {
                let (value, end) = block_string(src, i + 3)?;
                out.push(Token::Str(value));
                i = end;
            }
            b'"' => {
                let (value, end) = string(src, i + 1)?;
                out.push(Token::Str(value));
                i = end;
            }
            0xEF if b.get(i..i + 3) == Some(&[0xEF, 0xBB, 0xBF]) => i += 3,
            _ => return Err(GraphqlError::Lex(i)),
        }
    }
    Ok(out)
}

/// A `"..."` string from just after the opening quote; returns its value and the index
/// after the closing quote.
fn string(src: &str, mut i: usize) -> Result<(String, usize), GraphqlError> {
    let b = src.as_bytes();
    let mut out = String::new();
    loop {
        let Some(rest) = src.get(i..) else {
            return Err(GraphqlError::Lex(i));
        };
        let Some(ch) = rest.chars().next() else {
            return Err(GraphqlError::Lex(i));
        };
        match ch {
            '"' => return Ok((out, i + 1)),
            '\n' | '\r' => return Err(GraphqlError::Lex(i)),
            '\\' => {
                let esc = b.get(i + 1).copied().ok_or(GraphqlError::Lex(i))?;
                i += 2;
                match esc {
                    b'"' => out.push('"'),
                    b'\\' => out.push('\\'),
                    b'/' => out.push('/'),
                    b'b' => out.push('\u{8}'),
                    b'f' => out.push('\u{c}'),
                    b'n' => out.push('\n'),
                    b'r' => out.push('\r'),
                    b't' => out.push('\t'),
                    b'u' => {
                        let (c, next) = unicode_escape(src, i)?;
                        out.push(c);
                        i = next;
                    }
                    _ => return Err(GraphqlError::Lex(i)),
                }
            }
            c => {
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
}

/// `\uXXXX`, `\u{X...}`, or a surrogate pair `\uD83D\uDE00`, from just after `\u`.
fn unicode_escape(src: &str, i: usize) -> Result<(char, usize), GraphqlError> {
    let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| GraphqlError::Lex(i));
    if src.get(i..i + 1) == Some("{") {
        let close = src
            .get(i..)
            .and_then(|r| r.find('}'))
            .ok_or(GraphqlError::Lex(i))?;
        let v = hex(src.get(i + 1..i + close).ok_or(GraphqlError::Lex(i))?)?;
        return Ok((
            char::from_u32(v).ok_or(GraphqlError::Lex(i))?,
            i + close + 1,
        ));
    }
    let v = hex(src.get(i..i + 4).ok_or(GraphqlError::Lex(i))?)?;
    if (0xD800..0xDC00).contains(&v) && src.get(i + 4..i + 6) == Some("\\u") {
        let lo = hex(src.get(i + 6..i + 10).ok_or(GraphqlError::Lex(i))?)?;
        if (0xDC00..0xE000).contains(&lo) {
            let c = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            return Ok((char::from_u32(c).ok_or(GraphqlError::Lex(i))?, i + 10));
        }
    }
    Ok((char::from_u32(v).ok_or(GraphqlError::Lex(i))?, i + 4))
}

/// A `"""..."""` block string from just after the opening quotes (only `\"""` is an
/// escape; indentation is not stripped: the value is only searched, never executed).
fn block_string(src: &str, start: usize) -> Result<(String, usize), GraphqlError> {
    let mut i = start;
    let mut out = String::new();
    loop {
        let rest = src.get(i..).ok_or(GraphqlError::Lex(i))?;
        if rest.starts_with("\"\"\"") {
            return Ok((out, i + 3));
        }
        if rest.starts_with("\\\"\"\"") {
            out.push_str("\"\"\"");
            i += 4;
            continue;
        }
        let ch = rest.chars().next().ok_or(GraphqlError::Lex(start))?;
        out.push(ch);
        i += ch.len_utf8();
    }
}

/// The names of every variable referenced (`$name`) in `tokens`.
#[must_use]
pub fn variables_referenced(tokens: &[Token]) -> HashSet<&str> {
    tokens
        .windows(2)
        .filter_map(|w| match w {
            [Token::Punct('$'), Token::Name(n)] => Some(n.as_str()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(doc: &str) -> Vec<String> {
        mutation_fields(doc)
            .unwrap_or_else(|e| panic!("{doc:?}: {e}"))
            .into_iter()
            .map(|f| f.name)
            .collect()
    }

    #[test]
    fn plain_mutations_and_queries() {
        assert_eq!(
            names(
                "mutation { mergePullRequest(input: {pullRequestId: \"x\"}) { clientMutationId } }"
            ),
            ["mergePullRequest"]
        );
        assert!(names("{ viewer { login } }").is_empty());
        assert!(names("query Q($id: ID!) { node(id: $id) { id } }").is_empty());
        assert_eq!(
            names(
                "mutation M($i: MergePullRequestInput! = {pullRequestId: \"{\"}) @d(x: [1]) { a b }"
            ),
            ["a", "b"]
        );
    }

    #[test]
    fn attack_aliases_hide_nothing() {
        assert_eq!(
            names("mutation { ok: mergePullRequest(input: $i) { x } other: addComment { y } }"),
            ["mergePullRequest", "addComment"]
        );
        // An alias that *looks* denied over a harmless field is the harmless field.
        assert_eq!(
            names("mutation { mergePullRequest: addComment { x } }"),
            ["addComment"]
        );
    }

    #[test]
    fn attack_strings_and_comments_are_not_fields() {
        assert_eq!(
            names("mutation { addComment(input: {body: \"mergePullRequest { x }\"}) { x } }"),
            ["addComment"]
        );
        assert_eq!(
            names(
                "mutation { addComment(input: {body: \"\"\"\nmutation { mergePullRequest }\n\"\"\"}) { x } }"
            ),
            ["addComment"]
        );
        assert_eq!(
            names("mutation {\n # mergePullRequest\n addComment { x } }"),
            ["addComment"]
        );
        assert!(names("query { search(query: \"mutation { deleteRef }\") { x } }").is_empty());
        // A comment cannot swallow the real field: the newline ends it.
        assert_eq!(
            names("mutation { # harmless\nmergePullRequest(input: {}) { x } }"),
            ["mergePullRequest"]
        );
        // Escaped quotes do not end a string early.
        assert_eq!(
            names(r#"mutation { addComment(input: {body: "a\" } mergePullRequest { x"}) { x } }"#),
            ["addComment"]
        );
    }

    #[test]
    fn attack_fragments_and_inline_fragments_are_followed() {
        assert_eq!(
            names(
                "mutation { ...A } fragment A on Mutation { ...B } fragment B on Mutation { m: mergePullRequest { x } }"
            ),
            ["mergePullRequest"]
        );
        assert_eq!(
            names(
                "fragment A on Mutation { deleteRef(input: {}) { x } } mutation { ...A @include(if: true) }"
            ),
            ["deleteRef"]
        );
        assert_eq!(
            names(
                "mutation { ... on Mutation { updateRef { x } } ... @skip(if: false) { deleteRef { y } } }"
            ),
            ["updateRef", "deleteRef"]
        );
        assert!(matches!(
            mutation_fields("mutation { ...Missing }"),
            Err(GraphqlError::UnknownFragment(_))
        ));
        assert!(matches!(
            mutation_fields(
                "fragment A on Mutation { x } fragment A on Mutation { y } mutation { ...A }"
            ),
            Err(GraphqlError::DuplicateFragment(_))
        ));
        assert!(mutation_fields("fragment A on Mutation { ...A } mutation { ...A }").is_err());
    }

    /// Found by fuzz/graphql: 40 fragments that each spread the next twice made a 2 KB
    /// body cost 2^40 steps (the judge never returned: one agent request pinned a proxy
    /// worker and grew its memory without bound).
    #[test]
    fn attack_fragment_fan_out_is_linear() {
        let n = 40;
        let mut doc = String::from("mutation { ...F0 }\n");
        for i in 0..n {
            doc.push_str(&format!(
                "fragment F{i} on Mutation {{ ...F{} ...F{} }}\n",
                i + 1,
                i + 1
            ));
        }
        doc.push_str(&format!(
            "fragment F{n} on Mutation {{ mergePullRequest {{ x }} }}\n"
        ));
        assert_eq!(names(&doc), ["mergePullRequest"]);
        // A fragment spread from two places is still read (and a cycle still refused).
        assert_eq!(
            names(
                "mutation { a ...F ... on Mutation { ...F } } fragment F on Mutation { deleteRef { x } }"
            ),
            ["a", "deleteRef"]
        );
        assert!(mutation_fields("mutation { ...A ...B } fragment A on Mutation { x } fragment B on Mutation { ...A ...B }").is_err());
    }

    #[test]
    fn attack_several_operations_are_all_read() {
        assert_eq!(
            names(
                "query Q { viewer { login } } mutation A { addComment { x } } mutation B { mergePullRequest { x } }"
            ),
            ["addComment", "mergePullRequest"]
        );
    }

    #[test]
    fn attack_unparseable_documents_are_errors() {
        for bad in [
            "",
            "Mutation { mergePullRequest { x } }",
            "mutation { mergePullRequest { x }",
            "mutation { }",
            "mutation mergePullRequest",
            "type Mutation { x: Int }",
            "mutation { a(b: \"unterminated) { x } }",
            "mutation { a(b: \"x\\q\") }",
            "mutation { a ; b }",
            "mutation { a .. b }",
            "mutation { a(x: )) }",
        ] {
            assert!(mutation_fields(bad).is_err(), "{bad:?}");
        }
        let deep = format!("mutation {}{}", "{ a ".repeat(100), "}".repeat(100));
        assert_eq!(mutation_fields(&deep), Err(GraphqlError::TooComplex));
    }

    #[test]
    fn string_escapes_decode() {
        let t = tokenize(r#""\u0041PPROVE" "\u{41}B" "\uD83D\uDE00" """a\"""b""""#).unwrap();
        assert_eq!(
            t,
            [
                Token::Str("APPROVE".into()),
                Token::Str("AB".into()),
                Token::Str("😀".into()),
                Token::Str("a\"\"\"b".into()),
            ]
        );
    }

    #[test]
    fn arguments_and_variables_are_kept() {
        let f = mutation_fields(
            "mutation($e: Event) { addPullRequestReview(input: {event: $e, body: \"x\"}) { x } }",
        )
        .unwrap();
        assert_eq!(f[0].name, "addPullRequestReview");
        assert!(f[0].args.contains(&Token::Name("event".into())));
        assert_eq!(variables_referenced(&f[0].args), HashSet::from(["e"]));
    }
}
