//! What a new intercepted host costs the proxy before its first byte: minting its leaf
//! (key, certificate signed by the appliance CA) and building its TLS server
//! configuration, and what a cached host costs. Prints a table (µs per host, median of
//! rounds). Run: `cargo bench -p airlock-proxy --bench leaf`.

#![allow(clippy::expect_used)] // a bench that cannot mint has nothing to measure

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use airlock_proxy::ca::Ca;
use airlock_proxy::leaf::{Leaves, mint};

const HOSTS: usize = 200;
const ROUNDS: usize = 7;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6 / HOSTS as f64
}

fn rounds(mut f: impl FnMut(usize)) -> f64 {
    let mut times = Vec::with_capacity(ROUNDS);
    for r in 0..ROUNDS {
        let t = Instant::now();
        for i in 0..HOSTS {
            f(r * HOSTS + i);
        }
        times.push(t.elapsed());
    }
    median(times)
}

fn main() {
    let ca = Arc::new(Ca::generate().expect("CA"));
    let now = SystemTime::now();
    let mint_us = rounds(|i| {
        mint(&ca, &format!("h{i}.bench.test"), now).expect("mint");
    });
    let leaves = Leaves::new(Arc::clone(&ca), 1 << 20);
    let new_host_us = rounds(|i| {
        leaves
            .server_config(&format!("n{i}.bench.test"))
            .expect("config");
    });
    let cached_us = rounds(|i| {
        leaves
            .server_config(&format!("n{}.bench.test", i % HOSTS))
            .expect("config");
    });
    println!("| step (per host, median of {ROUNDS} rounds of {HOSTS}) | µs |");
    println!("|---|---|");
    println!("| mint: leaf key + certificate signed by the CA | {mint_us:.1} |");
    println!("| new host: mint + TLS server configuration, cached | {new_host_us:.1} |");
    println!("| cached host: configuration from the cache | {cached_us:.2} |");
}
