//! The DNS filter: all of the agent's port-53 traffic (UDP and TCP), redirected here.
//!
//! Allowed names are answered with addresses the proxy resolved itself (never forwarded
//! verbatim), after the same hard-deny check as connections. Query types:
//! - `A`, `AAAA`: answered (the only records a client needs to connect; CNAME chains are
//!   flattened: the answer carries addresses under the queried name, never a CNAME).
//! - `HTTPS`, `SVCB`: empty answer (NOERROR, no records). Browsers, curl and Node ask them
//!   before every connection; refusing would cost them retries, and their content (ALPN, ECH
//!   keys, alternative endpoints) would let a client bypass the address we checked.
//! - everything else (`TXT`, `NULL`, `ANY`, `MX`, `CNAME`, zone transfers, ...): REFUSED
//!   `dns-query-type`. These are the classic tunnel carriers and no proxied client needs them.
//!
//! Each question is decided by the destination's admission ([`crate::admission`], the one
//! decision every way in asks): the policy on the name on any port, then (for a name to be
//! resolved) the name itself: one that carries a value of
//! the workspace's secret files or a secret of a known format (`foreign-secret`, the line
//! naming the detector, the name's chosen labels masked), or below a wildcard zone looks
//! encoded or passes the zone's budget (`dns-exfil-suspect`), is refused and never looked
//! up.
//!
//! Denied names get NXDOMAIN (the name does not exist for the agent, so resolvers give up
//! at once instead of retrying) with an RFC 8914 Extended DNS Error (15 "Blocked" for
//! policy denials, 18 "Prohibited" for the rest) whose text is `airlock: <reason>`, when
//! the query carried EDNS (an OPT record may only be sent to clients that sent one). A
//! denied name is never looked up: the query does not leave the container. Garbage gets
//! FORMERR when its id can be read, is dropped otherwise; every query is audited.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_policy::host::Host;
use airlock_policy::reason::Reason;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record as DnsRecord, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::Shared;
use crate::admission::{self, Admission, Outcome};
use crate::audit::{Event, Kind, Record, Verdict};
use crate::decide::Target;
use crate::identity::Caller;
use crate::identity::Proto;
use crate::limits::Client;
use crate::names;
use crate::shutdown::{Phase, reached};

/// TTL of the records we synthesise: short, so a policy reload or a changed address is seen
/// soon, long enough to spare repeated lookups.
pub const ANSWER_TTL: u32 = 30;
/// RFC 8914 info codes.
pub const EDE_BLOCKED: u16 = 15;
/// RFC 8914 "Prohibited".
pub const EDE_PROHIBITED: u16 = 18;
/// UDP queries handled at once; past this, new ones are dropped (the client retries).
pub(crate) const MAX_UDP_INFLIGHT: usize = 256;
/// Largest DNS message we accept or send over TCP.
const MAX_TCP_MESSAGE: usize = 8192;
/// Our EDNS UDP payload size (the DNS-flag-day value).
const EDNS_PAYLOAD: u16 = 1232;

/// What to do with a well-formed query (pure: from the message and the policy only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Look up addresses of `target` and answer those of the family asked.
    Resolve { target: Target, v6: bool },
    /// Answer NOERROR with no records (HTTPS/SVCB of an allowed name).
    NoData,
    /// Refused with this reason: NXDOMAIN for a name the policy denies (a resolver gives up
    /// at once: "Name or service not known", never a retry, a timeout or SERVFAIL),
    /// REFUSED for a type no policy answers under any name; both carry an Extended DNS
    /// Error with the reason (RFC 8914).
    Refuse(Reason),
    /// FORMERR (several questions, a response, ...).
    FormErr,
    /// NOTIMP (an opcode other than QUERY).
    NotImp,
}

/// Decides a parsed query by its shape and the policy ([`admission::policy`], the name on
/// any port). Returns the plan and the admission its line carries; the name itself is
/// judged by `named` once the plan is to resolve it.
#[must_use]
pub fn plan(policy: &airlock_policy::Policy, msg: &Message) -> (Plan, Admission) {
    plan_with(policy, msg, &|_| false)
}

/// [`plan`] for a session whose standing approvals `approved` names: a name the policy
/// asks about resolves when the operator approved it for that session (on some port).
#[must_use]
pub fn plan_with(
    policy: &airlock_policy::Policy,
    msg: &Message,
    approved: &dyn Fn(&Host) -> bool,
) -> (Plan, Admission) {
    let refused = |plan: Plan, reason: Reason, rule: Option<String>| {
        let admission = Admission {
            outcome: Outcome::Deny(reason),
            rule,
            approval: None,
            redacted: None,
        };
        (plan, admission)
    };
    if msg.message_type != MessageType::Query || msg.queries.len() != 1 {
        return refused(Plan::FormErr, Reason::MalformedRequest, None);
    }
    if msg.op_code != OpCode::Query {
        return refused(Plan::NotImp, Reason::MalformedRequest, None);
    }
    let q = &msg.queries[0];
    let ascii = q.name().to_ascii();
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    let Ok(host) = Host::parse(name) else {
        return refused(Plan::Refuse(Reason::InvalidHost), Reason::InvalidHost, None);
    };
    // DNS has no port: the port here only fills the target.
    let target = Target { host, port: 443 };
    let mut admission = admission::policy(policy, &target, admission::Port::Any);
    if admission.outcome == Outcome::Ask && approved(&target.host) {
        admission.outcome = Outcome::Allow;
        admission.rule = Some("approved for this session".to_owned());
    }
    if let Some(reason) = admission.refused() {
        return (Plan::Refuse(reason), admission);
    }
    let plan = match q.query_type() {
        RecordType::A => Plan::Resolve { target, v6: false },
        RecordType::AAAA => Plan::Resolve { target, v6: true },
        RecordType::HTTPS | RecordType::SVCB => Plan::NoData,
        _ => {
            let reason = Reason::DnsQueryType;
            return refused(Plan::Refuse(reason), reason, admission.rule);
        }
    };
    (plan, admission)
}

/// The response code of a refusal: a denied name does not exist for the agent (NXDOMAIN);
/// a query type refused under every name is REFUSED (NXDOMAIN would deny the name's other
/// types to any cache that keeps negative answers, RFC 8020).
#[must_use]
pub const fn refusal_rcode(reason: Reason) -> ResponseCode {
    match reason {
        Reason::DnsQueryType => ResponseCode::Refused,
        _ => ResponseCode::NXDomain,
    }
}

/// The EDE info code for a refusal: "Blocked" for what an operator blocks by policy,
/// "Prohibited" for what no policy can open.
#[must_use]
pub const fn ede_code(reason: Reason) -> u16 {
    match reason {
        Reason::BlockedByPolicy | Reason::DeniedByRule => EDE_BLOCKED,
        _ => EDE_PROHIBITED,
    }
}

/// The response to `req` (which must have exactly one question for a non-FORMERR answer).
/// `max_len` bounds the wire size (UDP); a larger answer is sent truncated (TC, no records).
#[must_use]
pub fn respond(
    req: &Message,
    rcode: ResponseCode,
    addrs: &[IpAddr],
    refusal: Option<Reason>,
    max_len: usize,
) -> Vec<u8> {
    let mut resp = Message::response(req.id, req.op_code);
    resp.metadata.recursion_desired = req.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.metadata.response_code = rcode;
    if let Some(q) = req.queries.first().filter(|_| req.queries.len() == 1) {
        resp.add_query(q.clone());
        for ip in addrs {
            let rdata = match ip {
                IpAddr::V4(v4) => RData::A(A(*v4)),
                IpAddr::V6(v6) => RData::AAAA(AAAA(*v6)),
            };
            resp.add_answer(DnsRecord::from_rdata(q.name().clone(), ANSWER_TTL, rdata));
        }
    }
    if req.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        if let Some(reason) = refusal {
            let mut data = ede_code(reason).to_be_bytes().to_vec();
            data.extend_from_slice(format!("airlock: {}", reason.as_str()).as_bytes());
            edns.options_mut().insert(EdnsOption::Unknown(15, data));
        }
        resp.set_edns(edns);
    }
    let bytes = resp.to_vec().unwrap_or_default();
    if bytes.len() <= max_len {
        return bytes;
    }
    resp.answers.clear();
    resp.metadata.truncation = true;
    resp.to_vec().unwrap_or_default()
}

/// FORMERR for bytes that did not parse, when at least the 12-byte header is there (we
/// echo the id and opcode only). `None`: drop.
#[must_use]
pub fn formerr_raw(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < 12 || bytes[2] & 0x80 != 0 {
        return None; // too short, or itself a response: never answer responses (loops)
    }
    let mut out = vec![0u8; 12];
    out[0] = bytes[0];
    out[1] = bytes[1];
    out[2] = 0x80 | (bytes[2] & 0x78); // QR + the opcode
    out[3] = ResponseCode::FormErr.low();
    Some(out)
}

/// The admission's second step ([`Admission::named`]) on a name about to be resolved:
/// refused, or resolved (and reported).
fn named(
    shared: &Shared,
    rules: names::NameRules<'_>,
    planned: (Plan, Admission),
) -> (Plan, Admission) {
    let (plan, admission) = planned;
    let Plan::Resolve { target, .. } = &plan else {
        return (plan, admission);
    };
    let admission = admission.named(rules, &shared.dns_budget, target);
    match admission.refused() {
        Some(reason) => (Plan::Refuse(reason), admission),
        None => (plan, admission),
    }
}

/// Handles one DNS message; returns the answer to send, if any. Audits exactly once.
pub(crate) async fn handle(
    shared: &Shared,
    bytes: &[u8],
    client: SocketAddr,
    caller: Caller,
    max_len: usize,
) -> Option<Vec<u8>> {
    let mut rec = Record::new(&shared.who, SystemTime::now(), Kind::Dns, Some(client));
    caller.stamp(&mut rec);
    let started = tokio::time::Instant::now();
    let msg = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(_) => {
            rec.reason = Some(Reason::MalformedRequest);
            rec.bytes_up = bytes.len() as u64;
            let _ = shared.audit.commit(&rec);
            return formerr_raw(bytes);
        }
    };
    if msg.message_type == MessageType::Response {
        rec.reason = Some(Reason::MalformedRequest);
        let _ = shared.audit.commit(&rec);
        return None; // never answer a response
    }
    if let Some(q) = msg.queries.first() {
        rec.method = Some(q.query_type().to_string());
        let ascii = q.name().to_ascii();
        rec.host = Some(
            ascii
                .strip_suffix('.')
                .unwrap_or(&ascii)
                .chars()
                .take(300)
                .collect(),
        );
    }
    // One snapshot of the policy for the whole query.
    let rules = shared.rules.load();
    let who = crate::limits::Client::of(caller);
    let approved = |h: &Host| {
        let now = SystemTime::now();
        shared.approvals.approved_name(who, h.as_str(), now)
    };
    let planned = plan_with(&rules.policy, &msg, &approved);
    let (plan, admission) = named(shared, rules.name_rules(), planned);
    let resolved = matches!(plan, Plan::Resolve { .. });
    admission.stamp(&mut rec);
    let out = match plan {
        Plan::FormErr | Plan::NotImp => {
            let rcode = if plan == Plan::NotImp {
                ResponseCode::NotImp
            } else {
                ResponseCode::FormErr
            };
            respond(&msg, rcode, &[], None, max_len)
        }
        Plan::Refuse(reason) => respond(&msg, refusal_rcode(reason), &[], Some(reason), max_len),
        Plan::NoData => respond(&msg, ResponseCode::NoError, &[], None, max_len),
        Plan::Resolve { .. } if shared.audit.commit_open(&mut rec).is_err() => {
            // The name would leave for the resolver unaudited: refused.
            return Some(respond(
                &msg,
                ResponseCode::Refused,
                &[],
                Some(Reason::AuditUnavailable),
                max_len,
            ));
        }
        Plan::Resolve { target, v6 } => match shared.upstreams.resolve_checked(&target).await {
            Ok(addrs) => {
                let fam: Vec<IpAddr> = addrs.into_iter().filter(|ip| ip.is_ipv6() == v6).collect();
                rec.bytes_down = fam.len() as u64;
                respond(&msg, ResponseCode::NoError, &fam, None, max_len)
            }
            Err(Reason::ResolveFailed) => {
                // A report-mode signal (`dns-exfil-suspect`) keeps its place: the failed
                // lookup is the line's event, so the operator still sees the suspect name.
                if rec.reason.is_none() {
                    rec.reason = Some(Reason::ResolveFailed);
                } else {
                    rec.event = Some(Event::ResolveFailed);
                }
                respond(&msg, ResponseCode::ServFail, &[], None, max_len)
            }
            Err(reason) => {
                rec.decision = Verdict::Deny;
                rec.reason = Some(reason);
                respond(&msg, refusal_rcode(reason), &[], Some(reason), max_len)
            }
        },
    };
    rec.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if resolved {
        // Its `open` line is written: this one says how it ended.
        shared.audit.emit(rec).await;
    } else if shared.audit.commit(&rec).is_err() {
        return Some(respond(
            &msg,
            ResponseCode::Refused,
            &[],
            Some(Reason::AuditUnavailable),
            max_len,
        ));
    }
    Some(out)
}

/// Serves UDP until draining starts.
pub(crate) async fn serve_udp(sock: UdpSocket, shared: Arc<Shared>) {
    let local = sock.local_addr().ok();
    let sock = Arc::new(sock);
    let inflight = Arc::clone(&shared.dns_inflight);
    let mut phase = shared.shutdown.subscribe();
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, peer) = tokio::select! {
            r = sock.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("dns recv: {e}");
                    continue;
                }
            },
            () = reached(&mut phase, Phase::Draining) => break,
        };
        let Ok(permit) = Arc::clone(&inflight).try_acquire_owned() else {
            // Dropped unanswered (the client retries), but still a decision: audited.
            let mut rec = Record::new(&shared.who, SystemTime::now(), Kind::Dns, Some(peer));
            let reason = Reason::TooManyConnections;
            // The asking uid, looked up (a sock_diag dump, tens of µs on this loop) only
            // for a line that is written: past its first few, the log folds a flood of
            // drops into one counted line, so the lookups are bounded by the log's own
            // rate and a flood cannot make this loop pay per datagram.
            if shared.audit.admits_denial(Kind::Dns, reason) {
                shared.caller(Proto::Udp, peer, local).stamp(&mut rec);
            }
            rec.reason = Some(reason);
            rec.event = Some(Event::DroppedOverload);
            rec.bytes_up = n as u64;
            let _ = shared.audit.commit(&rec);
            continue;
        };
        let query = buf[..n].to_vec();
        let sock = Arc::clone(&sock);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _permit = permit;
            let max = udp_limit(&query);
            let caller = shared.caller(Proto::Udp, peer, local);
            if let Some(out) = handle(&shared, &query, peer, caller, max).await {
                let _ = sock.send_to(&out, peer).await;
            }
        });
    }
}

/// The client's advertised UDP payload size (512 without EDNS).
fn udp_limit(query: &[u8]) -> usize {
    Message::from_vec(query)
        .ok()
        .and_then(|m| {
            m.edns
                .as_ref()
                .map(|e| usize::from(e.max_payload().clamp(512, EDNS_PAYLOAD)))
        })
        .unwrap_or(512)
}

/// Serves DNS over TCP until draining starts.
pub(crate) async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>) {
    let mut phase = shared.shutdown.subscribe();
    loop {
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("dns accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = reached(&mut phase, Phase::Draining) => break,
        };
        // The agent's socket is connected to the address it asked (the redirect is invisible
        // to it): that, not our port, is the other half of its id.
        let dst = shared
            .original_dst
            .original_dst(&stream)
            .ok()
            .or_else(|| stream.local_addr().ok());
        let caller = shared.caller(Proto::Tcp, peer, dst);
        let slot = match shared.slots.try_take(Client::of(caller)) {
            Ok(slot) => slot,
            Err(reason) => {
                // Over the connection cap: close, audited.
                let mut rec = Record::new(&shared.who, SystemTime::now(), Kind::Dns, Some(peer));
                caller.stamp(&mut rec);
                rec.reason = Some(reason);
                let _ = shared.audit.commit(&rec);
                drop(stream);
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _slot = slot;
            tcp_conn(stream, peer, caller, &shared).await;
        });
    }
}

async fn tcp_conn(mut stream: TcpStream, peer: SocketAddr, caller: Caller, shared: &Shared) {
    let timeout = shared.limits.header_read_timeout;
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(timeout, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return, // closed, or idle
        }
        let n = usize::from(u16::from_be_bytes(len));
        if n == 0 || n > MAX_TCP_MESSAGE {
            let mut rec = Record::new(&shared.who, SystemTime::now(), Kind::Dns, Some(peer));
            caller.stamp(&mut rec);
            rec.reason = Some(Reason::MalformedRequest);
            let _ = shared.audit.commit(&rec);
            return;
        }
        let mut msg = vec![0u8; n];
        if !matches!(
            tokio::time::timeout(timeout, stream.read_exact(&mut msg)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let Some(out) = handle(shared, &msg, peer, caller, MAX_TCP_MESSAGE).await else {
            return;
        };
        let Ok(l) = u16::try_from(out.len()) else {
            return;
        };
        let mut framed = l.to_be_bytes().to_vec();
        framed.extend_from_slice(&out);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    fn policy(mode: &str) -> airlock_policy::Policy {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            format!("[sandbox]\nname = \"t\"\nmode = \"{mode}\"\n[network]\nallow = [\"allowed.test\", \"port.test:8443\"]\n"),
        )
        .unwrap();
        airlock_policy::Policy::load(&p).unwrap()
    }

    fn query(name: &str, ty: RecordType, edns: bool) -> Message {
        let mut m = Message::query();
        m.metadata.id = 0x1234;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_str(name).unwrap(), ty));
        if edns {
            m.set_edns(Edns::new());
        }
        m
    }

    #[test]
    fn plans() {
        let p = policy("enforce");
        let (pl, a) = plan(&p, &query("Allowed.Test.", RecordType::A, true));
        assert!(matches!(pl, Plan::Resolve { v6: false, .. }));
        assert_eq!(
            (a.outcome, a.rule.as_deref()),
            (Outcome::Allow, Some("allowed.test"))
        );
        assert!(matches!(
            plan(&p, &query("allowed.test.", RecordType::AAAA, true)).0,
            Plan::Resolve { v6: true, .. }
        ));
        assert_eq!(
            plan(&p, &query("allowed.test.", RecordType::HTTPS, true)).0,
            Plan::NoData
        );
        // A host allowed only on another port still has a name.
        assert!(matches!(
            plan(&p, &query("port.test.", RecordType::A, true)).0,
            Plan::Resolve { .. }
        ));
        for ty in [
            RecordType::TXT,
            RecordType::NULL,
            RecordType::ANY,
            RecordType::MX,
            RecordType::AXFR,
            RecordType::CNAME,
        ] {
            assert_eq!(
                plan(&p, &query("allowed.test.", ty, true)).0,
                Plan::Refuse(Reason::DnsQueryType),
                "{ty}"
            );
        }
        assert_eq!(
            plan(&p, &query("c2VjcmV0.evil.test.", RecordType::TXT, true)).0,
            Plan::Refuse(Reason::BlockedByPolicy)
        );
        let mut two = query("allowed.test.", RecordType::A, false);
        two.add_query(Query::query(
            Name::from_str("evil.test.").unwrap(),
            RecordType::A,
        ));
        assert_eq!(plan(&p, &two).0, Plan::FormErr);
        let mut upd = query("allowed.test.", RecordType::A, false);
        upd.metadata.op_code = OpCode::Update;
        assert_eq!(plan(&p, &upd).0, Plan::NotImp);
    }

    #[test]
    fn report_mode_answers_policy_denials_only() {
        let p = policy("report");
        let (pl, a) = plan(&p, &query("other.test.", RecordType::A, true));
        assert!(matches!(pl, Plan::Resolve { .. }));
        assert_eq!(a.outcome, Outcome::Report(Reason::BlockedByPolicy));
        assert_eq!(
            plan(&p, &query("other.test.", RecordType::TXT, true)).0,
            Plan::Refuse(Reason::DnsQueryType)
        );
    }

    #[test]
    fn refusal_carries_an_extended_error_our_self_test_can_recognise() {
        let q = query("evil.test.", RecordType::A, true);
        let bytes = respond(
            &q,
            ResponseCode::Refused,
            &[],
            Some(Reason::BlockedByPolicy),
            512,
        );
        let r = Message::from_vec(&bytes).unwrap();
        assert_eq!(r.id, 0x1234);
        assert_eq!(r.response_code, ResponseCode::Refused);
        assert_eq!(r.message_type, MessageType::Response);
        let opt = r.edns.as_ref().unwrap().options();
        let ede = opt
            .get(hickory_proto::rr::rdata::opt::EdnsCode::from(15u16))
            .unwrap();
        let EdnsOption::Unknown(15, data) = ede else {
            panic!("{ede:?}")
        };
        assert_eq!(u16::from_be_bytes([data[0], data[1]]), EDE_BLOCKED);
        assert_eq!(&data[2..], b"airlock: blocked-by-policy");
        // No EDNS in the query: no OPT in the answer.
        let q = query("evil.test.", RecordType::A, false);
        let r = Message::from_vec(&respond(
            &q,
            ResponseCode::Refused,
            &[],
            Some(Reason::BlockedByPolicy),
            512,
        ))
        .unwrap();
        assert!(r.edns.is_none());
    }

    #[test]
    fn answers_and_truncation() {
        let q = query("allowed.test.", RecordType::A, false);
        let addrs: Vec<IpAddr> = (1..=3).map(|i| IpAddr::from([203, 0, 113, i])).collect();
        let r = Message::from_vec(&respond(&q, ResponseCode::NoError, &addrs, None, 512)).unwrap();
        assert_eq!(r.answers.len(), 3);
        assert!(
            r.answers
                .iter()
                .all(|a| a.name.to_ascii() == "allowed.test." && a.ttl == ANSWER_TTL)
        );
        let many: Vec<IpAddr> = (0..60).map(|i| IpAddr::from([203, 0, 113, i])).collect();
        let r = Message::from_vec(&respond(&q, ResponseCode::NoError, &many, None, 512)).unwrap();
        assert!(r.truncation);
        assert!(r.answers.is_empty());
    }

    #[test]
    fn garbage_never_panics_and_responses_are_never_answered() {
        assert_eq!(formerr_raw(b"short"), None);
        let f = formerr_raw(&[0xab, 0xcd, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff]).unwrap();
        assert_eq!(&f[..2], &[0xab, 0xcd]);
        assert_eq!(f[3] & 0x0f, 1);
        assert_eq!(formerr_raw(&[0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        let p = policy("enforce");
        let mut x: u64 = 88_172_645_463_325_252;
        let seed = query("allowed.test.", RecordType::A, true)
            .to_vec()
            .unwrap();
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = if i % 2 == 0 {
                seed.clone()
            } else {
                x.to_le_bytes().repeat(usize::try_from(x % 9).unwrap())
            };
            if !b.is_empty() {
                let pos = usize::try_from(x % b.len() as u64).unwrap();
                b[pos] = u8::try_from(x >> 56).unwrap();
                b.truncate(usize::try_from((x >> 8) % (b.len() as u64 + 1)).unwrap());
            }
            let _ = formerr_raw(&b);
            let _ = udp_limit(&b);
            if let Ok(m) = Message::from_vec(&b) {
                let _ = plan(&p, &m);
                let _ = respond(
                    &m,
                    ResponseCode::Refused,
                    &[],
                    Some(Reason::BlockedByPolicy),
                    512,
                );
            }
        }
    }
}
