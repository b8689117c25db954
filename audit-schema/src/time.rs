//! `ts` and `since`: RFC 3339, UTC, milliseconds (`2026-01-01T00:00:00.000Z`), the one
//! format of both logs.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A time in whole milliseconds since the Unix epoch, written `YYYY-MM-DDTHH:MM:SS.mmmZ`.
/// Times before the epoch clamp to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Now, to the millisecond.
    #[must_use]
    pub fn now() -> Self {
        Self::from(SystemTime::now())
    }

    /// As a `SystemTime`.
    #[must_use]
    pub fn system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS.mmmZ` (exactly that form); `None` for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 24 || b[23] != b'Z' {
            return None;
        }
        for (i, sep) in [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
        ] {
            if b[i] != sep {
                return None;
            }
        }
        let num = |from: usize, to: usize| -> Option<u64> {
            let part = s.get(from..to)?;
            if !part.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
        let (h, mi, sec, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 59 {
            return None;
        }
        let days = u64::try_from(days_from_civil(i64::try_from(y).ok()?, mo, d)).ok()?;
        Some(Self(
            ((days * 86_400 + h * 3600 + mi * 60 + sec) * 1000) + ms,
        ))
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        Self(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }
}

impl Timestamp {
    /// Its written form, digit by digit (no formatting machinery: every audit line carries
    /// one), when the year has four digits, as it will until 9999.
    pub(crate) fn ascii(self) -> Option<[u8; 24]> {
        let secs = self.0 / 1000;
        let (y, m, d) = civil_from_days(i64::try_from(secs / 86_400).ok()?);
        let y = u64::try_from(y).ok().filter(|y| *y <= 9999)?;
        let rem = secs % 86_400;
        let mut b = *b"0000-00-00T00:00:00.000Z";
        for (at, width, v) in [
            (0, 4, y),
            (5, 2, u64::from(m)),
            (8, 2, u64::from(d)),
            (11, 2, rem / 3600),
            (14, 2, (rem % 3600) / 60),
            (17, 2, rem % 60),
            (20, 3, self.0 % 1000),
        ] {
            let mut v = v;
            for slot in b[at..at + width].iter_mut().rev() {
                // A decimal digit: below 10.
                #[allow(clippy::cast_possible_truncation)]
                let digit = (v % 10) as u8;
                *slot = b'0' + digit;
                v /= 10;
            }
        }
        Some(b)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ascii() {
            Some(b) => f.write_str(std::str::from_utf8(&b).map_err(|_| fmt::Error)?),
            None => self.write_any_year(f),
        }
    }
}

impl Timestamp {
    /// The written form through `write!`: any year (five digits and more past 9999).
    pub(crate) fn write_any_year(self, f: &mut impl fmt::Write) -> fmt::Result {
        let secs = self.0 / 1000;
        let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60,
            self.0 % 1000
        )
    }
}

/// `t` as the logs write it (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
#[must_use]
pub fn rfc3339_ms(t: SystemTime) -> String {
    Timestamp::from(t).to_string()
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.ascii() {
            Some(b) => s.serialize_str(std::str::from_utf8(&b).map_err(serde::ser::Error::custom)?),
            None => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format_args!(
                "not an RFC 3339 UTC time with milliseconds: {s:?}"
            ))
        })
    }
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

/// Its inverse: (year, month, day) to days since 1970-01-01.
fn days_from_civil(y: i64, m: u64, d: u64) -> i64 {
    let (m, d) = (i64::try_from(m).unwrap_or(1), i64::try_from(d).unwrap_or(1));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_back() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_827_696_789, "2000-02-29T12:34:56.789Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (1_798_761_599_999, "2026-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(Timestamp(ms).to_string(), text);
            assert_eq!(Timestamp::parse(text), Some(Timestamp(ms)), "{text}");
        }
        for bad in [
            "",
            "2026-01-01T00:00:00Z",
            "2026-13-01T00:00:00.000Z",
            "2026-01-01 00:00:00.000Z",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
        }
    }

    /// The digit-by-digit form every line uses is the `write!` form, over the whole range
    /// it covers; past 9999 the `write!` form is used, in the log and on screen alike.
    #[test]
    fn the_fast_form_is_the_formatted_one() {
        let last = 253_402_300_799_999_u64; // 9999-12-31T23:59:59.999Z
        let mut ms = 1_u64;
        while ms <= last {
            for t in [ms, ms - 1, last - ms, ms * 7 + 13] {
                let t = Timestamp(t.min(last));
                let mut slow = String::new();
                t.write_any_year(&mut slow).unwrap();
                let fast = t.ascii().map(|b| String::from_utf8(b.to_vec()).unwrap());
                assert_eq!(fast.as_deref(), Some(slow.as_str()), "{}", t.0);
                assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{slow}\""));
            }
            ms = ms * 3 + 1;
        }
        let far = Timestamp(last + 1);
        assert_eq!(far.ascii(), None);
        assert_eq!(far.to_string(), "10000-01-01T00:00:00.000Z");
        assert_eq!(
            serde_json::to_string(&far).unwrap(),
            "\"10000-01-01T00:00:00.000Z\""
        );
    }
}
