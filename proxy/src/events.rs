//! The audit lines as they are written, for the admin API's event stream.
//!
//! The audit writer [`Hub::publish`]es every batch of lines right after `write(2)` put them
//! in the log, under its lock: so the stream carries exactly the log's lines, in the log's
//! order, each once, chain included. The hub keeps the newest of them in a ring (bounded in
//! lines and bytes) for a follower that resumes from a cursor, and bumps a `watch` so that
//! followers wake; it never waits for a follower. A follower that falls behind the ring is
//! told so (`gap`, `dropped`) by the stream, never waited for.
//!
//! A cursor is `<start>:<n>`: the proxy start's random id and the line's number in it. A
//! cursor of another start (an earlier proxy process of the sandbox) or one this start has
//! not reached reads as "from the oldest line held", with a gap note.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use airlock_control::admin::Cursor;
use bytes::Bytes;
use tokio::sync::watch;

/// Lines the ring holds at most.
pub const RING_LINES: usize = 16 * 1024;
/// Bytes the ring holds at most.
pub const RING_BYTES: usize = 8 << 20;

/// One line of the log with its number in this start.
#[derive(Debug, Clone)]
pub struct Line {
    /// Its number: the first line this start wrote is 1.
    pub seq: u64,
    /// The line as written, without its newline (a slice of its batch's one copy).
    pub text: Bytes,
}

#[derive(Debug, Default)]
struct Ring {
    lines: VecDeque<Line>,
    bytes: usize,
    /// The number of the last line published.
    last: u64,
}

/// The lines written by this start, for followers.
#[derive(Debug)]
pub struct Hub {
    start: String,
    ring: Mutex<Ring>,
    last: watch::Sender<u64>,
}

/// Where a follower's next read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct From {
    /// Send lines numbered above this.
    pub after: u64,
    /// Lines between the cursor asked for and `after` are gone from the ring (or the cursor
    /// was another start's).
    pub gap: bool,
}

impl Default for Hub {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    /// An empty hub with a fresh start id.
    #[must_use]
    pub fn new() -> Self {
        let mut id = [0u8; 6];
        // A start id only tells starts apart; a failed draw falls back to the time.
        let start = match getrandom::fill(&mut id) {
            Ok(()) => id.iter().map(|b| format!("{b:02x}")).collect(),
            Err(_) => format!(
                "{:x}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            ),
        };
        Self {
            start,
            ring: Mutex::new(Ring::default()),
            last: watch::Sender::new(0),
        }
    }

    /// Adds the lines of `batch` (newline-terminated JSON lines, as written) and wakes the
    /// followers. Called under the audit writer's lock: one copy of the batch, sliced per
    /// line, and nothing else.
    pub fn publish(&self, batch: &[u8]) {
        let whole = Bytes::copy_from_slice(batch);
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', batch) {
            if end > start {
                ring.last += 1;
                ring.bytes += end - start;
                let seq = ring.last;
                ring.lines.push_back(Line {
                    seq,
                    text: whole.slice(start..end),
                });
            }
            start = end + 1;
        }
        while ring.lines.len() > RING_LINES || ring.bytes > RING_BYTES {
            if let Some(old) = ring.lines.pop_front() {
                ring.bytes -= old.text.len();
            }
        }
        let last = ring.last;
        drop(ring);
        self.last.send_replace(last);
    }

    /// The first part of a cursor (`<start>:`): a cursor is this and the line's number.
    #[must_use]
    pub fn cursor_prefix(&self) -> String {
        format!("{}:", self.start)
    }

    /// Wakes when a line is published ([`watch::Receiver::changed`]).
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.last.subscribe()
    }

    /// The cursor of line `seq`.
    #[must_use]
    pub fn cursor(&self, seq: u64) -> Cursor {
        Cursor(format!("{}:{seq}", self.start))
    }

    /// The cursor of the last line published (where a follower that wants only new lines
    /// starts).
    #[must_use]
    pub fn now(&self) -> u64 {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last
    }

    /// Where a read after `cursor` starts (none: from the oldest line held).
    #[must_use]
    pub fn from(&self, cursor: Option<&Cursor>) -> From {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = ring.lines.front().map_or(ring.last, |l| l.seq - 1);
        let Some(cursor) = cursor else {
            return From {
                after: oldest,
                gap: oldest > 0,
            };
        };
        let seq = cursor
            .0
            .split_once(':')
            .filter(|(start, _)| *start == self.start)
            .and_then(|(_, n)| n.parse::<u64>().ok())
            .filter(|n| *n <= ring.last);
        match seq {
            Some(n) if n >= oldest => From {
                after: n,
                gap: false,
            },
            _ => From {
                after: oldest,
                gap: true,
            },
        }
    }

    /// Whether the line after `after` is still held (or not yet written).
    #[must_use]
    pub fn holds(&self, after: u64) -> bool {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.lines.front().is_none_or(|l| after + 1 >= l.seq)
    }

    /// The newest `max` lines held, oldest first, into `out` (copies of their handles: the
    /// ring is not held while the caller reads them).
    pub fn newest(&self, max: usize, out: &mut Vec<Line>) {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = ring.lines.len().saturating_sub(max);
        out.extend(ring.lines.iter().skip(skip).cloned());
    }

    /// Up to `max` lines numbered above `after`, oldest first, into `out`. Returns `false`
    /// when lines above `after` have already left the ring (the reader fell behind).
    pub fn read(&self, after: u64, max: usize, out: &mut Vec<Line>) -> bool {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(first) = ring.lines.front().map(|l| l.seq) else {
            return true;
        };
        if after + 1 < first {
            return false;
        }
        let skip = usize::try_from(after + 1 - first).unwrap_or(usize::MAX);
        out.extend(ring.lines.iter().skip(skip).take(max).cloned());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[Line]) -> Vec<(u64, &str)> {
        lines
            .iter()
            .map(|l| (l.seq, std::str::from_utf8(&l.text).unwrap()))
            .collect()
    }

    #[test]
    fn lines_are_numbered_in_the_order_written_and_read_after_a_cursor() {
        let hub = Hub::new();
        hub.publish(b"{\"a\":1}\n{\"b\":2}\n");
        hub.publish(b"{\"c\":3}\n");
        let mut out = Vec::new();
        assert!(hub.read(0, 10, &mut out));
        assert_eq!(
            texts(&out),
            [(1, "{\"a\":1}"), (2, "{\"b\":2}"), (3, "{\"c\":3}")]
        );
        let from = hub.from(Some(&hub.cursor(2)));
        assert_eq!(
            from,
            From {
                after: 2,
                gap: false
            }
        );
        out.clear();
        assert!(hub.read(from.after, 10, &mut out));
        assert_eq!(texts(&out), [(3, "{\"c\":3}")]);
        assert_eq!(hub.now(), 3);
    }

    #[test]
    fn another_starts_cursor_or_a_future_one_reads_from_the_oldest_with_a_gap() {
        let hub = Hub::new();
        hub.publish(b"{}\n{}\n");
        for c in ["0123:1", "garbage", &hub.cursor(99).0.clone()] {
            assert_eq!(
                hub.from(Some(&Cursor(c.into()))),
                From {
                    after: 0,
                    gap: true
                },
                "{c}"
            );
        }
    }

    #[test]
    fn the_ring_is_bounded_and_a_reader_behind_it_is_told() {
        let hub = Hub::new();
        for _ in 0..RING_LINES + 10 {
            hub.publish(b"{}\n");
        }
        let mut out = Vec::new();
        assert!(!hub.read(5, 10, &mut out), "lines 6..10 are gone");
        let from = hub.from(Some(&hub.cursor(5)));
        assert!(from.gap);
        assert_eq!(from.after, 10);
        assert!(hub.read(from.after, 3, &mut out));
        assert_eq!(out.first().map(|l| l.seq), Some(11));
    }

    #[tokio::test]
    async fn followers_wake_on_publish() {
        let hub = std::sync::Arc::new(Hub::new());
        let mut rx = hub.subscribe();
        let h = std::sync::Arc::clone(&hub);
        tokio::spawn(async move { h.publish(b"{}\n") });
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), 1);
    }
}
