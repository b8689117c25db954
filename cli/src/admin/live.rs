//! What a running sandbox's admin API says about it now (`status`, `top`): its start's
//! state, the policy revision in force, the sessions, the counters, the items waiting for
//! the operator.

use super::{AdminError, Client};
use airlock_audit_schema::Timestamp;
use airlock_control::admin::{
    Approval, AuditState, Counters, PolicyRevision, Session, SessionKind,
};
use airlock_control::status::{State, Status};
use serde::Serialize;

/// How many denial reasons `status` names.
pub const TOP_REASONS: usize = 5;

/// One sandbox's live view, as `status --json` prints it under `admin`.
#[derive(Debug, Clone, Serialize)]
pub struct Live {
    /// The start's readiness record.
    pub status: Status,
    /// The policy revision in force.
    pub policy: PolicyRevision,
    /// The sessions of this start, oldest first.
    pub sessions: Vec<Session>,
    /// The proxy's counters since the start.
    pub counters: Counters,
    /// The operator's inbox (empty from a proxy older than approvals).
    pub approvals: Vec<Approval>,
}

/// One inbox item as a line: where (`SANDBOX/ID`), who, what, how often, where it stands
/// (`approvals`, `top`'s inbox). What the agent chose (the host, a denial's reason) is
/// escaped for the terminal.
#[must_use]
pub fn item_line(sandbox: &str, a: &Approval) -> String {
    use crate::review::escape;
    let answer = match (a.state.as_str(), &a.scope, &a.reason) {
        ("denied", _, Some(r)) => format!("denied: {}", escape(r.as_bytes())),
        (state, Some(scope), _) => format!("{state} ({scope})"),
        (state, ..) => state.to_owned(),
    };
    format!(
        "{sandbox}/{}  {}  {}:{}  {} hit{}, last {}  {answer}",
        a.id,
        a.session,
        escape(a.host.as_bytes()),
        a.port,
        a.hits,
        if a.hits == 1 { "" } else { "s" },
        when(a.last_ms),
    )
}

/// What the agent said it needs the host for (its own words, escaped and marked untrusted)
/// and the item's security notes, a line each.
#[must_use]
pub fn item_details(a: &Approval) -> Vec<String> {
    use crate::review::escape;
    let said = a
        .said
        .iter()
        .map(|s| format!("the agent says (untrusted): \"{}\"", escape(s.as_bytes())));
    let rule = a.rule.iter().map(|r| {
        format!(
            "asked by the rule {}: approving lets through the requests it matches, nothing else on the host",
            escape(r.as_bytes())
        )
    });
    let notes = a
        .notes
        .iter()
        .map(|n| format!("note: {}", escape(n.as_bytes())));
    rule.chain(said).chain(notes).collect()
}

/// Ask the admin API of `client` for everything at once.
///
/// # Errors
/// The first of the requests that failed.
pub async fn gather(client: &Client) -> Result<Live, AdminError> {
    let (status, policy, sessions, counters, approvals) = tokio::join!(
        client.status(),
        client.policy(),
        client.sessions(),
        client.counters(),
        client.approvals()
    );
    Ok(Live {
        status: status?,
        policy: policy?,
        sessions: sessions?.sessions,
        counters: counters?,
        // A proxy older than approvals has none to show.
        approvals: match approvals {
            Err(e) if e.code() == Some(airlock_control::admin::ErrorCode::NotFound) => Vec::new(),
            other => other?,
        },
    })
}

/// A hash's short form (12 hex digits, as git's).
#[must_use]
pub fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// A time in Unix milliseconds as the audit lines write it.
#[must_use]
pub fn when(ms: u64) -> String {
    Timestamp(ms).to_string()
}

fn state(s: State) -> &'static str {
    match s {
        State::Starting => "starting",
        State::Ready => "ready",
        State::Refused => "refused",
        State::Unknown => "unknown",
    }
}

fn kind(k: SessionKind) -> &'static str {
    match k {
        SessionKind::Agent => "agent",
        SessionKind::Exec => "exec",
        SessionKind::Unknown => "session",
    }
}

/// The audit log's state, for a person.
#[must_use]
pub fn audit(a: AuditState) -> &'static str {
    match a {
        AuditState::Writing => "writing",
        AuditState::Outage => "OUTAGE: the log cannot be written, every request is refused",
        AuditState::Unknown => "unknown (a newer appliance's state)",
    }
}

/// The denial reasons, most frequent first (ties by name), at most `n`.
#[must_use]
pub fn top_reasons(c: &Counters, n: usize) -> Vec<(&str, u64)> {
    let mut v: Vec<(&str, u64)> = c
        .denied_by_reason
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.truncate(n);
    v
}

/// The human lines of `status` for a running sandbox (aligned as its other lines).
#[must_use]
pub fn lines(l: &Live) -> Vec<String> {
    let mut out = Vec::new();
    let s = &l.status;
    let mut proxy = format!("{} (appliance {}", state(s.state), s.version);
    if let Some(at) = s.ready_at_ms {
        proxy.push_str(&format!(", ready at {}", when(at)));
    }
    proxy.push(')');
    if let Some(r) = &s.reason {
        proxy.push_str(&format!(": {r}"));
    }
    out.push(format!("proxy       {proxy}"));
    let p = &l.policy;
    out.push(format!(
        "policy      revision {} ({}) loaded at {} from {}",
        p.revision,
        short_hash(&p.hash),
        when(p.loaded_at_ms),
        p.origin
    ));
    out.push(format!("live        {} session(s)", l.sessions.len()));
    for x in &l.sessions {
        let uid = x.uid.map_or(String::new(), |u| format!(", uid {u}"));
        // Every session of a start shares its id; an older proxy says no number (0).
        let number = if x.number == 0 {
            String::new()
        } else {
            format!("session {} ", x.number)
        };
        out.push(format!(
            "  {number}{} {} (since {}{uid})",
            kind(x.kind),
            x.id,
            when(x.started_at_ms)
        ));
    }
    let c = &l.counters;
    out.push(format!(
        "requests    {}: {} allowed, {} denied",
        c.requests, c.allowed, c.denied
    ));
    let reasons = top_reasons(c, TOP_REASONS);
    if !reasons.is_empty() {
        let text: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
        out.push(format!("denials     {}", text.join(", ")));
    }
    out.push(format!("audit       {}", audit(c.audit)));
    out.push(format!("connections {} open", c.open_connections));
    for b in &c.budgets {
        let scope = b.scope.as_deref().map_or(String::new(), |s| {
            format!(" ({})", crate::review::escape(s.as_bytes()))
        });
        out.push(format!(
            "budget      {}{scope} {} of {} this hour (resets {})",
            b.budget,
            b.used,
            b.limit,
            when(b.resets_at_ms)
        ));
    }
    if !c.open_circuits.is_empty() {
        let open: Vec<String> = c
            .open_circuits
            .iter()
            .map(|u| crate::review::escape(u.as_bytes()))
            .collect();
        out.push(format!(
            "circuits    open: {} (answered upstream-circuit-open until a probe finds them well)",
            open.join(", ")
        ));
    }
    let pending = l.approvals.iter().filter(|a| a.state == "pending").count();
    if pending > 0 {
        out.push(format!(
            "approvals   {pending} pending (airlock approvals; approve ID or deny ID)"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn reasons_most_frequent_first() {
        let c = Counters {
            requests: 9,
            allowed: 3,
            denied: 6,
            denied_by_reason: BTreeMap::from([
                ("a".to_owned(), 1),
                ("b".to_owned(), 3),
                ("c".to_owned(), 1),
                ("d".to_owned(), 1),
            ]),
            bytes_out_by_host: BTreeMap::new(),
            open_connections: 0,
            open_circuits: vec!["down.example:443".into()],
            budgets: vec![airlock_control::admin::BudgetUse {
                budget: "sandbox_requests_per_hour".into(),
                scope: None,
                used: 12,
                limit: 1000,
                resets_at_ms: 1_764_300_000_000,
            }],
            audit: AuditState::Outage,
        };
        assert_eq!(top_reasons(&c, 3), [("b", 3), ("a", 1), ("c", 1)]);
        let live = Live {
            status: Status::starting("0.1.0", 0).ready(1_764_300_000_000, Default::default()),
            policy: PolicyRevision {
                revision: 4,
                hash: "0123456789abcdef".into(),
                loaded_at_ms: 1_764_300_000_000,
                origin: "/etc/airlock/policy.toml".into(),
                rules: Vec::new(),
            },
            sessions: vec![],
            counters: c,
            approvals: Vec::new(),
        };
        let text = lines(&live).join("\n");
        assert!(
            text.contains(
                "policy      revision 4 (0123456789ab) loaded at 2025-11-28T03:20:00.000Z from /etc/airlock/policy.toml"
            ),
            "{text}"
        );
        assert!(text.contains("denials     b 3, a 1, c 1, d 1"), "{text}");
        assert!(text.contains("audit       OUTAGE"), "{text}");
        assert!(
            text.contains("circuits    open: down.example:443 ("),
            "{text}"
        );
    }
}
