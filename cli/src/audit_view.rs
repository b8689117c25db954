//! `airlock logs NAME --audit`'s lines: one human line per decision of the proxy's
//! `audit.jsonl` and the git API's `git-api.jsonl` (time, session, decision, what was asked,
//! why), a denial followed by the way to allow it where one exists, and the follower of
//! `--follow` ([`follow`]).
//!
//! The lines are read from the audit files; `--follow` reads the proxy's next ones from the
//! admin API's event stream when the sandbox's proxy serves it ([`stream`]), else polls the
//! files as `tail -F` does ([`follow`]). The proxy writes an `event: open` line
//! before anything of an allowed request goes upstream and its final line when it ends; as
//! the proxy's own human echo, one line per decision is the final line (the open line is
//! left out; `--json` prints every line as written).

pub mod follow;
pub mod stream;

use airlock_audit_schema::{
    Event, GitApiEvent, GitApiRecord, Kind, Line, Outage, Record, Reload, Rotated, Suppressed,
    Verdict,
};
use airlock_policy::Reason;

/// Which log a line is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The proxy's `audit.jsonl`.
    Proxy,
    /// The git API's `git-api.jsonl`.
    GitApi,
}

impl Source {
    /// The log's file name in the audit directory.
    #[must_use]
    pub const fn file(self) -> &'static str {
        match self {
            Source::Proxy => "audit.jsonl",
            Source::GitApi => "git-api.jsonl",
        }
    }
}

/// What to print and how.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Only refusals (and the counts of lines that left the log, which may hold some).
    pub denied: bool,
    /// Only the lines of the sessions whose id (or its random part) starts with this.
    pub session: Option<String>,
    /// The lines as written, not the human line.
    pub json: bool,
    /// Bold red refusals (stdout is a terminal).
    pub color: bool,
}

/// One parsed line of either log.
enum Parsed {
    Proxy(Line),
    Git(GitApiRecord),
}

/// The text to print for the raw line `raw` (without its newline), number `n` of `file` of
/// `source`; `None` when the view leaves it out. A line that does not read as an audit line
/// is `unreadable line N of FILE` (on its own; with `--json` too: the caller sends it to
/// stderr when [`is_unreadable`] says so).
#[must_use]
pub fn render(source: Source, raw: &str, file: &str, n: u64, view: &View) -> Option<String> {
    if raw.trim().is_empty() {
        return None;
    }
    if view.json && !view.denied && view.session.is_none() {
        return Some(raw.to_string());
    }
    let parsed = match source {
        Source::Proxy => serde_json::from_str::<Line>(raw).map(Parsed::Proxy),
        Source::GitApi => serde_json::from_str::<GitApiRecord>(raw).map(Parsed::Git),
    };
    let Ok(parsed) = parsed else {
        return Some(unreadable(file, n));
    };
    if !keep(&parsed, view) {
        return None;
    }
    if view.json {
        return Some(raw.to_string());
    }
    human(&parsed, view.color)
}

/// The text of a line that does not read as an audit line.
#[must_use]
pub fn unreadable(file: &str, n: u64) -> String {
    format!("unreadable line {n} of {file}")
}

/// Whether `text` (from [`render`]) is the unreadable-line notice.
#[must_use]
pub fn is_unreadable(text: &str) -> bool {
    text.starts_with("unreadable line ")
}

/// The session id's short form: its random part (after the start time), 6 hex digits.
#[must_use]
pub fn short_session(id: &str) -> &str {
    let random = id.split_once('-').map_or(id, |(_, r)| r);
    random.get(..6).unwrap_or(random)
}

fn session_of(p: &Parsed) -> Option<&str> {
    match p {
        Parsed::Proxy(Line::Record(r)) => Some(&r.session),
        Parsed::Proxy(Line::Suppressed(s)) => Some(&s.session),
        Parsed::Proxy(Line::Outage(o)) => Some(&o.session),
        Parsed::Proxy(Line::Reload(r)) => Some(&r.session),
        Parsed::Proxy(Line::Rotated(r)) => Some(&r.session),
        Parsed::Git(g) => g.session.as_deref(),
    }
}

fn keep(p: &Parsed, view: &View) -> bool {
    if let Some(want) = &view.session {
        let Some(id) = session_of(p) else {
            return false;
        };
        let random = id.split_once('-').map_or(id, |(_, r)| r);
        if !(id.starts_with(want.as_str()) || random.starts_with(want.as_str())) {
            return false;
        }
    }
    if view.denied {
        return match p {
            Parsed::Proxy(Line::Record(r)) => r.decision == Verdict::Deny,
            Parsed::Proxy(Line::Suppressed(_) | Line::Outage(_) | Line::Rotated(_)) => true,
            Parsed::Proxy(Line::Reload(r)) => r.decision == Verdict::Deny,
            Parsed::Git(g) => matches!(
                g.event,
                GitApiEvent::Decision {
                    decision: Verdict::Deny,
                    ..
                } | GitApiEvent::Rotated { .. }
            ),
        };
    }
    true
}

/// The human text of a parsed line (one line, or two: a refusal and how to allow it).
fn human(p: &Parsed, color: bool) -> Option<String> {
    let (head, deny, fix) = match p {
        Parsed::Proxy(Line::Record(r)) => {
            if r.event == Some(Event::Open) {
                return None; // its final line is the decision's line
            }
            record(r)
        }
        Parsed::Proxy(Line::Suppressed(s)) => suppressed(s),
        Parsed::Proxy(Line::Outage(o)) => outage(o),
        Parsed::Proxy(Line::Reload(r)) => reload(r),
        Parsed::Proxy(Line::Rotated(r)) => (rotated(r), false, None),
        Parsed::Git(g) => git(g),
    };
    let mut out = if deny && color {
        format!("\x1b[1;31m{head}\x1b[0m")
    } else {
        head
    };
    if let Some(fix) = fix {
        out.push_str("\n    ");
        out.push_str(&fix);
    }
    Some(out)
}

/// `ts session decision` at the start of every line.
fn lead(ts: impl std::fmt::Display, session: Option<&str>, what: &str) -> String {
    format!("{ts} {:<6} {what:<9} ", session.map_or("-", short_session))
}

fn host_port(host: Option<&str>, port: Option<u16>) -> String {
    let host = host.unwrap_or("?");
    match port {
        Some(p) if host.contains(':') => format!("[{host}]:{p}"),
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

/// What the request asked for: `METHOD host:port path`, `CONNECT host:port`, `DNS A host`.
fn target(r: &Record) -> String {
    let at = host_port(r.host.as_deref(), r.port);
    let method = r.method.as_deref();
    match r.kind {
        // A request read inside an intercepted tunnel: its own method and path.
        Kind::Connect if r.path.is_some() => format!(
            "{} {at}{}",
            method.unwrap_or("?"),
            r.path.as_deref().unwrap_or("")
        ),
        Kind::Connect => format!("CONNECT {at}"),
        Kind::Dns => format!(
            "DNS {} {}",
            method.unwrap_or("?"),
            r.host.as_deref().unwrap_or("?")
        ),
        Kind::Http | Kind::Transparent | Kind::GitService => {
            let mut s = String::new();
            if r.kind == Kind::GitService {
                s.push_str("git-service ");
            }
            match method {
                Some(m) => s.push_str(m),
                None if r.kind == Kind::Transparent => s.push_str("transparent"),
                None => s.push('?'),
            }
            s.push(' ');
            s.push_str(&at);
            if let Some(path) = &r.path {
                s.push_str(path);
            }
            s
        }
    }
}

fn record(r: &Record) -> (String, bool, Option<String>) {
    let mut s = lead(r.ts, Some(&r.session), r.decision.as_str());
    s.push_str(&target(r));
    let deny = matches!(r.decision, Verdict::Deny | Verdict::Report);
    if let Some(reason) = &r.reason {
        s.push_str("  ");
        s.push_str(reason);
    }
    if let Some(e) = r.event.filter(|e| *e != Event::Close) {
        s.push_str(&format!(" ({})", e.as_str()));
    }
    if let Some(rule) = &r.rule {
        s.push_str(&format!("  rule {rule:?}"));
    }
    if let Some(status) = r.status {
        s.push_str(&format!("  {status}"));
    }
    let asked = r
        .approval
        .as_deref()
        .filter(|_| r.reason.as_deref() == Some("approval-required"));
    let fix = if let Some(id) = asked {
        Some(format!(
            "to allow: airlock approve {id} --once (or --session); to refuse: airlock deny {id} --reason \"…\""
        ))
    } else if deny {
        r.reason.as_deref().and_then(|code| {
            allow_hint(
                code,
                r.host.as_deref(),
                r.port,
                r.method.as_deref(),
                r.path.as_deref(),
            )
        })
    } else {
        None
    };
    (s, r.decision == Verdict::Deny, fix)
}

fn suppressed(x: &Suppressed) -> (String, bool, Option<String>) {
    let mut s = lead(x.ts, Some(&x.session), x.decision.as_str());
    if x.overflow {
        s.push_str(&format!(
            "{} {} denials folded to hosts past the fold table ({} .. {}), since {}  {}",
            x.count,
            x.kind.as_str(),
            x.first_host.as_deref().unwrap_or("?"),
            x.host.as_deref().unwrap_or("?"),
            x.since,
            x.reason
        ));
        return (s, true, None);
    }
    s.push_str(&format!(
        "{} {}  {}: {} more denials folded since {}",
        x.kind.as_str(),
        host_port(x.host.as_deref(), x.port),
        x.reason,
        x.count,
        x.since
    ));
    let fix = allow_hint(&x.reason, x.host.as_deref(), x.port, None, None);
    (s, true, fix)
}

fn outage(o: &Outage) -> (String, bool, Option<String>) {
    let mut s = lead(o.ts, Some(&o.session), o.decision.as_str());
    s.push_str(&format!(
        "audit log  {}: not writable since {} ({}); {} requests refused, {} final lines lost",
        o.reason, o.since, o.error, o.refused, o.lost
    ));
    (s, true, None)
}

fn reload(r: &Reload) -> (String, bool, Option<String>) {
    let mut s = lead(r.ts, Some(&r.session), "reload");
    // The operator's policy reload (admin API): the revision, where it came from, what it
    // closed; a refused one names the revision that stays.
    if let Some(p) = &r.policy {
        let hash = p.hash.get(..12).unwrap_or(&p.hash);
        match &r.error {
            None => s.push_str(&format!(
                "policy revision {} ({hash}) from {}: {} open connection{} it refuses closed",
                p.revision,
                p.origin,
                p.closed,
                if p.closed == 1 { "" } else { "s" }
            )),
            Some(e) => s.push_str(&format!(
                "policy from {} refused, revision {} ({hash}) stays: {e}",
                p.origin, p.revision
            )),
        }
        return (s, r.decision == Verdict::Deny, None);
    }
    match &r.error {
        None => s.push_str(&format!(
            "rules replaced: {} secrets in {} files protected (+{} -{})",
            r.needles, r.files, r.added, r.dropped
        )),
        Some(e) => s.push_str(&format!("refused, the rules in force stay: {e}")),
    }
    (s, r.decision == Verdict::Deny, None)
}

fn rotated(r: &Rotated) -> String {
    let mut s = lead(r.ts, Some(&r.session), "rotated");
    s.push_str(&format!(
        "{} lines ({} bytes) left the log ({})",
        r.lines,
        r.bytes,
        r.part.as_str()
    ));
    if r.to_allowed + r.to_first > 0 {
        s.push_str(&format!(
            ", {} moved to the allowed archive, {} to the first archive",
            r.to_allowed, r.to_first
        ));
    }
    s.push_str(&format!("; this session: {} lines dropped", r.total.lines));
    s
}

fn git(g: &GitApiRecord) -> (String, bool, Option<String>) {
    let session = g.session.as_deref();
    match &g.event {
        GitApiEvent::Decision {
            argv,
            decision,
            exit,
            message,
            reason,
            suppressed,
            ..
        } => {
            let mut s = lead(g.ts, session, decision.as_str());
            s.push_str("git ");
            s.push_str(&argv.join(" "));
            if let Some(code) = exit {
                s.push_str(&format!("  exit {code}"));
            }
            if let Some(r) = reason {
                s.push_str("  ");
                s.push_str(r);
            }
            if let Some(m) = message {
                s.push_str(&format!(": {m}"));
            }
            if let Some(n) = suppressed {
                s.push_str(&format!(" ({n} refusals before it left out)"));
            }
            (s, *decision == Verdict::Deny, None)
        }
        GitApiEvent::Start { socket, .. } => {
            let mut s = lead(g.ts, session, "start");
            s.push_str(&format!("git API listening on {socket}"));
            (s, false, None)
        }
        GitApiEvent::Fatal { message, .. } => {
            let mut s = lead(g.ts, session, "fatal");
            s.push_str(&format!("git API stopped: {message}"));
            (s, true, None)
        }
        GitApiEvent::Panic { message, .. } => {
            let mut s = lead(g.ts, session, "panic");
            s.push_str(&format!("git API panicked: {message}"));
            (s, true, None)
        }
        GitApiEvent::Rotated {
            lines,
            bytes,
            carried,
            ..
        } => {
            let mut s = lead(g.ts, session, "rotated");
            s.push_str(&format!(
                "{lines} git API lines ({bytes} bytes) left the log, {carried} carried over"
            ));
            (s, false, None)
        }
    }
}

/// How the operator allows a refusal with reason `code` (the proxy's
/// `airlock_policy::Reason`): the policy change for the refused host when there is one,
/// else the reason's own hint ([`Reason::hint`]); `None` for a code this CLI does not know
/// (a newer appliance's).
#[must_use]
pub fn allow_hint(
    code: &str,
    host: Option<&str>,
    port: Option<u16>,
    method: Option<&str>,
    path: Option<&str>,
) -> Option<String> {
    let reason: Reason = code.parse().ok()?;
    let exact = crate::suggest::change_for(reason, host, port, method, path).map(|c| c.sentence());
    Some(exact.unwrap_or_else(|| {
        if reason.is_hard_deny() {
            format!("never allowed: {}", reason.hint())
        } else {
            format!("hint: {}", reason.hint())
        }
    }))
}

#[cfg(test)]
mod tests;
