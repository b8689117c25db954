//! Which mutation fields a GraphQL document would run: the input of the GitHub preset's
//! GraphQL judge.
//!
//! The document is read by `apollo-parser` (a maintained parser of the GraphQL
//! specification, its lexical grammar included: `1abc`, `1.2.3` and `--1` are errors, as
//! the spec says), with a token limit ([`MAX_TOKENS`]) and a recursion limit
//! ([`MAX_DEPTH`]). Any error it reports is an error here, and the caller denies. From its
//! syntax tree [`mutation_fields`] lists the **top-level fields of every `mutation`
//! operation**, whatever hides them: aliases (`ok: mergePullRequest(...)`), fragment spreads
//! (`...F` with `fragment F on Mutation { mergePullRequest ... }`, chained, in any order),
//! inline fragments (`... on Mutation { ... }`, `... @include(if: true) { ... }`),
//! directives, variable definitions with default object values, several operations in one
//! document. Names inside strings, block strings and comments are never fields.
//!
//! Beyond the grammar, a document is refused when it has a type-system definition or
//! extension (`type Mutation { ... }`: GitHub executes none), spreads a fragment it does not
//! define, defines a fragment twice, spreads fragments in a cycle, or nests selections or
//! fragment spreads more than [`MAX_DEPTH`] deep. Query and subscription operations are
//! parsed (so that a malformed one is still an error) but their fields are not reported:
//! GitHub's mutations live on the `Mutation` type only.

use std::collections::{HashMap, HashSet};

use apollo_parser::cst::{self, CstNode};
use apollo_parser::{Parser, SyntaxKind, SyntaxNode};

/// Most nested selection sets (and values, list types) the parser enters, and most nested
/// fragment spreads followed.
pub const MAX_DEPTH: usize = 64;
/// Most lexical tokens in one document (whitespace, commas and comments included).
pub const MAX_TOKENS: usize = 200_000;

/// Why a document cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphqlError {
    /// Not GraphQL: the parser's first error (lexical or syntactic) and where it is.
    #[error("GraphQL syntax error at byte {index}: {message}")]
    Syntax {
        /// Byte offset in the document.
        index: usize,
        /// The parser's message.
        message: String,
    },
    /// GraphQL this judge does not accept (a type-system definition, a fragment cycle).
    #[error("GraphQL not accepted: {0}")]
    Unsupported(&'static str),
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
    /// A name (`[_A-Za-z][_0-9A-Za-z]*`), keywords and `true`/`false`/`null` included.
    Name(String),
    /// A string or block string value, escapes decoded (block strings as the spec's
    /// BlockStringValue: common indentation and blank first and last lines removed).
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

/// The document's syntax tree, or the first error the parser reported.
fn parse(document: &str) -> Result<cst::Document, GraphqlError> {
    let tree = Parser::new(document)
        .token_limit(MAX_TOKENS)
        .recursion_limit(MAX_DEPTH)
        .parse();
    if let Some(e) = tree.errors().next() {
        return Err(if e.is_limit() {
            GraphqlError::TooComplex
        } else {
            GraphqlError::Syntax {
                index: e.index(),
                message: e.message().to_owned(),
            }
        });
    }
    let doc = tree.document();
    // The spec's StringCharacter excludes line terminators; apollo-parser lets them into a
    // `"..."` string. Refused here, as GitHub's parser refuses them.
    let broken = doc
        .syntax()
        .descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .find(|t| {
            t.kind() == SyntaxKind::STRING
                && !t.text().starts_with("\"\"\"")
                && t.text().contains(['\n', '\r'])
        });
    if let Some(t) = broken {
        return Err(GraphqlError::Syntax {
            index: usize::from(t.text_range().start()),
            message: "a line terminator inside a string".into(),
        });
    }
    Ok(doc)
}

/// The top-level fields of every mutation operation in `document`, fragments resolved.
///
/// # Errors
/// A [`GraphqlError`] when the document cannot be judged (the caller must deny).
pub fn mutation_fields(document: &str) -> Result<Vec<MutationField>, GraphqlError> {
    let doc = parse(document)?;
    let mut mutations: Vec<Vec<Item>> = Vec::new();
    let mut fragments: HashMap<String, Vec<Item>> = HashMap::new();
    let mut definitions = 0usize;
    for definition in doc.definitions() {
        definitions += 1;
        match definition {
            cst::Definition::OperationDefinition(op) => {
                let items = selection_set(op.selection_set(), 0)?;
                let is_mutation = op
                    .operation_type()
                    .is_some_and(|t| t.mutation_token().is_some());
                if is_mutation {
                    mutations.push(items);
                }
            }
            cst::Definition::FragmentDefinition(f) => {
                let name = f
                    .fragment_name()
                    .and_then(|n| n.name())
                    .ok_or(GraphqlError::Unsupported("fragment without a name"))?
                    .text()
                    .to_string();
                let items = selection_set(f.selection_set(), 0)?;
                if fragments.insert(name.clone(), items).is_some() {
                    return Err(GraphqlError::DuplicateFragment(name));
                }
            }
            _ => return Err(GraphqlError::Unsupported("a type-system definition")),
        }
    }
    if definitions == 0 {
        return Err(GraphqlError::Unsupported("an empty document"));
    }
    let mut out = Vec::new();
    let mut done = HashSet::new();
    for items in &mutations {
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

/// The selections of a selection set (sub-selections of fields are not kept: only the
/// top level of a mutation runs mutations).
fn selection_set(set: Option<cst::SelectionSet>, depth: usize) -> Result<Vec<Item>, GraphqlError> {
    if depth > MAX_DEPTH {
        return Err(GraphqlError::TooComplex);
    }
    let set = set.ok_or(GraphqlError::Unsupported("a missing selection set"))?;
    let mut items = Vec::new();
    for selection in set.selections() {
        items.push(match selection {
            cst::Selection::Field(field) => {
                let name = field
                    .name()
                    .ok_or(GraphqlError::Unsupported("a field without a name"))?
                    .text()
                    .to_string();
                let args = field.arguments().map_or_else(Vec::new, |a| {
                    let mut t = tokens_of(a.syntax());
                    // Between the parentheses.
                    t.pop();
                    if !t.is_empty() {
                        t.remove(0);
                    }
                    t
                });
                Item::Field(MutationField { name, args })
            }
            cst::Selection::FragmentSpread(spread) => Item::Spread(
                spread
                    .fragment_name()
                    .and_then(|n| n.name())
                    .ok_or(GraphqlError::Unsupported("a spread without a name"))?
                    .text()
                    .to_string(),
            ),
            cst::Selection::InlineFragment(inline) => {
                Item::Inline(selection_set(inline.selection_set(), depth + 1)?)
            }
        });
    }
    if items.is_empty() {
        return Err(GraphqlError::Unsupported("an empty selection set"));
    }
    Ok(items)
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
                    return Err(GraphqlError::Unsupported("a fragment cycle"));
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

/// The tokens of a parsed document, as the parser read them. Whitespace, commas, a BOM and
/// comments are left out.
///
/// # Errors
/// A [`GraphqlError`] when the document is not GraphQL (as for [`mutation_fields`]).
pub fn tokenize(src: &str) -> Result<Vec<Token>, GraphqlError> {
    Ok(tokens_of(parse(src)?.syntax()))
}

/// The significant tokens under `node`, in order.
fn tokens_of(node: &SyntaxNode) -> Vec<Token> {
    node.descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter_map(|t| {
            let text = t.text();
            Some(match t.kind() {
                SyntaxKind::WHITESPACE | SyntaxKind::COMMENT | SyntaxKind::COMMA => return None,
                SyntaxKind::STRING => Token::Str(
                    t.parent()
                        .and_then(cst::StringValue::cast)
                        .map_or_else(|| text.to_owned(), |v| String::from(&v)),
                ),
                SyntaxKind::INT | SyntaxKind::FLOAT => Token::Num(text.to_owned()),
                SyntaxKind::SPREAD => Token::Spread,
                _ => match text.chars().next() {
                    Some(c) if c == '_' || c.is_ascii_alphabetic() => Token::Name(text.to_owned()),
                    Some(c) if text.len() == 1 => Token::Punct(c),
                    _ => return None,
                },
            })
        })
        .collect()
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
        let t =
            tokenize(r#"{ a(x: "\u0041PPROVE" y: "\u{41}B" z: "\uD83D\uDE00" w: """a\"""b""") }"#)
                .unwrap();
        let strings: Vec<&Token> = t.iter().filter(|t| matches!(t, Token::Str(_))).collect();
        assert_eq!(
            strings,
            [
                &Token::Str("APPROVE".into()),
                &Token::Str("AB".into()),
                &Token::Str("😀".into()),
                &Token::Str("a\"\"\"b".into()),
            ]
        );
    }

    /// Numbers as the spec's lexical grammar reads them: a name or a `.` right after a
    /// number is an error, not part of it, and `--1` is no number. The hand-written lexer
    /// this judge had took all three for numbers (issue 20): a document GitHub refuses was
    /// judged as if it ran.
    #[test]
    fn attack_numbers_outside_the_grammar_are_errors() {
        for bad in [
            "mutation { a(x: 1abc) { x } }",
            "mutation { a(x: 1.2.3) { x } }",
            "mutation { a(x: --1) { x } }",
            "mutation { a(x: 01) { x } }",
            "mutation { a(x: 1.) { x } }",
            "mutation { a(x: 1e) { x } }",
            "mutation { a(x: -) { x } }",
            "mutation { a(x: 1_0) { x } }",
            // Not numbers, but the same kind of leniency: a line break inside "...".
            "mutation { a(x: \"a\nb\") { x } }",
            "mutation { a(x: \"a\rb\") { x } }",
        ] {
            assert!(
                matches!(mutation_fields(bad), Err(GraphqlError::Syntax { .. })),
                "{bad:?}"
            );
        }
        let f = mutation_fields("mutation { a(x: -1, y: 1.5e-3, z: 0) { x } }").unwrap();
        assert_eq!(
            f[0].args
                .iter()
                .filter_map(|t| match t {
                    Token::Num(n) => Some(n.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            ["-1", "1.5e-3", "0"]
        );
    }

    /// The agent sends valid GraphQL that is not an executable document, or hides a
    /// mutation behind a schema definition: refused, never read as if it were a query.
    #[test]
    fn attack_type_system_definitions_are_refused() {
        for bad in [
            "type Mutation { mergePullRequest: Int }",
            "schema { mutation: M } mutation { mergePullRequest { x } }",
            "extend type Query { a: Int } { viewer { login } }",
            "directive @d on FIELD { viewer { login } }",
            "\"\"\"doc\"\"\" scalar S",
        ] {
            assert!(mutation_fields(bad).is_err(), "{bad:?}");
        }
    }

    /// A document past the token limit is refused before it is read.
    #[test]
    fn attack_token_flood_is_too_complex() {
        let doc = format!("{{ {} }}", "a ".repeat(MAX_TOKENS));
        assert_eq!(mutation_fields(&doc), Err(GraphqlError::TooComplex));
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
