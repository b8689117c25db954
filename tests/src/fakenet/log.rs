//! fakenet's JSON-lines log: one line per event, written with a single `write` on an
//! `O_APPEND` file so lines never interleave and are on disk as soon as they are logged.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::Value;

/// The shared log.
#[derive(Debug)]
pub struct Log {
    file: Mutex<File>,
}

impl Log {
    /// Opens (creating, appending) the log file.
    pub fn open(path: &Path) -> anyhow::Result<Log> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening fakenet log {}", path.display()))?;
        Ok(Log {
            file: Mutex::new(file),
        })
    }

    /// Appends one event; adds `ts_ms` (milliseconds since the epoch). A failed write is
    /// reported on stderr: the harness shows fakenet's stderr when a World fails.
    pub fn write(&self, mut event: Value) {
        if let Value::Object(map) = &mut event {
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            map.insert(
                "ts_ms".to_owned(),
                Value::from(u64::try_from(ms).unwrap_or(u64::MAX)),
            );
        }
        let mut line = event.to_string();
        line.push('\n');
        let mut file = match self.file.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Err(e) = file.write_all(line.as_bytes()) {
            eprintln!("fakenet: writing log line failed: {e}");
        }
    }
}
