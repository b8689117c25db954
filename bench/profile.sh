#!/bin/bash
# Where a proxy's per-request CPU goes, counted instead of timed (issue 22): runs the proxy
# under callgrind (or natively) in a private network namespace with `airlock-bench serve` as
# the upstream, warms one keep-alive connection up, then counts one timed window. Root.
# Instruction counts are deterministic, so two builds compare on a shared, noisy machine
# (wall time and utime/stime do not); build with symbols to read the profile
# (CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=line-tables-only).
#
#   bench/profile.sh PROXY OUT MODE [SECS]
#     MODE  ka-int (intercepted keep-alive, a credential injected), ka-tun (passthrough
#           CONNECT tunnel), ka-plain (plain HTTP forwarding: an audit line per request), bulk-tun (1 MiB downloads through that tunnel), bulk-int (1 MiB
#           downloads intercepted, through TLS both sides), new-int (a new
#           intercepted connection per request), newhost (a new host, a leaf minted, each)
#     prints requests, Ir (instructions in the window) and Ir/req; OUT.<pid>.1 is the
#     callgrind file for callgrind_annotate
#   env ADMIN=1    the proxy serves its admin API (--admin-socket) with an event-stream
#                  follower (`airlock-bench admin-follow`, core 0) attached for the whole run:
#                  what the operator's channel costs per request (issue 41); the follower's
#                  tally is printed at the end
#   env NATIVE=1   no valgrind: three windows (one for newhost), proxy CPU per request split user / system
#   env PERF=1     (with NATIVE) perf record -e cpu-clock -g of the window into OUT.perf;
#                  PERF_G="--call-graph dwarf,32768" for Rust frames (the release build has no
#                  frame pointers, so -g stops at the first of them), PERF_F for the rate
#   env STRACE=1   (with NATIVE) strace -f -c of the window (STRACE_OPTS to change)
#   env BENCH_BIN  airlock-bench (default target/release/airlock-bench)
#   env PROXY_TUNABLES  GLIBC_TUNABLES for the proxy (default: the entrypoint's, bench/proxy-tunables)
# Runs PROXY under callgrind in a private netns; prints instructions per request for the window.
set -euo pipefail
if [ "${CG_INNER:-}" != 1 ]; then CG_INNER=1 exec unshare -n "$0" "$@"; fi
P=$1 OUT=$2 MODE=$3 SECS=${4:-3}
B=${BENCH_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/airlock-bench}
# The glibc tuning the entrypoint gives the proxy (PROXY_TUNABLES= for glibc's defaults),
# read from its source like every other bench script, never copied here.
PT=$("$(dirname "$0")/proxy-tunables")
w=$(mktemp -d /tmp/airlock-profile.XXXX); chmod 755 $w
ip link set lo up; ip addr add 198.51.100.1/32 dev lo; ip route add local 198.51.100.0/24 dev lo
mkdir $w/tls; $B gen-tls $w/tls >/dev/null
taskset -c 0 $B serve --listen 198.51.100.1:8080 --tls-listen 0.0.0.0:8443 --tls-dir $w/tls & SP=$!
PP=; FP=; trap 'kill $SP $PP $FP 2>/dev/null; sleep 0.5; rm -rf $w' EXIT
printf 'nameserver 127.0.0.53\n' >$w/resolv.conf
if [ $MODE = ka-tun ] || [ $MODE = bulk-tun ] || [ $MODE = ka-plain ]; then
  printf '[sandbox]\nname = "bench"\n\n[network]\nallow = ["198.51.100.1:8080"]\npassthrough = ["198.51.100.1"]\n\n[limits]\nrequests_per_second = 1000000\nrequest_burst = 1000000\nupload_bytes_per_hour = 1099511627776\nsandbox_upload_bytes_per_hour = 1099511627776\nsandbox_requests_per_hour = 1000000000\nllm_tokens_per_hour = 1000000000000\nsandbox_llm_tokens_per_hour = 1000000000000\n' >$w/policy.toml
  mkdir -m 700 $w/state
  args=(--policy $w/policy.toml --audit $w/audit.jsonl --session bench --resolv-conf $w/resolv.conf --state-dir $w/state --ca-export $w/ca.pem)
  via=connect; target=198.51.100.1:8080; ca=()
  [ $MODE = ka-plain ] && via=plain
else
  hosts=$(for i in 1 $(seq 10 254); do printf '"198.51.100.%s", ' $i; done)
  ports=$(for i in 1 $(seq 10 254); do printf '"198.51.100.%s:8443", ' $i; done)
  printf '[sandbox]\nname = "bench"\n\n[network]\nallow = [%s]\nwritable = [%s]\n\n[[credentials]]\nname = "bench"\nsource = { env = "AIRLOCK_BENCH_TOKEN" }\nhosts = [%s]\nheader = "authorization"\nformat = "Bearer {}"\n\n[limits]\nrequests_per_second = 1000000\nrequest_burst = 1000000\nupload_bytes_per_hour = 1099511627776\nsandbox_upload_bytes_per_hour = 1099511627776\nsandbox_requests_per_hour = 1000000000\nllm_tokens_per_hour = 1000000000000\nsandbox_llm_tokens_per_hour = 1000000000000\n' "${ports%, }" "${hosts%, }" "${hosts%, }" >$w/policy.toml
  mkdir -m 700 $w/state
  printf '{"version":%s,"session":"bench","credentials":[{"name":"bench","value":"bench-real-token-0123456789","placeholder":"airlock-placeholder-bench-00"}],"git_placeholder":null}\n' "${HANDOFF_VERSION:-1}" >$w/state/credentials.json
  chmod 400 $w/state/credentials.json
  args=(--policy $w/policy.toml --audit $w/audit.jsonl --session bench --resolv-conf $w/resolv.conf --state-dir $w/state --ca-export $w/ca.pem --upstream-ca $w/tls/ca.pem)
  via=intercept; target=198.51.100.1:8443; ca=(--ca $w/ca.pem)
fi
if [ -n "${ADMIN:-}" ]; then mkdir -m 700 $w/admin; args+=(--admin-socket $w/admin/admin.sock); fi
if [ -n "${NATIVE:-}" ]; then VG=(taskset -c 1); else VG=(valgrind --tool=callgrind --callgrind-out-file=$OUT.%p ${CG_OPTS:-}); fi
GLIBC_TUNABLES="$PT" "${VG[@]}" "$P" "${args[@]}" >$w/proxy.log 2>&1 & PP=$!
for i in $(seq 300); do ss -Htln 'sport = :3128' | grep -q . && break; sleep 0.1; done
sleep 0.5
if [ -n "${ADMIN:-}" ]; then
  for i in $(seq 300); do [ -S $w/admin/admin.sock ] && break; sleep 0.1; done
  taskset -c 0 $B admin-follow --socket $w/admin/admin.sock >$w/follower 2>&1 & FP=$!
  for i in $(seq 300); do grep -q '^attached$' $w/follower && break; sleep 0.1; done
  grep -q '^attached$' $w/follower || { echo "profile: the event-stream follower did not attach: $(cat $w/follower)" >&2; exit 1; }
  # Its tally when the script ends (it must still be attached: end=term).
  trap 'kill -TERM $FP 2>/dev/null && wait $FP; echo "follower: $(grep -v "^attached$" $w/follower)"; kill $SP $PP 2>/dev/null; sleep 0.5; rm -rf $w' EXIT
fi
# The warm-up mode: newhost warms up with new connections to .1, because a new-host warm-up
# would mint the leaves of the very hosts (.10 up) that the timed window then connects to.
case $MODE in
  ka-*) m=ka warm=ka ;; bulk-*) m=bulk warm=ka ;; new-int) m=new warm=new ;; newhost) m=new-host warm=new ;;
esac
# One window for newhost (each window starts again at .10: a second would find its leaves
# cached), three otherwise.
windows="1 2 3"; [ $MODE = newhost ] && windows=1
# warm-up (and for new-int: the pool fill)
taskset -c 0 $B load --via $via --proxy 127.0.0.1:3128 --target $target --mode $warm --conns 1 --secs 1 "${ca[@]}" >/dev/null
if [ -n "${NATIVE:-}" ]; then
  if [ -n "${STRACE:-}" ]; then
    strace ${STRACE_OPTS:--f -c} -p $PP -o $OUT.strace & PF=$!
    sleep 0.5
    taskset -c 0 $B load --via $via --proxy 127.0.0.1:3128 --target $target --mode $m --conns 1 --secs $SECS "${ca[@]}" --pid $PP | tee $OUT.load
    kill -INT $PF; wait $PF || true
    cat $OUT.strace
    exit 0
  fi
  if [ -n "${PERF:-}" ]; then
    perf record -e cpu-clock -F ${PERF_F:-20000} ${PERF_G:--g} -p $PP -o $OUT.perf 2>/dev/null & PF=$!
    sleep 0.3
    taskset -c 0 $B load --via $via --proxy 127.0.0.1:3128 --target $target --mode $m --conns 1 --secs $SECS "${ca[@]}" --pid $PP | tee $OUT.load
    kill -INT $PF; wait $PF || true
    exit 0
  fi
  for r in $windows; do
  s0=$(awk '{print $14, $15}' /proc/$PP/stat)
  taskset -c 0 $B load --via $via --proxy 127.0.0.1:3128 --target $target --mode $m --conns 1 --secs $SECS "${ca[@]}" --pid $PP > $OUT.load
  s1=$(awk '{print $14, $15}' /proc/$PP/stat)
  n=$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' $OUT.load)
  echo "requests=$n $(grep -oE '(mib_s|cpu_us_per_req|steal_pct)=[0-9.]+' $OUT.load | paste -sd' ')" $(echo $s0 $s1 | awk -v n=$n '{printf "user_us/req=%.1f sys_us/req=%.1f", ($3-$1)*1e4/n, ($4-$2)*1e4/n}')
  done
  exit 0
fi
callgrind_control -z $PP >/dev/null
taskset -c 0 $B load --via $via --proxy 127.0.0.1:3128 --target $target --mode $m --conns 1 --secs $SECS "${ca[@]}" | tee $OUT.load
callgrind_control -d $PP >/dev/null
sleep 0.5
n=$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' $OUT.load)
f=$(ls -t $OUT.$PP* | head -1)
tot=$(callgrind_annotate $f 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
echo "requests=$n Ir=$tot Ir/req=$((tot / n)) file=$f"
