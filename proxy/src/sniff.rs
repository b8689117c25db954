//! Peeking at a client's first bytes: the TLS ClientHello's server name, or the HTTP
//! request's `Host` header. Pure, bounded, and total: any input yields an answer, never a
//! panic (a fuzz-style test below feeds it random and truncated input).
//!
//! Used by the transparent listener (where the host comes only from these bytes) and inside
//! `CONNECT` tunnels (where it must agree with the authority: no domain fronting).

/// Most bytes we ever look at before deciding. A ClientHello with post-quantum key shares
/// is ~2 KiB; one in several records is allowed up to this bound.
pub const MAX_SNIFF: usize = 16 * 1024;

/// What the first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniff {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// A TLS ClientHello; the server name if it carries one (raw, not yet canonical).
    Tls(Option<String>),
    /// A TLS ClientHello that carries the `encrypted_client_hello` extension (real or
    /// GREASE: they look alike by design); the outer server name.
    TlsEch(Option<String>),
    /// An HTTP/1.x request head (as `httparse` reads it); the name it asks for: the
    /// request target's authority (absolute or `CONNECT` form, port explicit) or else its
    /// single `Host` value, if any.
    Http(Option<String>),
    /// Starts like TLS or HTTP but is broken (bad lengths, a head `httparse` refuses,
    /// duplicate Host, a target and Host that disagree, oversize).
    Invalid,
    /// Some other protocol.
    Other,
}

/// Classifies `buf` (the bytes received so far).
#[must_use]
pub fn sniff(buf: &[u8]) -> Sniff {
    match buf.first() {
        None => Sniff::NeedMore,
        Some(0x16) => match client_hello_sni(buf) {
            Parse::NeedMore if buf.len() >= MAX_SNIFF => Sniff::Invalid,
            Parse::NeedMore => Sniff::NeedMore,
            Parse::Done(Hello { sni, ech: false }) => Sniff::Tls(sni),
            Parse::Done(Hello { sni, ech: true }) => Sniff::TlsEch(sni),
            Parse::Invalid => Sniff::Invalid,
        },
        Some(_) => http_host(buf),
    }
}

enum Parse {
    NeedMore,
    Done(Hello),
    Invalid,
}

/// What the proxy reads in a ClientHello.
struct Hello {
    sni: Option<String>,
    /// The `encrypted_client_hello` extension (0xfe0d) is present.
    ech: bool,
}

/// `encrypted_client_hello` (draft-ietf-tls-esni).
const EXT_ECH: usize = 0xfe0d;

/// A bounds-checked reader over a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    const fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn rest(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
}

/// Reassembles the handshake message from consecutive handshake records and finds the
/// `server_name` extension (RFC 6066 §3).
fn client_hello_sni(buf: &[u8]) -> Parse {
    // 1. Records → handshake bytes.
    let mut hs: Vec<u8> = Vec::new();
    let mut r = Reader::new(buf);
    let mut need: Option<usize> = None;
    loop {
        if need.is_some_and(|n| hs.len() >= n) {
            break;
        }
        if r.rest() < 5 {
            return Parse::NeedMore;
        }
        let (Some(ct), Some(major), Some(_minor), Some(len)) = (r.u8(), r.u8(), r.u8(), r.u16())
        else {
            return Parse::NeedMore;
        };
        if ct != 0x16 || major != 3 || len == 0 || len > 16_384 {
            return Parse::Invalid;
        }
        let Some(frag) = r.take(len) else {
            return Parse::NeedMore;
        };
        hs.extend_from_slice(frag);
        if need.is_none() && hs.len() >= 4 {
            if hs[0] != 0x01 {
                return Parse::Invalid; // not a ClientHello
            }
            let body = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
            if body + 4 > MAX_SNIFF {
                return Parse::Invalid;
            }
            need = Some(body + 4);
        }
    }
    let total = need.unwrap_or(0);
    let Some(msg) = hs.get(4..total) else {
        return Parse::Invalid;
    };
    // 2. ClientHello body.
    match parse_hello(msg) {
        Some(hello) => Parse::Done(hello),
        None => Parse::Invalid,
    }
}

/// `None`: malformed.
fn parse_hello(msg: &[u8]) -> Option<Hello> {
    let mut r = Reader::new(msg);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    let sid = usize::from(r.u8()?);
    if sid > 32 {
        return None;
    }
    r.take(sid)?;
    let cs = r.u16()?;
    if cs == 0 || cs % 2 != 0 {
        return None;
    }
    r.take(cs)?;
    let comp = usize::from(r.u8()?);
    if comp == 0 {
        return None;
    }
    r.take(comp)?;
    if r.rest() == 0 {
        return Some(Hello {
            sni: None,
            ech: false,
        }); // no extensions at all
    }
    let ext_len = r.u16()?;
    let mut exts = Reader::new(r.take(ext_len)?);
    let mut found: Option<String> = None;
    let mut seen_sni = false;
    let mut ech = false;
    while exts.rest() > 0 {
        let ty = exts.u16()?;
        let len = exts.u16()?;
        let data = exts.take(len)?;
        if ty == EXT_ECH {
            ech = true;
        }
        if ty != 0 {
            continue;
        }
        if seen_sni {
            return None; // duplicate extension: ambiguous, refuse
        }
        seen_sni = true;
        let mut d = Reader::new(data);
        let list_len = d.u16()?;
        let mut list = Reader::new(d.take(list_len)?);
        while list.rest() > 0 {
            let name_type = list.u8()?;
            let n = list.u16()?;
            let name = list.take(n)?;
            if name_type == 0 {
                if found.is_some() || n == 0 {
                    return None; // two host names, or an empty one
                }
                found = Some(std::str::from_utf8(name).ok()?.to_owned());
            }
        }
    }
    Some(Hello { sni: found, ech })
}

/// Most headers read in a sniffed head (the gate's limit is the proxy's real one; a head
/// with more is refused here rather than judged in part).
const MAX_HEADERS: usize = 128;

/// Methods whose request line is handed to the HTTP parser at once (ASCII case ignored);
/// any other token followed by a space is HTTP when its first line ends in `HTTP/...`.
const METHODS: [&[u8]; 10] = [
    b"GET", b"POST", b"PUT", b"HEAD", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE", b"PRI",
];

/// RFC 9110 `tchar`: what a method is made of.
const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// What the methods of the IANA registry look like (`PROPFIND`, `VERSION-CONTROL`):
/// capitals, `-` and `_`, at most 32 bytes. Lowercase or digit-bearing tokens (`ping-1`,
/// an SSH banner) are not waited on: servers refuse such methods.
fn method_like(token: &[u8]) -> bool {
    (1..=32).contains(&token.len())
        && token
            .iter()
            .all(|b| b.is_ascii_uppercase() || matches!(b, b'-' | b'_'))
}

/// An HTTP/1.x request head, read with `httparse` (the parser the gate and hyper use), so
/// the tunnel check sees the head an HTTP server sees.
///
/// A start that reads as a request line (a known method in any case, or a registry-like
/// one whose first line ends in ` HTTP/...`, then a space; leading empty lines ignored as
/// servers do) is HTTP:
/// it is parsed, and a head the parser refuses is [`Sniff::Invalid`] (a tunnel then fails
/// closed, never passes it unjudged). The name judged is the request target's authority
/// when it has one (absolute form `http://host[:port]/...` or `https://...`, where an
/// origin server prefers it to `Host`; authority form of a `CONNECT`, which an allowed
/// host acting as a proxy would follow), else the single `Host` header. Both present and
/// naming different places, userinfo in the authority, another scheme, or two `Host`
/// headers: [`Sniff::Invalid`].
fn http_host(buf: &[u8]) -> Sniff {
    let line = {
        let start = buf
            .iter()
            .position(|b| !matches!(b, b'\r' | b'\n'))
            .unwrap_or(buf.len());
        &buf[start..]
    };
    let method_len = line.iter().take_while(|b| is_tchar(**b)).count();
    let method = &line[..method_len];
    let known = METHODS.iter().any(|m| m.eq_ignore_ascii_case(method));
    let could_be_method = known
        || METHODS.iter().any(|m| {
            m.get(..method_len)
                .is_some_and(|p| p.eq_ignore_ascii_case(method))
        })
        || method_like(method);
    match line.get(method_len) {
        // Empty lines, or a token that may still become a method: wait.
        None if could_be_method => return undecided(buf),
        Some(b' ') if method_len > 0 && could_be_method => {}
        _ => return Sniff::Other,
    }
    if !known {
        let Some(eol) = line.iter().position(|b| *b == b'\n') else {
            return undecided(buf);
        };
        let first = &line[..eol];
        let first = first.strip_suffix(b"\r").unwrap_or(first);
        let version = first.rsplit(|b| *b == b' ').next().unwrap_or_default();
        if !version
            .get(..5)
            .is_some_and(|v| v.eq_ignore_ascii_case(b"HTTP/"))
        {
            return Sniff::Other;
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return undecided(buf),
        Err(_) => return Sniff::Invalid,
    }
    let mut host: Option<&str> = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Sniff::Invalid; // two Host headers: which one would upstream use?
            }
            let Ok(value) = std::str::from_utf8(h.value) else {
                return Sniff::Invalid;
            };
            host = Some(value.trim_matches([' ', '\t']));
        }
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Sniff::Invalid;
    };
    let authority = if method.eq_ignore_ascii_case("CONNECT") {
        match airlock_policy::split_host_port(target, 0) {
            Ok((h, port)) if port != 0 => h.authority(port),
            _ => return Sniff::Invalid,
        }
    } else if target.starts_with('/') || target == "*" {
        return Sniff::Http(host.map(str::to_owned));
    } else {
        match absolute_authority(target) {
            Some(a) => a,
            None => return Sniff::Invalid,
        }
    };
    if let Some(value) = host {
        let Ok((a_host, a_port)) = airlock_policy::split_host_port(&authority, 0) else {
            return Sniff::Invalid;
        };
        if airlock_policy::split_host_port(value, a_port) != Ok((a_host, a_port)) {
            return Sniff::Invalid; // the target and Host name different places
        }
    }
    Sniff::Http(Some(authority))
}

/// The authority of an absolute-form target (`http://` or `https://`, any case), with the
/// scheme's port made explicit; `None` for another scheme, userinfo or an unreadable host.
fn absolute_authority(target: &str) -> Option<String> {
    let (scheme, rest) = target.split_once("://")?;
    let default = if scheme.eq_ignore_ascii_case("http") {
        80
    } else if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        return None;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return None;
    }
    let (host, port) = airlock_policy::split_host_port(authority, default).ok()?;
    Some(host.authority(port))
}

/// An HTTP start not complete yet: wait, unless the size bound is reached.
fn undecided(buf: &[u8]) -> Sniff {
    if buf.len() >= MAX_SNIFF {
        Sniff::Invalid
    } else {
        Sniff::NeedMore
    }
}

/// Builds a minimal ClientHello (for tests here and in `tests/`).
#[doc(hidden)]
#[must_use]
pub fn test_client_hello(sni: Option<&str>) -> Vec<u8> {
    test_client_hello_with(sni, &[])
}

/// As [`test_client_hello`], with an `encrypted_client_hello` extension (an outer one, as
/// a client with an ECH config, or GREASE, sends it).
#[must_use]
pub fn test_client_hello_ech(sni: Option<&str>) -> Vec<u8> {
    // type 0xfe0d, then a made-up outer ECH payload (config id, enc, payload: opaque here).
    let mut ext = vec![0xfe, 0x0d, 0, 8];
    ext.extend_from_slice(&[0, 0, 1, 0, 1, 0x42, 0, 0]);
    test_client_hello_with(sni, &ext)
}

fn test_client_hello_with(sni: Option<&str>, extra_ext: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[3, 3]);
    body.extend_from_slice(&[7u8; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    let mut exts = Vec::new();
    if let Some(name) = sni {
        let n = name.as_bytes();
        let mut sn = Vec::new();
        let entry_len = u16::try_from(3 + n.len()).unwrap_or(u16::MAX);
        sn.extend_from_slice(&entry_len.to_be_bytes());
        sn.push(0);
        sn.extend_from_slice(&u16::try_from(n.len()).unwrap_or(u16::MAX).to_be_bytes());
        sn.extend_from_slice(n);
        exts.extend_from_slice(&[0, 0]);
        exts.extend_from_slice(&u16::try_from(sn.len()).unwrap_or(u16::MAX).to_be_bytes());
        exts.extend_from_slice(&sn);
    }
    // supported_versions: TLS 1.3
    exts.extend_from_slice(&[0, 0x2b, 0, 3, 2, 3, 4]);
    exts.extend_from_slice(extra_ext);
    body.extend_from_slice(&u16::try_from(exts.len()).unwrap_or(u16::MAX).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1u8];
    let bl = u32::try_from(body.len()).unwrap_or(0).to_be_bytes();
    hs.extend_from_slice(&bl[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&u16::try_from(hs.len()).unwrap_or(u16::MAX).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encrypted_client_hello_is_told_apart() {
        assert_eq!(
            sniff(&test_client_hello_ech(Some("front.example.com"))),
            Sniff::TlsEch(Some("front.example.com".into()))
        );
        assert_eq!(sniff(&test_client_hello_ech(None)), Sniff::TlsEch(None));
    }

    #[test]
    fn finds_the_server_name() {
        let hello = test_client_hello(Some("api.example.com"));
        assert_eq!(sniff(&hello), Sniff::Tls(Some("api.example.com".into())));
        assert_eq!(sniff(&test_client_hello(None)), Sniff::Tls(None));
    }

    #[test]
    fn every_truncation_asks_for_more() {
        let hello = test_client_hello(Some("api.example.com"));
        for cut in 0..hello.len() {
            assert_eq!(sniff(&hello[..cut]), Sniff::NeedMore, "cut at {cut}");
        }
    }

    #[test]
    fn hello_split_across_records() {
        let hello = test_client_hello(Some("split.example.com"));
        let hs = &hello[5..];
        let (a, b) = hs.split_at(20);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[0x16, 3, 1]);
            two.extend_from_slice(&u16::try_from(part.len()).unwrap().to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(sniff(&two), Sniff::Tls(Some("split.example.com".into())));
    }

    #[test]
    fn fronting_tricks_are_invalid() {
        // Two SNI extensions.
        let mut hello = test_client_hello(Some("a.example.com"));
        let ext_start = 5 + 4 + 2 + 32 + 1 + 4 + 2;
        let ext_len = usize::from(u16::from_be_bytes([hello[ext_start], hello[ext_start + 1]]));
        let exts = hello[ext_start + 2..ext_start + 2 + ext_len].to_vec();
        let sni_ext = exts[..4 + usize::from(u16::from_be_bytes([exts[2], exts[3]]))].to_vec();
        let mut doubled = exts.clone();
        doubled.extend_from_slice(&sni_ext);
        hello.truncate(ext_start);
        hello.extend_from_slice(&u16::try_from(doubled.len()).unwrap().to_be_bytes());
        hello.extend_from_slice(&doubled);
        let hs_len = hello.len() - 9;
        let b = u32::try_from(hs_len).unwrap().to_be_bytes();
        hello[6..9].copy_from_slice(&b[1..]);
        let rec_len = u16::try_from(hello.len() - 5).unwrap().to_be_bytes();
        hello[3..5].copy_from_slice(&rec_len);
        assert_eq!(sniff(&hello), Sniff::Invalid);
        // Not a ClientHello (ServerHello type 2).
        let mut sh = test_client_hello(Some("x.example.com"));
        sh[5] = 2;
        assert_eq!(sniff(&sh), Sniff::Invalid);
    }

    #[test]
    fn http_host_header() {
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: Example.com\r\nAccept: */*\r\n\r\n"),
            Sniff::Http(Some("Example.com".into()))
        );
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
            Sniff::Http(None)
        );
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"),
            Sniff::Invalid
        );
        assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: a"), Sniff::NeedMore);
        assert_eq!(sniff(b"GE"), Sniff::NeedMore);
        assert_eq!(sniff(b"SSH-2.0-OpenSSH_9.6\r\n"), Sniff::Other);
        assert_eq!(sniff(b"GET / HTTP/2\r\n\r\n"), Sniff::Invalid);
        // Client-first bytes that no server takes for a method are decided at once; a
        // registry-like method is waited on until its first line says what it is.
        assert_eq!(sniff(b"ping-1234"), Sniff::Other);
        assert_eq!(sniff(b"abc"), Sniff::Other);
        assert_eq!(sniff(b"PROPF"), Sniff::NeedMore);
        assert_eq!(sniff(b"get"), Sniff::NeedMore);
        assert_eq!(sniff(b"PROPFIND /x"), Sniff::NeedMore);
        assert_eq!(sniff(b"MYPROTO hello\r\n"), Sniff::Other);
    }

    /// Inside a CONNECT tunnel the head is read as an HTTP server reads it (issue 20): a
    /// `Host` that hides behind a space, an absolute-form or authority-form target naming
    /// another host, and a head no parser accepts are all refused.
    #[test]
    fn attack_tunnel_heads_are_read_as_servers_read_them() {
        use crate::decide::{check_inner_host, connect_target};
        use airlock_policy::Reason;
        let t = connect_target("allowed.com:80").unwrap();
        let judge = |head: &[u8]| check_inner_host(&t, &sniff(head));
        // What an honest client sends passes.
        for ok in [
            &b"GET / HTTP/1.1\r\nHost: allowed.com\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nhost:ALLOWED.com:80\r\n\r\n",
            b"GET http://allowed.com/x HTTP/1.1\r\nHost: allowed.com\r\n\r\n",
            b"GET http://allowed.com:80/x HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
            b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n",
        ] {
            assert_eq!(judge(ok), Ok(()), "{}", String::from_utf8_lossy(ok));
        }
        for bad in [
            // A space before the colon: no Host for a hand-split reader, a header for others.
            &b"GET / HTTP/1.1\r\nHost : evil.com\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost\t: evil.com\r\n\r\n",
            // The absolute-form authority wins over Host at the origin (RFC 9112 3.2.2).
            b"GET http://evil.com/ HTTP/1.1\r\nHost: allowed.com\r\n\r\n",
            b"GET http://evil.com/ HTTP/1.1\r\n\r\n",
            b"GET http://allowed.com@evil.com/ HTTP/1.1\r\nHost: allowed.com\r\n\r\n",
            b"GET https://allowed.com/ HTTP/1.1\r\n\r\n",
            // An allowed host that is itself a proxy must not be asked for another.
            b"CONNECT evil.com:443 HTTP/1.1\r\nHost: allowed.com\r\n\r\n",
            // Methods outside a fixed list, lowercase ones, bare LF line ends.
            b"PROPFIND / HTTP/1.1\r\nHost: evil.com\r\n\r\n",
            b"get / HTTP/1.1\r\nHost: evil.com\r\n\r\n",
            b"GET / HTTP/1.1\nHost: evil.com\n\n",
            // Heads no HTTP parser accepts.
            b"GET / HTTP/1.1\r\nHost: allowed.com\r\n folded: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: allowed.com\r\nX\0: y\r\n\r\n",
            b"GET /\r\n\r\n",
        ] {
            let v = judge(bad);
            assert!(
                matches!(v, Err(Reason::HostMismatch | Reason::MalformedRequest)),
                "{}: {v:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Fuzz-style: random bytes and random mutations/truncations of valid input must never
    /// panic, and a buffer at the size bound must always be decided.
    #[test]
    fn random_input_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = [
            test_client_hello(Some("api.example.com")),
            b"GET / HTTP/1.1\r\nHost: a.b\r\n\r\n".to_vec(),
        ];
        for i in 0..20_000 {
            let mut input = if i % 3 == 0 {
                let n = usize::try_from(next() % 600).unwrap();
                (0..n)
                    .map(|_| u8::try_from(next() % 256).unwrap())
                    .collect()
            } else {
                seeds[i % 2].clone()
            };
            for _ in 0..(next() % 8) {
                if input.is_empty() {
                    break;
                }
                let pos = usize::try_from(next()).unwrap() % input.len();
                match next() % 3 {
                    0 => input[pos] = u8::try_from(next() % 256).unwrap(),
                    1 => input.truncate(pos),
                    _ => input.insert(pos, u8::try_from(next() % 256).unwrap()),
                }
            }
            let _ = sniff(&input);
        }
        let big = vec![0x16u8; MAX_SNIFF + 10];
        assert_ne!(sniff(&big), Sniff::NeedMore);
        let mut big_http = b"GET / HTTP/1.1\r\n".to_vec();
        big_http.resize(MAX_SNIFF + 1, b'a');
        assert_eq!(sniff(&big_http), Sniff::Invalid);
    }
}
