//! What reading a request body costs the proxy (issue 21's benchmark): the secret
//! detectors (known formats, one `RegexSet` pass behind an Aho-Corasick prefilter), the
//! same as a policy changes them (built-ins' actions and hosts changed, nothing added: the
//! same set; four detectors of its own added; one without a literal prefix added), the
//! workspace's exact needles, and the signals (encoded runs, byte entropy), per MiB of a
//! large body and per small JSON request, each alone and all together. Prints a table
//! (median of rounds). Run: `cargo bench -p airlock-proxy --bench scan`.
//!
//! Since the searches read what the upstream reads (every encoding undone: the workspace's
//! values in every form without regard to case, the bytes decoded by `normalize`, the AWS
//! pair in either order; runs at any line width and in any 16 symbols), the table keeps
//! the path before that as its first rows (`legacy` below: the version-2 built-in set, the
//! four forms of each value matched byte for byte, nothing decoded, runs wrapped at 60
//! columns only), so one run prints both; and what a gzip'd upload adds (decoding it).
//!
//! The set keeps a literal prefilter only while every pattern in it begins with few
//! literals: a policy's detector that begins with a class run, or a case-insensitive word
//! (the 4 added here include `(?i)vault_token`), makes every byte go through the set's
//! automaton, which the rows of a policy adding detectors show (the built-ins that would
//! do so are in the set as literal-led triggers: `airlock_policy::detect`).
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
    let code = concat!(
        include_str!("../src/intercept/mod.rs"),
        include_str!("../src/intercept/tls.rs"),
        include_str!("../src/intercept/server.rs"),
        include_str!("../src/intercept/route.rs"),
        include_str!("../src/intercept/ctx.rs"),
        include_str!("../src/intercept/request.rs"),
        include_str!("../src/intercept/git.rs"),
        include_str!("../src/intercept/request_body.rs"),
        include_str!("../src/intercept/streamed.rs"),
        include_str!("../src/intercept/forward.rs"),
        include_str!("../src/intercept/upgrade.rs"),
    );
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

/// The body search as it was before the searches decoded anything: a faithful copy of the
/// version-2 path (the formats' `RegexSet`, the workspace's needles in their four forms,
/// case-sensitive; signals with runs continued only after 60-column lines).
mod legacy {
    use aho_corasick::{AhoCorasick, MatchKind};
    use regex::bytes::RegexSet;

    /// The version-2 built-in patterns, as the policy compiled them (ASCII mode).
    const BUILTIN_V2: &[&str] = &[
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
        r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b",
        r"(?s)\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b.{0,100}?(?:^|[^A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+=]|$)",
        r#"(?i)aws_?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+]{40}\b"#,
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
        r#""private_key_id"\s*:\s*"[a-f0-9]{40}""#,
        r"\bxox[baprs]-[A-Za-z0-9]{10,}-[A-Za-z0-9-]{10,}",
        r"\b(?:sk|rk)_live_[A-Za-z0-9]{24,}\b",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,}",
        r"\bsk-ant-(?:api|admin|oat)\d{2}-[A-Za-z0-9_-]{80,}",
        r"\bnpm_[A-Za-z0-9]{36}\b",
        r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
        r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}",
    ];

    pub struct Detectors {
        set: RegexSet,
        exact: AhoCorasick,
    }

    impl Detectors {
        pub fn new(values: &[String]) -> Self {
            let set = RegexSet::new(BUILTIN_V2.iter().map(|p| format!("(?-u){p}"))).expect("set");
            let mut needles: Vec<Vec<u8>> = Vec::new();
            for v in values {
                for f in forms(v.as_bytes()) {
                    if !needles.contains(&f) {
                        needles.push(f);
                    }
                }
            }
            let exact = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&needles)
                .expect("needles");
            Self { set, exact }
        }

        pub fn needles(&self) -> usize {
            self.exact.patterns_len()
        }

        pub fn any(&self, bytes: &[u8]) -> bool {
            self.set.is_match(bytes) || self.exact.find(bytes).is_some()
        }
    }

    /// As is, percent-encoded (two ways), JSON-escaped, and the base64 stable runs.
    fn forms(value: &[u8]) -> Vec<Vec<u8>> {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let percent = |lower: bool| -> Vec<u8> {
            let mut out = Vec::new();
            for &b in value {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    out.push(b);
                } else if lower {
                    out.extend_from_slice(format!("%{b:02x}").as_bytes());
                } else {
                    out.extend_from_slice(format!("%{b:02X}").as_bytes());
                }
            }
            out
        };
        let json = serde_json::to_string(&String::from_utf8_lossy(value)).expect("json");
        let mut out = vec![
            value.to_vec(),
            percent(false),
            percent(true),
            json.as_bytes()[1..json.len() - 1].to_vec(),
        ];
        for shift in 0..3 {
            let mut shifted = vec![0u8; shift];
            shifted.extend_from_slice(value);
            let first = (8 * shift).div_ceil(6);
            let end = 8 * (shift + value.len()) / 6;
            if end < first + 12 {
                continue;
            }
            for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                out.push(engine.encode(&shifted).as_bytes()[first..end].to_vec());
            }
        }
        out
    }

    /// The version-2 signals: base64 and hex runs (a break continues one only after a
    /// 60-column line) and the byte histogram.
    pub fn signals(bytes: &[u8]) -> (usize, usize, f64) {
        let (mut b64, mut b64_line, mut hex, mut hex_line) = (0usize, 0usize, 0usize, 0usize);
        let (mut longest_b64, mut longest_hex) = (0usize, 0usize);
        let mut in_break = false;
        let mut histogram = [0u64; 256];
        for &b in bytes {
            histogram[usize::from(b)] += 1;
            if b == b'\n' || b == b'\r' {
                if !in_break {
                    if b64_line < 60 {
                        longest_b64 = longest_b64.max(b64);
                        b64 = 0;
                    }
                    if hex_line < 60 {
                        longest_hex = longest_hex.max(hex);
                        hex = 0;
                    }
                    b64_line = 0;
                    hex_line = 0;
                }
                in_break = true;
                continue;
            }
            in_break = false;
            let in_b64 = usize::from(
                b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'='),
            );
            let in_hex = usize::from(b.is_ascii_hexdigit());
            b64 = (b64 + 1) * in_b64;
            b64_line = (b64_line + 1) * in_b64;
            hex = (hex + 1) * in_hex;
            hex_line = (hex_line + 1) * in_hex;
            longest_b64 = longest_b64.max(b64);
            longest_hex = longest_hex.max(hex);
        }
        #[allow(clippy::cast_precision_loss)]
        let n = bytes.len().max(1) as f64;
        #[allow(clippy::cast_precision_loss)]
        let bits = histogram
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / n) * (c as f64 / n).log2())
            .sum();
        (longest_b64, longest_hex, bits)
    }
}

fn main() {
    let host = Host::parse("registry.example.com").expect("host");
    let builtin = Detectors::builtin().expect("detectors");
    let changed = Detectors::new(&policy(0, false), &[]).expect("detectors");
    let added = Detectors::new(&policy(4, false), &[]).expect("detectors");
    let bare = Detectors::new(&policy(0, true), &[]).expect("detectors");
    let with_ws = Detectors::with_workspace(&workspace()).expect("detectors");
    let ws_label = format!(
        "secret detectors + 20 workspace values ({} needles: every form, any case; as sent and decoded)",
        with_ws.workspace_needles()
    );
    let values: Vec<String> = workspace()
        .iter()
        .map(|w| w.value.expose().to_owned())
        .collect();
    let old = legacy::Detectors::new(&values);
    let old_label = format!(
        "before: secret detectors + 20 workspace values ({} needles, as sent only)",
        old.needles()
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
    let old_detectors = |b: &[u8]| {
        black_box(old.any(b));
    };
    let old_signals = |b: &[u8]| {
        if b.len() >= 4096 {
            black_box(legacy::signals(b));
        }
    };
    let old_all = |b: &[u8]| {
        old_detectors(b);
        old_signals(b);
    };
    let decoded = |b: &[u8]| {
        black_box(airlock_proxy::normalize::Decoded::of(b, 512));
    };
    // An upload sent gzip'd: decoding it first, then everything above on what it decodes to.
    let gz_large = gzip(&large);
    let gz_small = gzip(&small);
    let coded = |b: &[u8]| {
        let plain = airlock_proxy::decode::decode_all(
            &[airlock_proxy::decode::Coding::Gzip],
            b,
            airlock_proxy::decode::REQUEST,
        )
        .expect("gzip");
        all(&plain);
    };
    println!(
        "| body check (honest bodies; median of {ROUNDS} rounds) | ms per MiB | µs per 1 KiB request |"
    );
    println!("|---|---|---|");
    for (name, f) in [
        (old_label.as_str(), &old_detectors as &dyn Fn(&[u8])),
        (
            "before: signals (runs wrapped at 60 columns, byte entropy)",
            &old_signals,
        ),
        ("before: all of the above", &old_all),
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
        (
            "of which: decoding escapes, hex and spacing (normalize)",
            &decoded,
        ),
        (
            "signals: encoded runs (any width, any 16 symbols) + byte entropy",
            &signals,
        ),
        ("all of the above (after)", &all),
    ] {
        println!("| {name} | {:.2} | {:.2} |", per_mib(f), per_small(f));
    }
    let per_mib_coded = median(|| coded(black_box(&gz_large))) * 1e3;
    let per_small_coded = median(|| {
        for _ in 0..reps {
            coded(black_box(&gz_small));
        }
    }) * 1e6
        / f64::from(reps);
    println!(
        "| the same, the upload sent gzip'd (decoded first; {} and {} bytes on the wire) | {per_mib_coded:.2} | {per_small_coded:.2} |",
        gz_large.len(),
        gz_small.len()
    );
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}
