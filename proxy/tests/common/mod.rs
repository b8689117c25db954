//! Shared harness of the end-to-end tests.
//!
//! Upstreams are listeners on 127.0.0.1 reached only through the test seams: the fake
//! resolver answers documentation-range (public) addresses, and the fake connector maps
//! exactly those to the local listeners. The proxy's own checks run unchanged; nothing
//! here dials anything but loopback.

// Test helpers outside `#[test]` fns are test code too (clippy.toml only sees `#[test]`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use airlock_proxy::audit::{self, AuditWriter};
use airlock_proxy::limits::Limits;
use airlock_proxy::transparent::OriginalDst;
use airlock_proxy::upstream::{BoxFuture, Connect, Resolve, ResolveError, Upstreams};
use airlock_proxy::{Proxy, Running};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub const ALLOWED_IP: &str = "203.0.113.10";

pub struct FakeResolver(HashMap<String, Vec<IpAddr>>, Arc<Mutex<Vec<String>>>);

impl Resolve for FakeResolver {
    fn lookup<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, ResolveError>> {
        self.1.lock().unwrap().push(name.to_owned());
        Box::pin(async move {
            if name == "hang.test" {
                std::future::pending::<()>().await;
            }
            self.0.get(name).cloned().ok_or_else(|| ResolveError {
                host: name.into(),
                detail: "NXDOMAIN".into(),
            })
        })
    }
}

pub struct FakeConnect {
    routes: HashMap<SocketAddr, SocketAddr>,
    calls: Arc<AtomicUsize>,
}

impl Connect for FakeConnect {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let local = self.routes.get(&addr).copied();
        Box::pin(async move {
            let local = local.ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused))?;
            assert!(local.ip().is_loopback(), "tests only ever dial loopback");
            TcpStream::connect(local).await
        })
    }
}

/// Stands in for `SO_ORIGINAL_DST`: the test sets where the next connection "was going".
#[derive(Debug, Default)]
pub struct FakeOrigDst(pub Mutex<Option<SocketAddr>>);

impl OriginalDst for FakeOrigDst {
    fn original_dst(&self, _stream: &TcpStream) -> io::Result<SocketAddr> {
        (*self.0.lock().unwrap()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

/// Policy text appended to the harness's own, and the credentials it binds
/// (`(name, real value, placeholder)`), and those handed over as not configured
/// (`(name, placeholder, fix)`).
#[derive(Default)]
pub struct Extra {
    pub policy: String,
    pub credentials: Vec<(&'static str, &'static str, &'static str)>,
    pub missing: Vec<(&'static str, &'static str, &'static str)>,
    /// Values found in the workspace's secret files (`(file, value)`), handed over as the
    /// entrypoint does.
    pub workspace: Vec<(&'static str, &'static str)>,
    /// The git service port's key and the sandbox's start branch, handed over as the
    /// entrypoint does.
    pub git_service: Option<(airlock_ticket::ServiceKey, Option<&'static str>)>,
    /// Roots the proxy trusts for upstream TLS besides webpki's (a test upstream's own, as
    /// an operator passes `--upstream-ca`).
    pub upstream_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Serve the admin API on `admin.sock` in the harness's directory ([`Harness::admin`]).
    pub admin: bool,
    /// Keep the operator's grants in this file instead of beside the audit log (sandboxes
    /// sharing one, as a template's shared audit claim makes them).
    pub grants_file: Option<PathBuf>,
}

/// The harness's session, sandbox and container.
pub fn who() -> audit::Who {
    audit::Who::new("sess-1", "t", Some("c0ffee00"))
}

pub struct Harness {
    pub addr: SocketAddr,
    /// The git service port.
    pub service: SocketAddr,
    /// The appliance CA (PEM) the proxy's leaves chain to.
    pub ca_pem: String,
    pub transparent: SocketAddr,
    pub orig_dst: Arc<FakeOrigDst>,
    pub running: Option<Running>,
    writer: Option<AuditWriter>,
    pub audit_path: PathBuf,
    pub connects: Arc<AtomicUsize>,
    /// Every name the proxy asked its resolver for.
    pub lookups: Arc<Mutex<Vec<String>>>,
    pub dns: SocketAddr,
    /// The admin API's socket, when [`Extra::admin`] asked for it.
    pub admin: Option<PathBuf>,
    /// The policy file the proxy started from.
    pub policy_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start(
        mode: &str,
        names: &[(&str, &[&str])],
        routes: &[(SocketAddr, SocketAddr)],
    ) -> Self {
        Self::start_with(mode, names, routes, Limits::default()).await
    }

    pub async fn start_with(
        mode: &str,
        names: &[(&str, &[&str])],
        routes: &[(SocketAddr, SocketAddr)],
        limits: Limits,
    ) -> Self {
        Self::start_extra(mode, names, routes, limits, &Extra::default()).await
    }

    /// As [`start_with`](Self::start_with), with `extra` appended to the policy and its
    /// credentials handed to the proxy.
    pub async fn start_extra(
        mode: &str,
        names: &[(&str, &[&str])],
        routes: &[(SocketAddr, SocketAddr)],
        limits: Limits,
        extra: &Extra,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let policy_path = dir.path().join("policy.toml");
        std::fs::write(
            &policy_path,
            format!(
                "[sandbox]\nname = \"t\"\nmode = \"{mode}\"\n\n[network]\nallow = [\"allowed.test\", \"*.allowed.test\", \"rebind.test\", \"meta.test\", \"gone.test\", \"hang.test\", \"203.0.113.10\", \"allowed.test:8080\", \"api.anthropic.com\", \"readonly.test\", \"raw.test\", \"raw.test:2222\"]\ndeny = [\"bad.allowed.test\"]\nwritable = [\"allowed.test\", \"*.allowed.test\", \"api.anthropic.com\"]\npassthrough = [\"raw.test\"]\n{}",
                extra.policy
            ),
        )
        .unwrap();
        let policy = airlock_policy::Policy::load(&policy_path).unwrap();
        let credentials = if extra.credentials.is_empty()
            && extra.missing.is_empty()
            && extra.workspace.is_empty()
            && extra.git_service.is_none()
        {
            airlock_proxy::credentials::Credentials::none()
        } else {
            let handoff = airlock_handoff::Handoff {
                version: airlock_handoff::HANDOFF_VERSION,
                session: "sess-1".into(),
                credentials: extra
                    .credentials
                    .iter()
                    .map(
                        |(name, value, placeholder)| airlock_handoff::ResolvedCredential {
                            name: (*name).to_owned(),
                            value: airlock_handoff::Secret::new((*value).to_owned()),
                            placeholder: (*placeholder).to_owned(),
                        },
                    )
                    .collect(),
                git_placeholder: None,
                workspace_secrets: extra
                    .workspace
                    .iter()
                    .map(|(file, value)| airlock_handoff::WorkspaceSecret {
                        file: (*file).to_owned(),
                        name: "TEST".into(),
                        detector: None,
                        value: airlock_handoff::Secret::new((*value).to_owned()),
                    })
                    .collect(),
                missing: extra
                    .missing
                    .iter()
                    .map(
                        |(name, placeholder, fix)| airlock_handoff::MissingCredential {
                            name: (*name).to_owned(),
                            placeholder: (*placeholder).to_owned(),
                            fix: (*fix).to_owned(),
                        },
                    )
                    .collect(),
                git_service: extra.git_service.as_ref().map(|(key, branch)| {
                    airlock_handoff::GitService {
                        key: airlock_handoff::Secret::new(key.to_hex()),
                        start_branch: branch.map(str::to_owned),
                    }
                }),
            };
            airlock_proxy::credentials::Credentials::from_handoff(handoff, &policy).unwrap()
        };
        let names = names
            .iter()
            .map(|(n, ips)| {
                (
                    (*n).to_owned(),
                    ips.iter().map(|i| i.parse().unwrap()).collect(),
                )
            })
            .collect();
        let connects = Arc::new(AtomicUsize::new(0));
        let lookups = Arc::new(Mutex::new(Vec::new()));
        let connector = FakeConnect {
            routes: routes.iter().copied().collect(),
            calls: Arc::clone(&connects),
        };
        let upstreams = Upstreams::new(
            Arc::new(FakeResolver(names, Arc::clone(&lookups))),
            Arc::new(connector),
            limits.connect_timeout,
        );
        let orig_dst = Arc::new(FakeOrigDst::default());
        let audit_path = dir.path().join("audit.jsonl");
        let (audit, writer) = audit::open(&audit_path, who(), audit::Bounds::default()).unwrap();
        let ca = airlock_proxy::ca::Ca::generate().unwrap();
        let ca_pem = ca.cert_pem().to_owned();
        let admin_setup = extra.admin.then(|| {
            let path = dir.path().join("admin.sock");
            (std::os::unix::net::UnixListener::bind(&path).unwrap(), path)
        });
        let admin_path = admin_setup.as_ref().map(|(_, p)| p.clone());
        let base = policy.clone();
        let proxy = Proxy {
            rules: airlock_proxy::snapshot::Rules::new(policy, credentials).unwrap(),
            who: who(),
            upstreams,
            audit,
            limits,
            explicit_addr: "127.0.0.1:0".parse().unwrap(),
            transparent_addr: Some("127.0.0.1:0".parse().unwrap()),
            dns_addr: Some("127.0.0.1:0".parse().unwrap()),
            identity: Arc::new(airlock_proxy::identity::SockDiag::open().unwrap()),
            // The test's own uid: a client bound to a session's address (127.77.0.k) is
            // session k of it, as the firewall makes it in the appliance.
            agent_uid: Some(nix::unistd::getuid().as_raw()),
            original_dst: Arc::clone(&orig_dst) as Arc<dyn OriginalDst>,
            interception: Arc::new(
                airlock_proxy::intercept::Interception::new(ca, extra.upstream_roots.clone())
                    .unwrap(),
            ),
            git_service_addr: Some("127.0.0.1:0".parse().unwrap()),
            admin: admin_setup.map(|(listener, _)| airlock_proxy::AdminSetup {
                listener,
                operators: airlock_proxy::admin::peer::Operators::default(),
                status_dir: None,
                revisions: airlock_proxy::revision::Revisions::new(
                    &policy_path,
                    &std::fs::read_to_string(&policy_path).unwrap(),
                    &dir.path().join("no-handoff"),
                )
                .kept_in(dir.path(), None)
                .with_grants(
                    &extra
                        .grants_file
                        .clone()
                        .unwrap_or_else(|| airlock_proxy::grants::path_beside(&audit_path)),
                    base,
                    airlock_policy::overlay::Overlay::default(),
                ),
            }),
        };
        let running = proxy.start().await.unwrap();
        let dns = running.dns_addr.unwrap();
        Self {
            service: running.git_service_addr.unwrap(),
            ca_pem,
            transparent: running.transparent_addr.unwrap(),
            orig_dst,
            addr: running.explicit_addr,
            running: Some(running),
            writer: Some(writer),
            audit_path,
            admin: admin_path,
            policy_path: policy_path.clone(),
            connects,
            lookups,
            dns,
            _dir: dir,
        }
    }

    /// A TLS client trusting the appliance CA, as every client in the sandbox does.
    pub fn trusting_client(&self) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).unwrap())
            .unwrap();
        client_with_roots(roots)
    }

    /// Stops the proxy, flushes the log and returns its final lines (one per decision):
    /// the `open` lines written before anything went upstream are checked, not returned.
    /// Every `open` line must come before a final line of the same request, and every
    /// final line of an allowed request must have one.
    pub async fn finish(&mut self) -> Vec<Value> {
        let all = self.finish_all().await;
        check_open_lines(&all);
        all.into_iter().filter(|l| l["event"] != "open").collect()
    }

    /// Stops the proxy, flushes the log and returns every line, `open` lines included.
    /// Every line must read as the log's schema (`airlock_audit_schema::Line`).
    pub async fn finish_all(&mut self) -> Vec<Value> {
        self.running.take().unwrap().stop().await;
        self.writer.take().unwrap().finish().await.unwrap();
        std::fs::read_to_string(&self.audit_path)
            .unwrap()
            .lines()
            .map(|l| {
                if let Err(e) = serde_json::from_str::<airlock_audit_schema::Line>(l) {
                    panic!("a line outside the audit schema: {e}: {l}");
                }
                serde_json::from_str(l).unwrap()
            })
            .collect()
    }
}

/// A parsed HTTP/1.1 response head plus its content-length body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// One response from `s` (a client socket, or the TLS inside an intercepted connection).
pub async fn read_resp<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Resp {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).await.unwrap();
        assert_eq!(
            n,
            1,
            "connection closed inside a response head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let status = head[9..12].parse().unwrap();
    let mut r = Resp {
        status,
        head,
        body: String::new(),
    };
    if let Some(len) = r.header("content-length") {
        let mut body = vec![0u8; len.parse().unwrap()];
        s.read_exact(&mut body).await.unwrap();
        r.body = String::from_utf8(body).unwrap();
    }
    r
}

pub async fn request(proxy: SocketAddr, raw: &str) -> (TcpStream, Resp) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let r = read_resp(&mut s).await;
    (s, r)
}

/// `raw` sent to the proxy from session `k`'s address (`127.77.0.k`: in the appliance the
/// firewall rewrites session `k`'s source to it; here the test binds it), and the answer.
pub async fn from_session(k: u16, proxy: SocketAddr, raw: &str) -> (TcpStream, Resp) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::from((airlock_channels::session_addr(k), 0)))
        .unwrap();
    let mut s = sock.connect(proxy).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let r = read_resp(&mut s).await;
    (s, r)
}

/// What a process running as `nobody` (uid 65534: another session than the test's) reads
/// back after sending `raw` to the proxy at `proxy` (root switches to it, as the dev
/// machines and CI run the tests).
pub async fn as_nobody(proxy: SocketAddr, raw: &str) -> String {
    let port = proxy.port();
    // printf's format: the bytes as they are, `%` and `\` escaped.
    let format = raw
        .replace('\\', "\\\\")
        .replace('%', "%%")
        .replace('\r', "\\r")
        .replace('\n', "\\n");
    let out = tokio::task::spawn_blocking(move || {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port}; printf '{format}' >&3; timeout 10 cat <&3"
            ))
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The answer a TLS client reads when `CONNECT host:port` is refused: the proxy grants the
/// tunnel only to speak the refusal inside TLS (trusting the harness's CA) to a `GET /`.
pub async fn refused_in_tunnel(h: &Harness, host: &str, port: u16) -> Resp {
    let (s, r) = request(
        h.addr,
        &format!("CONNECT {host}:{port} HTTP/1.1\r\nhost: {host}:{port}\r\n\r\n"),
    )
    .await;
    assert_eq!(r.status, 200, "CONNECT {host}:{port}: {}", r.head);
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(name, s)
        .await
        .unwrap();
    tls.write_all(format!("GET / HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_resp(&mut tls).await
}

/// The agent's side of an intercepted connection: `CONNECT host:443` through `h`, then TLS
/// trusting the harness's CA.
pub async fn intercepted(h: &Harness, host: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
    let (s, r) = request(
        h.addr,
        &format!("CONNECT {host}:443 HTTP/1.1\r\nhost: {host}:443\r\n\r\n"),
    )
    .await;
    assert_eq!(r.status, 200, "CONNECT {host}: {}", r.head);
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(h.trusting_client())
        .connect(name, s)
        .await
        .unwrap()
}

/// An echo server; reports each accepted peer address.
pub async fn echo_server() -> (SocketAddr, mpsc::UnboundedReceiver<SocketAddr>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, peer)) = l.accept().await {
            let _ = tx.send(peer);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, rx)
}

/// A one-response-per-request HTTP server; reports each request head it received.
pub async fn http_server() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    let mut buf = Vec::new();
                    let mut byte = [0u8; 1];
                    while !buf.ends_with(b"\r\n\r\n") {
                        if s.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        buf.push(byte[0]);
                    }
                    let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
                    let body = "hello from upstream";
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: keep-alive\r\nkeep-alive: timeout=5\r\nx-upstream: yes\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

pub fn route(public: &str, port: u16, local: SocketAddr) -> (SocketAddr, SocketAddr) {
    (SocketAddr::new(public.parse().unwrap(), port), local)
}

pub fn lines_for<'a>(lines: &'a [Value], host: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["host"] == host).collect()
}

/// What identifies a request across its `open` and final lines.
fn request_key(l: &Value) -> String {
    ["ts", "client", "kind", "method", "host", "port", "path"]
        .iter()
        .map(|k| l[*k].to_string())
        .collect::<Vec<_>>()
        .join("|")
}

/// A TLS client (ring, safe default versions) trusting exactly `roots`: empty, it trusts
/// nothing, as a client without the appliance CA.
pub fn client_with_roots(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Arc::new(config)
}

/// Write-before-answer, checked on a whole log: each `open` line is followed by its
/// request's final line, and each final line that let something go upstream (it names an
/// upstream, or a status the upstream gave) was preceded by an `open` line.
pub fn check_open_lines(lines: &[Value]) {
    let mut open: HashMap<String, usize> = HashMap::new();
    for l in lines {
        let key = request_key(l);
        if l["event"] == "open" {
            *open.entry(key).or_default() += 1;
            continue;
        }
        let went_upstream = !l["upstream"].is_null() || !l["status"].is_null();
        match open.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => assert!(
                !went_upstream || l["decision"] == "deny",
                "a request went upstream without an open line before it: {l}"
            ),
        }
    }
    let left: Vec<_> = open.iter().filter(|(_, n)| **n > 0).collect();
    assert!(left.is_empty(), "open lines without a final line: {left:?}");
}

/// An upstream that answers `200 ok` to each request (content-length or chunked body) and
/// keeps every byte it received.
pub async fn recorder() -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let all = Arc::clone(&got);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let all = Arc::clone(&all);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    all.lock().unwrap().extend_from_slice(&chunk[..n]);
                    if complete(&buf) {
                        buf.clear();
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                    }
                }
            });
        }
    });
    (addr, got)
}

/// Whether `buf` holds one whole request.
pub fn complete(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let body = &buf[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    body.len() >= len
}

/// Everything `s` sends until it closes or 5 s pass (a TLS stream included): what a
/// refused connection got before its close.
pub async fn read_all<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

/// Everything `s` sends until it closes (or resets); panics when it is still open after
/// 3 s (the proxy must have closed it).
pub async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), s.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection within 3 s");
    out
}

/// A TLS upstream for `name` (a self-signed certificate: pass the returned root in
/// [`Extra::upstream_roots`]) that answers each whole request with `200` and a 4-byte
/// body (a git flush packet), and keeps every byte it was sent, decrypted.
pub async fn tls_recorder(
    name: &str,
) -> (
    SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
    Arc<Mutex<Vec<u8>>>,
) {
    let certified = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let all = Arc::clone(&got);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let all = Arc::clone(&all);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    all.lock().unwrap().extend_from_slice(&chunk[..n]);
                    if complete(&buf) {
                        buf.clear();
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n0000")
                            .await;
                    }
                }
            });
        }
    });
    (addr, cert, got)
}
