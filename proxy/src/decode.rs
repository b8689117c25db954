//! `Content-Encoding`: the codings the proxy reads (gzip, deflate, br, zstd), what it lets a
//! credential host be asked for (`Accept-Encoding`), and a push decoder whose output is
//! bounded (a decompression bomb is refused, never expanded without limit).
//!
//! A body the proxy searches for secrets must be read as its receiver will read it: a
//! request body is decoded before the detectors run (read whole, it goes upstream as sent
//! unless a redaction rewrote it; streamed, it goes upstream decoded), a response
//! to a request that received a credential is decoded before the real value is scrubbed
//! from it (and reaches the agent decoded). An encoding the proxy cannot decode is refused
//! (`content-encoding-unsupported`).
//!
//! Bounds ([`Bounds`]): the decoded bytes may be at most `floor + ratio × the encoded bytes
//! read so far` (and `total` in all); the first output past that is a
//! [`DecodeError::Bomb`]. Each decoder writes into a sink that refuses the byte past the
//! bound, so memory never holds more than the bound, whatever a write expands to. The
//! decoders' own state is bounded by their formats: gzip and deflate a 32 KiB window, zstd
//! a window of at most 8 MiB ([`ZSTD_WINDOW_LOG_MAX`], RFC 9659's limit for HTTP), brotli
//! at most 16 MiB (its largest window; the large-window extension is never enabled).

use std::io::{self, Write};

use http::header::{self, HeaderMap, HeaderValue};

/// One content coding the proxy decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` (and its alias `x-gzip`); several members in a row are one stream.
    Gzip,
    /// `deflate`: zlib-wrapped as RFC 9110 says, or raw deflate as some servers send it.
    Deflate,
    /// `br`.
    Brotli,
    /// `zstd`.
    Zstd,
}

impl Coding {
    /// The coding a `Content-Encoding` / `Accept-Encoding` token names (`None`: not one
    /// the proxy decodes; `identity` is no coding and is never asked for here).
    #[must_use]
    pub fn parse(token: &str) -> Option<Self> {
        let t = token.trim();
        [
            ("gzip", Self::Gzip),
            ("x-gzip", Self::Gzip),
            ("deflate", Self::Deflate),
            ("br", Self::Brotli),
            ("zstd", Self::Zstd),
        ]
        .into_iter()
        .find_map(|(name, c)| t.eq_ignore_ascii_case(name).then_some(c))
    }
}

/// The most codings one body may be wrapped in (`gzip, br` is two).
pub const MAX_LAYERS: usize = 3;

/// The tokens the proxy decodes, as `Accept-Encoding` may name them.
pub const READABLE: &str = "gzip, deflate, br, zstd";

/// A `Content-Encoding` the proxy cannot read: the token as it was sent (cut to 64 bytes),
/// for the record's `rule`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("content-encoding {0:?} is not one the proxy reads ({READABLE})")]
pub struct Unsupported(pub String);

/// The codings of a message, in the order they were applied (`Content-Encoding: gzip, br`:
/// gzip first); empty when it has none (or only `identity`).
///
/// # Errors
/// [`Unsupported`]: a token the proxy does not decode, a value that is not text, or more
/// than [`MAX_LAYERS`] codings.
pub fn codings(headers: &HeaderMap) -> Result<Vec<Coding>, Unsupported> {
    let mut out = Vec::new();
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value
            .to_str()
            .map_err(|_| Unsupported("(not text)".into()))?;
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if token.eq_ignore_ascii_case("identity") {
                continue;
            }
            let coding = Coding::parse(token)
                .ok_or_else(|| Unsupported(token.chars().take(64).collect()))?;
            out.push(coding);
        }
    }
    if out.len() > MAX_LAYERS {
        return Err(Unsupported(format!("{} codings in a row", out.len())));
    }
    Ok(out)
}

/// Rewrites `Accept-Encoding` to what the proxy can decode: the agent's tokens it reads
/// (with their weights), in its order; `identity` when nothing is left or the agent named
/// none (an absent header lets the server choose any coding). `*` is dropped: it would
/// admit codings the proxy cannot read. With a `Range` request only `identity`: a range of
/// an encoded representation cannot be decoded on its own.
pub fn restrict_accept_encoding(headers: &mut HeaderMap) {
    let ranged = headers.contains_key(header::RANGE);
    let kept: Vec<String> = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !ranged && !t.is_empty())
        .filter(|t| {
            let (name, params) = t.split_once(';').unwrap_or((t, ""));
            let refused = params.split(';').any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            let name = name.trim();
            !refused && (Coding::parse(name).is_some() || name.eq_ignore_ascii_case("identity"))
        })
        .map(str::to_owned)
        .collect();
    let value = if kept.is_empty() {
        HeaderValue::from_static("identity")
    } else {
        HeaderValue::from_str(&kept.join(", ")).unwrap_or(HeaderValue::from_static("identity"))
    };
    headers.insert(header::ACCEPT_ENCODING, value);
}

/// The headers of a message whose body goes on decoded: no `Content-Encoding`, no length
/// or digest of the encoded form; a strong `ETag` (which names the encoded bytes) made weak;
/// no byte ranges of a representation the recipient no longer sees.
pub fn mark_decoded(headers: &mut HeaderMap) {
    for name in [
        header::CONTENT_ENCODING,
        header::CONTENT_LENGTH,
        header::ACCEPT_RANGES,
        header::HeaderName::from_static("content-md5"),
        header::HeaderName::from_static("digest"),
        header::HeaderName::from_static("content-digest"),
        header::HeaderName::from_static("repr-digest"),
    ] {
        headers.remove(name);
    }
    if let Some(tag) = headers.get(header::ETAG)
        && !tag.as_bytes().starts_with(b"W/")
    {
        let mut weak = b"W/".to_vec();
        weak.extend_from_slice(tag.as_bytes());
        if let Ok(v) = HeaderValue::from_bytes(&weak) {
            headers.insert(header::ETAG, v);
        }
    }
}

/// How far a body may expand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Decoded bytes always allowed.
    pub floor: u64,
    /// Decoded bytes allowed per encoded byte read, past the floor.
    pub ratio: u64,
    /// Decoded bytes allowed in all.
    pub total: u64,
}

/// A request body: 1 MiB, then 256 times what was read, 64 MiB in all.
pub const REQUEST: Bounds = Bounds {
    floor: 1 << 20,
    ratio: 256,
    total: 64 << 20,
};

/// A response from a credential host: as a request, with no total (a download streams).
pub const RESPONSE: Bounds = Bounds {
    floor: 1 << 20,
    ratio: 256,
    total: u64::MAX,
};

impl Bounds {
    /// The decoded bytes allowed once `read` encoded bytes were read.
    #[must_use]
    pub fn allowed(&self, read: u64) -> u64 {
        self.floor
            .saturating_add(self.ratio.saturating_mul(read))
            .min(self.total)
    }
}

/// Decoding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not what their `Content-Encoding` says (what the decoder said).
    #[error("the body does not decode as its content-encoding says: {0}")]
    Corrupt(String),
    /// The body expands past its [`Bounds`].
    #[error("the body expands past what the proxy decodes (a decompression bomb)")]
    Bomb,
}

/// Where a decoder writes: refuses the write that would pass `cap` in all.
#[derive(Debug, Default)]
struct Sink {
    buf: Vec<u8>,
    /// Bytes written in all (taken ones included).
    written: u64,
    cap: u64,
    over: bool,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.written.saturating_add(data.len() as u64) > self.cap {
            self.over = true;
            return Err(io::Error::other("decoded output past its bound"));
        }
        self.buf.extend_from_slice(data);
        self.written += data.len() as u64;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One coding's decoder, writing into its sink.
enum Layer {
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    Zlib(flate2::write::ZlibDecoder<Sink>),
    RawDeflate(flate2::write::DeflateDecoder<Sink>),
    /// `deflate` before its first two bytes said zlib or raw.
    Deflate(Vec<u8>),
    Brotli(Box<brotli_decompressor::DecompressorWriter<Sink>>),
    Zstd(Box<zstd::stream::write::Decoder<'static, Sink>>),
}

/// The zstd window the proxy accepts: 8 MiB, what RFC 9659 lets an HTTP encoder use.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

impl Layer {
    fn new(coding: Coding) -> Result<Self, DecodeError> {
        Ok(match coding {
            Coding::Gzip => Self::Gzip(flate2::write::MultiGzDecoder::new(Sink::default())),
            Coding::Deflate => Self::Deflate(Vec::new()),
            Coding::Brotli => Self::Brotli(Box::new(brotli_decompressor::DecompressorWriter::new(
                Sink::default(),
                4096,
            ))),
            Coding::Zstd => {
                let mut raw = zstd::stream::raw::Decoder::new().map_err(corrupt)?;
                raw.set_parameter(zstd::stream::raw::DParameter::WindowLogMax(
                    ZSTD_WINDOW_LOG_MAX,
                ))
                .map_err(corrupt)?;
                Self::Zstd(Box::new(zstd::stream::write::Decoder::with_decoder(
                    Sink::default(),
                    raw,
                )))
            }
        })
    }

    fn sink(&mut self) -> Option<&mut Sink> {
        Some(match self {
            Self::Gzip(d) => d.get_mut(),
            Self::Zlib(d) => d.get_mut(),
            Self::RawDeflate(d) => d.get_mut(),
            Self::Deflate(_) => return None,
            Self::Brotli(d) => d.get_mut(),
            Self::Zstd(d) => d.get_mut(),
        })
    }

    /// Writes `input` through, its output bounded by `cap` in all.
    fn write(&mut self, input: &[u8], cap: u64) -> io::Result<()> {
        if let Some(sink) = self.sink() {
            sink.cap = cap;
        }
        if let Self::Deflate(start) = self {
            start.extend_from_slice(input);
            if start.len() < 2 {
                return Ok(());
            }
            // A zlib header: method 8 in the low nibble, and the two bytes a multiple of
            // 31 (RFC 1950); anything else is raw deflate.
            let zlib = start[0] & 0x0F == 8 && u16::from_be_bytes([start[0], start[1]]) % 31 == 0;
            let held = std::mem::take(start);
            *self = if zlib {
                Self::Zlib(flate2::write::ZlibDecoder::new(Sink::default()))
            } else {
                Self::RawDeflate(flate2::write::DeflateDecoder::new(Sink::default()))
            };
            return self.write(&held, cap);
        }
        match self {
            Self::Gzip(d) => d.write_all(input),
            Self::Zlib(d) => d.write_all(input),
            Self::RawDeflate(d) => d.write_all(input),
            Self::Brotli(d) => d.write_all(input),
            Self::Zstd(d) => d.write_all(input),
            Self::Deflate(_) => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        match self {
            Self::Gzip(d) => d.try_finish(),
            Self::Zlib(d) => d.try_finish(),
            Self::RawDeflate(d) => d.try_finish(),
            Self::Brotli(d) => d.close(),
            Self::Zstd(d) => d.do_finish(),
            Self::Deflate(start) if start.is_empty() => Ok(()),
            Self::Deflate(_) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a deflate stream of one byte",
            )),
        }
    }
}

fn corrupt(e: impl std::fmt::Display) -> DecodeError {
    DecodeError::Corrupt(e.to_string())
}

/// The decoder of one body: its codings undone last first, as bytes arrive.
pub struct Decoder {
    /// The last-applied coding first.
    layers: Vec<Layer>,
    bounds: Bounds,
    read: u64,
    failed: Option<DecodeError>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("layers", &self.layers.len())
            .field("bounds", &self.bounds)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

/// How much encoded input is pushed through at a time (the output of one push is what
/// is held at once, at most the bound).
const PUSH: usize = 16 * 1024;

impl Decoder {
    /// A decoder for `codings` (in the order applied), within `bounds`.
    ///
    /// # Errors
    /// [`DecodeError::Corrupt`] when a decoder cannot be set up.
    pub fn new(codings: &[Coding], bounds: Bounds) -> Result<Self, DecodeError> {
        let layers = codings
            .iter()
            .rev()
            .map(|c| Layer::new(*c))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            layers,
            bounds,
            read: 0,
            failed: None,
        })
    }

    /// The decoded bytes of the next `input`.
    ///
    /// # Errors
    /// [`DecodeError`]; the decoder stays failed.
    pub fn feed(&mut self, input: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        for piece in input.chunks(PUSH) {
            self.read += piece.len() as u64;
            out.extend(self.push(piece, false)?);
        }
        Ok(out)
    }

    /// The decoded bytes the end of the input releases (the body is over).
    ///
    /// # Errors
    /// [`DecodeError`]: the input ended inside a coded stream, or a bound.
    pub fn finish(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.push(&[], true)
    }

    fn push(&mut self, input: &[u8], last: bool) -> Result<Vec<u8>, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let cap = self.bounds.allowed(self.read);
        let mut data = input.to_vec();
        for layer in &mut self.layers {
            let mut result = layer.write(&data, cap);
            if last && result.is_ok() {
                result = layer.finish();
            }
            let (over, taken) = match layer.sink() {
                Some(sink) => (sink.over, std::mem::take(&mut sink.buf)),
                None => (false, Vec::new()),
            };
            if let Err(e) = result {
                let err = if over { DecodeError::Bomb } else { corrupt(e) };
                self.failed = Some(err.clone());
                return Err(err);
            }
            data = taken;
        }
        Ok(data)
    }
}

/// A whole body decoded.
///
/// # Errors
/// [`DecodeError`].
pub fn decode_all(
    codings: &[Coding],
    bytes: &[u8],
    bounds: Bounds,
) -> Result<Vec<u8>, DecodeError> {
    let mut d = Decoder::new(codings, bounds)?;
    let mut out = d.feed(bytes)?;
    out.extend(d.finish()?);
    Ok(out)
}

#[cfg(test)]
mod tests;
