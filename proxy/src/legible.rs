//! Legible refusals of HTTPS: a client whose TLS connection to a denied host reached the
//! transparent listener gets the refusal as a real HTTP answer inside TLS, not a reset.
//!
//! The proxy finishes the handshake with a leaf of the appliance CA minted for the name the
//! client asked for (the checked SNI; never another), reads one request head, answers the
//! refusal and closes: the JSON denial (`403`, `x-airlock-error: <reason>`, the hint), or
//! for git's first request the `ERR` packet git prints as `remote error:`. Nothing is
//! forwarded and no request body is read. A client that does not trust the CA fails its
//! handshake, as it failed before on the reset. The decision was audited before this runs;
//! this module only speaks it.
//!
//! An explicit `CONNECT` to a refused name is answered the same way ([`tunnel_denial`]):
//! the proxy grants the tunnel (`200`) only to speak the refusal inside it, because a
//! client reads nothing of a non-`2xx` answer to `CONNECT` but its status (curl: "CONNECT
//! tunnel failed, response 403"; pip and npm retry, then blame the network). Nothing is
//! dialed for it; a client that speaks plain HTTP in the tunnel gets the plain answer.

use std::convert::Infallible;
use std::time::Duration;

use airlock_policy::reason::Reason;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::deny::{self, ProxyBody};
use crate::intercept::Interception;
use crate::limits::Limits;

/// Largest request head read before answering (hyper's smallest buffer limit).
const MAX_HEAD: usize = 8 * 1024;
/// How long the whole exchange may take.
const DEADLINE: Duration = Duration::from_secs(5);
/// The first byte of a TLS record carrying a handshake (the ClientHello).
const TLS_HANDSHAKE: u8 = 0x16;

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

/// An audited refusal of `host:port`, as the client will read it.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub reason: Reason,
    pub host: String,
    pub port: u16,
    /// The rule that refused and the inbox item filed (`deny::commit_refusal`).
    pub named: deny::Named,
}

impl Refusal {
    /// The answer to `req`: git's ref advertisement holding an `ERR` line when git asks
    /// for one (git prints it; a `403` would be only "The requested URL returned error"),
    /// else the JSON denial.
    fn answer<B>(&self, req: &Request<B>) -> Response<ProxyBody> {
        let (reason, host, port) = (self.reason, self.host.as_str(), self.port);
        match git_service(req) {
            Some(service) => {
                let message = format!("airlock: {host} is refused ({reason}): {}", reason.hint());
                deny::git_refusal(reason, service, &message)
            }
            None => deny::denial_naming(reason, host, port, &self.named),
        }
    }
}

/// The service of a smart-HTTP ref advertisement request (`…/info/refs?service=…`).
fn git_service<B>(req: &Request<B>) -> Option<&'static str> {
    if !req.uri().path().ends_with("/info/refs") {
        return None;
    }
    match req.uri().query()? {
        "service=git-upload-pack" => Some("git-upload-pack"),
        "service=git-receive-pack" => Some("git-receive-pack"),
        _ => None,
    }
}

/// Speaks `refusal` inside TLS on `client`, whose ClientHello is unread.
pub(crate) async fn tls_denial<C>(
    client: C,
    interception: &Interception,
    limits: &Limits,
    refusal: &Refusal,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let host = refusal.host.as_str();
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
        let tls = start.into_stream(config).await.ok()?;
        answer_one(tls, refusal).await;
        Some(())
    };
    if tokio::time::timeout(DEADLINE, exchange).await.is_err() {
        tracing::debug!("legible denial for {host}: the client took too long");
    }
}

/// Speaks `refusal` inside a tunnel granted only to carry it: inside TLS when the client
/// starts a handshake ([`tls_denial`]), else as plain HTTP. Reads one byte before choosing.
pub(crate) async fn tunnel_denial<C>(
    mut client: C,
    interception: &Interception,
    limits: &Limits,
    refusal: &Refusal,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut first = [0u8; 1];
    let read = tokio::time::timeout(limits.header_read_timeout, client.read(&mut first)).await;
    let Ok(Ok(1)) = read else {
        return;
    };
    let client = crate::gate::Prefixed::new(bytes::Bytes::copy_from_slice(&first), client);
    if first[0] == TLS_HANDSHAKE {
        tls_denial(client, interception, limits, refusal).await;
    } else if tokio::time::timeout(DEADLINE, answer_one(client, refusal))
        .await
        .is_err()
    {
        tracing::debug!(
            "legible denial for {}: the client took too long",
            refusal.host
        );
    }
}

/// Reads one request head on `io` and answers it with `refusal`, then closes.
async fn answer_one<C>(io: C, refusal: &Refusal)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(|req: Request<Incoming>| {
        let answer = refusal.answer(&req);
        async move { Ok::<_, Infallible>(answer) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = served {
        tracing::debug!("legible denial for {}: {e}", refusal.host);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn git_reads_an_err_packet_and_everything_else_the_json_denial() {
        let refusal = Refusal {
            reason: Reason::BlockedByPolicy,
            host: "evil.test".into(),
            port: 443,
            named: deny::Named::default(),
        };
        let git = refusal.answer(&get("/o/r.git/info/refs?service=git-upload-pack"));
        assert_eq!(git.status(), 200);
        assert_eq!(
            git.headers()["content-type"],
            "application/x-git-upload-pack-advertisement"
        );
        assert_eq!(git.headers()["x-airlock-error"], "blocked-by-policy");
        for uri in ["/", "/o/r.git/info/refs", "/info/refs?service=other"] {
            let plain = refusal.answer(&get(uri));
            assert_eq!(plain.status(), 403, "{uri}");
            assert_eq!(plain.headers()["content-type"], "application/json");
        }
    }
}
