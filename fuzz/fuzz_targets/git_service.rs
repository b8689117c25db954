//! The git service port's readers of bytes anything with the git API's group can send: a
//! ticket (`airlock_ticket::open`) and a push's ref-update commands
//! (`airlock_proxy::receive_pack::read`).
//!
//! Input: the first byte picks the reader; the rest is (0) a sealed ticket as sent, (1) a
//! ticket payload, sealed here with the fixed key (so the fuzzer reaches the payload parser
//! past the MAC), or (2) the start of a receive-pack body.
//!
//! Invariants: never panics; a ticket opens only with the genuine HMAC of exactly its
//! payload (recomputed here with the hmac crate, not through airlock-ticket), and then it is
//! the one canonical seal of what it says (sealing what it opened to gives back the input
//! byte for byte: no second spelling of a ticket, nothing the MAC did not cover); commands
//! read whole carry only lowercase object ids of one length and ticket-shaped ref names,
//! and reading more of the body never changes them, while a shorter part of a section still
//! being read asks for more.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use airlock_proxy::receive_pack::{self, Read};
use airlock_ticket::{ServiceKey, object_id_ok, open, ref_name_ok};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;

const KEY: [u8; 32] = [0x5a; 32];

/// A fixed clock: 2026-01-01, in the middle of any seed's validity.
fn now() -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

fn mac(payload: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&KEY).expect("any key length");
    m.update(payload);
    m.finalize().into_bytes().to_vec()
}

fn check_ticket(sealed: &[u8]) {
    let key = ServiceKey::from_bytes(KEY);
    let Ok(t) = open(sealed, &key, now()) else {
        return;
    };
    // Opened: the MAC is the genuine one of exactly the payload it carries.
    let text = std::str::from_utf8(sealed).expect("an opened ticket is ASCII");
    let rest = text.strip_prefix("v1.").expect("v1");
    let (payload, tag) = rest.split_once('.').expect("payload.mac");
    let payload = URL_SAFE_NO_PAD.decode(payload).expect("payload decodes");
    assert_eq!(URL_SAFE_NO_PAD.decode(tag).expect("mac decodes"), mac(&payload));
    assert_eq!(t.seal(&key).as_bytes(), sealed, "a second spelling of one ticket");
    for u in &t.updates {
        assert!(ref_name_ok(&u.name) && object_id_ok(&u.old) && object_id_ok(&u.new));
    }
}

fn check_commands(body: &[u8]) {
    match receive_pack::read(body) {
        Read::Done(c) => {
            for u in &c.updates {
                assert!(ref_name_ok(&u.name), "{:?}", u.name);
                assert!(object_id_ok(&u.old) && object_id_ok(&u.new));
                assert_eq!(u.old.len(), u.new.len());
            }
            let mut more = body.to_vec();
            more.extend_from_slice(b"0000PACK\xff");
            assert_eq!(receive_pack::read(&more), Read::Done(c), "more bytes changed it");
        }
        Read::More => {
            let half = &body[..body.len() / 2];
            assert_eq!(receive_pack::read(half), Read::More, "a prefix is complete");
        }
        Read::Bad(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => check_ticket(rest),
        1 => {
            let sealed = format!(
                "v1.{}.{}",
                URL_SAFE_NO_PAD.encode(rest),
                URL_SAFE_NO_PAD.encode(mac(rest))
            );
            check_ticket(sealed.as_bytes());
        }
        _ => check_commands(rest),
    }
});
