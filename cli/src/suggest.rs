//! `airlock policy suggest`: the fewest policy lines that would have allowed what a
//! sandbox's proxy refused, read from its audit lines, for the operator to review.
//!
//! [`change_for`] is the one reading of "what would allow this refusal" (the logs' hints
//! say it in words, `audit_view::allow_hint`); [`Suggestion`] folds the refusals of a log
//! into those changes: exact hosts (never a wildcard the log did not show), an
//! `action = "allow"` rule per host and method for a write (its path as narrow as the
//! paths seen), and apart from them what no policy line lifts (hard denies, secrets,
//! credential leaks) or what is an edit rather than a line (a deny entry, a limit).
//!
//! It is a reading: it writes no file, reloads nothing and allows nothing. Everything in a
//! line came from the agent (host, method, path) and is printed as data, quoted.

use std::collections::{BTreeMap, BTreeSet};

use airlock_policy::reason::Reason;
use serde::Serialize;
use serde_json::Value;

/// What would have let one refusal through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `value` in the `[network]` list `key` (`allow`, `writable`, `passthrough`,
    /// `websocket`).
    Add { key: &'static str, value: String },
    /// A write to the read-only `host`: an `action = "allow"` rule of `[[rules]]` for the
    /// method and path when they are known, else the host in `[network] writable`.
    Write {
        host: String,
        method: Option<String>,
        path: Option<String>,
    },
    /// Not a line to add: something to remove, narrow or raise, in words.
    Edit(String),
}

impl Change {
    /// The change as the logs say it ("to allow: …").
    #[must_use]
    pub fn sentence(&self) -> String {
        match self {
            Change::Add {
                key: "allow",
                value,
            } => {
                format!("to allow: add {value:?} to [network] allow in the policy")
            }
            Change::Add {
                key: "passthrough",
                value,
            } => format!(
                "to allow: [network] passthrough = [{value:?}] in the policy (tunnelled unread)"
            ),
            Change::Add {
                key: "websocket",
                value,
            } => format!(
                "to allow: [network] websocket = [{value:?}] in the policy (the proxy reads the frames)"
            ),
            Change::Add { key, value } => {
                format!("to allow: [network] {key} = [{value:?}] in the policy")
            }
            Change::Write { host, method, path } => {
                let only = match (method, path) {
                    (Some(m), Some(p)) => {
                        format!(" ({m} {p} only: an action = \"allow\" rule in [[rules]])")
                    }
                    _ => String::new(),
                };
                format!("to allow: [network] writable = [{host:?}] in the policy{only}")
            }
            Change::Edit(text) => text.clone(),
        }
    }
}

/// `host` with the port a rule needs: none for 80 and 443 (a rule without a port allows
/// those), brackets around an IPv6 address that takes one.
fn host_rule(host: &str, port: Option<u16>) -> String {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    match port {
        Some(p) if p != 80 && p != 443 && h.contains(':') => format!("[{h}]:{p}"),
        Some(p) if p != 80 && p != 443 => format!("{h}:{p}"),
        _ => h.to_string(),
    }
}

/// What would have allowed a refusal for `reason` of `host` (`port`, and for a request
/// its `method` and `path`); `None` when no policy change would (a hard deny, a secret, a
/// credential leak, a malformed request) or the host is unknown.
#[must_use]
pub fn change_for(
    reason: Reason,
    host: Option<&str>,
    port: Option<u16>,
    method: Option<&str>,
    path: Option<&str>,
) -> Option<Change> {
    let host = host?;
    let h = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let add = |key, value| Some(Change::Add { key, value });
    match reason {
        Reason::BlockedByPolicy | Reason::BlockedIpLiteral | Reason::ApprovalRequired => {
            add("allow", host_rule(host, port))
        }
        Reason::ApprovalDenied => Some(Change::Edit(format!(
            "the operator denied {h:?} for the session that asked; to allow it for every session, add it to [network] allow"
        ))),
        Reason::BlockedPort => {
            let at = match port {
                Some(p) if h.contains(':') => format!("[{h}]:{p}"),
                Some(p) => format!("{h}:{p}"),
                None => h,
            };
            add("allow", at)
        }
        Reason::ReadOnlyHost => Some(Change::Write {
            host: h,
            method: method.map(str::to_owned),
            path: path.map(str::to_owned),
        }),
        Reason::BodyOnRead => add("writable", h),
        Reason::NotInspectable => add("passthrough", h),
        Reason::UpgradeDenied => add("websocket", h),
        Reason::DeniedByRule => Some(Change::Edit(format!(
            "to allow: remove or narrow the [network] deny entry that matches {h:?} (deny wins over allow)"
        ))),
        Reason::EncodedBlob => Some(Change::Edit(
            "to allow: [signals] encoded_blob = \"log\" in the policy (or raise blob_min_bytes)"
                .into(),
        )),
        Reason::HighEntropy => Some(Change::Edit(
            "to allow: [signals] high_entropy = \"log\" in the policy (or raise entropy_min_bytes)"
                .into(),
        )),
        Reason::BudgetExhausted => Some(Change::Edit(format!(
            "to allow more: raise the [limits] budget the line's rule names in the policy (per hour; {h} refused until it resets)"
        ))),
        Reason::RateLimited => Some(Change::Edit(format!(
            "to allow more: raise [limits] requests_per_second or request_burst in the policy (per session and host; {h} refused until its bucket refills)"
        ))),
        _ => None,
    }
}

/// How often something was refused, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub count: u64,
    pub first_ms: u64,
    pub last_ms: u64,
    /// The refusals' reason codes.
    pub reasons: BTreeSet<String>,
}

impl Tally {
    fn add(&mut self, r: &Refused) {
        self.first_ms = if self.count == 0 {
            r.ts_ms
        } else {
            self.first_ms.min(r.ts_ms)
        };
        self.last_ms = self.last_ms.max(r.ts_ms);
        self.count += r.count;
        self.reasons.insert(r.reason.clone());
    }
}

/// One refusal read from an audit line (a folded `suppressed` line counts its denials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: String,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub method: Option<String>,
    pub path: Option<String>,
    pub ts_ms: u64,
    pub count: u64,
}

impl Refused {
    /// The refusal a proxy audit line records: a `deny`, or a `report` (what enforce mode
    /// would have refused); `None` for any other line.
    #[must_use]
    pub fn from_line(v: &Value) -> Option<Refused> {
        let decision = v.get("decision")?.as_str()?;
        if decision != "deny" && decision != "report" {
            return None;
        }
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let ts = text("ts")?;
        let ts_ms = airlock_audit_schema::Timestamp::parse(&ts)?.0;
        let suppressed = text("event").as_deref() == Some("suppressed");
        // An overflow line names only the last of the destinations it counts.
        let overflow = v.get("overflow").and_then(Value::as_bool) == Some(true);
        Some(Refused {
            reason: text("reason")?,
            host: text("host").filter(|_| !overflow),
            port: v
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok()),
            method: text("method"),
            path: text("path"),
            ts_ms,
            count: if suppressed {
                v.get("count").and_then(Value::as_u64).unwrap_or(1)
            } else {
                1
            },
        })
    }
}

/// The policy lines that would have allowed a log's refusals, and what they leave.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Suggestion {
    /// `[network]` lists: key, then each value to add.
    pub network: BTreeMap<&'static str, BTreeMap<String, Tally>>,
    /// `action = "allow"` rules: host, method, path glob.
    pub rules: Vec<RuleLine>,
    /// Changes that are edits, not lines (a deny entry, a limit, a signal).
    pub edits: BTreeMap<String, Tally>,
    /// Refusals no policy line lifts, by reason code.
    pub never: BTreeMap<String, Tally>,
    /// Refusals read.
    pub refusals: u64,
}

/// An `action = "allow"` rule of `[[rules]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleLine {
    pub host: String,
    pub method: String,
    pub path: String,
    pub tally: Tally,
}

/// Folds `refused` (from the oldest) into the lines that would have allowed them.
#[must_use]
pub fn suggest(refused: impl IntoIterator<Item = Refused>) -> Suggestion {
    let mut s = Suggestion::default();
    // Writes with a method: (host, method) -> the paths seen, and their tally.
    let mut writes: BTreeMap<(String, String), (Vec<String>, Tally)> = BTreeMap::new();
    for r in refused {
        s.refusals += r.count;
        let change = r.reason.parse::<Reason>().ok().and_then(|reason| {
            change_for(
                reason,
                r.host.as_deref(),
                r.port,
                r.method.as_deref(),
                r.path.as_deref(),
            )
        });
        match change {
            Some(Change::Add { key, value }) => {
                s.network
                    .entry(key)
                    .or_default()
                    .entry(value)
                    .or_default()
                    .add(&r);
            }
            Some(Change::Write {
                host,
                method: Some(method),
                path: Some(path),
            }) => {
                let (paths, tally) = writes
                    .entry((host, method.to_ascii_uppercase()))
                    .or_default();
                paths.push(path);
                tally.add(&r);
            }
            Some(Change::Write { host, .. }) => {
                s.network
                    .entry("writable")
                    .or_default()
                    .entry(host)
                    .or_default()
                    .add(&r);
            }
            Some(Change::Edit(text)) => s.edits.entry(text).or_default().add(&r),
            None => s.never.entry(r.reason.clone()).or_default().add(&r),
        }
    }
    s.rules = writes
        .into_iter()
        .map(|((host, method), (paths, tally))| RuleLine {
            host,
            method,
            path: path_glob(&paths),
            tally,
        })
        .collect();
    s
}

/// The narrowest path glob of `[[rules]]` matching every path in `paths`: the one path
/// when they are all the same, else their common leading segments and `/**`. A segment
/// that a glob would not read literally (`*`, `?`, `[`, `{`, a `%` escape, `.`, `..`, an
/// empty one) ends the literal part; the query is never part of it.
#[must_use]
pub fn path_glob(paths: &[String]) -> String {
    let literal = |p: &str| -> (Vec<String>, bool) {
        let p = p.split(['?', '#']).next().unwrap_or("");
        let mut out = Vec::new();
        let segments: Vec<&str> = p.strip_prefix('/').unwrap_or(p).split('/').collect();
        for seg in &segments {
            let plain = !seg.is_empty()
                && *seg != "."
                && *seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~@:+,;=!$'()".contains(&b));
            if !plain {
                return (out, false);
            }
            out.push((*seg).to_owned());
        }
        (out, true)
    };
    let read: Vec<(Vec<String>, bool)> = paths.iter().map(|p| literal(p)).collect();
    let Some((first, whole)) = read.first() else {
        return "/**".into();
    };
    if *whole && read.iter().all(|(s, w)| *w && s == first) {
        return format!("/{}", first.join("/"));
    }
    let common = first
        .iter()
        .enumerate()
        .take_while(|(i, seg)| read.iter().all(|(s, _)| s.get(*i) == Some(*seg)))
        .count();
    if common == 0 {
        "/**".into()
    } else {
        format!("/{}/**", first[..common].join("/"))
    }
}

/// The suggestion as a fragment of a policy file, with a comment per line saying what it
/// would have allowed, and the refusals no line lifts as comments.
#[must_use]
pub fn render(s: &Suggestion, name: &str) -> String {
    let mut out = String::new();
    if s.refusals == 0 {
        out.push_str(&format!(
            "# {name}: no refusal in its audit log: nothing to suggest.\n"
        ));
        return out;
    }
    out.push_str(&format!(
        "# {name}: {} refusal{} in its audit log. Review each line before adding it to the\n# policy file; then: airlock policy reload {name} FILE\n",
        s.refusals,
        plural(s.refusals)
    ));
    let seen = |t: &Tally| {
        let reasons: Vec<&str> = t.reasons.iter().map(String::as_str).collect();
        format!(
            "{} refusal{} ({}), last {}",
            t.count,
            plural(t.count),
            reasons.join(", "),
            airlock_audit_schema::Timestamp(t.last_ms)
        )
    };
    if !s.network.is_empty() {
        out.push_str("\n[network]\n");
        for (key, values) in &s.network {
            out.push_str(&format!("{key} = [\n"));
            for (value, t) in values {
                out.push_str(&format!(
                    "    {:<40} # {}\n",
                    format!("{value:?},"),
                    seen(t)
                ));
            }
            out.push_str("]\n");
        }
    }
    for r in &s.rules {
        out.push_str(&format!(
            "\n# {}\n[[rules]]\nhost = {:?}\nmethod = {:?}\npath = {:?}\naction = \"allow\"\n",
            seen(&r.tally),
            r.host,
            r.method,
            r.path
        ));
    }
    if !s.edits.is_empty() {
        out.push_str("\n# Not a line to add:\n");
        for (text, t) in &s.edits {
            out.push_str(&format!("#   {text} ({})\n", seen(t)));
        }
    }
    if !s.never.is_empty() {
        out.push_str("\n# Refused whatever the policy says (no line lifts these):\n");
        for (reason, t) in &s.never {
            let hint = reason.parse::<Reason>().map_or("", |r| r.hint());
            out.push_str(&format!("#   {reason}: {} ({hint})\n", seen(t)));
        }
    }
    out
}

/// The start of `--since TEXT` in Unix milliseconds: a time as the logs write it
/// (`2026-11-28T10:00:00.000Z`), or a span back from `now_ms` (`90s`, `30m`, `2h`, `7d`).
///
/// # Errors
/// A sentence naming the forms, for anything else.
pub fn since_ms(text: &str, now_ms: u64) -> Result<u64, String> {
    if let Some(t) = airlock_audit_schema::Timestamp::parse(text) {
        return Ok(t.0);
    }
    match crate::span::parse(text) {
        Some(d) => Ok(now_ms.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
        None => Err(format!(
            "--since {text:?} is neither a span (90s, 30m, 2h, 7d) nor a time as the logs write it (2026-11-28T10:00:00.000Z)"
        )),
    }
}

const fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests;
