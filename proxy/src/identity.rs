//! Who is on the other end: the uid owning a client's socket, via netlink `sock_diag`.
//!
//! Every client of the proxy is on loopback, so the peer address says nothing about who it
//! is; the kernel knows which uid created the socket. One exact-match `SOCK_DIAG_BY_FAMILY`
//! request per connection (a single send/recv pair on one netlink socket, answered
//! synchronously by the kernel) costs a few microseconds, where scanning `/proc/net/tcp`
//! would cost time linear in the number of sockets on the machine.
//!
//! UDP is different: the agent's datagram reaches us through a NAT redirect, and a client
//! socket that is connected (glibc, dig, c-ares) is connected to the nameserver it thinks it
//! talks to, an address we never see. The kernel's exact lookup needs that address, so a UDP
//! client is found instead by a dump of the UDP sockets bound to its source port (a
//! bytecode filter in the kernel keeps the answer to those few), matched on its source
//! address (or a wildcard bind), IPv4 first, then dual-stack IPv6 sockets.
//!
//! The agent's sessions are told apart by address instead: the firewall rewrites the source
//! of each session's connections to the proxy to that session's loopback address
//! (`127.77.0.k`, by the session's gid: see `airlock_channels::session_of`), so a peer at
//! one of those addresses is session `k` of the agent, and its socket (still bound to the
//! address it had before the rewrite) is not looked up. No session can take another's
//! address: a source it binds itself is rewritten too.
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
    /// The uid of the socket bound to `peer` and talking to `local`, when the kernel knows
    /// (for UDP, `local` is not needed: the client's own address and port name its socket).
    fn uid(&self, proto: Proto, peer: SocketAddr, local: SocketAddr) -> Option<u32>;
}

/// Who is on the other end of a connection: the uid owning its socket and, for the agent,
/// which of its sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The uid owning the client socket (the agent's for a session), when known.
    pub uid: Option<u32>,
    /// The agent's session, when the peer is a session's address.
    pub session: Option<u16>,
}

impl Caller {
    /// A client known only by its uid (or not at all).
    #[must_use]
    pub const fn uid(uid: Option<u32>) -> Self {
        Self { uid, session: None }
    }

    /// Names this caller on an audit line: its uid and session.
    pub fn stamp<R>(self, rec: &mut airlock_audit_schema::Record<R>) {
        rec.uid = self.uid;
        rec.agent_session = self.session;
    }
}

/// Who is calling from `peer`: session `k` of the agent (`agent_uid`) when `peer` is that
/// session's address, else whoever `identity` says owns the socket (`local`: what the
/// client connected to, when known).
#[must_use]
pub fn caller(
    identity: &dyn PeerIdentity,
    agent_uid: Option<u32>,
    proto: Proto,
    peer: SocketAddr,
    local: Option<SocketAddr>,
) -> Caller {
    match airlock_channels::session_of(peer.ip()) {
        Some(k) => Caller {
            uid: agent_uid,
            session: Some(k),
        },
        None => Caller::uid(local.and_then(|l| identity.uid(proto, peer, l))),
    }
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
/// `NLM_F_ROOT | NLM_F_MATCH`.
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
/// The request attribute carrying a filter program.
const INET_DIAG_REQ_BYTECODE: u16 = 1;
/// Filter ops: the socket's own port is at least / at most the next op's `no`.
const INET_DIAG_BC_S_GE: u8 = 2;
const INET_DIAG_BC_S_LE: u8 = 3;
/// The filter: `sport >= port && sport <= port`, four 4-byte ops (the `*_EQ` op is newer
/// than some kernels we run on).
const BYTECODE_LEN: usize = 16;
/// Largest datagram of a dump answer: the kernel sizes them to the reader's buffer, never
/// past 32 KiB.
const DUMP_BUF: usize = 32 * 1024;
/// Datagrams read for one dump before giving up on it (the filter keeps it to one).
const DUMP_MAX_CHUNKS: usize = 64;
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
    let mut b = header(NLMSG_HDRLEN + REQ_LEN, NLM_F_REQUEST, seq);
    push_req(&mut b, src.is_ipv6(), proto);
    // inet_diag_sockid: ports and addresses in network order.
    b.extend_from_slice(&src.port().to_be_bytes());
    b.extend_from_slice(&dst.port().to_be_bytes());
    push_addr(&mut b, src.ip());
    push_addr(&mut b, dst.ip());
    push_id_tail(&mut b);
    b
}

/// Encodes a dump of the UDP sockets (IPv6 ones when `v6`) whose own port is `port`: every
/// socket id field zero, the port in a bytecode filter the kernel runs on each socket.
#[must_use]
pub fn encode_udp_dump(v6: bool, port: u16, seq: u32) -> Vec<u8> {
    let attr = 4 + BYTECODE_LEN;
    let mut b = header(
        NLMSG_HDRLEN + REQ_LEN + attr,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
    );
    push_req(&mut b, v6, Proto::Udp);
    b.extend_from_slice(&[0u8; 4 + 32]); // ports, addresses: any
    push_id_tail(&mut b);
    b.extend_from_slice(&u16::try_from(attr).unwrap_or(0).to_ne_bytes());
    b.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
    // struct inet_diag_bc_op { u8 code; u8 yes; u16 no; }: `yes` steps to the next test,
    // `no` jumps 4 bytes past the end (reject); the op after a test holds its port.
    for (code, no) in [(INET_DIAG_BC_S_GE, 20u16), (INET_DIAG_BC_S_LE, 12)] {
        b.extend_from_slice(&[code, 8]);
        b.extend_from_slice(&no.to_ne_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&port.to_ne_bytes());
    }
    b
}

/// The netlink header of a `SOCK_DIAG_BY_FAMILY` message of `total` bytes.
fn header(total: usize, flags: u16, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&u32::try_from(total).unwrap_or(0).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // pid: kernel
    b
}

/// `inet_diag_req_v2` up to its socket id: family, protocol, no extensions, every state.
fn push_req(b: &mut Vec<u8>, v6: bool, proto: Proto) {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    b.push(u8::try_from(family).unwrap_or(2));
    b.push(match proto {
        Proto::Tcp => 6,
        Proto::Udp => 17,
    });
    b.push(0); // idiag_ext
    b.push(0); // pad
    b.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
}

/// The socket id's interface (any) and cookie (`INET_DIAG_NOCOOKIE`).
fn push_id_tail(b: &mut Vec<u8>) {
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&u32::MAX.to_ne_bytes());
    b.extend_from_slice(&u32::MAX.to_ne_bytes());
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

/// A socket in a dump answer: the address and port it is bound to, and its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Its own address (unspecified for a wildcard bind; IPv4-mapped on a dual-stack
    /// socket bound to an IPv4 address).
    pub addr: IpAddr,
    /// Its own port.
    pub port: u16,
    /// The uid owning it.
    pub uid: u32,
}

/// One datagram of a dump answer to request `seq`: its sockets, and whether it ends the
/// dump (`NLMSG_DONE`, or an error, which ends it too). Messages of other requests are
/// skipped.
#[must_use]
pub fn decode_dump(buf: &[u8], seq: u32) -> (Vec<Bound>, bool) {
    let mut sockets = Vec::new();
    let mut rest = buf;
    while let Some(hdr) = rest.get(..NLMSG_HDRLEN) {
        let word = |i: usize| u32::from_ne_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let len = usize::try_from(word(0)).unwrap_or(usize::MAX);
        let ty = u16::from_ne_bytes([hdr[4], hdr[5]]);
        let Some(msg) = rest.get(..len).filter(|_| len >= NLMSG_HDRLEN) else {
            break; // cut short: nothing more to read in this datagram
        };
        if word(8) == seq {
            if ty == NLMSG_DONE || ty == NLMSG_ERROR {
                return (sockets, true);
            }
            if ty == SOCK_DIAG_BY_FAMILY {
                sockets.extend(decode_bound(&msg[NLMSG_HDRLEN..]));
            }
        }
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    (sockets, false)
}

/// The socket an `inet_diag_msg` describes.
fn decode_bound(msg: &[u8]) -> Option<Bound> {
    let port = u16::from_be_bytes(msg.get(4..6)?.try_into().ok()?);
    let src = msg.get(8..24)?;
    let addr = match i32::from(*msg.first()?) {
        libc::AF_INET => IpAddr::from(<[u8; 4]>::try_from(&src[..4]).ok()?),
        libc::AF_INET6 => IpAddr::from(<[u8; 16]>::try_from(src).ok()?),
        _ => return None,
    };
    let uid = u32::from_ne_bytes(msg.get(UID_OFFSET..UID_OFFSET + 4)?.try_into().ok()?);
    Some(Bound { addr, port, uid })
}

/// Who owns the UDP socket a datagram from `peer` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// No socket is bound where it came from.
    Nobody,
    /// Every socket that could have sent it belongs to this uid.
    Uid(u32),
    /// Sockets of different uids could have sent it (shared ports): never a guess.
    Ambiguous,
}

/// The owner of the socket that sent from `peer`, among `sockets`: one bound to its port
/// and to its address or the wildcard (IPv4-mapped addresses count as IPv4).
#[must_use]
pub fn udp_owner(sockets: &[Bound], peer: SocketAddr) -> Owner {
    let ip = peer.ip().to_canonical();
    let mut uids = sockets
        .iter()
        .filter(|b| b.port == peer.port())
        .filter(|b| b.addr.is_unspecified() || b.addr.to_canonical() == ip)
        .map(|b| b.uid);
    match uids.next() {
        None => Owner::Nobody,
        Some(first) if uids.all(|u| u == first) => Owner::Uid(first),
        Some(_) => Owner::Ambiguous,
    }
}

/// `sock_diag` over one netlink socket.
#[derive(Debug)]
pub struct SockDiag {
    inner: Mutex<Netlink>,
    seq: AtomicU32,
}

/// The netlink socket and the buffer dump answers are read into.
#[derive(Debug)]
struct Netlink {
    fd: OwnedFd,
    buf: Vec<u8>,
}

fn open_netlink() -> std::io::Result<OwnedFd> {
    Ok(socket::socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?)
}

impl SockDiag {
    /// Opens the netlink socket.
    ///
    /// # Errors
    /// When the kernel has no `NETLINK_SOCK_DIAG`.
    pub fn open() -> std::io::Result<Self> {
        Ok(Self {
            inner: Mutex::new(Netlink {
                fd: open_netlink()?,
                buf: vec![0u8; DUMP_BUF],
            }),
            seq: AtomicU32::new(1),
        })
    }

    fn ask(&self, proto: Proto, src: SocketAddr, dst: SocketAddr) -> Option<u32> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let req = encode_request(proto, src, dst, seq);
        let nl = self.inner.lock().ok()?;
        let raw = nl.fd.as_raw_fd();
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

    /// The UDP sockets (IPv6 ones when `v6`) bound to `port`, or `None` when the kernel
    /// did not answer in full.
    fn dump_udp(&self, v6: bool, port: u16) -> Option<Vec<Bound>> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let req = encode_udp_dump(v6, port, seq);
        let mut nl = self.inner.lock().ok()?;
        let raw = nl.fd.as_raw_fd();
        socket::sendto(raw, &req, &NetlinkAddr::new(0, 0), MsgFlags::empty()).ok()?;
        let mut sockets = Vec::new();
        // The kernel writes each datagram of a dump synchronously, in sendto and then in
        // the recv that consumes the one before: none of these reads waits.
        for _ in 0..DUMP_MAX_CHUNKS {
            let Ok(n) = socket::recv(raw, &mut nl.buf, MsgFlags::MSG_DONTWAIT) else {
                break;
            };
            let (found, done) = decode_dump(&nl.buf[..n], seq);
            sockets.extend(found);
            if done {
                return Some(sockets);
            }
        }
        // An unfinished dump would answer (or refuse) the next request: start afresh.
        if let Ok(fd) = open_netlink() {
            nl.fd = fd;
        }
        None
    }

    /// The owner of the UDP socket that sent from `peer`: among IPv4 sockets, else among
    /// dual-stack IPv6 ones (an IPv4 datagram comes from an IPv6 socket only when no IPv4
    /// socket holds its port).
    fn udp(&self, peer: SocketAddr) -> Option<u32> {
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let families: &[bool] = if peer.is_ipv4() {
            &[false, true]
        } else {
            &[true]
        };
        for &v6 in families {
            match udp_owner(&self.dump_udp(v6, peer.port())?, peer) {
                Owner::Nobody => {}
                Owner::Uid(uid) => return Some(uid),
                Owner::Ambiguous => return None,
            }
        }
        None
    }
}

impl PeerIdentity for SockDiag {
    fn uid(&self, proto: Proto, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
        match proto {
            // TCP looks up the socket whose own address is `src` and peer is `dst`.
            Proto::Tcp => self.ask(proto, peer, local),
            // UDP: the client's socket may be connected to an address we never saw (the
            // nameserver it asked, before the redirect), so it is found by its own.
            Proto::Udp => self.udp(peer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every lookup with one uid, counting them.
    #[derive(Debug, Default)]
    struct Fixed(std::sync::atomic::AtomicUsize);

    impl PeerIdentity for Fixed {
        fn uid(&self, _: Proto, _: SocketAddr, _: SocketAddr) -> Option<u32> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Some(4242)
        }
    }

    /// A session's address names the session and the agent's uid, without a lookup (the
    /// socket is bound to the address it had before the firewall's rewrite); any other
    /// peer, 127.0.0.1 or an address past the pool, is looked up and is no session.
    #[test]
    fn a_session_is_its_address_and_every_other_peer_is_looked_up() {
        let diag = Fixed::default();
        let local: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let at = |ip: &str| {
            caller(
                &diag,
                Some(1000),
                Proto::Tcp,
                format!("{ip}:40000").parse().unwrap(),
                Some(local),
            )
        };
        assert_eq!(
            at("127.77.0.2"),
            Caller {
                uid: Some(1000),
                session: Some(2)
            }
        );
        assert_eq!(
            at("127.77.0.1"),
            Caller {
                uid: Some(1000),
                session: Some(1)
            }
        );
        assert_eq!(diag.0.load(Ordering::Relaxed), 0);
        assert_eq!(at("127.0.0.1"), Caller::uid(Some(4242)));
        assert_eq!(at("127.77.0.200"), Caller::uid(Some(4242)));
        assert_eq!(diag.0.load(Ordering::Relaxed), 2);
        let unknown = caller(
            &diag,
            None,
            Proto::Udp,
            "127.0.0.1:5".parse().unwrap(),
            None,
        );
        assert_eq!(unknown, Caller::default());
    }

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

    /// An `inet_diag_msg` answer to `seq` for a socket bound to `addr` owned by `uid`.
    fn diag_msg(seq: u32, addr: SocketAddr, uid: u32) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDRLEN + 72];
        let n = u32::try_from(m.len()).unwrap();
        m[0..4].copy_from_slice(&n.to_ne_bytes());
        m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        let body = &mut m[NLMSG_HDRLEN..];
        body[0] = if addr.is_ipv4() { 2 } else { 10 };
        body[4..6].copy_from_slice(&addr.port().to_be_bytes());
        match addr.ip() {
            IpAddr::V4(v4) => body[8..12].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => body[8..24].copy_from_slice(&v6.octets()),
        }
        body[UID_OFFSET..UID_OFFSET + 4].copy_from_slice(&uid.to_ne_bytes());
        m
    }

    fn control(ty: u16, seq: u32) -> Vec<u8> {
        let mut m = vec![0u8; 20];
        m[0..4].copy_from_slice(&20u32.to_ne_bytes());
        m[4..6].copy_from_slice(&ty.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        m
    }

    #[test]
    fn udp_dump_request_layout() {
        let r = encode_udp_dump(false, 40000, 7);
        assert_eq!(r.len(), 92);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 92);
        assert_eq!(u16::from_ne_bytes(r[6..8].try_into().unwrap()), 0x301);
        assert_eq!((r[16], r[17]), (2, 17)); // AF_INET, UDP
        assert!(r[24..64].iter().all(|b| *b == 0), "no socket id: a dump");
        assert_eq!(&r[64..72], &[0xff; 8], "no cookie");
        assert_eq!(u16::from_ne_bytes(r[72..74].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes(r[74..76].try_into().unwrap()), 1);
        let op = |i: usize| {
            let o = &r[76 + 4 * i..80 + 4 * i];
            (o[0], o[1], u16::from_ne_bytes([o[2], o[3]]))
        };
        assert_eq!(op(0), (INET_DIAG_BC_S_GE, 8, 20));
        assert_eq!(op(1).2, 40000);
        assert_eq!(op(2), (INET_DIAG_BC_S_LE, 8, 12));
        assert_eq!(op(3).2, 40000);
        assert_eq!(encode_udp_dump(true, 1, 7)[16], 10, "AF_INET6");
    }

    #[test]
    fn dump_answers_are_read_socket_by_socket_until_done() {
        let a: SocketAddr = "198.51.100.2:5000".parse().unwrap();
        let b: SocketAddr = "[::ffff:198.51.100.2]:5000".parse().unwrap();
        let mut chunk = diag_msg(3, a, 1000);
        chunk.extend(diag_msg(2, a, 0)); // an earlier request's: skipped
        chunk.extend(diag_msg(3, b, 1001));
        let (found, done) = decode_dump(&chunk, 3);
        assert!(!done);
        assert_eq!(
            found,
            vec![
                Bound {
                    addr: a.ip(),
                    port: 5000,
                    uid: 1000
                },
                Bound {
                    addr: b.ip(),
                    port: 5000,
                    uid: 1001
                }
            ]
        );
        chunk.extend(control(NLMSG_DONE, 3));
        assert!(decode_dump(&chunk, 3).1);
        assert!(
            decode_dump(&control(NLMSG_ERROR, 3), 3).1,
            "an error ends it"
        );
        assert!(!decode_dump(&control(NLMSG_DONE, 4), 3).1, "another's end");
        // Cut short or zero-length headers end the datagram, never loop or panic.
        assert_eq!(decode_dump(&chunk[..50], 3), (vec![], false));
        assert_eq!(decode_dump(&[0u8; 40], 3), (vec![], false));
    }

    #[test]
    fn the_owner_is_the_one_socket_bound_where_the_datagram_came_from() {
        let peer: SocketAddr = "198.51.100.2:5000".parse().unwrap();
        let bound = |a: &str, uid| {
            let a: SocketAddr = a.parse().unwrap();
            Bound {
                addr: a.ip(),
                port: a.port(),
                uid,
            }
        };
        let exact = bound("198.51.100.2:5000", 1000);
        let wild = bound("0.0.0.0:5000", 1000);
        let mapped = bound("[::ffff:198.51.100.2]:5000", 1000);
        let dual = bound("[::]:5000", 1000);
        for s in [exact, wild, mapped, dual] {
            assert_eq!(udp_owner(&[s], peer), Owner::Uid(1000), "{s:?}");
        }
        let elsewhere = [
            bound("127.0.0.1:5000", 7),
            bound("198.51.100.2:5001", 7),
            bound("[::1]:5000", 7),
        ];
        assert_eq!(udp_owner(&elsewhere, peer), Owner::Nobody);
        let mut with_it = elsewhere.to_vec();
        with_it.push(exact);
        assert_eq!(udp_owner(&with_it, peer), Owner::Uid(1000));
        // A shared port held by two uids: nobody is named.
        assert_eq!(
            udp_owner(&[exact, bound("0.0.0.0:5000", 0)], peer),
            Owner::Ambiguous
        );
        // A v4-mapped peer (a dual-stack listener) is the same client.
        let mapped_peer: SocketAddr = "[::ffff:198.51.100.2]:5000".parse().unwrap();
        assert_eq!(udp_owner(&[exact], mapped_peer), Owner::Uid(1000));
    }

    /// A resolver's UDP socket is connected to the nameserver it asked, which is not where
    /// a redirected datagram arrives: it is still found, as are dual-stack sockets sending
    /// IPv4 and unconnected ones.
    #[test]
    fn the_kernel_names_the_owner_of_a_connected_or_dual_stack_udp_socket() {
        let diag = SockDiag::open().unwrap();
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let ours: SocketAddr = "127.0.0.1:53".parse().unwrap();
        let connected = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        connected.connect("127.0.0.9:53").unwrap();
        let unconnected = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let dual = std::net::UdpSocket::bind("[::]:0").unwrap();
        dual.connect("[::ffff:127.0.0.9]:53").unwrap();
        for (what, sock) in [
            ("connected", &connected),
            ("unconnected", &unconnected),
            ("dual-stack", &dual),
        ] {
            let port = sock.local_addr().unwrap().port();
            let peer = SocketAddr::from(([127, 0, 0, 1], port));
            assert_eq!(diag.uid(Proto::Udp, peer, ours), Some(me), "{what}");
        }
        drop(connected);
        // A closed socket is named by no one. Tests run in parallel, and another may bind
        // the freed port at once, so the check is made with fresh sockets until one port
        // stays free long enough; a lookup that named closed sockets would fail every try.
        let closed_is_unnamed = (0..20).any(|_| {
            let gone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let addr = gone.local_addr().unwrap();
            drop(gone);
            diag.uid(Proto::Udp, addr, ours).is_none()
        });
        assert!(closed_is_unnamed, "a closed socket was named in 20 tries");
        // The socket is usable for exact lookups after dumps.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let tcp = diag.uid(Proto::Tcp, c.local_addr().unwrap(), l.local_addr().unwrap());
        assert_eq!(tcp, Some(me));
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
