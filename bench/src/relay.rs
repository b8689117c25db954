//! `relay`: the least a `CONNECT` tunnel can be, as bare rows beside the airlock tunnel.
//!
//! A thread per connection reads the `CONNECT` head, connects, answers `200`, and then
//! relays with nothing else: no policy, no audit, no timeouts, no epoll (a blocking thread
//! per direction, so no readiness bookkeeping either). Three ways to move the bytes:
//!
//! - `copy`: `read`/`write` through a 64 KiB buffer.
//! - `splice`: socket → pipe → socket with blocking `splice(2)` through a 1 MiB pipe (what
//!   the proxy's bulk directions do, minus the readiness loop around it).
//! - `sockmap`: the bytes never reach user space: both sockets go into a BPF `SOCKHASH`
//!   whose `sk_skb` verdict program redirects every segment a socket receives to the
//!   other socket's egress inside the kernel (in the sender's softirq, then a kworker on
//!   the same core). Root only (`bpf(2)`, `CAP_BPF` and `CAP_NET_ADMIN`); the relay thread
//!   only waits for the ends to close, and passes a half-close on once `TCP_INFO` says the
//!   bytes before it went out. It relays requests and responses (what the bench's cells
//!   do: each response read whole before the next request, the close after the last).
//!   Two patterns fail on kernel 6.18, in nearly every run, the same way: the kernel's send
//!   on one socket's behalf ends in `EPIPE`, which it reports as that socket's error, and
//!   the rest of the stream is lost. One is bulk data both ways at once (3 MiB each way);
//!   the other is a client that closes its side while its response is still flowing (40
//!   requests and the close at once: the upstream's socket fails after the first answer,
//!   although the close was passed on only after the requests had been acknowledged). So
//!   neither is what this mode measures, and both are reasons the proxy does not relay
//!   this way (proxy/README.md).
//!
//! It is a measuring instrument, not a proxy: it trusts its client, and it never runs
//! outside the benchmark's namespace. The rows it gives say what a relay of that kind
//! costs on this machine, so the airlock tunnel's figures read against relays, not only
//! against a direct transfer, which pays for neither the second connection nor the
//! cross-core wake-ups.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use anyhow::{Context, bail};

/// How the relay moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `read`/`write` through a 64 KiB buffer, a thread per direction.
    Copy,
    /// Blocking `splice(2)` through a 1 MiB pipe, a thread per direction.
    Splice,
    /// A BPF sockmap redirect: the kernel relays, no thread touches the bytes.
    Sockmap,
}

/// Largest `CONNECT` head read.
const MAX_HEAD: usize = 8 * 1024;
/// The copy mode's buffer.
const COPY_BUF: usize = 64 * 1024;
/// The splice mode's pipe (the kernel's default `pipe-max-size`).
const PIPE_SIZE: libc::c_int = 1 << 20;

/// Serves `CONNECT` tunnels on `listen` until killed.
pub fn run(listen: &str, mode: Mode) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    serve_on(&listener, mode)
}

fn serve_on(listener: &TcpListener, mode: Mode) -> anyhow::Result<()> {
    let map = match mode {
        Mode::Sockmap => Some(Arc::new(sockmap::Redirect::new()?)),
        Mode::Copy | Mode::Splice => None,
    };
    for conn in listener.incoming() {
        let Ok(client) = conn else { continue };
        let map = map.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve(client, mode, map.as_deref()) {
                eprintln!("relay: {e:#}");
            }
        });
    }
    Ok(())
}

/// One tunnel, from its `CONNECT` head to both ends closed.
fn serve(mut client: TcpStream, mode: Mode, map: Option<&sockmap::Redirect>) -> anyhow::Result<()> {
    client.set_nodelay(true)?;
    let (target, head_len, early) = connect_head(&mut client)?;
    let mut upstream =
        TcpStream::connect(&target).with_context(|| format!("connecting to {target}"))?;
    upstream.set_nodelay(true)?;
    upstream.write_all(&early)?;
    if let Some(map) = map {
        // Into the map before the 200: every byte the client sends after it is redirected.
        map.pair(&client, &upstream)?;
        client.write_all(OK)?;
        // What went through user space on each side, not through the redirect.
        let ends = [
            End {
                sock: &client,
                read: head_len,
                written: OK.len(),
                syn: 0,
            },
            End {
                sock: &upstream,
                read: 0,
                written: early.len(),
                syn: 1,
            },
        ];
        wait_closed(&ends)?;
        return Ok(());
    }
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

/// Reads the `CONNECT` head; the target, the bytes read, and any that came after the head.
fn connect_head(client: &mut TcpStream) -> anyhow::Result<(String, usize, Vec<u8>)> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            bail!("client closed before its CONNECT head ended");
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some((target, end)) = parse_head(&head)? {
            return Ok((target, head.len(), head[end..].to_vec()));
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
            let n = splice(from.as_raw_fd(), pipe.w.as_raw_fd(), PIPE_SIZE as usize)?;
            if n == 0 {
                break;
            }
            let mut left = n;
            while left > 0 {
                left -= splice(pipe.r.as_raw_fd(), to.as_raw_fd(), left)?.min(left);
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

/// One socket of a sockmap tunnel, with the bytes the relay itself read from it and wrote
/// to it (the `CONNECT` head, the `200`, bytes that came with the head).
struct End<'a> {
    sock: &'a TcpStream,
    read: usize,
    written: usize,
    /// 1 when the relay opened this connection (its SYN counts in `tcpi_bytes_acked`).
    syn: u64,
}

/// `tcpi_bytes_received` and `tcpi_bytes_acked` of a socket.
fn tcp_bytes(s: &TcpStream) -> io::Result<(u64, u64)> {
    // SAFETY: tcp_info is plain integers; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are live and describe `info`'s size; the kernel writes at
    // most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::from_mut(&mut info).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.tcpi_bytes_received, info.tcpi_bytes_acked))
}

/// Sockmap mode: waits until both ends have closed their side, passing each half-close on.
/// A half-close must not overtake the bytes still in the kernel's redirect backlog, so it
/// is passed on only once the other socket has had acknowledged every byte its peer end
/// received (`TCP_INFO`: bytes received there, less what the relay read itself, against
/// bytes acknowledged here, less what the relay wrote itself).
fn wait_closed(ends: &[End<'_>; 2]) -> io::Result<()> {
    const CLOSED: libc::c_short = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
    /// 100 µs apart: a second.
    const DRAIN_POLLS: u32 = 10_000;
    let mut open = [true, true];
    let mut passed = [false, false];
    let mut waited = 0u32;
    // An end that closed but whose half-close is not passed on yet.
    let draining = |open: [bool; 2], passed: [bool; 2]| (0..2).any(|i| !open[i] && !passed[i]);
    while passed != [true, true] {
        if open.iter().any(|&o| o) {
            // A closed end is left out (a negative fd), or its POLLHUP would wake every poll.
            let mut fds = [0, 1].map(|i| libc::pollfd {
                fd: if open[i] {
                    ends[i].sock.as_raw_fd()
                } else {
                    -1
                },
                events: libc::POLLRDHUP,
                revents: 0,
            });
            // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
            let rc = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    2,
                    if draining(open, passed) { 0 } else { -1 },
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for i in 0..2 {
                if fds[i].revents & CLOSED != 0 {
                    open[i] = false;
                }
            }
        }
        for i in 0..2 {
            if open[i] || passed[i] {
                continue;
            }
            let (from, to) = (&ends[i], &ends[1 - i]);
            // The FIN `from` received counts one in its sequence space, the SYN of a
            // connection we opened one in `to`'s: neither is a byte.
            let received = tcp_bytes(from.sock)?.0.saturating_sub(1 + from.read as u64);
            let acked = tcp_bytes(to.sock)?
                .1
                .saturating_sub(to.syn + to.written as u64);
            // A socket that failed never acknowledges the rest: give up after a second.
            if acked >= received || waited > DRAIN_POLLS {
                passed[i] = true;
                let _ = to.sock.shutdown(Shutdown::Write);
            }
        }
        if draining(open, passed) {
            std::thread::sleep(std::time::Duration::from_micros(100));
            waited += 1;
        }
    }
    Ok(())
}

/// A pipe's two ends (blocking, close-on-exec), 1 MiB when the kernel allows it.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both fds are open and owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a pipe fd we own; F_SETPIPE_SZ takes an int. A refusal keeps
        // the default 64 KiB pipe.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
        Ok(Self { r, w })
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: plain fds, null offsets (both ends are pipes or sockets); no memory is
        // passed.
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        };
        match usize::try_from(n) {
            Ok(n) => return Ok(n),
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// The kernel relay: a `SOCKHASH` keyed by the 4-tuple's ports as an `sk_skb` program sees
/// them, and a verdict program that redirects every segment a socket in the map receives
/// to the egress of the socket stored under that segment's ports.
mod sockmap {
    use std::io;
    use std::net::TcpStream;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use anyhow::Context;

    // From <linux/bpf.h> (checked against the uapi header of Debian bookworm's
    // linux-libc-dev; these values are ABI and never change).
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_ATTACH: libc::c_long = 8;
    const BPF_MAP_TYPE_SOCKHASH: u32 = 18;
    const BPF_PROG_TYPE_SK_SKB: u32 = 14;
    /// The verdict program without a stream parser (kernel 5.13 on).
    const BPF_SK_SKB_VERDICT: u32 = 38;
    const BPF_FUNC_SK_REDIRECT_HASH: i32 = 72;
    const BPF_PSEUDO_MAP_FD: u8 = 1;
    /// `offsetof(struct __sk_buff, remote_port)` and `local_port`.
    const SKB_REMOTE_PORT: i16 = 132;
    const SKB_LOCAL_PORT: i16 = 136;
    /// Sockets the map holds (two per tunnel).
    const MAX_ENTRIES: u32 = 4096;
    /// `sizeof(union bpf_attr)` as the uapi header of this era has it; the kernel accepts
    /// a larger or smaller one as long as the bytes it does not know are zero.
    const ATTR: usize = 144;

    /// One BPF instruction (`struct bpf_insn`).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Insn {
        code: u8,
        regs: u8,
        off: i16,
        imm: i32,
    }

    const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | dst,
            off,
            imm,
        }
    }

    /// The verdict program: the key is (remote_port, local_port) exactly as loaded from
    /// the context; `bpf_sk_redirect_hash(skb, map, &key, 0)` sends the segment out of the
    /// socket stored there (`SK_PASS`), or drops it when there is none (`SK_DROP`).
    fn program(map: i32) -> [Insn; 11] {
        [
            insn(0x61, 2, 1, SKB_REMOTE_PORT, 0), // r2 = skb->remote_port
            insn(0x63, 10, 2, -8, 0),             // *(u32 *)(r10 - 8) = r2
            insn(0x61, 2, 1, SKB_LOCAL_PORT, 0),  // r2 = skb->local_port
            insn(0x63, 10, 2, -4, 0),             // *(u32 *)(r10 - 4) = r2
            insn(0x18, 2, BPF_PSEUDO_MAP_FD, 0, map), // r2 = map (64-bit immediate, 2 slots)
            insn(0, 0, 0, 0, 0),
            insn(0xbf, 3, 10, 0, 0), // r3 = r10
            insn(0x07, 3, 0, 0, -8), // r3 += -8
            insn(0xb7, 4, 0, 0, 0),  // r4 = 0 (egress)
            insn(0x85, 0, 0, 0, BPF_FUNC_SK_REDIRECT_HASH),
            insn(0x95, 0, 0, 0, 0), // exit
        ]
    }

    fn put32(attr: &mut [u8; ATTR], at: usize, v: u32) {
        attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn put64(attr: &mut [u8; ATTR], at: usize, v: u64) {
        attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR]) -> io::Result<libc::c_long> {
        // SAFETY: `attr` is a live, zero-padded `union bpf_attr` of ATTR bytes; every
        // pointer inside it points at memory that outlives the call.
        let rc =
            unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR as libc::c_uint) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc)
        }
    }

    fn owned(fd: libc::c_long) -> OwnedFd {
        // SAFETY: `fd` was just returned by bpf(2) as a new descriptor owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd as i32) }
    }

    fn load(prog: &[Insn]) -> anyhow::Result<OwnedFd> {
        let license = c"GPL";
        let mut log = vec![0u8; 64 * 1024];
        let mut attr = [0u8; ATTR];
        put32(&mut attr, 0, BPF_PROG_TYPE_SK_SKB);
        put32(&mut attr, 4, prog.len() as u32);
        put64(&mut attr, 8, prog.as_ptr() as u64);
        put64(&mut attr, 16, license.as_ptr() as u64);
        put32(&mut attr, 24, 1); // log_level
        put32(&mut attr, 28, log.len() as u32);
        put64(&mut attr, 32, log.as_mut_ptr() as u64);
        match bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(fd) => Ok(owned(fd)),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                anyhow::bail!(
                    "loading an sk_skb program: {e}; verifier: {}",
                    String::from_utf8_lossy(&log[..end])
                );
            }
        }
    }

    fn attach(map: &OwnedFd, prog: &OwnedFd, kind: u32) -> anyhow::Result<()> {
        let mut attr = [0u8; ATTR];
        put32(&mut attr, 0, map.as_raw_fd() as u32);
        put32(&mut attr, 4, prog.as_raw_fd() as u32);
        put32(&mut attr, 8, kind);
        bpf(BPF_PROG_ATTACH, &mut attr).context("attaching an sk_skb program to the map")?;
        Ok(())
    }

    /// The map and the program attached to it (both live as long as the relay).
    pub struct Redirect {
        map: OwnedFd,
        _prog: OwnedFd,
    }

    /// The map key of the segments a socket receives: its peer's port as `remote_port`
    /// reads it (network order in the upper half of the word) and its own port as
    /// `local_port` reads it (host order).
    fn key_of(s: &TcpStream) -> io::Result<[u8; 8]> {
        let (local, peer) = (s.local_addr()?.port(), s.peer_addr()?.port());
        let mut key = [0u8; 8];
        key[2..4].copy_from_slice(&peer.to_be_bytes());
        key[4..8].copy_from_slice(&u32::from(local).to_ne_bytes());
        Ok(key)
    }

    impl Redirect {
        pub fn new() -> anyhow::Result<Self> {
            let mut attr = [0u8; ATTR];
            put32(&mut attr, 0, BPF_MAP_TYPE_SOCKHASH);
            put32(&mut attr, 4, 8); // key: two u32
            put32(&mut attr, 8, 4); // value: a socket fd
            put32(&mut attr, 12, MAX_ENTRIES);
            let map = owned(
                bpf(BPF_MAP_CREATE, &mut attr).context("creating the SOCKHASH (root, CAP_BPF)")?,
            );

            let prog = load(&program(map.as_raw_fd()))?;
            attach(&map, &prog, BPF_SK_SKB_VERDICT)?;
            Ok(Self { map, _prog: prog })
        }

        fn insert(&self, key: &[u8; 8], sock: &TcpStream) -> io::Result<()> {
            let fd: u32 = sock.as_raw_fd() as u32;
            let mut attr = [0u8; ATTR];
            put32(&mut attr, 0, self.map.as_raw_fd() as u32);
            put64(&mut attr, 8, key.as_ptr() as u64);
            put64(&mut attr, 16, std::ptr::from_ref(&fd) as u64);
            bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
        }

        /// From now on what `client` receives leaves through `upstream` and the other way
        /// round. A socket leaves the map when it is closed.
        pub fn pair(&self, client: &TcpStream, upstream: &TcpStream) -> anyhow::Result<()> {
            self.insert(&key_of(client)?, upstream)
                .context("inserting the upstream socket")?;
            self.insert(&key_of(upstream)?, client)
                .context("inserting the client socket")?;
            Ok(())
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

    /// Answers every 4-byte request with 256 KiB, until its client closes.
    fn answering(mut c: TcpStream) {
        let answer = vec![7u8; 256 << 10];
        let mut req = [0u8; 4];
        while c.read_exact(&mut req).is_ok() {
            c.write_all(&answer).unwrap();
        }
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

    /// Root (scripts/test runs the tests as root): the kernel relays through the map, the
    /// way the bench's cells use a tunnel: a request, its whole response, and the close
    /// once the last response is in. (A client that closes its side while a response is
    /// still flowing loses that response on kernel 6.18: see the module doc.)
    #[test]
    fn the_sockmap_relay_relays_requests_and_responses() {
        let mut c = tunnel(Mode::Sockmap, &upstream(answering));
        let mut answer = vec![0u8; 256 << 10];
        for _ in 0..40 {
            c.write_all(b"more").unwrap();
            c.read_exact(&mut answer).unwrap();
            assert!(
                answer.iter().all(|&b| b == 7),
                "the answer came through unchanged"
            );
        }
        c.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "nothing after the last answer but the end");
    }
}
