//! JSON request bodies read strictly: a duplicate key anywhere is an error.
//!
//! Parsers disagree on `{"event": "COMMENT", "event": "APPROVE"}` (first wins in some,
//! last in others), so a body judge reading one value while the upstream acts on the
//! other would be bypassed. Refusing duplicates removes the disagreement. Nesting is
//! bounded by serde_json's recursion limit (128).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parse `bytes` as one JSON value, refusing duplicate object keys.
///
/// # Errors
/// The serde_json error (syntax, trailing data, duplicate key, depth).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|s| s.0)
}

struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Strict, E> {
        Ok(Strict(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Strict, E> {
        Ok(Strict(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Strict, E> {
        Ok(Strict(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Strict(Value::Array(out)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.insert(key.clone(), v).is_some() {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
        }
        Ok(Strict(Value::Object(out)))
    }
}

/// Whether any string anywhere in `value` (keys excluded) equals `needle`, ignoring
/// ASCII case.
#[must_use]
pub fn contains_string(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(s) => s.eq_ignore_ascii_case(needle),
        Value::Array(a) => a.iter().any(|v| contains_string(v, needle)),
        Value::Object(o) => o.values().any(|v| contains_string(v, needle)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attack_duplicate_keys_are_refused_at_any_depth() {
        assert!(parse_strict(br#"{"a":1,"a":2}"#).is_err());
        assert!(parse_strict(br#"{"x":{"event":"COMMENT","event":"APPROVE"}}"#).is_err());
        // The same key spelled with an escape is the same key.
        assert!(parse_strict(br#"{"event":"A","\u0065vent":"B"}"#).is_err());
        assert!(parse_strict(br#"[{"a":1},{"a":2}]"#).is_ok());
    }

    #[test]
    fn values_round_trip() {
        let v = parse_strict(br#" {"q":"x","n":[1,-2,3.5,true,null]} "#).unwrap();
        assert_eq!(v["q"], "x");
        assert_eq!(v["n"][1], -2);
        assert!(parse_strict(b"{} x").is_err());
        assert!(parse_strict(b"").is_err());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(parse_strict(deep.as_bytes()).is_err());
    }

    #[test]
    fn strings_are_found_anywhere() {
        let v = parse_strict(br#"{"input":{"list":[{"event":"approve"}]}}"#).unwrap();
        assert!(contains_string(&v, "APPROVE"));
        assert!(!contains_string(&v, "event"));
    }
}
