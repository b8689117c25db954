//! Authentication: the peer must be the agent's uid, then the request must carry a valid
//! HMAC, a fresh timestamp and an unused nonce, within the rate limit.

use super::Server;
use crate::argv::Refusal;
use airlock_wire::auth::DEFAULT_RATE;
use airlock_wire::frame::{self, MAX_FRAME};
use airlock_wire::{Auth, FrameKind, Invocation, PROTOCOL_VERSION, Reason};
use std::os::unix::net::UnixStream;
use std::time::{Duration, SystemTime};

/// Largest auth header accepted.
const MAX_AUTH: usize = 4096;
/// How long a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl Server {
    /// Peer uid, then the signed request.
    pub(super) fn authenticate(
        &self,
        stream: &mut UnixStream,
        peer: Option<u32>,
    ) -> Result<Invocation, Refusal> {
        if peer != Some(self.agent_uid) {
            return Err(Refusal::new(
                Reason::PeerNotAgent,
                format!(
                    "connection from uid {peer:?}: the git API serves only the agent (uid {})",
                    self.agent_uid
                ),
            ));
        }
        let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
        let malformed = |what: &str| {
            Refusal::new(
                Reason::MalformedRequest,
                format!("malformed request: {what}"),
            )
        };
        let read = |s: &mut UnixStream, max: usize, kind: FrameKind| -> Result<Vec<u8>, Refusal> {
            match frame::read_frame(s, max) {
                Ok(Some(f)) if f.kind == kind => Ok(f.payload),
                Ok(Some(_)) => Err(malformed("unexpected frame")),
                Ok(None) => Err(malformed("connection closed early")),
                Err(airlock_wire::WireError::FrameTooLarge { len, max }) => Err(Refusal::new(
                    Reason::RequestTooLarge,
                    format!("request frame of {len} bytes exceeds {max}"),
                )),
                Err(e) => Err(malformed(&e.to_string())),
            }
        };
        let auth_bytes = read(stream, MAX_AUTH, FrameKind::Auth)?;
        let auth: Auth =
            frame::decode(&auth_bytes, "auth").map_err(|e| malformed(&e.to_string()))?;
        let body = read(stream, MAX_FRAME, FrameKind::Body)?;
        let verifier = || {
            self.verifier
                .lock()
                .map_err(|_| Refusal::new(Reason::Internal, "verifier poisoned"))
        };
        // Signature first (consumes nothing), then the body must parse, and only then does
        // the request take a rate token and its nonce: a malformed body costs neither.
        // (Each verdict is taken into a variable first: the guard must be gone before
        // `auth_refusal` locks again.)
        let checked = verifier()?.check(&auth, &body, SystemTime::now());
        let authentic = checked.map_err(|reason| self.auth_refusal(reason))?;
        let inv = Invocation::from_body(&body).map_err(|e| malformed(&e.to_string()))?;
        if inv.version != PROTOCOL_VERSION {
            return Err(Refusal::new(
                Reason::UnsupportedVersion,
                "the shim and the git API versions differ",
            ));
        }
        let admitted = verifier()?.admit(authentic, SystemTime::now());
        admitted.map_err(|reason| self.auth_refusal(reason))?;
        let _ = stream.set_read_timeout(None);
        Ok(inv)
    }

    /// The refusal of a request the verifier turned down, with what to do about it.
    pub(super) fn auth_refusal(&self, reason: Reason) -> Refusal {
        if reason == Reason::RateLimited {
            let rate = self.verifier.lock().map_or(DEFAULT_RATE, |v| v.rate());
            return Refusal::new(
                reason,
                format!(
                    "too many git requests: the git API runs at most {} a second ({} at once); \
                     wait a moment and run the command again (a script that runs git in a \
                     tight loop should pause between runs)",
                    rate.per_second, rate.burst
                ),
            );
        }
        Refusal::new(
            reason,
            format!(
                "request refused: {reason} (sign with the current session key, once, within 30 s)"
            ),
        )
    }
}
