//! Legible refusals of HTTPS: a client whose TLS connection to a denied host reached the
//! transparent listener gets the refusal as a real HTTP answer inside TLS, not a reset.
//!
//! The proxy finishes the handshake with a leaf of the appliance CA minted for the name the
//! client asked for (the checked SNI; never another), reads the request head, answers the
//! JSON denial (`403`, `x-airlock-error: <reason>`, the hint) and closes. Nothing is
//! forwarded and nothing is read past the head. A client that does not trust the CA fails
//! its handshake, as it failed before on the reset. The decision was audited before this
//! runs; this module only speaks it.

use std::time::Duration;

use airlock_policy::reason::Reason;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::deny;
use crate::intercept::Interception;
use crate::limits::Limits;

/// Largest request head read before answering (the answer does not depend on it).
const MAX_HEAD: usize = 16 * 1024;
/// How long the whole exchange may take.
const DEADLINE: Duration = Duration::from_secs(5);

/// Whether `reason` is a refusal of the destination itself (so the client should read it
/// as an answer from that destination), rather than of the way the client reached it.
#[must_use]
pub const fn speaks(reason: Reason) -> bool {
    !matches!(
        reason,
        Reason::AuditUnavailable
            | Reason::SniMismatch
            | Reason::EchRefused
            | Reason::UnknownHost
            | Reason::InvalidHost
            | Reason::UpstreamUnreachable
            | Reason::ResolveFailed
    )
}

/// Answers the denial of `host:port` inside TLS on `client` (whose ClientHello is unread).
pub(crate) async fn tls_denial<C>(
    client: C,
    interception: &Interception,
    limits: &Limits,
    host: &str,
    port: u16,
    reason: Reason,
) where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        let acceptor =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
        let start = tokio::time::timeout(limits.header_read_timeout, acceptor)
            .await
            .ok()?
            .ok()?;
        // Only the name that was judged: never a leaf for another.
        let sni = start
            .client_hello()
            .server_name()
            .map(str::to_ascii_lowercase);
        if sni.as_deref().map(|s| s.trim_end_matches('.')) != Some(host) {
            return None;
        }
        let config = match interception.leaves().server_config(host) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("legible denial for {host}: {e}");
                return None;
            }
        };
        let mut tls = start.into_stream(config).await.ok()?;
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            let n = tls.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let _ = tls.write_all(&deny::raw_denial(reason, host, port)).await;
        let _ = tls.shutdown().await;
        Some(())
    };
    if tokio::time::timeout(DEADLINE, exchange).await.is_err() {
        tracing::debug!("legible denial for {host}: the client took too long");
    }
}
