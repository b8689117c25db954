//! The request body: one git invocation as the agent made it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Environment variables the shim forwards (when set) and the server accepts; nothing else
/// of the agent's environment reaches the server's git.
pub const PASSED_ENV: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "TZ",
    "LANG",
    "LC_ALL",
];

/// The subcommand of a git argv: the first argument after the global options and the values
/// of `-c`, as written. The shim and the git API read it with this one function, so they
/// cannot disagree on which subcommand an invocation is.
#[must_use]
pub fn subcommand(argv: &[String]) -> Option<&str> {
    let mut it = argv.iter().map(String::as_str);
    while let Some(a) = it.next() {
        if a == "-c" {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// One git invocation. Serialized as JSON; these exact bytes are what the MAC covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invocation {
    /// [`crate::PROTOCOL_VERSION`].
    pub version: u32,
    /// The arguments after `git` (no program name).
    pub argv: Vec<String>,
    /// Working directory relative to the workspace root, `/`-separated; `""` is the root.
    pub cwd: String,
    /// A subset of [`PASSED_ENV`].
    pub env: BTreeMap<String, String>,
    /// Standard input, when the command reads it (`commit -F -`, a message file the shim
    /// read on the agent's behalf); hex on the wire.
    #[serde(default, with = "hex_opt", skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Vec<u8>>,
    /// The terminal's width in columns, when stdout is a terminal.
    pub term_width: Option<u16>,
    /// Whether the agent's stdout is a terminal (the server then asks git for colour).
    pub stdout_tty: bool,
}

impl Invocation {
    /// The exact bytes to sign and send.
    pub fn to_body(&self) -> Result<Vec<u8>, crate::WireError> {
        serde_json::to_vec(self).map_err(|source| crate::WireError::Encode {
            what: "invocation",
            source,
        })
    }

    /// Parse the body bytes (after the MAC has been verified over them).
    pub fn from_body(body: &[u8]) -> Result<Invocation, crate::WireError> {
        crate::frame::decode(body, "invocation")
    }
}

mod hex_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::ref_option)] // serde's `with` passes a reference to the field
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(bytes) => s.serialize_str(&hex::encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| hex::decode(t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_stdin_as_hex() {
        let inv = Invocation {
            version: 1,
            argv: vec!["commit".into(), "-F".into(), "-".into()],
            cwd: "src".into(),
            env: BTreeMap::from([("GIT_AUTHOR_NAME".into(), "A".into())]),
            stdin: Some(b"msg\n".to_vec()),
            term_width: Some(80),
            stdout_tty: false,
        };
        let body = inv.to_body().unwrap();
        assert!(String::from_utf8_lossy(&body).contains("\"stdin\":\"6d73670a\""));
        assert_eq!(Invocation::from_body(&body).unwrap(), inv);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let body = br#"{"version":1,"argv":[],"cwd":"","env":{},"term_width":null,"stdout_tty":false,"git_dir":"/x"}"#;
        assert!(Invocation::from_body(body).is_err());
    }
}
