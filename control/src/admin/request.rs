//! Requests: what a client asks, and the one routing table that reads it from HTTP and
//! writes it back.

use super::events::EventsQuery;
use super::response::{ErrorBody, ErrorCode};
use super::{PREFIX, VERSION, path};
use serde::{Deserialize, Serialize};

/// One operation of the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// The start's readiness ([`path::STATUS`]).
    Status,
    /// The sessions ([`path::SESSIONS`]).
    Sessions,
    /// The policy revision in force ([`path::POLICY`]).
    Policy,
    /// The counters ([`path::COUNTERS`]).
    Counters,
    /// The event stream ([`path::EVENTS`]).
    Events(EventsQuery),
    /// Load a new policy revision ([`path::RELOAD`]).
    Reload(ReloadRequest),
    /// Prometheus metrics ([`path::METRICS`]).
    Metrics,
    /// A dry run of the policy in force for one URL ([`path::CHECK`]).
    Check(CheckQuery),
    /// The operator's inbox ([`path::APPROVALS`]).
    Approvals,
    /// One item of the inbox, with its review token ([`path::APPROVAL`]).
    Approval(ApprovalQuery),
    /// The operator's answer to one item ([`path::ANSWER`]).
    Answer(AnswerRequest),
    /// Take back a standing grant ([`path::REVOKE`]).
    Revoke(RevokeRequest),
    /// Root (the entrypoint in the container) says that a second session begins
    /// ([`path::BEGIN_SESSION`]).
    BeginSession(BeginSessionRequest),
    /// An operation this side does not know (a newer peer's).
    #[serde(other)]
    Unknown,
}

/// The body of a reload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadRequest {
    /// The new policy's TOML text; none: read the policy file the proxy runs from again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Where `text` came from (a host path), for `file:line` in errors and the audit line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// Which item: the query string of [`path::APPROVAL`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalQuery {
    /// The item's id.
    pub id: String,
}

/// The operator's answer to one item: the body of [`path::ANSWER`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerRequest {
    /// The item's id.
    pub id: String,
    /// `true` approves, `false` denies.
    pub approve: bool,
    /// An approval's scope: `once` (the session's next connection), `session` (every
    /// connection of that session) or `always` (every session's, kept across restarts
    /// until revoked: a grant). A denial's: `always`, or none (that session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// How long the answer holds, in seconds (none: until the sandbox stops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_seconds: Option<u64>,
    /// The review token the operator was shown; an answer with a stale one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A denial's reason, for the agent (required to deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Which grant to take back: the body of [`path::REVOKE`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeRequest {
    /// The grant's id (the item it answered).
    pub id: String,
}

/// Which session begins: the body of [`path::BEGIN_SESSION`].
///
/// Session numbers are reused (a new second session takes the lowest free one), so the
/// proxy forgets what it kept for the session that had the number before: its pending items
/// and its `once` and `session` answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginSessionRequest {
    /// The session's number: a second session's, `2..=MAX_SESSIONS` (1 is the agent's
    /// first process, begun with the proxy's start).
    pub session: u16,
}

impl BeginSessionRequest {
    /// The request if its number is a second session's, else why not.
    fn checked(self) -> Result<BeginSessionRequest, ErrorBody> {
        let max = airlock_channels::MAX_SESSIONS;
        match self.session {
            k if (2..=max).contains(&k) => Ok(self),
            1 => Err(error(
                ErrorCode::BadRequest,
                format!(
                    "session 1 is the agent's first process, begun with the proxy's start: a session that begins is a second one, 2 to {max}"
                ),
            )),
            k => Err(error(
                ErrorCode::BadRequest,
                format!("{k} is not a second session's number (2 to {max})"),
            )),
        }
    }
}

/// What a dry run asks about: the query string of [`path::CHECK`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckQuery {
    /// The URL the agent would ask for (`https://host[:port]/path`, `http://...`, or
    /// `host:port` for a tunnel).
    pub url: String,
    /// The method (none: only the host is judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

impl CheckQuery {
    fn to_query(&self) -> String {
        let mut q = format!("url={}", encode(&self.url));
        if let Some(m) = &self.method {
            q.push_str("&method=");
            q.push_str(&encode(m));
        }
        q
    }

    fn from_query(query: &str) -> Result<CheckQuery, ErrorBody> {
        let bad = |message: String| error(ErrorCode::BadRequest, message);
        let mut q = CheckQuery::default();
        let (mut url, mut method) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .map_err(|_| bad(format!("the value of {key} is not UTF-8")))?
                .into_owned();
            let slot = match key {
                "url" => &mut url,
                "method" => &mut method,
                other => {
                    return Err(bad(format!(
                        "{other} is not a parameter of a policy check (url, method)"
                    )));
                }
            };
            if slot.replace(value).is_some() {
                return Err(bad(format!("{key} is given twice")));
            }
        }
        q.url = url.ok_or_else(|| bad("a policy check needs url=".to_owned()))?;
        q.method = method;
        Ok(q)
    }
}

impl ApprovalQuery {
    fn from_query(query: &str) -> Result<ApprovalQuery, ErrorBody> {
        let bad = |message: String| error(ErrorCode::BadRequest, message);
        match query.split_once('=') {
            Some(("id", id)) if !id.is_empty() && !id.contains('&') => {
                let id = percent_encoding::percent_decode_str(id)
                    .decode_utf8()
                    .map_err(|_| bad("the value of id is not UTF-8".to_owned()))?;
                Ok(ApprovalQuery {
                    id: id.into_owned(),
                })
            }
            _ => Err(bad("an approval is asked for by id= alone".to_owned())),
        }
    }
}

/// A JSON object body of `route` read as `T` (`what` names it in the error).
fn object_body<T: serde::de::DeserializeOwned>(
    route: &str,
    body: &[u8],
    what: &str,
) -> Result<T, ErrorBody> {
    let not = |e: serde_json::Error| {
        error(
            ErrorCode::BadRequest,
            format!("the body of {route} is not {what}: {e}"),
        )
    };
    // An object, not whatever else serde would read a struct from (an array).
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(not)?;
    serde_json::from_value(serde_json::Value::Object(object)).map_err(not)
}

/// A query value escaped: everything but unreserved characters.
fn encode(v: &str) -> String {
    const VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(v, VALUE).to_string()
}

/// An HTTP method the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`: reads.
    Get,
    /// `POST`: changes.
    Post,
}

impl Method {
    /// As HTTP spells it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// A request as HTTP carries it: what a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// The path with its query string, if any.
    pub target: String,
    /// The JSON body, if the operation has one.
    pub body: Option<Vec<u8>>,
}

/// Which operation a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Status,
    Sessions,
    Policy,
    Counters,
    Events,
    Reload,
    Metrics,
    Check,
    Approvals,
    Approval,
    Answer,
    Revoke,
    BeginSession,
}

/// The routing table: every operation's method and path, once.
const ROUTES: [(Method, &str, Op); 13] = [
    (Method::Get, path::STATUS, Op::Status),
    (Method::Get, path::SESSIONS, Op::Sessions),
    (Method::Get, path::POLICY, Op::Policy),
    (Method::Get, path::COUNTERS, Op::Counters),
    (Method::Get, path::EVENTS, Op::Events),
    (Method::Post, path::RELOAD, Op::Reload),
    (Method::Get, path::METRICS, Op::Metrics),
    (Method::Get, path::CHECK, Op::Check),
    (Method::Get, path::APPROVALS, Op::Approvals),
    (Method::Get, path::APPROVAL, Op::Approval),
    (Method::Post, path::ANSWER, Op::Answer),
    (Method::Post, path::REVOKE, Op::Revoke),
    (Method::Post, path::BEGIN_SESSION, Op::BeginSession),
];

fn error(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
    ErrorBody {
        code,
        message: message.into(),
    }
}

impl Request {
    /// The operation `method target` with `body` asks for, or the error to answer: an
    /// unknown version, path or method, a query on an operation that takes none, a body
    /// that is not the operation's JSON. Pure: the server's whole routing.
    ///
    /// # Errors
    /// The [`ErrorBody`] to answer (its [`ErrorCode::http_status`] is the status).
    pub fn from_http(method: &str, target: &str, body: &[u8]) -> Result<Request, ErrorBody> {
        let (route, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let version = route
            .strip_prefix("/v")
            .and_then(|rest| rest.split('/').next())
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
        if version.is_some_and(|v| v.parse() != Ok(VERSION)) {
            return Err(error(
                ErrorCode::UnknownVersion,
                format!(
                    "this appliance speaks version {VERSION} of the admin API ({PREFIX}/...), not {route}"
                ),
            ));
        }
        let Some(&(want, _, op)) = ROUTES.iter().find(|(_, p, _)| *p == route) else {
            return Err(error(
                ErrorCode::NotFound,
                format!("no operation at {route}"),
            ));
        };
        if method != want.as_str() {
            return Err(error(
                ErrorCode::MethodNotAllowed,
                format!("{route} takes {}, not {method}", want.as_str()),
            ));
        }
        let takes_query = matches!(op, Op::Events | Op::Check | Op::Approval);
        if !takes_query && query.is_some_and(|q| !q.is_empty()) {
            return Err(error(
                ErrorCode::BadRequest,
                format!("{route} takes no query string"),
            ));
        }
        Ok(match op {
            Op::Status => Request::Status,
            Op::Sessions => Request::Sessions,
            Op::Policy => Request::Policy,
            Op::Counters => Request::Counters,
            Op::Metrics => Request::Metrics,
            Op::Events => Request::Events(EventsQuery::from_query(query.unwrap_or(""))?),
            Op::Check => Request::Check(CheckQuery::from_query(query.unwrap_or(""))?),
            Op::Approvals => Request::Approvals,
            Op::Approval => Request::Approval(ApprovalQuery::from_query(query.unwrap_or(""))?),
            Op::Answer => Request::Answer(object_body(route, body, "an answer")?),
            Op::Revoke => Request::Revoke(object_body(route, body, "a revocation")?),
            Op::BeginSession => Request::BeginSession(
                object_body::<BeginSessionRequest>(route, body, "a session's number")?.checked()?,
            ),
            Op::Reload if body.iter().all(u8::is_ascii_whitespace) => {
                Request::Reload(ReloadRequest::default())
            }
            Op::Reload => Request::Reload(object_body(route, body, "a reload request")?),
        })
    }

    /// The request as HTTP carries it; `None` for [`Request::Unknown`], which has no route.
    #[must_use]
    pub fn to_http(&self) -> Option<HttpRequest> {
        let get = |target: &str| HttpRequest {
            method: Method::Get,
            target: target.to_owned(),
            body: None,
        };
        Some(match self {
            Request::Status => get(path::STATUS),
            Request::Sessions => get(path::SESSIONS),
            Request::Policy => get(path::POLICY),
            Request::Counters => get(path::COUNTERS),
            Request::Metrics => get(path::METRICS),
            Request::Events(q) => {
                let query = q.to_query();
                if query.is_empty() {
                    get(path::EVENTS)
                } else {
                    get(&format!("{}?{query}", path::EVENTS))
                }
            }
            Request::Check(q) => get(&format!("{}?{}", path::CHECK, q.to_query())),
            Request::Approvals => get(path::APPROVALS),
            Request::Approval(q) => get(&format!("{}?id={}", path::APPROVAL, encode(&q.id))),
            Request::Answer(a) => HttpRequest {
                method: Method::Post,
                target: path::ANSWER.to_owned(),
                body: Some(serde_json::to_vec(a).unwrap_or_default()),
            },
            Request::Reload(r) => HttpRequest {
                method: Method::Post,
                target: path::RELOAD.to_owned(),
                body: Some(serde_json::to_vec(r).unwrap_or_default()),
            },
            Request::Revoke(r) => HttpRequest {
                method: Method::Post,
                target: path::REVOKE.to_owned(),
                body: Some(serde_json::to_vec(r).unwrap_or_default()),
            },
            Request::BeginSession(b) => HttpRequest {
                method: Method::Post,
                target: path::BEGIN_SESSION.to_owned(),
                body: Some(serde_json::to_vec(b).unwrap_or_default()),
            },
            Request::Unknown => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::events::Cursor;

    fn every() -> Vec<Request> {
        vec![
            Request::Status,
            Request::Sessions,
            Request::Policy,
            Request::Counters,
            Request::Metrics,
            Request::Events(EventsQuery::default()),
            Request::Events(EventsQuery {
                after: Some(Cursor("s1:42".into())),
                decision: Some("deny".into()),
                host: Some("evil.example".into()),
                session: Some("s1".into()),
                reason: Some("host-not-allowed".into()),
                since_ms: Some(1_795_853_089_000),
                follow: true,
            }),
            Request::Check(CheckQuery {
                url: "https://api.github.com/repos/o/r/pulls?state=open".into(),
                method: Some("POST".into()),
            }),
            Request::Check(CheckQuery {
                url: "evil.example:443".into(),
                method: None,
            }),
            Request::Reload(ReloadRequest::default()),
            Request::Reload(ReloadRequest {
                text: Some("[sandbox]\nname = \"x\"\n".into()),
                origin: Some("/home/me/policy.toml".into()),
            }),
            Request::Approvals,
            Request::Approval(ApprovalQuery {
                id: "3f2a9c1d".into(),
            }),
            Request::Answer(AnswerRequest {
                id: "3f2a9c1d".into(),
                approve: true,
                scope: Some("session".into()),
                for_seconds: Some(1800),
                token: Some("0011223344556677".into()),
                reason: None,
            }),
            Request::Revoke(RevokeRequest {
                id: "3f2a9c1d".into(),
            }),
            Request::BeginSession(BeginSessionRequest { session: 2 }),
            Request::BeginSession(BeginSessionRequest {
                session: airlock_channels::MAX_SESSIONS,
            }),
        ]
    }

    #[test]
    fn every_request_routes_back_to_itself() {
        for r in every() {
            let http = r.to_http().unwrap();
            let body = http.body.clone().unwrap_or_default();
            assert_eq!(
                Request::from_http(http.method.as_str(), &http.target, &body),
                Ok(r.clone()),
                "{http:?}"
            );
        }
        assert_eq!(Request::Unknown.to_http(), None);
        // Every route is some request's.
        let targets: Vec<String> = every()
            .iter()
            .filter_map(|r| r.to_http())
            .map(|h| h.target)
            .collect();
        for (_, path, _) in ROUTES {
            assert!(
                targets.iter().any(|t| t.split('?').next() == Some(path)),
                "{path}"
            );
        }
    }

    #[test]
    fn bad_requests_get_their_code() {
        let code =
            |m: &str, t: &str, b: &str| Request::from_http(m, t, b.as_bytes()).unwrap_err().code;
        assert_eq!(code("GET", "/v2/status", ""), ErrorCode::UnknownVersion);
        assert_eq!(code("GET", "/v10/status", ""), ErrorCode::UnknownVersion);
        assert_eq!(code("GET", "/v1/nothing", ""), ErrorCode::NotFound);
        assert_eq!(code("GET", "/vx/status", ""), ErrorCode::NotFound);
        assert_eq!(code("GET", "/", ""), ErrorCode::NotFound);
        assert_eq!(code("POST", "/v1/status", ""), ErrorCode::MethodNotAllowed);
        assert_eq!(
            code("GET", "/v1/policy/reload", ""),
            ErrorCode::MethodNotAllowed
        );
        assert_eq!(code("GET", "/v1/status?x=1", ""), ErrorCode::BadRequest);
        assert_eq!(
            code("POST", "/v1/policy/reload", "{"),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code("POST", "/v1/policy/reload", "[]"),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code("GET", "/v1/events?colour=red", ""),
            ErrorCode::BadRequest
        );
        let e = Request::from_http("GET", "/v2/status", b"").unwrap_err();
        assert!(e.message.contains("version 1"), "{}", e.message);
        assert_eq!(e.code.http_status(), 404);
    }

    #[test]
    fn a_session_begins_with_a_second_sessions_number_and_nothing_else() {
        let begin = |b: &str| Request::from_http("POST", path::BEGIN_SESSION, b.as_bytes());
        assert_eq!(
            begin(r#"{"session":2}"#),
            Ok(Request::BeginSession(BeginSessionRequest { session: 2 }))
        );
        assert_eq!(
            begin(r#"{"session":64}"#),
            Ok(Request::BeginSession(BeginSessionRequest { session: 64 }))
        );
        let refused = |b: &str| {
            let e = begin(b).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{b}: {}", e.message);
            e.message
        };
        assert!(
            refused(r#"{"session":0}"#).contains("0 is not a second session's number (2 to 64)")
        );
        assert!(refused(r#"{"session":65}"#).contains("65 is not a second session's number"));
        assert!(refused(r#"{"session":1}"#).contains("session 1 is the agent's first process"));
        // What serde cannot read as a number of 0 to 65535, and what is not the object.
        for body in [
            r#"{"session":70000}"#,
            r#"{"session":-2}"#,
            r#"{"session":"2"}"#,
            r#"{"session":2.5}"#,
            r#"{}"#,
            "[2]",
            "2",
            "",
            "session=2",
        ] {
            assert!(
                refused(body)
                    .starts_with("the body of /v1/sessions/begin is not a session's number"),
                "{body}"
            );
        }
        // A read, or a query, is not a begin.
        assert_eq!(
            Request::from_http("GET", path::BEGIN_SESSION, b"")
                .unwrap_err()
                .code,
            ErrorCode::MethodNotAllowed
        );
        assert_eq!(
            Request::from_http("POST", "/v1/sessions/begin?session=2", br#"{"session":2}"#)
                .unwrap_err()
                .code,
            ErrorCode::BadRequest
        );
    }
}
