//! `relay`: the least a `CONNECT` tunnel can be, as bare rows beside the airlock tunnel.
//!
//! A thread per connection reads the `CONNECT` head, connects, answers `200`, and then
//! relays with nothing else: no policy, no audit, no timeouts, no epoll (a blocking thread
//! per direction, so no readiness bookkeeping either). Two ways to move the bytes:
//!
//! - `copy`: `read`/`write` through a 64 KiB buffer.
//! - `splice`: socket → pipe → socket with `splice(2)` through the proxy's own pipe
//!   (`airlock_proxy::tunnel::tcp::Pipe`, 1 MiB), what the proxy's bulk directions do, minus
//!   the readiness loop around it. The sockets are blocking, so each splice waits for its
//!   socket; the pipe never makes it wait (it is emptied before it is filled again).
//!
//! It is a measuring instrument, not a proxy: it trusts its client, and it never runs
//! outside the benchmark's namespace. The rows it gives say what a relay of that kind
//! costs on this machine, so the airlock tunnel's figures read against relays, not only
//! against a direct transfer, which pays for neither the second connection nor the
//! cross-core wake-ups.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

use airlock_proxy::tunnel::tcp::{Pipe, splice};

use anyhow::{Context, bail};

/// How the relay moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `read`/`write` through a 64 KiB buffer, a thread per direction.
    Copy,
    /// `splice(2)` through the proxy's pipe, a thread per direction.
    Splice,
}

/// Largest `CONNECT` head read.
const MAX_HEAD: usize = 8 * 1024;
/// The copy mode's buffer.
const COPY_BUF: usize = 64 * 1024;
/// Most bytes asked of one splice (the pipe's size bounds it anyway).
const SPLICE_MAX: usize = 1 << 20;

/// Serves `CONNECT` tunnels on `listen` until killed.
pub fn run(listen: &str, mode: Mode) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    serve_on(&listener, mode)
}

fn serve_on(listener: &TcpListener, mode: Mode) -> anyhow::Result<()> {
    for conn in listener.incoming() {
        let Ok(client) = conn else { continue };
        std::thread::spawn(move || {
            if let Err(e) = serve(client, mode) {
                eprintln!("relay: {e:#}");
            }
        });
    }
    Ok(())
}

/// One tunnel, from its `CONNECT` head to both ends closed.
fn serve(mut client: TcpStream, mode: Mode) -> anyhow::Result<()> {
    client.set_nodelay(true)?;
    let (target, early) = connect_head(&mut client)?;
    let mut upstream =
        TcpStream::connect(&target).with_context(|| format!("connecting to {target}"))?;
    upstream.set_nodelay(true)?;
    upstream.write_all(&early)?;
    client.write_all(OK)?;
    let (c2, u2) = (client.try_clone()?, upstream.try_clone()?);
    let spliced = mode == Mode::Splice;
    let up = std::thread::spawn(move || direction(c2, u2, spliced));
    let down = direction(upstream, client, spliced);
    let up = up
        .join()
        .map_err(|_| anyhow::anyhow!("relay thread panicked"))?;
    down?;
    up?;
    Ok(())
}

/// The answer to a `CONNECT`.
const OK: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// Reads the `CONNECT` head; the target and any bytes that came after the head.
fn connect_head(client: &mut TcpStream) -> anyhow::Result<(String, Vec<u8>)> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            bail!("client closed before its CONNECT head ended");
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some((target, end)) = parse_head(&head)? {
            return Ok((target, head[end..].to_vec()));
        }
    }
}

/// The target a `CONNECT` head names and where the head ends, `None` while it has not
/// ended; an error for a head over [`MAX_HEAD`] or a request that is not a `CONNECT`. Both
/// bare relays read their heads through it.
pub(crate) fn parse_head(head: &[u8]) -> anyhow::Result<Option<(String, usize)>> {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    if end.unwrap_or(head.len()) > MAX_HEAD {
        bail!("CONNECT head over {MAX_HEAD} bytes");
    }
    let Some(end) = end else { return Ok(None) };
    let line = &head[..head.iter().position(|&b| b == b'\r').unwrap_or(0)];
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        bail!("not a CONNECT: {line}");
    };
    Ok(Some((target.to_owned(), end)))
}

/// One direction until its source ends (by `splice` or by `read`/`write`); then the
/// half-close goes on to the other side.
fn direction(mut from: TcpStream, mut to: TcpStream, spliced: bool) -> io::Result<()> {
    if spliced {
        let pipe = Pipe::new()?;
        loop {
            let n = retry(|| splice(&from, pipe.writer(), SPLICE_MAX))?;
            if n == 0 {
                break;
            }
            let mut left = n;
            while left > 0 {
                left -= retry(|| splice(pipe.reader(), &to, left))?.min(left);
            }
        }
    } else {
        let mut buf = vec![0u8; COPY_BUF];
        loop {
            let n = from.read(&mut buf)?;
            if n == 0 {
                break;
            }
            to.write_all(&buf[..n])?;
        }
    }
    to.shutdown(Shutdown::Write)
}

/// `f` again while a signal interrupts it.
fn retry(mut f: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An upstream on loopback serving every connection with `serve` on a thread of its own.
    fn upstream(serve: fn(TcpStream)) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let c = c.unwrap();
                std::thread::spawn(move || serve(c));
            }
        });
        addr
    }

    /// Echoes every byte and half-closes when its client does.
    fn echo(mut c: TcpStream) {
        let mut w = c.try_clone().unwrap();
        std::io::copy(&mut c, &mut w).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    }

    /// A relay of `mode` on loopback, and a tunnel through it to `target` (its `200` read).
    fn tunnel(mode: Mode, target: &str) -> TcpStream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = l.local_addr().unwrap();
        std::thread::spawn(move || serve_on(&l, mode));
        let mut c = TcpStream::connect(relay).unwrap();
        write!(c, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        let mut head = [0u8; OK.len()];
        c.read_exact(&mut head).unwrap();
        assert_eq!(&head, OK);
        c
    }

    /// 3 MiB each way at once and both half-closes, byte for byte (the bare rows are only
    /// worth reading if the relay relays).
    fn relays_every_byte(mode: Mode) {
        let mut c = tunnel(mode, &upstream(echo));
        let sent: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        let mut w = c.try_clone().unwrap();
        let body = sent.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&body).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(
            got.len(),
            sent.len(),
            "{mode:?}: every byte came back, then the end"
        );
        assert!(
            got == sent,
            "{mode:?}: the bytes came back in order, unchanged"
        );
    }

    /// A head is read until it ends; a request that is not a `CONNECT`, or a head that
    /// never ends within [`MAX_HEAD`], is refused with the reason.
    #[test]
    fn a_connect_head_is_parsed_and_bad_heads_are_refused() {
        assert!(
            parse_head(b"CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n")
                .unwrap()
                .is_none()
        );
        let head = b"CONNECT 198.51.100.1:8080 HTTP/1.1\r\nHost: x\r\n\r\nearly";
        assert_eq!(
            parse_head(head).unwrap(),
            Some(("198.51.100.1:8080".to_owned(), head.len() - 5))
        );
        let not = parse_head(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(not.to_string().contains("not a CONNECT"), "{not}");
        let long = parse_head(&vec![b'a'; MAX_HEAD + 1]).unwrap_err();
        assert!(long.to_string().contains("over"), "{long}");
    }

    #[test]
    fn the_copy_relay_relays_every_byte() {
        relays_every_byte(Mode::Copy);
    }

    #[test]
    fn the_splice_relay_relays_every_byte() {
        relays_every_byte(Mode::Splice);
    }
}
