//! A refusal: the wire's reason code and the one line the agent reads.

use airlock_wire::Reason;

/// A refusal: the reason code and a message naming the rule and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable code.
    pub reason: Reason,
    /// One line for the agent.
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(reason: Reason, message: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            message: message.into(),
        }
    }
}
