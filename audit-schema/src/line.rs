//! Any line of `audit.jsonl`, for readers that take the lines as they come.

use serde::{Deserialize, Serialize};

use crate::proxy::{Outage, Record, Reload, Suppressed};
use crate::rotated::Rotated;

/// Any line of `audit.jsonl` and its rotated and archived files (tried in this order:
/// outage, suppressed, reload, rotated, record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Line<R = String> {
    Outage(Outage<R>),
    Suppressed(Suppressed<R>),
    Reload(Reload),
    Rotated(Box<Rotated>),
    Record(Box<Record<R>>),
}
