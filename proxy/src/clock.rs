//! Wall-clock timestamps for the audit log: RFC 3339, UTC, millisecond precision.
//!
//! Hand-rolled (days-to-civil conversion) so the proxy needs no date crate for one format.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`. Times before the epoch clamp to the epoch.
#[must_use]
pub fn rfc3339_ms(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let ms = since.subsec_millis();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn epoch() {
        assert_eq!(rfc3339_ms(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn known_instants() {
        // 2000-02-29T12:34:56.789Z (leap day in a century leap year)
        let t = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(rfc3339_ms(t), "2000-02-29T12:34:56.789Z");
        // 2026-11-22T02:55:51.000Z
        let t = UNIX_EPOCH + Duration::from_secs(1_795_316_151);
        assert_eq!(rfc3339_ms(t), "2026-11-22T02:55:51.000Z");
        // 2100-03-01 (2100 is not a leap year)
        let t = UNIX_EPOCH + Duration::from_secs(4_107_542_400);
        assert_eq!(rfc3339_ms(t), "2100-03-01T00:00:00.000Z");
    }

    #[test]
    fn before_epoch_clamps() {
        let t = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(rfc3339_ms(t), "1970-01-01T00:00:00.000Z");
    }
}
