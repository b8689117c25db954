//! Responses the proxy writes itself: denials (uniform JSON + `x-airlock-error`) and health.

use airlock_channels::ERROR_HEADER;
use airlock_policy::reason::Reason;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use serde::Serialize;

/// Body type of every response the explicit proxy returns.
pub type ProxyBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Writes `rec` as a denial for `reason`, then answers with the uniform denial for
/// `host:port`: every request-level refusal goes through here. When the line cannot be
/// written the answer is `audit-unavailable` (the refusal is counted in the outage).
pub(crate) async fn audited(
    rec: crate::audit::Pending,
    reason: Reason,
    host: &str,
    port: u16,
) -> Response<ProxyBody> {
    match commit_refusal(rec, reason) {
        Ok(named) => denial_naming(reason, host, port, &named),
        Err(crate::audit::Unavailable) => denial(Reason::AuditUnavailable, host, port),
    }
}

/// What a refusal's answer names besides its reason: the rule that refused (when the
/// reason says what to change) and the operator's inbox item it filed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Named {
    pub rule: Option<String>,
    pub approval: Option<String>,
}

/// Writes `rec` as the refusal for `reason`, as [`audited`] does, for an answer spoken
/// later ([`crate::legible`]); returns what that answer names. When the line cannot be
/// written nothing may be granted: the caller answers [`Reason::AuditUnavailable`].
pub(crate) fn commit_refusal(
    mut rec: crate::audit::Pending,
    reason: Reason,
) -> Result<Named, crate::audit::Unavailable> {
    rec.decision = crate::audit::Verdict::Deny;
    rec.reason = Some(reason);
    // The agent learns which rule or detector refused it (never a value: detectors are
    // named by format or file), as the audit line does.
    let named = Named {
        rule: rec.rule.clone().filter(|_| names_its_rule(reason)),
        approval: rec.approval.clone(),
    };
    rec.commit()?;
    Ok(named)
}

/// [`denial`] naming the rule that refused and the inbox item it filed (what [`audited`]
/// answers).
#[must_use]
pub(crate) fn denial_naming(
    reason: Reason,
    host: &str,
    port: u16,
    named: &Named,
) -> Response<ProxyBody> {
    let mut body = ErrorBody::new(reason, host, port, reason.hint());
    body.rule = named.rule.as_deref();
    let steps;
    if let Some(id) = named
        .approval
        .as_deref()
        .filter(|_| reason == Reason::ApprovalRequired)
    {
        steps = format!(
            "The operator decides out of band: `airlock approvals` lists it, `airlock approve {id} --once` (or --session) lets it through; retry after that."
        );
        body.approval_id = Some(id);
        body.next_steps = Some(&steps);
    }
    json_denial(reason, body.to_json())
}

/// The refusals whose record's `rule` says what to change: the deny rule (a grant's
/// carries the operator's reason), the L7 rule, the read-only host, the secret detector,
/// the rate limit, the open circuit, the spent budget.
const fn names_its_rule(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::ApprovalRequired
            | Reason::ApprovalDenied
            | Reason::DeniedByRule
            | Reason::RequestDeniedByRule
            | Reason::RateLimited
            | Reason::UpstreamCircuitOpen
            | Reason::BudgetExhausted
            | Reason::ReadOnlyHost
            | Reason::BodyOnRead
            | Reason::ForeignSecret
            | Reason::EncodedBlob
            | Reason::HighEntropy
    )
}

/// As [`audited`], answering with `answer` (a denial worded for this request) when the
/// line was written.
pub(crate) fn audited_with(
    mut rec: crate::audit::Pending,
    reason: Reason,
    host: &str,
    port: u16,
    answer: impl FnOnce() -> Response<ProxyBody>,
) -> Response<ProxyBody> {
    rec.decision = crate::audit::Verdict::Deny;
    rec.reason = Some(reason);
    match rec.commit() {
        Ok(()) => answer(),
        Err(crate::audit::Unavailable) => denial(Reason::AuditUnavailable, host, port),
    }
}

/// A complete in-memory body.
#[must_use]
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// The HTTP status a reason is reported with.
#[must_use]
pub const fn status_for(reason: Reason) -> StatusCode {
    match reason {
        Reason::MalformedRequest | Reason::InvalidHost => StatusCode::BAD_REQUEST,
        Reason::ResolveFailed
        | Reason::UpstreamUnreachable
        | Reason::UpstreamCertificateInvalid => StatusCode::BAD_GATEWAY,
        Reason::RequestTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Reason::TooManyConnections | Reason::RateLimited | Reason::BudgetExhausted => {
            StatusCode::TOO_MANY_REQUESTS
        }
        Reason::AuditUnavailable | Reason::UpstreamCircuitOpen => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::FORBIDDEN,
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    host: &'a str,
    port: u16,
    /// The credential the refusal is about, when there is one to name.
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<&'a str>,
    /// The rule or detector that refused it, as in the audit line's `rule`.
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    message: &'a str,
    /// The operator's inbox item the refusal filed (`approval-required`).
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<&'a str>,
    /// How the item gets answered, for the agent to tell its user.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_steps: Option<&'a str>,
}

impl<'a> ErrorBody<'a> {
    const fn new(reason: Reason, host: &'a str, port: u16, message: &'a str) -> Self {
        Self {
            error: reason.as_str(),
            host,
            port,
            credential: None,
            rule: None,
            message,
            approval_id: None,
            next_steps: None,
        }
    }

    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| format!("{{\"error\":\"{}\"}}", self.error))
    }
}

/// The JSON body of a denial.
#[must_use]
pub fn body_json(reason: Reason, host: &str, port: u16) -> String {
    body_json_with(reason, host, port, None, None, reason.hint())
}

fn body_json_with(
    reason: Reason,
    host: &str,
    port: u16,
    credential: Option<&str>,
    rule: Option<&str>,
    message: &str,
) -> String {
    let mut body = ErrorBody::new(reason, host, port, message);
    body.credential = credential;
    body.rule = rule;
    body.to_json()
}

/// A denial: status from [`status_for`], JSON body, `x-airlock-error: <reason>`.
#[must_use]
pub fn denial(reason: Reason, host: &str, port: u16) -> Response<ProxyBody> {
    json_denial(reason, body_json(reason, host, port))
}

/// A denial whose message is this request's own (the credential it names and the fix)
/// instead of the reason's general hint.
#[must_use]
pub fn denial_with(
    reason: Reason,
    host: &str,
    port: u16,
    credential: Option<&str>,
    message: &str,
) -> Response<ProxyBody> {
    json_denial(
        reason,
        body_json_with(reason, host, port, credential, None, message),
    )
}

/// A refusal a git client shows: its smart-HTTP ref advertisement for `service`
/// (`git-receive-pack`, `git-upload-pack`) holding one `ERR` packet, which git prints as
/// `fatal: remote error: <message>` (a plain `403` would show only "The requested URL
/// returned error: 403"). `200`, as git reads the body of nothing else; the header and
/// the audit line still say the reason.
#[must_use]
pub fn git_refusal(reason: Reason, service: &str, message: &str) -> Response<ProxyBody> {
    let line = format!("ERR {message}\n");
    // A pkt-line is at most 65520 bytes, its 4 hex digits of length included.
    let line = if line.len() > 65_000 {
        format!("ERR {}\n", reason.as_str())
    } else {
        line
    };
    let body = format!("{:04x}{line}", line.len() + 4);
    let mut resp = Response::new(full(body));
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("application/x-{service}-advertisement")) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(ERROR_HEADER, HeaderValue::from_static(reason.as_str()));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A refusal of a smart-HTTP `POST` (`service` is `git-upload-pack` or `git-receive-pack`):
/// `200` with `body` (pkt-lines git reads: an `ERR` packet, a report-status) as the
/// service's result; the header and the audit line say the reason.
#[must_use]
pub fn git_result(reason: Reason, service: &str, body: Vec<u8>) -> Response<ProxyBody> {
    let mut resp = Response::new(full(body));
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("application/x-{service}-result")) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(ERROR_HEADER, HeaderValue::from_static(reason.as_str()));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

fn json_denial(reason: Reason, body: String) -> Response<ProxyBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status_for(reason);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(ERROR_HEADER, HeaderValue::from_static(reason.as_str()));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(secs) = retry_after(reason) {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
    }
    resp
}

/// `Retry-After` of a refusal that passes with time: a rate limit's bucket has its next
/// token within a second (`crate::rate`).
const fn retry_after(reason: Reason) -> Option<&'static str> {
    match reason {
        Reason::RateLimited => Some("1"),
        _ => None,
    }
}

/// The raw bytes of a denial, for listeners that speak HTTP/1.1 without hyper (connection
/// limits before a request is read, the transparent listener).
#[must_use]
pub fn raw_denial(reason: Reason, host: &str, port: u16) -> Vec<u8> {
    let body = body_json(reason, host, port);
    let status = status_for(reason);
    let retry = retry_after(reason).map_or(String::new(), |s| format!("retry-after: {s}\r\n"));
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\n{ERROR_HEADER}: {}\r\n{retry}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        reason.as_str(),
        body.len()
    )
    .into_bytes()
}

/// `200 {"status":"ok","session":"<id>"}` for the readiness probe.
#[must_use]
///
/// `audit` is whether the audit log can be written: when it cannot, the answer is `503`
/// with `"status": "audit-unavailable"` (every request is being refused).
pub fn health(session: &str, audit: bool) -> Response<ProxyBody> {
    let (status, code) = if audit {
        ("ok", StatusCode::OK)
    } else {
        (
            Reason::AuditUnavailable.as_str(),
            StatusCode::SERVICE_UNAVAILABLE,
        )
    };
    let body = serde_json::json!({
        "status": status,
        "session": session,
        "audit": if audit { "ok" } else { "unavailable" },
    })
    .to_string();
    let mut resp = Response::new(full(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Writes `response` and closes gracefully. The unread request is drained first: closing a
/// socket with unread data makes the kernel send a reset, which can destroy the response
/// before the client reads it.
pub(crate) async fn answer_and_close(stream: &mut tokio::net::TcpStream, response: &[u8]) {
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match stream.try_read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    use tokio::io::AsyncWriteExt as _;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        stream.write_all(response).await?;
        stream.shutdown().await
    })
    .await;
}
