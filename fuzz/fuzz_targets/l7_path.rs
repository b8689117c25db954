//! L7 request judging: path normalisation (`PathForms::analyse`) and `Policy::judge` /
//! `body_needed` with the github preset, plus the git smart-HTTP path parser.
//!
//! Input: the first byte picks a method, the rest is the request target (`path?query`).
//!
//! Invariants: never panics; at most 2 strict and 12 forms, strict forms among all, no
//! empty, `.` or `..` segment and no ASCII capital in any form; the method's case never
//! changes the verdict; a body is only asked for when the head passes; and **a request
//! denied by a rule stays denied** when its path is respelled the ways servers treat as
//! the same path: `./` inserted after a `/`, a `/` doubled, an unreserved character
//! percent-encoded. A git path parsed as a push is always seen by `is_push`.
#![no_main]

use airlock_fuzz::{API_GITHUB, Choices, GITHUB};
use airlock_policy::RequestView;
use airlock_policy::path::PathForms;
use airlock_proxy::gitpath::{self, Service};
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "get",
];

fn respell(path: &str, how: usize, choices: &mut Choices) -> Option<String> {
    let bytes = path.as_bytes();
    match how {
        0 | 1 => {
            let slashes: Vec<usize> = (0..bytes.len()).filter(|i| bytes[*i] == b'/').collect();
            let at = *slashes.get(choices.below(slashes.len()))?;
            let insert = if how == 0 { "./" } else { "/" };
            Some(format!("{}{insert}{}", &path[..=at], &path[at + 1..]))
        }
        _ => {
            let unreserved: Vec<usize> = (0..bytes.len())
                .filter(|i| bytes[*i].is_ascii_alphanumeric() || b"-._~".contains(&bytes[*i]))
                .collect();
            let at = *unreserved.get(choices.below(unreserved.len()))?;
            Some(format!(
                "{}%{:02X}{}",
                &path[..at],
                bytes[at],
                &path[at + 1..]
            ))
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let Ok(target) = std::str::from_utf8(rest) else {
        return;
    };
    let method = METHODS[usize::from(m) % METHODS.len()];
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };

    let forms = PathForms::analyse(path);
    if let Ok(f) = &forms {
        assert!((1..=2).contains(&f.strict().len()));
        assert!(f.all().len() <= 12);
        assert!(f.strict().iter().all(|s| f.all().contains(s)));
        for seg in f.all().iter().flatten() {
            assert!(
                !matches!(seg.as_str(), "" | "." | ".."),
                "{seg:?} in {path:?}"
            );
            assert!(!seg.bytes().any(|b| b.is_ascii_uppercase()), "{seg:?}");
        }
    }

    let view = RequestView {
        host: &API_GITHUB,
        method,
        path,
        query,
    };
    let verdict = GITHUB.judge(&view);
    let lower = method.to_ascii_lowercase();
    let other_case = RequestView {
        method: &lower,
        ..view
    };
    assert_eq!(
        GITHUB.judge(&other_case).is_pass(),
        verdict.is_pass(),
        "method case"
    );
    if GITHUB.body_needed(&view).is_some() {
        assert!(verdict.is_pass());
    }
    if !verdict.is_pass() {
        assert!(!GITHUB.judge_body(&view, b"{}").is_pass());
    }

    // Denied by a rule (not because the path is unjudgeable): every respelling is denied.
    if !verdict.is_pass() && forms.is_ok() {
        let mut choices = Choices::new(data);
        for how in 0..3 {
            for _ in 0..2 {
                let Some(p) = respell(path, how, &mut choices) else {
                    continue;
                };
                let v = GITHUB.judge(&RequestView { path: &p, ..view });
                assert!(
                    !v.is_pass(),
                    "{method} {path:?} is denied ({verdict:?}) but {p:?} passes"
                );
            }
        }
    }

    if let Some(req) = gitpath::parse(path, query) {
        assert!(!req.owner.is_empty() && !req.repo.is_empty());
        if req.service == Service::ReceivePack {
            assert!(gitpath::is_push(path, query), "{path:?} {query:?}");
        }
    }
});
