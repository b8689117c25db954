#!/usr/bin/env bash
# The wire check must catch what it exists to catch: run it on synthetic tcpdump lines, once
# clean (must pass) and once with each kind of leak (each must be reported).
set -euo pipefail
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
check=$(dirname "$0")/wire_check.py
echo '{"upstream_local_port":40000}' >"$dir/audit.jsonl"
clean=(
'12:00:00.000000 IP 203.0.113.2.40000 > 203.0.113.10.443: Flags [S], seq 1, length 0'
'12:00:00.000000 IP 203.0.113.2.5555 > 203.0.113.10.53: 4660+ A? allowed.test. (30)'
'12:00:00.000000 ARP, Request who-has 203.0.113.10 tell 203.0.113.2, length 28'
'12:00:00.000000 IP6 2001:db8:113::2 > ff02::1:ff00:10: ICMP6, neighbor solicitation, who has 2001:db8:113::10, length 32'
'12:00:00.000000 IP 203.0.113.10.443 > 203.0.113.2.40000: Flags [S.], seq 1, length 0'
)
leaks=(
'12:00:00.000000 IP 203.0.113.2.5556 > 203.0.113.10.53: 4661+ A? blocked.test. (30)'
'12:00:00.000000 IP 203.0.113.2.41000 > 203.0.113.10.80: Flags [S], seq 1, length 0'
'12:00:00.000000 IP 203.0.113.2 > 203.0.113.10: ICMP echo request, id 1, seq 1, length 64'
'12:00:00.000000 IP 203.0.113.2.3333 > 203.0.113.10.443: UDP, length 9'
'12:00:00.000000 IP6 2001:db8:113::2.4444 > 2001:db8:113::10.80: Flags [S], seq 1, length 0'
'12:00:00.000000 IP6 2001:db8:113::2 > 2001:db8:113::10: ICMP6, echo request, id 1, seq 1, length 64'
)
run() { printf '%s\n' "$@" | python3 "$check" "$dir/audit.jsonl" allowed.test 203.0.113.2 2001:db8:113::2 >/dev/null; }
run "${clean[@]}" || { echo "wire_check selftest: a clean capture was rejected" >&2; exit 1; }
for leak in "${leaks[@]}"; do
    if run "${clean[@]}" "$leak"; then
        echo "wire_check selftest: missed a leak: $leak" >&2; exit 1
    fi
done
run "${clean[2]}" && { echo "wire_check selftest: a capture with no proxy traffic passed" >&2; exit 1; }
echo "smoke: wire check catches all ${#leaks[@]} kinds of leak" >&2
