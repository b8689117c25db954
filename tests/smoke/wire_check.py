#!/usr/bin/env python3
"""Wire check for the Docker smoke tests.

Reads `tcpdump -nn -r CAPTURE` text on stdin and asserts that every packet the appliance
sent (source = one of its addresses) is
  - ARP or IPv6 neighbour discovery / MLD housekeeping the kernel sends on its own,
  - TCP of a connection the proxy made (its source port is an `upstream_local_port` in the
    proxy's audit log), or
  - a DNS query (UDP/TCP port 53) for a name the policy allows (the proxy's own resolution,
    forwarded by Docker's embedded resolver).
Prints a summary; exits 1 (listing the offending packets) otherwise, or if the capture saw
no proxy connection or no allowed DNS query at all (a check that saw nothing proves nothing).

Usage: wire_check.py AUDIT.jsonl ALLOWED_NAMES(comma) APPLIANCE_ADDR...  < tcpdump-text
"""
import json
import re
import sys

audit_path, names, *addrs = sys.argv[1:]
allowed = {n.strip().lower().rstrip(".") for n in names.split(",") if n.strip()}
ports = set()
with open(audit_path) as f:
    for line in f:
        line = line.strip()
        if line:
            p = json.loads(line).get("upstream_local_port")
            if p:
                ports.add(int(p))

HOUSEKEEPING = ("neighbor solicitation", "neighbor advertisement", "router solicitation",
                "multicast listener report")
ip_re = re.compile(r"^\S+ (IP6?) (\S+) > (\S+): (.*)$")
bad, proxy_pkts, dns_ok, arp = [], 0, 0, 0


def split(endpoint, v6):
    """'203.0.113.2.4567' -> ('203.0.113.2', 4567); '203.0.113.2' -> ('203.0.113.2', None);
    '2001:db8::2.80' -> ('2001:db8::2', 80)."""
    parts = endpoint.split(".")
    if not v6 and len(parts) == 5 and parts[4].isdigit():
        return ".".join(parts[:4]), int(parts[4])
    if v6 and len(parts) == 2 and parts[1].isdigit():
        return parts[0], int(parts[1])
    return endpoint, None


for raw in sys.stdin:
    line = raw.rstrip("\n")
    if " ARP, " in line:
        if any(f"tell {a}" in line or f"{a} is-at" in line for a in addrs):
            arp += 1
        continue
    m = ip_re.match(line)
    if not m:
        continue
    fam, src, dst, rest = m.groups()
    v6 = fam == "IP6"
    shost, sport = split(src, v6)
    if shost not in addrs:
        continue
    _, dport = split(dst.rstrip(":"), v6)
    if "ICMP6" in rest and any(h in rest for h in HOUSEKEEPING):
        continue
    if dport == 53:
        q = re.search(r"\b(?:A|AAAA)\? (\S+?)\.? \(", rest + " (")
        if q and q.group(1).lower().rstrip(".") in allowed:
            dns_ok += 1
            continue
        if "Flags [" in rest and sport in ports:
            proxy_pkts += 1
            continue
        if "Flags [" in rest and not q:
            # TCP DNS handshake/ack segments carry no question: allowed only with payload-less flags.
            if re.search(r"length 0\b", rest):
                continue
        bad.append(line)
        continue
    if "Flags [" in rest and sport in ports:
        proxy_pkts += 1
        continue
    bad.append(line)

print(f"wire: {proxy_pkts} proxy packets on {len(ports)} audited upstream connections, "
      f"{dns_ok} allowed DNS queries, {arp} ARP, {len(bad)} unexplained")
for b in bad[:40]:
    print(f"wire: UNEXPLAINED {b}")
if bad or proxy_pkts == 0 or dns_ok == 0:
    sys.exit(1)
