//! The per-session git credential placeholder handed out by `git-credential-airlock`.
//!
//! It is `airlock-git.<session>.<tag>` where `tag` is the first 16 bytes (hex) of
//! HMAC-SHA256(session key, `"git-credential-placeholder\n" + session`). The proxy, which
//! knows the key, can check that a placeholder belongs to this session; it is worthless
//! anywhere else.

use crate::auth::SessionKey;
use subtle::ConstantTimeEq;

const PREFIX: &str = "airlock-git.";

fn tag(key: &SessionKey, session: &str) -> String {
    let mac = key.mac(format!("git-credential-placeholder\n{session}").as_bytes());
    hex::encode(&mac[..16])
}

/// The placeholder password for `session`.
#[must_use]
pub fn placeholder(key: &SessionKey, session: &str) -> String {
    format!("{PREFIX}{session}.{}", tag(key, session))
}

/// Whether `text` is this session's placeholder (constant-time on the tag).
#[must_use]
pub fn is_placeholder(key: &SessionKey, session: &str, text: &str) -> bool {
    let Some(rest) = text.strip_prefix(PREFIX) else {
        return false;
    };
    let Some((s, t)) = rest.rsplit_once('.') else {
        return false;
    };
    s == session && bool::from(t.as_bytes().ct_eq(tag(key, session).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_bound_to_key_and_session() {
        let k = SessionKey::from_bytes([1; 32]);
        let p = placeholder(&k, "1700000000-abc");
        assert!(p.starts_with("airlock-git.1700000000-abc."));
        assert!(is_placeholder(&k, "1700000000-abc", &p));
        assert!(!is_placeholder(&k, "1700000000-abd", &p));
        assert!(!is_placeholder(
            &SessionKey::from_bytes([2; 32]),
            "1700000000-abc",
            &p
        ));
        assert!(!is_placeholder(&k, "1700000000-abc", &p[..p.len() - 1]));
    }
}
