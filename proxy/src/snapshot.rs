//! The rules a request is decided under, read once per request from one snapshot that can
//! be replaced as a whole.
//!
//! [`Rules`] is everything a decision reads that an operator may change: the policy, the
//! credentials bound by it (their hosts, headers, scopes and secrets) and the secret
//! detectors (the formats as the policy changes them, and the workspace's needles). A
//! connection or request takes one [`Snapshot::load`] at its start and decides everything
//! with it, so a [`Snapshot::replace`] between two requests takes effect at the next one
//! and a request never sees half of two policies. Replacing is the control plane's job
//! (docs/design.md §10); this module only makes it a one-line swap. What does not change
//! with the rules (the CA and its leaves, the upstream TLS roots, limits, the audit) lives
//! elsewhere in the shared state.

use std::sync::{Arc, PoisonError, RwLock};

use airlock_policy::Policy;

use crate::credentials::Credentials;
use crate::detect::{DetectError, Detectors};

/// What one request is decided under.
#[derive(Debug)]
pub struct Rules {
    /// The policy.
    pub policy: Policy,
    /// The credentials it binds, with their secrets.
    pub credentials: Credentials,
    /// The secret detectors: the formats (built-in, as the policy changes them) and the
    /// workspace's needles.
    pub detectors: Detectors,
}

impl Rules {
    /// The rules of `policy` with `credentials` (made from the same policy); the detectors
    /// are the built-in formats as the policy changes them (`[[detectors]]`, `[secrets]`)
    /// plus the credentials' workspace needles.
    ///
    /// # Errors
    /// [`DetectError`] when the detectors cannot be built.
    pub fn new(policy: Policy, credentials: Credentials) -> Result<Self, DetectError> {
        let detectors = Detectors::new(&policy.secrets, credentials.workspace_secrets())?;
        Ok(Self {
            policy,
            credentials,
            detectors,
        })
    }
}

/// A value read whole by many tasks and replaced whole.
#[derive(Debug)]
pub struct Snapshot<T> {
    current: RwLock<Arc<T>>,
}

impl<T> Snapshot<T> {
    /// Starts with `value`.
    pub fn new(value: T) -> Self {
        Self {
            current: RwLock::new(Arc::new(value)),
        }
    }

    /// The current value: held by the caller for as long as it decides with it, whatever
    /// replaces it meanwhile. (A poisoned lock still holds a whole value: a writer only
    /// ever swaps the `Arc`.)
    pub fn load(&self) -> Arc<T> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Makes `value` current for every later [`load`](Self::load); returns the one it
    /// replaced (requests still holding it finish with it).
    pub fn replace(&self, value: T) -> Arc<T> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *current, Arc::new(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_value_outlives_its_replacement() {
        let s = Snapshot::new(1);
        let held = s.load();
        let old = s.replace(2);
        assert_eq!((*held, *old, *s.load()), (1, 1, 2));
    }

    #[test]
    fn readers_see_one_whole_value_or_the_next_while_it_is_replaced() {
        let s = Arc::new(Snapshot::new((0u64, 0u64)));
        let writer = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 1..=10_000u64 {
                    s.replace((i, i));
                }
            })
        };
        for _ in 0..10_000 {
            let v = s.load();
            assert_eq!(v.0, v.1, "half of two values");
        }
        writer.join().unwrap_or_else(|_| panic!("writer"));
        assert_eq!(*s.load(), (10_000, 10_000));
    }
}
