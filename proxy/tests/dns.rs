//! End-to-end attacks on the DNS filter (UDP and TCP).

// Test helpers outside `#[test]` fns are test code too (clippy.toml only sees `#[test]`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::str::FromStr;
use std::time::Duration;

use crate::common::*;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

pub(crate) fn query(name: &str, ty: RecordType) -> Vec<u8> {
    let mut m = Message::new(77, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_str(name).unwrap(), ty));
    m.set_edns(Edns::new());
    m.to_vec().unwrap()
}

pub(crate) async fn udp(h: &Harness, bytes: &[u8]) -> Option<Message> {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(bytes, h.dns).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_millis(500), s.recv(&mut buf))
        .await
        .ok()?
        .unwrap();
    Some(Message::from_vec(&buf[..n]).unwrap())
}

fn ede(m: &Message) -> Option<(u16, String)> {
    let opt = m.edns.as_ref()?.options();
    match opt.get(EdnsCode::from(15u16))? {
        EdnsOption::Unknown(15, d) => Some((
            u16::from_be_bytes([d[0], d[1]]),
            String::from_utf8(d[2..].to_vec()).unwrap(),
        )),
        _ => None,
    }
}

#[tokio::test]
async fn allowed_names_are_answered_with_our_own_resolution() {
    let mut h = Harness::start(
        "enforce",
        &[("allowed.test", &[ALLOWED_IP, "2001:db8::10"])],
        &[],
    )
    .await;
    let r = udp(&h, &query("Allowed.Test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(r.id, 77);
    assert_eq!(r.response_code, ResponseCode::NoError);
    let ips: Vec<_> = r.answers.iter().map(|a| a.data.clone()).collect();
    assert_eq!(ips.len(), 1);
    assert!(matches!(&ips[0], RData::A(a) if a.0.to_string() == ALLOWED_IP));
    let r = udp(&h, &query("allowed.test.", RecordType::AAAA))
        .await
        .unwrap();
    assert!(matches!(&r.answers[0].data, RData::AAAA(a) if a.0.to_string() == "2001:db8::10"));
    let r = udp(&h, &query("allowed.test.", RecordType::HTTPS))
        .await
        .unwrap();
    assert_eq!(r.response_code, ResponseCode::NoError);
    assert!(r.answers.is_empty());
    let lines = h.finish().await;
    assert_eq!(lines.len(), 3);
    assert!(
        lines
            .iter()
            .all(|l| l["kind"] == "dns" && l["decision"] == "allow")
    );
    assert_eq!(lines[0]["method"], "A");
    assert_eq!(lines[0]["host"], "allowed.test");
}

#[tokio::test]
async fn denied_names_never_leave_and_say_so_with_an_extended_error() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let tunnel = "aGVsbG8gd29ybGQgdGhpcyBpcyBleGZpbHRyYXRlZCBkYXRhIGluIGEgbGFiZWw.evil.test.";
    // A denied name does not exist for the agent: NXDOMAIN at once (a resolver neither
    // retries nor waits), with the reason as an Extended DNS Error.
    let r = udp(&h, &query(tunnel, RecordType::TXT)).await.unwrap();
    assert_eq!(r.response_code, ResponseCode::NXDomain);
    assert_eq!(ede(&r), Some((15, "airlock: blocked-by-policy".into())));
    let r = udp(&h, &query("evil.test.", RecordType::A)).await.unwrap();
    assert_eq!(r.response_code, ResponseCode::NXDomain);
    assert_eq!(ede(&r), Some((15, "airlock: blocked-by-policy".into())));
    // Tunnel types are refused even under an allowed name: REFUSED, so no cache takes the
    // allowed name's addresses for non-existent.
    let r = udp(&h, &query("allowed.test.", RecordType::TXT))
        .await
        .unwrap();
    assert_eq!(r.response_code, ResponseCode::Refused);
    assert_eq!(ede(&r), Some((18, "airlock: dns-query-type".into())));
    assert!(
        h.lookups.lock().unwrap().is_empty(),
        "no denied query was resolved upstream"
    );
    let lines = h.finish().await;
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l["decision"] == "deny"));
    assert_eq!(lines[2]["reason"], "dns-query-type");
}

#[tokio::test]
async fn names_resolving_to_private_or_metadata_addresses_are_refused() {
    let mut h = Harness::start(
        "enforce",
        &[("rebind.test", &[ALLOWED_IP, "169.254.169.254"])],
        &[],
    )
    .await;
    let r = udp(&h, &query("rebind.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(r.response_code, ResponseCode::NXDomain);
    assert!(r.answers.is_empty());
    assert_eq!(
        ede(&r),
        Some((18, "airlock: blocked-metadata-address".into()))
    );
    h.finish().await;
}

#[tokio::test]
async fn tcp_queries_work_and_garbage_is_formerr_or_dropped() {
    let mut h = Harness::start("enforce", &[("allowed.test", &[ALLOWED_IP])], &[]).await;
    let mut s = TcpStream::connect(h.dns).await.unwrap();
    for _ in 0..2 {
        let q = query("allowed.test.", RecordType::A);
        let mut framed = u16::try_from(q.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        s.write_all(&framed).await.unwrap();
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.unwrap();
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut buf).await.unwrap();
        let r = Message::from_vec(&buf).unwrap();
        assert_eq!(r.answers.len(), 1);
    }
    drop(s);
    // Garbage with a readable header: FORMERR with the same id.
    let r = udp(
        &h,
        &[
            0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.id, 0x1234);
    assert_eq!(r.response_code, ResponseCode::FormErr);
    // Too short to answer: dropped.
    assert!(udp(&h, b"\x01\x02\x03").await.is_none());
    // A response sent to us is never answered (no reflection loops).
    let mut resp = Message::from_vec(&query("allowed.test.", RecordType::A)).unwrap();
    resp.metadata.message_type = MessageType::Response;
    assert!(udp(&h, &resp.to_vec().unwrap()).await.is_none());
    // Still serving.
    assert_eq!(
        udp(&h, &query("allowed.test.", RecordType::A))
            .await
            .unwrap()
            .answers
            .len(),
        1
    );
    let lines = h.finish().await;
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["reason"] == "malformed-request")
            .count(),
        3
    );
}

#[tokio::test]
async fn a_udp_flood_past_the_in_flight_cap_is_dropped_but_every_query_is_audited() {
    // hang.test never resolves, so each query holds an in-flight slot until shutdown.
    let mut h = Harness::start("enforce", &[], &[]).await;
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let total = 300;
    for _ in 0..total {
        s.send_to(&query("hang.test.", RecordType::A), h.dns)
            .await
            .unwrap();
    }
    // Let the proxy take every datagram off the socket before stopping it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = h.finish().await;
    let dns: Vec<_> = lines.iter().filter(|l| l["kind"] == "dns").collect();
    assert_eq!(dns.len(), total, "one audit line per query");
    let dropped = dns
        .iter()
        .filter(|l| l["event"] == "dropped-overload")
        .count();
    assert!(dropped >= total - 256, "dropped {dropped}");
    assert!(
        dns.iter()
            .filter(|l| l["event"] == "dropped-overload")
            .all(|l| l["reason"] == "too-many-connections" && l["decision"] == "deny")
    );
}

/// The agent spells data into the labels under a wildcard-allowed zone (`*.allowed.test`):
/// an encoded label is refused before any lookup, and once the zone has carried its budget
/// of distinct names, new names are refused too; the zone's ordinary names, exact names
/// and names already answered keep working.
#[tokio::test]
async fn data_spelled_into_names_under_a_wildcard_never_leaves() {
    let mut h = Harness::start(
        "enforce",
        &[
            ("allowed.test", &[ALLOWED_IP]),
            ("cdn-eu-1.allowed.test", &[ALLOWED_IP]),
        ],
        &[],
    )
    .await;
    for payload in [
        "aGVsbG8gd29ybGQgdGhpcyBpcyBleGZpbHRyYXRlZCBkYXRhIGluIGEgbGFiZWw",
        "nbswy3dpeb3w64tmmqqhi2ljomqgs4za",
        "68656c6c6f20776f726c64207468697320697320.6578666c",
    ] {
        let r = udp(
            &h,
            &query(&format!("{payload}.allowed.test."), RecordType::A),
        )
        .await
        .unwrap();
        assert_eq!(r.response_code, ResponseCode::NXDomain, "{payload}");
        assert_eq!(ede(&r), Some((18, "airlock: dns-exfil-suspect".into())));
    }
    assert!(
        h.lookups.lock().unwrap().is_empty(),
        "no encoded name reached the resolver"
    );
    let r = udp(&h, &query("cdn-eu-1.allowed.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(r.response_code, ResponseCode::NoError);
    // Distinct ordinary-looking names until the zone's budget is spent.
    let name = |n: usize| format!("name-{n:05}-{}.allowed.test.", "z".repeat(50));
    let mut n = 0;
    let refused = loop {
        let r = udp(&h, &query(&name(n), RecordType::A)).await.unwrap();
        if r.response_code == ResponseCode::NXDomain {
            break r;
        }
        n += 1;
        assert!(n < 1000, "the budget never ran out");
    };
    assert!(n > 200, "the budget held {n} names");
    assert_eq!(
        ede(&refused),
        Some((18, "airlock: dns-exfil-suspect".into()))
    );
    // What was answered still is; the exact name is never affected.
    let again = udp(&h, &query("cdn-eu-1.allowed.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(again.response_code, ResponseCode::NoError);
    let exact = udp(&h, &query("allowed.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(exact.response_code, ResponseCode::NoError);
    let lines = h.finish().await;
    let suspect = lines
        .iter()
        .filter(|l| l["reason"] == "dns-exfil-suspect" && l["decision"] == "deny")
        .count();
    assert_eq!(
        suspect, 4,
        "three encoded names and the one past the budget"
    );
}

/// Report mode (for writing a policy) lets an encoded name through and says so: the answer
/// is the lookup's, the audit line carries `dns-exfil-suspect` as what enforce would do.
#[tokio::test]
async fn report_mode_logs_a_suspect_name_it_lets_through() {
    let name = "nbswy3dpeb3w64tmmqqhi2ljomqgs4za.allowed.test";
    let mut h = Harness::start("report", &[(name, &[ALLOWED_IP])], &[]).await;
    let payload = format!("{name}.");
    let r = udp(&h, &query(&payload, RecordType::A)).await.unwrap();
    assert_eq!(
        r.response_code,
        ResponseCode::NoError,
        "not refused in report mode"
    );
    assert_eq!(
        h.lookups.lock().unwrap().len(),
        1,
        "looked up, as enforce would not"
    );
    let lines = h.finish().await;
    let suspect: Vec<_> = lines
        .iter()
        .filter(|l| l["reason"] == "dns-exfil-suspect")
        .collect();
    assert!(!suspect.is_empty(), "{lines:?}");
    assert!(
        suspect.iter().all(|l| l["decision"] == "report"),
        "{lines:?}"
    );
}

/// The same suspect name under report mode, when its lookup fails (most exfiltration
/// names do not exist): the line still says report/dns-exfil-suspect, the failure is its
/// event.
#[tokio::test]
async fn report_mode_keeps_the_signal_when_the_suspect_name_does_not_resolve() {
    let name = "nbswy3dpeb3w64tmmqqhi2ljomqgs4za.allowed.test";
    let mut h = Harness::start("report", &[], &[]).await;
    let r = udp(&h, &query(&format!("{name}."), RecordType::A))
        .await
        .unwrap();
    assert_eq!(r.response_code, ResponseCode::ServFail);
    let lines = h.finish().await;
    let l: Vec<_> = lines.iter().filter(|l| l["host"] == name).collect();
    assert!(!l.is_empty(), "{lines:?}");
    assert!(
        l.iter()
            .all(|l| l["decision"] == "report" && l["reason"] == "dns-exfil-suspect"),
        "{lines:?}"
    );
    assert!(
        l.iter().any(|l| l["event"] == "resolve-failed"),
        "{lines:?}"
    );
}

/// Issue 13 item 4: a flood of UDP queries past the in-flight cap. Every dropped query's
/// line names the uid that asked (here the test's own), and a flood past the log's folding
/// burst is counted in a `suppressed` line instead of costing a line (and a uid lookup)
/// each: every drop is accounted for, one way or the other.
#[tokio::test]
async fn a_dropped_query_names_the_uid_that_asked() {
    let mut h = Harness::start("enforce", &[], &[]).await;
    let me = u64::from(nix::unistd::geteuid().as_raw());
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let total = 600;
    for i in 0..total {
        s.send_to(&query("hang.test.", RecordType::A), h.dns)
            .await
            .unwrap();
        if i % 32 == 31 {
            // Paced so that the kernel's socket buffer never overflows: every datagram
            // reaches the proxy, which must account for each.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = h.finish().await;
    let dropped: Vec<_> = lines
        .iter()
        .filter(|l| l["kind"] == "dns" && l["event"] == "dropped-overload")
        .collect();
    assert!(!dropped.is_empty(), "{lines:#?}");
    for l in &dropped {
        assert_eq!(l["uid"], me, "a dropped query without its uid: {l}");
    }
    let folded: u64 = lines
        .iter()
        .filter(|l| l["kind"] == "dns" && l["event"] == "suppressed")
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    let answered = lines
        .iter()
        .filter(|l| l["kind"] == "dns" && l["event"] != "dropped-overload")
        .filter(|l| l["event"] != "suppressed")
        .count();
    assert_eq!(
        answered as u64 + dropped.len() as u64 + folded,
        total,
        "every query accounted for"
    );
    assert!(folded > 0, "the flood went past the fold's burst");
}
