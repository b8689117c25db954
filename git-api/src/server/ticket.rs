//! The ticket of the git service port every network git command carries (`airlock_ticket`):
//! what the git API approved (a fetch of the remote's repositories, or exactly the ref
//! updates it judged), sealed with this start's service key, given to git as an HTTP header
//! through its environment ([`crate::run::HEADER_KEY`]). The proxy refuses a request on the
//! service port without one, and a push with any other update.

use super::Server;
use crate::argv::Refusal;
use airlock_ticket::{MAX_UPDATES, Op, RefUpdate, Ticket};
use airlock_wire::Reason;
use std::time::SystemTime;

impl Server {
    /// The configuration entry (`http.extraHeader=x-airlock-ticket: ...`) that lets git do
    /// `op` on `repositories` (for a push, exactly `updates`); `None` without a service key.
    pub(super) fn ticket(
        &self,
        op: Op,
        repositories: &[String],
        updates: Vec<RefUpdate>,
    ) -> Result<Option<String>, Refusal> {
        let Some(key) = &self.service_key else {
            return Ok(None);
        };
        if updates.len() > MAX_UPDATES {
            return Err(Refusal::new(
                Reason::PushFormNotSupported,
                format!(
                    "a push of more than {MAX_UPDATES} refs at once is not run: push them in smaller groups"
                ),
            ));
        }
        let mut repos = repositories.to_vec();
        repos.sort();
        repos.dedup();
        let ticket = Ticket::new(op, repos, updates, SystemTime::now())
            .map_err(|e| Refusal::new(Reason::Internal, format!("sealing the ticket: {e}")))?;
        Ok(Some(format!(
            "{}={}: {}",
            crate::run::HEADER_KEY,
            airlock_ticket::HEADER,
            ticket.seal(key)
        )))
    }
}

/// A ref update of a push as the ticket signs it (`old`: `None` for a new ref).
pub(super) fn update(dst: &str, old: Option<&str>, new: &str) -> Result<RefUpdate, Refusal> {
    RefUpdate::new(dst, old, new)
        .map_err(|e| Refusal::new(Reason::PushFormNotSupported, format!("pushing {dst}: {e}")))
}
