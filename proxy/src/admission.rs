//! The one decision on a destination: may the agent reach this host, on this port?
//!
//! Every way in asks it, and only it: `CONNECT`, plain HTTP and base URL (`explicit`), the
//! transparent listener and the DNS filter. It is up to four steps, always in this order,
//! each a check this module composes (none is called from anywhere else):
//! 0. **The rate and the budgets** ([`crate::rate`], [`crate::budget`], not for DNS nor the
//!    git service port): one token of the session's bucket for the host and a request of
//!    the sandbox's budget, refused when an hourly budget is spent, before any policy work;
//!    also for each request read in an intercepted connection ([`paced`]).
//! 1. **The policy** (`decide::decide`): the allow and deny rules, the hard denies, report
//!    mode. DNS has no port, so it asks for the name on any port ([`Port::Any`]).
//! 2. **The name** ([`names::judge`]), only for a destination the policy let through: a name
//!    that carries a secret, looks encoded or passes its zone's budget is never resolved.
//!    The DNS filter takes this step after its query-type check ([`Admission::named`]), so
//!    a refused type never spends a zone's budget.
//! 3. **The upstream's circuit** ([`crate::breaker`], not for DNS nor the git service
//!    port): an upstream that kept failing is answered at once; also checked for each
//!    request read in an intercepted connection ([`paced`]).
//!
//! The outcome is data ([`Outcome`]), never an error: the caller answers in its own protocol
//! (a JSON denial, a TLS alert or an in-band HTTP answer, an NXDOMAIN with an Extended DNS
//! Error), and [`Admission::stamp`] writes the same fields on every path's audit line.
//!
//! What this module does not decide: what a request inside an admitted connection may do
//! (its method and path, a credential, a secret in its body: `intercept`), whether the
//! addresses a name resolves to are reachable (`decide::check_addresses`), and the git
//! service port's tickets (`service`).

use airlock_policy::reason::Reason;

use crate::audit::{Record, Verdict};
use crate::breaker::Breakers;
use crate::budget::Budgets;
use crate::decide::{self, Target};
use crate::limits::Client;
use crate::names::{self, Budget, NameRules, NameVerdict};
use crate::rate::Rate;

/// The agent's request's rate and its upstream's circuit: whose bucket it takes its token
/// from ([`crate::rate`]) and the circuits it is judged by ([`crate::breaker`]).
#[derive(Debug, Clone, Copy)]
pub struct Pace<'a> {
    pub rate: &'a Rate,
    pub breakers: &'a Breakers,
    pub budgets: &'a Budgets,
    pub who: Client,
}

impl Pace<'_> {
    /// Counts the bytes `meter` reads from the agent against this session's and the
    /// sandbox's upload budgets for `target` ([`crate::budget`]).
    pub fn charge(
        &self,
        meter: &crate::tunnel::Meter,
        policy: &airlock_policy::Policy,
        target: &Target,
    ) {
        meter.charge(self.budgets.charge(self.who, &target.host, policy.limits));
    }
}

/// Which ports the policy is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// A connection to the target's port.
    Exact,
    /// A DNS question: a name is answerable when a rule allows it on any port.
    Any,
}

/// What the agent's request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Through.
    Allow,
    /// Through, the line saying why it would have been refused (report mode, a detector
    /// whose action is `log`).
    Report(Reason),
    /// Refused with this reason.
    Deny(Reason),
}

/// The decision on one destination, with what its audit line says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub outcome: Outcome,
    /// The rule that decided: a policy rule, or the detector a name tripped.
    pub rule: Option<String>,
    /// The host as the line keeps it when a detector fired on the name: the labels the
    /// agent chose masked (the line names the detector, never the value).
    pub redacted: Option<String>,
}

impl Admission {
    /// The reason to refuse with, if refused.
    #[must_use]
    pub const fn refused(&self) -> Option<Reason> {
        match self.outcome {
            Outcome::Deny(reason) => Some(reason),
            Outcome::Allow | Outcome::Report(_) => None,
        }
    }

    /// The verdict and reason an audit line (or a dry run) writes for this decision.
    #[must_use]
    pub const fn verdict(&self) -> (Verdict, Option<Reason>) {
        match self.outcome {
            Outcome::Allow => (Verdict::Allow, None),
            Outcome::Report(reason) => (Verdict::Report, Some(reason)),
            Outcome::Deny(reason) => (Verdict::Deny, Some(reason)),
        }
    }

    /// The audit fields of this decision: verdict, reason, rule and (when a detector fired
    /// on the name) the masked host.
    pub fn stamp(&self, rec: &mut Record) {
        (rec.decision, rec.reason) = self.verdict();
        rec.rule.clone_from(&self.rule);
        if let Some(host) = &self.redacted {
            rec.host = Some(host.clone());
        }
    }

    /// Step 2, the name, on a destination step 1 let through; a refused one stays as it is.
    #[must_use]
    pub fn named(self, rules: NameRules<'_>, budget: &Budget, target: &Target) -> Self {
        if self.refused().is_some() {
            return self;
        }
        let (outcome, rule) = match names::judge(rules, budget, &target.host) {
            NameVerdict::Pass => return self,
            NameVerdict::Report { reason, rule } => (Outcome::Report(reason), rule),
            NameVerdict::Refuse { reason, rule } => (Outcome::Deny(reason), rule),
        };
        // A detector that fired names itself; the shape and budget checks keep the
        // policy's rule.
        let redacted = rule
            .is_some()
            .then(|| names::redacted(rules.policy, &target.host));
        Self {
            outcome,
            rule: rule.or(self.rule),
            redacted,
        }
    }
}

/// Step 1, the policy, alone: the DNS filter's first step (see the module docs).
#[must_use]
pub fn policy(policy: &airlock_policy::Policy, target: &Target, port: Port) -> Admission {
    let d = decide::decide(policy, target);
    // A verdict that lost its reason still refuses (never a silent allow).
    let reason = d.reason.unwrap_or(Reason::BlockedByPolicy);
    let outcome = match d.verdict {
        _ if port == Port::Any && d.reason == Some(Reason::BlockedPort) => Outcome::Allow,
        Verdict::Allow => Outcome::Allow,
        Verdict::Report => Outcome::Report(reason),
        Verdict::Deny | Verdict::Abandoned => Outcome::Deny(reason),
    };
    Admission {
        outcome,
        rule: d.rule,
        redacted: None,
    }
}

/// Steps 0 and 3 alone, the rate then the circuit: a request read in an intercepted
/// connection (whose connection took the steps between). `Some` refuses it, the rule
/// naming the limit.
#[must_use]
pub fn paced(
    pace: Pace<'_>,
    policy: &airlock_policy::Policy,
    target: &Target,
) -> Option<Admission> {
    rated(pace, policy, target).or_else(|| circuit(pace, policy, target))
}

/// Step 0: one token and an unspent budget, or `rate-limited` / `budget-exhausted`.
fn rated(pace: Pace<'_>, policy: &airlock_policy::Policy, target: &Target) -> Option<Admission> {
    let l = policy.limits;
    let now = std::time::Instant::now();
    if pace.rate.take(pace.who, &target.host, l, now).is_ok() {
        return budgeted(pace, policy, target, now);
    }
    Some(Admission {
        outcome: Outcome::Deny(Reason::RateLimited),
        rule: Some(format!(
            "limits: {} requests/s, burst {}, per session and host",
            l.requests_per_second, l.request_burst
        )),
        redacted: None,
    })
}

/// Step 0's budgets: `budget-exhausted`, the rule naming the budget and when it resets.
fn budgeted(
    pace: Pace<'_>,
    policy: &airlock_policy::Policy,
    target: &Target,
    now: std::time::Instant,
) -> Option<Admission> {
    let wall = std::time::SystemTime::now();
    let spent = pace
        .budgets
        .check(
            pace.who,
            (&target.host, crate::detect::llm_host(&target.host)),
            policy.limits,
            now,
            wall,
        )
        .err()?;
    let resets = airlock_audit_schema::Timestamp::from(spent.resets_at);
    Some(Admission {
        outcome: Outcome::Deny(Reason::BudgetExhausted),
        rule: Some(format!(
            "limits: {} {} spent; resets at {resets}",
            spent.knob, spent.limit
        )),
        redacted: None,
    })
}

/// Step 3: the upstream's circuit, or `upstream-circuit-open`.
fn circuit(pace: Pace<'_>, policy: &airlock_policy::Policy, target: &Target) -> Option<Admission> {
    let now = std::time::Instant::now();
    let open = pace.breakers.check(target, policy.limits, now).err()?;
    Some(Admission {
        outcome: Outcome::Deny(Reason::UpstreamCircuitOpen),
        rule: Some(format!(
            "limits: circuit open after {} failures in a row; a probe may go in {} s",
            open.failures,
            open.remaining.as_secs().max(1)
        )),
        redacted: None,
    })
}

/// The whole decision on a connection to `target`: the rate (unless `pace` is `None`: the
/// git service port), the policy, the name, then the upstream's circuit.
#[must_use]
pub fn admit(
    rules: NameRules<'_>,
    budget: &Budget,
    pace: Option<Pace<'_>>,
    target: &Target,
) -> Admission {
    if let Some(refused) = pace.and_then(|p| rated(p, rules.policy, target)) {
        return refused;
    }
    let admission = policy(rules.policy, target, Port::Exact).named(rules, budget, target);
    if admission.refused().is_some() {
        return admission;
    }
    match pace.and_then(|p| circuit(p, rules.policy, target)) {
        Some(open) => open,
        None => admission,
    }
}

#[cfg(test)]
mod tests;
