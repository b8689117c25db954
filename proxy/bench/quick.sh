#!/bin/bash
# Quick proxy-cost check (not the full side-by-side benchmark of issue 3): proxy CPU per
# request (utime+stime of the proxy over the run / requests), idle RSS and start-up, in a
# private network namespace (root; needs unshare, python3, curl). The upstream is a python
# HTTP/1.1 server on 198.51.100.1 (a documentation address put on the namespace's own lo:
# nothing leaves the machine), reached by IP literal so no DNS is involved.
#
#   PROXY_BIN=target/release/airlock-proxy proxy/bench/quick.sh
set -euo pipefail
if [ "${AIRLOCK_BENCH_INNER:-}" != 1 ]; then
  export AIRLOCK_BENCH_INNER=1
  exec unshare -n "$0" "$@"
fi
BIN=${PROXY_BIN:-target/release/airlock-proxy}
BIN=$(realpath "$BIN")
# glibc tuning as the entrypoint gives the proxy (PROXY_TUNABLES= for glibc's defaults).
PROXY_TUNABLES=$("$(dirname "$0")/../../bench/proxy-tunables")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
ip link set lo up
ip addr add 198.51.100.1/32 dev lo
echo hi > x
python3 -c "
import http.server as h
H = h.SimpleHTTPRequestHandler
H.protocol_version = 'HTTP/1.1'; H.disable_nagle_algorithm = True; H.log_message = lambda *a: None
h.ThreadingHTTPServer(('198.51.100.1', 8080), H).serve_forever()" &
printf '[sandbox]\nname = "bench"\n\n[network]\nallow = ["198.51.100.1:8080"]\n' > policy.toml
printf 'nameserver 127.0.0.53\n' > resolv.conf
t0=$(date +%s%N)
GLIBC_TUNABLES="$PROXY_TUNABLES" "$BIN" --policy policy.toml --audit audit.jsonl --session bench --resolv-conf resolv.conf 2>proxy.log &
P=$!
until curl -s -o /dev/null http://127.0.0.1:3128/__airlock/health; do sleep 0.001; done
t1=$(date +%s%N)
until curl -s -o /dev/null http://198.51.100.1:8080/x; do sleep 0.01; done
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$P/stat"; }
printf '%-34s %8s %14s %12s\n' case requests "proxy CPU µs" "wall µs"
run() { # name n curl-args...
  local name=$1 n=$2; shift 2
  local c0 c1 w0 w1
  c0=$(cpu); w0=$(date +%s%N)
  curl -s "$@" "http://198.51.100.1:8080/x?[1-$n]" -o /dev/null
  c1=$(cpu); w1=$(date +%s%N)
  printf '%-34s %8d %14d %12d\n' "$name" "$n" $(( (c1-c0)*1000000/tick/n )) $(( (w1-w0)/1000/n ))
}
run "direct (no proxy, proxy idle)" 2000
run "CONNECT tunnel, keep-alive" 2000 --proxytunnel -x http://127.0.0.1:3128
run "CONNECT tunnel, new per request" 500 --proxytunnel -x http://127.0.0.1:3128 -H 'Connection: close'
run "plain HTTP forward, keep-alive" 2000 -x http://127.0.0.1:3128
echo "start-up to health 200 (incl. curl): $(( (t1-t0)/1000000 )) ms"
grep -E 'VmRSS|VmHWM' "/proc/$P/status" | tr -s ' \t' ' '
kill -TERM $P; wait $P
echo "audit lines: $(wc -l < audit.jsonl)"
