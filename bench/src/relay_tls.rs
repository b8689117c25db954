//! `relay-tls`: the least an intercepting `CONNECT` relay can be, as a bare row beside the
//! airlock interception rows.
//!
//! Per connection: read the `CONNECT` head, connect to the target, answer `200`, finish a
//! TLS handshake with the client (serving the upstream's own certificate from `--tls-dir`,
//! which the client trusts through the test CA: no leaf is minted), one with the upstream
//! (trusting the test CA), then copy plaintext both ways (`tokio::io::copy_bidirectional`)
//! until both ends close. No HTTP parsing, policy, audit, credential or scrub: every byte is
//! decrypted once and encrypted once, with the same stack and the same choices as the proxy,
//! taken from it (`airlock_proxy::crypto`: rustls with the ring provider, AES-128-GCM
//! preferred on both sides and the client's order ignored, records capped at exactly 16 KiB
//! on the wire).
//!
//! So its CPU per MiB is the floor of the proxy's intercepted bulk on the machine at hand:
//! the AES-GCM work both ways, the kernel's loopback TCP for two connections, and tokio's
//! and rustls's buffering. It is a measuring instrument, not a proxy: it trusts its client
//! and runs only inside the benchmark's namespace, on one thread like the proxy.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use airlock_proxy::crypto;
use anyhow::{Context, bail};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Serves intercepted `CONNECT` tunnels on `listen` until killed.
pub async fn run(listen: &str, tls_dir: &Path) -> anyhow::Result<()> {
    let mut server = Arc::unwrap_or_clone(crate::tls::server_with(tls_dir, crypto::provider())?);
    server.ignore_client_order = true;
    server.max_fragment_size = Some(crypto::MAX_FRAGMENT_SIZE);
    let acceptor = TlsAcceptor::from(Arc::new(server));
    let mut client = Arc::unwrap_or_clone(crate::tls::client_with(
        &tls_dir.join("ca.pem"),
        crypto::provider(),
    )?);
    client.max_fragment_size = Some(crypto::MAX_FRAGMENT_SIZE);
    let connector = TlsConnector::from(Arc::new(client));
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, connector) = (acceptor.clone(), connector.clone());
        tokio::spawn(async move {
            if let Err(e) = serve(conn, &acceptor, &connector).await {
                eprintln!("relay-tls: {e:#}");
            }
        });
    }
}

/// One intercepted tunnel, from its `CONNECT` head to both ends closed.
async fn serve(
    mut client: TcpStream,
    acceptor: &TlsAcceptor,
    connector: &TlsConnector,
) -> anyhow::Result<()> {
    client.set_nodelay(true)?;
    let target = connect_head(&mut client).await?;
    let upstream = TcpStream::connect(&target)
        .await
        .with_context(|| format!("connecting to {target}"))?;
    upstream.set_nodelay(true)?;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    let host = target.rsplit_once(':').map_or(target.as_str(), |(h, _)| h);
    let name = match host.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(host.to_owned()).context("target name")?,
    };
    let (mut agent, mut origin) = tokio::try_join!(
        async { acceptor.accept(client).await.context("TLS with the client") },
        async {
            connector
                .connect(name, upstream)
                .await
                .context("TLS with the upstream")
        },
    )?;
    tokio::io::copy_bidirectional(&mut agent, &mut origin).await?;
    Ok(())
}

/// Reads the `CONNECT` head (the client sends nothing more before the `200`); its target.
async fn connect_head(client: &mut TcpStream) -> anyhow::Result<String> {
    let mut head = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            bail!("client closed before its CONNECT head ended");
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some((target, _)) = crate::relay::parse_head(&head)? {
            return Ok(target);
        }
    }
}
