#!/bin/bash
# Quick cost check of the INTERCEPTED path (TLS terminated with the appliance leaf, a
# credential injected, the response scrubbed, verified TLS upstream): proxy CPU per request
# (utime+stime of the proxy, all threads, over the run / requests) for keep-alive requests
# and for a new intercepted connection per request (cached leaf), and 1 MiB throughput
# through the proxy as a share of direct. Private network namespace (root; needs unshare,
# python3, openssl, curl); the upstream is a python HTTPS server on 198.51.100.1:8443
# (documentation address on the namespace's own lo: nothing leaves the machine).
#
#   PROXY_BIN=target/release/airlock-proxy proxy/bench/intercept_quick.sh [N]
# PERF=/tmp/ka.data also records flat perf profiles of the keep-alive run, of the new-connection
# run (.nc) and of the intercepted 1 MiB downloads (.bulk) (build with
# CARGO_PROFILE_RELEASE_STRIP=none for symbols).
set -euo pipefail
if [ "${AIRLOCK_BENCH_INNER:-}" != 1 ]; then
  export AIRLOCK_BENCH_INNER=1
  exec unshare -n "$0" "$@"
fi
N=${1:-2000}
BIN=${PROXY_BIN:-target/release/airlock-proxy}
BIN=$(realpath "$BIN")
# glibc tuning as the entrypoint gives the proxy (PROXY_TUNABLES= for glibc's defaults).
PROXY_TUNABLES=$("$(dirname "$0")/../../bench/proxy-tunables")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP_AUDIT:-}" ] && cp "$work/audit.jsonl" "$KEEP_AUDIT"; rm -rf "$work"' EXIT
cd "$work"
ip link set lo up
ip addr add 198.51.100.1/32 dev lo
# Upstream CA and a leaf for the IP.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=up-ca \
  -keyout up-ca.key -out up-ca.pem -addext basicConstraints=critical,CA:TRUE 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=198.51.100.1 \
  -keyout up.key -out up.csr 2>/dev/null
printf 'subjectAltName=IP:198.51.100.1\nextendedKeyUsage=serverAuth\n' > ext
openssl x509 -req -in up.csr -CA up-ca.pem -CAkey up-ca.key -CAcreateserial -days 2 \
  -extfile ext -out up.pem 2>/dev/null
echo hi > x
head -c 1048576 /dev/urandom > big
python3 -c "
import http.server as h, ssl
H = h.SimpleHTTPRequestHandler
H.protocol_version = 'HTTP/1.1'; H.disable_nagle_algorithm = True; H.log_message = lambda *a: None
s = h.ThreadingHTTPServer(('198.51.100.1', 8443), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain('up.pem', 'up.key')
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()" &
cat > policy.toml <<'EOF'
[sandbox]
name = "bench"

[network]
allow = ["198.51.100.1:8443"]

[[credentials]]
name = "bench"
source = { env = "BENCH_KEY" }
hosts = ["198.51.100.1"]
header = "x-api-key"
format = "{}"
EOF
mkdir -m 700 state
cat > state/credentials.json <<'EOF'
{"version":1,"session":"bench","credentials":[{"name":"bench","value":"sk-bench-REAL-0123456789","placeholder":"airlock-placeholder-bench-0123456789"}]}
EOF
printf 'nameserver 127.0.0.53\n' > resolv.conf
GLIBC_TUNABLES="$PROXY_TUNABLES" "$BIN" --policy policy.toml --audit audit.jsonl --session bench --resolv-conf resolv.conf \
  --state-dir state --ca-export ca.pem --upstream-ca up-ca.pem 2>proxy.log &
P=$!
until curl -s -o /dev/null http://127.0.0.1:3128/__airlock/health; do sleep 0.01; done
until curl -s -o /dev/null --cacert up-ca.pem https://198.51.100.1:8443/x; do sleep 0.01; done
U="https://198.51.100.1:8443"
X=(-x http://127.0.0.1:3128 --cacert ca.pem)
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$P/stat"; }
# Warm: the leaf is minted and cached.
curl -s "${X[@]}" -o /dev/null "$U/x"
printf '%-44s %8s %14s %12s\n' case requests "proxy CPU µs" "wall µs"
run() { # name n curl-args...
  local name=$1 n=$2; shift 2
  local c0 c1 w0 w1
  c0=$(cpu); w0=$(date +%s%N)
  curl -s "$@" -o /dev/null
  c1=$(cpu); w1=$(date +%s%N)
  printf '%-44s %8d %14d %12d\n' "$name" "$n" $(( (c1-c0)*1000000/tick/n )) $(( (w1-w0)/1000/n ))
}
run "direct TLS, keep-alive (proxy idle)" "$N" --cacert up-ca.pem "$U/x?[1-$N]"
[ -n "${PERF:-}" ] && { perf record -q -F 4999 -p "$P" -o "$PERF" 2>/dev/null & PP=$!; sleep 0.3; }
run "intercepted, keep-alive" "$N" "${X[@]}" "$U/x?[1-$N]"
[ -n "${PERF:-}" ] && { kill -INT $PP; wait $PP || true; }
[ -n "${STRACE:-}" ] && { strace ${STRACE_ARGS:--c} -f -p "$P" -o "$STRACE" & SP=$!; sleep 0.5
  curl -s "${X[@]}" -o /dev/null "$U/x?[1-500]"; kill -INT $SP; wait $SP || true; }
M=$(( N / 4 ))
[ -n "${PERF:-}" ] && { perf record -q ${PERF_ARGS:-} -F 4999 -p "$P" -o "$PERF.nc" 2>/dev/null & PP=$!; sleep 0.3; }
run "intercepted, new connection per request" "$M" "${X[@]}" -H 'Connection: close' "$U/x?[1-$M]"
[ -n "${STRACE:-}" ] && { strace ${STRACE_ARGS:--c} -f -p "$P" -o "$STRACE.nc" & SP=$!; sleep 0.5
  curl -s "${X[@]}" -H 'Connection: close' -o /dev/null "$U/x?[1-100]"; kill -INT $SP; wait $SP || true; }
[ -n "${PERF:-}" ] && { kill -INT $PP; wait $PP || true; }
tput() { # label curl-args... : best of 5 MiB/s for 1 MiB
  local best=0 s
  for _ in 1 2 3 4 5; do
    s=$(curl -s "$@" -o /dev/null -w '%{speed_download}\n' "$U/big?[1-8]" | sort -n | tail -1)
    s=${s%.*}
    [ "$s" -gt "$best" ] && best=$s
  done
  echo "$best"
}
d=$(tput --cacert up-ca.pem)
[ -n "${PERF:-}" ] && { perf record -q ${PERF_ARGS:-} -F 4999 -p "$P" -o "$PERF.bulk" 2>/dev/null & PP=$!; sleep 0.3; }
i=$(tput "${X[@]}")
[ -n "${PERF:-}" ] && { kill -INT $PP; wait $PP || true; }
echo "1 MiB download: direct $((d/1048576)) MiB/s, intercepted $((i/1048576)) MiB/s = $(( i*100/d ))% of direct"
grep -E 'VmRSS|VmHWM' "/proc/$P/status" | tr -s ' \t' ' '
kill -TERM $P; wait $P || true
echo "audit lines: $(wc -l < audit.jsonl); credential injected: $(grep -c '"credential":"bench"' audit.jsonl)"
