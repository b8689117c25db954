//! Orderly stop: signals, and the phases every task watches.
//!
//! `Running` → `Draining` (listeners stop accepting, HTTP connections finish their current
//! request, tunnels keep flowing) → `Stopping` (after the grace: tunnels are cut and audited).

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

/// Resolves on the first SIGTERM or SIGINT.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub async fn signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
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
