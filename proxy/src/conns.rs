//! The open connections to destinations, so that a policy reload can re-judge them.
//!
//! Every connection that carries the agent's bytes to one destination for longer than a
//! request (a tunnel, a transparent connection, an intercepted TLS connection serving
//! requests) is [`Conns::register`]ed for its life. A reload asks [`Conns::refused_by`] the
//! new rules, which marks the connections whose destination they refuse and counts them (the
//! count goes on the reload line, written before the swap); once the new rules are in force
//! [`Conns::close_refused`] cuts the marked ones, each ending with `close-revoked`. Everything
//! the new rules still allow (an LLM stream in particular) stays up, untouched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::admission::{self, Port};
use crate::decide::Target;
use crate::snapshot::Rules;

/// The registry.
#[derive(Debug, Default)]
pub struct Conns {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
    /// Marked by the last [`Conns::refused_by`], cut by [`Conns::close_refused`].
    doomed: Mutex<Vec<watch::Sender<bool>>>,
}

#[derive(Debug)]
struct Entry {
    target: Target,
    cut: watch::Sender<bool>,
}

/// One registered connection; dropping it takes it out of the registry.
#[derive(Debug)]
pub struct Registration {
    id: u64,
    conns: Arc<Conns>,
    cut: watch::Receiver<bool>,
}

impl Registration {
    /// Resolves once a reload has revoked this connection's destination.
    pub async fn revoked(&mut self) {
        let _ = self.cut.wait_for(|c| *c).await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.conns
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Conns {
    /// Registers a connection to `target` until the returned guard is dropped.
    #[must_use]
    pub fn register(self: &Arc<Self>, target: &Target) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(false);
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                Entry {
                    target: target.clone(),
                    cut: tx,
                },
            );
        Registration {
            id,
            conns: Arc::clone(self),
            cut: rx,
        }
    }

    /// Runs `relay` (a connection to `target`) registered, until it ends or a reload revokes
    /// its destination ([`crate::tunnel::End::Revoked`]; dropping the relay closes both
    /// sockets).
    pub async fn guard(
        self: &Arc<Self>,
        target: &Target,
        relay: impl std::future::Future<Output = crate::tunnel::End>,
    ) -> crate::tunnel::End {
        let mut registration = self.register(target);
        tokio::select! {
            end = relay => end,
            () = registration.revoked() => crate::tunnel::End::Revoked,
        }
    }

    /// Connections open now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none is open.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks the open connections whose destination `rules` refuse (a denial, not a
    /// report-mode pass) and returns how many; nothing is cut yet.
    pub fn refused_by(&self, rules: &Rules) -> u64 {
        let doomed: Vec<watch::Sender<bool>> = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|e| {
                // An asked host stays: a connection to it was admitted by an approval, which
                // no revision of the policy takes back (a denial or a listed deny does).
                let a = admission::policy(&rules.policy, &e.target, Port::Exact);
                matches!(a.outcome, admission::Outcome::Deny(_))
            })
            .map(|e| e.cut.clone())
            .collect();
        let n = doomed.len() as u64;
        *self.doomed.lock().unwrap_or_else(PoisonError::into_inner) = doomed;
        n
    }

    /// Cuts the connections the last [`refused_by`](Self::refused_by) marked; returns how
    /// many were still open.
    pub fn close_refused(&self) -> u64 {
        let doomed =
            std::mem::take(&mut *self.doomed.lock().unwrap_or_else(PoisonError::into_inner));
        doomed.iter().filter(|tx| tx.send(true).is_ok()).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credentials;
    use airlock_policy::Policy;

    fn rules(allow: &str) -> Rules {
        let p = Policy::parse(
            &format!("[sandbox]\nname = \"box\"\n\n[network]\nallow = [{allow}]\n"),
            std::path::Path::new("p.toml"),
        )
        .unwrap();
        Rules::new(p, Credentials::none()).unwrap()
    }

    fn target(host: &str) -> Target {
        crate::decide::connect_target(&format!("{host}:443")).unwrap()
    }

    #[tokio::test]
    async fn a_reload_cuts_exactly_the_connections_it_refuses() {
        let conns = Arc::new(Conns::default());
        let mut kept = conns.register(&target("llm.example"));
        let mut gone = conns.register(&target("evil.example"));
        let dropped = conns.register(&target("evil.example"));
        drop(dropped);
        assert_eq!(conns.len(), 2);
        let n = conns.refused_by(&rules("\"llm.example\""));
        assert_eq!(n, 1);
        assert_eq!(conns.close_refused(), 1);
        tokio::time::timeout(std::time::Duration::from_secs(1), gone.revoked())
            .await
            .expect("the refused connection is cut");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), kept.revoked())
                .await
                .is_err(),
            "the allowed one stays"
        );
        drop(gone);
        assert_eq!(conns.len(), 1);
    }
}
