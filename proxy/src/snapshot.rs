//! The rules a request is decided under, read once per request from one snapshot that can
//! be replaced as a whole.
//!
//! [`Rules`] is everything a decision reads that an operator may change: the policy, the
//! credentials bound by it (their hosts, headers, scopes and secrets) and the secret
//! detectors (the formats as the policy changes them, and the workspace's needles). A
//! connection or request takes one [`Snapshot::load`] at its start and decides everything
//! with it, so a [`Snapshot::replace`] between two requests takes effect at the next one
//! and a request never sees half of two policies. Replacing is the control plane's job
//! (docs/design.md §10); this module only makes it a one-line swap. The one replacement
//! built today is [`Rules::reload`]: the same policy with the credential hand-off read
//! again (on SIGHUP, after the entrypoint's workspace-secrets rescan rewrote it). What does not change
//! with the rules (the CA and its leaves, the upstream TLS roots, limits, the audit) lives
//! elsewhere in the shared state.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use airlock_handoff::WorkspaceSecret;
use airlock_policy::Policy;

use crate::audit::Change;
use crate::credentials::{Credentials, CredentialsError};
use crate::detect::{DetectError, Detectors};
use crate::names::NameNeedles;

/// Rebuilding the rules from the hand-off failed: the caller keeps the rules it has.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The hand-off cannot be read, parsed or matched with the policy.
    #[error(transparent)]
    Handoff(#[from] CredentialsError),
    /// The detectors cannot be built from the new needles.
    #[error("building the secret detectors: {0}")]
    Detectors(#[from] DetectError),
}

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
    /// The workspace's needles as a name can carry them (`names`).
    pub names: NameNeedles,
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
        let names = NameNeedles::new(&detectors, credentials.workspace_secrets())?;
        Ok(Self {
            policy,
            credentials,
            detectors,
            names,
        })
    }
}

impl Rules {
    /// What a name the agent asks to resolve is judged under (`names::judge`).
    #[must_use]
    pub fn name_rules(&self) -> crate::names::NameRules<'_> {
        crate::names::NameRules {
            policy: &self.policy,
            detectors: &self.detectors,
            needles: &self.names,
        }
    }

    /// The rules of `policy` with the credentials of the hand-off at `handoff` (read
    /// again: credentials and workspace needles) and the detectors built for them.
    ///
    /// # Errors
    /// [`ReloadError`]; the caller keeps the rules it has.
    pub fn reload(policy: &Policy, handoff: &Path) -> Result<Self, ReloadError> {
        let credentials = Credentials::load(handoff, policy)?;
        Ok(Self::new(policy.clone(), credentials)?)
    }

    /// What a reload from the needles `before` to these rules changed, in counts (never
    /// values): the audit's reload line and the proxy's stderr line say it.
    #[must_use]
    pub fn change(&self, before: &[WorkspaceSecret]) -> Change {
        let after = self.credentials.workspace_secrets();
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Change {
            needles: count(after.len()),
            files: count(files(after)),
            added: count(after.iter().filter(|s| !before.contains(s)).count()),
            dropped: count(before.iter().filter(|s| !after.contains(s)).count()),
        }
    }

    /// These rules' workspace needles, as a change that changed nothing (what a refused
    /// reload leaves in force).
    #[must_use]
    pub fn unchanged(&self) -> Change {
        self.change(self.credentials.workspace_secrets())
    }
}

/// Distinct files the needles were found in.
fn files(needles: &[WorkspaceSecret]) -> usize {
    let mut files: Vec<&str> = needles.iter().map(|s| s.file.as_str()).collect();
    files.sort_unstable();
    files.dedup();
    files.len()
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
    use airlock_handoff::{HANDOFF_VERSION, Handoff, Secret};

    fn needle(file: &str, value: &str) -> WorkspaceSecret {
        WorkspaceSecret {
            file: file.into(),
            name: "DB_PASSWORD".into(),
            detector: None,
            value: Secret::new(value.into()),
        }
    }

    fn handoff(secrets: Vec<WorkspaceSecret>) -> Vec<u8> {
        let h = Handoff {
            version: HANDOFF_VERSION,
            session: "s".into(),
            workspace_secrets: secrets,
            ..Handoff::default()
        };
        serde_json::to_vec(&h).unwrap_or_default()
    }

    /// The agent's rescanned `.env`: a needle the first rules did not have is in the
    /// reloaded ones, the old one stays, and a hand-off that cannot be read replaces
    /// nothing (the caller keeps what it has).
    #[test]
    fn a_reload_reads_the_new_needles_and_a_bad_handoff_changes_nothing() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("credentials.json");
        let policy = Policy::parse(
            "[sandbox]\nname = \"t\"\n[network]\nallow = [\"a.test\"]\n",
            Path::new("p.toml"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let first = vec![needle(".env", "old-Secret-value-1234")];
        std::fs::write(&path, handoff(first.clone())).unwrap_or_else(|e| panic!("{e}"));
        let rules = Rules::reload(&policy, &path).unwrap_or_else(|e| panic!("{e}"));
        let mut both = first;
        both.push(needle("api/.env", "new-Secret-value-5678"));
        std::fs::write(&path, handoff(both.clone())).unwrap_or_else(|e| panic!("{e}"));
        let new = Rules::reload(&policy, &path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(new.credentials.workspace_secrets(), both.as_slice());
        let change = new.change(rules.credentials.workspace_secrets());
        let line = change.to_string();
        assert_eq!(
            line,
            "workspace secrets reloaded: 2 needles from 2 files (1 new, 0 gone)"
        );
        assert_eq!(new.unchanged(), Change { added: 0, ..change });
        assert!(!line.contains("Secret-value"));
        std::fs::write(&path, b"{\"version\": ").unwrap_or_else(|e| panic!("{e}"));
        let err = Rules::reload(&policy, &path).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("malformed"), "{err}");
    }

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
