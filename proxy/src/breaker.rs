//! Circuit breakers: one per upstream (host and port), so that an upstream that keeps
//! failing is answered at once instead of being hammered (`[limits] circuit_failures`,
//! `circuit_cooldown_seconds`).
//!
//! After `circuit_failures` consecutive failures (a connection that could not be made, a
//! `5xx` answer) the circuit opens: every request to that upstream is refused
//! `upstream-circuit-open` (`503`) for the cool-down. Then one request goes through as a
//! probe (half-open): its success closes the circuit, its failure opens it again. A probe
//! that never reports (its client hung up) is replaced after another cool-down. Other
//! upstreams are never affected. The git service port is not judged here.
//!
//! The table is bounded ([`MAX_CIRCUITS`]): closed circuits with no failure hold no state,
//! and past the bound the oldest-touched closed ones are forgotten first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use airlock_policy::limits::Limits;

use crate::decide::Target;

/// Most circuits with state kept.
pub const MAX_CIRCUITS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Circuit {
    /// Consecutive failures.
    failures: u32,
    /// Open until then (then half-open).
    open_until: Option<Instant>,
    /// A half-open probe went out then.
    probing: Option<Instant>,
    touched: Instant,
}

/// Why a request was not let through: the circuit is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// The consecutive failures that opened it.
    pub failures: u32,
    /// How long until a probe may go.
    pub remaining: Duration,
}

/// The circuits of one proxy.
#[derive(Debug, Default)]
pub struct Breakers {
    circuits: Mutex<HashMap<Target, Circuit>>,
}

impl Breakers {
    /// Whether a request to `target` may go at `now`.
    ///
    /// # Errors
    /// [`Open`] while the circuit is open, or half-open with its probe out.
    pub fn check(&self, target: &Target, l: Limits, now: Instant) -> Result<(), Open> {
        let mut circuits = self.circuits.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(c) = circuits.get_mut(target) else {
            return Ok(());
        };
        let Some(until) = c.open_until else {
            return Ok(());
        };
        let cooldown = Duration::from_secs(u64::from(l.circuit_cooldown_seconds));
        if now < until {
            return Err(Open {
                failures: c.failures,
                remaining: until - now,
            });
        }
        match c.probing {
            // One probe at a time; a probe that never reported is replaced.
            Some(at) if now.saturating_duration_since(at) < cooldown => Err(Open {
                failures: c.failures,
                remaining: cooldown.saturating_sub(now.saturating_duration_since(at)),
            }),
            _ => {
                c.probing = Some(now);
                c.touched = now;
                Ok(())
            }
        }
    }

    /// A connection to `target` made (`ok`) or not. A failure counts; a success closes the
    /// circuit only for a tunnel that is not intercepted (an intercepted connection's
    /// answers say whether the upstream works: a reachable upstream answering `5xx` still
    /// fails).
    pub fn connected(&self, target: &Target, ok: bool, intercepted: bool, l: Limits) {
        if !ok || !intercepted {
            self.report(target, ok, l, Instant::now());
        }
    }

    /// What became of a request to `target`: `ok` is a connection made and an answer
    /// below `500`.
    pub fn report(&self, target: &Target, ok: bool, l: Limits, now: Instant) {
        let mut circuits = self.circuits.lock().unwrap_or_else(PoisonError::into_inner);
        if ok {
            // A closed circuit with no failure holds no state.
            circuits.remove(target);
            return;
        }
        if !circuits.contains_key(target) && circuits.len() >= MAX_CIRCUITS {
            forget_oldest_closed(&mut circuits);
            if circuits.len() >= MAX_CIRCUITS {
                return;
            }
        }
        let c = circuits.entry(target.clone()).or_insert(Circuit {
            failures: 0,
            open_until: None,
            probing: None,
            touched: now,
        });
        c.failures = c.failures.saturating_add(1);
        c.touched = now;
        let probe_failed = c.probing.take().is_some();
        if probe_failed || c.failures >= l.circuit_failures {
            c.open_until = Some(now + Duration::from_secs(u64::from(l.circuit_cooldown_seconds)));
        }
    }
}

impl Breakers {
    /// The upstreams whose circuit is open (or half-open) at `now`, as `host:port`, sorted.
    #[must_use]
    pub fn open(&self) -> Vec<String> {
        let circuits = self.circuits.lock().unwrap_or_else(PoisonError::into_inner);
        let mut open: Vec<String> = circuits
            .iter()
            .filter(|(_, c)| c.open_until.is_some())
            .map(|(t, _)| format!("{}:{}", t.host.as_str(), t.port))
            .collect();
        open.sort();
        open
    }
}

fn forget_oldest_closed(circuits: &mut HashMap<Target, Circuit>) {
    let oldest = circuits
        .iter()
        .filter(|(_, c)| c.open_until.is_none())
        .min_by_key(|(_, c)| c.touched)
        .map(|(t, _)| t.clone());
    if let Some(t) = oldest {
        circuits.remove(&t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::host::Host;

    fn target(h: &str) -> Target {
        Target {
            host: Host::parse(h).unwrap(),
            port: 443,
        }
    }

    const L: Limits = Limits {
        requests_per_second: 1,
        request_burst: 1,
        circuit_failures: 3,
        circuit_cooldown_seconds: 10,
        ..Limits::DEFAULT
    };

    #[test]
    fn consecutive_failures_open_the_circuit_a_probe_closes_it_and_others_are_untouched() {
        let b = Breakers::default();
        let (down, up) = (target("down.test"), target("up.test"));
        let t0 = Instant::now();
        // Two failures, a success: the count starts again.
        b.report(&down, false, L, t0);
        b.report(&down, false, L, t0);
        b.report(&down, true, L, t0);
        b.report(&down, false, L, t0);
        b.report(&down, false, L, t0);
        assert!(b.check(&down, L, t0).is_ok());
        b.report(&down, false, L, t0);
        let open = b.check(&down, L, t0).unwrap_err();
        assert_eq!(
            (open.failures, open.remaining),
            (3, Duration::from_secs(10))
        );
        assert!(b.check(&up, L, t0).is_ok(), "another upstream is untouched");
        // After the cool-down: one probe, not two.
        let t1 = t0 + Duration::from_secs(10);
        assert!(b.check(&down, L, t1).is_ok());
        assert!(b.check(&down, L, t1).is_err());
        // The probe fails: open again for a whole cool-down.
        b.report(&down, false, L, t1);
        assert!(b.check(&down, L, t1 + Duration::from_secs(9)).is_err());
        // The next probe succeeds: closed.
        let t2 = t1 + Duration::from_secs(10);
        assert!(b.check(&down, L, t2).is_ok());
        b.report(&down, true, L, t2);
        assert!(b.check(&down, L, t2).is_ok());
        assert!(b.check(&down, L, t2).is_ok());
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced_and_the_table_is_bounded() {
        let b = Breakers::default();
        let down = target("down.test");
        let t0 = Instant::now();
        for _ in 0..3 {
            b.report(&down, false, L, t0);
        }
        let t1 = t0 + Duration::from_secs(10);
        assert!(b.check(&down, L, t1).is_ok());
        assert!(b.check(&down, L, t1 + Duration::from_secs(5)).is_err());
        assert!(b.check(&down, L, t1 + Duration::from_secs(10)).is_ok());
        for i in 0..MAX_CIRCUITS + 10 {
            b.report(&target(&format!("h{i}.test")), false, L, t0);
        }
        assert!(b.circuits.lock().unwrap().len() <= MAX_CIRCUITS);
        // The open circuit was not the one forgotten.
        assert!(b.check(&down, L, t1 + Duration::from_secs(11)).is_err());
    }
}
