//! Whether a `POST …/git-upload-pack` body is a git fetch request, read the way
//! `git-upload-pack` reads one: on a read-only host that serves git
//! ([`airlock_policy::Policy::fetch_exempt`]) only such a body passes, so the fetch exemption
//! cannot carry a login form, a JSON document or a smuggled request to a read-only host.
//!
//! A fetch request is pkt-lines (four hex digits of length, their own included, then the
//! payload; `0000` flush, `0001` delimiter, `0002` response end) whose payloads are, in
//! protocol v0/v1, `want <id>[ <capabilities>]`, `have <id>`, `shallow <id>`, `deepen <n>`,
//! `deepen-since <t>`, `deepen-not <ref>`, `filter <spec>` and `done`; in protocol v2,
//! `command=fetch` or `command=ls-refs`, the capability lines `agent=`, `object-format=`,
//! `server-option=`, `session-id=`, then (after the delimiter) the arguments of those two
//! commands (`want`, `want-ref`, `have`, `done`, `thin-pack`, `no-progress`, `include-tag`,
//! `ofs-delta`, `shallow`, `deepen*`, `filter`, `sideband-all`, `packfile-uris`,
//! `wait-for-done`; `symrefs`, `peel`, `ref-prefix`, `unborn`). Object ids are lowercase hex
//! of SHA-1 or SHA-256 length; every payload is printable ASCII ending in at most one `\n`,
//! at most [`MAX_LINE`] bytes. The body may be gzip-encoded (git compresses every request
//! over 1 KiB); decoded it is at most [`MAX_FETCH_BODY`] bytes, and so is the encoded one.

use std::io::Read as _;

/// Most bytes of a fetch request, encoded and decoded: about 80,000 `want` or `have` lines,
/// more than a clone of a repository with tens of thousands of refs sends in one request.
pub const MAX_FETCH_BODY: usize = 4 << 20;

/// Longest payload of one line (a capability list, a filter spec, a ref name).
pub const MAX_LINE: usize = 1024;

/// Lines that take one object id.
const WITH_ID: [&str; 3] = ["want", "have", "shallow"];
/// Lines that take free text (a number, a time, a ref, a filter, a prefix).
const WITH_TEXT: [&str; 8] = [
    "deepen",
    "deepen-since",
    "deepen-not",
    "filter",
    "want-ref",
    "ref-prefix",
    "packfile-uris",
    "oid",
];
/// Lines of one word.
const BARE: [&str; 11] = [
    "done",
    "thin-pack",
    "no-progress",
    "include-tag",
    "ofs-delta",
    "deepen-relative",
    "sideband-all",
    "wait-for-done",
    "symrefs",
    "peel",
    "unborn",
];
/// Protocol v2 capability lines (`key=value`) before the arguments.
const CAPABILITIES: [&str; 4] = ["agent", "object-format", "server-option", "session-id"];
/// Protocol v2 commands that read.
const COMMANDS: [&str; 2] = ["fetch", "ls-refs"];

/// The body as the upstream reads it, from its `Content-Encoding` (none, or `gzip`): at
/// most [`MAX_FETCH_BODY`] bytes decoded.
///
/// # Errors
/// Why it is not a fetch request's body (another encoding, a gzip stream that does not
/// decode or decodes past the bound).
pub fn decoded<'a>(
    body: &'a [u8],
    encoding: Option<&[u8]>,
) -> Result<std::borrow::Cow<'a, [u8]>, &'static str> {
    match encoding.map(<[u8]>::trim_ascii) {
        None => Ok(std::borrow::Cow::Borrowed(body)),
        Some(e) if e.eq_ignore_ascii_case(b"identity") => Ok(std::borrow::Cow::Borrowed(body)),
        Some(e) if e.eq_ignore_ascii_case(b"gzip") || e.eq_ignore_ascii_case(b"x-gzip") => {
            let mut out = Vec::new();
            let limit = u64::try_from(MAX_FETCH_BODY).unwrap_or(u64::MAX) + 1;
            flate2::read::GzDecoder::new(body)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|_| "a gzip body that does not decode")?;
            if out.len() > MAX_FETCH_BODY {
                return Err("a body larger than a fetch request once decoded");
            }
            Ok(std::borrow::Cow::Owned(out))
        }
        Some(_) => Err("a content-encoding git does not send"),
    }
}

/// Checks that `body` (decoded) is a git fetch request.
///
/// # Errors
/// Why it is not one (a line git would not send, a packet that does not parse).
pub fn check(body: &[u8]) -> Result<(), &'static str> {
    if body.len() > MAX_FETCH_BODY {
        return Err("a body larger than a fetch request");
    }
    if body.is_empty() {
        return Err("an empty body");
    }
    let mut rest = body;
    while !rest.is_empty() {
        let Some(len) = rest.get(..4).and_then(pkt_len) else {
            return Err("not pkt-lines");
        };
        if len <= 2 {
            rest = &rest[4..]; // flush, delimiter, response end
            continue;
        }
        if len < 4 || len > rest.len() {
            return Err("a pkt-line longer than the body");
        }
        line(&rest[4..len])?;
        rest = &rest[len..];
    }
    Ok(())
}

/// The length a pkt-line header announces (`0000`-`0002` are the special packets).
fn pkt_len(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let n = usize::from_str_radix(text, 16).ok()?;
    (n <= 2 || n > 4).then_some(n)
}

/// One payload: a line of the fetch vocabulary.
fn line(payload: &[u8]) -> Result<(), &'static str> {
    let text = payload.strip_suffix(b"\n").unwrap_or(payload);
    if text.is_empty() || text.len() > MAX_LINE {
        return Err("a line of the wrong size");
    }
    if !text.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err("a line with bytes git does not send");
    }
    let text = std::str::from_utf8(text).map_err(|_| "not text")?;
    if let Some((key, value)) = text.split_once('=')
        && !key.contains(' ')
    {
        return match key {
            "command" if COMMANDS.contains(&value) => Ok(()),
            "command" => Err("a protocol v2 command that is not a fetch"),
            k if CAPABILITIES.contains(&k) => Ok(()),
            _ => Err("a line git does not send in a fetch"),
        };
    }
    let (word, arg) = match text.split_once(' ') {
        Some((w, a)) => (w, Some(a)),
        None => (text, None),
    };
    match (word, arg) {
        (w, Some(arg)) if WITH_ID.contains(&w) => {
            // v0's first `want` carries the capabilities after its id.
            let (id, caps) = arg.split_once(' ').unwrap_or((arg, ""));
            if !object_id(id) || (!caps.is_empty() && w != "want") {
                return Err("an object id git would not send");
            }
            Ok(())
        }
        (w, Some(arg)) if WITH_TEXT.contains(&w) && !arg.is_empty() => Ok(()),
        (w, None) if BARE.contains(&w) => Ok(()),
        _ => Err("a line git does not send in a fetch"),
    }
}

/// A SHA-1 or SHA-256 object id as git writes it: lowercase hex.
fn object_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const ID: &str = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c";

    fn pkt(lines: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines {
            match *l {
                "0000" | "0001" | "0002" => out.extend_from_slice(l.as_bytes()),
                _ => out.extend_from_slice(format!("{:04x}{l}", l.len() + 4).as_bytes()),
            }
        }
        out
    }

    #[test]
    fn what_git_sends_is_a_fetch() {
        let want = format!(
            "want {ID} multi_ack_detailed side-band-64k thin-pack ofs-delta deepen-since deepen-not agent=git/2.43.0\n"
        );
        let v0 = pkt(&[
            &want,
            &format!("want {ID}\n"),
            &format!("shallow {ID}\n"),
            "deepen 1\n",
            "filter blob:none\n",
            "0000",
            &format!("have {ID}\n"),
            "done\n",
        ]);
        assert_eq!(check(&v0), Ok(()));
        let v2 = pkt(&[
            "command=fetch\n",
            "agent=git/2.43.0-Linux\n",
            "object-format=sha1\n",
            "0001",
            "thin-pack\n",
            "no-progress\n",
            "ofs-delta\n",
            &format!("want {ID}\n"),
            "want-ref refs/heads/main\n",
            &format!("have {ID}\n"),
            "done\n",
            "0000",
        ]);
        assert_eq!(check(&v2), Ok(()));
        let ls = pkt(&[
            "command=ls-refs\n",
            "agent=git/2.43.0\n",
            "0001",
            "peel\n",
            "symrefs\n",
            "unborn\n",
            "ref-prefix HEAD\n",
            "ref-prefix refs/heads/\n",
            "0000",
        ]);
        assert_eq!(check(&ls), Ok(()));
        let sha256 = pkt(&[&format!("want {}\n", "a".repeat(64)), "0000", "done\n"]);
        assert_eq!(check(&sha256), Ok(()));
        // Gzip, as git sends every request over 1 KiB.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&v2).unwrap();
        let gz = gz.finish().unwrap();
        let plain = decoded(&gz, Some(b"gzip")).unwrap();
        assert_eq!(check(&plain), Ok(()));
    }

    #[test]
    fn anything_else_is_not_a_fetch() {
        for bad in [
            b"{\"user\":\"me\",\"password\":\"hunter2\"}".to_vec(),
            b"PUT /x HTTP/1.1\r\nhost: a\r\n\r\n".to_vec(),
            Vec::new(),
            pkt(&["command=push\n", "0000"]),
            pkt(&["command=fetch\n", "0001", "post /login\n", "0000"]),
            pkt(&[&format!("want {}\n", ID.to_uppercase())]),
            pkt(&[&format!("have {ID} extra\n")]),
            pkt(&["want 1234\n"]),
            pkt(&["done\r\n"]),
            pkt(&["deepen \n"]),
            pkt(&["login=me\n"]),
            pkt(&[&format!("filter {}\n", "x".repeat(MAX_LINE))]),
            b"0003".to_vec(),
            b"00zz".to_vec(),
            b"0010want".to_vec(),
            pkt(&["done\n", "0000", "x"]),
        ] {
            assert!(check(&bad).is_err(), "{:?}", String::from_utf8_lossy(&bad));
        }
        let big = pkt(&[&format!("have {ID}\n")]).repeat(MAX_FETCH_BODY / 49 + 1);
        assert!(check(&big).is_err());
        assert!(decoded(b"x", Some(b"br")).is_err());
        assert!(decoded(b"not gzip", Some(b"gzip")).is_err());
        // A gzip bomb is not expanded past the bound.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![b'0'; MAX_FETCH_BODY + 1]).unwrap();
        let gz = gz.finish().unwrap();
        assert!(gz.len() < 64 * 1024);
        assert!(decoded(&gz, Some(b"gzip")).is_err());
    }
}
