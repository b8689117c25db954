//! Who is on the other end: the uid owning a client's socket, via netlink `sock_diag`.
//!
//! Every client of the proxy is on loopback, so the peer address says nothing about who it
//! is; the kernel knows which uid created the socket. One exact-match `SOCK_DIAG_BY_FAMILY`
//! request per connection (a single send/recv pair on one netlink socket, answered
//! synchronously by the kernel) costs a few microseconds, where scanning `/proc/net/tcp`
//! would cost time linear in the number of sockets on the machine.
//!
//! The request/response encoding is pure and unit-tested; [`SockDiag`] does the I/O.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

/// Transport of the client socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// Looks up the uid owning the client end of a connection.
pub trait PeerIdentity: std::fmt::Debug + Send + Sync + 'static {
    /// The uid of the socket bound to `peer` and talking to `local`, when the kernel knows.
    fn uid(&self, proto: Proto, peer: SocketAddr, local: SocketAddr) -> Option<u32>;
}

/// No identity (tests that do not care; platforms without `sock_diag`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoIdentity;

impl PeerIdentity for NoIdentity {
    fn uid(&self, _: Proto, _: SocketAddr, _: SocketAddr) -> Option<u32> {
        None
    }
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
/// `inet_diag_req_v2`: family, protocol, ext, pad, states, then the 48-byte socket id.
const REQ_LEN: usize = 8 + SOCKID_LEN;
const SOCKID_LEN: usize = 48;
/// Offset of `idiag_uid` in `inet_diag_msg` (4 bytes of header, the id, expires, rqueue,
/// wqueue).
const UID_OFFSET: usize = 4 + SOCKID_LEN + 12;

/// Encodes the exact-match request for the socket whose source is `src` and destination
/// `dst` (the client's view: source = the client's address).
#[must_use]
pub fn encode_request(proto: Proto, src: SocketAddr, dst: SocketAddr, seq: u32) -> Vec<u8> {
    let total = NLMSG_HDRLEN + REQ_LEN;
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&u32::try_from(total).unwrap_or(0).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // pid: kernel
    let family = if src.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    b.push(u8::try_from(family).unwrap_or(2));
    b.push(match proto {
        Proto::Tcp => 6,
        Proto::Udp => 17,
    });
    b.push(0); // idiag_ext
    b.push(0); // pad
    b.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    // inet_diag_sockid: ports and addresses in network order.
    b.extend_from_slice(&src.port().to_be_bytes());
    b.extend_from_slice(&dst.port().to_be_bytes());
    push_addr(&mut b, src.ip());
    push_addr(&mut b, dst.ip());
    b.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    b.extend_from_slice(&u32::MAX.to_ne_bytes()); // cookie: INET_DIAG_NOCOOKIE
    b.extend_from_slice(&u32::MAX.to_ne_bytes());
    b
}

fn push_addr(b: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            b.extend_from_slice(&v4.octets());
            b.extend_from_slice(&[0u8; 12]);
        }
        IpAddr::V6(v6) => b.extend_from_slice(&v6.octets()),
    }
}

/// The uid in a kernel answer to request `seq`, or `None` (error, other message, short).
#[must_use]
pub fn decode_uid(buf: &[u8], seq: u32) -> Option<u32> {
    let hdr = buf.get(..NLMSG_HDRLEN)?;
    let len = usize::try_from(u32::from_ne_bytes(hdr[0..4].try_into().ok()?)).ok()?;
    let ty = u16::from_ne_bytes(hdr[4..6].try_into().ok()?);
    let got_seq = u32::from_ne_bytes(hdr[8..12].try_into().ok()?);
    if got_seq != seq || ty == NLMSG_ERROR || ty != SOCK_DIAG_BY_FAMILY || len > buf.len() {
        return None;
    }
    let body = buf.get(NLMSG_HDRLEN..len)?;
    let uid = body.get(UID_OFFSET..UID_OFFSET + 4)?;
    Some(u32::from_ne_bytes(uid.try_into().ok()?))
}

/// `sock_diag` over one netlink socket.
#[derive(Debug)]
pub struct SockDiag {
    fd: Mutex<OwnedFd>,
    seq: AtomicU32,
}

impl SockDiag {
    /// Opens the netlink socket.
    ///
    /// # Errors
    /// When the kernel has no `NETLINK_SOCK_DIAG`.
    pub fn open() -> std::io::Result<Self> {
        let fd = socket::socket(
            AddressFamily::Netlink,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkSockDiag,
        )?;
        Ok(Self {
            fd: Mutex::new(fd),
            seq: AtomicU32::new(1),
        })
    }

    fn ask(&self, proto: Proto, src: SocketAddr, dst: SocketAddr) -> Option<u32> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let req = encode_request(proto, src, dst, seq);
        let fd = self.fd.lock().ok()?;
        let raw = fd.as_raw_fd();
        socket::sendto(raw, &req, &NetlinkAddr::new(0, 0), MsgFlags::empty()).ok()?;
        let mut buf = [0u8; 512];
        // The kernel answers inside sendto; never block the runtime waiting.
        loop {
            let n = socket::recv(raw, &mut buf, MsgFlags::MSG_DONTWAIT).ok()?;
            let got = buf
                .get(8..12)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_ne_bytes);
            if got == Some(seq) || n == 0 {
                return decode_uid(&buf[..n], seq);
            }
            // A stale answer to an earlier request: skip it.
        }
    }
}

impl PeerIdentity for SockDiag {
    fn uid(&self, proto: Proto, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
        match proto {
            // TCP looks up the socket whose own address is `src` and peer is `dst`.
            Proto::Tcp => self.ask(proto, peer, local),
            // UDP looks up the socket that would *receive* a datagram from `src` to `dst`
            // (connected or not): the client's socket receives from us.
            Proto::Udp => self.ask(proto, local, peer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout() {
        let src: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let r = encode_request(Proto::Tcp, src, dst, 9);
        assert_eq!(r.len(), 72);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 72);
        assert_eq!(r[16], 2); // AF_INET
        assert_eq!(r[17], 6); // TCP
        assert_eq!(&r[24..26], &40000u16.to_be_bytes());
        assert_eq!(&r[26..28], &3128u16.to_be_bytes());
        assert_eq!(&r[28..32], &[127, 0, 0, 1]);
        assert_eq!(&r[44..48], &[127, 0, 0, 1]);
    }

    #[test]
    fn decode_rejects_errors_and_short_answers() {
        assert_eq!(decode_uid(&[], 1), None);
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[8..12].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(decode_uid(&err, 1), None);
        let mut ok = vec![0u8; NLMSG_HDRLEN + 72];
        let n = u32::try_from(ok.len()).unwrap();
        ok[0..4].copy_from_slice(&n.to_ne_bytes());
        ok[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        ok[8..12].copy_from_slice(&5u32.to_ne_bytes());
        ok[NLMSG_HDRLEN + UID_OFFSET..NLMSG_HDRLEN + UID_OFFSET + 4]
            .copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(decode_uid(&ok, 5), Some(1000));
        assert_eq!(decode_uid(&ok, 6), None, "answer to another request");
        assert_eq!(decode_uid(&ok[..40], 5), None);
    }

    #[test]
    fn the_kernel_names_the_owner_of_a_real_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let diag = SockDiag::open().unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            diag.uid(Proto::Tcp, peer, l.local_addr().unwrap()),
            Some(me)
        );
        // A socket that does not exist has no owner.
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(diag.uid(Proto::Tcp, nobody, l.local_addr().unwrap()), None);
    }

    /// Needs root to run the client as another uid (dev machines and CI are root).
    #[test]
    fn owners_of_other_uids_are_told_apart() {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let diag = SockDiag::open().unwrap();
        // UDP: a client of uid 65534 sends us a datagram.
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/udp/127.0.0.1/{port}; echo x >&3; sleep 5"
            ))
            .uid(65534)
            .gid(65534)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut buf = [0u8; 8];
        let (_, client) = server.recv_from(&mut buf).unwrap();
        let udp = diag.uid(Proto::Udp, client, server.local_addr().unwrap());
        // TCP: same.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut child2 = Command::new("bash")
            .arg("-c")
            .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}; sleep 5"))
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let (_s, peer) = l.accept().unwrap();
        let tcp = diag.uid(Proto::Tcp, peer, l.local_addr().unwrap());
        let _ = child.kill();
        let _ = child2.kill();
        let _ = child.wait();
        let _ = child2.wait();
        assert_eq!(udp, Some(65534));
        assert_eq!(tcp, Some(65534));
    }
}
