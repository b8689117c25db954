//! The git steps of [`prepare`](super::request::prepare): what the git credential may do,
//! the service port's ticket and push commands, and a fetch through a read-only host.

use std::time::SystemTime;

use airlock_policy::reason::Reason;
use http::Request;
use http::header::{self, HeaderValue};
use hyper::body::{Body, Incoming};

use super::request::{reported, settled};
use super::request_body::read_capped;
use super::route::Route;
use super::{Cx, InBody, Refuse};
use crate::body::{Framed, Held};
use crate::credentials::GitScope;
use crate::finding::{Denial, Findings};
use crate::gitfetch;
use crate::gitpath::{self, Service};
use crate::service::{self, Admitted};
use airlock_policy::github_api::{self, ApiUse};
use airlock_policy::{L7Verdict, RequestView};

/// At most this much of a refused git service request's body is read (and dropped) before
/// the refusal is sent, so that git, still sending, reads the refusal.
const DRAIN_CAP: usize = 16 << 20;

/// What the git credential may do for this request: on the service port only smart-HTTP
/// passes, with the token for authorized repositories, and with no credential at all for
/// another repository (a read-only remote; [`service_gate`] refuses a push to it); on the
/// agent's ports a push is refused, a read of an authorized repository may carry the token,
/// and on the GitHub API host the token opens pull requests of authorized repositories
/// (`airlock_policy::github_api`).
pub(super) fn git_scope(
    ctx: &Cx<'_>,
    route: &Route,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<GitScope, Denial> {
    let policy = &ctx.rules.policy;
    if !ctx.git_service() && policy.github_api_bound(&route.target.host) {
        return match policy.github_api_use(method, path) {
            ApiUse::Token => Ok(GitScope::Api),
            ApiUse::Anonymous => Ok(GitScope::None),
            ApiUse::Refused => Err(Denial::by_rule(
                Reason::RequestDeniedByRule,
                github_api::REFUSED_RULE,
            )),
        };
    }
    let git = gitpath::parse(path, query);
    let authorized = git.as_ref().is_some_and(|g| {
        let repo = g.repository(route.target.host.as_str());
        ctx.rules.policy.git.repositories.contains(&repo)
    });
    if ctx.git_service() {
        return match git {
            _ if authorized => Ok(GitScope::Service),
            // A read-only remote: no credential (see `service_gate`, `inject`).
            Some(_) => Ok(GitScope::None),
            None => Err(Denial::by_rule(
                Reason::RequestDeniedByRule,
                "git service: git smart-HTTP only",
            )),
        };
    }
    if gitpath::is_push(path, query) {
        return Err(Reason::GitPushBlocked.into());
    }
    Ok(match &git {
        Some(g) if authorized && g.service == Service::UploadPack => GitScope::Read,
        _ => GitScope::None,
    })
}

/// On the git service port: the request's ticket, checked ([`service::admit`]); only `GET`
/// and `POST` (all git sends). Elsewhere nothing. A refused request's body is drained first.
pub(super) async fn service_gate(
    ctx: &Cx<'_>,
    req: Request<Incoming>,
    route: &Route,
) -> Result<(Request<Incoming>, Option<Admitted>), Refuse> {
    if !ctx.git_service() {
        return Ok((req, None));
    }
    // `git_scope` let only smart-HTTP requests this far.
    let Some(git) = gitpath::parse(req.uri().path(), req.uri().query()) else {
        return Err(Reason::RequestDeniedByRule.into());
    };
    let post = req.method() == http::Method::POST;
    if !post && req.method() != http::Method::GET {
        let only = "git service: GET and POST only";
        return Err(Denial::by_rule(Reason::RequestDeniedByRule, only).into());
    }
    let repository = git.repository(route.target.host.as_str());
    let authorized = ctx.rules.policy.git.repositories.contains(&repository);
    let verdict = if !authorized && git.service == Service::ReceivePack {
        Err(service::read_only(&repository, post))
    } else {
        service::admit(
            ctx.rules.credentials.git_service(),
            ctx.shared.interception.service_state(),
            req.headers(),
            (git.service, &repository),
            post,
            SystemTime::now(),
        )
    };
    match verdict {
        Ok(admitted) => Ok((req, Some(admitted))),
        Err(refusal) => {
            let idle = ctx.shared.limits.idle_timeout;
            service::drain(req.into_body(), DRAIN_CAP, idle).await;
            Err(Refuse::Git(refusal))
        }
    }
}

/// A request the service port admitted, its body as it will be sent: a push's
/// ref-update commands read and judged first ([`service::judge`]) and its ticket's updates
/// taken ([`service::take`]); any other receive-pack request without a body.
pub(super) async fn push_commands(
    ctx: &Cx<'_>,
    admitted: &Admitted,
    method: &http::Method,
    mut body: Framed<Incoming>,
    headers: &http::HeaderMap,
) -> Result<InBody, Refuse> {
    if admitted.service != Service::ReceivePack {
        return Ok(Held::none(body));
    }
    let idle = ctx.shared.limits.idle_timeout;
    let verdict = if *method != http::Method::POST {
        if body.is_end_stream() {
            return Ok(Held::none(body));
        }
        Err(service::malformed(
            "a receive-pack request that is not a POST carries a body",
        ))
    } else if headers.contains_key(header::CONTENT_ENCODING) {
        Err(service::malformed(
            "a receive-pack body must not be content-encoded",
        ))
    } else {
        match service::read_commands(&mut body, idle).await {
            Err(why) => Err(service::malformed(why)),
            Ok((held, commands)) => {
                let start = ctx.rules.credentials.git_service();
                let start = start.and_then(|p| p.start_branch.as_deref());
                let now = SystemTime::now();
                service::judge_policy(&commands, &admitted.ticket, &ctx.rules.policy, start)
                    .and_then(|()| {
                        if commands.updates.is_empty() {
                            return Ok(());
                        }
                        let state = ctx.shared.interception.service_state();
                        service::take(state, admitted, commands.caps, &commands, now)
                    })
                    .map(|()| held)
            }
        }
    };
    match verdict {
        Ok(held) => Ok(Held::new(held, body)),
        Err(refusal) => {
            service::drain(body, DRAIN_CAP, idle).await;
            Err(Refuse::Git(refusal))
        }
    }
}

/// A git fetch that passes a read-only host ([`airlock_policy::Policy::fetch_exempt`]): its
/// body is read whole (at most [`gitfetch::MAX_FETCH_BODY`] bytes) and must be a fetch
/// request ([`gitfetch::check`], gzip decoded first), else it is a write
/// (`read-only-host`, reported in report mode); it then goes upstream byte for byte. Any
/// other request's body is untouched.
pub(super) async fn fetch_request(
    ctx: &Cx<'_>,
    view: &RequestView<'_>,
    body: Framed<Incoming>,
    headers: &http::HeaderMap,
    found: &mut Findings,
) -> Result<InBody, Denial> {
    if ctx.git_service() || !ctx.rules.policy.fetch_exempt(view) {
        return Ok(Held::none(body));
    }
    let mut body = body;
    let idle = ctx.shared.limits.idle_timeout;
    let rule = |why: &str| {
        format!(
            "{}: read-only (not in network.writable): a git-upload-pack body that is not a git fetch request ({why})",
            view.host
        )
    };
    let bytes = match read_capped(&mut body, gitfetch::MAX_FETCH_BODY, idle).await {
        Ok(bytes) => bytes,
        // Nothing can go on of a body read in part: refused in both modes.
        Err(Reason::RequestDeniedByRule) => {
            let too_big = rule("larger than a fetch request");
            return Err(Denial::by_rule(Reason::ReadOnlyHost, too_big));
        }
        Err(reason) => return Err(reason.into()),
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(HeaderValue::as_bytes);
    if let Err(why) = gitfetch::decoded(&bytes, encoding).and_then(|d| gitfetch::check(&d)) {
        // Report mode logs it and sends it as it came.
        let refusal = L7Verdict::Deny {
            reason: Reason::ReadOnlyHost,
            rule: rule(why),
        };
        let (verdict, report) = reported(&ctx.rules.policy, refusal);
        found.add(report);
        found.add(settled(verdict, None)?);
    }
    Ok(Held::new(bytes, body))
}
