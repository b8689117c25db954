//! The proxy's counters, fed by the audit writer from the records it is given, so that they
//! and the log agree by construction: every decision the log records (folded denials
//! included, which the log counts in `suppressed` lines) is counted here once, when its
//! final line is handed over; `open` lines are not counted (their request's final line is).
//!
//! Read by the admin API as [`Counters`] and as Prometheus text ([`Metrics::prometheus`]).
//! Bytes sent upstream are kept per host for at most [`MAX_HOSTS`] hosts; the rest are
//! summed under [`OTHER_HOSTS`], so an agent that makes up host names cannot grow the table.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use airlock_control::admin::{AuditState, Counters};

use airlock_audit_schema::{Event, Verdict};
use airlock_policy::reason::Reason;

/// A record as the proxy writes it.
type Record = airlock_audit_schema::Record<Reason>;

/// Hosts whose upstream bytes are counted on their own.
pub const MAX_HOSTS: usize = 256;
/// The name the bytes of hosts past [`MAX_HOSTS`] are summed under.
pub const OTHER_HOSTS: &str = "(other)";

/// Counters since the proxy started.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    reported: AtomicU64,
    by_reason: Mutex<BTreeMap<&'static str, u64>>,
    bytes_out: Mutex<HashMap<String, u64>>,
    /// Decisions per session of the agent, by decision (at most `MAX_SESSIONS` keys: the
    /// number comes from the firewall, not from the agent).
    by_session: Mutex<BTreeMap<(u16, &'static str), u64>>,
    /// Admin API peers refused (`SO_PEERCRED`).
    pub admin_refused: AtomicU64,
    /// Event-stream followers dropped because they stopped reading.
    pub followers_dropped: AtomicU64,
    /// Event-stream followers attached now.
    pub followers: AtomicU64,
}

impl Metrics {
    /// Counts `rec`, a record handed to the audit log (an `open` line counts nothing).
    pub fn record(&self, rec: &Record) {
        // An `open` line is followed by the request's own; a token note is no decision.
        if matches!(
            rec.event,
            Some(
                Event::Open
                    | Event::LlmTokensWarning
                    | Event::LlmTokensSpent
                    | Event::ApprovalAnswered
            )
        ) {
            return;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        match rec.decision {
            Verdict::Allow | Verdict::Abandoned => {
                self.allowed.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Deny => {
                self.denied.fetch_add(1, Ordering::Relaxed);
                if let Some(reason) = rec.reason {
                    *self
                        .by_reason
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(reason.as_str())
                        .or_default() += 1;
                }
            }
            Verdict::Report => {
                self.reported.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(k) = rec.agent_session {
            *self
                .by_session
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry((k, rec.decision.as_str()))
                .or_default() += 1;
        }
        if rec.bytes_up > 0
            && let Some(host) = rec.host.as_deref()
        {
            let mut table = self
                .bytes_out
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let key = if table.contains_key(host) || table.len() < MAX_HOSTS {
                host
            } else {
                OTHER_HOSTS
            };
            match table.get_mut(key) {
                Some(n) => *n += rec.bytes_up,
                None => {
                    table.insert(key.to_owned(), rec.bytes_up);
                }
            }
        }
    }

    /// The counters now, with the connections open now and the audit log's state.
    #[must_use]
    pub fn counters(&self, open_connections: u64, audit_available: bool) -> Counters {
        Counters {
            requests: self.requests.load(Ordering::Relaxed),
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            denied_by_reason: self
                .by_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            bytes_out_by_host: self
                .bytes_out
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            open_connections,
            open_circuits: Vec::new(),
            budgets: Vec::new(),
            audit: if audit_available {
                AuditState::Writing
            } else {
                AuditState::Outage
            },
        }
    }

    /// Prometheus text exposition of `c` and the policy `revision`.
    #[must_use]
    pub fn prometheus(&self, c: &Counters, revision: u64) -> String {
        let mut out = String::with_capacity(2048);
        family(
            &mut out,
            "requests_total",
            "counter",
            "Decisions made, by decision.",
        );
        let _ = writeln!(
            out,
            "airlock_requests_total{{decision=\"allow\"}} {}\nairlock_requests_total{{decision=\"deny\"}} {}\nairlock_requests_total{{decision=\"report\"}} {}",
            c.allowed,
            c.denied,
            self.reported.load(Ordering::Relaxed)
        );
        family(
            &mut out,
            "session_requests_total",
            "counter",
            "Decisions made for each session of the agent (1: its first process; 2 and up: airlock exec), by decision.",
        );
        for ((k, decision), n) in self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "airlock_session_requests_total{{session=\"{k}\",decision=\"{decision}\"}} {n}"
            );
        }
        family(
            &mut out,
            "denials_total",
            "counter",
            "Denials, by reason code.",
        );
        for (reason, n) in &c.denied_by_reason {
            let _ = writeln!(
                out,
                "airlock_denials_total{{reason=\"{}\"}} {n}",
                label(reason)
            );
        }
        family(
            &mut out,
            "upstream_bytes_sent_total",
            "counter",
            "Bytes sent upstream, by host.",
        );
        for (host, n) in &c.bytes_out_by_host {
            let _ = writeln!(
                out,
                "airlock_upstream_bytes_sent_total{{host=\"{}\"}} {n}",
                label(host)
            );
        }
        family(
            &mut out,
            "open_connections",
            "gauge",
            "Client connections open now.",
        );
        let _ = writeln!(out, "airlock_open_connections {}", c.open_connections);
        limits_families(&mut out, c);
        family(
            &mut out,
            "audit_writing",
            "gauge",
            "1 while the audit log is written, 0 during an outage (requests are refused).",
        );
        let _ = writeln!(
            out,
            "airlock_audit_writing {}",
            u8::from(c.audit == AuditState::Writing)
        );
        family(
            &mut out,
            "policy_revision",
            "gauge",
            "The policy revision in force.",
        );
        let _ = writeln!(out, "airlock_policy_revision {revision}");
        family(
            &mut out,
            "admin_refused_total",
            "counter",
            "Admin API connections refused by their peer's credentials.",
        );
        let _ = writeln!(
            out,
            "airlock_admin_refused_total {}",
            self.admin_refused.load(Ordering::Relaxed)
        );
        family(
            &mut out,
            "event_followers",
            "gauge",
            "Event-stream followers attached.",
        );
        let _ = writeln!(
            out,
            "airlock_event_followers {}",
            self.followers.load(Ordering::Relaxed)
        );
        family(
            &mut out,
            "event_followers_dropped_total",
            "counter",
            "Event-stream followers dropped because they stopped reading.",
        );
        let _ = writeln!(
            out,
            "airlock_event_followers_dropped_total {}",
            self.followers_dropped.load(Ordering::Relaxed)
        );
        out
    }
}

/// A metric family's `HELP` and `TYPE` lines.
/// The `[limits]` families: open circuits, and the sandbox's own budgets used and their
/// limits (per session and host: the admin API's counters).
fn limits_families(out: &mut String, c: &Counters) {
    family(
        out,
        "open_circuits",
        "gauge",
        "Upstreams whose circuit breaker is open now.",
    );
    let _ = writeln!(out, "airlock_open_circuits {}", c.open_circuits.len());
    family(
        out,
        "budget_used",
        "gauge",
        "Spent of each of the sandbox's hourly budgets in its current window (the sandbox's own; per session and host: the admin API's counters).",
    );
    for b in c.budgets.iter().filter(|b| b.scope.is_none()) {
        let _ = writeln!(
            out,
            "airlock_budget_used{{budget=\"{}\"}} {}",
            label(&b.budget),
            b.used
        );
    }
    family(
        out,
        "budget_limit",
        "gauge",
        "Each of the sandbox's hourly budgets.",
    );
    for b in c.budgets.iter().filter(|b| b.scope.is_none()) {
        let _ = writeln!(
            out,
            "airlock_budget_limit{{budget=\"{}\"}} {}",
            label(&b.budget),
            b.limit
        );
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(
        out,
        "# HELP airlock_{name} {help}\n# TYPE airlock_{name} {kind}"
    );
}

/// A label value escaped as the exposition format wants (`\\`, `\"`, `\n`).
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_audit_schema::{Kind, Who};

    fn rec(decision: Verdict, reason: Option<Reason>, host: &str, up: u64) -> Record {
        let who = Who::new("s", "box", None);
        let mut r = Record::new(&who, std::time::SystemTime::now(), Kind::Http, None);
        r.decision = decision;
        r.reason = reason;
        r.host = Some(host.to_owned());
        r.bytes_up = up;
        r
    }

    #[test]
    fn final_lines_are_counted_once_and_open_lines_not_at_all() {
        let m = Metrics::default();
        let mut open = rec(Verdict::Allow, None, "a.example", 0);
        open.event = Some(Event::Open);
        m.record(&open);
        m.record(&rec(Verdict::Allow, None, "a.example", 10));
        m.record(&rec(
            Verdict::Deny,
            Some(Reason::BlockedByPolicy),
            "b.example",
            0,
        ));
        m.record(&rec(
            Verdict::Deny,
            Some(Reason::BlockedByPolicy),
            "c.example",
            0,
        ));
        let c = m.counters(3, true);
        assert_eq!((c.requests, c.allowed, c.denied), (3, 1, 2));
        assert_eq!(c.denied_by_reason.get("blocked-by-policy"), Some(&2));
        assert_eq!(c.bytes_out_by_host.get("a.example"), Some(&10));
        assert_eq!(c.open_connections, 3);
        assert_eq!(c.audit, AuditState::Writing);
    }

    /// Each session's decisions are its own series; a line that names no session (the git
    /// API, an unknown client) is in the totals only.
    #[test]
    fn decisions_are_counted_per_session() {
        let m = Metrics::default();
        let mut two = rec(Verdict::Allow, None, "a.example", 0);
        two.agent_session = Some(2);
        m.record(&two);
        m.record(&two);
        let mut three = rec(Verdict::Deny, Some(Reason::BlockedByPolicy), "b.example", 0);
        three.agent_session = Some(3);
        m.record(&three);
        m.record(&rec(Verdict::Allow, None, "c.example", 0));
        let text = m.prometheus(&m.counters(0, true), 1);
        assert!(
            text.contains("airlock_session_requests_total{session=\"2\",decision=\"allow\"} 2\n")
                && text.contains(
                    "airlock_session_requests_total{session=\"3\",decision=\"deny\"} 1\n"
                )
                && text.matches("airlock_session_requests_total{").count() == 2,
            "{text}"
        );
    }

    #[test]
    fn made_up_hosts_cannot_grow_the_byte_table() {
        let m = Metrics::default();
        for i in 0..MAX_HOSTS + 100 {
            m.record(&rec(Verdict::Allow, None, &format!("h{i}.example"), 1));
        }
        let c = m.counters(0, true);
        assert_eq!(c.bytes_out_by_host.len(), MAX_HOSTS + 1);
        assert_eq!(c.bytes_out_by_host.get(OTHER_HOSTS), Some(&100));
    }

    #[test]
    fn the_exposition_escapes_labels_and_names_every_family() {
        let m = Metrics::default();
        m.record(&rec(Verdict::Allow, None, "we\"ird\\host", 5));
        let text = m.prometheus(&m.counters(1, false), 4);
        assert!(text.contains("airlock_upstream_bytes_sent_total{host=\"we\\\"ird\\\\host\"} 5"));
        assert!(text.contains("airlock_audit_writing 0"));
        assert!(text.contains("airlock_policy_revision 4"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').unwrap();
            assert!(name.starts_with("airlock_"), "{line}");
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }
}
