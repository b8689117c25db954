//! Golden vectors: fixed key, time and nonce give a fixed MAC. The expected values in
//! `vectors.json` were computed outside this crate (Python's `hmac`), so a change to the
//! canonical string or the encoding breaks this test instead of silently changing the wire.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_wire::auth::{canonical_string, sign_with};
use airlock_wire::{SessionKey, Verifier, placeholder};
use std::time::{Duration, UNIX_EPOCH};

#[test]
fn golden_vectors_match() {
    let text = include_str!("vectors.json");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let sigs = doc["signatures"].as_array().unwrap();
    assert_eq!(sigs.len(), 3);
    for v in sigs {
        let key = SessionKey::from_hex(v["key"].as_str().unwrap(), "vector").unwrap();
        let body = v["body"].as_str().unwrap().as_bytes();
        let ts = v["timestamp"].as_i64().unwrap();
        let nonce: [u8; 16] = hex::decode(v["nonce"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(
            canonical_string("RUN", "/v1/git", body, ts, v["nonce"].as_str().unwrap()),
            v["canonical"].as_str().unwrap()
        );
        let auth = sign_with(&key, body, ts, nonce);
        assert_eq!(auth.mac, v["mac"].as_str().unwrap());
        let now = UNIX_EPOCH + Duration::from_secs(ts as u64);
        assert_eq!(Verifier::new(key).verify(&auth, body, now), Ok(()));
    }
    for p in doc["placeholders"].as_array().unwrap() {
        let key = SessionKey::from_hex(p["key"].as_str().unwrap(), "vector").unwrap();
        let session = p["session"].as_str().unwrap();
        assert_eq!(
            placeholder::placeholder(&key, session),
            p["placeholder"].as_str().unwrap()
        );
    }
}
