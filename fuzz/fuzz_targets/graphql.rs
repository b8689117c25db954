//! The GitHub preset's GraphQL judge: the mutation extractor (`graphql::mutation_fields`,
//! `tokenize`) and `Policy::judge_body` on `POST api.github.com/graphql`.
//!
//! The input is used twice: as a GraphQL document (wrapped in `{"query": ...}`), and as a
//! raw request body.
//!
//! Invariants: never panics; comments, commas and whitespace around a document change
//! nothing; a document the extractor cannot read is denied; a document whose mutation
//! operations run a denied mutation (`github::DENIED_MUTATIONS`, the prefixes) is denied,
//! alone and in a batch; a raw body that passes is strict JSON.
#![no_main]

use airlock_fuzz::{API_GITHUB, GITHUB};
use airlock_policy::RequestView;
use airlock_policy::github::{DENIED_MUTATION_PREFIXES, DENIED_MUTATIONS};
use airlock_policy::graphql::{mutation_fields, tokenize, variables_referenced};
use airlock_policy::json::parse_strict;
use libfuzzer_sys::fuzz_target;

fn denied(name: &str) -> bool {
    DENIED_MUTATIONS
        .iter()
        .any(|d| d.eq_ignore_ascii_case(name))
        || DENIED_MUTATION_PREFIXES.iter().any(|p| {
            name.get(..p.len())
                .is_some_and(|h| h.eq_ignore_ascii_case(p))
        })
}

fuzz_target!(|data: &[u8]| {
    let view = RequestView {
        host: &API_GITHUB,
        method: "POST",
        path: "/graphql",
        query: None,
    };
    let raw = GITHUB.judge_body(&view, data);
    if raw.is_pass() {
        assert!(
            parse_strict(data).is_ok(),
            "a body that is not strict JSON passed"
        );
    }

    let Ok(doc) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tokens) = tokenize(doc) {
        let _ = variables_referenced(&tokens);
    }
    let fields = mutation_fields(doc);
    let padded = format!("# airlock\n,{doc}\n ,");
    assert_eq!(
        mutation_fields(&padded).ok(),
        fields.clone().ok(),
        "padding changed {doc:?}"
    );

    let body = serde_json::json!({ "query": doc }).to_string();
    let verdict = GITHUB.judge_body(&view, body.as_bytes());
    let batch = format!("[{body}]");
    let batched = GITHUB.judge_body(&view, batch.as_bytes());
    match &fields {
        Err(_) => {
            assert!(!verdict.is_pass(), "unreadable document passed: {doc:?}");
            assert!(!batched.is_pass());
        }
        Ok(f) if f.iter().any(|f| denied(&f.name)) => {
            assert!(!verdict.is_pass(), "denied mutation passed: {doc:?}");
            assert!(!batched.is_pass());
        }
        Ok(_) => assert_eq!(
            verdict.is_pass(),
            batched.is_pass(),
            "batch differs: {doc:?}"
        ),
    }
});
