//! The agent's own API on the explicit proxy (`http://airlock.local/v1/…`,
//! [`airlock_channels::AGENT_API_HOST`]): its rules, and asking the operator for a host
//! ahead of need, with a reason, then waiting for the answer.
//!
//! - `GET /v1/policy`: the network rules in force, without credentials or detectors:
//!   `allow`, `deny`, `writable`, `passthrough`, and `unlisted` (`deny` or `ask`).
//! - `GET /v1/brief`: the same as a page for the agent to read (markdown): what it may
//!   reach and write, how a refusal looks, how to ask. The agents' wrappers put it where
//!   each CLI reads its instructions at every start (`agents/home.py`).
//! - `POST /v1/ask` `{"host", "port" (443), "reason"}`: what asking for the host gets now,
//!   as the admission would decide it: `allowed`; `refused` with the reason (a listed deny,
//!   a hard deny, a secret in the name: never asked about); or, for a host the policy asks
//!   about, the item filed (or found) for this session, `pending` with its `approval_id`
//!   (`202`), `approved`, or `denied` with the operator's reason. An ask is never a grant.
//! - `GET /v1/ask/ID?wait=SECONDS`: this session's item `ID` as it stands, once answered or
//!   after at most `wait` seconds (120 at most): `pending`, `approved`, `spent`, `denied`.
//! - `GET /v1/denials`: this session's latest refusals (at most [`DENIALS`], newest last),
//!   from the audit lines as written: when, the request's method, host, port and path, the
//!   reason, the rule, the approval item. Only what the session itself sent, and why.
//!
//! It answers only a caller whose session (uid) the proxy knows, and shows each session only
//! its own items: another session's id is `404`, as an unknown one. Filing is audited as
//! the refusal it stands for would be (`approval-required`, the item, the agent's reason in
//! `rule`). Nothing here is forwarded anywhere.

use std::time::{Duration, Instant, SystemTime};

use airlock_policy::host::Host;
use airlock_policy::reason::Reason;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::Shared;
use crate::admission::{self, Outcome, Port};
use crate::approvals::{Asked, Item, State};
use crate::audit::{Kind, Record, Verdict};
use crate::deny::{self, ProxyBody};
use crate::identity::Caller;
use crate::limits::Client;

/// Largest request body the API reads.
const MAX_BODY: usize = 16 * 1024;
/// Longest wait for an answer.
const MAX_WAIT: Duration = Duration::from_secs(120);
/// Refusals `GET /v1/denials` returns at most.
pub const DENIALS: usize = 20;
/// Audit lines it looks through (the newest of the event stream's ring).
const DENIALS_SCAN: usize = 4096;

/// Whether `req` is addressed to the agent's API (a `CONNECT` to it included: it is
/// refused, never tunnelled).
pub(crate) fn addressed(req: &Request<Incoming>) -> bool {
    req.uri().host().is_some_and(|h| {
        h.trim_end_matches('.')
            .eq_ignore_ascii_case(airlock_channels::AGENT_API_HOST)
    })
}

/// Answers one request of the agent's API from `caller`, a session (or a uid) the proxy
/// knows.
pub(crate) async fn serve(
    shared: &Shared,
    caller: Caller,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let who = Client::of(caller);
    if who == Client::Unknown {
        return answer(
            StatusCode::FORBIDDEN,
            &json!({"error": "session-unknown", "message": "the proxy cannot tell which session this is; nothing is answered"}),
        );
    };
    if req.method() == Method::CONNECT {
        return bad(&format!(
            "the agent API is plain HTTP: http://{}/v1/…",
            airlock_channels::AGENT_API_HOST
        ));
    }
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/v1/policy") => answer(StatusCode::OK, &policy(shared)),
        (Method::GET, "/v1/brief") => {
            let mut resp = Response::new(deny::full(brief(shared)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/markdown; charset=utf-8"),
            );
            resp
        }
        (Method::POST, "/v1/ask") => {
            let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return bad(&format!(
                        "the body is not readable (at most {MAX_BODY} bytes)"
                    ));
                }
            };
            ask(shared, who, &body)
        }
        (Method::GET, "/v1/denials") => answer(StatusCode::OK, &denials(shared, caller)),
        (Method::GET, p) if p.starts_with("/v1/ask/") => {
            let id = &p["/v1/ask/".len()..];
            let wait = match query.as_deref().map(wait_of) {
                None => Duration::ZERO,
                Some(Some(w)) => w,
                Some(None) => return bad("the only parameter is wait=SECONDS (0 to 120)"),
            };
            let deadline = tokio::time::Instant::now() + wait;
            match shared.approvals.wait(id, who, deadline).await {
                Some(item) => answer(StatusCode::OK, &item_json(&item)),
                None => answer(
                    StatusCode::NOT_FOUND,
                    &json!({"error": "not-found", "message": format!("this session has no approval {id}")}),
                ),
            }
        }
        _ => answer(
            StatusCode::NOT_FOUND,
            &json!({"error": "not-found", "message": "the agent API has GET /v1/policy, GET /v1/brief, GET /v1/denials, POST /v1/ask and GET /v1/ask/ID?wait=SECONDS"}),
        ),
    }
}

/// `GET /v1/denials`: `caller`'s latest refusals among the newest audit lines (its
/// session's, not another session's of the same uid), each with only the fields that say
/// what it sent and why it was refused. A line that is not this caller's refusal is passed
/// over before it is parsed.
fn denials(shared: &Shared, caller: Caller) -> Value {
    let mut lines = Vec::new();
    shared.hub.newest(DENIALS_SCAN, &mut lines);
    // The line writer puts `agent_session` right after `uid`, and only on a session's line.
    let uid = caller
        .uid
        .map_or_else(|| "null".to_owned(), |u| u.to_string());
    let mine = match caller.session {
        Some(k) => format!("\"uid\":{uid},\"agent_session\":{k},"),
        None => format!("\"uid\":{uid},\"client\""),
    };
    // A number taken again is another session: what the one before it was refused is not
    // this one's (milliseconds since the epoch, as the line's `ts`).
    let since = caller
        .session
        .and_then(|k| shared.approvals.begun().into_iter().find(|(n, _)| *n == k))
        .map_or(0, |(_, t)| airlock_audit_schema::Timestamp::from(t).0);
    let mine = memchr::memmem::Finder::new(mine.as_bytes());
    let deny = memchr::memmem::Finder::new(b"\"decision\":\"deny\"");
    let mut out: Vec<Value> = lines
        .iter()
        .rev()
        .filter(|l| mine.find(&l.text).is_some() && deny.find(&l.text).is_some())
        .filter_map(|l| serde_json::from_slice::<Value>(&l.text).ok())
        .filter(|v| {
            v["uid"] == json!(caller.uid)
                && v["agent_session"] == json!(caller.session)
                && v["decision"] == "deny"
                && serde_json::from_value::<airlock_audit_schema::Timestamp>(v["ts"].clone())
                    .is_ok_and(|ts| ts.0 >= since)
        })
        .take(DENIALS)
        .map(|v| {
            let mut d = serde_json::Map::new();
            for key in [
                "ts", "method", "host", "port", "path", "reason", "rule", "approval",
            ] {
                if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
                    d.insert(key.to_owned(), x.clone());
                }
            }
            Value::Object(d)
        })
        .collect();
    out.reverse();
    json!({ "denials": out })
}

/// `wait=SECONDS`, at most [`MAX_WAIT`].
fn wait_of(query: &str) -> Option<Duration> {
    let secs: u64 = query.strip_prefix("wait=")?.parse().ok()?;
    let d = Duration::from_secs(secs);
    (d <= MAX_WAIT).then_some(d)
}

/// The network rules in force, as the agent may know them.
fn policy(shared: &Shared) -> Value {
    let rules = shared.rules.load();
    let n = &rules.policy.network;
    let texts = |v: &[airlock_policy::HostRule]| -> Vec<String> {
        v.iter().map(|r| r.text.clone()).collect()
    };
    json!({
        "allow": texts(&n.allow),
        "deny": texts(&n.deny),
        "writable": texts(&n.writable),
        "passthrough": texts(&n.passthrough),
        "unlisted": match n.unlisted {
            airlock_policy::Unlisted::Deny => "deny",
            airlock_policy::Unlisted::Ask => "ask",
        },
    })
}

/// Hosts a brief lists per list, at most (the rest are counted).
const BRIEF_HOSTS: usize = 40;

/// The agent's brief: the rules in force as a page it reads before it starts working.
fn brief(shared: &Shared) -> String {
    let rules = shared.rules.load();
    let n = &rules.policy.network;
    let list = |v: &[airlock_policy::HostRule]| -> String {
        if v.is_empty() {
            return "none".to_owned();
        }
        let mut s: Vec<String> = v
            .iter()
            .take(BRIEF_HOSTS)
            .map(|r| format!("`{}`", r.text))
            .collect();
        if v.len() > BRIEF_HOSTS {
            s.push(format!("and {} more", v.len() - BRIEF_HOSTS));
        }
        s.join(", ")
    };
    let api = airlock_channels::AGENT_API_HOST;
    let when = match rules.policy.limits.approvals_hold_seconds {
        0 => "at once".to_owned(),
        s => format!(
            "after up to {s} s (your request is held open that long for the operator's answer, and goes through if approved)"
        ),
    };
    let unlisted = match n.unlisted {
        airlock_policy::Unlisted::Deny => "refused: `403 blocked-by-policy`. Only the operator can add a host; tell your user which host you need and why.".to_owned(),
        airlock_policy::Unlisted::Ask => format!(
            "refused {when} with `403 approval-required` and an `approval_id`: the operator decides out of band. To ask ahead of need, with your reason: `airlock-request HOST --reason \"why\" --wait 120` (exit 0: approved; 1: refused, the reason printed; 3: no answer yet). Do not retry an asked host in a loop; wait for the answer (`curl -s 'http://{api}/v1/ask/ID?wait=120'`)."
        ),
    };
    // The requests an ask rule puts to the operator, by name (at most BRIEF_HOSTS).
    let asked: Vec<String> = (rules.policy.l7.rules.iter())
        .filter(|r| r.action == airlock_policy::l7::Action::Ask)
        .take(BRIEF_HOSTS)
        .map(|r| format!("`{}`", r.label()))
        .collect();
    let asked = if asked.is_empty() {
        String::new()
    } else {
        format!(
            "- These requests wait for the operator: refused at once with `403 approval-required` and an `approval_id` until approved for your session (the operator answers out of band): {}.\n",
            asked.join(", ")
        )
    };
    format!(
        "# You are working inside an airlock sandbox\n\n\
         Every network request you make goes through airlock's proxy, which enforces the operator's policy. These are its rules now (they may change while you work: `curl -s http://{api}/v1/policy` shows the current ones):\n\n\
         - You may read from (GET, HEAD, OPTIONS, git fetch): {allow}.\n\
         - You may also write to (any method): {writable}.\n\
         - Refused although matched above: {deny}.\n\
         {asked}\
         - Any other host is {unlisted}\n\
         - Private, loopback and cloud-metadata addresses are always refused; so are secrets sent anywhere but their own host, and a credential's real value never reaches you (you hold a placeholder the proxy replaces).\n\n\
         A refusal is an answer from the proxy, not a broken network: an HTTP `403` (or `429`) with a JSON body `{{\"error\": REASON, \"message\": HOW TO ALLOW IT}}` and the header `x-airlock-error`; git prints it as `remote error: airlock: …`. Report it to your user instead of working around it; your latest refusals, with their reasons: `curl -s http://{api}/v1/denials`. `git push` goes to your sandbox branch through airlock's git; other branches are refused.\n",
        allow = list(&n.allow),
        writable = list(&n.writable),
        deny = list(&n.deny),
    )
}

/// `POST /v1/ask`: what asking for the host gets now (see the module docs).
fn ask(shared: &Shared, who: Client, body: &Bytes) -> Response<ProxyBody> {
    let v: Value = match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Value::Object(m),
        _ => return bad("the body is a JSON object: {\"host\", \"port\", \"reason\"}"),
    };
    let Some(host) = v.get("host").and_then(Value::as_str) else {
        return bad("host is required");
    };
    let port = match v.get("port") {
        None => 443,
        Some(p) => match p.as_u64().and_then(|p| u16::try_from(p).ok()) {
            Some(p) if p > 0 => p,
            _ => return bad("port is 1 to 65535"),
        },
    };
    let said = v.get("reason").and_then(Value::as_str);
    let Ok(host) = Host::parse(host) else {
        return bad("host is not a host name");
    };
    let target = crate::decide::Target { host, port };
    let rules = shared.rules.load();
    let admission = admission::policy(&rules.policy, &target, Port::Exact).named(
        rules.name_rules(),
        &shared.dns_budget,
        &target,
    );
    let at = format!("{}:{port}", target.host.as_str());
    match admission.outcome {
        Outcome::Allow | Outcome::Report(_) => {
            return answer(StatusCode::OK, &json!({"state": "allowed", "host": at}));
        }
        Outcome::Deny(reason) => {
            return answer(
                StatusCode::FORBIDDEN,
                &json!({"state": "refused", "host": at, "reason": reason.as_str(), "message": reason.hint()}),
            );
        }
        Outcome::Ask => {}
    }
    let asked = shared.approvals.ask_saying(
        who,
        (target.host.as_str(), port),
        said,
        crate::approvals::Caps::of(&rules.policy.limits),
        Instant::now(),
        SystemTime::now(),
    );
    match asked {
        Asked::Pending { id } => {
            // Filing is audited as the refusal it stands for.
            let mut rec = Record::new(&shared.who, SystemTime::now(), Kind::Http, None);
            who.caller().stamp(&mut rec);
            rec.method = Some("ASK".into());
            rec.host = Some(target.host.as_str().to_owned());
            rec.port = Some(port);
            rec.decision = Verdict::Deny;
            rec.reason = Some(Reason::ApprovalRequired);
            rec.approval = Some(id.clone());
            rec.rule = shared
                .approvals
                .get(&id)
                .and_then(|i| i.said)
                .map(|s| format!("asked ahead of need: {s}"));
            if shared.audit.commit(&rec).is_err() {
                return deny::denial(Reason::AuditUnavailable, target.host.as_str(), port);
            }
            answer(
                StatusCode::ACCEPTED,
                &json!({
                    "state": "pending",
                    "host": at,
                    "approval_id": id,
                    "next_steps": format!("the operator answers out of band (airlock approvals); wait with GET http://{}/v1/ask/{id}?wait=60", airlock_channels::AGENT_API_HOST),
                }),
            )
        }
        Asked::Granted { id, scope } => answer(
            StatusCode::OK,
            &json!({"state": "approved", "host": at, "approval_id": id, "scope": scope.as_str()}),
        ),
        Asked::Denied { id, reason } => answer(
            StatusCode::FORBIDDEN,
            &json!({"state": "denied", "host": at, "approval_id": id, "reason": reason}),
        ),
        Asked::Full | Asked::TooFast => answer(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({"state": "refused", "host": at, "reason": "rate-limited", "message": "too many asks of this session wait or were filed this minute; wait for the operator's answers"}),
        ),
    }
}

/// An item as its session sees it.
fn item_json(i: &Item) -> Value {
    let mut v = json!({
        "approval_id": i.id,
        "host": format!("{}:{}", i.host, i.port),
        "state": i.state.as_str(),
    });
    match &i.state {
        State::Approved { scope, .. } => v["scope"] = json!(scope.as_str()),
        State::Denied { reason, .. } => v["reason"] = json!(reason),
        State::Pending | State::Spent { .. } | State::Revoked { .. } => {}
    }
    v
}

fn bad(message: &str) -> Response<ProxyBody> {
    answer(
        StatusCode::BAD_REQUEST,
        &json!({"error": "bad-request", "message": message}),
    )
}

fn answer(status: StatusCode, v: &Value) -> Response<ProxyBody> {
    let mut resp = Response::new(deny::full(v.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    resp
}
