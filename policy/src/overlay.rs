//! The operator's standing answers over a policy file: the grants `airlock approve ID
//! --always` and `airlock deny ID --always` leave. Each is one host and port, allowed or
//! denied for every session, with who answered (a uid), when and why.
//!
//! A grant is applied as one more rule: an allow grant after the file's (and its
//! registries') `network.allow`, a deny grant after its `network.deny`, so a deny still
//! wins over an allow as everywhere else and an allow grant never lifts a deny the file
//! wrote or a hard deny. `airlock policy show` names each grant as its origin.
//!
//! This module is the model; [`crate::layered`] lays it over a policy. Neither reads nor
//! writes the file (the proxy keeps it, next to the audit log) nor decides who may grant.

use serde::{Deserialize, Serialize};

use crate::rule::RuleError;

/// The grants in force, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    pub grants: Vec<Grant>,
}

/// One standing answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The approval item it answered (what `airlock revoke` names).
    pub id: String,
    /// Allow (`approve --always`) or deny (`deny --always`).
    pub allow: bool,
    /// The host, canonical (as the item named it).
    pub host: String,
    pub port: u16,
    /// The operator's uid, from the admin socket's credentials.
    pub by: u32,
    /// When, RFC 3339.
    pub at: String,
    /// The operator's reason for a denial, or the agent's for the item it answered
    /// (untrusted text, kept as the item had it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Why an overlay cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverlayError {
    /// A grant's host and port do not make a host rule.
    #[error("grant {id}: {rule:?} is not a host rule: {source}")]
    Rule {
        id: String,
        rule: String,
        source: RuleError,
    },
    /// Two grants share an id.
    #[error("grant {0} is listed twice")]
    Duplicate(String),
}

impl Grant {
    /// The rule it adds: `host:port` (an IPv6 literal in brackets).
    #[must_use]
    pub fn rule_text(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl Overlay {
    /// The grant `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&Grant> {
        self.grants.iter().find(|g| g.id == id)
    }

    /// This overlay with `grant` added (one with its id replaced).
    #[must_use]
    pub fn with(&self, grant: Grant) -> Overlay {
        let mut grants: Vec<Grant> = self
            .grants
            .iter()
            .filter(|g| g.id != grant.id)
            .cloned()
            .collect();
        grants.push(grant);
        Overlay { grants }
    }

    /// This overlay without grant `id`; `None` when it has none.
    #[must_use]
    pub fn without(&self, id: &str) -> Option<Overlay> {
        self.get(id)?;
        Some(Overlay {
            grants: self.grants.iter().filter(|g| g.id != id).cloned().collect(),
        })
    }
}
