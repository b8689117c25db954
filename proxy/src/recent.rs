//! What the session last sent to each host: the end of its bodies and WebSocket frames
//! ([`Channel::Body`]) and of its query strings' values ([`Channel::Query`]), so that the
//! next body, frame or query to that host is searched joined to it and a value cut in two
//! and sent in two requests (or two frames, or over two connections) is found in the
//! second.
//!
//! Cost, per session (one proxy): at most [`HOSTS`] hosts are remembered (the one used
//! longest ago is forgotten first), each with at most [`TAIL`] bytes per channel: at most
//! 2 × 256 × 2 KiB = 1 MiB, usually a few KiB (a channel holds only what was sent, up to
//! its cap). A value split across two different hosts is not joined (see the README).

use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes kept per host and channel: more than the longest needle in every encoded form
/// the searches decode (a 512-byte value is at most 3 KiB JSON-escaped, but values are
/// rarely past 300 bytes) and than the widest paired format.
pub const TAIL: usize = 2048;
/// Hosts remembered.
pub const HOSTS: usize = 256;

/// What a tail is the end of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Request bodies (as the upstream receives them: decoded) and WebSocket payloads.
    Body,
    /// The values of query strings (`a=1&b=2` keeps `12`), as sent.
    Query,
}

#[derive(Debug, Default)]
struct Entry {
    body: Vec<u8>,
    query: Vec<u8>,
    used: u64,
}

impl Entry {
    fn channel(&mut self, ch: Channel) -> &mut Vec<u8> {
        match ch {
            Channel::Body => &mut self.body,
            Channel::Query => &mut self.query,
        }
    }
}

/// The session's tails, by host.
#[derive(Debug, Default)]
pub struct Recent {
    inner: Mutex<(HashMap<String, Entry>, u64)>,
}

impl Recent {
    /// The end of what went to `host` on `ch` (empty when nothing did, or it was
    /// forgotten).
    #[must_use]
    pub fn tail(&self, host: &str, ch: Channel) -> Vec<u8> {
        let mut inner = self.lock();
        let (map, tick) = &mut *inner;
        *tick += 1;
        match map.get_mut(host) {
            Some(e) => {
                e.used = *tick;
                e.channel(ch).clone()
            }
            None => Vec::new(),
        }
    }

    /// Notes that `sent` went to `host` on `ch` after what went before.
    pub fn push(&self, host: &str, ch: Channel, sent: &[u8]) {
        if sent.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let (map, tick) = &mut *inner;
        *tick += 1;
        if !map.contains_key(host) && map.len() >= HOSTS {
            let oldest = map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(h, _)| h.clone());
            if let Some(h) = oldest {
                map.remove(&h);
            }
        }
        let e = map.entry(host.to_owned()).or_default();
        e.used = *tick;
        keep_tail(e.channel(ch), sent, TAIL);
    }

    /// How many hosts are remembered.
    #[must_use]
    pub fn hosts(&self) -> usize {
        self.lock().0.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Entry>, u64)> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Appends `more` to `tail`, keeping its last `cap` bytes.
pub fn keep_tail(tail: &mut Vec<u8>, more: &[u8], cap: usize) {
    if more.len() >= cap {
        tail.clear();
        tail.extend_from_slice(&more[more.len() - cap..]);
        return;
    }
    tail.extend_from_slice(more);
    if tail.len() > cap {
        tail.drain(..tail.len() - cap);
    }
}

/// The values of a query string joined (`a=1&b=%32` is `1%32`): what an upstream that
/// reassembles a value from its parameters reads, still percent-encoded (the searches
/// decode it).
#[must_use]
pub fn query_values(query: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(query.len());
    for pair in query.split(['&', ';']) {
        let value = pair.split_once('=').map_or(pair, |(_, v)| v);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_keeps_the_end_of_each_channel() {
        let r = Recent::default();
        r.push("a.test", Channel::Body, b"hunter2-");
        r.push("a.test", Channel::Query, b"q1");
        r.push("b.test", Channel::Body, b"other");
        assert_eq!(r.tail("a.test", Channel::Body), b"hunter2-");
        assert_eq!(r.tail("a.test", Channel::Query), b"q1");
        assert_eq!(r.tail("c.test", Channel::Body), b"");
        let long = vec![b'x'; TAIL + 10];
        r.push("a.test", Channel::Body, &long);
        r.push("a.test", Channel::Body, b"end");
        let tail = r.tail("a.test", Channel::Body);
        assert_eq!(tail.len(), TAIL);
        assert!(tail.ends_with(b"xxend"));
    }

    /// The memory is bounded: past `HOSTS` hosts the one used longest ago is forgotten.
    #[test]
    fn at_most_hosts_are_remembered() {
        let r = Recent::default();
        r.push("keep.test", Channel::Body, b"kept");
        for i in 0..HOSTS + 50 {
            r.push(&format!("h{i}.test"), Channel::Body, b"x");
            // Used again, so never the oldest.
            let _ = r.tail("keep.test", Channel::Body);
        }
        assert_eq!(r.hosts(), HOSTS);
        assert_eq!(r.tail("keep.test", Channel::Body), b"kept");
        assert_eq!(r.tail("h0.test", Channel::Body), b"");
    }

    #[test]
    fn query_values_are_joined() {
        assert_eq!(query_values("p=%41&q=bc;flag&x="), b"%41bcflag");
        assert_eq!(query_values(""), b"");
    }
}
