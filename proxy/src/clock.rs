//! Wall-clock timestamps for the audit log: RFC 3339, UTC, millisecond precision, in the one
//! format both audit logs share (`airlock_audit_schema::Timestamp`, hand-rolled there so no
//! date crate is needed for one format).

use std::time::SystemTime;

/// Formats `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`. Times before the epoch clamp to the epoch.
#[must_use]
pub fn rfc3339_ms(t: SystemTime) -> String {
    airlock_audit_schema::rfc3339_ms(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

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
