//! The decision log's record of one request's outcome.

use airlock_audit_schema::Verdict;

use crate::argv::Refusal;
use crate::log::Decision;

/// The log record of one outcome: git's exit code or the refusal.
pub(super) fn decision<'a>(
    uid: Option<u32>,
    argv: &'a [String],
    outcome: Result<i32, &'a Refusal>,
) -> Decision<'a> {
    Decision {
        uid,
        argv,
        decision: if outcome.is_ok() {
            Verdict::Allow
        } else {
            Verdict::Deny
        },
        reason: outcome.err().map(|r| r.reason.as_str()),
        message: outcome.err().map(|r| r.message.as_str()),
        exit: outcome.ok(),
    }
}
