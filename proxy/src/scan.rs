//! Finding secrets in byte streams: a set of needles (placeholders, real values, the forms
//! we inject) searched in one pass, across chunk boundaries, holding back as little as
//! possible.
//!
//! A stream is cut into chunks by the network, so a needle may be split across two of them.
//! Instead of delaying every chunk by a fixed overlap window (which would hold the end of
//! each SSE event until the next one), a [`Stream`] holds back only the longest tail of a
//! chunk that is the **beginning of some needle**; everything before it is released at
//! once. An event ending in `\n\n` is released whole (no needle starts with a newline);
//! a chunk ending in `airlock-place` waits for the next one. At the end of the stream the
//! held bytes are released (they were not a needle).
//!
//! Two uses: [`Stream::check`] (requests: any needle is a leak, the stream must stop before
//! the held needle is released) and [`Stream::scrub`] (responses: every needle is
//! overwritten in place with `*`, same length, so `content-length` stays true).
//!
//! A set may match without regard to ASCII case ([`Needles::ignoring_case`]: the forms of a
//! real value scrubbed from responses, hex and base32 among them, in either case).

use aho_corasick::automaton::Automaton as _;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{AhoCorasick, Anchored, MatchKind};
use bytes::{Bytes, BytesMut};

/// What a needle is, for the audit log (the credential's index and the form found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// Index of the credential (in [`crate::credentials::Credentials`]); `usize::MAX` for the
    /// git placeholder.
    pub credential: usize,
    /// Which form of it.
    pub form: Form,
}

/// The form of a secret a needle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The agent's placeholder.
    Placeholder,
    /// The real value.
    Real,
    /// An encoding of the real value the proxy injects (base64 of git-basic).
    Injected,
}

/// A compiled needle set.
#[derive(Debug)]
pub struct Needles {
    ac: AhoCorasick,
    /// The same needles, walked anchored from a tail's candidate start: whether the tail
    /// is the beginning of some needle ([`Needles::holdback`]).
    prefixes: NFA,
    tags: Vec<Tag>,
    /// `first[b]`: some needle starts with byte `b`.
    first: [bool; 256],
    max_len: usize,
}

impl Needles {
    /// Compiles `needles` (empty ones are ignored), matched byte for byte. `None` when
    /// nothing is left.
    #[must_use]
    pub fn new(needles: Vec<(Vec<u8>, Tag)>) -> Option<Self> {
        Self::build(needles, false)
    }

    /// As [`Needles::new`], matched without regard to ASCII case.
    #[must_use]
    pub fn ignoring_case(needles: Vec<(Vec<u8>, Tag)>) -> Option<Self> {
        Self::build(needles, true)
    }

    fn build(needles: Vec<(Vec<u8>, Tag)>, any_case: bool) -> Option<Self> {
        let needles: Vec<_> = needles.into_iter().filter(|(n, _)| !n.is_empty()).collect();
        if needles.is_empty() {
            return None;
        }
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .ascii_case_insensitive(any_case)
            .build(needles.iter().map(|(n, _)| n))
            .ok()?;
        let prefixes = NFA::builder()
            .ascii_case_insensitive(any_case)
            .build(needles.iter().map(|(n, _)| n))
            .ok()?;
        let mut first = [false; 256];
        for (n, _) in &needles {
            if let Some(&b) = n.first() {
                first[usize::from(b)] = true;
                if any_case {
                    first[usize::from(b.to_ascii_lowercase())] = true;
                    first[usize::from(b.to_ascii_uppercase())] = true;
                }
            }
        }
        let max_len = needles.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        Some(Self {
            ac,
            prefixes,
            tags: needles.iter().map(|(_, t)| *t).collect(),
            first,
            max_len,
        })
    }

    /// The length of the longest needle.
    #[must_use]
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The first needle in `hay`, if any.
    #[must_use]
    pub fn find(&self, hay: &[u8]) -> Option<Tag> {
        self.ac
            .find(hay)
            .and_then(|m| self.tags.get(m.pattern().as_usize()).copied())
    }

    /// The first needle in `hay` that ends past `start` (what is before `start` was
    /// searched already).
    #[must_use]
    pub fn find_ending_after(&self, hay: &[u8], start: usize) -> Option<Tag> {
        self.ac
            .find_iter(hay)
            .find(|m| m.end() > start)
            .and_then(|m| self.tags.get(m.pattern().as_usize()).copied())
    }

    /// Length of the longest suffix of `hay` that is a proper prefix of some needle (what
    /// must wait for the next chunk).
    #[must_use]
    pub fn holdback(&self, hay: &[u8]) -> usize {
        let window = hay.len().min(self.max_len.saturating_sub(1));
        let start = hay.len() - window;
        let Ok(anchored) = self.prefixes.start_state(Anchored::Yes) else {
            return 0;
        };
        for i in start..hay.len() {
            if !self.first[usize::from(hay[i])] {
                continue;
            }
            // Walk the tail from here: alive at its end, with somewhere to go on to, means
            // it is the beginning of some needle (a whole needle in it would have been
            // found by the search).
            let mut sid = anchored;
            let alive = hay[i..].iter().all(|&b| {
                sid = self.prefixes.next_state(Anchored::Yes, sid, b);
                !self.prefixes.is_dead(sid)
            });
            let goes_on = || {
                (0..=u8::MAX).any(|b| {
                    !self
                        .prefixes
                        .is_dead(self.prefixes.next_state(Anchored::Yes, sid, b))
                })
            };
            if alive && goes_on() {
                return hay.len() - i;
            }
        }
        0
    }

    /// Overwrites every needle in `buf` with `*`; returns whether anything was.
    pub fn overwrite(&self, buf: &mut [u8]) -> bool {
        let spans: Vec<_> = self.ac.find_iter(&*buf).map(|m| m.range()).collect();
        for r in &spans {
            buf[r.clone()].fill(b'*');
        }
        !spans.is_empty()
    }
}

/// Scanning state of one stream (one body).
#[derive(Debug, Default)]
pub struct Stream {
    carry: BytesMut,
}

impl Stream {
    /// A new stream.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Request side: the bytes that may be released now, or the needle found. After a
    /// needle nothing more must be sent (the held bytes are never released).
    ///
    /// # Errors
    /// The tag of the needle found (in the chunk or across the boundary with the last one).
    pub fn check(&mut self, needles: &Needles, chunk: Bytes) -> Result<Bytes, Tag> {
        if self.carry.is_empty() {
            if let Some(t) = needles.find(&chunk) {
                return Err(t);
            }
            let h = needles.holdback(&chunk);
            if h > 0 {
                self.carry.extend_from_slice(&chunk[chunk.len() - h..]);
            }
            return Ok(chunk.slice(..chunk.len() - h));
        }
        // Rare: the last chunk ended with the start of a needle.
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(&chunk);
        if let Some(t) = needles.find(&buf) {
            return Err(t);
        }
        let h = needles.holdback(&buf);
        self.carry = buf.split_off(buf.len() - h);
        Ok(buf.freeze())
    }

    /// Response side: the bytes that may be released now, every needle overwritten.
    pub fn scrub(&mut self, needles: &Needles, chunk: Bytes) -> Bytes {
        if self.carry.is_empty() && needles.find(&chunk).is_none() {
            let h = needles.holdback(&chunk);
            if h > 0 {
                self.carry.extend_from_slice(&chunk[chunk.len() - h..]);
            }
            return chunk.slice(..chunk.len() - h);
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(&chunk);
        needles.overwrite(&mut buf);
        let h = needles.holdback(&buf);
        self.carry = buf.split_off(buf.len() - h);
        buf.freeze()
    }

    /// End of stream: what was held back (never a whole needle).
    pub fn finish(&mut self) -> Bytes {
        std::mem::take(&mut self.carry).freeze()
    }

    /// Whether bytes are held back.
    #[must_use]
    pub fn holding(&self) -> bool {
        !self.carry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "airlock-placeholder-anthropic-00ff";
    const R: &str = "sk-ant-REAL-1234";

    fn needles() -> Needles {
        Needles::new(vec![
            (
                P.as_bytes().to_vec(),
                Tag {
                    credential: 0,
                    form: Form::Placeholder,
                },
            ),
            (
                R.as_bytes().to_vec(),
                Tag {
                    credential: 0,
                    form: Form::Real,
                },
            ),
        ])
        .unwrap()
    }

    /// Feeds `text` cut at every possible pair of positions; returns what was released and
    /// whether a needle was found.
    fn check_all_splits(text: &str) -> bool {
        let n = needles();
        let b = text.as_bytes();
        let mut found_every_time = true;
        for i in 0..=b.len() {
            for j in i..=b.len() {
                let mut s = Stream::new();
                let mut out = Vec::new();
                let mut found = false;
                for part in [&b[..i], &b[i..j], &b[j..]] {
                    match s.check(&n, Bytes::copy_from_slice(part)) {
                        Ok(x) => out.extend_from_slice(&x),
                        Err(_) => {
                            found = true;
                            break;
                        }
                    }
                }
                if found {
                    // Whatever was released before the stop never holds a whole needle.
                    assert!(n.find(&out).is_none());
                } else {
                    out.extend_from_slice(&s.finish());
                    assert_eq!(out, b, "everything released, in order");
                }
                found_every_time &= found;
            }
        }
        found_every_time
    }

    #[test]
    fn a_needle_split_anywhere_across_chunks_is_found() {
        assert!(check_all_splits(&format!("x-api-key: {P}\r\n")));
        assert!(check_all_splits(&format!("{{\"k\":\"{R}\"}}")));
    }

    #[test]
    fn clean_streams_pass_whole_and_in_order() {
        let text = "data: {\"i\":1}\n\nairlock-place but not the rest; sk-ant- too";
        let n = needles();
        let b = text.as_bytes();
        for i in 0..=b.len() {
            let mut s = Stream::new();
            let mut out = s
                .check(&n, Bytes::copy_from_slice(&b[..i]))
                .unwrap()
                .to_vec();
            out.extend_from_slice(&s.check(&n, Bytes::copy_from_slice(&b[i..])).unwrap());
            out.extend_from_slice(&s.finish());
            assert_eq!(out, b);
        }
    }

    #[test]
    fn an_sse_event_is_released_whole_at_once() {
        let n = needles();
        let mut s = Stream::new();
        let ev = Bytes::from_static(b"id: 1\ndata: {\"i\":1}\n\n");
        assert_eq!(s.check(&n, ev.clone()).unwrap(), ev);
        assert!(!s.holding());
        assert_eq!(s.scrub(&n, ev.clone()), ev);
        // The start of a needle is held, only that.
        let out = s
            .check(&n, Bytes::from_static(b"data: airlock-pl"))
            .unwrap();
        assert_eq!(&out[..], b"data: ");
        assert!(s.holding());
    }

    #[test]
    fn scrubbing_overwrites_split_values_and_keeps_the_length() {
        let n = needles();
        let text = format!("echo {R} and {R}{R} end");
        let b = text.as_bytes();
        for i in 0..=b.len() {
            let mut s = Stream::new();
            let mut out = s.scrub(&n, Bytes::copy_from_slice(&b[..i])).to_vec();
            out.extend_from_slice(&s.scrub(&n, Bytes::copy_from_slice(&b[i..])));
            out.extend_from_slice(&s.finish());
            assert_eq!(out.len(), b.len());
            let out = String::from_utf8(out).unwrap();
            assert!(!out.contains(R), "split at {i}: {out}");
            assert!(out.starts_with("echo *") && out.ends_with(" end"));
        }
    }

    #[test]
    fn holdback_is_the_longest_needle_prefix() {
        let n = needles();
        assert_eq!(n.holdback(b"abc"), 0);
        assert_eq!(n.holdback(b"abc a"), 1);
        assert_eq!(
            n.holdback(b"abc airlock-placeholder-"),
            "airlock-placeholder-".len()
        );
        assert_eq!(n.holdback(b"sk-ant"), 6);
        // A whole needle is not a proper prefix: it is a match, not a holdback.
        assert_eq!(n.holdback(R.as_bytes()), 0);
        assert!(Needles::new(vec![]).is_none());
    }
}
