//! One socket read per many TLS records on an intercepted connection's two sockets.
//!
//! rustls's `read_tls` offers its reader 4 KiB more than it already holds of an unfinished
//! record, so a stream of 16 KiB records cost about 69 `recvfrom` per MiB on each socket the
//! proxy decrypts (strace of `bench/profile.sh … bulk-int`), each walking the socket's
//! receive path again. [`ReadAhead`] sits between the socket and the TLS layer and, while
//! the socket keeps filling what is asked of it (a bulk transfer), reads up to [`CAPACITY`]
//! at once and serves rustls's small reads from memory (18 `recvfrom` per MiB).
//!
//! It holds no memory on a quiet connection: a read goes straight into the caller's buffer
//! until one fills it completely (more is probably waiting); only then is the read-ahead
//! buffer allocated (never zeroed), and it is freed once a read came back short or found
//! nothing (the socket was drained) and everything it holds has been handed on. A
//! keep-alive connection of small requests never allocates it, and an idle one holds none.
//!
//! It does not change a byte, their order or an end of stream, and it never reads ahead of
//! a caller's read (no read is made that nobody asked for): writes, flushes and shutdown go
//! straight to the socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most one socket read takes while reading ahead: four full TLS records.
pub const CAPACITY: usize = 64 * 1024;

/// An IO whose reads are served from one large socket read while the socket keeps
/// filling them (see the module docs).
#[derive(Debug)]
pub struct ReadAhead<S> {
    inner: S,
    /// Read ahead and not yet handed on; no allocation while reading straight through. Its
    /// spare room is never zeroed (`poll_read_buf` reads into it as it is).
    buf: BytesMut,
    /// The last socket read filled all it was given: read ahead on the next one.
    bulk: bool,
}

impl<S> ReadAhead<S> {
    /// Wraps `inner`; nothing is allocated until a read fills what it was given.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            bulk: false,
        }
    }

    /// Whether a read-ahead buffer is held (for tests of the memory promise). Only as true
    /// as `capacity`: one drained in the middle of a burst (kept for the next read) says no.
    #[cfg(test)]
    fn holds_buffer(&self) -> bool {
        self.buf.capacity() > 0
    }

    /// The wrapped IO.
    #[cfg(test)]
    const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Hands on what is held; frees the buffer once it is empty and the socket was drained.
    fn serve(&mut self, out: &mut ReadBuf<'_>) {
        let n = out.remaining().min(self.buf.len());
        out.put_slice(&self.buf[..n]);
        self.buf.advance(n);
        if self.buf.is_empty() && !self.bulk {
            self.buf = BytesMut::new();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.buf.is_empty() {
            this.serve(out);
            return Poll::Ready(Ok(()));
        }
        let asked = out.remaining();
        if !this.bulk || asked >= CAPACITY {
            let before = out.filled().len();
            ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
            this.bulk = asked > 0 && out.filled().len() - before == asked;
            return Poll::Ready(Ok(()));
        }
        // Empty here: reserving takes back the room already handed on, or allocates.
        this.buf.reserve(CAPACITY);
        let room = this.buf.capacity();
        match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.buf) {
            Poll::Ready(Ok(n)) => {
                this.bulk = n == room;
                // An empty read is the end of stream: nothing held, the caller sees it so.
                this.serve(out);
                Poll::Ready(Ok(()))
            }
            // Nothing waiting (the burst is over) or a failed read: hold no memory.
            other => {
                this.buf = BytesMut::new();
                this.bulk = false;
                other.map_ok(|_| ())
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
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
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads `want` bytes in 4 KiB asks, as rustls does.
    async fn read_in_small_asks<S: AsyncRead + Unpin>(
        r: &mut ReadAhead<S>,
        want: usize,
    ) -> Vec<u8> {
        let mut got = Vec::with_capacity(want);
        let mut ask = [0u8; 4096];
        while got.len() < want {
            let n = r.read(&mut ask).await.unwrap();
            assert_ne!(n, 0, "end of stream after {} of {want} bytes", got.len());
            got.extend_from_slice(&ask[..n]);
        }
        got
    }

    #[tokio::test]
    async fn bulk_bytes_arrive_whole_and_in_order_and_the_buffer_goes_when_drained() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        tx.write_all(&data).await.unwrap();
        let mut r = ReadAhead::new(rx);
        let got = read_in_small_asks(&mut r, data.len()).await;
        assert_eq!(got, data);
        assert!(
            !r.holds_buffer(),
            "the socket was drained, yet the buffer is held"
        );
        drop(tx);
        let mut ask = [0u8; 16];
        assert_eq!(
            r.read(&mut ask).await.unwrap(),
            0,
            "end of stream is passed on"
        );
    }

    #[tokio::test]
    async fn a_quiet_connection_never_allocates() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut r = ReadAhead::new(rx);
        for round in 0..50u8 {
            let msg = vec![round; 700];
            tx.write_all(&msg).await.unwrap();
            assert_eq!(read_in_small_asks(&mut r, msg.len()).await, msg);
            assert!(
                !r.holds_buffer(),
                "round {round}: a 700-byte request allocated"
            );
        }
    }

    #[tokio::test]
    async fn one_socket_read_serves_many_small_asks() {
        // A reader that counts the reads it is asked for.
        struct Counting<R> {
            inner: R,
            reads: usize,
        }
        impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
            fn poll_read(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                self.reads += 1;
                Pin::new(&mut self.inner).poll_read(cx, buf)
            }
        }
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let data = vec![7u8; 1 << 20];
        tx.write_all(&data).await.unwrap();
        let mut r = ReadAhead::new(Counting {
            inner: rx,
            reads: 0,
        });
        assert_eq!(read_in_small_asks(&mut r, data.len()).await, data);
        let reads = r.get_ref().reads;
        // 1 MiB in 4 KiB asks is 256 reads straight through; read ahead, one direct ask
        // and then one read per CAPACITY.
        assert!(
            reads <= 1 + (1 << 20) / CAPACITY + 1,
            "{reads} socket reads for 1 MiB"
        );
    }

    #[tokio::test]
    async fn a_short_read_ends_reading_ahead_and_the_rest_is_still_served() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut r = ReadAhead::new(rx);
        // Fill the first ask exactly: the next read reads ahead.
        tx.write_all(&[1u8; 4096]).await.unwrap();
        assert_eq!(read_in_small_asks(&mut r, 4096).await, vec![1u8; 4096]);
        // Less than CAPACITY waits: one short read ahead, served in pieces, then freed.
        tx.write_all(&[2u8; 10_000]).await.unwrap();
        let mut ask = [0u8; 4096];
        let n = r.read(&mut ask).await.unwrap();
        assert_eq!(&ask[..n], &[2u8; 4096][..n]);
        assert!(r.holds_buffer(), "the rest of the short read is held");
        assert_eq!(
            read_in_small_asks(&mut r, 10_000 - n).await,
            vec![2u8; 10_000 - n]
        );
        assert!(!r.holds_buffer());
    }

    #[tokio::test]
    async fn a_connection_gone_quiet_after_a_full_read_ahead_holds_no_buffer() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut r = ReadAhead::new(rx);
        // Exactly one direct ask and one whole read ahead: the last read was full.
        tx.write_all(&vec![3u8; 4096 + CAPACITY]).await.unwrap();
        assert_eq!(
            read_in_small_asks(&mut r, 4096 + CAPACITY).await,
            vec![3u8; 4096 + CAPACITY]
        );
        let mut ask = [0u8; 4096];
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(20), r.read(&mut ask));
        assert!(
            quiet.await.is_err(),
            "nothing was sent, yet a read returned"
        );
        assert!(
            !r.holds_buffer(),
            "an idle connection holds its read-ahead buffer"
        );
        // And the next burst still arrives.
        tx.write_all(b"next").await.unwrap();
        assert_eq!(read_in_small_asks(&mut r, 4).await, b"next");
    }

    #[tokio::test]
    async fn writes_pass_straight_through() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let mut w = ReadAhead::new(a);
        w.write_all(b"hello").await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
    }
}
