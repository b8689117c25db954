//! `git-credential-airlock`: git's credential-helper protocol.
//!
//! `get` for an https github.com host answers username `x-access-token` and this session's
//! placeholder password (see `airlock_wire::placeholder`); the proxy swaps it for the real
//! token, for reads of authorized repositories only. Everything else gets no answer (git
//! then tries the next helper or fails). `store` and `erase` do nothing.

use std::collections::BTreeMap;

/// Parse git's `key=value` lines (up to a blank line).
#[must_use]
pub fn parse(input: &str) -> BTreeMap<String, String> {
    input
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether the helper answers for this request.
#[must_use]
pub fn applies(req: &BTreeMap<String, String>) -> bool {
    let host = req
        .get("host")
        .map(|h| h.split(':').next().unwrap_or("").to_ascii_lowercase());
    req.get("protocol").map(String::as_str) == Some("https")
        && host.is_some_and(|h| h == "github.com" || h.ends_with(".github.com"))
}

/// The answer for `get`.
#[must_use]
pub fn answer(req: &BTreeMap<String, String>, password: &str) -> Option<String> {
    applies(req).then(|| format!("username=x-access-token\npassword={password}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_github_https_only() {
        let r = parse("protocol=https\nhost=github.com\npath=o/r.git\n\n");
        assert_eq!(
            answer(&r, "P").unwrap(),
            "username=x-access-token\npassword=P\n"
        );
        assert!(answer(&parse("protocol=https\nhost=api.github.com\n"), "P").is_some());
        for bad in [
            "protocol=http\nhost=github.com\n",
            "protocol=https\nhost=evil.com\n",
            "protocol=https\nhost=github.com.evil.com\n",
            "host=github.com\n",
        ] {
            assert!(answer(&parse(bad), "P").is_none(), "{bad}");
        }
    }
}
