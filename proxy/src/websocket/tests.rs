#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

use airlock_handoff::{HANDOFF_VERSION, Handoff, ResolvedCredential, Secret};
use airlock_policy::Policy;

use super::*;
use crate::credentials::Credentials;

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn data(fin: bool, opcode: Opcode, payload: &[u8]) -> Frame {
    Frame {
        fin,
        opcode,
        payload: payload.to_vec(),
    }
}

/// Every frame of `wire`, parsed as one side reads them.
fn parse_all(from_client: bool, wire: &[u8]) -> Result<Vec<Frame>, Violation> {
    let mut p = Parser::new(from_client);
    let mut at = 0;
    let mut out = Vec::new();
    while at < wire.len() {
        match p.parse(&wire[at..])? {
            Some((f, used)) => {
                out.push(f);
                at += used;
            }
            None => panic!("incomplete frame at {at}"),
        }
    }
    Ok(out)
}

#[test]
fn the_rfc_examples_parse() {
    // RFC 6455 §5.7: a single-frame masked text "Hello", and unmasked.
    let masked = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(
        parse_all(true, &masked).unwrap(),
        [data(true, Opcode::Text, b"Hello")]
    );
    let plain = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    assert_eq!(
        parse_all(false, &plain).unwrap(),
        [data(true, Opcode::Text, b"Hello")]
    );
    // Encoding gives the same bytes back.
    assert_eq!(data(true, Opcode::Text, b"Hello").encode(Some(KEY)), masked);
    assert_eq!(data(true, Opcode::Text, b"Hello").encode(None), plain);
}

#[test]
fn lengths_of_7_16_and_64_bits_round_trip_and_wait_for_their_bytes() {
    for len in [0, 1, 125, 126, 127, 65_535, 65_536, 200_000] {
        let f = data(true, Opcode::Binary, &vec![0xA5; len]);
        let wire = f.encode(Some(KEY));
        let header = match len {
            0..=125 => 6,
            126..=65_535 => 8,
            _ => 14,
        };
        assert_eq!(wire.len(), header + len, "{len}");
        // Every strict prefix is "not yet", never an error or a frame.
        let mut p = Parser::new(true);
        for cut in [0, 1, 2, header - 1, header, wire.len() - 1] {
            if cut < wire.len() {
                assert_eq!(p.parse(&wire[..cut]).unwrap(), None, "{len} cut at {cut}");
            }
        }
        assert_eq!(p.parse(&wire).unwrap(), Some((f, wire.len())));
    }
}

#[test]
fn fragments_and_interleaved_control_frames_keep_their_order() {
    let frames = [
        data(false, Opcode::Text, b"hel"),
        data(true, Opcode::Ping, b"p"),
        data(false, Opcode::Continuation, b"lo "),
        data(true, Opcode::Pong, b""),
        data(true, Opcode::Continuation, b"world"),
        data(true, Opcode::Binary, b"\x00\xff"),
        Frame::close(1000, "bye"),
    ];
    let wire: Vec<u8> = frames.iter().flat_map(|f| f.encode(Some(KEY))).collect();
    assert_eq!(parse_all(true, &wire).unwrap(), frames);
    assert_eq!(frames[6].close_code(), Some(1000));
}

fn violation(from_client: bool, wire: &[u8]) -> Violation {
    parse_all(from_client, wire).unwrap_err()
}

#[test]
fn malformed_frames_are_violations() {
    let text = |f: Frame| f.encode(Some(KEY));
    // Reserved bits (an extension nobody negotiated: permessage-deflate sets RSV1).
    let mut rsv = text(data(true, Opcode::Text, b"x"));
    rsv[0] |= 0x40;
    assert_eq!(
        violation(true, &rsv),
        Violation::Protocol("reserved bits set")
    );
    // An unmasked frame from the agent, a masked one from the upstream.
    let plain = data(true, Opcode::Text, b"x").encode(None);
    assert_eq!(
        violation(true, &plain),
        Violation::Protocol("unmasked client frame")
    );
    assert_eq!(
        violation(false, &text(data(true, Opcode::Text, b"x"))),
        Violation::Protocol("masked server frame")
    );
    assert_eq!(
        violation(true, &[0x83, 0x80, 0, 0, 0, 0]),
        Violation::Protocol("unknown opcode")
    );
    // Control frames: never fragmented, at most 125 bytes.
    assert_eq!(
        violation(true, &text(data(false, Opcode::Ping, b"x"))),
        Violation::Protocol("fragmented control frame")
    );
    assert_eq!(
        violation(true, &text(data(true, Opcode::Ping, &[0; 126]))),
        Violation::Protocol("control frame over 125 bytes")
    );
    // Fragmentation out of order.
    assert_eq!(
        violation(true, &text(data(true, Opcode::Continuation, b"x"))),
        Violation::Protocol("continuation outside a message")
    );
    let two: Vec<u8> = [
        data(false, Opcode::Text, b"a"),
        data(true, Opcode::Binary, b"b"),
    ]
    .iter()
    .flat_map(|f| f.encode(Some(KEY)))
    .collect();
    assert_eq!(
        violation(true, &two),
        Violation::Protocol("new message inside a fragmented one")
    );
    // Lengths: not minimal, top bit set.
    assert_eq!(
        violation(true, &[0x82, 0xFE, 0x00, 0x05]),
        Violation::Protocol("length not minimally encoded")
    );
    let mut huge = vec![0x82, 0xFF];
    huge.extend_from_slice(&u64::MAX.to_be_bytes());
    assert_eq!(
        violation(true, &huge),
        Violation::Protocol("64-bit length with its top bit set")
    );
}

#[test]
fn oversized_frames_and_messages_are_refused_from_their_header() {
    // Announced 2^40 bytes: refused before a byte of payload is waited for.
    let mut wire = vec![0x82, 0xFF];
    wire.extend_from_slice(&(1u64 << 40).to_be_bytes());
    assert_eq!(Parser::new(true).parse(&wire), Err(Violation::TooBig));
    // A message over the bound, in fragments each under it.
    let mut p = Parser::with_limits(true, 8, 12);
    let a = data(false, Opcode::Text, b"12345678").encode(Some(KEY));
    let b = data(true, Opcode::Continuation, b"12345").encode(Some(KEY));
    assert!(p.parse(&a).unwrap().is_some());
    assert_eq!(p.parse(&b), Err(Violation::TooBig));
    assert_eq!(Violation::TooBig.close().close_code(), Some(CLOSE_TOO_BIG));
    assert_eq!(
        Violation::Protocol("x").close().close_code(),
        Some(CLOSE_PROTOCOL_ERROR)
    );
}

const PLACEHOLDER: &str = "airlock-placeholder-api-01";
const REAL: &str = "REAL-secret-9f2e7c";

fn rules() -> Rules {
    let policy = Policy::parse(
        r#"
[sandbox]
name = "t"
[network]
allow = ["allowed.test"]
websocket = ["allowed.test"]
[[credentials]]
name = "api"
source = { env = "API_KEY" }
hosts = ["allowed.test"]
header = "authorization"
format = "Bearer {}"
"#,
        Path::new("p.toml"),
    )
    .unwrap();
    let h = Handoff {
        version: HANDOFF_VERSION,
        session: "s".into(),
        credentials: vec![ResolvedCredential {
            name: "api".into(),
            value: Secret::new(REAL.into()),
            placeholder: PLACEHOLDER.into(),
        }],
        git_placeholder: None,
        workspace_secrets: Vec::new(),
        missing: vec![],
        git_service: None,
    };
    let creds = Credentials::from_handoff(h, &policy).unwrap();
    Rules::new(policy, creds).unwrap()
}

fn host(h: &str) -> Host {
    Host::parse(h).unwrap()
}

/// Sends `parts` as consecutive frames of one message; returns the index of the frame
/// refused and why.
fn first_cut(out: &mut Outbound, rules: &Rules, to: &str, parts: &[&str]) -> Option<(usize, Cut)> {
    for (i, p) in parts.iter().enumerate() {
        let opcode = if i == 0 {
            Opcode::Text
        } else {
            Opcode::Continuation
        };
        let mut f = data(i + 1 == parts.len(), opcode, p.as_bytes());
        if let Err(cut) = out.check(rules, &host(to), &mut f) {
            return Some((i, cut));
        }
    }
    None
}

#[test]
fn a_secret_split_anywhere_across_frames_is_caught_at_the_frame_completing_it() {
    let r = rules();
    for secret in [PLACEHOLDER, REAL] {
        let text = format!("{{\"say\":\"{secret}\"}}");
        for i in 1..text.len() {
            let (a, b) = text.split_at(i);
            let mut out = Outbound::default();
            let cut = first_cut(&mut out, &r, "allowed.test", &[a, b]);
            let whole_in_first = a.contains(secret);
            assert_eq!(
                cut,
                Some((usize::from(!whole_in_first), Cut::Credential("api".into()))),
                "split at {i}"
            );
        }
    }
    // Across messages too (the context outlives a message).
    let mut out = Outbound::default();
    assert!(first_cut(&mut out, &r, "allowed.test", &["start airlock-place"]).is_none());
    assert!(first_cut(&mut out, &r, "allowed.test", &["holder-api-01 end"]).is_some());
    // After a hit (report mode goes on) the next frame is searched from its own start.
    let mut out = Outbound::default();
    assert!(first_cut(&mut out, &r, "allowed.test", &[PLACEHOLDER]).is_some());
    assert!(first_cut(&mut out, &r, "allowed.test", &["next"]).is_none());
    // A control frame's payload is searched too.
    let mut ping = data(true, Opcode::Ping, PLACEHOLDER.as_bytes());
    assert!(
        Outbound::default()
            .check(&r, &host("allowed.test"), &mut ping)
            .is_err()
    );
}

#[test]
fn honest_frames_pass_unchanged() {
    let r = rules();
    let mut out = Outbound::default();
    let mut f = data(true, Opcode::Text, b"{\"op\":\"subscribe\",\"airlock\":1}");
    let before = f.clone();
    assert_eq!(
        out.check(&r, &host("allowed.test"), &mut f),
        Ok(Seen::default())
    );
    assert_eq!(f, before);
}

#[test]
fn a_known_format_secret_to_a_foreign_host_is_refused_and_redacted_on_an_llm_host() {
    let r = rules();
    let secret = "abcdEFGH1234ijklMNOP5678qrstUVWX9012yzAB";
    let text =
        format!("aws_access_key_id = AKIA2Z3Y4X5W6V7U2T3S\naws_secret_access_key = {secret}\n");
    let (a, b) = text.split_at(text.len() - 10);
    let cut = first_cut(&mut Outbound::default(), &r, "allowed.test", &[a, b]);
    match cut {
        Some((1, Cut::Secret(name))) => assert!(name.starts_with("aws"), "{name}"),
        other => panic!("{other:?}"),
    }
    let mut f = data(true, Opcode::Text, text.as_bytes());
    let names = Outbound::default()
        .check(&r, &host("api.anthropic.com"), &mut f)
        .unwrap()
        .redacted;
    assert!(names.iter().all(|n| n.starts_with("aws-")), "{names:?}");
    assert!(!names.is_empty());
    assert_eq!(f.payload.len(), text.len());
    assert!(!String::from_utf8_lossy(&f.payload).contains(secret));
}

/// The policy's actions hold for frames too: `log` lets the frame go as it is and the
/// relay's line says `report`, `foreign-secret`, the detector; `redact` overwrites it on a
/// host that is no LLM API.
#[test]
fn a_detectors_log_or_redact_action_applies_to_frames() {
    let policy = Policy::parse(
        "[sandbox]\nname = \"t\"\n[network]\nallow = [\"allowed.test\"]\nwebsocket = [\"allowed.test\"]\n\
         [[detectors]]\nname = \"slack-token\"\naction = \"log\"\n\
         [[detectors]]\nname = \"github-token\"\naction = \"redact\"\n",
        Path::new("p.toml"),
    )
    .unwrap();
    let r = Rules::new(policy, Credentials::none()).unwrap();
    let slack = "xoxb-1234567890-abcdefghijkl";
    let gh = format!("ghp_{}", "a1B2".repeat(9));
    let text = format!("{{\"a\":\"{slack}\",\"b\":\"{gh}\"}}");
    let mut f = data(true, Opcode::Text, text.as_bytes());
    let seen = Outbound::default()
        .check(&r, &host("allowed.test"), &mut f)
        .unwrap();
    assert_eq!(seen.logged, ["slack-token"]);
    assert_eq!(seen.redacted, ["github-token"]);
    let sent = String::from_utf8_lossy(&f.payload).into_owned();
    assert!(sent.contains(slack) && !sent.contains(&gh), "{sent}");
    assert_eq!(f.payload.len(), text.len());
    let summary = Summary {
        logged: seen.logged,
        redacted: seen.redacted,
        end: Some(Event::Close),
        ..Summary::default()
    };
    let who = crate::audit::Who::new("s", "t", None);
    let mut rec = Record::new(
        &who,
        std::time::SystemTime::now(),
        crate::audit::Kind::Http,
        None,
    );
    rec.decision = Verdict::Allow;
    summary.apply(&mut rec);
    assert_eq!(rec.decision, Verdict::Report);
    assert_eq!(rec.reason, Some(Reason::ForeignSecret));
    assert_eq!(rec.event, Some(Event::SecretRedacted));
    assert!(
        rec.rule
            .as_deref()
            .unwrap()
            .starts_with("secret detector github-token,slack-token; websocket:"),
        "{:?}",
        rec.rule
    );
}

#[test]
fn the_upstreams_real_value_is_scrubbed_across_frames_keeping_lengths() {
    let r = rules();
    let text = format!("echo: Bearer {REAL} done");
    for i in 0..=text.len() {
        let (a, b) = text.split_at(i);
        let mut inbound = Inbound::default();
        let mut got = Vec::new();
        for (k, part) in [a, b].iter().enumerate() {
            let opcode = if k == 0 {
                Opcode::Text
            } else {
                Opcode::Continuation
            };
            let mut f = data(k == 1, opcode, part.as_bytes());
            inbound.scrub(&r, &mut f);
            assert_eq!(f.payload.len(), part.len());
            got.extend_from_slice(&f.payload);
        }
        // Every byte of the value in the frame that completes it (all of it when it is
        // whole in one frame) is overwritten.
        let at = text.find(REAL).unwrap();
        let from = if at + REAL.len() <= a.len() {
            at
        } else {
            at.max(a.len())
        };
        assert!(
            got[from..at + REAL.len()].iter().all(|b| *b == b'*'),
            "split at {i}: {}",
            String::from_utf8_lossy(&got)
        );
        assert!(got.starts_with(&text.as_bytes()[..at.min(a.len())]));
        assert!(got.ends_with(b" done"));
    }
}

#[test]
fn an_extension_in_the_101_is_refused() {
    let mut h = http::HeaderMap::new();
    assert!(accept(&h).is_ok());
    h.insert(
        http::header::SEC_WEBSOCKET_EXTENSIONS,
        http::HeaderValue::from_static("permessage-deflate"),
    );
    assert_eq!(accept(&h).unwrap_err().0, Reason::UpgradeNotSupported);
}

#[test]
fn a_fragment_waits_for_the_next_and_control_frames_go_at_once() {
    let mut held = None;
    let first = data(false, Opcode::Text, b"a");
    let mid = data(false, Opcode::Continuation, b"b");
    let last = data(true, Opcode::Continuation, b"c");
    let ping = data(true, Opcode::Ping, b"");
    assert!(release(&mut held, first.clone()).is_empty());
    assert_eq!(release(&mut held, ping.clone()), [ping]);
    assert_eq!(release(&mut held, mid.clone()), [first]);
    assert_eq!(release(&mut held, last.clone()), [mid, last]);
    assert!(held.is_none());
    let whole = data(true, Opcode::Binary, b"x");
    assert_eq!(release(&mut held, whole.clone()), [whole]);
    // A Close drops an unfinished message.
    assert!(release(&mut held, data(false, Opcode::Text, b"y")).is_empty());
    let close = Frame::close(1000, "");
    assert_eq!(release(&mut held, close.clone()), [close]);
    assert!(held.is_none());
}

/// Control frames are one stream with the data frames: a secret split over two Pings (or
/// a data frame and a Ping) is caught at the second.
#[test]
fn a_secret_split_over_two_pings_is_caught_at_the_second() {
    let r = rules();
    let (a, b) = PLACEHOLDER.split_at(12);
    let mut out = Outbound::default();
    let mut first = data(true, Opcode::Ping, a.as_bytes());
    assert!(out.check(&r, &host("allowed.test"), &mut first).is_ok());
    let mut second = data(true, Opcode::Ping, b.as_bytes());
    assert_eq!(
        out.check(&r, &host("allowed.test"), &mut second),
        Err(Cut::Credential("api".into()))
    );
    let mut out = Outbound::default();
    let mut text = data(true, Opcode::Text, a.as_bytes());
    assert!(out.check(&r, &host("allowed.test"), &mut text).is_ok());
    assert!(out.check(&r, &host("allowed.test"), &mut second).is_err());
}
