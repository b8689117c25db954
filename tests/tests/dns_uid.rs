//! DNS has an identity (issue 13 item 4): every query the agent sends to port 53, over UDP
//! or TCP, is audited with the uid of the process that asked. UDP is the hard case: the
//! proxy receives a redirected datagram on its own address, while the client's socket is
//! connected to the nameserver it thinks it talks to (glibc, dig) or not connected at all
//! (a hand-made `sendto`), or is an IPv6 socket speaking IPv4.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;

/// Unconnected `sendto` from an IPv4 socket and from a dual-stack IPv6 socket (the address
/// is IPv4-mapped, the datagram IPv4), each waiting for its answer.
const PY_SENDTO: &str = r#"python3 - <<'PY'
import socket, struct
def query(name):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack(">HH", 1, 1)
for fam, addr, name in [
    (socket.AF_INET, ("203.0.113.53", 53), "py4.blocked.test"),
    (socket.AF_INET6, ("::ffff:203.0.113.53", 53), "py6.blocked.test"),
]:
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(query(name), addr)
    try:
        s.recvfrom(4096)
        print(name + "=answered")
    except OSError as e:
        print(name + "=" + str(e))
PY"#;

/// The attack: the agent asks over UDP the way real programs do (glibc's `getent`, `dig`,
/// a hand-made unconnected socket, a dual-stack one) and over TCP; every DNS line must name
/// the agent's uid. Before the fix every UDP line carried `"uid": null`, so DNS over UDP
/// had no identity at all.
#[test]
fn every_dns_query_is_audited_with_the_agents_uid() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let script = [
        "echo getent=$(getent ahostsv4 allowed.test | head -n1)".to_owned(),
        "echo dig=$(dig +short +tries=1 +time=3 udp-dig.blocked.test; echo $?)".to_owned(),
        "echo dig-tcp=$(dig +tcp +short +tries=1 +time=3 tcp-dig.blocked.test; echo $?)".to_owned(),
        PY_SENDTO.to_owned(),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("getent=203.0.113.10"),
        "glibc resolved the allowed name:\n{text}"
    );
    assert!(
        text.contains("py4.blocked.test=answered") && text.contains("py6.blocked.test=answered"),
        "the hand-made queries were answered:\n{text}\n{}",
        stderr(&out)
    );
    let dns: Vec<_> = airlock
        .audit()
        .into_iter()
        .filter(|l| l["kind"] == "dns")
        .collect();
    let agent = u64::from(world.users().agent);
    let mut wrong = Vec::new();
    for name in [
        "allowed.test",
        "udp-dig.blocked.test",
        "tcp-dig.blocked.test",
        "py4.blocked.test",
        "py6.blocked.test",
    ] {
        let lines: Vec<_> = dns.iter().filter(|l| l["host"] == name).collect();
        assert!(!lines.is_empty(), "no DNS line for {name}: {dns:#?}");
        wrong.extend(
            lines
                .iter()
                .filter(|l| l["uid"].as_u64() != Some(agent))
                .map(|l| format!("{name} {} uid={}", l["method"], l["uid"])),
        );
    }
    assert!(
        wrong.is_empty(),
        "DNS queries not audited as the agent's (uid {agent}):\n{}",
        wrong.join("\n")
    );
}
