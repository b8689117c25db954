//! Just enough HTTP/1.1 for a load generator and an upstream: request heads are written
//! from prepared bytes, response bodies are counted and thrown away.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Read size (also the size bulk bodies are read in).
const READ: usize = 64 * 1024;

/// How the client reaches the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// Straight to the upstream.
    Direct,
    /// `CONNECT` through the proxy, then requests inside the tunnel.
    Connect,
    /// Absolute-form requests to the proxy (plain HTTP forwarding).
    Plain,
    /// TLS straight to the upstream (trusting `--ca`: the test CA).
    DirectTls,
    /// `CONNECT`, then TLS with the proxy (trusting `--ca`: the proxy's exported CA).
    Intercept,
}

/// Any byte stream a connection runs over (TCP, TLS over TCP).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Where and how a client connects.
#[derive(Debug, Clone)]
pub struct Route {
    pub via: Via,
    pub proxy: String,
    pub target: String,
    /// Client TLS configuration for the TLS vias.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// A byte stream with a read buffer.
pub struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// The peer closed a kept-alive connection before answering (or while we wrote): the
/// request can be retried on a new connection, as every HTTP client does.
#[derive(Debug, thiserror::Error)]
#[error("peer closed the connection before a response")]
pub struct PeerClosed;

/// What a response was.
#[derive(Debug, Clone, Copy)]
pub struct Response {
    pub status: u16,
    pub body: u64,
    /// The server will close after this response.
    pub close: bool,
}

impl Conn {
    /// Connects with `TCP_NODELAY` (every proxy under test sets it on its side too).
    pub async fn connect(addr: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Self::new(stream))
    }

    /// Wraps an accepted stream.
    pub fn new(stream: impl Stream + 'static) -> Self {
        Self {
            stream: Box::new(stream),
            buf: vec![0; READ],
            start: 0,
            end: 0,
        }
    }

    /// Writes all of `bytes`.
    pub async fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|_| anyhow::Error::new(PeerClosed))?;
        Ok(())
    }

    /// Opens a tunnel: `CONNECT target`, expects a 2xx (whose body is the tunnel).
    pub async fn tunnel(&mut self, target: &str) -> anyhow::Result<()> {
        let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        self.send(req.as_bytes()).await?;
        let (status, _) = self.head().await?;
        if !(200..300).contains(&status) {
            bail!("CONNECT {target}: status {status}");
        }
        Ok(())
    }

    /// Runs TLS over this connection (nothing may be buffered: the peer waits for us).
    pub async fn tls(self, cfg: &Arc<rustls::ClientConfig>, target: &str) -> anyhow::Result<Self> {
        if self.start != self.end {
            bail!("bytes before the TLS handshake");
        }
        let host = target.rsplit_once(':').map_or(target, |(h, _)| h);
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .with_context(|| format!("TLS name {host}"))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::clone(cfg))
            .connect(name, self.stream)
            .await
            .with_context(|| format!("TLS handshake for {host}"))?;
        Ok(Self::new(tls))
    }

    async fn fill(&mut self) -> anyhow::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD * 2 {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                bail!("response head too large");
            }
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }

    /// Reads a response head; returns the status and the head's lowercased text.
    async fn head(&mut self) -> anyhow::Result<(u16, String)> {
        loop {
            let window = &self.buf[self.start..self.end];
            if let Some(i) = window.windows(4).position(|w| w == b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&window[..i]).to_ascii_lowercase();
                self.start += i + 4;
                let status = text
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .with_context(|| format!("bad status line: {:.80}", text))?;
                return Ok((status, text));
            }
            if self.end - self.start > MAX_HEAD {
                bail!("response head too large");
            }
            if self.fill().await? == 0 {
                if self.start == self.end {
                    return Err(PeerClosed.into());
                }
                bail!("connection closed inside a response head");
            }
        }
    }

    /// Reads one response to a non-HEAD request and discards its body.
    pub async fn response(&mut self) -> anyhow::Result<Response> {
        let (status, head) = self.head().await?;
        let header = |name: &str| {
            head.lines().skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let close = header("connection").is_some_and(|v| v.contains("close"));
        let body = if status == 204 || status == 304 || (100..200).contains(&status) {
            0
        } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            self.chunked().await?
        } else if let Some(len) = header("content-length") {
            let len: u64 = len.parse().context("content-length")?;
            self.skip(len).await?;
            len
        } else {
            self.until_eof().await?
        };
        Ok(Response {
            status,
            body,
            close,
        })
    }

    async fn skip(&mut self, mut len: u64) -> anyhow::Result<()> {
        loop {
            let have = (self.end - self.start) as u64;
            if have >= len {
                self.start += usize::try_from(len)?;
                return Ok(());
            }
            len -= have;
            self.start = self.end;
            if self.fill().await? == 0 {
                bail!("connection closed inside a body");
            }
        }
    }

    async fn line(&mut self) -> anyhow::Result<String> {
        loop {
            let window = &self.buf[self.start..self.end];
            if let Some(i) = window.windows(2).position(|w| w == b"\r\n") {
                let s = String::from_utf8_lossy(&window[..i]).into_owned();
                self.start += i + 2;
                return Ok(s);
            }
            if self.fill().await? == 0 {
                bail!("connection closed inside a chunk header");
            }
        }
    }

    async fn chunked(&mut self) -> anyhow::Result<u64> {
        let mut total = 0;
        loop {
            let line = self.line().await?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size, 16).context("chunk size")?;
            if size == 0 {
                // Trailers up to the empty line.
                while !self.line().await?.is_empty() {}
                return Ok(total);
            }
            self.skip(size + 2).await?;
            total += size;
        }
    }

    async fn until_eof(&mut self) -> anyhow::Result<u64> {
        let mut total = (self.end - self.start) as u64;
        self.start = self.end;
        loop {
            let n = self.fill().await?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
            self.start = self.end;
        }
    }

    /// Reads a request head (server side); `None` at a clean EOF between requests.
    pub async fn request(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        loop {
            let window = &self.buf[self.start..self.end];
            if let Some(i) = window.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = window[..i].to_vec();
                self.start += i + 4;
                return Ok(Some(head));
            }
            if self.end - self.start > MAX_HEAD {
                bail!("request head too large");
            }
            if self.fill().await? == 0 {
                return Ok(None);
            }
        }
    }
}

/// The bytes of one request for `path` to `target` as `via` sends it.
pub fn request(via: Via, target: &str, path: &str, close: bool) -> Vec<u8> {
    let uri = match via {
        Via::Plain => format!("http://{target}{path}"),
        Via::Direct | Via::Connect | Via::DirectTls | Via::Intercept => path.to_owned(),
    };
    let conn = if close { "Connection: close\r\n" } else { "" };
    format!("GET {uri} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: airlock-bench\r\n{conn}\r\n")
        .into_bytes()
}

/// One client connection ready for requests to the route's target.
pub async fn open(r: &Route) -> anyhow::Result<Conn> {
    let tls = || r.tls.as_ref().context("no TLS configuration (--ca)");
    match r.via {
        Via::Direct => Conn::connect(&r.target).await,
        Via::Plain => Conn::connect(&r.proxy).await,
        Via::Connect => {
            let mut c = Conn::connect(&r.proxy).await?;
            c.tunnel(&r.target).await?;
            Ok(c)
        }
        Via::DirectTls => Conn::connect(&r.target).await?.tls(tls()?, &r.target).await,
        Via::Intercept => {
            let mut c = Conn::connect(&r.proxy).await?;
            c.tunnel(&r.target).await?;
            c.tls(tls()?, &r.target).await
        }
    }
}

/// `fut` or an error after `secs`.
pub async fn within<T>(
    secs: u64,
    fut: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .context("timed out")?
}
