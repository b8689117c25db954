//! The event stream: every audit record as it is written, one NDJSON line each, resumable
//! from a cursor and filtered on the server.

use super::response::{ErrorBody, ErrorCode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::{Deserialize, Serialize};

/// A position in the stream, opaque to the client: resume after it with
/// [`EventsQuery::after`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cursor(pub String);

/// Which log a record was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Log {
    /// The proxy's `audit.jsonl`.
    Audit,
    /// The git API's `git-api.jsonl`.
    GitApi,
    /// A log this reader does not know.
    #[serde(other)]
    Unknown,
}

/// One record of the stream: an audit record exactly as written to its log (`record`; the
/// `airlock-audit-schema` types read it), with its position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event<R = serde_json::Value> {
    /// Where it is in the stream.
    pub cursor: Cursor,
    /// The log it was written to.
    pub log: Log,
    /// The record.
    pub record: R,
}

/// Why the server speaks in the stream itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoteCode {
    /// Records between the cursor asked for and the first one sent are gone (rotated out,
    /// or from before the proxy's start); the audit log still has them.
    Gap,
    /// This follower stopped reading and fell too far behind: the stream ends here (resume
    /// from the last cursor read).
    Dropped,
    /// A code this reader does not know.
    #[serde(other)]
    Unknown,
}

/// A note from the server in the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// Which note.
    pub code: NoteCode,
    /// For a person.
    pub message: String,
}

/// One line of the event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum StreamLine<R = serde_json::Value> {
    /// An audit record.
    Record(Event<R>),
    /// A note from the server.
    Note(Note),
    /// A line this reader does not know.
    #[serde(other)]
    Unknown,
}

/// What part of the stream to send: the query string of [`super::path::EVENTS`]. Every filter
/// given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsQuery {
    /// Resume after this cursor (none: from the oldest record the server holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Cursor>,
    /// Only records with this decision (`allow`, `deny`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Only records for this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Only records of this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Only records with this reason code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Only records written at or after this time, in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Keep the stream open and send records as they are written (`logs -f`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow: bool,
}

/// What is escaped in a query value: everything but unreserved characters.
const VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':');

impl EventsQuery {
    /// The query string (without `?`), parameters in a fixed order; empty for no filter.
    #[must_use]
    pub fn to_query(&self) -> String {
        let mut parts = Vec::new();
        let mut put = |key: &str, value: &str| {
            parts.push(format!("{key}={}", utf8_percent_encode(value, VALUE)));
        };
        if let Some(c) = &self.after {
            put("after", &c.0);
        }
        for (key, value) in [
            ("decision", &self.decision),
            ("host", &self.host),
            ("session", &self.session),
            ("reason", &self.reason),
        ] {
            if let Some(v) = value {
                put(key, v);
            }
        }
        if let Some(t) = self.since_ms {
            put("since_ms", &t.to_string());
        }
        if self.follow {
            put("follow", "true");
        }
        parts.join("&")
    }

    /// Read a query string (without `?`).
    ///
    /// # Errors
    /// [`ErrorCode::BadRequest`] naming an unknown, repeated or malformed parameter: a
    /// filter this server does not know is refused, never ignored (ignoring it would send
    /// records the client asked to leave out).
    pub fn from_query(query: &str) -> Result<EventsQuery, ErrorBody> {
        let bad = |message: String| ErrorBody {
            code: ErrorCode::BadRequest,
            message,
        };
        let mut q = EventsQuery::default();
        let mut seen = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode_str(raw)
                .decode_utf8()
                .map_err(|_| bad(format!("the value of {key} is not UTF-8")))?
                .into_owned();
            if seen.contains(&key) {
                return Err(bad(format!("{key} is given twice")));
            }
            seen.push(key);
            match key {
                "after" => q.after = Some(Cursor(value)),
                "decision" => q.decision = Some(value),
                "host" => q.host = Some(value),
                "session" => q.session = Some(value),
                "reason" => q.reason = Some(value),
                "since_ms" => {
                    q.since_ms = Some(value.parse().map_err(|_| {
                        bad(format!(
                            "since_ms={value} is not a time in Unix milliseconds"
                        ))
                    })?);
                }
                "follow" => {
                    q.follow = match value.as_str() {
                        "true" | "1" | "" => true,
                        "false" | "0" => false,
                        _ => return Err(bad(format!("follow={value} is not true or false"))),
                    };
                }
                other => {
                    return Err(bad(format!(
                        "{other} is not a filter of the event stream (after, decision, host, session, reason, since_ms, follow)"
                    )));
                }
            }
        }
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_round_trip_with_escapes() {
        let q = EventsQuery {
            after: Some(Cursor("s1:42".into())),
            host: Some("bücher.example".into()),
            reason: Some("a&b=c d".into()),
            follow: true,
            ..EventsQuery::default()
        };
        let text = q.to_query();
        assert_eq!(
            text,
            "after=s1:42&host=b%C3%BCcher.example&reason=a%26b%3Dc%20d&follow=true"
        );
        assert_eq!(EventsQuery::from_query(&text), Ok(q));
        assert_eq!(EventsQuery::from_query(""), Ok(EventsQuery::default()));
        assert_eq!(EventsQuery::default().to_query(), "");
    }

    #[test]
    fn unknown_repeated_or_malformed_filters_are_refused() {
        for q in [
            "colour=red",
            "host=a&host=b",
            "since_ms=yesterday",
            "follow=maybe",
            "host=%FF",
        ] {
            let e = EventsQuery::from_query(q).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{q}");
        }
    }
}
