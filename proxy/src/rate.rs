//! Rate limits: a token bucket per session and host (`[limits]` in the policy).
//!
//! Every connection the agent opens (`CONNECT`, plain HTTP, base URL, transparent) and
//! every request read in an intercepted connection takes one token from the bucket of its
//! session (the client's uid) and host, before any policy work; an empty bucket refuses it
//! `rate-limited`. The bucket holds `request_burst` tokens and refills at
//! `requests_per_second`, read from the policy in force at each take (a reload applies at
//! once; a bucket keeps its level). The git service port is never limited here.
//!
//! The table is bounded: past [`MAX_BUCKETS`] keys, full buckets (which hold no history) are
//! dropped; if none is full, a new key shares one overflow bucket per session, so varying
//! hosts cannot grow memory or reset a bucket.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use airlock_policy::host::Host;
use airlock_policy::limits::Limits;

use crate::limits::Client;

/// Most (session, host) buckets kept.
pub const MAX_BUCKETS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Refilled to `now`, at most `burst`.
    fn refill(&mut self, now: Instant, l: Limits) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = f64::from(l.requests_per_second)
            .mul_add(dt, self.tokens)
            .min(f64::from(l.request_burst));
        self.at = now;
    }
}

/// The buckets of one proxy.
#[derive(Debug, Default)]
pub struct Rate {
    buckets: Mutex<HashMap<(Client, Option<Host>), Bucket>>,
}

impl Rate {
    /// Takes one token for `who` to `host` at `now` under `l`; `Err` says how long until the
    /// next token (at most one second for any allowed `requests_per_second`).
    ///
    /// # Errors
    /// The wait before a token is there, when the bucket is empty.
    pub fn take(&self, who: Client, host: &Host, l: Limits, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let mut key = (who, Some(host.clone()));
        if !buckets.contains_key(&key) && buckets.len() >= MAX_BUCKETS {
            let full = f64::from(l.request_burst);
            buckets.retain(|_, b| {
                let mut b = *b;
                b.refill(now, l);
                b.tokens < full
            });
            if buckets.len() >= MAX_BUCKETS {
                key = (who, None);
            }
        }
        let b = buckets.entry(key).or_insert(Bucket {
            tokens: f64::from(l.request_burst),
            at: now,
        });
        b.refill(now, l);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - b.tokens) / f64::from(l.requests_per_second);
        Err(Duration::from_secs_f64(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    const L: Limits = Limits {
        requests_per_second: 10,
        request_burst: 5,
        ..Limits::DEFAULT
    };

    #[test]
    fn a_burst_passes_then_the_rate_and_each_session_and_host_has_its_own_bucket() {
        let r = Rate::default();
        let t0 = Instant::now();
        let a = Client::Uid(1000);
        for _ in 0..5 {
            assert!(r.take(a, &host("x.test"), L, t0).is_ok());
        }
        let wait = r.take(a, &host("x.test"), L, t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        // Other hosts and other sessions are untouched.
        assert!(r.take(a, &host("y.test"), L, t0).is_ok());
        assert!(r.take(Client::Uid(1001), &host("x.test"), L, t0).is_ok());
        // A tenth of a second later one more token is there, and only one.
        let t1 = t0 + Duration::from_millis(100);
        assert!(r.take(a, &host("x.test"), L, t1).is_ok());
        assert!(r.take(a, &host("x.test"), L, t1).is_err());
        // A reload that raises the rate applies at the next take; the level is kept.
        let fast = Limits {
            requests_per_second: 1000,
            ..L
        };
        assert!(
            r.take(a, &host("x.test"), fast, t1 + Duration::from_millis(2))
                .is_ok()
        );
    }

    #[test]
    fn varying_hosts_neither_grows_the_table_nor_resets_a_bucket() {
        let r = Rate::default();
        let t0 = Instant::now();
        let a = Client::Uid(1000);
        for i in 0..MAX_BUCKETS {
            // Each host spends a token: no bucket is full, none can be dropped.
            assert!(r.take(a, &host(&format!("h{i}.test")), L, t0).is_ok());
        }
        // New hosts now share one overflow bucket: 5 at once, then refused.
        let shared: Vec<bool> = (0..6)
            .map(|i| r.take(a, &host(&format!("new{i}.test")), L, t0).is_ok())
            .collect();
        assert_eq!(shared, [true, true, true, true, true, false]);
        assert_eq!(r.buckets.lock().unwrap().len(), MAX_BUCKETS + 1);
        // Once buckets refill, full ones are dropped and new hosts get their own again.
        let later = t0 + Duration::from_secs(1);
        assert!(r.take(a, &host("fresh.test"), L, later).is_ok());
        assert!(r.buckets.lock().unwrap().len() < 10);
    }
}
