//! Root-only: apply the rendered rules with the real `iptables-restore` inside throwaway
//! network namespaces, check the kernel holds exactly what we rendered (and still does after
//! re-applying), then attack the result as the agent would.
//!
//! Each test makes its own namespace `airlock-fw-<pid>-<tag>`, deleted by a drop guard even
//! when the test fails. Routes to the documentation ranges (192.0.2.0/24, 2001:db8::/64) go
//! over a veth pair whose two ends both stay inside the namespace: nothing reaches a real
//! network. Not root: the tests FAIL with a message saying so, they never skip.

// Test helpers outside #[test] fns may panic too: a failed helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{DOCKER_NAT_SAVE, docker, session_gids, without_comments};
use airlock_channels::{EXPLICIT_PORT, MAX_SESSIONS};
use airlock_firewall::{
    Family, FirewallError, Plan, PreservedNat, Runner, preserved_nat_from_save, render_v4,
    render_v6,
};
use nix::sched::{CloneFlags, setns};
use nix::sys::socket::{getsockopt, sockopt::OriginalDst};
use nix::unistd::geteuid;

/// Ids that exist nowhere else, so nothing on the machine shares them.
const PROXY_UID: u32 = 64001;
const GIT_GID: u32 = 64002;
const AGENT: u32 = 64003;
/// Every session's gid for an agent whose own gid is [`AGENT`] (session 1).
fn sessions() -> Vec<u32> {
    session_gids(AGENT)
}

/// Docker's resolver's real TCP port in the fixture.
const RESOLVER_TCP_PORT: u16 = 37619;

fn require_root() {
    assert!(
        geteuid().is_root(),
        "netns_apply needs root (network namespaces, iptables-restore): run it as root, e.g. \
         `sudo -E cargo test -p airlock-firewall --test integration netns_apply::`. CI runs it as root; \
         it never skips."
    );
}

fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A throwaway network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> Self {
        require_root();
        let name = format!("airlock-fw-{}-{tag}", std::process::id());
        // A stale namespace from an earlier run that had our pid: ignore "does not exist".
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run("ip", &["netns", "add", &name]);
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// Routes to 192.0.2.0/24 and 2001:db8::/64 over a veth pair kept inside the namespace.
    fn with_routes(self) -> Self {
        self.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
        self.ip(&["addr", "add", "192.0.2.2/24", "dev", "v0"]);
        self.ip(&["addr", "add", "2001:db8::2/64", "dev", "v0", "nodad"]);
        self.ip(&["link", "set", "v0", "up"]);
        self.ip(&["link", "set", "v1", "up"]);
        self
    }

    fn runner(&self) -> Runner {
        Runner::with_prefix(["ip", "netns", "exec", self.name.as_str()])
    }

    /// Runs `f` on a thread that joined the namespace: sockets it creates live there.
    fn inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let ns = File::open(&path).unwrap();
                    setns(&ns, CloneFlags::CLONE_NEWNET).unwrap();
                    f()
                })
                .join()
                .unwrap()
        })
    }

    /// Runs a bash script inside the namespace as `uid`/`gid` with exactly `groups` as
    /// supplementary groups (the agent: none).
    fn as_user(&self, uid: u32, gid: u32, groups: &[u32], script: &str) -> Output {
        let groups = if groups.is_empty() {
            "--clear-groups".to_owned()
        } else {
            let list: Vec<String> = groups.iter().map(u32::to_string).collect();
            format!("--groups={}", list.join(","))
        };
        let (uid, gid) = (uid.to_string(), gid.to_string());
        Command::new("timeout")
            .args(["10", "ip", "netns", "exec", &self.name])
            .args(["setpriv", "--reuid", &uid, "--regid", &gid, &groups])
            .args(["--", "bash", "-c", script])
            .output()
            .unwrap()
    }

    fn agent(&self, script: &str) -> Output {
        self.as_user(AGENT, AGENT, &[], script)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        match Command::new("ip")
            .args(["netns", "del", &self.name])
            .output()
        {
            Ok(out) if out.status.success() => {}
            other => eprintln!(
                "could not delete network namespace {}: {other:?}",
                self.name
            ),
        }
    }
}

/// Docker's embedded DNS first, as in a real container; then our rules on top.
fn apply_over_docker(ns: &Netns) -> Plan {
    let runner = ns.runner();
    runner.apply(Family::V4, DOCKER_NAT_SAVE).unwrap();
    let preserved = preserved_nat_from_save(&runner.save_nat_v4().unwrap()).unwrap();
    assert_eq!(preserved, docker(), "the kernel's save of Docker's table");
    let plan = Plan::with_channel_ports(PROXY_UID, GIT_GID, sessions(), preserved);
    plan.check().unwrap();
    runner.apply(Family::V4, &render_v4(&plan)).unwrap();
    runner.apply(Family::V6, &render_v6(&plan)).unwrap();
    plan
}

/// What the kernel holds, as `iptables-save` prints it, comments dropped.
fn kernel_tables(runner: &Runner) -> (String, String) {
    let v4 = runner.save(Family::V4, "filter").unwrap() + &runner.save_nat_v4().unwrap();
    let v6 = runner.save(Family::V6, "filter").unwrap();
    (without_comments(&v4), without_comments(&v6))
}

#[test]
fn apply_gives_exactly_the_rendered_tables_and_reapplying_changes_nothing() {
    let ns = Netns::new("apply");
    let runner = ns.runner();
    let plan = apply_over_docker(&ns);

    let (v4, v6) = kernel_tables(&runner);
    assert_eq!(v4, without_comments(&render_v4(&plan)));
    assert_eq!(v6, without_comments(&render_v6(&plan)));
    assert!(v4.contains(":AIRLOCK_OUTPUT - [0:0]\n"));
    assert!(v4.contains("-A AIRLOCK_OUTPUT -p tcp -j REDIRECT --to-ports 15001\n"));
    assert!(
        v4.contains("-A OUTPUT -j AIRLOCK_OUTPUT\n-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT\n")
    );
    assert!(v6.contains(":OUTPUT DROP [0:0]"));

    // The entrypoint's cycle again, over our own rules: save, parse, render, apply.
    let again = preserved_nat_from_save(&runner.save_nat_v4().unwrap()).unwrap();
    assert_eq!(
        again, plan.preserved_nat,
        "our own lines must not be preserved as Docker's"
    );
    let replan = Plan::with_channel_ports(PROXY_UID, GIT_GID, sessions(), again);
    assert_eq!(render_v4(&replan), render_v4(&plan));
    runner.apply(Family::V4, &render_v4(&replan)).unwrap();
    runner.apply(Family::V6, &render_v6(&replan)).unwrap();
    assert_eq!(kernel_tables(&runner), (v4, v6));
}

#[test]
fn a_namespace_without_docker_preserves_nothing() {
    let ns = Netns::new("bare");
    let runner = ns.runner();
    let saved = runner.save_nat_v4().unwrap();
    let preserved = preserved_nat_from_save(&saved).unwrap();
    assert!(preserved.is_empty(), "{saved}");
    let plan = Plan::with_channel_ports(PROXY_UID, GIT_GID, sessions(), PreservedNat::default());
    runner.apply(Family::V4, &render_v4(&plan)).unwrap();
    let (v4, _) = kernel_tables(&runner);
    assert_eq!(v4, without_comments(&render_v4(&plan)));
}

#[test]
fn a_refused_rule_set_is_reported_and_leaves_the_firewall_as_it_was() {
    let ns = Netns::new("refused");
    let runner = ns.runner();
    let plan = apply_over_docker(&ns);
    let before = kernel_tables(&runner);

    // An ACCEPT-everything rule followed by garbage in the same table: all or nothing.
    let broken = render_v4(&plan).replacen(
        "-A OUTPUT -j REJECT",
        "-A OUTPUT -j ACCEPT\n-A OUTPUT -m no-such-match -j ACCEPT\n-A OUTPUT -j REJECT",
        1,
    );
    let err = runner.apply(Family::V4, &broken).unwrap_err();
    match &err {
        FirewallError::Restore { binary, stderr, .. } => {
            assert!(binary.ends_with("iptables-restore"), "{binary}");
            assert!(
                !stderr.is_empty() && stderr != "(nothing on stderr)",
                "{err}"
            );
        }
        other => panic!("expected a Restore error, got {other}"),
    }
    assert_eq!(kernel_tables(&runner), before);
}

/// Listeners standing in for the proxy, inside the namespace.
struct Proxy {
    explicit: TcpListener,
    transparent: TcpListener,
    service: TcpListener,
    dns_udp: UdpSocket,
    dns_tcp: TcpListener,
    resolver: TcpListener,
}

fn proxy_listeners(ns: &Netns, plan: &Plan) -> Proxy {
    let (explicit, transparent, service, dns) = (
        plan.explicit_port,
        plan.transparent_port,
        plan.git_service_port,
        plan.dns_port,
    );
    ns.inside(move || {
        let lo = Ipv4Addr::LOCALHOST;
        Proxy {
            explicit: TcpListener::bind((lo, explicit)).unwrap(),
            transparent: TcpListener::bind((lo, transparent)).unwrap(),
            service: TcpListener::bind((lo, service)).unwrap(),
            dns_udp: UdpSocket::bind((lo, dns)).unwrap(),
            dns_tcp: TcpListener::bind((lo, dns)).unwrap(),
            resolver: TcpListener::bind((Ipv4Addr::new(127, 0, 0, 11), RESOLVER_TCP_PORT)).unwrap(),
        }
    })
}

fn setup(tag: &str) -> (Netns, Proxy) {
    let ns = Netns::new(tag).with_routes();
    let plan = apply_over_docker(&ns);
    let proxy = proxy_listeners(&ns, &plan);
    (ns, proxy)
}

fn accept_within(listener: &TcpListener, wait: Duration) -> Option<TcpStream> {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((stream, _)) => return Some(stream),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn recv_within(socket: &UdpSocket, wait: Duration) -> Option<Vec<u8>> {
    socket.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 512];
    match socket.recv_from(&mut buf) {
        Ok((n, _)) => Some(buf[..n].to_vec()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(e) => panic!("recv: {e}"),
    }
}

fn original_dst(stream: &TcpStream) -> SocketAddrV4 {
    let addr = getsockopt(stream, OriginalDst).unwrap();
    SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
        u16::from_be(addr.sin_port),
    )
}

fn succeeded(out: &Output) -> bool {
    out.status.success()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

#[test]
fn attack_agent_reaches_the_git_service_port_only_with_the_git_group() {
    let (ns, proxy) = setup("service");
    let port = airlock_channels::GIT_SERVICE_PORT;

    for target in ["127.0.0.1", "127.0.0.2", "192.0.2.2"] {
        let out = ns.agent(&format!("exec 3<>/dev/tcp/{target}/{port}"));
        assert!(!succeeded(&out), "agent reached {target}:{port}");
        assert!(
            stderr(&out).contains("Connection refused"),
            "{}",
            stderr(&out)
        );
    }
    assert!(accept_within(&proxy.service, SHORT).is_none());

    // The git API's identity: the git group as a supplementary group only.
    let out = ns.as_user(
        AGENT,
        AGENT,
        &[GIT_GID],
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
    );
    assert!(succeeded(&out), "{}", stderr(&out));
    let stream = accept_within(&proxy.service, LONG).expect("the git API's connection");
    // The git API runs with the agent's gid (session 1's) as its primary group: the
    // service port is not one the sessions' addresses are given on.
    assert_eq!(peer(&stream), Ipv4Addr::LOCALHOST);
}

#[test]
fn attack_agent_tcp_to_the_internet_lands_on_the_transparent_listener() {
    let (ns, proxy) = setup("transparent");
    for port in [443, 80, 22, airlock_channels::GIT_SERVICE_PORT] {
        let out = ns.agent(&format!("exec 3<>/dev/tcp/192.0.2.1/{port}"));
        assert!(succeeded(&out), "port {port}: {}", stderr(&out));
        let stream = accept_within(&proxy.transparent, LONG).expect("redirected connection");
        assert_eq!(
            original_dst(&stream),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), port),
            "SO_ORIGINAL_DST must give the proxy the agent's real target"
        );
    }
}

#[test]
fn attack_agent_dns_to_any_server_lands_on_the_dns_filter() {
    let (ns, proxy) = setup("dns");
    // A foreign resolver, Docker's resolver and a loopback one: all redirected.
    for server in ["192.0.2.1", "127.0.0.11", "127.0.0.1"] {
        let out = ns.agent(&format!("printf 'q-{server}' >/dev/udp/{server}/53"));
        assert!(succeeded(&out), "{server}: {}", stderr(&out));
        assert_eq!(
            recv_within(&proxy.dns_udp, LONG).as_deref(),
            Some(format!("q-{server}").as_bytes()),
            "udp query to {server}:53 must reach the DNS filter"
        );
        let out = ns.agent(&format!("exec 3<>/dev/tcp/{server}/53"));
        assert!(succeeded(&out), "{server}: {}", stderr(&out));
        assert!(
            accept_within(&proxy.dns_tcp, LONG).is_some(),
            "tcp query to {server}:53 must reach the DNS filter"
        );
    }
}

#[test]
fn attack_agent_cannot_reach_dockers_resolver_on_its_real_port() {
    let (ns, proxy) = setup("resolver");
    let script = format!("exec 3<>/dev/tcp/127.0.0.11/{RESOLVER_TCP_PORT}");
    let out = ns.agent(&script);
    assert!(!succeeded(&out), "agent reached Docker's resolver directly");
    assert!(
        stderr(&out).contains("Connection refused"),
        "{}",
        stderr(&out)
    );
    assert!(accept_within(&proxy.resolver, SHORT).is_none());

    // The proxy may: the refusal above is the firewall's, not an absent listener.
    let out = ns.as_user(PROXY_UID, PROXY_UID, &[], &script);
    assert!(succeeded(&out), "{}", stderr(&out));
    assert!(accept_within(&proxy.resolver, LONG).is_some());
}

#[test]
fn attack_agent_udp_and_ipv6_egress_fail_fast() {
    let (ns, proxy) = setup("egress");
    // Control: the route exists (the DNS redirect of the same destination works).
    let out = ns.agent("printf control >/dev/udp/192.0.2.1/53");
    assert!(succeeded(&out), "{}", stderr(&out));
    assert!(recv_within(&proxy.dns_udp, LONG).is_some());

    // QUIC-style UDP out: rejected on the spot (local REJECT surfaces as EPERM on send).
    let out = ns.agent("printf x >/dev/udp/192.0.2.1/443");
    assert!(!succeeded(&out));
    assert!(
        stderr(&out).contains("Operation not permitted"),
        "{}",
        stderr(&out)
    );

    // IPv6 TCP out: reset at once (no route would say "unreachable", no firewall would hang).
    let out = ns.agent("exec 3<>/dev/tcp/2001:db8::1/443");
    assert!(!succeeded(&out));
    assert!(
        stderr(&out).contains("Connection refused"),
        "{}",
        stderr(&out)
    );

    // IPv6 UDP out (DNS included: there is no v6 redirect): rejected.
    let out = ns.agent("printf x >/dev/udp/2001:db8::1/53");
    assert!(!succeeded(&out), "agent sent IPv6 DNS out");
    assert!(recv_within(&proxy.dns_udp, SHORT).is_none());
}

fn peer(stream: &TcpStream) -> Ipv4Addr {
    match stream.peer_addr().unwrap().ip() {
        std::net::IpAddr::V4(v4) => v4,
        other => panic!("IPv6 peer {other}"),
    }
}

/// Session `k` of an agent whose own gid is [`AGENT`], as the entrypoint starts it: its
/// primary gid is the session's, and a second session keeps the agent's gid as a
/// supplementary group.
fn as_session(ns: &Netns, k: u16, script: &str) -> Output {
    let gid = airlock_channels::session_gid(k, AGENT);
    let groups: &[u32] = if k == 1 { &[] } else { &[AGENT] };
    ns.as_user(AGENT, gid, groups, script)
}

/// A script that connects to `dst:port` over TCP from `src` (port chosen by the kernel).
/// bash's /dev/tcp cannot bind a source; the tests' python3 (scripts/install-test-deps).
fn bound_connect(src: Ipv4Addr, dst: Ipv4Addr, port: u16) -> String {
    format!(
        "exec /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind((\"{src}\", 0)); s.connect((\"{dst}\", {port}))'"
    )
}

/// The address `listener` sees the connection `out` made come from.
fn seen_from(listener: &TcpListener, out: &Output) -> Ipv4Addr {
    assert!(succeeded(out), "{}", stderr(out));
    peer(&accept_within(listener, LONG).expect("the client's connection"))
}

#[test]
fn attack_each_session_reaches_the_proxy_from_its_own_address_and_cannot_take_another() {
    let (ns, proxy) = setup("sessions");
    let session = |k: u16| airlock_channels::session_addr(k);
    let explicit = format!("exec 3<>/dev/tcp/127.0.0.1/{EXPLICIT_PORT}");

    // (a) The explicit port: session 1 by the agent's own gid, session 2 by its gid, even
    // though it holds the agent's gid too (supplementary).
    let out = as_session(&ns, 1, &explicit);
    assert_eq!(seen_from(&proxy.explicit, &out), session(1));
    let out = as_session(&ns, 2, &explicit);
    assert_eq!(seen_from(&proxy.explicit, &out), session(2));
    let out = as_session(&ns, MAX_SESSIONS, &explicit);
    assert_eq!(seen_from(&proxy.explicit, &out), session(MAX_SESSIONS));

    // Redirected traffic is rewritten too (POSTROUTING sees it after REDIRECT), and the
    // proxy still learns the real target.
    let out = as_session(&ns, 2, "exec 3<>/dev/tcp/192.0.2.1/443");
    assert!(succeeded(&out), "{}", stderr(&out));
    let stream = accept_within(&proxy.transparent, LONG).expect("redirected connection");
    assert_eq!(peer(&stream), session(2));
    assert_eq!(
        original_dst(&stream),
        SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 443)
    );
    let out = as_session(&ns, 3, "exec 3<>/dev/tcp/127.0.0.11/53");
    assert_eq!(seen_from(&proxy.dns_tcp, &out), session(3));

    // (b) Session 3 binding session 1's address itself: still session 3, on every port.
    let forged = session(1);
    let lo = Ipv4Addr::LOCALHOST;
    let out = as_session(&ns, 3, &bound_connect(forged, lo, EXPLICIT_PORT));
    assert_eq!(seen_from(&proxy.explicit, &out), session(3));
    // A loopback source towards the outside is refused by the kernel's routing (EINVAL)
    // before nat: that way there is nothing to forge.
    let out = as_session(
        &ns,
        3,
        &bound_connect(forged, Ipv4Addr::new(192, 0, 2, 1), 443),
    );
    assert!(!succeeded(&out), "a loopback source was routed out");
    assert!(
        stderr(&out).contains("Invalid argument"),
        "{}",
        stderr(&out)
    );
    assert!(accept_within(&proxy.transparent, SHORT).is_none());
    let out = as_session(&ns, 3, &bound_connect(forged, lo, 53));
    assert_eq!(seen_from(&proxy.dns_tcp, &out), session(3));

    // An identity that is no session (the proxy's, root's, a gid outside the plan) binding
    // a session's address is seen from loopback, not as that session.
    for (uid, gid) in [(PROXY_UID, PROXY_UID), (0, 0), (AGENT, 64_009)] {
        let out = ns.as_user(
            uid,
            gid,
            &[AGENT],
            &bound_connect(session(2), lo, EXPLICIT_PORT),
        );
        assert_eq!(seen_from(&proxy.explicit, &out), lo, "uid {uid} gid {gid}");
    }
    // Control: without a rule for it, that bound source would have reached the listener
    // as is (so the loopback above is the rewrite's doing). A port that is not the proxy's:
    let other = ns.inside(|| TcpListener::bind((lo, 8001)).unwrap());
    let out = ns.as_user(
        PROXY_UID,
        PROXY_UID,
        &[],
        &bound_connect(session(2), lo, 8001),
    );
    assert_eq!(seen_from(&other, &out), session(2));
}

#[test]
fn a_sessions_dns_gets_its_address_and_its_answer_and_other_loopback_servers_see_loopback() {
    let (ns, proxy) = setup("session-dns");
    // (c) UDP to any :53 arrives at the DNS filter from the session's address, and the
    // answer gets back to the client's connected socket (both rewrites undone on the way).
    for server in ["127.0.0.11", "192.0.2.1", "127.0.0.1"] {
        let client = format!(
            "exec /usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.connect((\"{server}\", 53)); s.send(b\"query\"); print(s.recv(512).decode())'"
        );
        let (from, out) = std::thread::scope(|scope| {
            let filter = scope.spawn(|| {
                proxy.dns_udp.set_read_timeout(Some(LONG)).unwrap();
                let mut buf = [0u8; 512];
                let (n, from) = proxy.dns_udp.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], b"query");
                proxy.dns_udp.send_to(b"answer", from).unwrap();
                from
            });
            let out = as_session(&ns, 2, &client);
            (filter.join().unwrap(), out)
        });
        assert_eq!(from.ip(), airlock_channels::session_addr(2), "{server}");
        assert!(succeeded(&out), "{server}: {}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "answer\n", "{server}");
    }

    // (d) The agent's own loopback server (a local redis, say) keeps seeing 127.0.0.1.
    let lo = Ipv4Addr::LOCALHOST;
    let server = ns.inside(|| TcpListener::bind((lo, 8000)).unwrap());
    for k in [1, 2] {
        let out = as_session(&ns, k, "exec 3<>/dev/tcp/127.0.0.1/8000");
        assert_eq!(seen_from(&server, &out), lo, "session {k}");
    }
}
