//! Spans of time as the CLI's flags take them: `90s`, `30m`, `2h`, `7d` (`--since`,
//! `--for`).

use std::time::Duration;

/// `text` as a span: digits and one unit (`s`, `m`, `h`, `d`); `None` for anything else.
#[must_use]
pub fn parse(text: &str) -> Option<Duration> {
    let unit: u64 = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    };
    let n = text.get(..text.len() - 1)?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Duration::from_secs(
        n.parse::<u64>().ok()?.checked_mul(unit)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_digits_and_one_unit() {
        assert_eq!(parse("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(parse("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("7d"), Some(Duration::from_secs(7 * 86_400)));
        for bad in ["", "h", "2", "2w", "-2h", "1.5h", "99999999999999999999d"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
