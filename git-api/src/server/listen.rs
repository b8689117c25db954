//! Accepting connections: one thread each, at most `max_connections` at once (the rest are
//! refused as busy), the peer's uid from `SO_PEERCRED`, and the denial frame.

use super::Server;
use super::audit::decision;
use crate::argv::Refusal;
use airlock_wire::frame::write_json;
use airlock_wire::{Denied, FrameKind, Reason};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Server {
    /// Accept connections forever, one thread each.
    pub fn serve(self: Arc<Server>, listener: &UnixListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let server = Arc::clone(&self);
            if server.active.fetch_add(1, Ordering::SeqCst) >= server.max_connections {
                server.active.fetch_sub(1, Ordering::SeqCst);
                let mut s = stream;
                let r = Refusal::new(
                    Reason::Busy,
                    "the git API is at its connection limit; retry",
                );
                server
                    .log
                    .unauthenticated(&decision(peer_uid(&s), &[], Err(&r)));
                deny(&mut s, &r);
                continue;
            }
            std::thread::spawn(move || {
                server.connection(stream);
                server.active.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}

pub(super) fn peer_uid(stream: &UnixStream) -> Option<u32> {
    nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}

pub(super) fn deny(stream: &mut UnixStream, r: &Refusal) {
    let _ = write_json(
        stream,
        FrameKind::Denied,
        &Denied::new(r.reason, r.message.clone()),
        "denied",
    );
}
