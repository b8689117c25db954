//! The outer fence: airlock's own NetworkPolicy for its pods. The in-pod firewall stays the
//! real policy (docs/design.md §4); the fence catches a pod whose firewall is broken.
//!
//! No ingress. Egress: the cluster's DNS (the `kube-dns` pods of `kube-system`, 53 over UDP
//! and TCP), and the policy's ports on public addresses: every IPv4 and IPv6 address but
//! the private ranges, carrier-grade NAT, link-local (the metadata service), loopback, and
//! the cluster's pod and service ranges.
//!
//! NetworkPolicy allows add up: any other policy that selects the pods and admits more
//! opens the fence. The SIG's controller adds one to a template whose
//! `networkPolicyManagement` is `Managed` (its default, which admits the public internet
//! on every port), so [`require_unmanaged`] refuses such a template.
//!
//! [`iptables`] translates a rendered policy into the rules a CNI would enforce, so a test
//! can send real packets through it.

use super::{FENCE_LABEL, K8sError};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The pod range when none is given: kind's and kubeadm's (with flannel) default.
pub const DEFAULT_POD_CIDR: &str = "10.244.0.0/16";
/// The service range when none is given: kubeadm's and kind's default.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
/// IPv4 ranges that are never "public": RFC 1918, carrier-grade NAT (RFC 6598), link-local
/// (the metadata service at 169.254.169.254), loopback.
pub const PRIVATE_V4: [&str; 6] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "127.0.0.0/8",
];
/// IPv6 ranges that are never "public": unique local, link-local, loopback.
pub const PRIVATE_V6: [&str; 3] = ["fc00::/7", "fe80::/10", "::1/128"];

/// What the fence admits besides DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// TCP ports on public addresses: the policy's.
    pub ports: BTreeSet<u16>,
    /// The cluster's pod ranges (IPv4 and/or IPv6).
    pub pod_cidrs: Vec<String>,
    /// The cluster's service ranges.
    pub service_cidrs: Vec<String>,
}

/// `(address, prefix length)` of a CIDR, refused unless its host bits are zero.
pub fn parse_cidr(what: &'static str, text: &str) -> Result<(IpAddr, u8), K8sError> {
    let bad = || K8sError::Cidr {
        what,
        value: text.into(),
    };
    let (addr, len) = text.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    let bits = match addr {
        IpAddr::V4(a) => {
            if len > 32 {
                return Err(bad());
            }
            let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            u128::from(u32::from(a) & host)
        }
        IpAddr::V6(a) => {
            if len > 128 {
                return Err(bad());
            }
            u128::from(a) & u128::MAX.checked_shr(u32::from(len)).unwrap_or(0)
        }
    };
    if bits != 0 {
        return Err(bad());
    }
    Ok((addr, len))
}

/// The ports the policy file `policy` lets the proxy reach: each allow rule's port, or 80
/// and 443 for a rule without one (and for the image's default policy).
pub fn policy_ports(policy: Option<&airlock_policy::Policy>) -> BTreeSet<u16> {
    let mut ports: BTreeSet<u16> = airlock_policy::rule::DEFAULT_PORTS.into_iter().collect();
    if let Some(p) = policy {
        ports.extend(p.network.allow.iter().filter_map(|r| r.port));
    }
    ports
}

/// The `except` list of the public block of one family: the private ranges and the
/// cluster's ranges of that family.
pub fn excepted(fence: &Fence, v6: bool) -> Vec<String> {
    let private: &[&str] = if v6 { &PRIVATE_V6 } else { &PRIVATE_V4 };
    let mut out: Vec<String> = private.iter().map(|s| (*s).to_string()).collect();
    for c in fence.pod_cidrs.iter().chain(&fence.service_cidrs) {
        if c.contains(':') == v6 && !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// airlock's NetworkPolicy `<name>-fence` for the pods labelled [`FENCE_LABEL`]`=<name>`.
pub fn network_policy(name: &str, fence: &Fence) -> Value {
    let ports: Vec<Value> = fence
        .ports
        .iter()
        .map(|p| json!({ "protocol": "TCP", "port": p }))
        .collect();
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": { "name": format!("{name}-fence") },
        "spec": {
            "podSelector": { "matchLabels": { FENCE_LABEL: name } },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {
                    "to": [{
                        "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "kube-system" } },
                        "podSelector": { "matchLabels": { "k8s-app": "kube-dns" } },
                    }],
                    "ports": [
                        { "protocol": "UDP", "port": 53 },
                        { "protocol": "TCP", "port": 53 },
                    ],
                },
                {
                    "to": [
                        { "ipBlock": { "cidr": "0.0.0.0/0", "except": excepted(fence, false) } },
                        { "ipBlock": { "cidr": "::/0", "except": excepted(fence, true) } },
                    ],
                    "ports": ports,
                },
            ],
        },
    })
}

/// Refuses a `SandboxTemplate` whose NetworkPolicy the SIG's controller would manage
/// (`networkPolicyManagement` `Managed`, or absent: `Managed` is the default).
pub fn require_unmanaged(template: &Value) -> Result<(), K8sError> {
    let mode = &template["spec"]["networkPolicyManagement"];
    if mode == "Unmanaged" {
        return Ok(());
    }
    Err(K8sError::Managed {
        name: template["metadata"]["name"]
            .as_str()
            .unwrap_or("(unnamed)")
            .to_string(),
        mode: mode
            .as_str()
            .map_or_else(|| "Managed (the default)".to_string(), String::from),
    })
}

/// What [`iptables`] cannot translate.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the NetworkPolicy cannot be translated faithfully: {0}")]
pub struct Untranslatable(String);

/// The rules of `policy` (a rendered NetworkPolicy) for one pod's network namespace, as
/// `iptables-restore` (or `ip6tables-restore`, `v6`) input: ingress and egress allowed only
/// as the policy says, replies to allowed traffic allowed (NetworkPolicy is stateful), the
/// pod's loopback free (no policy applies to it). A pod selector peer stands for the
/// addresses `peers` gives it (the pods it selects), a selector it does not know is refused.
/// Refused traffic is rejected rather than dropped, so a refusal is quick to see.
pub fn iptables(
    policy: &Value,
    peers: &[(Value, Vec<IpAddr>)],
    v6: bool,
) -> Result<String, Untranslatable> {
    let bad = |why: String| Untranslatable(why);
    let spec = &policy["spec"];
    let types: Vec<&str> = spec["policyTypes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out =
        String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    let mut rules = Vec::new();
    let mut chains = Vec::new();
    for (dir, key, chain, addr_flag) in [
        ("Ingress", "ingress", "INPUT", "-s"),
        ("Egress", "egress", "OUTPUT", "-d"),
    ] {
        if !types.contains(&dir) {
            continue;
        }
        let lo = if chain == "INPUT" { "-i" } else { "-o" };
        rules.push(format!("-A {chain} {lo} lo -j ACCEPT"));
        rules.push(format!(
            "-A {chain} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
        ));
        let list = spec[key].as_array().cloned().unwrap_or_default();
        let peer_key = if dir == "Ingress" { "from" } else { "to" };
        for (i, rule) in list.iter().enumerate() {
            // The ports of this rule: one chain that accepts them.
            let ports_chain = format!("{}{i}P", &key[..1].to_uppercase());
            chains.push(ports_chain.clone());
            match rule["ports"].as_array() {
                Some(ports) if !ports.is_empty() => {
                    for p in ports {
                        let proto = p["protocol"].as_str().unwrap_or("TCP").to_lowercase();
                        if !matches!(proto.as_str(), "tcp" | "udp") || !p["endPort"].is_null() {
                            return Err(bad(format!("port {p}")));
                        }
                        let port = p["port"]
                            .as_u64()
                            .ok_or_else(|| bad(format!("named port {p}")))?;
                        rules.push(format!(
                            "-A {ports_chain} -p {proto} --dport {port} -j ACCEPT"
                        ));
                    }
                }
                _ => rules.push(format!("-A {ports_chain} -j ACCEPT")),
            }
            let Some(to) = rule[peer_key].as_array() else {
                rules.push(format!("-A {chain} -j {ports_chain}"));
                continue;
            };
            for (j, peer) in to.iter().enumerate() {
                if let Some(block) = peer.get("ipBlock") {
                    let cidr = block["cidr"].as_str().unwrap_or_default();
                    if cidr.contains(':') != v6 {
                        continue;
                    }
                    let peer_chain = format!("{ports_chain}{j}");
                    chains.push(peer_chain.clone());
                    for e in block["except"].as_array().into_iter().flatten() {
                        let e = e.as_str().unwrap_or_default();
                        rules.push(format!("-A {peer_chain} {addr_flag} {e} -j RETURN"));
                    }
                    rules.push(format!("-A {peer_chain} -j {ports_chain}"));
                    rules.push(format!("-A {chain} {addr_flag} {cidr} -j {peer_chain}"));
                } else {
                    let addrs = peers
                        .iter()
                        .find(|(p, _)| p == peer)
                        .map(|(_, a)| a)
                        .ok_or_else(|| bad(format!("no addresses for the peer {peer}")))?;
                    for a in addrs.iter().filter(|a| a.is_ipv6() == v6) {
                        rules.push(format!("-A {chain} {addr_flag} {a} -j {ports_chain}"));
                    }
                }
            }
        }
        rules.push(format!("-A {chain} -j REJECT"));
    }
    for c in &chains {
        out.push_str(&format!(":{c} - [0:0]\n"));
    }
    for r in rules {
        out.push_str(&r);
        out.push('\n');
    }
    out.push_str("COMMIT\n");
    Ok(out)
}
