//! Orderly stop: signals, and the phases every task watches.
//!
//! `Running` → `Draining` (listeners stop accepting, HTTP connections finish their current
//! request, tunnels keep flowing) → `Stopping` (after the grace: tunnels are cut and audited).
//! SIGTERM and SIGINT start it; SIGHUP is no stop at all but [`Asked::Reload`] (the
//! workspace-secrets rescan: the caller re-reads the hand-off).

use tokio::sync::watch;

/// Where the process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Serving.
    Running,
    /// No new connections; in-flight work may finish.
    Draining,
    /// Grace over: cut what is left, audit it, exit.
    Stopping,
}

/// The phase broadcaster.
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: watch::Sender<Phase>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// Starts in [`Phase::Running`].
    #[must_use]
    pub fn new() -> Self {
        Self {
            tx: watch::Sender::new(Phase::Running),
        }
    }

    /// A receiver for [`reached`].
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.tx.subscribe()
    }

    /// Moves forward to `phase` (never backwards).
    pub fn advance(&self, phase: Phase) {
        self.tx.send_if_modified(|p| {
            if *p < phase {
                *p = phase;
                true
            } else {
                false
            }
        });
    }
}

/// Resolves once the phase is at least `phase` (or the broadcaster is gone).
pub async fn reached(rx: &mut watch::Receiver<Phase>, phase: Phase) {
    let _ = rx.wait_for(|p| *p >= phase).await;
}

/// The next accepted connection (with `TCP_NODELAY` set), or `None` once draining starts.
/// Accept errors (EMFILE and friends) are logged and retried after a short back-off instead
/// of spinning. Shared by every TCP listener of the proxy.
pub async fn accept_until_draining(
    listener: &tokio::net::TcpListener,
    phase: &mut watch::Receiver<Phase>,
    what: &str,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = reached(phase, Phase::Draining) => return None,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return Some((stream, peer));
            }
            Err(e) => {
                tracing::warn!("{what} accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a signal asks of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// SIGTERM or SIGINT (named): drain and exit.
    Stop(&'static str),
    /// SIGHUP: re-read the credential hand-off (the entrypoint's workspace-secrets rescan
    /// rewrote it) and swap in the rules built from it. Not a shutdown.
    Reload,
}

/// The proxy's signals, installed once at start (before the listeners answer, so a
/// SIGHUP is never the default action, which would kill the proxy).
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers for SIGTERM, SIGINT and SIGHUP.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal's request.
    pub async fn next(&mut self) -> Asked {
        tokio::select! {
            _ = self.term.recv() => Asked::Stop("SIGTERM"),
            _ = self.int.recv() => Asked::Stop("SIGINT"),
            _ = self.hup.recv() => Asked::Reload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn phases_only_move_forward() {
        let s = Shutdown::new();
        let mut rx = s.subscribe();
        s.advance(Phase::Stopping);
        s.advance(Phase::Draining);
        assert_eq!(*rx.borrow_and_update(), Phase::Stopping);
        reached(&mut rx, Phase::Draining).await;
    }
}
