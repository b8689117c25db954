//! The self-test, run as the agent (same drop, same seccomp filter) before the agent starts.
//!
//! Every probe must be *stopped*: refused, reset or unreachable at once, or answered by
//! airlock itself with a denial (`x-airlock-error` on HTTP, an Extended DNS Error naming
//! airlock on DNS). Anything else (a foreign answer, or a silent hang that means a packet went
//! somewhere) fails the start. The proxy must answer its health check and deny a hard-denied
//! address (the metadata address) asked of it by name; in enforce mode a blocked domain must
//! be denied too.
//!
//! Report mode (`[sandbox] mode = "report"`) lets policy denials through, so no probe may
//! rest on one there: every probe that runs in both modes is one the proxy refuses whatever
//! the mode (hard denies: IP literals and the metadata address on the transparent and
//! explicit paths; DNS queries of a type the filter never answers, `TXT`). Only
//! [`Probe::BlockedDomain`] is a policy denial, and it runs in enforce mode only
//! ([`Mode`]). Probes target only the container's own gateway,
//! its configured resolver, the metadata address and the documentation range: if the firewall
//! were broken, nothing would leave the host's own network.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::Duration;

/// Hidden first argument: run the self-test probes (as the agent, spawned by PID 1).
pub const ARG: &str = "__self-test";

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);
const IO_TIMEOUT: Duration = Duration::from_millis(1500);
/// A name no policy allows: the proxy must deny it without resolving it.
pub const BLOCKED_NAME: &str = "airlock-self-test.invalid";

/// One probe and where it goes.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A direct TCP connection that must not reach its destination.
    DirectTcp {
        label: &'static str,
        addr: SocketAddr,
    },
    /// A DNS query to a resolver that must not reach it.
    ForeignDns {
        label: &'static str,
        addr: SocketAddr,
    },
    /// The explicit proxy must answer its health check.
    ProxyHealth { proxy: SocketAddr },
    /// A request for a blocked domain through the explicit proxy must be denied (enforce
    /// mode only: report mode lets it through by design).
    BlockedDomain { proxy: SocketAddr },
    /// A request for the metadata address through the explicit proxy must be denied: a hard
    /// deny, in every mode.
    HardDenied { proxy: SocketAddr },
}

/// The policy's mode, as far as the self-test cares: which probes can expect a denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    Report,
}

impl Mode {
    /// The argument the self-test process is given.
    pub fn as_arg(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Report => "report",
        }
    }

    /// The policy's mode.
    pub fn of(mode: airlock_policy::Mode) -> Mode {
        match mode {
            airlock_policy::Mode::Report => Mode::Report,
            airlock_policy::Mode::Enforce => Mode::Enforce,
        }
    }

    /// Parses [`Mode::as_arg`]; anything else is enforce (the stricter test).
    pub fn from_arg(arg: Option<&str>) -> Mode {
        match arg {
            Some("report") => Mode::Report,
            _ => Mode::Enforce,
        }
    }
}

/// The metadata address the explicit proxy must refuse (a hard deny).
pub const HARD_DENIED_URL: &str = "http://169.254.169.254/";

/// What a probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The kernel stopped it at once (refused, reset, unreachable, not permitted).
    Rejected(String),
    /// Airlock answered it with a denial.
    DeniedByAirlock,
    /// It worked, as required (health check).
    Answered,
    /// Something else: the start must be refused.
    Unexpected(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Rejected(why) => write!(f, "rejected ({why})"),
            Outcome::DeniedByAirlock => f.write_str("denied by airlock"),
            Outcome::Answered => f.write_str("answered"),
            Outcome::Unexpected(what) => f.write_str(what),
        }
    }
}

impl Probe {
    pub fn label(&self) -> String {
        match self {
            Probe::DirectTcp { label, addr } | Probe::ForeignDns { label, addr } => {
                format!("{label} {addr}")
            }
            Probe::ProxyHealth { proxy } => format!("proxy health {proxy}"),
            Probe::BlockedDomain { proxy } => format!("blocked domain {BLOCKED_NAME} via {proxy}"),
            Probe::HardDenied { proxy } => format!("hard-denied {HARD_DENIED_URL} via {proxy}"),
        }
    }

    /// Run the probe; `Ok` when the property holds.
    pub fn run(&self) -> Result<Outcome, Outcome> {
        match self {
            Probe::DirectTcp { addr, .. } => must_be_stopped(tcp_probe(*addr)),
            Probe::ForeignDns { addr, .. } => must_be_stopped(dns_probe(*addr)),
            Probe::ProxyHealth { proxy } => {
                let req = format!(
                    "GET {} HTTP/1.1\r\nHost: {proxy}\r\nConnection: close\r\n\r\n",
                    airlock_channels::HEALTH_PATH
                );
                match http_exchange(*proxy, &req) {
                    Ok(resp) if status_code(&resp) == Some(200) => Ok(Outcome::Answered),
                    Ok(resp) => Err(Outcome::Unexpected(format!(
                        "proxy answered {:?}",
                        first_line(&resp)
                    ))),
                    Err(e) => Err(Outcome::Unexpected(format!("proxy did not answer: {e}"))),
                }
            }
            Probe::BlockedDomain { proxy } => {
                let req = format!(
                    "GET http://{BLOCKED_NAME}/ HTTP/1.1\r\nHost: {BLOCKED_NAME}\r\nConnection: close\r\n\r\n"
                );
                proxy_must_deny(*proxy, &req, "a blocked domain")
            }
            Probe::HardDenied { proxy } => {
                let req = format!(
                    "GET {HARD_DENIED_URL} HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n\r\n"
                );
                proxy_must_deny(*proxy, &req, "the metadata address")
            }
        }
    }
}

/// The explicit proxy must answer `request` with its own 403.
fn proxy_must_deny(proxy: SocketAddr, request: &str, what: &str) -> Result<Outcome, Outcome> {
    match http_exchange(proxy, request) {
        Ok(resp) if status_code(&resp) == Some(403) && has_airlock_error(&resp) => {
            Ok(Outcome::DeniedByAirlock)
        }
        Ok(resp) => Err(Outcome::Unexpected(format!(
            "proxy let {what} through: {:?}",
            first_line(&resp)
        ))),
        Err(e) => Err(Outcome::Unexpected(format!("proxy did not answer: {e}"))),
    }
}

fn must_be_stopped(outcome: Outcome) -> Result<Outcome, Outcome> {
    match outcome {
        Outcome::Rejected(_) | Outcome::DeniedByAirlock => Ok(outcome),
        other => Err(other),
    }
}

/// Errors that mean the kernel (our REJECT rules, or no route) stopped the packet at once.
fn is_fast_rejection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::AddrNotAvailable
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EPERM | libc::EACCES)
    )
}

fn tcp_probe(addr: SocketAddr) -> Outcome {
    let mut stream = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) if is_fast_rejection(&e) => return Outcome::Rejected(e.to_string()),
        Err(e) => return Outcome::Unexpected(format!("connect did not fail fast: {e}")),
    };
    // Connected: only airlock's transparent listener may accept it, and it must deny.
    let req = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        addr.ip()
    );
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    if let Err(e) = stream.write_all(req.as_bytes()) {
        return if is_fast_rejection(&e) {
            Outcome::Rejected(e.to_string())
        } else {
            Outcome::Unexpected(e.to_string())
        };
    }
    match read_some(&mut stream) {
        Ok(resp) if resp.is_empty() => {
            Outcome::Rejected("closed by the transparent listener".into())
        }
        Ok(resp) if has_airlock_error(&resp) => Outcome::DeniedByAirlock,
        Ok(resp) => Outcome::Unexpected(format!(
            "a direct connection got a non-airlock answer: {:?}",
            first_line(&resp)
        )),
        Err(e) if is_fast_rejection(&e) => Outcome::Rejected(e.to_string()),
        Err(e) => Outcome::Unexpected(format!("connection accepted and then {e}")),
    }
}

fn dns_probe(addr: SocketAddr) -> Outcome {
    let bind: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = match UdpSocket::bind(bind).and_then(|s| s.connect(addr).map(|()| s)) {
        Ok(s) => s,
        Err(e) if is_fast_rejection(&e) => return Outcome::Rejected(e.to_string()),
        Err(e) => return Outcome::Unexpected(format!("cannot open a UDP socket: {e}")),
    };
    let _ = sock.set_read_timeout(Some(IO_TIMEOUT));
    // TXT: a type the filter refuses in both modes (report mode would resolve an A query).
    if let Err(e) = sock.send(&dns_query(BLOCKED_NAME, QTYPE_TXT)) {
        return if is_fast_rejection(&e) {
            Outcome::Rejected(e.to_string())
        } else {
            Outcome::Unexpected(e.to_string())
        };
    }
    let mut buf = [0u8; 1500];
    match sock.recv(&mut buf) {
        Ok(n) if contains(&buf[..n], b"airlock") => Outcome::DeniedByAirlock,
        Ok(_) => Outcome::Unexpected(format!(
            "a DNS server at {addr} answered the agent directly"
        )),
        Err(e) if is_fast_rejection(&e) => Outcome::Rejected(e.to_string()),
        Err(e) => Outcome::Unexpected(format!(
            "no fast rejection ({e}): the query may have left the container"
        )),
    }
}

/// DNS type TXT.
const QTYPE_TXT: u16 = 16;

/// A minimal query of `qtype` with an EDNS OPT record, so a filter can answer with an
/// Extended DNS Error.
fn dns_query(name: &str, qtype: u16) -> Vec<u8> {
    let mut q = vec![0xa1, 0x7c, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0); // root
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]); // class IN
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]); // OPT, 1232 bytes, no options
    q
}

fn http_exchange(addr: SocketAddr, request: &str) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.write_all(request.as_bytes())?;
    read_some(&mut stream)
}

/// Read until the headers are complete, EOF, or 16 KiB.
fn read_some(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        if contains(&out, b"\r\n\r\n") || out.len() > 16 * 1024 {
            return Ok(out);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    // An empty needle is found anywhere (`windows(0)` would panic).
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn first_line(resp: &[u8]) -> String {
    String::from_utf8_lossy(resp)
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(120)
        .collect()
}

fn status_code(resp: &[u8]) -> Option<u16> {
    let line = first_line(resp);
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

fn has_airlock_error(resp: &[u8]) -> bool {
    let text = String::from_utf8_lossy(resp).to_ascii_lowercase();
    text.contains(&format!("\r\n{}:", airlock_channels::ERROR_HEADER))
}

/// The probes for `mode`, from what the agent-side process read itself: its default
/// gateways and first configured resolver. Pure.
pub fn plan(
    mode: Mode,
    gw4: std::net::Ipv4Addr,
    gw6: std::net::Ipv6Addr,
    resolver: Option<std::net::IpAddr>,
) -> Vec<Probe> {
    use std::net::IpAddr;
    let proxy = airlock_channels::explicit_addr();
    let mut probes = vec![Probe::ProxyHealth { proxy }];
    if mode == Mode::Enforce {
        probes.push(Probe::BlockedDomain { proxy });
    }
    probes.extend([
        Probe::HardDenied { proxy },
        Probe::DirectTcp {
            label: "direct connection",
            addr: SocketAddr::new(IpAddr::V4(gw4), 80),
        },
        Probe::DirectTcp {
            label: "metadata address",
            addr: SocketAddr::from(([169, 254, 169, 254], 80)),
        },
        Probe::DirectTcp {
            label: "IPv6",
            addr: SocketAddr::new(IpAddr::V6(gw6), 80),
        },
        Probe::ForeignDns {
            label: "foreign DNS server",
            addr: SocketAddr::new(IpAddr::V4(gw4), 53),
        },
    ]);
    if let Some(ns) = resolver.filter(|ns| *ns != IpAddr::V4(gw4)) {
        probes.push(Probe::ForeignDns {
            label: "configured resolver",
            addr: SocketAddr::new(ns, 53),
        });
    }
    probes
}

/// Run all probes; print one line per probe on stdout; return the failures.
pub fn run_all(probes: &[Probe]) -> Vec<String> {
    let mut failures = Vec::new();
    for probe in probes {
        match probe.run() {
            Ok(outcome) => println!("ok   {}: {outcome}", probe.label()),
            Err(outcome) => {
                println!("FAIL {}: {outcome}", probe.label());
                failures.push(format!("{}: {outcome}", probe.label()));
            }
        }
    }
    failures
}

/// The probes, computed by the agent-side process from what it can read itself.
fn probes_here(mode: Mode) -> Vec<Probe> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let gw4 = crate::netinfo::default_gateway_v4(&read("/proc/net/route"))
        .unwrap_or(Ipv4Addr::new(192, 0, 2, 1));
    let gw6 = crate::netinfo::default_gateway_v6(&read("/proc/net/ipv6_route"))
        .unwrap_or(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let resolver = crate::netinfo::nameservers(&read("/etc/resolv.conf"))
        .into_iter()
        .next();
    plan(mode, gw4, gw6, resolver)
}

/// The agent-side self-test process (`__self-test MODE`): every probe stopped.
pub fn main(arg: Option<&str>) -> ExitCode {
    let failures = run_all(&probes_here(Mode::from_arg(arg)));
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_an_airlock_denial() {
        let resp = b"HTTP/1.1 403 Forbidden\r\nX-Airlock-Error: blocked-by-policy\r\n\r\n";
        assert!(has_airlock_error(resp));
        assert_eq!(status_code(resp), Some(403));
        assert!(!has_airlock_error(
            b"HTTP/1.1 403 Forbidden\r\nserver: nginx\r\n\r\nx-airlock-error"
        ));
    }

    #[test]
    fn report_mode_rests_on_no_policy_denial() {
        let gw4 = std::net::Ipv4Addr::new(172, 17, 0, 1);
        let gw6 = std::net::Ipv6Addr::LOCALHOST;
        let enforce = plan(Mode::Enforce, gw4, gw6, None);
        assert!(
            enforce
                .iter()
                .any(|p| matches!(p, Probe::BlockedDomain { .. }))
        );
        let report = plan(Mode::Report, gw4, gw6, None);
        assert!(
            !report
                .iter()
                .any(|p| matches!(p, Probe::BlockedDomain { .. })),
            "report mode lets policy denials through: {report:?}"
        );
        // The proxy's own refusal and the firewall are still proved.
        for probes in [&enforce, &report] {
            assert!(probes.iter().any(|p| matches!(p, Probe::HardDenied { .. })));
            assert!(probes.iter().any(|p| matches!(p, Probe::ForeignDns { .. })));
            assert_eq!(
                probes
                    .iter()
                    .filter(|p| matches!(p, Probe::DirectTcp { .. }))
                    .count(),
                3
            );
        }
        assert_eq!(Mode::from_arg(Some(Mode::Report.as_arg())), Mode::Report);
        assert_eq!(Mode::from_arg(None), Mode::Enforce);
        assert_eq!(Mode::from_arg(Some("x")), Mode::Enforce);
    }

    #[test]
    fn a_foreign_answer_is_unexpected() {
        assert!(must_be_stopped(Outcome::Unexpected("x".into())).is_err());
        assert!(must_be_stopped(Outcome::Answered).is_err());
        assert!(must_be_stopped(Outcome::Rejected("refused".into())).is_ok());
        assert!(must_be_stopped(Outcome::DeniedByAirlock).is_ok());
    }

    #[test]
    fn the_dns_query_is_well_formed() {
        let q = dns_query("a.invalid", QTYPE_TXT);
        assert_eq!(&q[12..23], b"\x01a\x07invalid\x00");
        assert_eq!(&q[23..27], &[0, 16, 0, 1]);
        assert_eq!(q.len(), 12 + 11 + 4 + 11);
    }

    #[test]
    fn a_refused_local_port_counts_as_rejected() {
        // Bind then drop a listener so the port is closed: the kernel refuses at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(matches!(tcp_probe(port), Outcome::Rejected(_)));
    }

    #[test]
    fn a_non_airlock_server_is_unexpected() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
        });
        assert!(matches!(tcp_probe(addr), Outcome::Unexpected(_)));
        server.join().unwrap();
    }
}
