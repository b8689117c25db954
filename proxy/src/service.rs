//! The git service port trusts a proof, not a group.
//!
//! The firewall opens the service port to the git API's group; anything that runs with the
//! git API's identity (a program git starts) holds that group too. So on every smart-HTTP
//! request there the proxy also requires a ticket of this start (`airlock_ticket`: sealed
//! by the git API with the service key the entrypoint handed to both): [`admit`] refuses a
//! request without one (`git-ticket-missing`), with one that does not verify, is for
//! another repository or the other operation (`git-ticket-invalid`), or is past its
//! expiry or older than this proxy (`git-ticket-expired`). The ticket header is removed
//! with every other `x-airlock-*` header before anything goes upstream.
//!
//! A push (`git-receive-pack` with a body) is then judged on its ref-update commands,
//! read before a byte of it is sent ([`read_commands`], [`crate::receive_pack`]):
//! [`judge`] refuses a deletion, a tag (unless `git.allow_tags`, and then only a new one),
//! anything but a branch, a protected branch and a branch outside the sandbox's own
//! (`git.push_branches` and the start branch), whatever signed it
//! (`git-ref-update-refused`); and every update the ticket did not sign as exactly that
//! (ref, old, new) (`git-ref-update-unsigned`). The old value is the compare-and-swap the
//! upstream applies: a signed update cannot be replayed onto a ref that moved. Fast-forward
//! is the git API's judgement (the proxy has no objects); the signature carries it. A push
//! ticket's updates are taken once ([`Spent`]: `git-ticket-replayed`). A request that
//! cannot be read as commands is `git-push-malformed`.
//!
//! A repository outside `[git] repositories` on an allowed host (a read-only remote of the
//! agent's) is fetched here with a ticket naming it and no credential; a push to it is
//! refused whatever its ticket ([`read_only`]).
//!
//! Every refusal is an answer git shows ([`Refusal::answer`]): an `ERR` packet, or for a
//! push whose commands were read a report-status with `ng <ref> <why>` for every command.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_policy::glob::GitRules;
use airlock_policy::reason::Reason;
use airlock_ticket::{Op, RefUpdate, Refused, Ticket};
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body_util::BodyExt as _;
use hyper::body::Body;

use crate::credentials::ServicePass;
use crate::deny::{self, ProxyBody};
use crate::gitpath::Service;
use crate::receive_pack::{self, Caps, Commands, Read};

/// The per-start state of the service port: when this proxy started (a ticket sealed
/// before it is refused, so a restart forgets no spent ticket that could still be used)
/// and the push tickets whose updates were taken.
#[derive(Debug)]
pub struct ServiceState {
    started_ms: u64,
    spent: Spent,
}

impl ServiceState {
    /// The state of a proxy starting now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            started_ms: millis(SystemTime::now()),
            spent: Spent::default(),
        }
    }
}

impl Default for ServiceState {
    fn default() -> Self {
        Self::new()
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The push tickets (nonce, repository) whose updates were taken, until they expire.
#[derive(Debug, Default)]
struct Spent(Mutex<HashMap<([u8; 16], String), u64>>);

impl Spent {
    /// Marks `ticket`'s updates for `repository` taken; false when they already were.
    fn take(&self, ticket: &Ticket, repository: &str, now_ms: u64) -> bool {
        let Ok(mut spent) = self.0.lock() else {
            return false;
        };
        spent.retain(|_, expires| *expires > now_ms);
        spent
            .insert((ticket.nonce, repository.to_owned()), ticket.expires_ms)
            .is_none()
    }
}

/// How a refusal reaches git.
#[derive(Debug, Clone)]
enum Form {
    /// A ref advertisement (`GET info/refs?service=...`) holding one `ERR` packet.
    Advertisement(Service),
    /// A `POST` result holding one `ERR` packet.
    Result(Service),
    /// A push whose commands were read: a report-status, `ng` for every ref.
    Report(Caps, Vec<(String, String)>),
}

/// A refusal on the service port: its reason, the audit line's `rule` (what exactly), and
/// the answer git shows.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub reason: Reason,
    pub rule: String,
    form: Form,
}

impl Refusal {
    fn new(reason: Reason, rule: impl Into<String>, form: Form) -> Self {
        Self {
            reason,
            rule: rule.into(),
            form,
        }
    }

    /// The answer git prints: `fatal: remote error: airlock: <reason>: <rule>. <hint>`, or
    /// `! [remote rejected] <ref> (airlock: <reason>: <why>)` per ref.
    pub fn answer(&self) -> http::Response<ProxyBody> {
        let reason = self.reason;
        let message = format!("airlock: {reason}: {}. {}", self.rule, reason.hint());
        match &self.form {
            Form::Advertisement(s) => deny::git_refusal(reason, service_name(*s), &message),
            Form::Result(s) => {
                let body = receive_pack::report(Caps::default(), &[], &message);
                deny::git_result(reason, service_name(*s), body)
            }
            Form::Report(caps, refs) => {
                let refs: Vec<(&str, String)> = refs
                    .iter()
                    .map(|(r, why)| (r.as_str(), format!("airlock: {why}")))
                    .collect();
                let body = receive_pack::report(*caps, &refs, &message);
                deny::git_result(reason, "git-receive-pack", body)
            }
        }
    }
}

const fn service_name(s: Service) -> &'static str {
    match s {
        Service::UploadPack => "git-upload-pack",
        Service::ReceivePack => "git-receive-pack",
    }
}

/// A request the ticket admits: the ticket, the repository it was checked for.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub ticket: Ticket,
    pub repository: String,
    pub service: Service,
}

/// The ticket of a smart-HTTP request of `repository` on the service port, checked
/// (see the module docs). `post`: the request is a `POST` (its refusal is a result, not an
/// advertisement).
pub(crate) fn admit(
    pass: Option<&ServicePass>,
    state: &ServiceState,
    headers: &HeaderMap,
    (service, repository): (Service, &str),
    post: bool,
    now: SystemTime,
) -> Result<Admitted, Refusal> {
    let form = if post {
        Form::Result(service)
    } else {
        Form::Advertisement(service)
    };
    let refuse = |reason, rule: String| Err(Refusal::new(reason, rule, form.clone()));
    let mut values = headers.get_all(airlock_ticket::HEADER).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return if headers.contains_key(airlock_ticket::HEADER) {
            refuse(Reason::GitTicketInvalid, "more than one ticket".into())
        } else {
            refuse(
                Reason::GitTicketMissing,
                "no ticket: only the git API's own git commands use this port".into(),
            )
        };
    };
    let Some(pass) = pass else {
        return refuse(
            Reason::GitTicketInvalid,
            "this start has no service key (no git API)".into(),
        );
    };
    let ticket = match airlock_ticket::open(value.as_bytes(), &pass.key, now) {
        Ok(t) => t,
        Err(Refused::Expired) => {
            return refuse(Reason::GitTicketExpired, "the ticket expired".into());
        }
        Err(e) => {
            return refuse(
                Reason::GitTicketInvalid,
                format!("the ticket is refused: {e}"),
            );
        }
    };
    if ticket.issued_ms < state.started_ms {
        return refuse(
            Reason::GitTicketExpired,
            "the ticket was sealed before the proxy's last start".into(),
        );
    }
    let op = match service {
        Service::UploadPack => Op::Fetch,
        Service::ReceivePack => Op::Push,
    };
    if ticket.op != op {
        return refuse(
            Reason::GitTicketInvalid,
            format!(
                "a {} ticket on a {} request",
                ticket.op.as_str(),
                service_name(service)
            ),
        );
    }
    if !ticket.covers(repository) {
        return refuse(
            Reason::GitTicketInvalid,
            format!("the ticket is not for {repository}"),
        );
    }
    Ok(Admitted {
        ticket,
        repository: repository.to_owned(),
        service,
    })
}

/// The refusal of a push to a repository outside `[git] repositories` (a read-only remote:
/// the git API fetches it with no credential and never pushes there), whatever its ticket.
pub(crate) fn read_only(repository: &str, post: bool) -> Refusal {
    let form = if post {
        Form::Result(Service::ReceivePack)
    } else {
        Form::Advertisement(Service::ReceivePack)
    };
    Refusal::new(
        Reason::RequestDeniedByRule,
        format!(
            "git service: {repository} is not in [git] repositories: the sandbox fetches it read-only and never pushes there"
        ),
        form,
    )
}

/// The refusal of a push whose commands could not be read.
pub(crate) fn malformed(why: &str) -> Refusal {
    Refusal::new(
        Reason::GitPushMalformed,
        why,
        Form::Result(Service::ReceivePack),
    )
}

/// Reads the command section at the start of `body` (within `idle` for the whole
/// section): the bytes read (the upstream gets them first) and the commands.
pub(crate) async fn read_commands<B>(
    body: &mut B,
    idle: Duration,
) -> Result<(Bytes, Commands), &'static str>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut buf = BytesMut::new();
    let read = async {
        loop {
            let frame = match body.frame().await {
                None => {
                    return match receive_pack::read(&buf) {
                        Read::Done(c) => Ok(c),
                        Read::More => Err("the body ended before the commands' flush"),
                        Read::Bad(why) => Err(why),
                    };
                }
                Some(Err(_)) => return Err("the body broke off"),
                Some(Ok(f)) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            match receive_pack::read(&buf) {
                Read::More => {}
                Read::Done(c) => return Ok(c),
                Read::Bad(why) => return Err(why),
            }
        }
    };
    let commands = tokio::time::timeout(idle, read)
        .await
        .map_err(|_| "the commands did not arrive in time")??;
    Ok((buf.freeze(), commands))
}

/// Reads and drops what is left of `body` (at most `cap` bytes, within `idle`), so that
/// git, still sending, reads the refusal instead of a reset connection.
pub(crate) async fn drain<B>(mut body: B, cap: usize, idle: Duration)
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut seen = 0usize;
    let _ = tokio::time::timeout(idle, async {
        while seen < cap {
            match body.frame().await {
                Some(Ok(f)) => seen += f.data_ref().map_or(0, Bytes::len),
                _ => return,
            }
        }
    })
    .await;
}

/// What the `[git]` rules say of one update, whatever signed it (`Err`: why not).
fn allowed(
    u: &RefUpdate,
    rules: &GitRules,
    allow_tags: bool,
    start: Option<&str>,
) -> Result<(), String> {
    if u.is_deletion() {
        return Err(format!(
            "deleting {} (the sandbox never deletes remote refs)",
            u.name
        ));
    }
    if let Some(tag) = u.name.strip_prefix("refs/tags/") {
        return match (allow_tags, u.is_creation()) {
            (true, true) => Ok(()),
            (true, false) => Err(format!("moving tag {tag} (only new tags are pushed)")),
            (false, _) => Err(format!(
                "pushing tag {tag} (tags are not pushed from the sandbox: git.allow_tags)"
            )),
        };
    }
    let Some(branch) = u.name.strip_prefix("refs/heads/") else {
        return Err(format!(
            "{} is not a branch (only refs/heads/ is pushed)",
            u.name
        ));
    };
    if let Some(p) = rules.protected_branches.first_match(branch) {
        return Err(format!(
            "{branch} is protected (pattern {p:?} in git.protected_branches)"
        ));
    }
    let own = rules.push_branches.matches(branch)
        || start.is_some_and(|s| s.eq_ignore_ascii_case(branch));
    if !own {
        return Err(format!(
            "{branch} is not one of this sandbox's branches (git.push_branches: {})",
            rules.push_branches.written().join(", ")
        ));
    }
    Ok(())
}

/// Why `u` is not one of `ticket`'s signed updates.
fn unsigned(u: &RefUpdate, ticket: &Ticket) -> String {
    match ticket.updates.iter().find(|s| s.name == u.name) {
        Some(s) => format!(
            "the git API judged {} from {} to {}, not from {} to {} (if the remote branch moved since the last fetch: git fetch, then push again)",
            u.name,
            short(&s.old),
            short(&s.new),
            short(&u.old),
            short(&u.new)
        ),
        None => format!("the git API did not judge an update of {}", u.name),
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Every command of a push judged (see the module docs); `Err` refuses the whole push,
/// naming every command's fate.
pub(crate) fn judge(
    commands: &Commands,
    ticket: &Ticket,
    rules: &GitRules,
    allow_tags: bool,
    start: Option<&str>,
) -> Result<(), Refusal> {
    let mut refused = Vec::new();
    let mut unsigned_ones = Vec::new();
    for u in &commands.updates {
        match allowed(u, rules, allow_tags, start) {
            Err(why) => refused.push((u, why)),
            Ok(()) if !ticket.signs(u) => unsigned_ones.push((u, unsigned(u, ticket))),
            Ok(()) => {}
        }
    }
    let (reason, faults) = if !refused.is_empty() {
        (Reason::GitRefUpdateRefused, refused)
    } else if !unsigned_ones.is_empty() {
        (Reason::GitRefUpdateUnsigned, unsigned_ones)
    } else {
        return Ok(());
    };
    let refs = commands
        .updates
        .iter()
        .map(|u| {
            let why = match faults.iter().find(|(f, _)| std::ptr::eq(*f, u)) {
                Some((_, why)) => format!("{reason}: {why}"),
                None => "not sent: another update of this push was refused".to_owned(),
            };
            (u.name.clone(), why)
        })
        .collect();
    let mut rule: String = faults
        .iter()
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    if rule.len() > 1024 {
        let cut = (0..=1024)
            .rev()
            .find(|i| rule.is_char_boundary(*i))
            .unwrap_or(0);
        rule.truncate(cut);
    }
    Err(Refusal::new(
        reason,
        rule,
        Form::Report(commands.caps, refs),
    ))
}

/// [`judge`] under `policy`'s `[git]` rules (a `[git]` glob that no longer compiles
/// refuses every push).
pub(crate) fn judge_policy(
    commands: &Commands,
    ticket: &Ticket,
    policy: &airlock_policy::Policy,
    start: Option<&str>,
) -> Result<(), Refusal> {
    match policy.git_rules() {
        Ok(rules) => judge(commands, ticket, &rules, policy.git.allow_tags, start),
        Err(e) => Err(Refusal::new(
            Reason::GitRefUpdateRefused,
            format!("the [git] rules cannot be used: {e}"),
            Form::Result(Service::ReceivePack),
        )),
    }
}

/// Takes a push ticket's updates for its repository (once; `git-ticket-replayed` after).
pub(crate) fn take(
    state: &ServiceState,
    admitted: &Admitted,
    caps: Caps,
    commands: &Commands,
    now: SystemTime,
) -> Result<(), Refusal> {
    if state
        .spent
        .take(&admitted.ticket, &admitted.repository, millis(now))
    {
        return Ok(());
    }
    let refs = commands
        .updates
        .iter()
        .map(|u| {
            (
                u.name.clone(),
                "git-ticket-replayed: this ticket's updates were already taken".to_owned(),
            )
        })
        .collect();
    Err(Refusal::new(
        Reason::GitTicketReplayed,
        "the ticket's updates were already taken",
        Form::Report(caps, refs),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_ticket::ServiceKey;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const KEY: ServiceKey = ServiceKey::from_bytes([3; 32]);

    fn rules(push: &[&str], protected: &[&str]) -> GitRules {
        let mut p = airlock_policy::GitPolicy::defaults_for("t");
        p.push_branches = push.iter().map(|s| (*s).to_owned()).collect();
        p.protected_branches = protected.iter().map(|s| (*s).to_owned()).collect();
        p.compile().unwrap()
    }

    fn u(name: &str, old: Option<&str>, new: &str) -> RefUpdate {
        RefUpdate::new(name, old, new).unwrap()
    }

    #[test]
    fn the_git_rules_hold_whatever_signed_the_update() {
        let r = rules(&["sandbox/t/*"], &["main", "release/*"]);
        let ok = |x: &RefUpdate, tags| allowed(x, &r, tags, Some("feature")).is_ok();
        assert!(ok(&u("refs/heads/sandbox/t/x", Some(A), B), false));
        assert!(ok(&u("refs/heads/feature", None, B), false));
        assert!(ok(&u("refs/heads/FEATURE", None, B), false));
        assert!(!ok(
            &u("refs/heads/sandbox/t/x", Some(A), &"0".repeat(40)),
            false
        ));
        assert!(!ok(&u("refs/heads/main", Some(A), B), false));
        assert!(!ok(&u("refs/heads/release/2", None, B), false));
        assert!(!ok(&u("refs/heads/sandbox/other/x", None, B), false));
        assert!(!ok(&u("refs/tags/v1", None, B), false));
        assert!(ok(&u("refs/tags/v1", None, B), true));
        assert!(!ok(&u("refs/tags/v1", Some(A), B), true));
        assert!(!ok(&u("refs/notes/commits", None, B), false));
        // A protected start branch stays protected.
        assert!(allowed(&u("refs/heads/main", Some(A), B), &r, false, Some("main")).is_err());
    }

    #[test]
    fn a_push_passes_only_with_every_update_signed_and_allowed() {
        let r = rules(&["sandbox/t/*"], &["main"]);
        let t = Ticket::new(
            Op::Push,
            vec!["h/o/r".into()],
            vec![u("refs/heads/sandbox/t/x", Some(A), B)],
            SystemTime::now(),
        )
        .unwrap();
        let cmds = |updates: Vec<RefUpdate>| Commands {
            updates,
            caps: Caps {
                report_status: true,
                ..Caps::default()
            },
        };
        assert!(judge(&cmds(vec![]), &t, &r, false, None).is_ok());
        assert!(
            judge(
                &cmds(vec![u("refs/heads/sandbox/t/x", Some(A), B)]),
                &t,
                &r,
                false,
                None
            )
            .is_ok()
        );
        let e = judge(
            &cmds(vec![
                u("refs/heads/sandbox/t/x", Some(A), B),
                u("refs/heads/sandbox/t/x", Some(B), A),
            ]),
            &t,
            &r,
            false,
            None,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::GitRefUpdateUnsigned);
        assert!(e.rule.contains("git fetch"), "{}", e.rule);
        let e = judge(
            &cmds(vec![
                u("refs/heads/sandbox/t/x", Some(A), B),
                u("refs/heads/main", Some(A), B),
            ]),
            &t,
            &r,
            false,
            None,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::GitRefUpdateRefused);
        let Form::Report(_, refs) = &e.form else {
            panic!("{e:?}")
        };
        assert_eq!(refs.len(), 2);
        assert!(refs[0].1.starts_with("not sent"), "{refs:?}");
        assert!(refs[1].1.contains("protected"), "{refs:?}");
    }

    #[test]
    fn tickets_are_checked_for_key_time_operation_and_repository() {
        let state = ServiceState::new();
        let pass = ServicePass {
            key: KEY,
            start_branch: None,
        };
        let now = SystemTime::now();
        let header = |t: &Ticket| {
            let mut h = HeaderMap::new();
            h.insert(airlock_ticket::HEADER, t.seal(&KEY).parse().unwrap());
            h
        };
        let fetch = Ticket::new(Op::Fetch, vec!["h/o/r".into()], vec![], now).unwrap();
        let req = (Service::UploadPack, "h/o/r");
        assert!(admit(Some(&pass), &state, &header(&fetch), req, false, now).is_ok());
        let reason = |r: Result<Admitted, Refusal>| r.map(|_| ()).unwrap_err().reason;
        assert_eq!(
            reason(admit(
                Some(&pass),
                &state,
                &HeaderMap::new(),
                req,
                false,
                now
            )),
            Reason::GitTicketMissing
        );
        assert_eq!(
            reason(admit(None, &state, &header(&fetch), req, false, now)),
            Reason::GitTicketInvalid
        );
        assert_eq!(
            reason(admit(
                Some(&pass),
                &state,
                &header(&fetch),
                (Service::UploadPack, "h/o/other"),
                false,
                now
            )),
            Reason::GitTicketInvalid
        );
        assert_eq!(
            reason(admit(
                Some(&pass),
                &state,
                &header(&fetch),
                (Service::ReceivePack, "h/o/r"),
                true,
                now
            )),
            Reason::GitTicketInvalid
        );
        assert_eq!(
            reason(admit(
                Some(&pass),
                &state,
                &header(&fetch),
                req,
                false,
                now + airlock_ticket::LIFETIME
            )),
            Reason::GitTicketExpired
        );
        let old = Ticket::new(
            Op::Fetch,
            vec!["h/o/r".into()],
            vec![],
            now - Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(
            reason(admit(Some(&pass), &state, &header(&old), req, false, now)),
            Reason::GitTicketExpired
        );
    }

    #[test]
    fn a_push_ticket_is_taken_once_per_repository() {
        let state = ServiceState::new();
        let now = SystemTime::now();
        let t = Ticket::new(
            Op::Push,
            vec!["h/o/r".into(), "h/o/s".into()],
            vec![u("refs/heads/x", None, B)],
            now,
        )
        .unwrap();
        let admitted = |repo: &str| Admitted {
            ticket: t.clone(),
            repository: repo.into(),
            service: Service::ReceivePack,
        };
        let c = Commands::default();
        assert!(take(&state, &admitted("h/o/r"), Caps::default(), &c, now).is_ok());
        assert!(take(&state, &admitted("h/o/s"), Caps::default(), &c, now).is_ok());
        let e = take(&state, &admitted("h/o/r"), Caps::default(), &c, now).unwrap_err();
        assert_eq!(e.reason, Reason::GitTicketReplayed);
    }
}
