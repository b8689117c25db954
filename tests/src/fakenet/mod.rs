//! The fake internet's servers: HTTP, HTTPS, DNS and a UDP sink, run by the
//! `airlock-fakenet` binary inside a World's upstream namespace.
//!
//! Every listener logs what it receives (one JSON line per connection, HTTP request, DNS
//! query or datagram, flushed per line) so that tests can assert what reached upstream, and
//! that nothing did. Response contract (HTTP/1.1, plain and TLS alike):
//!
//! - any path: `200` JSON echo of the request (`server`, `from`, `tls`, `sni`, `method`,
//!   `path` (path and query), `uri` (request-target as received), `host`, `version`,
//!   `headers` (lowercase name → value, repeated names joined by `, `), `raw_headers`
//!   (`[name, value]` pairs in order), `body` (lossy UTF-8, first 64 KiB), `body_len`);
//! - `/bytes/<n>`: `n` bytes, byte `i` = `i % 256`, streamed in 16 KiB chunks with a
//!   `content-length` (`?chunked=1`: without one);
//! - `/upload`: reads the body, answers `{"len":n,"sha256":"<hex>"}`;
//! - `/sse?n=5&ms=200`: `text/event-stream`, `n` events `ms` apart, each sent as produced;
//! - `/slow?ms=1000`: sleeps, then echoes;
//! - `/status/<code>`: echoes with that status;
//! - `/redirect?to=<url>`: `302` to `url`;
//! - `/reflect`: the echo, plus every request header back as `x-reflect-<name>`;
//! - `/upgrade` with an `upgrade` header: `101`, then echoes raw bytes;
//! - with [`Config::git`] set, git smart-HTTP paths on that host are served by
//!   `git http-backend` (see [`git`]; logged as `http` lines like every request).
//!
//! DNS (UDP and TCP): A/AAAA from the zone (`*.name` keys are wildcards), NOERROR/empty for
//! other types of known names, NXDOMAIN for unknown names, and a TXT record
//! [`TXT_ANSWER`] for any name.
//!
//! Log line kinds: `conn` (TCP accepted), `tls` (handshake completed, with `sni`),
//! `tls_error` (handshake failed, with `sni` if the ClientHello arrived), `http`,
//! `http_error` (malformed HTTP), `dns`, `udp`.

mod dns;
pub mod git;
mod http;
mod log;
mod tls;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

pub use dns::{Answer, answer};
pub use log::Log;

/// The body of `/bytes/<len>`: byte `i` is `i % 256` (the contract above), for tests that
/// check what arrived byte for byte.
#[must_use]
pub fn bytes_pattern(len: usize) -> Vec<u8> {
    // A value mod 256 fits a byte.
    #[allow(clippy::cast_possible_truncation)]
    (0..len).map(|i| (i % 256) as u8).collect()
}

/// What fakenet serves; written as JSON by the harness, read by the binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// The test CA's certificate (PEM): the root every leaf chains to.
    pub ca_cert_pem: String,
    /// The test CA's private key (PEM, PKCS#8).
    pub ca_key_pem: String,
    /// Where to append the JSON log lines.
    pub log: PathBuf,
    /// Plain HTTP listeners.
    #[serde(default)]
    pub http: Vec<Listen>,
    /// HTTPS listeners.
    #[serde(default)]
    pub https: Vec<TlsListen>,
    /// DNS listeners (each on UDP and TCP).
    #[serde(default)]
    pub dns: Vec<Listen>,
    /// UDP sinks: log and echo every datagram.
    #[serde(default)]
    pub udp: Vec<Listen>,
    /// Name → addresses; keys are lowercase without trailing dot, `*.x` is a wildcard.
    #[serde(default)]
    pub zone: BTreeMap<String, Vec<IpAddr>>,
    /// Git smart HTTP served on one host's HTTPS listeners ([`git`]).
    #[serde(default)]
    pub git: Option<git::GitHttp>,
}

/// A plain listener: `{"ip": "...", "port": n}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listen {
    /// Address to bind.
    pub ip: IpAddr,
    /// Port to bind.
    pub port: u16,
}

impl Listen {
    /// The socket address to bind.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

/// A TLS listener and the names on its certificate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TlsListen {
    /// Address to bind.
    pub ip: IpAddr,
    /// Port to bind.
    pub port: u16,
    /// DNS names on the leaf certificate (the listener's IP is added as an IP SAN).
    pub names: Vec<String>,
}

impl TlsListen {
    /// The socket address to bind.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

/// The fixed string fakenet answers to every TXT query.
pub const TXT_ANSWER: &str = "airlock-fakenet-txt";

/// Binds every listener, then calls `ready` (the binary prints `ready`), then serves until the
/// process is killed.
pub async fn run(config: Config, ready: impl FnOnce()) -> anyhow::Result<()> {
    let log = Arc::new(Log::open(&config.log)?);
    let issuer = tls::Issuer::from_pem(&config.ca_cert_pem, &config.ca_key_pem)?;
    let zone = Arc::new(config.zone.clone());
    if let Some(g) = &config.git {
        git::install(g.clone());
    }
    let mut tasks = tokio::task::JoinSet::new();

    for l in &config.http {
        let listener = bind_tcp(l.addr()).await?;
        tasks.spawn(http::serve(listener, None, log.clone()));
    }
    for l in &config.https {
        let acceptor = issuer.server_config(&l.names, l.ip)?;
        let listener = bind_tcp(l.addr()).await?;
        tasks.spawn(http::serve(listener, Some(acceptor), log.clone()));
    }
    for l in &config.dns {
        let udp = bind_udp(l.addr()).await?;
        let tcp = bind_tcp(l.addr()).await?;
        tasks.spawn(dns::serve_udp(udp, zone.clone(), log.clone()));
        tasks.spawn(dns::serve_tcp(tcp, zone.clone(), log.clone()));
    }
    for l in &config.udp {
        let udp = bind_udp(l.addr()).await?;
        tasks.spawn(dns::serve_udp_sink(udp, log.clone()));
    }
    ready();
    while let Some(res) = tasks.join_next().await {
        res.context("fakenet listener task died")?
            .context("fakenet listener failed")?;
    }
    Ok(())
}

async fn bind_tcp(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding TCP {addr}"))
}

async fn bind_udp(addr: SocketAddr) -> anyhow::Result<tokio::net::UdpSocket> {
    tokio::net::UdpSocket::bind(addr)
        .await
        .with_context(|| format!("binding UDP {addr}"))
}
