//! Byte relays: metered, with an idle timeout that never cuts a stream while bytes flow.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use crate::shutdown::{Phase, reached};

/// Relay buffer per direction.
const BUF: usize = 16 * 1024;

/// Bytes each way and the time of the last byte, shared by the two directions of a tunnel
/// (and by a request/response body pair).
#[derive(Debug)]
pub struct Meter {
    started: Instant,
    up: AtomicU64,
    down: AtomicU64,
    last_ms: AtomicU64,
    /// The upload budgets its bytes up count against ([`crate::budget`]), when charged.
    charge: OnceLock<crate::budget::Charge>,
    /// Set once a charged byte passed a budget: the client's reader then stops.
    over: AtomicBool,
}

impl Default for Meter {
    fn default() -> Self {
        Self::new()
    }
}

impl Meter {
    /// A meter starting now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            charge: OnceLock::new(),
            over: AtomicBool::new(false),
        }
    }

    /// Counts this meter's bytes up against `charge` from now on (once).
    pub fn charge(&self, charge: crate::budget::Charge) {
        let _ = self.charge.set(charge);
    }

    /// Whether a budget it is charged to is spent (see [`Meter::charge`]).
    #[must_use]
    pub fn over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// Whether `n` more bytes up would spend a budget it is charged to (a body read whole
    /// is judged before it is sent, and not counted when it is not).
    #[must_use]
    pub fn would_spend(&self, n: usize) -> bool {
        self.charge.get().is_some_and(|c| c.would_spend(n as u64))
    }

    /// The budgets it is charged to, for the line of a cut (`None`: not charged).
    #[must_use]
    pub fn budget(&self) -> Option<String> {
        self.charge.get().map(crate::budget::Charge::describe)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts `n` bytes client → upstream.
    pub fn add_up(&self, n: usize) {
        self.up.fetch_add(n as u64, Ordering::Relaxed);
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
        if let Some(c) = self.charge.get()
            && !c.add(n as u64)
        {
            self.over.store(true, Ordering::Relaxed);
        }
    }

    /// Counts `n` bytes upstream → client.
    pub fn add_down(&self, n: usize) {
        self.down.fetch_add(n as u64, Ordering::Relaxed);
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Records activity without counting bytes (writes).
    pub fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Bytes client → upstream so far.
    #[must_use]
    pub fn up(&self) -> u64 {
        self.up.load(Ordering::Relaxed)
    }

    /// Bytes upstream → client so far.
    #[must_use]
    pub fn down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }

    /// Milliseconds since the meter started.
    #[must_use]
    pub fn elapsed_ms(&self) -> u64 {
        self.now_ms()
    }

    /// Time since the last byte either way (or since the start).
    #[must_use]
    pub fn idle_for(&self) -> Duration {
        Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.last_ms.load(Ordering::Relaxed)),
        )
    }
}

/// Which counter a stream's reads feed.
#[derive(Debug, Clone, Copy)]
pub enum Dir {
    /// Reads from the client.
    Up,
    /// Reads from upstream.
    Down,
}

/// A stream whose reads are counted on a [`Meter`].
#[derive(Debug)]
pub struct Metered<S> {
    inner: S,
    meter: Arc<Meter>,
    dir: Dir,
    /// Whether bytes written are counted too (in the other direction).
    writes: bool,
}

impl<S> Metered<S> {
    /// Wraps `inner`: bytes read count as `dir`; a write only marks activity.
    pub const fn new(inner: S, meter: Arc<Meter>, dir: Dir) -> Self {
        Self {
            inner,
            meter,
            dir,
            writes: false,
        }
    }

    /// Wraps `inner`, the one stream a connection's bytes pass both ways (an intercepted
    /// client): bytes read count as `reads`, bytes written as the other direction.
    pub const fn both(inner: S, meter: Arc<Meter>, reads: Dir) -> Self {
        Self {
            inner,
            meter,
            dir: reads,
            writes: true,
        }
    }

    fn wrote(&self, n: usize) {
        if self.writes {
            match self.dir {
                Dir::Up => self.meter.add_down(n),
                Dir::Down => self.meter.add_up(n),
            }
        } else {
            self.meter.touch();
        }
    }

    /// The wrapped stream.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let spent = || io::Error::other("upload budget spent");
        // A client that spent an upload budget is read no more: the relay ends.
        if matches!(self.dir, Dir::Up) && self.meter.over() {
            return Poll::Ready(Err(spent()));
        }
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            match self.dir {
                Dir::Up => {
                    self.meter.add_up(n);
                    // The read that spent it is not handed on.
                    if self.meter.over() {
                        buf.set_filled(before);
                        return Poll::Ready(Err(spent()));
                    }
                }
                Dir::Down => self.meter.add_down(n),
            }
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = res
            && n > 0
        {
            self.wrote(n);
        }
        res
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = res
            && n > 0
        {
            self.wrote(n);
        }
        res
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why a relay ended (its audit line's `event`: [`crate::audit::Event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both sides finished (EOF each way).
    Closed,
    /// One side failed (reset, broken pipe).
    Error,
    /// No byte either way for the idle timeout.
    Idle,
    /// Cut at the end of the shutdown grace.
    Shutdown,
    /// Closed because a policy reload refuses its destination ([`crate::conns`]).
    Revoked,
}

/// Relays `client` ↔ `upstream` until both sides close, one fails, nothing moves for `idle`,
/// or the phase reaches [`Phase::Stopping`]. Counts on `meter` (client reads = up).
///
/// When both ends are plain TCP sockets (a `TcpStream`, or hyper's upgraded `CONNECT`
/// connection over one) the bytes are relayed by [`tcp`]: `recv`/`send` for small messages,
/// `splice(2)` through a pipe once a direction carries bulk data (the proxy never copies
/// the bytes of a download). Anything else (TLS, test duplexes) takes the generic copy.
pub async fn relay<C, U>(
    client: C,
    upstream: U,
    meter: Arc<Meter>,
    idle: Duration,
    phase: watch::Receiver<Phase>,
) -> End
where
    C: AsyncRead + AsyncWrite + Unpin + 'static,
    U: AsyncRead + AsyncWrite + Unpin + 'static,
{
    match (tcp::Side::of(client), tcp::Side::of(upstream)) {
        (tcp::Side::Tcp(c, pre_c), tcp::Side::Tcp(u, pre_u)) => {
            tcp::relay(c, pre_c, u, pre_u, meter, idle, phase).await
        }
        (c, u) => copy_relay(c, u, meter, idle, phase).await,
    }
}

/// The generic relay: tokio's bidirectional copy through two buffers.
async fn copy_relay<C, U>(
    client: C,
    upstream: U,
    meter: Arc<Meter>,
    idle: Duration,
    mut phase: watch::Receiver<Phase>,
) -> End
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut c = Metered::new(client, Arc::clone(&meter), Dir::Up);
    let mut u = Metered::new(upstream, Arc::clone(&meter), Dir::Down);
    let copy = tokio::io::copy_bidirectional_with_sizes(&mut c, &mut u, BUF, BUF);
    tokio::select! {
        r = copy => if r.is_ok() { End::Closed } else { End::Error },
        () = idle_watch(&meter, idle) => End::Idle,
        () = reached(&mut phase, Phase::Stopping) => End::Shutdown,
    }
}

/// The TCP ↔ TCP relay; its splice pipe ([`tcp::Pipe`], [`tcp::splice`]) is public so that the
/// benchmark's bare splice relay measures the same pipe.
pub mod tcp;

/// Resolves once `meter` has seen no byte for `idle`.
pub async fn idle_watch(meter: &Meter, idle: Duration) {
    loop {
        let quiet = meter.idle_for();
        if quiet >= idle {
            return;
        }
        tokio::time::sleep(idle - quiet).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::Shutdown;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_read_that_spends_an_upload_budget_is_not_handed_on() {
        let budgets = crate::budget::Budgets::default();
        let limits = airlock_policy::limits::Limits {
            upload_bytes_per_hour: 4096,
            ..airlock_policy::limits::Limits::DEFAULT
        };
        let host = airlock_policy::host::Host::parse("x.test").unwrap();
        let meter = Arc::new(Meter::new());
        meter.charge(budgets.charge(crate::limits::Client::Uid(1), &host, limits));
        let data = vec![7u8; 10_000];
        let mut r = Metered::new(&data[..], Arc::clone(&meter), Dir::Up);
        let mut buf = [0u8; 3000];
        assert_eq!(r.read(&mut buf).await.unwrap(), 3000);
        // The rest is read until a read would pass 4,096: an error, and nothing of that
        // read handed on.
        let mut rest = Vec::new();
        assert!(r.read_to_end(&mut rest).await.is_err());
        assert!(
            3000 + rest.len() < 4096,
            "{} bytes handed on",
            3000 + rest.len()
        );
        assert!(meter.over());
    }

    #[tokio::test]
    async fn relays_and_counts_both_ways() {
        let (mut client, proxy_c) = tokio::io::duplex(1024);
        let (proxy_u, mut server) = tokio::io::duplex(1024);
        let meter = Arc::new(Meter::new());
        let s = Shutdown::new();
        let m = Arc::clone(&meter);
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            m,
            Duration::from_secs(5),
            s.subscribe(),
        ));
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        server.read_exact(&mut buf).await.unwrap();
        server.write_all(b"world!!").await.unwrap();
        let mut buf2 = [0u8; 7];
        client.read_exact(&mut buf2).await.unwrap();
        drop(client);
        drop(server);
        assert_eq!(t.await.unwrap(), End::Closed);
        assert_eq!((meter.up(), meter.down()), (5, 7));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_cuts_only_silent_tunnels() {
        let (mut client, proxy_c) = tokio::io::duplex(1024);
        let (proxy_u, mut server) = tokio::io::duplex(1024);
        let meter = Arc::new(Meter::new());
        let s = Shutdown::new();
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            Arc::clone(&meter),
            Duration::from_millis(200),
            s.subscribe(),
        ));
        // A slow but steady stream outlives the idle timeout many times over.
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            server.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            client.read_exact(&mut b).await.unwrap();
        }
        assert!(!t.is_finished(), "a stream that keeps moving is never cut");
        // Silence: cut.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(t.await.unwrap(), End::Idle);
        assert_eq!(meter.down(), 20);
    }

    /// A connected pair of loopback sockets.
    async fn tcp_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = tokio::net::TcpStream::connect(l.local_addr().unwrap());
        let (a, b) = tokio::join!(a, l.accept());
        (a.unwrap(), b.unwrap().0)
    }

    #[tokio::test]
    async fn tcp_relay_moves_small_and_bulk_both_ways_and_half_closes() {
        let (mut client, proxy_c) = tcp_pair().await;
        let (proxy_u, mut server) = tcp_pair().await;
        let meter = Arc::new(Meter::new());
        let s = Shutdown::new();
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            Arc::clone(&meter),
            Duration::from_secs(5),
            s.subscribe(),
        ));
        // Keep-alive style ping-pong (the copy path)...
        for _ in 0..50 {
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            let mut q = [0u8; 18];
            server.read_exact(&mut q).await.unwrap();
            server.write_all(b"ok").await.unwrap();
            let mut a = [0u8; 2];
            client.read_exact(&mut a).await.unwrap();
        }
        // ...then bulk both ways at once (the splice path), checked byte for byte.
        let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let (b1, b2) = (big.clone(), big.clone());
        let up = tokio::spawn(async move {
            cw.write_all(&b1).await.unwrap();
            cw.shutdown().await.unwrap(); // half-close: the server must see EOF
            cw
        });
        let down = tokio::spawn(async move {
            sw.write_all(&b2).await.unwrap();
            sw.shutdown().await.unwrap();
            sw
        });
        let mut got_s = Vec::new();
        sr.read_to_end(&mut got_s).await.unwrap();
        let mut got_c = Vec::new();
        cr.read_to_end(&mut got_c).await.unwrap();
        assert!(got_s == big && got_c == big, "bytes relayed intact");
        let _ = (up.await.unwrap(), down.await.unwrap());
        assert_eq!(t.await.unwrap(), End::Closed);
        let n = 50 * 18 + big.len() as u64;
        assert_eq!((meter.up(), meter.down()), (n, 50 * 2 + big.len() as u64));
    }

    #[tokio::test]
    async fn tcp_relay_reports_a_reset_as_an_error() {
        let (client, proxy_c) = tcp_pair().await;
        let (proxy_u, server) = tcp_pair().await;
        let s = Shutdown::new();
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            Arc::new(Meter::new()),
            Duration::from_secs(5),
            s.subscribe(),
        ));
        // RST from the client (linger 0), while the server keeps its side open.
        client.set_zero_linger().unwrap();
        drop(client);
        let end = tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(end, End::Error);
        drop(server);
    }

    #[tokio::test]
    async fn tcp_relay_idle_and_shutdown_still_cut() {
        let (_client, proxy_c) = tcp_pair().await;
        let (proxy_u, _server) = tcp_pair().await;
        let s = Shutdown::new();
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            Arc::new(Meter::new()),
            Duration::from_millis(100),
            s.subscribe(),
        ));
        assert_eq!(t.await.unwrap(), End::Idle);
        let (_client, proxy_c) = tcp_pair().await;
        let (proxy_u, _server) = tcp_pair().await;
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            Arc::new(Meter::new()),
            Duration::from_secs(60),
            s.subscribe(),
        ));
        s.advance(Phase::Draining);
        s.advance(Phase::Stopping);
        assert_eq!(t.await.unwrap(), End::Shutdown);
    }

    #[tokio::test]
    async fn stopping_cuts_the_tunnel() {
        let (_client, proxy_c) = tokio::io::duplex(64);
        let (proxy_u, _server) = tokio::io::duplex(64);
        let s = Shutdown::new();
        let t = tokio::spawn(relay(
            proxy_c,
            proxy_u,
            Arc::new(Meter::new()),
            Duration::from_secs(60),
            s.subscribe(),
        ));
        s.advance(Phase::Draining);
        tokio::task::yield_now().await;
        assert!(!t.is_finished(), "draining lets tunnels flow");
        s.advance(Phase::Stopping);
        assert_eq!(t.await.unwrap(), End::Shutdown);
    }
}
