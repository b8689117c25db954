//! Folding repeated denials, per destination: the first lines of each destination (listener,
//! reason, host and port) are written whole, later ones to it are counted, and each count is
//! reported on a `suppressed` line of its own (the destination, how many, from when to
//! when). The table of destinations is bounded: a destination met while it is full is not
//! entered but counted in its kind's overflow, whose line names the first and the last host
//! folded into it. A destination leaves the table at the first report after which it saw no
//! denial (so its next denial is written whole again).
//!
//! A pure core: no I/O, no clock (the denials' own times come in); the sink calls it under
//! its lock, [`Folds::report`] from the helper thread once a second.

use std::collections::HashMap;

use airlock_audit_schema::{Kind, Timestamp};
use airlock_policy::reason::Reason;

/// Bytes of a host kept as its key; longer hosts (never a valid name: 253 at most) share the
/// entry of their first bytes.
const HOST_KEY_MAX: usize = 255;

/// One destination in the table.
struct Dest {
    port: Option<u16>,
    /// Lines written whole so far.
    written: u32,
    /// Denials counted since the last report.
    folded: u64,
    since: Timestamp,
    until: Timestamp,
    /// A denial came since the last report.
    hit: bool,
}

/// Denials of one kind to destinations past the full table, since the last report.
struct Overflow {
    count: u64,
    since: Timestamp,
    until: Timestamp,
    first_host: Option<String>,
    last_host: Option<String>,
}

/// The destinations of one kind (listener and reason): by host (`""` for none), then port.
#[derive(Default)]
struct Group {
    dests: HashMap<Box<str>, Vec<Dest>>,
    overflow: Option<Overflow>,
}

/// One `suppressed` line's content, handed out by [`Folds::report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub kind: Kind,
    pub reason: Reason,
    /// The destination, or on an overflow line the last host folded into it.
    pub host: Option<String>,
    pub port: Option<u16>,
    pub count: u64,
    pub since: Timestamp,
    pub until: Timestamp,
    pub overflow: bool,
    pub first_host: Option<String>,
}

/// The table of folded denials (see the module docs).
pub struct Folds {
    /// Lines written whole per destination before it is folded (at least 1).
    first: u32,
    /// Destinations the table holds at most, all kinds together.
    capacity: usize,
    /// Destinations it holds.
    len: usize,
    groups: HashMap<(Kind, Reason), Group>,
}

/// `host` cut to its key (at a character boundary), `""` for none.
fn key(host: Option<&str>) -> &str {
    let h = host.unwrap_or("");
    if h.len() <= HOST_KEY_MAX {
        return h;
    }
    let mut end = HOST_KEY_MAX;
    while !h.is_char_boundary(end) {
        end -= 1;
    }
    &h[..end]
}

/// `slot` set to `value` (reusing its allocation).
fn set(slot: &mut Option<String>, value: Option<&str>) {
    match (slot.as_mut(), value) {
        (Some(s), Some(v)) => {
            s.clear();
            s.push_str(v);
        }
        (_, v) => *slot = v.map(str::to_owned),
    }
}

impl Folds {
    /// A table of `capacity` destinations that writes `first` lines of each whole.
    #[must_use]
    pub fn new(first: u32, capacity: usize) -> Self {
        Self {
            first: first.max(1),
            capacity,
            len: 0,
            groups: HashMap::new(),
        }
    }

    /// Whether a denial (of `kind` with `reason`, to `host`:`port`, arrived at `ts`) is
    /// written whole (`true`); otherwise it is counted for its destination's (or the
    /// overflow's) next `suppressed` line.
    pub fn admit(
        &mut self,
        kind: Kind,
        reason: Reason,
        host: Option<&str>,
        port: Option<u16>,
        ts: Timestamp,
    ) -> bool {
        let full = self.len >= self.capacity;
        let group = self.groups.entry((kind, reason)).or_default();
        let k = key(host);
        if let Some(ports) = group.dests.get_mut(k)
            && let Some(d) = ports.iter_mut().find(|d| d.port == port)
        {
            d.hit = true;
            if d.written < self.first {
                d.written += 1;
                return true;
            }
            if d.folded == 0 {
                d.since = ts;
            }
            d.folded += 1;
            d.until = d.until.max(ts);
            return false;
        }
        if full {
            let o = group.overflow.get_or_insert_with(|| Overflow {
                count: 0,
                since: ts,
                until: ts,
                first_host: host.map(str::to_owned),
                last_host: None,
            });
            o.count += 1;
            o.since = o.since.min(ts);
            o.until = o.until.max(ts);
            set(&mut o.last_host, host);
            return false;
        }
        let dest = Dest {
            port,
            written: 1,
            folded: 0,
            since: ts,
            until: ts,
            hit: true,
        };
        match group.dests.get_mut(k) {
            Some(ports) => ports.push(dest),
            None => {
                group.dests.insert(k.into(), vec![dest]);
            }
        }
        self.len += 1;
        true
    }

    /// Whether [`admit`](Self::admit) would write this denial whole; nothing changes.
    #[must_use]
    pub fn admits(
        &self,
        kind: Kind,
        reason: Reason,
        host: Option<&str>,
        port: Option<u16>,
    ) -> bool {
        let known = self
            .groups
            .get(&(kind, reason))
            .and_then(|g| g.dests.get(key(host)))
            .and_then(|ports| ports.iter().find(|d| d.port == port));
        match known {
            Some(d) => d.written < self.first,
            None => self.len < self.capacity,
        }
    }

    /// Hands out a [`Summary`] per destination with denials counted since the last report
    /// and one per kind whose overflow counted any, oldest first, and resets the counts;
    /// destinations that saw no denial since the last report leave the table.
    pub fn report(&mut self, out: &mut Vec<Summary>) {
        let start = out.len();
        let mut left = 0;
        self.groups.retain(|&(kind, reason), group| {
            group.dests.retain(|host, ports| {
                ports.retain_mut(|d| {
                    if d.folded > 0 {
                        out.push(Summary {
                            kind,
                            reason,
                            host: (!host.is_empty()).then(|| host.to_string()),
                            port: d.port,
                            count: std::mem::take(&mut d.folded),
                            since: d.since,
                            until: d.until,
                            overflow: false,
                            first_host: None,
                        });
                    }
                    let keep = std::mem::take(&mut d.hit);
                    if !keep {
                        left += 1;
                    }
                    keep
                });
                !ports.is_empty()
            });
            if let Some(o) = group.overflow.take() {
                out.push(Summary {
                    kind,
                    reason,
                    host: o.last_host,
                    port: None,
                    count: o.count,
                    since: o.since,
                    until: o.until,
                    overflow: true,
                    first_host: o.first_host,
                });
            }
            !group.dests.is_empty()
        });
        self.len -= left;
        out[start..].sort_by_key(|s| s.since);
    }

    /// Destinations in the table.
    #[cfg(test)]
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds nothing to report or to let go.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
#[path = "fold_tests.rs"]
mod tests;
