//! The ref-update commands of a `git-receive-pack` request, read the way `git-receive-pack`
//! reads them, and the report-status answer that refuses them.
//!
//! A push's request body starts with pkt-lines (four hex digits of length, their own
//! included, then the payload): optional `shallow <id>` lines, then one command per ref,
//! `<old> SP <new> SP <ref>` (the first followed by `NUL <capabilities>`), then a flush
//! (`0000`); what follows (push options, the pack) is not a ref update. [`read`] reads up
//! to that flush and no further, within [`MAX_COMMANDS_BYTES`]; anything `git-receive-pack`
//! would not read as commands, or would read differently (uppercase object ids, a signed
//! push's certificate, a packet of the wrong length), is malformed.
//!
//! [`report`] is what git prints for a refused push: `! [remote rejected] <ref> (<why>)`
//! for every command, from a report-status (in band 1 when the client asked for a side
//! band, with the whole reason in band 2, which git prints as `remote: ...`).

use airlock_ticket::{RefUpdate, object_id_ok, ref_name_ok};

/// The command section may take at most this many bytes (a push of the most updates a
/// ticket signs takes a few kilobytes).
pub const MAX_COMMANDS_BYTES: usize = 64 * 1024;

/// Longest pkt-line (its four length digits included).
const MAX_PKT: usize = 65520;

/// What the client asked to be told (from the first command's capabilities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// `report-status` or `report-status-v2`: git reads an `ok`/`ng` line per ref.
    pub report_status: bool,
    /// `side-band-64k`: the answer comes in bands of up to 65515 bytes.
    pub side_band_64k: bool,
    /// `side-band`: the answer comes in bands of up to 995 bytes.
    pub side_band: bool,
}

/// The command section of a push.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Commands {
    /// Every ref update, in order.
    pub updates: Vec<RefUpdate>,
    /// What the client asked for.
    pub caps: Caps,
}

/// How far [`read`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The section is not complete yet: read more of the body.
    More,
    /// The whole section (up to and including its flush).
    Done(Commands),
    /// Not a command section `git-receive-pack` would read as such (why).
    Bad(&'static str),
}

/// Reads the command section at the start of `buf` (the body read so far).
#[must_use]
pub fn read(buf: &[u8]) -> Read {
    let mut pos = 0;
    let mut out = Commands::default();
    let mut first = true;
    loop {
        let Some(digits) = buf.get(pos..pos + 4) else {
            return more(buf);
        };
        let Some(len) = pkt_len(digits) else {
            return Read::Bad("a packet length that is not four hex digits");
        };
        match len {
            0 => return Read::Done(out),
            1..=3 => return Read::Bad("a delimiter or response-end packet among the commands"),
            4 => return Read::Bad("an empty packet among the commands"),
            n if n > MAX_PKT => return Read::Bad("a packet longer than git writes"),
            _ => {}
        }
        if pos + len > MAX_COMMANDS_BYTES {
            return Read::Bad("more ref-update commands than a push carries");
        }
        let Some(payload) = buf.get(pos + 4..pos + len) else {
            return more(buf);
        };
        pos += len;
        let line = payload.strip_suffix(b"\n").unwrap_or(payload);
        if let Some(id) = line.strip_prefix(b"shallow ") {
            if !first || !std::str::from_utf8(id).is_ok_and(object_id_ok) {
                return Read::Bad("a shallow line out of place or shape");
            }
            continue;
        }
        if line.starts_with(b"push-cert") {
            return Read::Bad("a signed push (push certificates are not carried)");
        }
        let (command, caps) = match line.iter().position(|b| *b == 0) {
            Some(nul) if first => (&line[..nul], Some(&line[nul + 1..])),
            Some(_) => return Read::Bad("capabilities after the first command"),
            None => (line, None),
        };
        if let Some(caps) = caps {
            out.caps = read_caps(caps);
        }
        first = false;
        match command_of(command) {
            Some(u) => out.updates.push(u),
            None => return Read::Bad("a command that is not <old> <new> <ref>"),
        }
    }
}

/// `More`, unless the section can no longer fit.
fn more(buf: &[u8]) -> Read {
    if buf.len() >= MAX_COMMANDS_BYTES {
        Read::Bad("more ref-update commands than a push carries")
    } else {
        Read::More
    }
}

fn pkt_len(digits: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(digits).ok()?;
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    usize::from_str_radix(text, 16).ok()
}

fn read_caps(caps: &[u8]) -> Caps {
    let mut c = Caps::default();
    for word in caps.split(|b| *b == b' ') {
        match word {
            b"report-status" | b"report-status-v2" => c.report_status = true,
            b"side-band-64k" => c.side_band_64k = true,
            b"side-band" => c.side_band = true,
            _ => {}
        }
    }
    c
}

/// `<old> SP <new> SP <ref>` with lowercase object ids of one length and a ref name a
/// ticket can carry.
fn command_of(command: &[u8]) -> Option<RefUpdate> {
    let text = std::str::from_utf8(command).ok()?;
    let mut f = text.splitn(3, ' ');
    let (old, new, name) = (f.next()?, f.next()?, f.next()?);
    if !object_id_ok(old) || !object_id_ok(new) || old.len() != new.len() || !ref_name_ok(name) {
        return None;
    }
    Some(RefUpdate {
        name: name.to_owned(),
        old: old.to_owned(),
        new: new.to_owned(),
    })
}

/// One pkt-line of `payload` (cut to fit one packet).
fn pkt(out: &mut Vec<u8>, payload: &[u8]) {
    let payload = &payload[..payload.len().min(MAX_PKT - 4)];
    out.extend_from_slice(format!("{:04x}", payload.len() + 4).as_bytes());
    out.extend_from_slice(payload);
}

/// A line for a packet: control characters (a ref name cannot hold any; a message could
/// quote one) shown as `?`, at most `max` bytes, ending in one newline.
fn line(text: &str, max: usize) -> Vec<u8> {
    let mut v: Vec<u8> = text
        .bytes()
        .map(|b| if b.is_ascii_control() { b'?' } else { b })
        .take(max)
        .collect();
    v.push(b'\n');
    v
}

/// The answer to a refused push, in the form its client asked for: a report-status with
/// `unpack ok` and `ng <ref> <why>` for each of `refs` (`why` one line each), in band 1
/// with `headline` in band 2 when the client asked for a side band; without report-status,
/// `headline` as an error git prints (`ERR`, or band 3).
#[must_use]
pub fn report(caps: Caps, refs: &[(&str, String)], headline: &str) -> Vec<u8> {
    let band_max = if caps.side_band_64k {
        Some(65515)
    } else if caps.side_band {
        Some(995)
    } else {
        None
    };
    let mut out = Vec::new();
    if !caps.report_status {
        match band_max {
            Some(_) => pkt(&mut out, &[&[3u8][..], &line(headline, 900)].concat()),
            None => pkt(&mut out, &[&b"ERR "[..], &line(headline, 900)].concat()),
        }
        return out;
    }
    let mut status = Vec::new();
    pkt(&mut status, b"unpack ok\n");
    for (name, why) in refs {
        pkt(&mut status, &line(&format!("ng {name} {why}"), 4000));
    }
    status.extend_from_slice(b"0000");
    let Some(max) = band_max else {
        return status;
    };
    pkt(&mut out, &[&[2u8][..], &line(headline, 900)].concat());
    for chunk in status.chunks(max) {
        pkt(&mut out, &[&[1u8][..], chunk].concat());
    }
    out.extend_from_slice(b"0000");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    fn p(s: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        pkt(&mut v, s);
        v
    }

    #[test]
    fn the_commands_up_to_their_flush_are_read_in_pieces() {
        let mut body = p(b"shallow 3333333333333333333333333333333333333333\n");
        body.extend(p(format!(
            "{A} {B} refs/heads/x\0report-status side-band-64k agent=git/2\n"
        )
        .as_bytes()));
        body.extend(p(format!("{A} {B} refs/heads/y").as_bytes()));
        body.extend_from_slice(b"0000PACK-and-then-anything\x00\xff");
        let want = Commands {
            updates: vec![
                RefUpdate {
                    name: "refs/heads/x".into(),
                    old: A.into(),
                    new: B.into(),
                },
                RefUpdate {
                    name: "refs/heads/y".into(),
                    old: A.into(),
                    new: B.into(),
                },
            ],
            caps: Caps {
                report_status: true,
                side_band_64k: true,
                side_band: false,
            },
        };
        let flush = body.windows(4).position(|w| w == b"0000").unwrap();
        for cut in 0..flush + 4 {
            assert_eq!(read(&body[..cut]), Read::More, "cut at {cut}");
        }
        for cut in flush + 4..=body.len() {
            assert_eq!(read(&body[..cut]), Read::Done(want.clone()), "cut at {cut}");
        }
        assert_eq!(read(b"0000"), Read::Done(Commands::default()));
    }

    #[test]
    fn what_receive_pack_would_read_otherwise_is_bad() {
        let cmd = |s: String| [p(s.as_bytes()), b"0000".to_vec()].concat();
        for (name, body) in [
            ("hex", b"zzzz".to_vec()),
            ("delim", b"0001".to_vec()),
            ("end", b"0002".to_vec()),
            ("three", b"0003".to_vec()),
            ("empty", b"0004".to_vec()),
            ("long", b"fff5".to_vec()),
            (
                "upper",
                cmd(format!("{} {B} refs/heads/x\0", "A".repeat(40))),
            ),
            ("short id", cmd(format!("111 {B} refs/heads/x\0"))),
            (
                "lengths",
                cmd(format!("{A} {} refs/heads/x\0", "2".repeat(64))),
            ),
            ("no ref", cmd(format!("{A} {B}\0"))),
            ("not refs/", cmd(format!("{A} {B} HEAD\0"))),
            ("space in ref", cmd(format!("{A} {B} refs/heads/a b\0"))),
            ("cert", cmd("push-cert\0report-status".into())),
            (
                "late caps",
                [
                    p(format!("{A} {B} refs/heads/x\0").as_bytes()),
                    p(format!("{A} {B} refs/heads/y\0report-status").as_bytes()),
                    b"0000".to_vec(),
                ]
                .concat(),
            ),
            (
                "late shallow",
                [
                    p(format!("{A} {B} refs/heads/x\0").as_bytes()),
                    p(format!("shallow {A}").as_bytes()),
                    b"0000".to_vec(),
                ]
                .concat(),
            ),
        ] {
            assert!(
                matches!(read(&body), Read::Bad(_)),
                "{name}: {:?}",
                read(&body)
            );
        }
        // Never complete within the bound: bad as soon as it cannot fit, not "more" forever.
        let line = p(format!("{A} {B} refs/heads/{}\n", "x".repeat(200)).as_bytes());
        let many: Vec<u8> = line
            .iter()
            .copied()
            .cycle()
            .take(MAX_COMMANDS_BYTES + 10)
            .collect();
        assert!(matches!(read(&many), Read::Bad(_)));
    }

    #[test]
    fn a_refusal_reads_as_report_status_in_the_bands_asked_for() {
        let refs = [("refs/heads/main", "airlock: no".to_owned())];
        let plain = report(
            Caps {
                report_status: true,
                ..Caps::default()
            },
            &refs,
            "headline",
        );
        assert_eq!(
            plain,
            b"000eunpack ok\n0023ng refs/heads/main airlock: no\n0000".to_vec()
        );
        let banded = report(
            Caps {
                report_status: true,
                side_band_64k: true,
                side_band: false,
            },
            &refs,
            "headline\x1b[2J",
        );
        let text = String::from_utf8_lossy(&banded);
        assert!(text.starts_with("0012\x02headline?[2J\n"), "{text:?}");
        assert!(
            text.contains("\x01000eunpack ok\n0023ng refs/heads/main airlock: no\n0000"),
            "{text:?}"
        );
        assert!(text.ends_with("0000"));
        assert_eq!(
            report(Caps::default(), &refs, "why"),
            b"000cERR why\n".to_vec()
        );
    }
}
