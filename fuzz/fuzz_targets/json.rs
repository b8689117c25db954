//! The strict (duplicate-key-refusing) JSON parser every judged body goes through.
//!
//! Invariants: never panics (nesting is bounded); whatever it accepts, serde_json accepts
//! as the same value (so the judge and an upstream using a standard parser read the same
//! thing), and its own serialisation is strict JSON again; whatever serde_json
//! accepts and it refuses, it refuses for a duplicate key.
#![no_main]

use airlock_policy::json::parse_strict;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let strict = parse_strict(data);
    let loose = serde_json::from_slice::<Value>(data);
    match (&strict, &loose) {
        (Ok(s), Ok(l)) => {
            assert_eq!(s, l, "strict and serde_json disagree");
            // Serialised again, it is still strict JSON (floats may move by an ulp:
            // serde_json's default float parsing is not correctly rounded, on both sides).
            let text = serde_json::to_vec(s).unwrap_or_default();
            assert!(
                parse_strict(&text).is_ok(),
                "its own serialisation is refused"
            );
        }
        (Ok(s), Err(e)) => panic!("strict accepted {s:?}, serde_json refused: {e}"),
        (Err(e), Ok(_)) => {
            assert!(
                e.to_string().contains("duplicate key"),
                "strict refused only: {e}"
            );
        }
        (Err(_), Err(_)) => {}
    }
});
