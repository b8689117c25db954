//! Every check on a request, in order ([`prepare`]): the head, the L7 rules, the credentials'
//! use, secrets in the URL and headers, credential injection; the request as it will be sent.

use std::sync::Arc;

use airlock_policy::reason::Reason;
use http::header::{self, HeaderValue};
use http::{Request, Uri, Version};
use hyper::body::{Body, Incoming};

use super::ctx::Ctx;
use super::git::{fetch_request, git_scope, push_commands, service_gate};
use super::request_body::{Tally, prepare_body};
use super::route::{Route, host_agrees};
use super::upgrade::{is_upgrade, upgrade_verdict};
use super::{Cx, Refuse, UpBody};
use crate::audit::{Pending, Verdict};
use crate::body::{CutFlag, Framed, SignalNote};
use crate::credentials::{GitScope, Injected};
use crate::detect;
use crate::gate::MessageEnd;
use crate::gitpath::{self, Service};
use crate::hop;
use crate::recent::Channel;
use crate::tunnel::Meter;
use crate::websocket;
use airlock_policy::l7::METHOD_OVERRIDE_HEADERS;
use airlock_policy::{L7Verdict, RequestView};

/// A request that passed every check, as it will be sent.
pub(super) struct Prepared {
    pub(super) out: Request<UpBody>,
    /// The agent's side of an allowed upgrade, and how its `101` is relayed.
    pub(super) on_client_upgrade: Option<(hyper::upgrade::OnUpgrade, websocket::Relay)>,
    /// Byte counts (and activity) of this request's body both ways.
    pub(super) meter: Arc<Meter>,
    /// Set when a streamed body was cut at a secret (the credential's name).
    pub(super) leak_flag: CutFlag,
    /// A streamed body's signals, for the record.
    pub(super) signals: SignalNote,
    /// A streamed body's secrets let through, for the record.
    pub(super) secrets: detect::Note,
    /// Whether a credential was injected (the response is then scrubbed).
    pub(super) injected: bool,
}

/// Every check on the request, in order; the request as it will be sent. `Err` is the
/// request's denial (the record already names the rule or credential involved).
pub(super) async fn prepare(
    ctx: &Cx<'_>,
    req: Request<Incoming>,
    route: &Route,
    rec: &mut Pending,
) -> Result<Prepared, Refuse> {
    describe(rec, &req, route);
    check_pace(ctx, route, rec)?;
    check_head(ctx, &req, route)?;
    // A cheap clone (shared bytes) the path and query are borrowed from.
    let uri = req.uri().clone();
    let (path, query) = (uri.path(), uri.query());
    let method = req.method().clone();
    let scope = git_scope(ctx, route, method.as_str(), path, query, rec)?;
    let (mut req, admitted) = service_gate(ctx, req, route, rec).await?;
    let view = RequestView {
        host: &route.target.host,
        method: method.as_str(),
        path,
        query,
    };
    let body_cap = judge_head(ctx, &mut req, &view, route, rec)?;
    let upgrade = check_credential_use(ctx, &req, route, rec)?;
    check_missing(ctx, route, scope, &view, rec)?;
    let upgrading = upgrade.is_some();
    let on_client_upgrade = upgrade.map(|relay| (hyper::upgrade::on(&mut req), relay));
    let (mut parts, body) = req.into_parts();
    // From here on the body ends cleanly only where its message really ended (`Framed`).
    let end = parts.extensions.remove::<MessageEnd>();
    let body = Framed::new(body, end);
    let body = match admitted {
        Some(a) => push_commands(ctx, &a, &method, body, &parts.headers).await?,
        None => fetch_request(ctx, &view, body, &parts.headers, rec).await?,
    };
    let upgrade_value = parts.headers.get(header::UPGRADE).cloned();
    hop::strip(&mut parts.headers);
    hop::strip_claims(&mut parts.headers, &ctx.rules.policy.network);
    check_foreign_secrets(ctx, route, &parts, rec)?;
    let injected = inject(ctx, route, &mut parts.headers, scope, &view, rec)?;
    let tally = Tally::default();
    // This request's body (and an upgraded WebSocket's frames) count against the upload
    // budgets as they are read; the git API's pushes do not.
    if !ctx.git_service() {
        let who = crate::limits::Client::of(ctx.uid, ctx.peer);
        let limits = ctx.rules.policy.limits;
        (tally.meter).charge(ctx.shared.budgets.charge(who, &route.target.host, limits));
    }
    let up_body = prepare_body(
        ctx,
        body,
        &mut parts.headers,
        body_cap,
        &view,
        injected.as_ref(),
        &tally,
        rec,
    )
    .await?;
    let out = origin_form(parts, route, upgrade_value.filter(|_| upgrading), up_body)?;
    Ok(Prepared {
        out,
        on_client_upgrade,
        meter: tally.meter,
        leak_flag: tally.leak_flag,
        signals: tally.signals,
        secrets: tally.secrets,
        injected: injected.is_some(),
    })
}

/// The record's target and path (the path cut at 1,024 characters).
pub(super) fn describe(rec: &mut Pending, req: &Request<Incoming>, route: &Route) {
    rec.host = Some(route.target.host.as_str().to_owned());
    rec.port = Some(route.target.port);
    rec.intercepted = route.tls;
    let path = req.uri().path();
    rec.path = Some(if path.len() <= 1024 {
        path.to_owned()
    } else {
        path.chars().take(1024).collect()
    });
}

/// The rate and the upstream's circuit ([`crate::admission::paced`]) on a request read in
/// an intercepted connection (plain HTTP and base URL were judged when admitted; the git
/// service port is never limited).
fn check_pace(ctx: &Cx<'_>, route: &Route, rec: &mut Pending) -> Result<(), Reason> {
    if !route.check_host || ctx.git_service() {
        return Ok(());
    }
    let pace = ctx
        .shared
        .pace(crate::limits::Client::of(ctx.uid, ctx.peer));
    match crate::admission::paced(pace, &ctx.rules.policy, &route.target) {
        None => Ok(()),
        Some(refused) => {
            rec.rule.clone_from(&refused.rule);
            Err(refused.refused().unwrap_or(Reason::RateLimited))
        }
    }
}

/// The head names the connection's checked target (no fronting), and its request line
/// fits the limit.
fn check_head(ctx: &Ctx, req: &Request<Incoming>, route: &Route) -> Result<(), Reason> {
    if route.check_host {
        host_agrees(req, route)?;
    }
    let pq_len = req.uri().path_and_query().map_or(1, |pq| pq.as_str().len());
    if pq_len > ctx.shared.limits.max_request_line {
        return Err(Reason::RequestTooLarge);
    }
    Ok(())
}

/// The policy's L7 rules on the head (not on the service port), with the method-override
/// headers removed; returns how much of the body a body rule wants to judge.
fn judge_head(
    ctx: &Cx<'_>,
    req: &mut Request<Incoming>,
    view: &RequestView<'_>,
    route: &Route,
    rec: &mut Pending,
) -> Result<Option<usize>, Reason> {
    if ctx.git_service() {
        return Ok(None);
    }
    let verdict = reported(&ctx.rules.policy, ctx.rules.policy.judge(view), rec);
    if let L7Verdict::Ask { rule } = &verdict {
        ask_operator(ctx, route, rule, rec)?;
    }
    apply_l7(verdict, rec)?;
    // A read's body: what an upstream that ignores it may take for a request of its own.
    if !req.body().is_end_stream() {
        let verdict = ctx.rules.policy.judge_read_body(view);
        apply_l7(reported(&ctx.rules.policy, verdict, rec), rec)?;
    }
    for h in METHOD_OVERRIDE_HEADERS {
        req.headers_mut().remove(h);
    }
    // A host without L7 rules answers at once (`body_needed` checks that first).
    Ok(ctx.rules.policy.body_needed(view))
}

/// Report mode exists to learn what a policy must name writable: a write to a read-only
/// host (a read carrying a body included) is logged (`report`, `read-only-host` or
/// `body-on-read`, the rule) and let through. Every other L7
/// denial holds in both modes.
pub(super) fn reported(
    policy: &airlock_policy::Policy,
    verdict: L7Verdict,
    rec: &mut Pending,
) -> L7Verdict {
    match verdict {
        L7Verdict::Deny {
            reason: reason @ (Reason::ReadOnlyHost | Reason::BodyOnRead),
            rule,
        } if matches!(policy.sandbox.mode, airlock_policy::Mode::Report) => {
            rec.decision = Verdict::Report;
            rec.reason = Some(reason);
            rec.rule = Some(rule);
            L7Verdict::Pass { rule: None }
        }
        v => v,
    }
}

/// The operator's answer to a request the ask rule `rule` matched
/// ([`crate::admission::ask_rule`]): through with the session's approval (the record
/// naming it), else refused as the inbox says (`approval-required` naming the item filed,
/// `approval-denied` with the operator's reason). Never held: the refusal is at once.
fn ask_operator(ctx: &Cx<'_>, route: &Route, rule: &str, rec: &mut Pending) -> Result<(), Reason> {
    let pace = ctx
        .shared
        .pace(crate::limits::Client::of(ctx.uid, ctx.peer));
    let a = crate::admission::ask_rule(pace, &ctx.rules.policy, &route.target, rule);
    rec.approval.clone_from(&a.approval);
    match a.refused() {
        None => {
            rec.rule = a.rule.map(|r| format!("{r} for rule {rule}"));
            Ok(())
        }
        Some(reason) => {
            rec.rule = a.rule.or_else(|| Some(format!("ask rule {rule}")));
            Err(reason)
        }
    }
}

/// An L7 verdict on the record: a denial names its rule; a pass keeps the rule it matched;
/// an ask is a pass here (the operator's approval was taken on the head: [`judge_head`]).
pub(super) fn apply_l7(verdict: L7Verdict, rec: &mut Pending) -> Result<(), Reason> {
    match verdict {
        L7Verdict::Deny { reason, rule } => {
            rec.rule = Some(rule);
            Err(reason)
        }
        L7Verdict::Ask { .. } => Ok(()),
        L7Verdict::Pass { rule } => {
            if rule.is_some() {
                rec.rule = rule;
            }
            Ok(())
        }
    }
}

/// Methods that never carry a credential: `TRACE` and `TRACK` make the server echo the
/// request (the injected secret would come back in a body), `CONNECT` inside an
/// intercepted connection would open a tunnel no rule reads.
fn never_credentialed(method: &http::Method) -> bool {
    ["TRACE", "TRACK", "CONNECT"]
        .iter()
        .any(|m| method.as_str().eq_ignore_ascii_case(m))
}

/// Where a credential could be abused: a secret in the URL, a method that echoes or
/// tunnels on a credential's host, an upgrade to a relay. Returns how an allowed upgrade
/// is relayed (`None`: not an upgrade).
fn check_credential_use(
    ctx: &Cx<'_>,
    req: &Request<Incoming>,
    route: &Route,
    rec: &mut Pending,
) -> Result<Option<websocket::Relay>, Reason> {
    let creds = &ctx.rules.credentials;
    let host = &route.target.host;
    if let Some(pq) = req.uri().path_and_query()
        && let Err(leak) = creds.check_url(pq.as_str())
    {
        rec.credential = Some(leak.credential);
        return Err(Reason::CredentialLeak);
    }
    if never_credentialed(req.method()) && creds.any_bound_to(host) {
        return Err(Reason::CredentialMethodRefused);
    }
    if !is_upgrade(req) {
        return Ok(None);
    }
    let policy = &ctx.rules.policy;
    // Listed in `network.websocket`: the relay reads the frames (never on the git service
    // port, whose only business is smart HTTP).
    let frames = || {
        (!ctx.git_service() && policy.network.websocket_allowed(host)).then(|| websocket::Session {
            rules: Arc::clone(&ctx.rules),
            host: host.clone(),
            report: matches!(policy.sandbox.mode, airlock_policy::Mode::Report),
            recent: Arc::clone(ctx.shared.interception.recent()),
        })
    };
    upgrade_verdict(req, frames, || {
        // After the `101` of a raw relay every frame is a write nobody judges: only a
        // writable host may carry one.
        ctx.git_service()
            || creds.any_bound_to(host)
            || policy.l7.has_rules_for(host)
            || !(policy.is_writable(host) || policy.is_passthrough(host))
    })
    .map(Some)
}

/// A credential the request would carry (over TLS) that was not configured at start:
/// `credential-missing`, the record naming it. The git credential lets the reads an
/// upstream may answer anonymously through without it (a fetch, a `GET` of the API).
fn check_missing(
    ctx: &Cx<'_>,
    route: &Route,
    scope: GitScope,
    view: &RequestView<'_>,
    rec: &mut Pending,
) -> Result<(), Reason> {
    // A read-only remote's fetch on the service port carries no credential at all.
    if !route.tls || (ctx.git_service() && scope == GitScope::None) {
        return Ok(());
    }
    let anonymous_read = match scope {
        GitScope::None => false,
        GitScope::Read => true,
        GitScope::Service => {
            gitpath::parse(view.path, view.query).is_some_and(|g| g.service == Service::UploadPack)
        }
        GitScope::Api => matches!(view.method, "GET" | "HEAD"),
    };
    let creds = &ctx.rules.credentials;
    match creds.missing_for(view.host, scope, (view.method, view.path), anonymous_read) {
        Some(names) => {
            rec.credential = Some(names);
            Err(Reason::CredentialMissing)
        }
        None => Ok(()),
    }
}

/// Secrets of known formats and the workspace's values in the URL (as sent and decoded) and
/// the agent's headers, on their way to a host that is not their provider's:
/// `foreign-secret`, the detector named in the record's rule (one whose action is `log`
/// goes on, noted on the record: [`detect::Detectors::judge`]). The query's values are
/// also searched joined to those of the last queries to the same host
/// ([`Channel::Query`]), so a value split over two requests is found in the second.
fn check_foreign_secrets(
    ctx: &Cx<'_>,
    route: &Route,
    parts: &http::request::Parts,
    rec: &mut Pending,
) -> Result<(), Reason> {
    let detectors = &ctx.rules.detectors;
    let host = &route.target.host;
    let pq = parts.uri.path_and_query().map_or("", |p| p.as_str());
    // The decoded form only when there is something to decode (no copy per request).
    let decoded = pq
        .contains('%')
        .then(|| airlock_policy::path::percent_decode(pq.as_bytes()));
    let places = std::iter::once(pq.as_bytes())
        .chain(decoded.as_deref())
        .chain(parts.headers.values().map(HeaderValue::as_bytes));
    for bytes in places {
        let v = detectors.judge(bytes, host);
        if let Some(d) = v.refused {
            rec.rule = Some(format!("secret detector {}", d.name));
            return Err(Reason::ForeignSecret);
        }
        v.note(rec);
    }
    if let Some(query) = parts.uri.query().filter(|q| !q.is_empty()) {
        let recent = ctx.shared.interception.recent();
        let values = crate::recent::query_values(query);
        let mut joined = recent.tail(host.as_str(), Channel::Query);
        let skip = joined.len();
        if skip > 0 {
            joined.extend_from_slice(&values);
            let v = detectors.judge_after(&joined, skip, host);
            if let Some(d) = v.refused {
                rec.rule = Some(format!("secret detector {}", d.name));
                return Err(Reason::ForeignSecret);
            }
            v.note(rec);
        }
        recent.push(host.as_str(), Channel::Query, &values);
    }
    Ok(())
}

/// The credentials on the headers (`Credentials::apply`); the record names what was
/// injected, or the credential a leak belongs to.
pub(super) fn inject(
    ctx: &Cx<'_>,
    route: &Route,
    headers: &mut http::HeaderMap,
    scope: GitScope,
    view: &RequestView<'_>,
    rec: &mut Pending,
) -> Result<Option<Injected>, Reason> {
    let creds = &ctx.rules.credentials;
    let request = Some((view.method, view.path));
    // On the service port a repository outside `[git] repositories` (a read-only remote) is
    // fetched with no credential: the bound headers are still removed, nothing is added.
    let anonymous = ctx.git_service() && scope == GitScope::None;
    if anonymous {
        headers.remove(header::AUTHORIZATION);
    }
    let add = route.tls && !anonymous;
    match creds.apply_to(&route.target.host, headers, scope, add, request) {
        Ok(injected) => {
            rec.credential = injected.as_ref().map(|i| i.names.clone());
            Ok(injected)
        }
        Err(leak) => {
            rec.credential = Some(leak.credential);
            tracing::warn!("credential leak refused: {}", leak.place);
            Err(Reason::CredentialLeak)
        }
    }
}

/// The request as sent: origin-form (the path and query as received, no re-parse),
/// HTTP/1.1, `Host` from the checked target, and the upgrade headers of an allowed upgrade.
fn origin_form(
    mut parts: http::request::Parts,
    route: &Route,
    upgrade: Option<HeaderValue>,
    body: UpBody,
) -> Result<Request<UpBody>, Reason> {
    parts.uri = match parts.uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    };
    parts.version = Version::HTTP_11;
    let hv = route.host_header.clone().ok_or(Reason::InvalidHost)?;
    parts.headers.insert(header::HOST, hv);
    if let Some(u) = upgrade {
        parts.headers.insert(header::UPGRADE, u);
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        // No compression (permessage-deflate) nor any other extension: the frames stay
        // plain bytes the relay can read.
        parts.headers.remove(header::SEC_WEBSOCKET_EXTENSIONS);
    }
    Ok(Request::from_parts(parts, body))
}
