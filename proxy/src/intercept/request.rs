//! Every check on a request, in order ([`prepare`]): the head, the L7 rules, the credentials'
//! use, secrets in the URL and headers, credential injection; the request as it will be sent.
//! Each check returns what it found ([`Finding`]) or its refusal ([`Denial`]); none writes
//! the audit record ([`super::exchange`] does, once).

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
use crate::audit::Pending;
use crate::body::{CutFlag, Framed, SignalNote};
use crate::credentials::{GitScope, Injected};
use crate::detect;
use crate::finding::{Denial, Finding, Findings};
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

/// Every check on the request, in order; the request as it will be sent. What the checks
/// found is kept in `found`, a refusal's included (`Err` is the request's denial).
pub(super) async fn prepare(
    ctx: &Cx<'_>,
    req: Request<Incoming>,
    route: &Route,
    found: &mut Findings,
) -> Result<Prepared, Refuse> {
    check_pace(ctx, route)?;
    check_head(ctx, &req, route)?;
    // A cheap clone (shared bytes) the path and query are borrowed from.
    let uri = req.uri().clone();
    let (path, query) = (uri.path(), uri.query());
    let method = req.method().clone();
    let scope = git_scope(ctx, route, method.as_str(), path, query)?;
    let (mut req, admitted) = service_gate(ctx, req, route).await?;
    let view = RequestView {
        host: &route.target.host,
        method: method.as_str(),
        path,
        query,
    };
    let (body_cap, asked) = judge_head(ctx, &mut req, &view, route, found)?;
    let upgrade = check_credential_use(ctx, &req, route)?;
    check_missing(ctx, route, scope, &view)?;
    let upgrading = upgrade.is_some();
    let on_client_upgrade = upgrade.map(|relay| (hyper::upgrade::on(&mut req), relay));
    let (mut parts, body) = req.into_parts();
    // From here on the body ends cleanly only where its message really ended (`Framed`).
    let end = parts.extensions.remove::<MessageEnd>();
    let body = Framed::new(body, end);
    let body = match admitted {
        Some(a) => push_commands(ctx, &a, &method, body, &parts.headers).await?,
        None => fetch_request(ctx, &view, body, &parts.headers, found).await?,
    };
    let upgrade_value = parts.headers.get(header::UPGRADE).cloned();
    hop::strip(&mut parts.headers);
    hop::strip_claims(&mut parts.headers, &ctx.rules.policy.network);
    found.add(check_foreign_secrets(ctx, route, &parts)?);
    let injected = inject(ctx, route, &mut parts.headers, scope, &view)?;
    found.add(
        injected
            .as_ref()
            .map(|i| Finding::Credential(i.names.clone())),
    );
    let tally = Tally::default();
    // This request's body (and an upgraded WebSocket's frames) count against the upload
    // budgets as they are read; the git API's pushes do not.
    if !ctx.git_service() {
        let who = crate::limits::Client::of(ctx.caller);
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
        asked.as_deref(),
        found,
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
fn check_pace(ctx: &Cx<'_>, route: &Route) -> Result<(), Denial> {
    if !route.check_host || ctx.git_service() {
        return Ok(());
    }
    let pace = ctx.shared.pace(crate::limits::Client::of(ctx.caller));
    match crate::admission::paced(pace, &ctx.rules.policy, &route.target) {
        None => Ok(()),
        Some(refused) => {
            let reason = refused.refused().unwrap_or(Reason::RateLimited);
            Err(Denial::naming(reason, refused.rule.map(Finding::Rule)))
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
/// headers removed. Returns how much of the body a body rule wants to judge, and the ask
/// rule the operator's answer let this request through (its body is judged under it).
fn judge_head(
    ctx: &Cx<'_>,
    req: &mut Request<Incoming>,
    view: &RequestView<'_>,
    route: &Route,
    found: &mut Findings,
) -> Result<(Option<usize>, Option<String>), Denial> {
    if ctx.git_service() {
        return Ok((None, None));
    }
    let policy = &ctx.rules.policy;
    let (verdict, report) = reported(policy, policy.judge(view));
    found.add(report);
    let asked = match &verdict {
        L7Verdict::Ask { rule } => {
            found.add(ask_operator(ctx, route, rule)?);
            Some(rule.clone())
        }
        _ => None,
    };
    found.add(settled(verdict, asked.as_deref())?);
    // A read's body: what an upstream that ignores it may take for a request of its own.
    if !req.body().is_end_stream() {
        let (verdict, report) = reported(policy, policy.judge_read_body(view));
        found.add(report);
        found.add(settled(verdict, None)?);
    }
    for h in METHOD_OVERRIDE_HEADERS {
        req.headers_mut().remove(h);
    }
    // A host without L7 rules answers at once (`body_needed` checks that first).
    Ok((policy.body_needed(view), asked))
}

/// Report mode exists to learn what a policy must name writable: a write to a read-only
/// host (a read carrying a body included) is logged (`report`, `read-only-host` or
/// `body-on-read`, the rule) and let through. Every other L7
/// denial holds in both modes.
pub(super) fn reported(
    policy: &airlock_policy::Policy,
    verdict: L7Verdict,
) -> (L7Verdict, Option<Finding>) {
    match verdict {
        L7Verdict::Deny {
            reason: reason @ (Reason::ReadOnlyHost | Reason::BodyOnRead),
            rule,
        } if matches!(policy.sandbox.mode, airlock_policy::Mode::Report) => (
            L7Verdict::Pass { rule: None },
            Some(Finding::Reported { reason, rule }),
        ),
        v => (v, None),
    }
}

/// The operator's answer to a request the ask rule `rule` matched
/// ([`crate::admission::ask_rule`]): through with the session's approval (found: the item
/// and the approval), else refused as the inbox says (`approval-required` naming the item
/// filed, `approval-denied` with the operator's reason). Never held: the refusal is at once.
fn ask_operator(ctx: &Cx<'_>, route: &Route, rule: &str) -> Result<Vec<Finding>, Denial> {
    let pace = ctx.shared.pace(crate::limits::Client::of(ctx.caller));
    let a = crate::admission::ask_rule(pace, &ctx.rules.policy, &route.target, rule);
    let refused = a.refused();
    let item = a.approval.map(Finding::Approval);
    match refused {
        None => {
            let through = a
                .rule
                .map(|r| Finding::Rule(format!("{r} for rule {rule}")));
            Ok(item.into_iter().chain(through).collect())
        }
        Some(reason) => {
            let why = a.rule.unwrap_or_else(|| format!("ask rule {rule}"));
            Err(Denial::naming(
                reason,
                item.into_iter().chain([Finding::Rule(why)]),
            ))
        }
    }
}

/// An L7 verdict as it stands once the operator has answered: a denial refuses naming its
/// rule; a pass keeps the rule it matched; an ask passes only for the rule the operator's
/// answer let this request through (`answered`). Any other ask is refused
/// `approval-required`: nothing put it to the operator, so nothing lets it through.
pub(super) fn settled(
    verdict: L7Verdict,
    answered: Option<&str>,
) -> Result<Option<Finding>, Denial> {
    match verdict {
        L7Verdict::Deny { reason, rule } => Err(Denial::by_rule(reason, rule)),
        L7Verdict::Ask { rule } if answered == Some(rule.as_str()) => Ok(None),
        L7Verdict::Ask { rule } => Err(Denial::by_rule(
            Reason::ApprovalRequired,
            format!("ask rule {rule}: not put to the operator"),
        )),
        L7Verdict::Pass { rule } => Ok(rule.map(Finding::Rule)),
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
) -> Result<Option<websocket::Relay>, Denial> {
    let creds = &ctx.rules.credentials;
    let host = &route.target.host;
    if let Some(pq) = req.uri().path_and_query()
        && let Err(leak) = creds.check_url(pq.as_str())
    {
        return Err(Denial::of_credential(
            Reason::CredentialLeak,
            leak.credential,
        ));
    }
    if never_credentialed(req.method()) && creds.any_bound_to(host) {
        return Err(Reason::CredentialMethodRefused.into());
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
    .map_err(Denial::from)
}

/// A credential the request would carry (over TLS) that was not configured at start:
/// `credential-missing`, the record naming it. The git credential lets the reads an
/// upstream may answer anonymously through without it (a fetch, a `GET` of the API).
fn check_missing(
    ctx: &Cx<'_>,
    route: &Route,
    scope: GitScope,
    view: &RequestView<'_>,
) -> Result<(), Denial> {
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
        Some(names) => Err(Denial::of_credential(Reason::CredentialMissing, names)),
        None => Ok(()),
    }
}

/// Secrets of known formats and the workspace's values in the URL (as sent and decoded) and
/// the agent's headers, on their way to a host that is not their provider's:
/// `foreign-secret`, the detector named in the record's rule (one whose action is `log`
/// goes on, found: [`detect::Detectors::judge`]). The query's values are
/// also searched joined to those of the last queries to the same host
/// ([`Channel::Query`]), so a value split over two requests is found in the second.
fn check_foreign_secrets(
    ctx: &Cx<'_>,
    route: &Route,
    parts: &http::request::Parts,
) -> Result<Vec<Finding>, Denial> {
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
    let mut found = Vec::new();
    for bytes in places {
        let v = detectors.judge(bytes, host);
        found.extend(secrets_found(&v)?);
    }
    if let Some(query) = parts.uri.query().filter(|q| !q.is_empty()) {
        let recent = ctx.shared.interception.recent();
        let values = crate::recent::query_values(query);
        let mut joined = recent.tail(host.as_str(), Channel::Query);
        let skip = joined.len();
        if skip > 0 {
            joined.extend_from_slice(&values);
            let v = detectors.judge_after(&joined, skip, host);
            found.extend(secrets_found(&v)?);
        }
        recent.push(host.as_str(), Channel::Query, &values);
    }
    Ok(found)
}

/// The detectors' verdict on bytes as a check's result: a refusal names its detector
/// (`foreign-secret`); what was let through is found.
pub(super) fn secrets_found(v: &detect::Verdict<'_>) -> Result<Option<Finding>, Denial> {
    match v.refused {
        Some(d) => Err(Denial::by_rule(
            Reason::ForeignSecret,
            format!("{}{}", detect::RULE_PREFIX, d.name),
        )),
        None => Ok(Finding::secrets(v)),
    }
}

/// The credentials on the headers (`Credentials::apply`): what was injected, or the
/// refusal naming the credential a leak belongs to.
pub(super) fn inject(
    ctx: &Cx<'_>,
    route: &Route,
    headers: &mut http::HeaderMap,
    scope: GitScope,
    view: &RequestView<'_>,
) -> Result<Option<Injected>, Denial> {
    let creds = &ctx.rules.credentials;
    let request = Some((view.method, view.path));
    // On the service port a repository outside `[git] repositories` (a read-only remote) is
    // fetched with no credential: the bound headers are still removed, nothing is added.
    let anonymous = ctx.git_service() && scope == GitScope::None;
    if anonymous {
        headers.remove(header::AUTHORIZATION);
    }
    let add = route.tls && !anonymous;
    creds
        .apply_to(&route.target.host, headers, scope, add, request)
        .map_err(|leak| {
            tracing::warn!("credential leak refused: {}", leak.place);
            Denial::of_credential(Reason::CredentialLeak, leak.credential)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(rule: &str) -> L7Verdict {
        L7Verdict::Ask { rule: rule.into() }
    }

    #[test]
    fn an_ask_nobody_put_to_the_operator_is_refused() {
        let refused = settled(ask("deploys"), None).unwrap_err();
        assert_eq!(refused.reason, Reason::ApprovalRequired);
        let names = [Finding::Rule(
            "ask rule deploys: not put to the operator".into(),
        )];
        assert_eq!(refused.found, names);
        // An answer for another rule answers nothing here.
        let other = settled(ask("deploys"), Some("releases")).unwrap_err();
        assert_eq!(other.reason, Reason::ApprovalRequired);
    }

    #[test]
    fn an_answered_ask_passes_and_a_deny_and_a_pass_keep_their_rules() {
        assert_eq!(settled(ask("deploys"), Some("deploys")), Ok(None));
        let pass = L7Verdict::Pass {
            rule: Some("reads".into()),
        };
        assert_eq!(settled(pass, None), Ok(Some(Finding::Rule("reads".into()))));
        let deny = L7Verdict::Deny {
            reason: Reason::RequestDeniedByRule,
            rule: "no pushes".into(),
        };
        let refused = settled(deny, Some("no pushes")).unwrap_err();
        assert_eq!(refused.reason, Reason::RequestDeniedByRule);
        assert_eq!(refused.found, [Finding::Rule("no pushes".into())]);
    }
}
