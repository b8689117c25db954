//! The proxy's record as its JSON line, written by hand: two of these go out per allowed
//! request before it is answered, and serde's writer escapes every key of every line (about
//! half of a line's cost). Here the keys are constant bytes and only values are escaped, by
//! serde_json's own rules; the tests hold every byte to `serde_json::to_vec` of the derive,
//! so the field list cannot drift from the schema unnoticed.

use std::net::SocketAddr;

use serde::Serialize;

use crate::proxy::{Record, addr};
use crate::time::Timestamp;

impl<R: Serialize> Record<R> {
    /// Appends this record's JSON line (without its newline) to `out`: the bytes
    /// `serde_json::to_writer(out, self)` writes, in about half the time.
    ///
    /// # Errors
    /// serde_json's error for the reason or the signals, which never fail for the schema's
    /// types (`out` may then hold part of the line).
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        out.extend_from_slice(b"{\"ts\":");
        timestamp(out, self.ts);
        out.extend_from_slice(b",\"session\":");
        string(out, &self.session);
        out.extend_from_slice(b",\"sandbox\":");
        string(out, &self.sandbox);
        out.extend_from_slice(b",\"container\":");
        opt_string(out, self.container.as_deref());
        out.extend_from_slice(b",\"uid\":");
        opt_number(out, self.uid.map(u64::from));
        if let Some(k) = self.agent_session {
            out.extend_from_slice(b",\"agent_session\":");
            opt_number(out, Some(u64::from(k)));
        }
        out.extend_from_slice(b",\"client\":");
        address(out, self.client.as_ref());
        out.extend_from_slice(b",\"kind\":");
        word(out, Some(self.kind.as_str()));
        out.extend_from_slice(b",\"event\":");
        word(out, self.event.map(|e| e.as_str()));
        out.extend_from_slice(b",\"method\":");
        opt_string(out, self.method.as_deref());
        out.extend_from_slice(b",\"host\":");
        opt_string(out, self.host.as_deref());
        out.extend_from_slice(b",\"port\":");
        opt_number(out, self.port.map(u64::from));
        out.extend_from_slice(b",\"path\":");
        opt_string(out, self.path.as_deref());
        out.extend_from_slice(b",\"decision\":");
        word(out, Some(self.decision.as_str()));
        out.extend_from_slice(b",\"rule\":");
        opt_string(out, self.rule.as_deref());
        out.extend_from_slice(b",\"reason\":");
        match &self.reason {
            Some(r) => serde_json::to_writer(&mut *out, r)?,
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"upstream\":");
        address(out, self.upstream.as_ref());
        out.extend_from_slice(b",\"upstream_local_port\":");
        opt_number(out, self.upstream_local_port.map(u64::from));
        out.extend_from_slice(b",\"intercepted\":");
        out.extend_from_slice(if self.intercepted { b"true" } else { b"false" });
        out.extend_from_slice(b",\"credential\":");
        opt_string(out, self.credential.as_deref());
        out.extend_from_slice(b",\"status\":");
        opt_number(out, self.status.map(u64::from));
        out.extend_from_slice(b",\"bytes_up\":");
        number(out, self.bytes_up);
        out.extend_from_slice(b",\"bytes_down\":");
        number(out, self.bytes_down);
        out.extend_from_slice(b",\"duration_ms\":");
        number(out, self.duration_ms);
        out.extend_from_slice(b",\"signals\":");
        if self.signals.is_empty() {
            out.extend_from_slice(b"[]");
        } else {
            serde_json::to_writer(&mut *out, &self.signals)?;
        }
        if let Some(id) = &self.approval {
            out.extend_from_slice(b",\"approval\":");
            string(out, id);
        }
        if let Some(chain) = &self.chain {
            out.extend_from_slice(b",\"chain\":\"");
            out.extend_from_slice(&chain.hex());
            out.push(b'"');
        }
        out.push(b'}');
        Ok(())
    }
}

fn timestamp(out: &mut Vec<u8>, ts: Timestamp) {
    out.push(b'"');
    match ts.ascii() {
        Some(b) => out.extend_from_slice(&b),
        None => {
            let mut s = String::new();
            let _ = ts.write_any_year(&mut s);
            out.extend_from_slice(s.as_bytes());
        }
    }
    out.push(b'"');
}

fn address(out: &mut Vec<u8>, a: Option<&SocketAddr>) {
    match a {
        None => out.extend_from_slice(b"null"),
        Some(SocketAddr::V4(v4)) => {
            let (buf, n) = addr::v4(v4);
            out.push(b'"');
            out.extend_from_slice(&buf[..n]);
            out.push(b'"');
        }
        // `[v6%scope]:port`: hex digits, colons, brackets and digits, nothing to escape.
        Some(v6) => {
            use std::io::Write as _;
            let _ = write!(out, "\"{v6}\"");
        }
    }
}

fn number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn opt_number(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => number(out, n),
        None => out.extend_from_slice(b"null"),
    }
}

/// One of the schema's closed-set strings (lowercase letters and `-`: nothing to escape).
fn word(out: &mut Vec<u8>, w: Option<&str>) {
    match w {
        Some(w) => {
            out.push(b'"');
            out.extend_from_slice(w.as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// `s` as a JSON string, escaped as serde_json escapes: `"` and `\`, the five short control
/// escapes, every other control character as `\u00xx` (lowercase hex); the rest as is.
fn string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(short);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::proxy::{Alphabet, Event, Kind, Record, Signal, Verdict, Who};
    use crate::time::Timestamp;

    /// The hand-written line, byte for byte serde_json's of the same record.
    fn same<R: serde::Serialize>(r: &Record<R>) {
        let mut fast = Vec::new();
        r.write_json(&mut fast).unwrap();
        let serde = serde_json::to_vec(r).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&serde)
        );
    }

    fn empty() -> Record {
        let who = Who::new("s", "b", None);
        let mut r = Record::new(&who, std::time::UNIX_EPOCH, Kind::Dns, None);
        r.decision = Verdict::Abandoned;
        r
    }

    #[test]
    fn an_empty_record_is_written_as_serde_writes_it() {
        same(&empty());
    }

    #[test]
    fn every_field_set_is_written_as_serde_writes_it() {
        let mut r = empty();
        r.ts = Timestamp(1_798_761_599_999);
        r.container = Some(Arc::from("c0ffee"));
        r.uid = Some(u32::MAX);
        r.agent_session = Some(u16::MAX);
        r.client = Some("127.0.0.1:56940".parse().unwrap());
        r.kind = Kind::GitService;
        r.event = Some(Event::CloseShutdown);
        r.method = Some("POST".into());
        r.host = Some("api.example.com".into());
        r.port = Some(65_535);
        r.path = Some("/v1/a b/%2F".into());
        r.decision = Verdict::Report;
        r.rule = Some("api.example.com".into());
        r.reason = Some("encoded-blob".into());
        r.upstream = Some("[2001:db8::7]:443".parse().unwrap());
        r.upstream_local_port = Some(0);
        r.intercepted = true;
        r.credential = Some("github,npm".into());
        r.status = Some(200);
        r.bytes_up = u64::MAX;
        r.bytes_down = 1;
        r.duration_ms = 10_000_000;
        r.signals = vec![
            Signal::EncodedBlob {
                alphabet: Alphabet::Hex,
                run: 4096,
            },
            Signal::HighEntropy {
                centibits: 793,
                bytes: 65_536,
            },
        ];
        same(&r);
        // A year past 9999 and a link-local v6 address with its scope.
        r.ts = Timestamp(253_402_300_800_000);
        r.client = Some("[fe80::1%2]:22".parse().unwrap());
        same(&r);
        for kind in [Kind::Connect, Kind::Http, Kind::Transparent, Kind::Dns] {
            r.kind = kind;
            same(&r);
        }
        for event in Event::ALL {
            r.event = Some(event);
            same(&r);
        }
        for decision in [Verdict::Allow, Verdict::Deny] {
            r.decision = decision;
            same(&r);
        }
        // A line about an approval names its item.
        r.approval = Some("3f2a9c1d".into());
        same(&r);
        // A record read back from a chained line carries its chain, last.
        r.chain = Some(crate::chain::GENESIS.next(b"{"));
        same(&r);
    }

    /// Log forging: the agent puts a line end and a forged record into its request path
    /// (and a quote-and-field into the host). The line stays one line, reads back as the
    /// same record, and the forged fields are only text inside the strings.
    #[test]
    fn attack_a_path_cannot_end_the_line_or_forge_a_field() {
        let mut r = empty();
        r.path = Some("/x\n{\"decision\":\"allow\",\"host\":\"evil.example\"}\r\n\u{2028}".into());
        r.host = Some("a.test\",\"decision\":\"allow".into());
        let mut out = Vec::new();
        r.write_json(&mut out).unwrap();
        assert!(
            !out.contains(&b'\n') && !out.contains(&b'\r'),
            "a raw line end"
        );
        let back: Record = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.decision, Verdict::Abandoned);
    }

    /// Every ASCII character, some beyond, and the ones that need escaping, in every
    /// string field the agent can influence (a path, a host, a method, a reason).
    #[test]
    fn strings_are_escaped_as_serde_escapes_them() {
        let mut all: String = (0_u8..=0x7f).map(char::from).collect();
        all.push_str("é€😀\u{2028}\u{fffd}");
        for s in [
            all.as_str(),
            "",
            "\"",
            "\\",
            "\u{0}",
            "a\"b\\c\nd\re\tf\u{8}g\u{c}h\u{1f}i\u{7f}",
        ] {
            let mut r = empty();
            r.path = Some(s.into());
            r.host = Some(s.into());
            r.method = Some(s.into());
            r.rule = Some(s.into());
            r.credential = Some(s.into());
            r.reason = Some(s.into());
            r.session = Arc::from(s);
            r.sandbox = Arc::from(s);
            r.container = Some(Arc::from(s));
            same(&r);
        }
    }
}
