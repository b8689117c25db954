//! The human echo of the audit log: one compact line per record on stderr (at the `info`
//! level of `AIRLOCK_PROXY_LOG`), and the log's own state changes, gathered under the sink's
//! lock and written by the helper thread in one `write(2)` per batch.

use std::io::{self, Write};
use std::time::SystemTime;

use airlock_audit_schema::Timestamp;

use super::{Event, Record};
use crate::clock;

/// The compact human line of a record, written straight into the echo (no `String` of its
/// own: the echo is on by default, once per final line). Piece by piece rather than one
/// `write!` of a dozen arguments: the format machinery was most of the line's cost.
pub(super) struct Human<'a>(pub(super) &'a Record);

impl std::fmt::Display for Human<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rec = self.0;
        let mut n = itoa::Buffer::new();
        let event = rec.event.map_or("", Event::as_str);
        let cred = rec.credential.as_deref().unwrap_or("");
        for piece in [
            rec.decision.as_str(),
            " ",
            rec.kind.as_str(),
            if event.is_empty() { "" } else { "/" },
            event,
            " ",
            rec.method.as_deref().unwrap_or("-"),
            " ",
            rec.host.as_deref().unwrap_or("-"),
            ":",
        ] {
            f.write_str(piece)?;
        }
        f.write_str(n.format(rec.port.unwrap_or(0)))?;
        for piece in [
            rec.path.as_deref().unwrap_or(""),
            " ",
            rec.reason.map_or("-", |r| r.as_str()),
            if cred.is_empty() { "" } else { " credential=" },
            cred,
            " up=",
        ] {
            f.write_str(piece)?;
        }
        f.write_str(n.format(rec.bytes_up))?;
        f.write_str(" down=")?;
        f.write_str(n.format(rec.bytes_down))?;
        f.write_str(" ")?;
        f.write_str(n.format(rec.duration_ms))?;
        f.write_str("ms")?;
        for s in &rec.signals {
            f.write_str(" [")?;
            f.write_str(&s.describe())?;
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// The human line through `tracing` (records that never reach the writer).
pub(super) fn log_human(rec: &Record) {
    tracing::info!("{}", Human(rec));
}

/// The human echo waiting for the helper thread is dropped past this size (stderr is not
/// being read): the log itself never waits for stderr.
const HUMAN_MAX: usize = 1 << 20;

/// Appends a state change of the log to the human echo, in the subscriber's style (never
/// through `tracing` under the lock: a blocked stderr must not stop the log).
pub(super) fn notice(out: &mut String, level: &str, text: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "{} {level:>5} audit: {text}",
        clock::rfc3339_ms(SystemTime::now())
    );
}

/// Appends `rec`'s human line (when `info` is enabled), in the subscriber's style. Returns
/// whether it did.
pub(super) fn add_human(out: &mut String, rec: &Record) -> bool {
    if out.len() > HUMAN_MAX {
        return false;
    }
    if tracing::enabled!(tracing::Level::INFO) {
        use std::fmt::Write as _;
        let _ = write!(out, "{}", Timestamp::now());
        out.push_str("  INFO audit: ");
        let _ = write!(out, "{}", Human(rec));
        out.push('\n');
        return true;
    }
    false
}

/// One `write(2)` to stderr for the batch's human lines.
pub(super) fn write_human(out: &mut String) {
    if !out.is_empty() {
        let _ = io::stderr().lock().write_all(out.as_bytes());
        out.clear();
    }
}
