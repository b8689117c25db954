//! The TLS side: the agent's TLS accepted with a leaf of the appliance CA ([`serve_tls`]),
//! and the upstream TLS client configuration and its verification ([`Interception`]).

use std::sync::Arc;

use airlock_policy::Host;
use airlock_policy::reason::Reason;
use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};

use super::ctx::Ctx;
use super::route::Route;
use super::server::serve_http;
use crate::audit::{Record, Verdict};
use crate::ca::Ca;
use crate::leaf::{self, Leaves};
use crate::read_ahead::ReadAhead;
use crate::recent::Recent;
use crate::service;
use crate::shutdown::{Phase, reached};
use crate::tunnel;

use crate::upstream::Connected;

/// Setting up interception failed.
#[derive(Debug, thiserror::Error)]
pub enum InterceptionError {
    /// An `--upstream-ca` file is unusable.
    #[error("cannot use upstream CA file {path}: {detail}")]
    Roots {
        path: std::path::PathBuf,
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// What interception needs: the leaves and the upstream TLS client configuration (one,
/// shared). The credentials and detectors change with the policy: [`crate::snapshot::Rules`].
pub struct Interception {
    leaves: Leaves,
    pub(super) client: Arc<ClientConfig>,
    /// The git service port's per-start state (it always intercepts): when this proxy
    /// started, and the push tickets already taken.
    pub(super) service: service::ServiceState,
    /// What this session last sent to each host (`recent`): the next body, query or
    /// frame is searched joined to it.
    pub(super) recent: Arc<Recent>,
}

impl std::fmt::Debug for Interception {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interception")
            .field("leaves", &self.leaves)
            .finish_non_exhaustive()
    }
}

impl Interception {
    /// Leaves under `ca`; upstream roots are webpki-roots plus `extra_roots`.
    ///
    /// # Errors
    /// [`InterceptionError::Config`].
    pub fn new(
        ca: Ca,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> Result<Self, InterceptionError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for r in extra_roots {
            roots
                .add(r)
                .map_err(|e| InterceptionError::Config(e.to_string()))?;
        }
        let mut client = ClientConfig::builder_with_provider(crate::crypto::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| InterceptionError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        client.max_fragment_size = Some(crate::crypto::MAX_FRAGMENT_SIZE);
        Ok(Self {
            leaves: Leaves::new(Arc::new(ca), leaf::DEFAULT_CAPACITY),
            client: Arc::new(client),
            service: service::ServiceState::new(),
            recent: Arc::default(),
        })
    }

    /// Reads every certificate of a PEM file (`--upstream-ca`).
    ///
    /// # Errors
    /// [`InterceptionError::Roots`] when the file cannot be read or holds no certificate.
    pub fn read_roots(
        path: &std::path::Path,
    ) -> Result<Vec<CertificateDer<'static>>, InterceptionError> {
        use rustls::pki_types::pem::PemObject;
        let err = |detail: String| InterceptionError::Roots {
            path: path.to_owned(),
            detail,
        };
        let certs: Vec<_> = CertificateDer::pem_file_iter(path)
            .map_err(|e| err(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| err(e.to_string()))?;
        if certs.is_empty() {
            return Err(err("no certificate in it".into()));
        }
        Ok(certs)
    }

    /// The leaves (and through them the CA).
    #[must_use]
    pub const fn leaves(&self) -> &Leaves {
        &self.leaves
    }

    /// The git service port's per-start state.
    pub(crate) const fn service_state(&self) -> &service::ServiceState {
        &self.service
    }

    /// What this session last sent to each host.
    #[must_use]
    pub fn recent(&self) -> &Arc<Recent> {
        &self.recent
    }
}

/// A failed upstream handshake: a certificate problem is `upstream-certificate-invalid`,
/// anything else `upstream-unreachable`.
pub(super) fn tls_reason(e: &std::io::Error) -> Reason {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(
            rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::InvalidCertRevocationList(_),
        ) => Reason::UpstreamCertificateInvalid,
        _ => Reason::UpstreamUnreachable,
    }
}

/// Why a connection that must be intercepted sent no usable ClientHello: bytes that are not
/// TLS at all (ssh, plain HTTP, a custom protocol) cannot be read, so only a
/// `network.passthrough` host may carry them (`not-inspectable`); a broken TLS hello is
/// `client-tls-failed`.
fn hello_failure(e: &std::io::Error) -> Reason {
    let not_tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| {
            matches!(
                tls,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        });
    if not_tls {
        Reason::NotInspectable
    } else {
        Reason::ClientTlsFailed
    }
}

/// Whether a handshake failed because the client went away (end of stream, reset, broken
/// pipe) rather than because of what it sent.
fn client_left(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
    )
}

/// Terminates the agent's TLS on an intercepted connection to `route.target` and serves
/// its requests. `pre` is the TCP connection already made to the target. Returns how the
/// connection ended, for the connection's audit line (`rec`, written by the caller).
pub(crate) async fn serve_tls<C>(
    client: C,
    ctx: Arc<Ctx>,
    route: Route,
    pre: Option<Connected>,
    rec: &mut Record,
) -> tunnel::End
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::clone(&ctx.shared);
    rec.intercepted = true;
    if let Ok(mut p) = ctx.pre.lock() {
        *p = pre;
    }
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        ReadAhead::new(client),
    );
    // A client that never finishes its handshake is cut at shutdown like any other.
    let mut phase = shared.shutdown.subscribe();
    let hello = tokio::select! {
        r = tokio::time::timeout(shared.limits.header_read_timeout, acceptor) => r,
        () = reached(&mut phase, Phase::Stopping) => return tunnel::End::Shutdown,
    };
    let start = match hello {
        Ok(Ok(s)) => s,
        // Gone before a byte: nothing was refused (report mode keeps its `report`).
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return tunnel::End::Closed;
        }
        Ok(Err(e)) => {
            tracing::debug!("client hello from {}: {e}", ctx.peer);
            rec.decision = Verdict::Deny;
            rec.reason = Some(hello_failure(&e));
            return tunnel::End::Error;
        }
        Err(_) => return tunnel::End::Idle,
    };
    // No fronting: a server name, when sent, must be the checked target.
    if let Some(sni) = start.client_hello().server_name()
        && Host::parse(sni).ok().as_ref() != Some(&route.target.host)
    {
        rec.decision = Verdict::Deny;
        rec.reason = Some(Reason::SniMismatch);
        return tunnel::End::Closed;
    }
    let config = match shared
        .interception
        .leaves
        .server_config(route.target.host.as_str())
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            rec.decision = Verdict::Deny;
            rec.reason = Some(Reason::ClientTlsFailed);
            return tunnel::End::Error;
        }
    };
    let handshake = tokio::select! {
        r = tokio::time::timeout(shared.limits.header_read_timeout, start.into_stream(config)) => r,
        () = reached(&mut phase, Phase::Stopping) => return tunnel::End::Shutdown,
    };
    let tls = match handshake {
        Ok(Ok(t)) => t,
        // Gone in the middle of the handshake: the client left, nothing was refused (its
        // line says `abandoned` when no request went upstream).
        Ok(Err(e)) if client_left(&e) => {
            tracing::debug!("client {} left during its TLS handshake: {e}", ctx.peer);
            return tunnel::End::Closed;
        }
        Ok(Err(e)) => {
            tracing::info!("client TLS with {} failed: {e}", ctx.peer);
            rec.decision = Verdict::Deny;
            rec.reason = Some(Reason::ClientTlsFailed);
            return tunnel::End::Error;
        }
        Err(_) => return tunnel::End::Idle,
    };
    serve_http(tls, ctx, route).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConnection, Connection, ServerConnection};

    /// Record lengths on the wire after `conn` sends `len` bytes of data.
    fn record_sizes(conn: &mut Connection, len: usize) -> Vec<usize> {
        conn.set_buffer_limit(None);
        std::io::Write::write_all(&mut conn.writer(), &vec![7u8; len]).unwrap();
        let mut wire = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut wire).unwrap();
        }
        let mut sizes = Vec::new();
        let mut rest = &wire[..];
        while rest.len() >= 5 {
            let n = 5 + usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            sizes.push(n);
            rest = &rest[n..];
        }
        assert!(rest.is_empty(), "a cut record: {rest:?}");
        sizes
    }

    /// What `crypto::MAX_FRAGMENT_SIZE` promises, read off the wire of a real handshake
    /// between the two configurations the proxy uses (the agent-facing leaf, the upstream
    /// client): each side sends a long body in records of exactly 16 KiB plus one for the
    /// remainder.
    #[test]
    fn both_sides_send_full_records_of_exactly_sixteen_kib() {
        let ca = Ca::generate().unwrap();
        let root = ca.cert_der().clone();
        let interception = Interception::new(ca, vec![root]).unwrap();
        let leaf = interception.leaves.server_config("a.example").unwrap();
        let name = ServerName::try_from("a.example").unwrap();
        let mut client = Connection::from(
            ClientConnection::new(Arc::clone(&interception.client), name).unwrap(),
        );
        let mut server = Connection::from(ServerConnection::new(leaf).unwrap());
        // One flight from `from` to `to`.
        let flight = |from: &mut Connection, to: &mut Connection| {
            let mut wire = Vec::new();
            while from.wants_write() {
                from.write_tls(&mut wire).unwrap();
            }
            to.read_tls(&mut &wire[..]).unwrap();
            to.process_new_packets().unwrap();
        };
        while client.is_handshaking() || server.is_handshaking() {
            flight(&mut client, &mut server);
            flight(&mut server, &mut client);
        }
        assert_eq!(
            server.negotiated_cipher_suite().map(|s| s.suite()),
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
        let full = 100_000 / (crate::crypto::MAX_FRAGMENT_SIZE - 5);
        for (side, conn) in [("leaf", &mut server), ("upstream client", &mut client)] {
            let sizes = record_sizes(conn, 100_000);
            assert_eq!(sizes.len(), full + 1, "{side}: {sizes:?}");
            assert!(
                sizes[..full].iter().all(|&n| n == 16_384),
                "{side}: {sizes:?}"
            );
        }
    }
}
