//! What bytes read as once the encodings an agent's tools put on text are undone: the
//! detectors search a body, a URL or a header as sent **and** as decoded here, so a secret
//! spelled in an encoding its reader undoes is still the secret.
//!
//! Undone, each where it occurs (never the whole input re-copied for one escape):
//! - escapes: `%XX` (repeated: `%2541` is `%41` is `A`, up to [`ROUNDS`] rounds), JSON
//!   `\uXXXX` (surrogate pairs joined), `\xXX`, and `\/`, in a region reaching
//!   [`Decoded::reach`] bytes either side of the escapes (a value may be escaped only in
//!   part);
//! - hex: a run of at least [`MIN_HEX`] hex digits (either case), read from its first and
//!   from its second digit (one digit put in front shifts every byte);
//! - spacing: a run of at least [`MIN_SPACED`] tokens of one or two characters, each apart
//!   by one to three whitespace bytes (`h u n t e r`, `68 75 6e`), read without the
//!   whitespace.
//!
//! What one of them yields is read again ([`DEPTH`] levels: spaced hex, escaped hex). The
//! decoded pieces are joined into one buffer ([`Decoded`], separated by NUL bytes), each
//! byte mapped back to the raw bytes it came from, so a hit is found in one pass over all
//! of them and a redaction overwrites the encoded form where it stands.
//!
//! Not undone here: `+` for a space (a needle form instead: `detect`), base64 and base32
//! (needle forms of the workspace's values), compression (`decode`, by `Content-Encoding`).

/// Rounds of unescaping: `%252541` is three.
pub const ROUNDS: usize = 3;
/// The shortest hex run that is decoded (8 bytes: the shortest needle).
pub const MIN_HEX: usize = 16;
/// The fewest tokens in a spaced run.
pub const MIN_SPACED: usize = 8;
/// How many times a decoded piece is read again.
pub const DEPTH: usize = 2;

const HEX: u8 = 1;
const WS: u8 = 2;
const ESC: u8 = 4;

const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let mut k = 0;
        if c.is_ascii_hexdigit() {
            k |= HEX;
        }
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
            k |= WS;
        }
        if matches!(c, b'%' | b'\\') {
            k |= ESC;
        }
        t[b] = k;
        b += 1;
    }
    t
}

static CLASS: [u8; 256] = classes();

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn hex2(a: u8, b: u8) -> Option<u8> {
    Some(hex_val(a)? << 4 | hex_val(b)?)
}

fn hex4(s: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &b in s.get(..4)? {
        v = v << 4 | u32::from(hex_val(b)?);
    }
    Some(v)
}

/// Every decoded piece of some raw bytes, joined (NUL between pieces), each byte mapped
/// to the raw range it came from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The pieces' bytes.
    pub bytes: Vec<u8>,
    /// Raw start of each byte of [`Decoded::bytes`].
    starts: Vec<u32>,
    /// Raw end of each byte.
    ends: Vec<u32>,
}

/// One decoded piece, in the coordinates of what it was decoded from.
struct Piece {
    bytes: Vec<u8>,
    starts: Vec<u32>,
    ends: Vec<u32>,
}

impl Piece {
    fn with_capacity(n: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(n),
            starts: Vec::with_capacity(n),
            ends: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, b: u8, start: usize, end: usize) {
        self.bytes.push(b);
        self.starts.push(u32::try_from(start).unwrap_or(u32::MAX));
        self.ends.push(u32::try_from(end).unwrap_or(u32::MAX));
    }
}

impl Decoded {
    /// The decoded pieces of `raw` (empty when it holds nothing to decode). `reach`: how
    /// far either side of an escape its region extends (the longest secret a detector
    /// looks for, as decoded).
    #[must_use]
    pub fn of(raw: &[u8], reach: usize) -> Self {
        let mut out = Self::default();
        // Bounded whatever the input: every stage shrinks what it reads, and pieces are
        // read again at most DEPTH times.
        let budget = raw.len().saturating_mul(4).saturating_add(4096);
        collect(raw, reach, DEPTH, &mut |p: Piece| {
            if out.bytes.len() + p.bytes.len() > budget {
                return;
            }
            if !out.bytes.is_empty() {
                let at = out.starts.last().copied().unwrap_or(0);
                out.bytes.push(0);
                out.starts.push(at);
                out.ends.push(at);
            }
            out.bytes.extend_from_slice(&p.bytes);
            out.starts.extend_from_slice(&p.starts);
            out.ends.extend_from_slice(&p.ends);
        });
        out
    }

    /// Whether nothing was decoded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The raw range the decoded range `r` came from.
    #[must_use]
    pub fn raw_range(&self, r: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        if r.is_empty() || r.end > self.bytes.len() {
            return 0..0;
        }
        let start = self.starts[r.start] as usize;
        let end = self.ends[r.end - 1] as usize;
        start..end.max(start)
    }
}

/// Hands every piece of `raw` (and, `depth` times, of those pieces) to `emit`, in raw
/// coordinates.
fn collect(raw: &[u8], reach: usize, depth: usize, emit: &mut dyn FnMut(Piece)) {
    if !worth_scanning(raw) {
        return;
    }
    let found = scan(raw);
    let mut local = Vec::new();
    for (start, end) in regions(&found.escapes, reach, raw.len()) {
        if let Some(p) = unescape_rounds(&raw[start..end]) {
            local.push(shift(p, start));
        }
    }
    for &(start, end) in &found.hex {
        for align in 0..2 {
            if end - start - align >= MIN_HEX {
                local.push(unhex(raw, start + align, end));
            }
        }
    }
    for &(start, end) in &found.spaced {
        local.push(unspace(raw, start, end));
    }
    for piece in local {
        if depth > 1 {
            let (starts, ends) = (&piece.starts, &piece.ends);
            collect(&piece.bytes, reach, depth - 1, &mut |inner: Piece| {
                emit(compose(inner, starts, ends));
            });
        }
        emit(piece);
    }
}

/// `inner` (in the coordinates of a piece) in the coordinates the piece's own map leads
/// to.
fn compose(inner: Piece, starts: &[u32], ends: &[u32]) -> Piece {
    let mut out = Piece::with_capacity(inner.bytes.len());
    for ((b, s), e) in inner.bytes.iter().zip(&inner.starts).zip(&inner.ends) {
        let s = starts.get(*s as usize).copied().unwrap_or(0);
        let e = (*e as usize)
            .checked_sub(1)
            .and_then(|i| ends.get(i))
            .copied()
            .unwrap_or(s);
        out.push(*b, s as usize, e as usize);
    }
    out
}

fn shift(mut p: Piece, by: usize) -> Piece {
    let by = u32::try_from(by).unwrap_or(u32::MAX);
    for s in &mut p.starts {
        *s = s.saturating_add(by);
    }
    for e in &mut p.ends {
        *e = e.saturating_add(by);
    }
    p
}

/// What one pass over the bytes found.
#[derive(Debug, Default)]
struct Found {
    /// Escapes, start and end.
    escapes: Vec<(usize, usize)>,
    /// Hex runs of at least [`MIN_HEX`] digits.
    hex: Vec<(usize, usize)>,
    /// Spaced runs (first token's start, last token's end).
    spaced: Vec<(usize, usize)>,
}

/// Whether [`scan`] can find anything in `raw`: a valid escape, a hex run of
/// [`MIN_HEX`] digits, or [`MIN_SPACED`] short tokens in a row (one to three whitespace
/// bytes apart, no longer token between). Most bodies hold none of them, and [`scan`]'s
/// bookkeeping costs several times this: the bytes are read 64 at a time as bit masks
/// (hex digit, whitespace, escape character), a hex run is a run of set bits, and only
/// the edges between tokens and whitespace are visited one by one. It never says no where
/// [`scan`] would find something (it counts short tokens as the run does, and more
/// generously: a run's long-token edges are not needed).
fn worth_scanning(raw: &[u8]) -> bool {
    let mut quick = Quick::default();
    let mut chunks = raw.chunks_exact(64);
    let mut base = 0;
    for chunk in chunks.by_ref() {
        let chunk: &[u8; 64] = chunk.try_into().unwrap_or(&[b' '; 64]);
        if quick.chunk(raw, base, chunk) {
            return true;
        }
        base += 64;
    }
    // The rest, padded with whitespace: the last token ends where the bytes do, as in
    // [`scan`].
    let mut last = [b' '; 64];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    quick.chunk(raw, base, &last)
}

/// What [`worth_scanning`] carries from one 64 bytes to the next.
#[derive(Debug)]
struct Quick {
    /// The hex run that the bytes before end in.
    hex: usize,
    /// Whether the byte before is whitespace (before the first: yes).
    ws: bool,
    /// Where the current token or whitespace began.
    edge: usize,
    /// Short tokens in a row.
    short: usize,
}

impl Default for Quick {
    fn default() -> Self {
        Self {
            hex: 0,
            ws: true,
            edge: 0,
            short: 0,
        }
    }
}

impl Quick {
    /// `chunk` (64 bytes at `base` of `raw`, the last padded): whether something is there.
    fn chunk(&mut self, raw: &[u8], base: usize, chunk: &[u8; 64]) -> bool {
        let (hex, ws, esc) = masks(chunk);
        // A hex run: continued from the bytes before, or 16 set bits in a row here.
        if self.hex + hex.trailing_ones() as usize >= MIN_HEX {
            return true;
        }
        let mut run = hex;
        run &= run >> 1;
        run &= run >> 2;
        run &= run >> 4;
        run &= run >> 8;
        if run != 0 {
            return true;
        }
        self.hex = if hex == u64::MAX {
            self.hex + 64
        } else {
            hex.leading_ones() as usize
        };
        // An escape (rare: checked where one begins).
        let mut e = esc;
        while e != 0 {
            let at = base + e.trailing_zeros() as usize;
            if escape_at(raw, at).is_some() {
                return true;
            }
            e &= e - 1;
        }
        // Short tokens: at each edge between a token and whitespace, the run that ended.
        let mut edges = ws ^ ((ws << 1) | u64::from(self.ws));
        self.ws = ws >> 63 == 1;
        while edges != 0 {
            let at = base + edges.trailing_zeros() as usize;
            let len = at - self.edge;
            // The run that ended is whitespace when this edge begins a token.
            let ended_ws = (ws >> edges.trailing_zeros()) & 1 == 0;
            if ended_ws {
                if len > 3 {
                    self.short = 0;
                }
            } else if len <= 2 {
                self.short += 1;
                if self.short >= MIN_SPACED {
                    return true;
                }
            } else {
                self.short = 0;
            }
            self.edge = at;
            edges &= edges - 1;
        }
        false
    }
}

/// The bytes of `chunk` that are hex digits, whitespace and escape characters, one bit
/// each (bit `i`: byte `i`). Sixteen bytes per instruction (SSE2, in every x86-64).
#[cfg(target_arch = "x86_64")]
fn masks(chunk: &[u8; 64]) -> (u64, u64, u64) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_sub_epi8,
    };
    let (mut hex, mut ws, mut esc) = (0u64, 0u64, 0u64);
    // SAFETY: SSE2 is part of every x86-64 target (its baseline), so these intrinsics run
    // on any CPU this code runs on; each load reads the 16 bytes of `part`, a slice of 16
    // readable bytes, and needs no alignment.
    unsafe {
        let splat = |b: u8| _mm_set1_epi8(b.cast_signed());
        // `x <= max`, unsigned.
        let at_most = |x: __m128i, max: u8| _mm_cmpeq_epi8(_mm_min_epu8(x, splat(max)), x);
        let bits = |m: __m128i| u64::from(_mm_movemask_epi8(m).cast_unsigned() & 0xFFFF);
        for (k, part) in chunk.chunks_exact(16).enumerate() {
            let v = _mm_loadu_si128(part.as_ptr().cast::<__m128i>());
            let digit = at_most(_mm_sub_epi8(v, splat(b'0')), 9);
            let letter = at_most(_mm_sub_epi8(_mm_or_si128(v, splat(0x20)), splat(b'a')), 5);
            let space = _mm_or_si128(
                _mm_or_si128(
                    _mm_cmpeq_epi8(v, splat(b' ')),
                    _mm_cmpeq_epi8(v, splat(b'\t')),
                ),
                _mm_or_si128(
                    _mm_cmpeq_epi8(v, splat(b'\r')),
                    _mm_cmpeq_epi8(v, splat(b'\n')),
                ),
            );
            let escape = _mm_or_si128(
                _mm_cmpeq_epi8(v, splat(b'%')),
                _mm_cmpeq_epi8(v, splat(b'\\')),
            );
            hex |= bits(_mm_or_si128(digit, letter)) << (16 * k);
            ws |= bits(space) << (16 * k);
            esc |= bits(escape) << (16 * k);
        }
    }
    (hex, ws, esc)
}

/// The bytes of `chunk` that are hex digits, whitespace and escape characters, one bit
/// each (bit `i`: byte `i`).
#[cfg(not(target_arch = "x86_64"))]
fn masks(chunk: &[u8; 64]) -> (u64, u64, u64) {
    let (mut hex, mut ws, mut esc) = (0u64, 0u64, 0u64);
    for (i, &b) in chunk.iter().enumerate() {
        let k = CLASS[usize::from(b)];
        hex |= u64::from(k & HEX != 0) << i;
        ws |= u64::from(k & WS != 0) << i;
        esc |= u64::from(k & ESC != 0) << i;
    }
    (hex, ws, esc)
}

/// The length of a valid escape at `i` (a `%` or `\`), if one starts there.
fn escape_at(raw: &[u8], i: usize) -> Option<usize> {
    let rest = &raw[i..];
    match rest {
        [b'%', a, b, ..] if hex2(*a, *b).is_some() => Some(3),
        [b'\\', b'u', tail @ ..] if hex4(tail).is_some() => Some(6),
        [b'\\', b'x', a, b, ..] if hex2(*a, *b).is_some() => Some(4),
        [b'\\', b'/', ..] => Some(2),
        _ => None,
    }
}

/// One pass: escapes, hex runs and spaced runs.
fn scan(raw: &[u8]) -> Found {
    let mut found = Found::default();
    let mut hex_start: Option<usize> = None;
    let mut spaced = Spacing::default();
    let mut token_start: Option<usize> = None;
    for (i, &b) in raw.iter().enumerate() {
        let k = CLASS[usize::from(b)];
        if k & HEX == 0 {
            if let Some(s) = hex_start.take()
                && i - s >= MIN_HEX
            {
                found.hex.push((s, i));
            }
        } else if hex_start.is_none() {
            hex_start = Some(i);
        }
        if k & ESC != 0
            && let Some(n) = escape_at(raw, i)
        {
            found.escapes.push((i, i + n));
        }
        if k & WS != 0 {
            if let Some(ts) = token_start.take() {
                spaced.token(ts, i, &mut found);
            }
            spaced.space(&mut found);
        } else if token_start.is_none() {
            token_start = Some(i);
        }
    }
    if let Some(s) = hex_start
        && raw.len() - s >= MIN_HEX
    {
        found.hex.push((s, raw.len()));
    }
    if let Some(ts) = token_start {
        spaced.token(ts, raw.len(), &mut found);
    }
    spaced.close(&mut found);
    found
}

/// The spaced run being read: tokens of one or two bytes, one to three whitespace bytes
/// apart. The last two bytes of a longer token just before it and the first two of one
/// just after it belong to it (`p=h u n ... s e&x=1`).
#[derive(Debug, Default)]
struct Spacing {
    /// The run's start and end so far.
    run: Option<(usize, usize)>,
    tokens: usize,
    /// Whitespace bytes since the last token.
    gap: usize,
    /// The end of a longer token just before (within three whitespace bytes).
    long_before: Option<usize>,
}

impl Spacing {
    fn token(&mut self, start: usize, end: usize, found: &mut Found) {
        self.gap = 0;
        if end - start <= 2 {
            let first = self.long_before.map_or(start, |e| e.saturating_sub(2));
            let run = self.run.get_or_insert((first, end));
            run.1 = end;
            self.tokens += 1;
            self.long_before = None;
        } else {
            if let Some(run) = &mut self.run {
                run.1 = start + 2;
            }
            self.close(found);
            self.long_before = Some(end);
        }
    }

    fn space(&mut self, found: &mut Found) {
        self.gap += 1;
        if self.gap > 3 {
            self.close(found);
            self.long_before = None;
        }
    }

    /// Ends the run: kept when it has enough tokens.
    fn close(&mut self, found: &mut Found) {
        if let Some(run) = self.run.take()
            && self.tokens >= MIN_SPACED
        {
            found.spaced.push(run);
        }
        self.tokens = 0;
    }
}

/// The regions around escapes: each escape's span widened by `reach` either side,
/// overlapping ones merged.
fn regions(escapes: &[(usize, usize)], reach: usize, len: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &(s, e) in escapes {
        let (s, e) = (s.saturating_sub(reach), (e + reach).min(len));
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// `input` unescaped until nothing changes (at most [`ROUNDS`] rounds); `None` when there
/// was nothing to unescape.
fn unescape_rounds(input: &[u8]) -> Option<Piece> {
    let mut piece = unescape(input)?;
    for _ in 1..ROUNDS {
        let Some(next) = unescape(&piece.bytes) else {
            break;
        };
        piece = compose(next, &piece.starts, &piece.ends);
    }
    Some(piece)
}

/// One round of unescaping; `None` when nothing was.
fn unescape(input: &[u8]) -> Option<Piece> {
    let mut out = Piece::with_capacity(input.len());
    let mut changed = false;
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if CLASS[usize::from(b)] & ESC == 0 {
            out.push(b, i, i + 1);
            i += 1;
            continue;
        }
        match escape_at(input, i) {
            Some(3) => {
                let v = hex2(input[i + 1], input[i + 2]).unwrap_or(b);
                out.push(v, i, i + 3);
                i += 3;
            }
            Some(6) => {
                let unit = hex4(&input[i + 2..]).unwrap_or(0xFFFD);
                let (c, used) = code_point(input, i, unit);
                let mut buf = [0u8; 4];
                for byte in c.encode_utf8(&mut buf).bytes() {
                    out.push(byte, i, i + used);
                }
                i += used;
            }
            Some(4) => {
                let v = hex2(input[i + 2], input[i + 3]).unwrap_or(b);
                out.push(v, i, i + 4);
                i += 4;
            }
            Some(2) => {
                out.push(b'/', i, i + 2);
                i += 2;
            }
            _ => {
                out.push(b, i, i + 1);
                i += 1;
                continue;
            }
        }
        changed = true;
    }
    changed.then_some(out)
}

/// The character of the `\u` escape at `i` with code unit `unit`, and the escape bytes it
/// takes (a high surrogate followed by a low one is one character).
fn code_point(input: &[u8], i: usize, unit: u32) -> (char, usize) {
    if (0xD800..0xDC00).contains(&unit)
        && let Some(low) = input
            .get(i + 6..)
            .filter(|r| r.starts_with(b"\\u"))
            .and_then(|r| hex4(&r[2..]))
        && (0xDC00..0xE000).contains(&low)
    {
        let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
        return (char::from_u32(c).unwrap_or('\u{FFFD}'), 12);
    }
    (char::from_u32(unit).unwrap_or('\u{FFFD}'), 6)
}

/// The bytes of the hex digits in `raw[start..end]`, read in pairs from `start`.
fn unhex(raw: &[u8], start: usize, end: usize) -> Piece {
    let mut out = Piece::with_capacity((end - start) / 2);
    let mut i = start;
    while i + 1 < end {
        out.push(hex2(raw[i], raw[i + 1]).unwrap_or(0), i, i + 2);
        i += 2;
    }
    out
}

/// The bytes of `raw[start..end]` without its whitespace.
fn unspace(raw: &[u8], start: usize, end: usize) -> Piece {
    let mut out = Piece::with_capacity(end - start);
    for (i, &b) in raw.iter().enumerate().take(end).skip(start) {
        if CLASS[usize::from(b)] & WS == 0 {
            out.push(b, i, i + 1);
        }
    }
    out
}

#[cfg(test)]
mod tests;
