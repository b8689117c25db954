//! The operator's inbox on the admin API: list it, show one item with its review token,
//! take an answer ([`crate::approvals`] holds the items; this is the thin side that reads
//! the API's requests, writes the answer's audit line and renders the items).
//!
//! An answer is audited before it takes effect (`event: approval-answered`, who answered
//! from the socket's credentials): without the line nothing is answered. An `always`
//! answer is a grant: a policy revision first ([`Revisions::regrant`], its own `reload`
//! line naming the grant and who made it), and only once it is in force the item's answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_control::admin::{AnswerRequest, Approval, ErrorBody, ErrorCode, Reloaded};
use airlock_policy::Policy;
use airlock_policy::overlay::Grant;

use crate::Shared;
use crate::approvals::{Answer, AnswerError, Item, Scope, State, token};
use crate::audit::{Event, Kind, Record, Verdict};
use crate::revision::Revisions;

/// Longest answer the operator may give (`for`): 30 days.
const MAX_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest denial reason, in characters (the agent reads it).
const MAX_REASON: usize = 500;

/// The inbox, pending items first.
pub(super) fn list(shared: &Shared) -> Vec<Approval> {
    let rules = shared.rules.load();
    (shared.approvals.list().iter())
        .map(|i| view(i, &rules.policy, None))
        .collect()
}

/// Item `id` with its review token under `revision`.
pub(super) fn show(shared: &Shared, id: &str, revision: u64) -> Result<Approval, ErrorBody> {
    let item = shared.approvals.get(id).ok_or_else(|| not_found(id))?;
    let rules = shared.rules.load();
    Ok(view(&item, &rules.policy, Some(token(&item, revision))))
}

/// Takes the operator `by`'s answer `a` under `revision`: checked, audited, then applied
/// (an `always` one made a grant by `revisions` first).
pub(super) async fn answer(
    shared: &Shared,
    revisions: &Revisions,
    a: &AnswerRequest,
    by: u32,
    revision: u64,
) -> Result<Approval, ErrorBody> {
    let answer = read(a, SystemTime::now())?;
    let always = answer.always();
    // The line first: an answer nobody can find in the log is not taken.
    let item = shared
        .approvals
        .answerable(&a.id, a.token.as_deref(), revision)
        .map_err(|e| refused(&e))?;
    if always {
        if let Some(rule) = &item.rule {
            return Err(bad_request(format!(
                "approval {} was asked by the rule {rule:?}: a grant is for a host; to let that rule's requests through always, make its action \"allow\" in the policy file and reload it",
                item.id
            )));
        }
        grant(shared, revisions, &item, &answer, by).await?;
    }
    let line = answer_line(shared, &item, &answer, by);
    if shared.audit.commit(&line).is_err() {
        return Err(ErrorBody {
            code: ErrorCode::Unavailable,
            message: if always {
                "the audit log cannot be written: the grant is in force (its reload line is written), the item is left pending".into()
            } else {
                "the audit log cannot be written: nothing was answered".into()
            },
        });
    }
    let answered = shared
        .approvals
        .answer(&a.id, answer, by, a.token.as_deref(), revision)
        .map_err(|e| refused(&e))?;
    if always {
        // The other sessions' items the grant decides now, and connections it refuses.
        super::settle(shared);
    }
    tracing::info!(
        "approval {} ({}:{}) answered {} by uid {by}",
        answered.id,
        answered.host,
        answered.port,
        answered.state.as_str()
    );
    let rules = shared.rules.load();
    Ok(view(&answered, &rules.policy, None))
}

/// The answer `a` asks for, read at `wall` (a `for` becomes a time), or why it is refused:
/// a time out of range or given where it means nothing, an unknown scope, a denial without
/// a one-line reason.
fn read(a: &AnswerRequest, wall: SystemTime) -> Result<Answer, ErrorBody> {
    let until = match a.for_seconds.map(Duration::from_secs) {
        Some(d) if d.is_zero() || d > MAX_FOR => {
            return Err(bad_request(format!(
                "for is 1 second to {} days",
                MAX_FOR.as_secs() / 86_400
            )));
        }
        d => d.map(|d| wall + d),
    };
    let always = a.scope.as_deref() == Some("always");
    if always && until.is_some() {
        return Err(bad_request(
            "an always answer holds until it is revoked: it takes no time".into(),
        ));
    }
    Ok(if a.approve {
        let scope = match a.scope.as_deref() {
            Some("once") => Scope::Once,
            Some("session") => Scope::Session,
            Some("always") => Scope::Always,
            other => {
                return Err(bad_request(format!(
                    "an approval's scope is \"once\", \"session\" or \"always\", not {other:?}"
                )));
            }
        };
        if scope == Scope::Once && until.is_some() {
            return Err(bad_request(
                "an approval for one connection takes no time".into(),
            ));
        }
        Answer::Approve { scope, until }
    } else {
        if let Some(other) = a
            .scope
            .as_deref()
            .filter(|s| *s != "always" && *s != "session")
        {
            return Err(bad_request(format!(
                "a denial's scope is \"session\" (the default) or \"always\", not {other:?}"
            )));
        }
        let reason = a.reason.as_deref().map(str::trim).unwrap_or_default();
        if reason.is_empty()
            || reason.chars().count() > MAX_REASON
            || reason.chars().any(char::is_control)
        {
            return Err(bad_request(format!(
                "a denial needs a reason for the agent: one line of 1 to {MAX_REASON} characters"
            )));
        }
        Answer::Deny {
            reason: reason.to_owned(),
            until,
            always,
        }
    })
}

/// Makes `answer` (an `always` one) to `item` a grant of the operator `by`: the revision
/// that carries it is in force when this returns.
async fn grant(
    shared: &Shared,
    revisions: &Revisions,
    item: &Item,
    answer: &Answer,
    by: u32,
) -> Result<Reloaded, ErrorBody> {
    let (allow, why) = match answer {
        Answer::Approve { .. } => (true, item.said.clone()),
        Answer::Deny { reason, .. } => (false, Some(reason.clone())),
    };
    let g = Grant {
        id: item.id.clone(),
        allow,
        host: item.host.clone(),
        port: item.port,
        by,
        at: airlock_audit_schema::Timestamp::from(SystemTime::now()).to_string(),
        why,
    };
    let origin = format!(
        "{} --always {} ({}:{}) by uid {by}",
        if allow { "approve" } else { "deny" },
        item.id,
        item.host,
        item.port
    );
    let r = revisions
        .regrant(
            &shared.rules,
            &shared.audit,
            |o| Ok(o.with(g)),
            origin,
            |new| shared.conns.refused_by(new),
        )
        .await?;
    Ok(r)
}

/// Takes back the grant `id` (the operator `by`'s call): the revision without it is in
/// force when this returns.
pub(super) async fn revoke(
    shared: &Shared,
    revisions: &Revisions,
    id: &str,
    by: u32,
) -> Result<Reloaded, ErrorBody> {
    // The grants file's: a grant another sandbox sharing it made can be revoked here too.
    let g = revisions
        .stored_grants()?
        .get(id)
        .cloned()
        .ok_or_else(|| ErrorBody {
            code: ErrorCode::NotFound,
            message: format!(
                "no grant {id} (airlock policy show NAME lists the grants, each with its id)"
            ),
        })?;
    let origin = format!(
        "revoke {} --always {id} ({}:{}) by uid {by}",
        if g.allow { "approve" } else { "deny" },
        g.host,
        g.port
    );
    let r = revisions
        .regrant(
            &shared.rules,
            &shared.audit,
            |o| {
                o.without(id).ok_or_else(|| ErrorBody {
                    code: ErrorCode::NotFound,
                    message: format!("no grant {id}: revoked meanwhile"),
                })
            },
            origin,
            |new| shared.conns.refused_by(new),
        )
        .await?;
    shared.approvals.revoked(id, by);
    super::settle(shared);
    tracing::info!("grant {id} revoked by uid {by}");
    Ok(r)
}

/// The `approval-answered` line of `answer` to `item` by the operator `by`.
fn answer_line(shared: &Shared, item: &Item, answer: &Answer, by: u32) -> Record {
    let mut rec = Record::new(&shared.who, SystemTime::now(), Kind::Connect, None);
    item.who.caller().stamp(&mut rec);
    rec.event = Some(Event::ApprovalAnswered);
    rec.host = Some(item.host.clone());
    rec.port = Some(item.port);
    rec.approval = Some(item.id.clone());
    let until = |u: &Option<SystemTime>| {
        u.map_or(String::new(), |t| {
            format!(" until {}", airlock_audit_schema::Timestamp::from(t))
        })
    };
    (rec.decision, rec.rule) = match answer {
        Answer::Approve { scope, until: u } => (
            Verdict::Allow,
            Some(format!(
                "approved {} by uid {by}{}",
                scope.as_str(),
                until(u)
            )),
        ),
        Answer::Deny {
            reason,
            until: u,
            always,
        } => (
            Verdict::Deny,
            Some(format!(
                "denied{} by uid {by}{}: {reason}",
                if *always { " always" } else { "" },
                until(u)
            )),
        ),
    };
    rec
}

/// `item` as the API shows it, with what approving it would open beyond the host.
fn view(item: &Item, policy: &Policy, token: Option<String>) -> Approval {
    let ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let (scope, by, until, reason) = match &item.state {
        State::Pending => (None, None, None, None),
        State::Approved { scope, by, until } => (Some(scope.as_str()), Some(*by), *until, None),
        State::Spent { by } => (Some(Scope::Once.as_str()), Some(*by), None, None),
        State::Revoked { by } => (Some(Scope::Always.as_str()), Some(*by), None, None),
        State::Denied {
            by,
            reason,
            until,
            always,
        } => (
            always.then_some(Scope::Always.as_str()),
            Some(*by),
            *until,
            Some(reason.clone()),
        ),
    };
    Approval {
        id: item.id.clone(),
        session: item.who.to_string(),
        host: item.host.clone(),
        port: item.port,
        hits: item.hits,
        first_ms: ms(item.first),
        last_ms: ms(item.last),
        state: item.state.as_str().to_owned(),
        scope: scope.map(str::to_owned),
        by,
        until_ms: until.map(ms),
        reason,
        said: item.said.clone(),
        rule: item.rule.clone(),
        notes: notes(policy, item),
        token,
    }
}

/// What approving `item` would open beyond reading its host: a credential the proxy
/// injects there, a tunnel it does not read, a write (an ask rule's write methods, or a
/// host `network.writable` lists). An item with a note is never part of a bulk approve.
fn notes(policy: &Policy, item: &Item) -> Vec<String> {
    let host = item.host.as_str();
    let Ok(h) = airlock_policy::host::Host::parse(host) else {
        return Vec::new();
    };
    let writes = match &item.rule {
        Some(label) => policy.l7.ask_rule(&h, label).is_some_and(|r| r.methods.write()).then(|| {
            format!("the rule {label:?} asks about writes: approving lets the session send them to {host}")
        }),
        None => policy.is_writable(&h).then(|| {
            format!("{host} is writable (network.writable): approving lets the session write to it (any method)")
        }),
    };
    let mut notes: Vec<String> = policy
        .credentials_for(&h)
        .map(|c| {
            format!(
                "a credential ({:?}) is bound to {host}: approving lets the proxy send it there",
                c.name
            )
        })
        .collect();
    notes.extend(writes);
    if policy
        .network
        .passthrough
        .iter()
        .any(|r| r.matches_host(&h))
    {
        notes.push(format!(
            "{host} is passthrough: its tunnel is not inspected (no secret, credential or request rule is checked)"
        ));
    }
    // The agent chose every label of an unlisted name: one that looks like encoded data
    // may be a channel (approving sends it to the resolver and the host).
    if crate::names::looks_encoded(host) {
        notes.push(format!(
            "{host} looks like it carries encoded data in its labels: approving sends the name to the resolver and the host"
        ));
    }
    notes
}

fn bad_request(message: String) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::BadRequest,
        message,
    }
}

fn not_found(id: &str) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::NotFound,
        message: AnswerError::NotFound(id.to_owned()).to_string(),
    }
}

fn refused(e: &AnswerError) -> ErrorBody {
    ErrorBody {
        code: match e {
            AnswerError::NotFound(_) => ErrorCode::NotFound,
            AnswerError::Answered { .. } | AnswerError::StaleToken(_) => ErrorCode::Conflict,
        },
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(approve: bool, scope: Option<&str>, for_seconds: Option<u64>) -> AnswerRequest {
        AnswerRequest {
            id: "0a0b0c0d".into(),
            approve,
            scope: scope.map(str::to_owned),
            for_seconds,
            reason: (!approve).then(|| "use the mirror".to_owned()),
            token: None,
        }
    }

    #[test]
    fn an_item_that_lets_the_session_write_carries_a_note() {
        let policy = |writable: &str| {
            let text = format!(
                "[sandbox]\nname = \"box\"\n\n[network]\nallow = [\"w.example\"]\n{writable}\n[[rules]]\nname = \"publish\"\nhost = \"r.example\"\nmethod = \"POST\"\npath = \"/releases\"\naction = \"ask\"\n\n[[rules]]\nname = \"peek\"\nhost = \"r.example\"\nmethod = \"GET\"\npath = \"/x\"\naction = \"ask\"\n"
            );
            Policy::parse(&text, std::path::Path::new("p.toml")).unwrap()
        };
        let item = |host: &str, rule: Option<&str>| Item {
            id: "0a0b0c0d".into(),
            who: crate::limits::Client::Uid(1000),
            host: host.into(),
            port: 443,
            hits: 1,
            first: SystemTime::UNIX_EPOCH,
            last: SystemTime::UNIX_EPOCH,
            state: State::Pending,
            said: None,
            rule: rule.map(str::to_owned),
        };
        let writes = |p: &Policy, i: &Item| notes(p, i).iter().any(|n| n.contains("write"));
        // The host itself: a note once the policy makes it writable.
        assert!(!writes(&policy(""), &item("w.example", None)));
        assert!(writes(
            &policy("writable = [\"w.example\"]\n"),
            &item("w.example", None)
        ));
        // An ask rule: a note when it asks about a write method, none for a read.
        assert!(writes(&policy(""), &item("r.example", Some("publish"))));
        assert!(!writes(&policy(""), &item("r.example", Some("peek"))));
    }

    #[test]
    fn an_answer_is_read_or_refused_before_anything_is_looked_at() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let read_ok = |a: AnswerRequest| read(&a, wall).unwrap();
        let refused = |a: AnswerRequest| read(&a, wall).unwrap_err().message;
        assert!(read_ok(asked(true, Some("always"), None)).always());
        assert!(read_ok(asked(false, Some("always"), None)).always());
        assert!(!read_ok(asked(false, None, Some(60))).always());
        assert_eq!(
            read_ok(asked(true, Some("session"), Some(60))),
            Answer::Approve {
                scope: Scope::Session,
                until: Some(wall + Duration::from_secs(60)),
            }
        );
        assert!(refused(asked(true, Some("always"), Some(60))).contains("until it is revoked"));
        assert!(refused(asked(false, Some("always"), Some(60))).contains("until it is revoked"));
        assert!(refused(asked(true, Some("once"), Some(60))).contains("one connection"));
        assert!(refused(asked(true, Some("forever"), None)).contains("\"always\""));
        assert!(refused(asked(false, Some("once"), None)).contains("a denial's scope"));
        assert!(refused(asked(true, Some("session"), Some(0))).contains("1 second"));
        let mut no_reason = asked(false, None, None);
        no_reason.reason = Some("  ".into());
        assert!(refused(no_reason).contains("needs a reason"));
    }
}
