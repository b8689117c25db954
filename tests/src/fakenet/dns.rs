//! fakenet's DNS servers (UDP and TCP) and UDP sinks.
//!
//! [`answer`] is the pure part: bytes in, the log facts and the response bytes out.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, TXT};
use hickory_proto::rr::{RData, Record, RecordType};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::TXT_ANSWER;
use super::log::Log;

/// TTL of every answer.
const TTL: u32 = 60;

/// What one DNS message was, and what to send back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `(qname without trailing dot, as received; qtype)` of each question.
    pub questions: Vec<(String, String)>,
    /// Response code sent (`None` when nothing is sent).
    pub rcode: Option<String>,
    /// Why the message got no answer (unparsable, not a query).
    pub error: Option<String>,
    /// The response, if any.
    pub response: Option<Vec<u8>>,
}

/// Looks `name` (lowercase, no trailing dot) up in the zone: exact, then `*.<parent>`.
fn lookup<'z>(zone: &'z BTreeMap<String, Vec<IpAddr>>, name: &str) -> Option<&'z Vec<IpAddr>> {
    if let Some(v) = zone.get(name) {
        return Some(v);
    }
    let mut rest = name;
    while let Some((_, parent)) = rest.split_once('.') {
        if let Some(v) = zone.get(&format!("*.{parent}")) {
            return Some(v);
        }
        rest = parent;
    }
    None
}

/// Answers one DNS message from `zone`.
#[must_use]
pub fn answer(zone: &BTreeMap<String, Vec<IpAddr>>, bytes: &[u8]) -> Answer {
    let msg = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(e) => {
            return Answer {
                questions: vec![],
                rcode: None,
                error: Some(format!("unparsable: {e}")),
                response: None,
            };
        }
    };
    let questions: Vec<(String, String)> = msg
        .queries
        .iter()
        .map(|q| {
            let name = q.name().to_ascii();
            (
                name.strip_suffix('.').unwrap_or(&name).to_owned(),
                q.query_type().to_string(),
            )
        })
        .collect();
    if msg.message_type != MessageType::Query {
        return Answer {
            questions,
            rcode: None,
            error: Some("not a query".into()),
            response: None,
        };
    }
    let mut resp = Message::response(msg.id, msg.op_code);
    resp.metadata.recursion_desired = msg.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.metadata.authoritative = true;
    if msg.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        resp.set_edns(edns);
    }
    let mut rcode = ResponseCode::NoError;
    for q in &msg.queries {
        resp.add_query(q.clone());
        let name = q.name().to_ascii().to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        let known = lookup(zone, name);
        match q.query_type() {
            RecordType::TXT => {
                resp.add_answer(Record::from_rdata(
                    q.name().clone(),
                    TTL,
                    RData::TXT(TXT::new(vec![TXT_ANSWER.to_owned()])),
                ));
            }
            _ if known.is_none() => rcode = ResponseCode::NXDomain,
            RecordType::A => {
                for ip in known.into_iter().flatten() {
                    if let IpAddr::V4(v4) = ip {
                        resp.add_answer(Record::from_rdata(
                            q.name().clone(),
                            TTL,
                            RData::A(A(*v4)),
                        ));
                    }
                }
            }
            RecordType::AAAA => {
                for ip in known.into_iter().flatten() {
                    if let IpAddr::V6(v6) = ip {
                        resp.add_answer(Record::from_rdata(
                            q.name().clone(),
                            TTL,
                            RData::AAAA(AAAA(*v6)),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    resp.metadata.response_code = rcode;
    match resp.to_vec() {
        Ok(bytes) => Answer {
            questions,
            rcode: Some(rcode.to_string()),
            error: None,
            response: Some(bytes),
        },
        Err(e) => Answer {
            questions,
            rcode: None,
            error: Some(format!("encoding the response: {e}")),
            response: None,
        },
    }
}

fn log_answer(log: &Log, a: &Answer, from: SocketAddr, server: SocketAddr, transport: &str) {
    let base = |qname: Value, qtype: Value| {
        json!({"kind": "dns", "qname": qname, "qtype": qtype, "from": from.to_string(),
               "server": server.to_string(), "transport": transport, "rcode": a.rcode,
               "error": a.error})
    };
    if a.questions.is_empty() {
        log.write(base(Value::Null, Value::Null));
    }
    for (qname, qtype) in &a.questions {
        log.write(base(json!(qname), json!(qtype)));
    }
}

/// Serves DNS over UDP forever.
pub async fn serve_udp(
    sock: UdpSocket,
    zone: Arc<BTreeMap<String, Vec<IpAddr>>>,
    log: Arc<Log>,
) -> anyhow::Result<()> {
    let server = sock.local_addr()?;
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("fakenet: DNS recv on {server} failed: {e}");
                continue;
            }
        };
        let a = answer(&zone, &buf[..n]);
        log_answer(&log, &a, from, server, "udp");
        if let Some(resp) = a.response
            && let Err(e) = sock.send_to(&resp, from).await
        {
            eprintln!("fakenet: DNS send to {from} failed: {e}");
        }
    }
}

/// Serves DNS over TCP forever (length-prefixed messages, several per connection).
pub async fn serve_tcp(
    listener: TcpListener,
    zone: Arc<BTreeMap<String, Vec<IpAddr>>>,
    log: Arc<Log>,
) -> anyhow::Result<()> {
    let server = listener.local_addr()?;
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("fakenet: DNS accept on {server} failed: {e}");
                continue;
            }
        };
        log.write(
            json!({"kind": "conn", "server": server.to_string(), "from": from.to_string(),
                         "tls": false}),
        );
        let (zone, log) = (zone.clone(), log.clone());
        tokio::spawn(async move {
            if let Err(e) = tcp_conn(stream, from, server, &zone, &log).await {
                eprintln!("fakenet: DNS TCP connection from {from}: {e}");
            }
        });
    }
}

async fn tcp_conn(
    mut stream: TcpStream,
    from: SocketAddr,
    server: SocketAddr,
    zone: &BTreeMap<String, Vec<IpAddr>>,
    log: &Log,
) -> std::io::Result<()> {
    loop {
        let len = match stream.read_u16().await {
            Ok(n) => usize::from(n),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut msg = vec![0u8; len];
        stream.read_exact(&mut msg).await?;
        let a = answer(zone, &msg);
        log_answer(log, &a, from, server, "tcp");
        if let Some(resp) = a.response {
            let len = u16::try_from(resp.len()).unwrap_or(u16::MAX);
            let mut out = Vec::with_capacity(resp.len() + 2);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&resp);
            stream.write_all(&out).await?;
        }
    }
}

/// Logs and echoes every datagram (a QUIC or other UDP attempt is then visible upstream).
pub async fn serve_udp_sink(sock: UdpSocket, log: Arc<Log>) -> anyhow::Result<()> {
    let server = sock.local_addr()?;
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("fakenet: UDP recv on {server} failed: {e}");
                continue;
            }
        };
        log.write(
            json!({"kind": "udp", "server": server.to_string(), "from": from.to_string(),
                         "len": n}),
        );
        let _ = sock.send_to(&buf[..n], from).await;
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{OpCode, Query};
    use hickory_proto::rr::Name;

    use super::*;
    use crate::topology::zone;

    fn query(name: &str, t: RecordType) -> Vec<u8> {
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
        m.to_vec().unwrap()
    }

    fn parse(a: &Answer) -> Message {
        Message::from_vec(a.response.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn a_and_aaaa_come_from_the_zone() {
        let z = zone();
        let a = answer(&z, &query("Allowed.Test.", RecordType::A));
        assert_eq!(
            a.questions,
            vec![("Allowed.Test".to_owned(), "A".to_owned())]
        );
        let m = parse(&a);
        assert_eq!(m.id, 7);
        assert_eq!(m.response_code, ResponseCode::NoError);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(&m.answers[0].data, &RData::A(A::new(203, 0, 113, 10)));
        let m = parse(&answer(&z, &query("allowed.test.", RecordType::AAAA)));
        assert_eq!(m.answers.len(), 1);
        let m = parse(&answer(&z, &query("v6.test.", RecordType::A)));
        assert_eq!(
            (m.response_code, m.answers.len()),
            (ResponseCode::NoError, 0)
        );
    }

    #[test]
    fn unknown_names_are_nxdomain_but_txt_always_answers() {
        let z = zone();
        let m = parse(&answer(&z, &query("exfil.blocked.test.", RecordType::A)));
        assert_eq!(m.response_code, ResponseCode::NXDomain);
        let m = parse(&answer(
            &z,
            &query("c2VjcmV0.tunnel.example.", RecordType::TXT),
        ));
        assert_eq!(m.response_code, ResponseCode::NoError);
        assert_eq!(
            &m.answers[0].data,
            &RData::TXT(TXT::new(vec![TXT_ANSWER.to_owned()]))
        );
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let mut z = zone();
        z.insert("*.wild.test".into(), vec![IpAddr::from([203, 0, 113, 12])]);
        assert_eq!(
            parse(&answer(&z, &query("a.b.wild.test.", RecordType::A)))
                .answers
                .len(),
            1
        );
        let m = parse(&answer(&z, &query("wild.test.", RecordType::A)));
        assert_eq!(m.response_code, ResponseCode::NXDomain);
    }

    #[test]
    fn garbage_and_responses_get_no_answer_but_are_reported() {
        let z = zone();
        let a = answer(&z, b"\x01\x02garbage");
        assert!(a.response.is_none() && a.error.is_some());
        let resp = parse(&answer(&z, &query("allowed.test.", RecordType::A)));
        let a = answer(&z, &resp.to_vec().unwrap());
        assert_eq!(a.error.as_deref(), Some("not a query"));
        assert_eq!(a.questions.len(), 1);
    }
}
