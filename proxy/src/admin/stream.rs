//! The event stream: the hub's lines after a cursor, filtered, as NDJSON `StreamLine`s.
//!
//! One task per follower reads the hub and sends chunks into a small channel the response
//! body drains. The proxy never waits for a follower: the hub does not know it exists. A
//! follower that stops reading fills its channel; once the hub's ring has moved past what it
//! was sent, it gets a `dropped` note (given [`NOTE_WAIT`] to take it) and the stream ends:
//! it resumes from the last cursor it read, and the audit log still has everything.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use airlock_audit_schema::Timestamp;
use airlock_control::admin::{EventsQuery, Note, NoteCode, StreamLine};
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::events::{Hub, Line};
use crate::metrics::Metrics;
use crate::shutdown::{Phase, reached};

/// Lines read from the hub per turn.
const BATCH: usize = 256;
/// Chunks a follower may have unread before it waits.
pub const CHANNEL: usize = 16;
/// How long a follower that fell behind gets to take its `dropped` note.
pub const NOTE_WAIT: Duration = Duration::from_secs(2);

/// The fields the filters read.
#[derive(Deserialize, Default)]
struct Keys {
    ts: Option<String>,
    decision: Option<String>,
    host: Option<String>,
    session: Option<String>,
    reason: Option<String>,
    event: Option<String>,
}

/// How long a follower lets lines gather after a wake-up, so that one write carries many
/// (well inside the 100 ms a denial may take to reach `logs -f`).
pub const GATHER: Duration = Duration::from_millis(5);

/// Whether the line `text` passes every filter of `q`. A line that does not parse passes
/// only when there is no filter (it is the log's, whatever it is). A `rotated` line says
/// what left the log: it has no decision, host or reason, and a follower filtering by them
/// still gets it (`logs -f --denied` must not hide that denials were rotated out).
fn passes(q: &EventsQuery, text: &[u8]) -> bool {
    let filtered = q.decision.is_some()
        || q.host.is_some()
        || q.session.is_some()
        || q.reason.is_some()
        || q.since_ms.is_some();
    if !filtered {
        return true;
    }
    let Ok(k) = serde_json::from_slice::<Keys>(text) else {
        return false;
    };
    let is = |want: &Option<String>, got: &Option<String>| {
        want.as_ref().is_none_or(|w| got.as_deref() == Some(w))
    };
    let about_the_log = k.event.as_deref() == Some("rotated");
    (about_the_log
        || (is(&q.decision, &k.decision) && is(&q.host, &k.host) && is(&q.reason, &k.reason)))
        && is(&q.session, &k.session)
        && q.since_ms.is_none_or(|since| {
            k.ts.as_deref()
                .and_then(Timestamp::parse)
                .is_some_and(|t| t.0 >= since)
        })
}

/// `line` as the stream's NDJSON line (`{"kind":"record","cursor":..,"log":"audit","record":..}`):
/// the record's bytes as the log has them, not parsed and written again; `head` is
/// [`head`]'s (the part before the line's number, made once per follower).
fn record_line(head: &[u8], line: &Line, out: &mut Vec<u8>) {
    out.extend_from_slice(head);
    out.extend_from_slice(itoa::Buffer::new().format(line.seq).as_bytes());
    out.extend_from_slice(b"\",\"log\":\"audit\",\"record\":");
    out.extend_from_slice(&line.text);
    out.extend_from_slice(b"}\n");
}

/// The start of every record line of `hub`'s stream, up to the line's number.
fn head(hub: &Hub) -> Vec<u8> {
    let mut h = b"{\"kind\":\"record\",\"cursor\":".to_vec();
    // The prefix is hex and ':', but written as JSON all the same.
    let _ = serde_json::to_writer(&mut h, &hub.cursor_prefix());
    h.pop(); // the closing quote: the number and the quote follow
    h
}

fn note_line(code: NoteCode, message: String) -> Bytes {
    let mut v = serde_json::to_vec(&StreamLine::<serde_json::Value>::Note(Note {
        code,
        message,
    }))
    .unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// How a chunk's send ended.
enum Sent {
    Yes,
    /// The client left or the proxy stops.
    No,
    /// The hub's ring moved past this follower while it did not read.
    Behind,
}

impl From<bool> for Sent {
    fn from(ok: bool) -> Self {
        if ok { Sent::Yes } else { Sent::No }
    }
}

/// The follower fell behind: counted, told (if it takes the note in time), dropped.
async fn dropped(metrics: &Metrics, tx: &mpsc::Sender<Bytes>) {
    metrics.followers_dropped.fetch_add(1, Ordering::Relaxed);
    let note = note_line(
        NoteCode::Dropped,
        format!(
            "this follower fell behind the {} records the proxy holds and is dropped: resume from the last cursor read",
            crate::events::RING_LINES
        ),
    );
    let _ = tokio::time::timeout(NOTE_WAIT, tx.send(note)).await;
}

/// Sends the stream `q` asks for into `tx` until it is over (not following: the lines held
/// now; following: until the client leaves, falls behind, or the proxy stops).
pub async fn follow(
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    q: EventsQuery,
    tx: mpsc::Sender<Bytes>,
    mut phase: tokio::sync::watch::Receiver<Phase>,
) {
    let mut wake = hub.subscribe();
    let from = hub.from(q.after.as_ref());
    if from.gap && q.after.is_some() {
        let note = note_line(
            NoteCode::Gap,
            "records after the cursor asked for are no longer held (rotated out, or from an earlier start of the proxy); the audit log has them".to_owned(),
        );
        if tx.send(note).await.is_err() {
            return;
        }
    }
    if q.follow {
        metrics.followers.fetch_add(1, Ordering::Relaxed);
    }
    let mut pos = from.after;
    let head = head(&hub);
    let mut lines = Vec::with_capacity(BATCH);
    let mut chunk = Vec::with_capacity(16 * 1024);
    loop {
        wake.borrow_and_update();
        lines.clear();
        if !hub.read(pos, BATCH, &mut lines) {
            dropped(&metrics, &tx).await;
            break;
        }
        chunk.clear();
        for line in &lines {
            pos = line.seq;
            if passes(&q, &line.text) {
                record_line(&head, line, &mut chunk);
            }
        }
        if !chunk.is_empty() {
            // Waits while the client does not read; the hub goes on without it, and once
            // its ring has moved past this follower the wait is over.
            let send = tx.send(Bytes::from(std::mem::replace(
                &mut chunk,
                Vec::with_capacity(16 * 1024),
            )));
            tokio::pin!(send);
            let sent = loop {
                tokio::select! {
                    r = &mut send => break Sent::from(r.is_ok()),
                    () = reached(&mut phase, Phase::Stopping) => break Sent::No,
                    r = wake.changed() => if r.is_err() || !hub.holds(pos) {
                        break Sent::Behind;
                    },
                }
            };
            match sent {
                Sent::Yes => {}
                Sent::No => break,
                Sent::Behind => {
                    dropped(&metrics, &tx).await;
                    break;
                }
            }
        }
        if lines.len() == BATCH {
            continue;
        }
        if !q.follow {
            break;
        }
        tokio::select! {
            r = wake.changed() => if r.is_err() { break },
            () = tx.closed() => break,
            () = reached(&mut phase, Phase::Draining) => break,
        }
        // Lines come in bursts: let the rest of this one gather, then send it in one write.
        tokio::time::sleep(GATHER).await;
    }
    if q.follow {
        metrics.followers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"ts":"2026-11-28T10:00:00.000Z","session":"s1","decision":"deny","host":"evil.example","reason":"blocked-by-policy"}"#;

    #[test]
    fn every_filter_must_hold() {
        let q = |f: fn(&mut EventsQuery)| {
            let mut q = EventsQuery::default();
            f(&mut q);
            passes(&q, LINE.as_bytes())
        };
        assert!(q(|_| {}));
        assert!(q(|q| q.decision = Some("deny".into())));
        assert!(!q(|q| q.decision = Some("allow".into())));
        assert!(q(|q| q.host = Some("evil.example".into())));
        assert!(!q(|q| q.session = Some("s2".into())));
        assert!(q(|q| q.reason = Some("blocked-by-policy".into())));
        let t = Timestamp::parse("2026-11-28T10:00:00.000Z").unwrap().0;
        assert!(q(
            |q| q.since_ms = Some(Timestamp::parse("2026-11-28T10:00:00.000Z").unwrap().0)
        ));
        assert!(!passes(
            &EventsQuery {
                since_ms: Some(t + 1),
                ..EventsQuery::default()
            },
            LINE.as_bytes()
        ));
        assert!(!passes(
            &EventsQuery {
                host: Some("x".into()),
                ..EventsQuery::default()
            },
            b"not json"
        ));
    }

    #[test]
    fn a_rotated_line_reaches_a_follower_of_denials() {
        let rotated = br#"{"ts":"2026-11-28T10:00:01.000Z","session":"s1","event":"rotated","dropped_lines":40}"#;
        let q = |f: fn(&mut EventsQuery)| {
            let mut q = EventsQuery::default();
            f(&mut q);
            passes(&q, rotated)
        };
        assert!(q(|q| q.decision = Some("deny".into())));
        assert!(q(|q| q.host = Some("evil.example".into())));
        assert!(q(|q| q.reason = Some("blocked-by-policy".into())));
        // Another session's rotation, or an older one, is not this follower's.
        assert!(!q(|q| q.session = Some("s2".into())));
        assert!(!q(
            |q| q.since_ms = Some(Timestamp::parse("2026-11-28T10:00:02.000Z").unwrap().0)
        ));
    }

    #[test]
    fn a_record_line_reads_back_as_the_protocols_stream_line() {
        let hub = Hub::new();
        hub.publish(format!("{LINE}\n").as_bytes());
        let mut lines = Vec::new();
        hub.read(0, 1, &mut lines);
        let mut out = Vec::new();
        record_line(&head(&hub), &lines[0], &mut out);
        let back: StreamLine = serde_json::from_slice(&out).unwrap();
        let StreamLine::Record(e) = back else {
            panic!("{back:?}")
        };
        assert_eq!(e.cursor, hub.cursor(1));
        assert_eq!(e.record["host"], "evil.example");
    }

    #[tokio::test]
    async fn a_follower_that_stops_reading_is_dropped_with_a_note_and_the_hub_never_waits() {
        let hub = Arc::new(Hub::new());
        let metrics = Arc::new(Metrics::default());
        let (tx, mut rx) = mpsc::channel(CHANNEL);
        let shutdown = crate::shutdown::Shutdown::new();
        let task = tokio::spawn(follow(
            Arc::clone(&hub),
            Arc::clone(&metrics),
            EventsQuery {
                follow: true,
                ..EventsQuery::default()
            },
            tx,
            shutdown.subscribe(),
        ));
        // Far more than the ring and the channel hold, published without waiting.
        let batch = format!("{LINE}\n").repeat(1000);
        for _ in 0..(crate::events::RING_LINES / 1000 + 40) {
            hub.publish(batch.as_bytes());
            tokio::task::yield_now().await;
        }
        // Now read everything: the stream ends with a dropped note.
        let mut last = Bytes::new();
        while let Some(b) = rx.recv().await {
            last = b;
        }
        task.await.unwrap();
        let text = String::from_utf8(last.to_vec()).unwrap();
        assert!(text.contains("\"dropped\""), "{text}");
        assert_eq!(metrics.followers_dropped.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.followers.load(Ordering::Relaxed), 0);
    }
}
