//! A quick first pass for the workspace's needles: most requests hold none of them, and
//! the needles' own automaton (a few hundred needles, any case) reads every byte of a body
//! that its literal prefilter keeps stopping in (a few hundred prefixes match text often).
//!
//! Every [`STRIDE`]-th window of [`WINDOW`] bytes is hashed (case folded) into a bit table
//! that holds every needle's windows at its first [`STRIDE`] offsets: a needle anywhere
//! in the bytes covers one of the hashed windows, so a needle can start only within
//! [`STRIDE`] bytes before a window whose bit is set, and only there is the automaton asked
//! (anchored: the longest needle starting exactly there). The matches are those of the
//! automaton's own leftmost-longest search, in order, never overlapping: every position
//! where a needle can start is asked, in order, from the end of the match before.
//!
//! Bytes that stop it more than once in 64 bytes are read by the automaton from there
//! (linear time whatever the bytes). Needles shorter than `WINDOW + STRIDE - 1` bytes get no sieve (the automaton's own
//! search reads the bytes).

use aho_corasick::{AhoCorasick, Anchored, Input, Match};

/// Bytes of each hashed window.
const WINDOW: usize = 8;
/// Every this many bytes a window is hashed.
const STRIDE: usize = 4;
/// The table has 2^`BITS` bits (16 KiB): a few hundred needles at four offsets set a
/// small fraction of it, so honest text rarely stops.
const BITS: u32 = 17;

/// The bit table of the needles' windows.
#[derive(Debug)]
pub(super) struct Sieve {
    table: Box<[u64]>,
}

/// The window's bytes with ASCII case folded (and, harmlessly, a few other pairs: only
/// more windows stop).
fn slot(window: u64) -> usize {
    let folded = window | 0x2020_2020_2020_2020;
    // The top bits of a multiplicative hash, below 2^BITS.
    usize::try_from(folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BITS)).unwrap_or(0)
}

fn window(bytes: &[u8], at: usize) -> Option<u64> {
    let w: [u8; WINDOW] = bytes.get(at..at + WINDOW)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

impl Sieve {
    /// The sieve of `needles`; `None` when one is too short for it.
    pub(super) fn new(needles: &[Vec<u8>]) -> Option<Self> {
        if needles.iter().any(|n| n.len() < WINDOW + STRIDE - 1) {
            return None;
        }
        let mut table = vec![0u64; 1 << (BITS - 6)].into_boxed_slice();
        for n in needles {
            for offset in 0..STRIDE {
                let s = slot(window(n, offset)?);
                table[s >> 6] |= 1 << (s & 63);
            }
        }
        Some(Self { table })
    }

    fn stops(&self, window: u64) -> bool {
        let s = slot(window);
        (self.table[s >> 6] >> (s & 63)) & 1 != 0
    }

    /// The matches of `ac` (built with anchored searches) in `bytes`, as its
    /// `find_iter` gives them.
    pub(super) fn find_iter(&self, ac: &AhoCorasick, bytes: &[u8], mut found: impl FnMut(Match)) {
        let mut next = 0; // the end of the match before: where the next may start
        let mut at = 0;
        let mut stops = 0usize;
        while let Some(w) = window(bytes, at) {
            if self.stops(w) {
                // Bytes made to stop the sieve everywhere (a needle's start, repeated)
                // would cost a search per window: past one stop in 64 bytes, the
                // automaton reads the rest itself (linear time whatever the bytes).
                stops += 1;
                if stops > 16 + at / 64 {
                    let rest = Input::new(bytes).range(at.saturating_sub(STRIDE - 1).max(next)..);
                    ac.find_iter(rest).for_each(found);
                    return;
                }
                for start in at.saturating_sub(STRIDE - 1).max(next)..=at {
                    if start < next {
                        continue;
                    }
                    let input = Input::new(bytes).range(start..).anchored(Anchored::Yes);
                    if let Ok(Some(m)) = ac.try_find(input) {
                        next = m.end();
                        found(m);
                    }
                }
            }
            at += STRIDE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aho_corasick::{MatchKind, StartKind};

    /// The sieve's matches are the automaton's, in order, for needles at every offset,
    /// overlapping, in any case, at the very end of the bytes.
    #[test]
    fn the_sieve_finds_what_the_automaton_finds() {
        let needles: Vec<Vec<u8>> = [
            "hunter2-correct-horse",
            "hunter2-correct-horse-battery",
            "esroh-tcerroc-2retnuh",
            "aHVudGVyMi1jb3JyZWN0",
            "correct-horse-staple",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .ascii_case_insensitive(true)
            .start_kind(StartKind::Both)
            .build(&needles)
            .unwrap();
        let sieve = Sieve::new(&needles).unwrap();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rand = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            usize::try_from(x >> 40).unwrap() % n
        };
        for case in 0..3000 {
            let mut text = Vec::new();
            for _ in 0..rand(6) {
                text.extend((0..rand(40)).map(|_| b"ab -\n"[rand(5)]));
                let mut n = needles[rand(needles.len())].clone();
                if rand(2) == 0 {
                    n.make_ascii_uppercase();
                }
                if rand(3) == 0 {
                    n.truncate(rand(n.len() + 1)); // a prefix only: no match
                }
                text.extend(n);
            }
            if case % 2 == 0 {
                text.extend_from_slice(b"-horse-battery");
            }
            let want: Vec<Match> = ac.find_iter(&text).collect();
            let mut got = Vec::new();
            sieve.find_iter(&ac, &text, |m| got.push(m));
            assert_eq!(got, want, "{}", String::from_utf8_lossy(&text));
        }
        assert!(Sieve::new(&[b"short-one".to_vec()]).is_none());
        // Made to stop everywhere: the automaton reads the rest, the same matches.
        let text = format!(
            "{}hunter2-correct-horse",
            "hunter2-correct-hors".repeat(500)
        );
        let want: Vec<Match> = ac.find_iter(text.as_bytes()).collect();
        let mut got = Vec::new();
        sieve.find_iter(&ac, text.as_bytes(), |m| got.push(m));
        assert_eq!(got, want);
        assert_eq!(got.len(), 1);
    }
}
