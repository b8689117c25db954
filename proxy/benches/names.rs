//! What judging a name costs the proxy (`names::judge`: every name the agent asks, on the
//! DNS filter and every proxy path, before it is resolved), and what removing the headers
//! only a proxy may set costs a request (`hop::strip_claims`). Prints a table (median of
//! rounds, per name or per request). Run: `cargo bench -p airlock-proxy --bench names`.
//!
//! The names are honest ones (the cost every query pays): an exact name (not judged), a
//! CDN name under a wildcard, and a long wildcard name, each with no workspace values and
//! with 64 of them (every one a needle in two forms).

#![allow(clippy::expect_used)] // a bench that cannot build its rules has nothing to measure

use std::hint::black_box;
use std::time::{Duration, Instant};

use airlock_handoff::{Secret, WorkspaceSecret};
use airlock_policy::{Host, Policy};
use airlock_proxy::detect::Detectors;
use airlock_proxy::names::{Budget, NameNeedles, NameRules, judge};
use http::{HeaderMap, HeaderName, HeaderValue};

const ROUNDS: usize = 9;
const PER_ROUND: u32 = 20_000;

/// Median nanoseconds per call of `f` over `ROUNDS` rounds.
fn per_call(mut f: impl FnMut()) -> f64 {
    let mut times: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                f();
            }
            t.elapsed() / PER_ROUND
        })
        .collect();
    times.sort();
    times[ROUNDS / 2].as_secs_f64() * 1e9
}

fn workspace(n: usize) -> Vec<WorkspaceSecret> {
    (0..n)
        .map(|i| WorkspaceSecret {
            file: ".env".into(),
            name: format!("KEY_{i}"),
            detector: None,
            value: Secret::new(format!("value-{i:04}-q8Zr3kLm9Tx2Vb7Wn")),
        })
        .collect()
}

fn main() {
    let policy = Policy::parse(
        "[sandbox]\nname = \"b\"\n[network]\nallow = [\"api.anthropic.com\", \"*.githubusercontent.com\", \"*.amazonaws.com\"]\ndns_name_budget = 1048576\n",
        std::path::Path::new("bench.toml"),
    )
    .expect("the bench policy parses");
    let names = [
        ("exact name", "api.anthropic.com"),
        ("wildcard, short", "objects.githubusercontent.com"),
        (
            "wildcard, long",
            "github-production-release-asset-2e65be.s3.us-east-1.amazonaws.com",
        ),
    ];
    println!("{:<40} {:>12}", "name check", "ns per name");
    for needles in [0, 64] {
        let secrets = workspace(needles);
        let detectors = Detectors::with_workspace(&secrets).expect("detectors");
        let name_needles = NameNeedles::new(&detectors, &secrets).expect("needles");
        let rules = NameRules {
            policy: &policy,
            detectors: &detectors,
            needles: &name_needles,
        };
        let budget = Budget::default();
        for (label, name) in names {
            let host = Host::parse(name).expect("host");
            let ns = per_call(|| {
                black_box(judge(black_box(rules), &budget, black_box(&host)));
            });
            println!(
                "{:<40} {ns:>12.0}",
                format!("{label}, {needles} workspace values")
            );
        }
    }
    // The headers Claude Code's requests carry, and a few an agent might add.
    let honest: [(&str, &str); 18] = [
        ("host", "api.anthropic.com"),
        ("accept", "application/json"),
        ("content-type", "application/json"),
        ("user-agent", "claude-cli/1.0.0 (external, cli)"),
        ("x-api-key", "sk-ant-placeholder"),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "claude-code-20250219"),
        ("x-app", "cli"),
        ("x-stainless-lang", "js"),
        ("x-stainless-package-version", "0.39.0"),
        ("x-stainless-os", "Linux"),
        ("x-stainless-arch", "x64"),
        ("x-stainless-runtime", "node"),
        ("x-stainless-runtime-version", "v22.0.0"),
        ("x-stainless-retry-count", "0"),
        ("x-stainless-timeout", "600"),
        ("accept-encoding", "gzip, deflate, br"),
        ("content-length", "1024"),
    ];
    let mut base = HeaderMap::new();
    for (k, v) in honest {
        base.append(
            HeaderName::from_static(k),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    let mut claims = base.clone();
    for k in ["x-forwarded-for", "x-sandbox-id", "via"] {
        claims.append(HeaderName::from_static(k), HeaderValue::from_static("1"));
    }
    let listed = Policy::parse(
        "[sandbox]\nname = \"b\"\n[network]\nstrip_headers = [\"x-corp-user\", \"x-tenant-*\"]\n",
        std::path::Path::new("bench.toml"),
    )
    .expect("the bench policy parses");
    println!(
        "{:<40} {:>12}",
        "header strip (18 headers)", "ns per request"
    );
    for (label, headers, network) in [
        ("honest, built-in list", &base, &policy.network),
        ("honest, policy list too", &base, &listed.network),
        ("three claims removed", &claims, &policy.network),
    ] {
        let ns = per_call(|| {
            let mut h = headers.clone();
            airlock_proxy::hop::strip_claims(&mut h, network);
            black_box(h);
        });
        let clone = per_call(|| {
            black_box(headers.clone());
        });
        println!("{label:<40} {:>12.0}", ns - clone);
    }
}
