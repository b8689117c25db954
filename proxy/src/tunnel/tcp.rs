//! The TCP ↔ TCP relay: what every passthrough tunnel (explicit `CONNECT`, transparent) is.
//!
//! Per direction, small messages (requests, API calls) are `recv`/`send` through a 16 KiB
//! buffer, which keeps tokio's short-read readiness clearing: two syscalls per message.
//! A read that fills the buffer means bulk data: that direction switches to `splice(2)`
//! through its own pipe (socket → pipe → socket, the kernel moves page references, the
//! proxy never copies the bytes) until a wake-up moves less than a buffer's worth again.
//! A pipe that cannot be created (fd limit) just keeps the copy.
//!
//! Public: [`Pipe`] and [`splice`], the pipe and the one `splice(2)` call every bulk
//! direction uses, so that `airlock-bench`'s bare splice relay moves bytes exactly this way
//! (on blocking sockets, where the pipe's non-blocking ends never wait: the relay empties the
//! pipe before it fills it again). Nothing else here is public.

use std::any::Any;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

use super::{Dir, End, Meter, Metered, idle_watch};
use crate::shutdown::{Phase, reached};

/// Copy buffer per direction (allocated on the first byte, so idle tunnels cost none).
const COPY_BUF: usize = 16 * 1024;
/// Most bytes asked of one `splice` (the pipe's capacity bounds it anyway).
const SPLICE_MAX: usize = 1 << 20;
/// Pipe capacities tried for a bulk direction, largest first (`F_SETPIPE_SZ`; the kernel's
/// `pipe-max-size` is 1 MiB by default, and a user over `pipe-user-pages-soft` gets
/// EPERM): one splice then moves up to a whole 1 MiB response instead of 64 KiB.
const PIPE_SIZES: [libc::c_int; 2] = [1 << 20, 256 << 10];
/// How long a bulk direction polls its empty source before sleeping in the reactor. A
/// sender on another core refills a loopback socket every few microseconds; sleeping in
/// between costs a wake-up (an inter-processor interrupt, a VM exit under a hypervisor)
/// per 64 KiB segment, far more than the poll. The poll yields to the runtime between
/// attempts: every other connection is served on the same thread meanwhile.
const BULK_POLL: Duration = Duration::from_micros(40);

/// A relay end: a bare TCP socket (with bytes already read from it but not yet relayed),
/// or anything else.
pub(super) enum Side<S> {
    Tcp(TcpStream, Bytes),
    Other(S),
    /// Unreachable in practice (a value taken out of its slot and not put back); fails
    /// every operation rather than panicking.
    Lost,
}

fn take_as<T: 'static, S: 'static>(slot: &mut Option<S>) -> Option<T> {
    (slot as &mut dyn Any)
        .downcast_mut::<Option<T>>()
        .and_then(Option::take)
}

fn put_as<T: 'static, S: 'static>(slot: &mut Option<S>, value: T) {
    if let Some(s) = (slot as &mut dyn Any).downcast_mut::<Option<T>>() {
        *s = Some(value);
    }
}

impl<S: 'static> Side<S> {
    /// Finds the socket under `s`: a `TcpStream` itself, or hyper's upgraded `CONNECT`
    /// connection when it runs over the explicit listener's `TokioIo<Metered<TcpStream>>`
    /// (its unread buffer comes along).
    pub(super) fn of(s: S) -> Self {
        let mut slot = Some(s);
        if let Some(t) = take_as::<TcpStream, S>(&mut slot) {
            return Self::Tcp(t, Bytes::new());
        }
        if let Some(io) = take_as::<TokioIo<Upgraded>, S>(&mut slot) {
            match io.into_inner().downcast::<TokioIo<Metered<TcpStream>>>() {
                Ok(parts) => return Self::Tcp(parts.io.into_inner().into_inner(), parts.read_buf),
                Err(up) => put_as(&mut slot, TokioIo::new(up)),
            }
        }
        slot.map_or(Self::Lost, Self::Other)
    }
}

fn lost() -> io::Error {
    io::Error::other("relay end lost")
}

impl<S: AsyncRead + Unpin> AsyncRead for Side<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(_, pre) if !pre.is_empty() => {
                let n = pre.len().min(buf.remaining());
                buf.put_slice(&pre[..n]);
                pre.advance(n);
                Poll::Ready(Ok(()))
            }
            Self::Tcp(t, _) => Pin::new(t).poll_read(cx, buf),
            Self::Other(s) => Pin::new(s).poll_read(cx, buf),
            Self::Lost => Poll::Ready(Err(lost())),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Side<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(t, _) => Pin::new(t).poll_write(cx, buf),
            Self::Other(s) => Pin::new(s).poll_write(cx, buf),
            Self::Lost => Poll::Ready(Err(lost())),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(t, _) => Pin::new(t).poll_flush(cx),
            Self::Other(s) => Pin::new(s).poll_flush(cx),
            Self::Lost => Poll::Ready(Err(lost())),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(t, _) => Pin::new(t).poll_shutdown(cx),
            Self::Other(s) => Pin::new(s).poll_shutdown(cx),
            Self::Lost => Poll::Ready(Err(lost())),
        }
    }
}

/// Relays two sockets; `pre_c`/`pre_u` are bytes already read from the client / upstream.
pub(super) async fn relay(
    client: TcpStream,
    pre_c: Bytes,
    upstream: TcpStream,
    pre_u: Bytes,
    meter: Arc<Meter>,
    idle: Duration,
    mut phase: watch::Receiver<Phase>,
) -> End {
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    let up = pump(cr, pre_c, uw, &meter, Dir::Up);
    let down = pump(ur, pre_u, cw, &meter, Dir::Down);
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => if r.is_ok() { End::Closed } else { End::Error },
        () = idle_watch(&meter, idle) => End::Idle,
        () = reached(&mut phase, Phase::Stopping) => End::Shutdown,
    }
}

/// Counts `n` bytes read; an error when they spent an upload budget (they are not sent:
/// the direction ends and the relay with it).
fn count(meter: &Meter, dir: Dir, n: usize) -> io::Result<()> {
    match dir {
        Dir::Up => {
            meter.add_up(n);
            if meter.over() {
                return Err(io::Error::other("upload budget spent"));
            }
        }
        Dir::Down => meter.add_down(n),
    }
    Ok(())
}

/// One direction until EOF (then the write side is shut down, as a half-close).
async fn pump(
    mut from: OwnedReadHalf,
    pre: Bytes,
    mut to: OwnedWriteHalf,
    meter: &Meter,
    dir: Dir,
) -> io::Result<()> {
    if !pre.is_empty() {
        count(meter, dir, pre.len())?;
        to.write_all(&pre).await?;
        meter.touch();
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut pipe: Option<Pipe> = None;
    let mut bulk = false;
    loop {
        if bulk && let Some(p) = &pipe {
            match splice_burst(from.as_ref(), to.as_ref(), p, meter, dir).await? {
                None => break,
                Some(moved) => bulk = moved >= COPY_BUF,
            }
            continue;
        }
        if buf.is_empty() {
            // Wait for the first byte before committing memory to the direction.
            from.as_ref().readable().await?;
            buf.resize(COPY_BUF, 0);
        }
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        count(meter, dir, n)?;
        to.write_all(&buf[..n]).await?;
        meter.touch();
        if n == buf.len() {
            if pipe.is_none() {
                pipe = Pipe::new().ok();
            }
            bulk = pipe.is_some();
        }
    }
    to.shutdown().await
}

/// A pipe's two ends (non-blocking, close-on-exec), 1 MiB when the kernel allows it (else
/// 256 KiB, else its default 64 KiB).
#[derive(Debug)]
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    /// A new pipe.
    ///
    /// # Errors
    /// `pipe2(2)`'s (the descriptor limit).
    pub fn new() -> io::Result<Self> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both fds are open and owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for size in PIPE_SIZES {
            // SAFETY: fcntl on a pipe fd we own; F_SETPIPE_SZ takes an int and touches no
            // memory. A refusal (limit reached) leaves the default 64 KiB pipe.
            if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size) } >= 0 {
                break;
            }
        }
        Ok(Self { r, w })
    }

    /// The end bytes are spliced out of.
    #[must_use]
    pub fn reader(&self) -> std::os::fd::BorrowedFd<'_> {
        self.r.as_fd()
    }

    /// The end bytes are spliced into.
    #[must_use]
    pub fn writer(&self) -> std::os::fd::BorrowedFd<'_> {
        self.w.as_fd()
    }
}

/// One `splice(2)` of at most `len` bytes from `from` to `to` (one of them a pipe), never
/// waiting on the pipe (`SPLICE_F_NONBLOCK`); a socket end waits only if it is blocking.
///
/// # Errors
/// `splice(2)`'s, `WouldBlock` included.
pub fn splice(from: impl AsFd, to: impl AsFd, len: usize) -> io::Result<usize> {
    let (from, to): (RawFd, RawFd) = (from.as_fd().as_raw_fd(), to.as_fd().as_raw_fd());
    // SAFETY: plain fds, null offsets (both ends are pipes or sockets); no memory is passed.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One wake-up of a bulk direction: splices socket → pipe → socket until the source has
/// nothing more. `None` at EOF, else the bytes moved.
async fn splice_burst(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    meter: &Meter,
    dir: Dir,
) -> io::Result<Option<usize>> {
    from.readable().await?;
    let mut total = 0;
    loop {
        let n = match from.try_io(Interest::READABLE, || splice(from, &pipe.w, SPLICE_MAX)) {
            Ok(0) if total == 0 => return Ok(None),
            Ok(0) => return Ok(Some(total)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => match poll_source(from, pipe).await?
            {
                Some(0) if total == 0 => return Ok(None),
                Some(0) | None => return Ok(Some(total)),
                Some(n) => n,
            },
            Err(e) => return Err(e),
        };
        count(meter, dir, n)?;
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || splice(&pipe.r, to, left)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m.min(left),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        meter.touch();
        total += n;
    }
}

/// The source of a bulk direction is empty: splice again for up to [`BULK_POLL`], yielding
/// to the runtime between attempts (never spinning inside it: the other direction of this
/// tunnel, and every other connection, run on the same thread, and the request that makes
/// the next response come may be waiting right there). The bytes moved, `Some(0)` at EOF,
/// `None` when nothing came (then the caller sleeps on readiness, which the failed `try_io`
/// cleared: edge-triggered epoll reports any byte that arrives after this last attempt).
async fn poll_source(from: &TcpStream, pipe: &Pipe) -> io::Result<Option<usize>> {
    let until = std::time::Instant::now() + BULK_POLL;
    loop {
        match splice(from, &pipe.w, SPLICE_MAX) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if std::time::Instant::now() >= until {
            return Ok(None);
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A connected pair: (the peer that sends, the source a bulk direction reads).
    async fn connected() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (peer, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (peer.unwrap(), accepted.unwrap().0)
    }

    /// Polls until the source moves bytes or ends (at most 1,000 polls).
    async fn poll_until_something(source: &TcpStream, pipe: &Pipe) -> Option<usize> {
        for _ in 0..1000 {
            if let Some(moved) = poll_source(source, pipe).await.unwrap() {
                return Some(moved);
            }
        }
        None
    }

    /// A bulk direction whose source has gone quiet polls it for a while; the proxy's one
    /// runtime thread keeps serving everything else meanwhile (the other direction of the
    /// same tunnel carries the request that makes the next response come). Before, the
    /// poll spun inside the thread: nothing else ran until it gave up.
    #[tokio::test(flavor = "current_thread")]
    async fn polling_a_quiet_source_lets_the_other_tasks_run() {
        let (_peer, source) = connected().await;
        let pipe = Pipe::new().unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        let moved = poll_source(&source, &pipe).await.unwrap();
        assert_eq!(moved, None, "nothing was sent: the poll gives up");
        assert!(
            ran.load(Ordering::SeqCst),
            "another task ran while the quiet source was polled"
        );
    }

    /// Bytes that arrive during the poll are taken by it (a splice into the pipe), and
    /// an end of stream is seen as 0.
    #[tokio::test(flavor = "current_thread")]
    async fn the_poll_takes_what_arrives_and_sees_the_end() {
        let (mut peer, source) = connected().await;
        let pipe = Pipe::new().unwrap();
        peer.write_all(b"twelve bytes").await.unwrap();
        assert_eq!(poll_until_something(&source, &pipe).await, Some(12));
        peer.shutdown().await.unwrap();
        drop(peer);
        assert_eq!(poll_until_something(&source, &pipe).await, Some(0));
    }
}
