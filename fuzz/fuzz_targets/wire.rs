//! The git API's request reading: frames (`frame::read_frame`) as the server reads them
//! from the agent's socket, the signed `Auth` header, `Verifier::verify` with a fixed key
//! and clock, then the `Invocation` body; plus the placeholder check.
//!
//! Input: the bytes the agent writes (an Auth frame, a Body frame, anything after).
//!
//! Invariants: never panics; a frame is never larger than the limit it was read with;
//! **nothing verifies unless it carries the genuine HMAC of exactly its body** (recomputed
//! here with the hmac crate directly, not through airlock-wire), with the canonical
//! lowercase nonce, within the window; a verified request verifies only once (replay);
//! only the genuine placeholder is a placeholder.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use airlock_fuzz::{WIRE_NOW, session_key_bytes};
use airlock_wire::auth::{DEFAULT_WINDOW, Verifier};
use airlock_wire::frame::{self, FrameKind, MAX_FRAME};
use airlock_wire::placeholder::{is_placeholder, placeholder};
use airlock_wire::{Auth, Invocation, Reason, SessionKey};
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

/// The git API's limit for the Auth frame (git-api/src/server.rs MAX_AUTH).
const MAX_AUTH: usize = 4096;

fn genuine_mac(auth: &Auth, body: &[u8]) -> String {
    let text = format!(
        "AIRLOCK-HMAC-SHA256-V1\nRUN\n/v1/git\n{}\n{}\n{}",
        hex::encode(Sha256::digest(body)),
        auth.timestamp,
        auth.nonce
    );
    let mut mac =
        Hmac::<Sha256>::new_from_slice(&session_key_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(text.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fuzz_target!(|data: &[u8]| {
    let key = SessionKey::from_bytes(session_key_bytes());
    if let Ok(text) = std::str::from_utf8(data) {
        let genuine = placeholder(&key, "fuzz-session");
        assert_eq!(
            is_placeholder(&key, "fuzz-session", text),
            text == genuine,
            "{text:?}"
        );
    }

    let mut r = data;
    let auth_frame = match frame::read_frame(&mut r, MAX_AUTH) {
        Ok(Some(f)) => f,
        Ok(None) | Err(_) => return,
    };
    assert!(auth_frame.payload.len() <= MAX_AUTH);
    let body_frame = frame::read_frame(&mut r, MAX_FRAME);
    // The rest of the stream (the server reads no more, but a shim reads these kinds).
    let mut tail = r;
    for _ in 0..4 {
        match frame::read_frame(&mut tail, 1 << 16) {
            Ok(Some(f)) => {
                let _ = frame::decode::<airlock_wire::Exit>(&f.payload, "exit");
                let _ = frame::decode::<airlock_wire::Denied>(&f.payload, "denied");
            }
            Ok(None) | Err(_) => break,
        }
    }
    if auth_frame.kind != FrameKind::Auth {
        return;
    }
    let Ok(auth) = frame::decode::<Auth>(&auth_frame.payload, "auth") else {
        return;
    };
    let Ok(Some(body)) = body_frame else {
        return;
    };
    assert!(body.payload.len() <= MAX_FRAME);
    if body.kind != FrameKind::Body {
        return;
    }
    let now = UNIX_EPOCH + Duration::from_secs(u64::try_from(WIRE_NOW).unwrap_or(0));
    let mut verifier = Verifier::new(key);
    let verdict = verifier.verify(&auth, &body.payload, now);
    if verdict.is_ok() {
        assert_eq!(
            auth.mac.to_ascii_lowercase(),
            genuine_mac(&auth, &body.payload),
            "forged MAC verified"
        );
        assert_eq!(auth.nonce, auth.nonce.to_ascii_lowercase());
        assert_eq!(auth.nonce.len(), 32);
        assert!(auth.timestamp.abs_diff(WIRE_NOW) <= DEFAULT_WINDOW.as_secs());
        assert_eq!(
            (auth.version, auth.method.as_str(), auth.path.as_str()),
            (1, "RUN", "/v1/git")
        );
        assert_eq!(
            verifier.verify(&auth, &body.payload, now),
            Err(Reason::ReplayedNonce)
        );
        let _ = Invocation::from_body(&body.payload);
    }
});
