//! What reading a request body costs the proxy (issue 21's benchmark): the secret
//! detectors (known formats, one `RegexSet` pass behind an Aho-Corasick prefilter), the
//! same as a policy changes them (built-ins' actions and hosts changed, nothing added: the
//! same set; four detectors of its own added; one without a literal prefix added), the
//! workspace's exact needles, and the signals (encoded runs, byte entropy), per MiB of a
//! large body and per small JSON request, each alone and all together. Prints a table
//! (median of rounds). Run: `cargo bench -p airlock-proxy --bench scan`.
//!
//! The bodies are honest (source code, prose, JSON): the cost that every request pays.
//! A hit costs more (the detector's full regex), but a hit ends the request.

#![allow(clippy::expect_used)] // a bench that cannot build its detectors has nothing to measure

use std::hint::black_box;
use std::time::{Duration, Instant};

use airlock_handoff::{Secret, WorkspaceSecret};
use airlock_policy::Host;
use airlock_policy::signals::Signals;
use airlock_proxy::detect::Detectors;
use airlock_proxy::signal;

const ROUNDS: usize = 9;

/// Median seconds of `ROUNDS` runs of `f`.
fn median(mut f: impl FnMut()) -> f64 {
    let mut times: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[ROUNDS / 2].as_secs_f64()
}

/// About 1 MiB of what agents upload: source code and prose.
fn large_body() -> Vec<u8> {
    let code = include_str!("../src/intercept.rs");
    let mut out = Vec::with_capacity(1 << 20);
    while out.len() < 1 << 20 {
        out.extend_from_slice(code.as_bytes());
    }
    out.truncate(1 << 20);
    out
}

/// A small API request: 1 KiB of JSON.
fn small_body() -> Vec<u8> {
    let mut s = String::from("{\"model\":\"m\",\"messages\":[");
    while s.len() < 1000 {
        s.push_str("{\"role\":\"user\",\"content\":\"run the tests and fix the failure\"},");
    }
    s.push_str("{}]}");
    s.into_bytes()
}

fn workspace() -> Vec<WorkspaceSecret> {
    (0..20)
        .map(|i| WorkspaceSecret {
            file: ".env".into(),
            name: format!("KEY_{i}"),
            detector: None,
            value: Secret::new(format!("workspace-value-{i}-x9f3k2")),
        })
        .collect()
}

/// A policy that changes built-in detectors (an action, a provider host) and adds `added`
/// detectors of its own (typical vendor-token shapes, each with a literal prefix), and
/// `bare` a detector with none (a hex run: searched from every position).
fn policy(added: usize, bare: bool) -> airlock_policy::secrets::Secrets {
    let mut text = String::from(
        "[sandbox]\nname = \"b\"\n[secrets]\nallow = [\"xoxb-000000000000-EXAMPLEONLY\"]\n\
         [[detectors]]\nname = \"slack-token\"\nhosts = [\"hooks.example.com\"]\n\
         [[detectors]]\nname = \"stripe-live-key\"\naction = \"log\"\n",
    );
    let shapes = [
        r"\bacme_[A-Za-z0-9]{32}\b",
        r"\bdd[a-z]{2}_[A-Fa-f0-9]{40}\b",
        r"(?i)vault_token\s*[:=]\s*hvs\.[A-Za-z0-9_-]{24,}",
        r"\bsq0csp-[A-Za-z0-9_-]{43}\b",
    ];
    for (i, p) in shapes.iter().cycle().take(added).enumerate() {
        text.push_str(&format!(
            "[[detectors]]\nname = \"own-{i}\"\npattern = '{p}'\nhosts = [\"api.example.com\"]\n"
        ));
    }
    if bare {
        text.push_str("[[detectors]]\nname = \"bare-hex\"\npattern = '\\b[a-f0-9]{40}\\b'\n");
    }
    airlock_policy::Policy::parse(&text, std::path::Path::new("bench.toml"))
        .expect("policy")
        .secrets
}

fn main() {
    let host = Host::parse("registry.example.com").expect("host");
    let builtin = Detectors::builtin().expect("detectors");
    let changed = Detectors::new(&policy(0, false), &[]).expect("detectors");
    let added = Detectors::new(&policy(4, false), &[]).expect("detectors");
    let bare = Detectors::new(&policy(0, true), &[]).expect("detectors");
    let with_ws = Detectors::with_workspace(&workspace()).expect("detectors");
    let ws_label = format!(
        "secret detectors + 20 workspace values ({} needles: every form)",
        with_ws.workspace_needles()
    );
    let large = large_body();
    let small = small_body();
    let reps = 2_000; // small requests per round

    let per_mib = |f: &dyn Fn(&[u8])| median(|| f(black_box(&large))) * 1e3; // ms per MiB
    let per_small = |f: &dyn Fn(&[u8])| {
        median(|| {
            for _ in 0..reps {
                f(black_box(&small));
            }
        }) * 1e6
            / f64::from(reps) // µs per request
    };
    let detectors = |b: &[u8]| {
        black_box(builtin.foreign(b, &host));
    };
    let detectors_changed = |b: &[u8]| {
        black_box(changed.foreign(b, &host));
    };
    let detectors_added = |b: &[u8]| {
        black_box(added.foreign(b, &host));
    };
    let detectors_bare = |b: &[u8]| {
        black_box(bare.foreign(b, &host));
    };
    let detectors_ws = |b: &[u8]| {
        black_box(with_ws.foreign(b, &host));
    };
    // As the pipeline reads a body whole (a body shorter than any signal needs is not read).
    let signals = |b: &[u8]| {
        black_box(signal::of(Signals::default(), b));
    };
    let all = |b: &[u8]| {
        detectors_ws(b);
        signals(b);
    };
    println!(
        "| body check (honest bodies; median of {ROUNDS} rounds) | ms per MiB | µs per 1 KiB request |"
    );
    println!("|---|---|---|");
    for (name, f) in [
        (
            "secret detectors, built-in formats",
            &detectors as &dyn Fn(&[u8]),
        ),
        (
            "secret detectors, a policy changing built-ins, adding none",
            &detectors_changed,
        ),
        (
            "secret detectors, a policy adding 4 of its own",
            &detectors_added,
        ),
        (
            "secret detectors, a policy adding 1 without a literal prefix",
            &detectors_bare,
        ),
        (ws_label.as_str(), &detectors_ws),
        ("signals: encoded runs + byte entropy", &signals),
        ("all of the above", &all),
    ] {
        println!("| {name} | {:.2} | {:.2} |", per_mib(f), per_small(f));
    }
}
