//! Following the proxy's audit log through the admin API's event stream (`logs --audit -f`
//! while the sandbox runs): every record as the proxy writes it, pushed, not polled; after
//! a broken connection (the proxy restarted, this reader fell behind) the stream is opened
//! again after the last cursor read, so nothing is printed twice and nothing is skipped that
//! the proxy still holds.
//!
//! The files were read first (the history): the stream's first answer starts with records
//! the proxy holds from its start, which the files had. [`Seen`] keeps a digest of every
//! line read from the files, and a record among them (or older than the oldest of them: a
//! rotated file's) is not handed out again.

use crate::admin::{AdminError, Client};
use airlock_audit_schema::Timestamp;
use airlock_control::admin::{Cursor, EventsQuery, Log, NoteCode, StreamLine};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::time::Duration;

/// How long to wait before opening the stream again after it broke.
pub const RETRY: Duration = Duration::from_millis(200);

/// The lines already printed from the files.
#[derive(Debug, Default)]
pub struct Seen {
    digests: HashSet<[u8; 32]>,
    oldest: Option<u64>,
}

/// A record's digest, whatever the order of its keys (the stream's record is the log's
/// line; read as JSON both compare alike).
fn digest(v: &serde_json::Value) -> [u8; 32] {
    Sha256::digest(v.to_string().as_bytes()).into()
}

fn ts_of(v: &serde_json::Value) -> Option<u64> {
    v.get("ts")
        .and_then(serde_json::Value::as_str)
        .and_then(Timestamp::parse)
        .map(|t| t.0)
}

impl Seen {
    /// Remember a raw line of the proxy's log read from its files.
    pub fn add(&mut self, raw: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) else {
            return;
        };
        if let Some(ts) = ts_of(&v) {
            self.oldest = Some(self.oldest.map_or(ts, |o| o.min(ts)));
        }
        self.digests.insert(digest(&v));
    }

    /// Whether the stream's `record` was printed from the files already (or is older than
    /// any line read from them).
    #[must_use]
    pub fn has(&self, record: &serde_json::Value) -> bool {
        if let (Some(oldest), Some(ts)) = (self.oldest, ts_of(record))
            && ts < oldest
        {
            return true;
        }
        self.digests.contains(&digest(record))
    }

    /// Whether nothing was read from the files.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// The proxy's records the stream holds now (not followed), as JSON texts, oldest first.
///
/// # Errors
/// As [`Client::events`] and [`crate::admin::EventStream::next`].
pub async fn held(client: &Client, mut query: EventsQuery) -> Result<Vec<String>, AdminError> {
    query.follow = false;
    let mut stream = client.events(query).await?;
    let mut out = Vec::new();
    while let Some((line, text)) = stream.next_with_text().await? {
        if let StreamLine::Record(ev) = line
            && ev.log == Log::Audit
        {
            out.push(text.unwrap_or_else(|| ev.record.to_string()));
        }
    }
    Ok(out)
}

/// What the follower hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A record to print: its log and its JSON text.
    Record(Log, String),
    /// Something to say on stderr (a gap, a wait for the proxy).
    Say(String),
}

/// The event stream of one sandbox, followed across reconnections.
#[derive(Debug)]
pub struct StreamFollower {
    client: Client,
    query: EventsQuery,
    seen: Seen,
    stream: Option<crate::admin::EventStream>,
    /// Whether a connection was made before (a gap note on the first one is the files').
    connected_once: bool,
    /// Whether the wait for the proxy was said (said once per outage).
    said_waiting: bool,
}

impl StreamFollower {
    /// Follow the stream of `client` with `query` (its `after` and `follow` are this
    /// follower's), skipping what `seen` holds.
    #[must_use]
    pub fn new(client: Client, mut query: EventsQuery, seen: Seen) -> StreamFollower {
        query.follow = true;
        StreamFollower {
            client,
            query,
            seen,
            stream: None,
            connected_once: false,
            said_waiting: false,
        }
    }

    /// Open the stream now (before the files are read, so that nothing written between the
    /// two is missed); a failure is the caller's, to fall back on the files.
    ///
    /// # Errors
    /// As [`Client::events`].
    pub async fn open(&mut self) -> Result<(), AdminError> {
        self.stream = Some(self.client.events(self.query.clone()).await?);
        Ok(())
    }

    /// The lines read from the files, to skip (set after [`StreamFollower::open`]).
    pub fn set_seen(&mut self, seen: Seen) {
        self.seen = seen;
    }

    /// The cursor to resume after.
    #[must_use]
    pub fn cursor(&self) -> Option<&Cursor> {
        self.query.after.as_ref()
    }

    /// The next thing to print; waits for it (across reconnections) as long as it takes.
    pub async fn next(&mut self) -> Item {
        loop {
            let Some(stream) = &mut self.stream else {
                match self.client.events(self.query.clone()).await {
                    Ok(s) => {
                        self.stream = Some(s);
                        if self.said_waiting {
                            self.said_waiting = false;
                            return Item::Say(format!(
                                "the proxy of {} answers again",
                                self.client.name()
                            ));
                        }
                    }
                    Err(e) => {
                        tokio::time::sleep(RETRY).await;
                        if !self.said_waiting {
                            self.said_waiting = true;
                            return Item::Say(format!("{e}; waiting for it (ctrl-c to stop)"));
                        }
                    }
                }
                continue;
            };
            let first = !self.connected_once;
            match stream.next_with_text().await {
                Ok(Some((StreamLine::Record(ev), text))) => {
                    self.connected_once = true;
                    self.query.after = Some(ev.cursor);
                    if self.seen.has(&ev.record) {
                        continue;
                    }
                    return Item::Record(ev.log, text.unwrap_or_else(|| ev.record.to_string()));
                }
                Ok(Some((StreamLine::Note(n), _))) => match n.code {
                    // On the first connection the files had what the proxy no longer holds.
                    NoteCode::Gap if first && !self.seen.is_empty() => {}
                    NoteCode::Gap => return Item::Say(n.message),
                    // Fell behind: open it again after the last cursor read.
                    NoteCode::Dropped | NoteCode::Unknown => self.stream = None,
                },
                Ok(Some((StreamLine::Unknown, _))) => {}
                Ok(None) => {
                    self.connected_once = true;
                    self.stream = None;
                    tokio::time::sleep(RETRY).await;
                }
                Err(e) => {
                    self.connected_once = true;
                    self.stream = None;
                    tokio::time::sleep(RETRY).await;
                    if !self.said_waiting {
                        self.said_waiting = true;
                        return Item::Say(format!("{e}; waiting for it (ctrl-c to stop)"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::admin::testserver::{Answer, rt, serve};
    use airlock_control::admin::{Event, Note};
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use tokio::sync::mpsc;

    fn raw(n: u64) -> String {
        format!(r#"{{"ts":"2026-11-28T10:00:0{n}.000Z","decision":"deny","n":{n}}}"#)
    }

    fn line(l: &StreamLine) -> Vec<u8> {
        let mut v = serde_json::to_vec(l).unwrap();
        v.push(b'\n');
        v
    }

    fn record(n: u64) -> Vec<u8> {
        line(&StreamLine::Record(Event {
            cursor: Cursor(format!("s:{n}")),
            log: Log::Audit,
            record: serde_json::from_str(&raw(n)).unwrap(),
        }))
    }

    fn gap(message: &str) -> Vec<u8> {
        line(&StreamLine::Note(Note {
            code: NoteCode::Gap,
            message: message.into(),
        }))
    }

    fn is_record(item: &Item, n: u64) -> bool {
        match item {
            Item::Record(Log::Audit, text) => {
                serde_json::from_str::<serde_json::Value>(text).ok()
                    == serde_json::from_str(&raw(n)).ok()
            }
            _ => false,
        }
    }

    #[test]
    fn what_the_proxy_holds_is_read_to_the_streams_end() {
        rt().block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let (tx, rx) = mpsc::channel(16);
            let rx = Arc::new(Mutex::new(Some(rx)));
            let asked = Arc::new(Mutex::new(Vec::new()));
            let a = asked.clone();
            serve(
                dir.path(),
                Arc::new(move |_, target, _| {
                    a.lock().unwrap().push(target.to_owned());
                    rx.lock()
                        .unwrap()
                        .take()
                        .map_or(Answer::Fixed(503, Vec::new()), Answer::Stream)
                }),
            );
            tx.send([gap("old"), record(1), record(2)].concat())
                .await
                .unwrap();
            drop(tx);
            let query = EventsQuery {
                decision: Some("deny".into()),
                follow: true,
                ..EventsQuery::default()
            };
            let got = held(&Client::new("box", dir.path()), query).await.unwrap();
            assert_eq!(got.len(), 2);
            assert!(is_record(&Item::Record(Log::Audit, got[1].clone()), 2));
            assert_eq!(
                asked.lock().unwrap().as_slice(),
                ["/v1/events?decision=deny"]
            );
        });
    }

    #[test]
    fn a_broken_stream_is_resumed_after_the_last_cursor_and_skips_what_the_files_had() {
        rt().block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let (tx1, rx1) = mpsc::channel(16);
            let (tx2, rx2) = mpsc::channel(16);
            let streams = Arc::new(Mutex::new(VecDeque::from([rx1, rx2])));
            let asked = Arc::new(Mutex::new(Vec::new()));
            let a = asked.clone();
            serve(
                dir.path(),
                Arc::new(move |_, target, _| {
                    a.lock().unwrap().push(target.to_owned());
                    match streams.lock().unwrap().pop_front() {
                        Some(rx) => Answer::Stream(rx),
                        None => Answer::Fixed(503, Vec::new()),
                    }
                }),
            );
            let mut seen = Seen::default();
            seen.add(&raw(1));
            let query = EventsQuery {
                decision: Some("deny".into()),
                ..EventsQuery::default()
            };
            let mut f = StreamFollower::new(Client::new("box", dir.path()), query, seen);
            f.open().await.unwrap();
            // The first answer: a gap (the files have it), a record the files had, a new one;
            // then the proxy goes away.
            tx1.send([gap("old"), record(1), record(2)].concat())
                .await
                .unwrap();
            drop(tx1);
            let item = f.next().await;
            assert!(is_record(&item, 2), "{item:?}");
            // Opened again after s:2; its gap is said (those lines are lost to this reader).
            tx2.send([gap("records after s:2 are gone"), record(3)].concat())
                .await
                .unwrap();
            assert_eq!(
                f.next().await,
                Item::Say("records after s:2 are gone".into())
            );
            let item = f.next().await;
            assert!(is_record(&item, 3), "{item:?}");
            assert_eq!(f.cursor(), Some(&Cursor("s:3".into())));
            assert_eq!(
                asked.lock().unwrap().as_slice(),
                [
                    "/v1/events?decision=deny&follow=true",
                    "/v1/events?after=s:2&decision=deny&follow=true"
                ]
            );
            // The proxy stops answering: said once, then waited for.
            drop(tx2);
            let item = f.next().await;
            assert!(
                matches!(&item, Item::Say(t) if t.contains("waiting for it")),
                "{item:?}"
            );
        });
    }

    #[test]
    fn a_line_read_from_the_files_is_seen_whatever_its_key_order() {
        let mut seen = Seen::default();
        assert!(seen.is_empty());
        seen.add(r#"{"ts":"2026-11-28T10:00:00.000Z","host":"a.example","decision":"deny"}"#);
        let same: serde_json::Value = serde_json::from_str(
            r#"{"decision":"deny","host":"a.example","ts":"2026-11-28T10:00:00.000Z"}"#,
        )
        .unwrap_or_default();
        assert!(seen.has(&same));
        let other: serde_json::Value = serde_json::from_str(
            r#"{"decision":"allow","host":"a.example","ts":"2026-11-28T10:00:01.000Z"}"#,
        )
        .unwrap_or_default();
        assert!(!seen.has(&other));
        // Older than anything the files gave: a rotated file's line, printed before or not
        // asked for.
        let older: serde_json::Value = serde_json::from_str(
            r#"{"decision":"allow","host":"a.example","ts":"2026-11-28T09:59:59.999Z"}"#,
        )
        .unwrap_or_default();
        assert!(seen.has(&older));
    }
}
