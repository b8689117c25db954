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
//!    mode. DNS has no port, so it asks for the name on any port ([`Port::Any`]). A host no
//!    rule lists is [`Outcome::Ask`] when the policy asks about such hosts
//!    (`[network] unlisted = "ask"`); never a listed deny, an IP literal, a port or a hard
//!    deny.
//! 2. **The name** ([`names::judge`]), only for a destination the policy let through: a name
//!    that carries a secret, looks encoded or passes its zone's budget is never resolved.
//!    The DNS filter takes this step after its query-type check ([`Admission::named`]), so
//!    a refused type never spends a zone's budget.
//! 3. **The operator's answer** to an asked host ([`crate::approvals`]), once the name
//!    passed: an approval admits it, a denial refuses it `approval-denied` with the
//!    operator's reason, else it is filed (or counted) and refused `approval-required`,
//!    naming the item. Nothing is ever held waiting.
//! 4. **The upstream's circuit** ([`crate::breaker`], not for DNS nor the git service
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

use crate::approvals::{Approvals, Asked, Caps};
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
    /// The operator's inbox and answers ([`crate::approvals`]).
    pub approvals: &'a Approvals,
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
    /// The policy's answer for a host it asks the operator about: refused
    /// (`approval-required`) by whoever does not take the approvals step.
    Ask,
}

/// The decision on one destination, with what its audit line says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub outcome: Outcome,
    /// The rule that decided: a policy rule, the detector a name tripped, or the
    /// operator's answer.
    pub rule: Option<String>,
    /// The operator's inbox item this decision is about, if any.
    pub approval: Option<String>,
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
            Outcome::Ask => Some(Reason::ApprovalRequired),
            Outcome::Allow | Outcome::Report(_) => None,
        }
    }

    /// The item this refusal waits on: an asked destination filed and still pending.
    #[must_use]
    pub fn pending(&self) -> Option<&str> {
        match (self.outcome, &self.rule) {
            (Outcome::Deny(Reason::ApprovalRequired), None) => self.approval.as_deref(),
            _ => None,
        }
    }

    /// The verdict and reason an audit line (or a dry run) writes for this decision.
    #[must_use]
    pub const fn verdict(&self) -> (Verdict, Option<Reason>) {
        match self.outcome {
            Outcome::Allow => (Verdict::Allow, None),
            Outcome::Report(reason) => (Verdict::Report, Some(reason)),
            Outcome::Deny(reason) => (Verdict::Deny, Some(reason)),
            Outcome::Ask => (Verdict::Deny, Some(Reason::ApprovalRequired)),
        }
    }

    /// The audit fields of this decision: verdict, reason, rule and (when a detector fired
    /// on the name) the masked host.
    pub fn stamp(&self, rec: &mut Record) {
        (rec.decision, rec.reason) = self.verdict();
        rec.rule.clone_from(&self.rule);
        rec.approval.clone_from(&self.approval);
        if let Some(host) = &self.redacted {
            rec.host = Some(host.clone());
        }
    }

    /// Step 2, the name, on a destination step 1 let through or asks about; a refused one
    /// stays as it is.
    #[must_use]
    pub fn named(self, rules: NameRules<'_>, budget: &Budget, target: &Target) -> Self {
        if matches!(self.outcome, Outcome::Deny(_)) {
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
            approval: None,
            redacted,
        }
    }

    /// Step 3, the operator's answer, on an asked destination (else `self` as it is).
    #[must_use]
    pub fn answered(
        self,
        pace: Option<Pace<'_>>,
        policy: &airlock_policy::Policy,
        target: &Target,
    ) -> Self {
        if self.outcome != Outcome::Ask {
            return self;
        }
        // The git service port asks nobody: refused as any unlisted host.
        let Some(pace) = pace else {
            return Self {
                outcome: Outcome::Deny(Reason::BlockedByPolicy),
                ..self
            };
        };
        let (now, wall) = (std::time::Instant::now(), std::time::SystemTime::now());
        let host = target.host.as_str();
        let caps = Caps::of(&policy.limits);
        let asked = pace
            .approvals
            .ask(pace.who, host, target.port, caps, now, wall);
        Self {
            redacted: self.redacted,
            ..of_asked(asked, caps)
        }
    }
}

/// The operator's answer to a request an `action = "ask"` rule (labelled `rule`) matched on
/// an admitted connection to `target`, as [`Admission::answered`] takes it for a host: the
/// session's approval for that rule lets it through, a denial refuses it with the
/// operator's reason, else it is filed (or counted) and refused `approval-required`.
#[must_use]
pub fn ask_rule(
    pace: Pace<'_>,
    policy: &airlock_policy::Policy,
    target: &Target,
    rule: &str,
) -> Admission {
    let caps = Caps::of(&policy.limits);
    let asked = pace.approvals.ask_rule(
        pace.who,
        (target.host.as_str(), target.port),
        rule,
        caps,
        (std::time::Instant::now(), std::time::SystemTime::now()),
    );
    of_asked(asked, caps)
}

/// What `asked` (the inbox's answer under `caps`) makes of an asked request.
fn of_asked(asked: Asked, caps: Caps) -> Admission {
    let (outcome, rule, approval) = match asked {
        Asked::Granted { id, scope } => (
            Outcome::Allow,
            Some(format!("approval {id} ({})", scope.as_str())),
            Some(id),
        ),
        Asked::Denied { id, reason } => (
            Outcome::Deny(Reason::ApprovalDenied),
            Some(format!("approval {id} denied by the operator: {reason}")),
            Some(id),
        ),
        Asked::Pending { id } => (Outcome::Deny(Reason::ApprovalRequired), None, Some(id)),
        Asked::Full => (
            Outcome::Deny(Reason::ApprovalRequired),
            Some(format!(
                "approvals: {} items of this session wait for the operator ([limits] approvals_pending); nothing more is filed until some are answered",
                caps.pending
            )),
            None,
        ),
        Asked::TooFast => (
            Outcome::Deny(Reason::RateLimited),
            Some(format!(
                "approvals: at most {} new asks a minute per session ([limits] approvals_per_minute)",
                caps.per_minute
            )),
            None,
        ),
    };
    Admission {
        outcome,
        rule,
        approval,
        redacted: None,
    }
}

/// Step 1, the policy, alone: the DNS filter's first step (see the module docs).
#[must_use]
pub fn policy(policy: &airlock_policy::Policy, target: &Target, port: Port) -> Admission {
    let d = decide::decide(policy, target);
    // A verdict that lost its reason still refuses (never a silent allow).
    let reason = d.reason.unwrap_or(Reason::BlockedByPolicy);
    // A name that cannot exist (`.invalid`, RFC 6761: the entrypoint's self-test asks for
    // one) is refused, never put to the operator.
    let asks = policy.network.unlisted == airlock_policy::Unlisted::Ask
        && !target.host.as_str().ends_with(".invalid");
    let outcome = match d.verdict {
        _ if port == Port::Any && d.reason == Some(Reason::BlockedPort) => Outcome::Allow,
        Verdict::Deny if asks && d.reason == Some(Reason::BlockedByPolicy) => Outcome::Ask,
        Verdict::Allow => Outcome::Allow,
        Verdict::Report => Outcome::Report(reason),
        Verdict::Deny | Verdict::Abandoned => Outcome::Deny(reason),
    };
    Admission {
        outcome,
        rule: d.rule,
        approval: None,
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
        approval: None,
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
        approval: None,
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
        approval: None,
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
    decided(rules, budget, pace, target)
}

/// [`admit`] past the rate step: the policy, the name, the operator's answer, then the
/// upstream's circuit (what a held connection is decided by again: it took its token).
fn decided(
    rules: NameRules<'_>,
    budget: &Budget,
    pace: Option<Pace<'_>>,
    target: &Target,
) -> Admission {
    let admission = policy(rules.policy, target, Port::Exact)
        .named(rules, budget, target)
        .answered(pace, rules.policy, target);
    if admission.refused().is_some() {
        return admission;
    }
    match pace.and_then(|p| circuit(p, rules.policy, target)) {
        Some(open) => open,
        None => admission,
    }
}

/// [`admit`], with the bounded hold of `[limits] approvals_hold_seconds`: a connection whose
/// destination is asked and still pending is held open that long for the operator's answer
/// (at most `approvals_holds` of the session's at once; past it, or with no hold set, the
/// refusal is at once), then decided again without a second rate token: a grant admits
/// it, a denial refuses it with the operator's reason, no answer refuses it
/// `approval-required`. Its rule says how long it was held.
pub async fn admit_holding(
    rules: NameRules<'_>,
    budget: &Budget,
    pace: Option<Pace<'_>>,
    target: &Target,
) -> Admission {
    let first = admit(rules, budget, pace, target);
    let limits = &rules.policy.limits;
    let (Some(p), Some(id)) = (pace, first.pending()) else {
        return first;
    };
    if limits.approvals_hold_seconds == 0 {
        return first;
    }
    let Some(_hold) = p.approvals.hold(p.who, limits.approvals_holds) else {
        return first;
    };
    let started = tokio::time::Instant::now();
    let deadline = started + std::time::Duration::from_secs(limits.approvals_hold_seconds.into());
    let _ = p.approvals.wait(id, p.who, deadline).await;
    let mut again = decided(rules, budget, pace, target);
    let held = format!(
        "held {:.1} s for the operator",
        started.elapsed().as_secs_f64()
    );
    again.rule = Some(match again.rule.take() {
        Some(rule) => format!("{rule}; {held}"),
        None => held,
    });
    again
}

#[cfg(test)]
mod tests;
