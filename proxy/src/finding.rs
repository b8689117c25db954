//! What a request's checks found, as data: each check returns its [`Finding`]s (or a
//! [`Denial`] carrying them), and the request's one writer puts them on its audit record
//! ([`Findings::apply`]). A check never edits the record itself.
//!
//! This module does not decide anything: it only says how a finding reads on the record.

use airlock_policy::reason::Reason;

use crate::audit::{Record, Verdict};
use crate::detect;
use crate::signal::Signal;

/// One thing a check found, for the request's audit line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The rule that decided: an allow rule that had to match, a refusal's rule, the
    /// budgets a body spent, a detector that refused.
    Rule(String),
    /// The credential involved: injected, leaked or missing (names joined by the check).
    Credential(String),
    /// The operator's inbox item that answered the request.
    Approval(String),
    /// Report mode let a refusal through: the reason it would have been, and its rule.
    Reported { reason: Reason, rule: String },
    /// The signals measured on a body read whole.
    Signals(Vec<Signal>),
    /// A signal that refused a body streamed or read whole (kept beside those measured).
    Signal(Signal),
    /// Secrets the detectors let through: overwritten in place (`redacted`) or logged.
    Secrets {
        redacted: Vec<String>,
        logged: Vec<String>,
    },
}

impl Finding {
    /// The secrets `v` let through, if any (a refusal is the check's [`Denial`] instead).
    #[must_use]
    pub fn secrets(v: &detect::Verdict<'_>) -> Option<Self> {
        let own = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        (v.refused.is_none() && (!v.redacted.is_empty() || !v.logged.is_empty())).then(|| {
            Finding::Secrets {
                redacted: own(&v.redacted),
                logged: own(&v.logged),
            }
        })
    }

    /// Writes this finding on `rec`: the one place a check's result reaches a record.
    pub fn apply(&self, rec: &mut Record) {
        match self {
            Finding::Rule(rule) => rec.rule = Some(rule.clone()),
            Finding::Credential(names) => rec.credential = Some(names.clone()),
            Finding::Approval(id) => rec.approval = Some(id.clone()),
            Finding::Reported { reason, rule } => {
                rec.decision = Verdict::Report;
                rec.reason = Some(*reason);
                rec.rule = Some(rule.clone());
            }
            Finding::Signals(signals) => rec.signals.clone_from(signals),
            Finding::Signal(s) => {
                if !rec.signals.contains(s) {
                    rec.signals.push(*s);
                }
            }
            Finding::Secrets { redacted, logged } => detect::note(rec, redacted, logged),
        }
    }
}

/// Every finding of one request, in the order its checks ran (a later rule replaces an
/// earlier one on the record, as the later check is the one that decided).
#[derive(Debug, Default)]
pub struct Findings(Vec<Finding>);

impl Findings {
    /// Keeps what a check found.
    pub fn add(&mut self, found: impl IntoIterator<Item = Finding>) {
        self.0.extend(found);
    }

    /// Writes every finding on `rec`, in order.
    pub fn apply(&self, rec: &mut Record) {
        for f in &self.0 {
            f.apply(rec);
        }
    }
}

/// A check's refusal: the stable reason, and what the refusal names (its rule, the
/// credential, the inbox item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub reason: Reason,
    pub found: Vec<Finding>,
}

impl Denial {
    /// A refusal naming `found`.
    #[must_use]
    pub fn naming(reason: Reason, found: impl IntoIterator<Item = Finding>) -> Self {
        Self {
            reason,
            found: found.into_iter().collect(),
        }
    }

    /// A refusal by `rule`.
    #[must_use]
    pub fn by_rule(reason: Reason, rule: impl Into<String>) -> Self {
        Self::naming(reason, [Finding::Rule(rule.into())])
    }

    /// Writes what the refusal names on `rec` (after the request's other findings) and
    /// returns its reason.
    pub fn apply(&self, rec: &mut Record) -> Reason {
        for f in &self.found {
            f.apply(rec);
        }
        self.reason
    }

    /// A refusal naming the credential `names`.
    #[must_use]
    pub fn of_credential(reason: Reason, names: impl Into<String>) -> Self {
        Self::naming(reason, [Finding::Credential(names.into())])
    }
}

impl From<Reason> for Denial {
    fn from(reason: Reason) -> Self {
        Self {
            reason,
            found: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Kind, Who};
    use std::time::SystemTime;

    fn record() -> Record {
        let who = Who::new("s", "t", None);
        Record::new(&who, SystemTime::UNIX_EPOCH, Kind::Connect, None)
    }

    #[test]
    fn findings_land_on_the_record_in_the_order_the_checks_ran() {
        let mut found = Findings::default();
        found.add([Finding::Reported {
            reason: Reason::ReadOnlyHost,
            rule: "r.test: read-only".into(),
        }]);
        found.add([
            Finding::Credential("GH_TOKEN".into()),
            Finding::Rule("later".into()),
        ]);
        let mut rec = record();
        found.apply(&mut rec);
        assert_eq!(rec.decision, Verdict::Report);
        assert_eq!(rec.reason, Some(Reason::ReadOnlyHost));
        assert_eq!(rec.rule.as_deref(), Some("later"));
        assert_eq!(rec.credential.as_deref(), Some("GH_TOKEN"));
    }

    #[test]
    fn secrets_let_through_merge_their_detectors_into_the_rule() {
        let mut rec = record();
        let f = |r: &[&str], l: &[&str]| Finding::Secrets {
            redacted: r.iter().map(|s| (*s).to_owned()).collect(),
            logged: l.iter().map(|s| (*s).to_owned()).collect(),
        };
        f(&["a"], &[]).apply(&mut rec);
        f(&[], &["b", "a"]).apply(&mut rec);
        assert_eq!(rec.rule.as_deref(), Some("secret detector a,b"));
        assert_eq!(rec.decision, Verdict::Report);
        assert_eq!(rec.reason, Some(Reason::ForeignSecret));
    }
}
