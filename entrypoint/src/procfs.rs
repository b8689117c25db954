//! Readers of the kernel's own text files that more than one check needs:
//! `/proc/self/mountinfo` (preflight's mounts, the git layout's cover, the policy's
//! read-only mount) and the sizes in its options. Pure: text in, values out.

use std::path::PathBuf;

/// One mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub fstype: String,
    pub read_only: bool,
    /// `major:minor` of the filesystem: bind mounts of one tmpfs share it (and its size).
    pub dev: String,
    /// A tmpfs's `size=` in bytes; `None` without one or with `size=0` (both unbounded).
    pub size: Option<u64>,
}

/// A size as tmpfs's `size=` and `docker run --memory` spell it: bytes with an optional
/// `k`, `m`, `g` or `t` (binary multiples, either case). `None` for anything else
/// (percentages included: they depend on the host's RAM).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_lowercase() {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                _ => return None,
            };
            (text.get(..i)?, shift)
        }
        _ => (text, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// Undoes the octal escapes of `/proc/self/mountinfo` (`\040` for a space, ...).
pub(crate) fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let oct = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let (b'\\', Some(digits)) = (bytes[i], oct) {
            let value = digits
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            if let Ok(v) = u8::try_from(value) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo`; malformed lines are skipped (they then count as "not
/// mounted", which fails closed).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?;
            let options = fields.get(5)?;
            let dev = fields.get(2)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            // An unparsable size counts as none (refused: fails closed).
            let size = fields
                .get(sep + 3)
                .and_then(|opts| opts.split(',').find_map(|o| o.strip_prefix("size=")))
                .and_then(parse_size)
                .filter(|n| *n > 0);
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                fstype: (*fstype).to_owned(),
                read_only: options.split(',').any(|o| o == "ro"),
                dev: (*dev).to_owned(),
                size,
            })
        })
        .collect()
}
