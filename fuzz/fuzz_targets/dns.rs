//! The DNS filter: hickory's message parser on agent bytes, then
//! `airlock_proxy::dns::plan` against a fixed policy and the response we would send.
//!
//! Invariants: never panics; a name is only ever resolved (or answered NOERROR) when the
//! policy allows it on some port (checked against an oracle written independently in
//! `airlock_fuzz::dns_answerable`), only for one question of type A/AAAA (resolve) or
//! HTTPS/SVCB (no data); every response we build parses back as a response with the
//! query's id and fits the size we were given; FORMERR is never sent to a response.
#![no_main]

use airlock_fuzz::{DNS, dns_answerable};
use airlock_proxy::admission::Outcome;
use airlock_proxy::dns::{Plan, formerr_raw, plan, respond};
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::RecordType;
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    if let Some(f) = formerr_raw(data) {
        assert_eq!(f.len(), 12);
        assert_eq!(&f[..2], &data[..2]);
        assert_eq!(data[2] & 0x80, 0, "FORMERR sent to a response");
    }
    let Ok(msg) = Message::from_vec(data) else {
        return;
    };
    let (p, admission) = plan(&DNS, &msg);
    match &p {
        Plan::Resolve { target, v6 } => {
            assert_eq!(admission.outcome, Outcome::Allow);
            assert!(dns_answerable(&target.host), "resolves {:?}", target.host);
            assert_eq!(msg.queries.len(), 1);
            let want = if *v6 { RecordType::AAAA } else { RecordType::A };
            assert_eq!(msg.queries[0].query_type(), want);
        }
        Plan::NoData => {
            assert_eq!(msg.queries.len(), 1);
            assert!(matches!(
                msg.queries[0].query_type(),
                RecordType::HTTPS | RecordType::SVCB
            ));
        }
        Plan::Refuse(_) | Plan::FormErr | Plan::NotImp => {}
    }
    if matches!(p, Plan::Resolve { .. } | Plan::NoData) {
        assert_eq!(msg.message_type, MessageType::Query);
    }
    let addrs: [IpAddr; 2] = [
        [203, 0, 113, 9].into(),
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 9].into(),
    ];
    for (rcode, refusal) in [
        (
            ResponseCode::Refused,
            Some(airlock_policy::Reason::BlockedByPolicy),
        ),
        (ResponseCode::NoError, None),
        (ResponseCode::FormErr, None),
    ] {
        let out = respond(&msg, rcode, &addrs, refusal, 512);
        assert!(out.len() <= 512, "response of {} bytes over 512", out.len());
        assert!(!out.is_empty(), "no response could be encoded");
        let back =
            Message::from_vec(&out).unwrap_or_else(|e| panic!("our response does not parse: {e}"));
        assert_eq!(back.id, msg.id);
        assert_eq!(back.message_type, MessageType::Response);
        assert_eq!(back.response_code, rcode);
    }
});
