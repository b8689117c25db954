#!/bin/bash
# Side-by-side proxy benchmark (issue 3 item 7): direct, airlock-proxy (CONNECT tunnel and
# plain HTTP forwarding), squid, tinyproxy and mitmproxy, in one run, printed as ONE
# markdown table. Root; a private network namespace (nothing leaves the machine: the
# upstream is `airlock-bench serve` on 198.51.100.1, a documentation address put on the
# namespace's own lo). The proxy under test is pinned to core 1, the client and the
# upstream to core 0; proxy CPU = utime+stime of the proxy's process tree over each timed
# window ÷ requests (the fair figure on a 2-core machine, where the client saturates first).
#
#   bench/run.sh [--quick] [--no-install] [--no-build]
#
#   --quick       1 s per cell instead of 3
#   --no-install  do not apt-get/pip install missing squid, tinyproxy, mitmproxy
#   --no-build    use existing release binaries ($CARGO_TARGET_DIR or target/)
#   env CONNS     concurrent connections of the keep-alive / new-connection cells (default 8)
#   env BULK_CONNS  concurrent 1 MiB downloads of the throughput cell (default 1)
#   env PROXY_TUNABLES  GLIBC_TUNABLES for our proxy (default: what the entrypoint gives it,
#                 bench/proxy-tunables; empty: glibc's defaults)
#   env BENCH_TUNABLES  GLIBC_TUNABLES for every other process of the run: the client, the
#                 upstream, the other proxies (default: the proxy's value, so that no row
#                 pays for AMD Zen 3/4's slow rep movsb, see entrypoint/src/proxy_ctl.rs, and
#                 direct is measured at its fastest; empty: glibc's defaults)
#   env SCALE_TUNNELS / SCALE_INTERCEPT  steps of the scale curve (default 1,10,100,1000 tunnels;
#                 1,10,100,200 intercepted connections)
#   env BENCH_JSON  where the results are written as JSON (default target/bench/proxy.json;
#                 the raw cells beside it, .cells: `airlock-bench table FILE` prints them again)
#   env ONLY      space-separated rows to run besides direct (airlock bare squid tinyproxy
#                 mitmproxy intercept); "bare" adds the least a CONNECT relay can be
#                 (`airlock-bench relay`: copy, splice; with "intercept",
#                 `relay-tls`: TLS both sides and a copy), what our rows read against;
#                 "intercept" adds the TLS rows (direct TLS; airlock and mitmproxy
#                 intercepting with a credential injected; a leaf minted per new host);
#                 "admin" (issue 41) adds "airlock connect + admin" and "airlock plain +
#                 admin": the same proxy serving its admin API (--admin-socket) with an
#                 event-stream follower attached for every window, alternated with the
#                 plain airlock rows (which it runs too) over ADMIN_ROUNDS starts each, and
#                 the admin API's latency under a keep-alive load
#                 "approvals" (issue 42) adds "airlock connect + ask" and "airlock plain +
#                 ask": the same proxy with [network] unlisted = "ask" (approvals on,
#                 nothing pending: every measured request is to a listed host), alternated
#                 with the plain rows over ADMIN_ROUNDS starts each, and the operator's
#                 approve round trip (APPROVE_N asks through the proxy, each answered
#                 `approve --once` on the admin socket and timed)
#   env APPROVE_N  approve round trips (default 300)
#   env GRANT_N    grant round trips, approve --always, each a policy revision over the
#                 grants before it (default 100)
#   env ADMIN_ROUNDS  starts of each proxy for the admin comparison (default 3: the first
#                 runs every cell, the others the 1-conn, concurrent and new-conn cells)
#   env ADMIN_N   sequential calls of GET /v1/counters and of GET /metrics, each on a new
#                 connection, under a keep-alive load (default 2000)
#   env LAG_N     denials timed from the agent's refusal to a follower of denials reading
#                 its line (`logs -f`), under the same load (default 300)
#   env ADMIN_LOAD_SECS  how long that load runs (default 2 × the cell + 4 s; the run
#                 fails if the calls outlast it)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=3
INSTALL=1
BUILD=1
for a in "$@"; do
  case $a in
    --quick) SECS=1 ;;
    --no-install) INSTALL=0 ;;
    --no-build) BUILD=0 ;;
    *) echo "usage: $0 [--quick] [--no-install] [--no-build]" >&2; exit 2 ;;
  esac
done
export SECS
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export PROXY_BIN=${PROXY_BIN:-$TARGET_DIR/release/airlock-proxy}
export BENCH_BIN=${BENCH_BIN:-$TARGET_DIR/release/airlock-bench}
export CONNS=${CONNS:-8}
export BULK_CONNS=${BULK_CONNS:-1}
export ONLY=${ONLY:-airlock admin approvals bare squid tinyproxy mitmproxy intercept}
export ADMIN_ROUNDS=${ADMIN_ROUNDS:-3}
export APPROVE_N=${APPROVE_N:-300}
export GRANT_N=${GRANT_N:-100}
export ADMIN_N=${ADMIN_N:-2000}
export LAG_N=${LAG_N:-300}
export ADMIN_LOAD_SECS=${ADMIN_LOAD_SECS:-$((2 * SECS + 4))}
# The scale curve (issue 22): tunnels held open at once, and intercepted connections.
export SCALE_TUNNELS=${SCALE_TUNNELS:-1,10,100,1000}
export SCALE_INTERCEPT=${SCALE_INTERCEPT:-1,10,100,200}
# Where the results go as JSON for tools.
export BENCH_JSON=${BENCH_JSON:-$TARGET_DIR/bench/proxy.json}
# The proxy's glibc tuning, exactly as the entrypoint starts it (unless PROXY_TUNABLES is set).
PROXY_TUNABLES=$("$ROOT/bench/proxy-tunables")
export PROXY_TUNABLES
# The credential hand-off format the proxy reads (policy/src/handoff.rs).
# (the constant moved from the policy crate to its own handoff crate: read whichever exists).
export HANDOFF_VERSION=${HANDOFF_VERSION:-$(cat "$ROOT/handoff/src/lib.rs" "$ROOT/policy/src/handoff.rs" 2>/dev/null |
  sed -n 's/^pub const HANDOFF_VERSION: u32 = \([0-9]*\);/\1/p' | head -1)}
[ -n "$HANDOFF_VERSION" ] || { echo "bench: no HANDOFF_VERSION in handoff/src/lib.rs nor policy/src/handoff.rs" >&2; exit 1; }

if [ "${AIRLOCK_BENCH_INNER:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "run as root (network namespace, taskset)" >&2; exit 1; }
  # Outside the namespace: the registries are reachable here only.
  absent=$(mktemp)
  if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && . scripts/lib/cargo.sh && airlock_cargo build --release -q -p airlock-proxy -p airlock-bench) >&2
  fi
  have() { command -v "$1" >/dev/null 2>&1; }
  if [ "$INSTALL" = 1 ]; then
    if ! have squid || ! have tinyproxy; then
      echo "installing squid tinyproxy (apt-get)..." >&2
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq squid tinyproxy) \
        >/tmp/airlock-bench-apt.log 2>&1 || true
    fi
    if ! have mitmdump; then
      echo "installing mitmproxy (pip)..." >&2
      pip install -q mitmproxy >/tmp/airlock-bench-pip.log 2>&1 || true
      hash -r
    fi
  fi
  for t in squid tinyproxy; do
    have $t || echo "$t|absent|not installed: $( [ "$INSTALL" = 1 ] && echo "apt-get install $t failed (/tmp/airlock-bench-apt.log)" || echo "--no-install")" >>"$absent"
  done
  have mitmdump || echo "mitmproxy|absent|not installed: $( [ "$INSTALL" = 1 ] && echo "pip install mitmproxy failed (/tmp/airlock-bench-pip.log)" || echo "--no-install")" >>"$absent"
  export ABSENT=$absent
  export MITMDUMP=$(command -v mitmdump || true)
  export AIRLOCK_BENCH_INNER=1
  rc=0
  unshare -n "$0" "$@" || rc=$?
  rm -f "$absent"
  exit $rc
fi

# ---- inside the private network namespace ----
# The scale curve holds 1,000 tunnels: 2,000 descriptors in the proxy, 1,000 in the client
# and in the upstream each: raise the soft limit to the hard one.
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge 4096 ] ||
  { echo "bench: open-file limit $(ulimit -n) < 4096: raise it (ulimit -Hn) for the scale curve" >&2; exit 1; }
export GLIBC_TUNABLES=${BENCH_TUNABLES-$PROXY_TUNABLES}
work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
chmod 755 "$work"
# squid and tinyproxy drop root for their logs.
mkdir -m 1777 "$work/logs"
results=$work/results.txt
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL $(tree "$p") 2>/dev/null || true; done
  kill $(jobs -p) 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip link set lo up
ip addr add 198.51.100.1/32 dev lo
# Many short connections: wide port range, reuse TIME_WAIT for outgoing connections. Every
# port the run listens on is reserved: the peers' (3130-3133), the bare relays' (3134,
# 3135), the upstream's, and all of our proxy's listeners (the *_PORT constants of
# airlock-channels, read from the source as bench/proxy-tunables reads the tunables). A
# run makes some 100,000 connections, so an ephemeral port would otherwise land on one of
# them, and a client socket lingering there (TIME_WAIT, no SO_REUSEADDR) fails the next
# proxy's bind: seen on a fresh machine, mitmproxy on 3132 and our intercepting proxy
# after the peers.
ours=$(sed -n 's/^pub const [A-Z_]*_PORT: u16 = \([0-9]*\);$/\1/p' "$ROOT/channels/src/lib.rs" | paste -sd,)
[ -n "$ours" ] || { echo "bench: no *_PORT constants in $ROOT/channels/src/lib.rs" >&2; exit 1; }
sysctl -qw net.ipv4.ip_local_port_range="1024 65000" net.ipv4.tcp_tw_reuse=1 \
  net.ipv4.ip_local_reserved_ports="$ours,3130-3135,8080,8443"
# Every 198.51.100.0/24 address is local: "a new host" for the leaf-minting cell is a new address.
ip route add local 198.51.100.0/24 dev lo
T=198.51.100.1:8080
TS=198.51.100.1:8443
mkdir "$work/tls"
"$BENCH_BIN" gen-tls "$work/tls"
taskset -c 0 "$BENCH_BIN" serve --listen $T --tls-listen 0.0.0.0:8443 --tls-dir "$work/tls" &
until "$BENCH_BIN" load --via direct --target $T --mode ka --secs 0 >/dev/null 2>&1; do sleep 0.01; done

client() { taskset -c 0 "$BENCH_BIN" "$@"; }
cells() { # row via proxy pid [target ca]
  local row=$1 via=$2 proxy=$3 pid=${4:-} target=${5:-$T} ca=${6:-} p=()
  local ca_arg=()
  [ -n "$ca" ] && ca_arg=(--ca "$ca")
  p+=("${ca_arg[@]}")
  [ -n "$pid" ] && p+=(--pid "$pid")
  if [ -n "${ROUND:-}" ]; then
    # A further window of the admin comparison: the CPU cells only, named rN-<cell>.
    echo "  $row (window $ROUND)" >&2
    echo "$row|r$ROUND-lat|$(client load --via $via --proxy "$proxy" --target $target --mode ka --conns 1 --secs "$SECS" "${p[@]}")" >>"$results"
    echo "$row|r$ROUND-ka|$(client load --via $via --proxy "$proxy" --target $target --mode ka --conns "$CONNS" --secs "$SECS" "${p[@]}")" >>"$results"
    echo "$row|r$ROUND-new|$(client load --via $via --proxy "$proxy" --target $target --mode new --conns "$CONNS" --secs "$SECS" "${p[@]}")" >>"$results"
    return 0
  fi
  echo "  $row" >&2
  echo "$row|lat|$(client load --via $via --proxy "$proxy" --target $target --mode ka --conns 1 --secs "$SECS" "${p[@]}")" >>"$results"
  echo "$row|ka|$(client load --via $via --proxy "$proxy" --target $target --mode ka --conns "$CONNS" --secs "$SECS" "${p[@]}")" >>"$results"
  echo "$row|new|$(client load --via $via --proxy "$proxy" --target $target --mode new --conns "$CONNS" --secs "$SECS" "${p[@]}")" >>"$results"
  echo "$row|bulk|$(client load --via $via --proxy "$proxy" --target $target --mode bulk --conns "$BULK_CONNS" --secs "$SECS" "${p[@]}")" >>"$results"
  # Fairness: one keep-alive connection while a 1 MiB download runs on another (a request
  # must not wait behind a bulk transfer on the proxy's one thread).
  client load --via $via --proxy "$proxy" --target $target --mode bulk --conns 1 --secs "$((SECS + 1))" "${ca_arg[@]}" >"$work/beside-bulk" &
  local bulk_pid=$!
  sleep 0.5
  echo "$row|beside|$(client load --via $via --proxy "$proxy" --target $target --mode ka --conns 1 --secs "$SECS" "${ca_arg[@]}")" >>"$results"
  wait $bulk_pid || true # a failed download shows as its errors, or as —, in the table
  echo "$row|beside-bulk|$(cat "$work/beside-bulk")" >>"$results"
  if [ "$via" = intercept ]; then
    # Every address from .10 up is a host this proxy has not minted a leaf for yet.
    echo "$row|newhost|$(client load --via $via --proxy "$proxy" --target $target --mode new-host --conns 1 --secs "$SECS" "${p[@]}")" >>"$results"
  fi
}
# A process and all its descendants (squid and tinyproxy fork workers that hold the port).
tree() {
  local p=$1 c
  echo "$p"
  for c in $(pgrep -P "$p" 2>/dev/null); do tree "$c"; done
}
alive() { [ -e /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; }
# Stops a proxy by pid with its whole tree (TERM, 5 s, KILL) and waits until its port is
# free, so the next row can bind it.
stop() { # pid port
  local all p
  all=$(tree "$1")
  kill -TERM $all 2>/dev/null || true
  local any
  for _ in $(seq 100); do
    any=0
    for p in $all; do alive "$p" && any=1; done
    [ $any = 0 ] && break
    sleep 0.05
  done
  for p in $all; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  for _ in $(seq 100); do
    ss -Htln "sport = :$2" | grep -q . || return 0
    sleep 0.05
  done
  echo "bench: port $2 still bound after stopping pid $1 ($(ss -Htlnp "sport = :$2" | head -1))" >&2
  exit 1
}
# The admin API's clients (issue 41), for a proxy started with --admin-socket $ADMIN_SOCK.
# An event-stream follower on core 0 with the other clients, reading every line to nowhere;
# it must still be attached when the proxy's windows are over (admin_unfollow).
admin_follow() { # row
  taskset -c 0 "$BENCH_BIN" admin-follow --socket "$ADMIN_SOCK" >"$work/follower" 2>&1 &
  follower=$!
  for _ in $(seq 500); do
    grep -q '^attached$' "$work/follower" && return 0
    alive $follower || break
    sleep 0.01
  done
  echo "bench: $1: the event-stream follower did not attach: $(tr '\n' ' ' <"$work/follower")" >&2
  exit 1
}
admin_unfollow() { # row cell
  if ! alive $follower; then
    echo "bench: $1: the event-stream follower left before the windows were over: $(tr '\n' ' ' <"$work/follower")" >&2
    exit 1
  fi
  kill -TERM $follower
  wait $follower || true
  echo "$1|$2|$(grep -v '^attached$' "$work/follower")" >>"$results"
}
# Sequential admin calls while a keep-alive load runs through the proxy: their latency, and
# the load's own figures meanwhile.
admin_latency() { # row via addr pid
  local row=$1 via=$2 addr=$3 pid=$4 lp
  echo "  $row: admin API calls under a keep-alive load" >&2
  client load --via $via --proxy "$addr" --target $T --mode ka --conns "$CONNS" --secs "$ADMIN_LOAD_SECS" --pid "$pid" >"$work/admin-load" &
  lp=$!
  sleep 0.5
  # The caller is not pinned (an operator's CLI runs wherever the host puts it).
  for path in /v1/counters /metrics; do
    echo "$row|admin-${path##*/}|$("$BENCH_BIN" admin-get --socket "$ADMIN_SOCK" --path $path -n "$ADMIN_N")" >>"$results"
  done
  # The operator's `logs -f`: a denial's way to a follower of denials, under the same load.
  echo "$row|admin-lag|$("$BENCH_BIN" admin-lag --socket "$ADMIN_SOCK" --proxy "$addr" -n "$LAG_N")" >>"$results"
  if ! alive $lp; then
    echo "bench: $row: the keep-alive load ($ADMIN_LOAD_SECS s) ended before the $ADMIN_N admin calls did: raise ADMIN_LOAD_SECS" >&2
    exit 1
  fi
  wait $lp || true
  echo "$row|admin-load|$(cat "$work/admin-load")" >>"$results"
}
# row via proxy-addr command...: launch pinned to core 1, time to first request, idle RSS,
# the cells, peak RSS, stop. With ADMIN_SOCK (the proxy serves its admin API there): an
# event-stream follower attached for all of it, and the admin calls' latency after the
# cells. With ROUND: a further window of the admin comparison (the CPU cells only).
proxy_row() { # row via addr [--tls ca] command...
  local row=$1 via=$2 addr=$3 target=$T ca="" c=(); shift 3
  if [ "$1" = --tls ]; then target=$TS; ca=$2; c=(--ca "$ca"); shift 2; fi
  local out port=${addr##*:}
  if ss -Htln "sport = :$port" | grep -q .; then
    echo "bench: $row: port $port is already bound before the launch ($(ss -Htlnp "sport = :$port" | head -1))" >&2
    exit 1
  fi
  if ! out=$(RUST_BACKTRACE=0 "$BENCH_BIN" launch --via $via --proxy "$addr" --target $target "${c[@]}" \
      --log "$work/logs/$row.log" -- taskset -c 1 "$@" 2>&1); then
    local why="failed to start: $(echo "$out" | head -1 | tr '|' '/'); log: $(tail -n 2 "$work/logs/$row.log" 2>/dev/null | tr '|\n' '/ ' | cut -c1-300)"
    case $row in
      # Our own proxy must start: a benchmark without it is a failure, not a row.
      airlock*) echo "bench: $row $why" >&2; exit 1 ;;
      *) echo "$row|absent|$why" >>"$results"; return 0 ;;
    esac
  fi
  local pid=${out#pid=}; pid=${pid%% *}
  pids+=("$pid")
  local pre=""; [ -n "${ROUND:-}" ] && pre=r$ROUND-
  [ -n "${ADMIN_SOCK:-}" ] && admin_follow "$row"
  if [ -n "${ROUND:-}" ]; then
    sleep 0.3
    cells "$row" $via "$addr" "$pid" $target "$ca"
    [ -n "${ADMIN_SOCK:-}" ] && admin_unfollow "$row" ${pre}follower
    stop "$pid" "$port"
    return 0
  fi
  echo "$row|startup|$out" >>"$results"
  sleep 0.3
  echo "$row|idle|$("$BENCH_BIN" rss "$pid")" >>"$results"
  cells "$row" $via "$addr" "$pid" $target "$ca"
  if [ -n "${ADMIN_SOCK:-}" ]; then
    # The calls with the follower still attached: an operator's `status` beside `logs -f`.
    admin_latency "$row" $via "$addr" "$pid"
    admin_unfollow "$row" follower
  fi
  if [ -n "${APPROVE_SOCK:-}" ]; then
    echo "  $row: the operator's approve round trip ($APPROVE_N)" >&2
    echo "$row|approve|$("$BENCH_BIN" approve-rtt --socket "$APPROVE_SOCK" --proxy "$addr" -n "$APPROVE_N")" >>"$results"
    echo "  $row: the operator's grant round trip, approve --always ($GRANT_N)" >&2
    echo "$row|grant|$("$BENCH_BIN" approve-rtt --socket "$APPROVE_SOCK" --proxy "$addr" -n "$GRANT_N" --scope always)" >>"$results"
  fi
  if [ -n "${SCALE:-}" ]; then
    echo "  $row: scale curve ($SCALE connections)" >&2
    client scale --via $via --proxy "$addr" --target $target "${c[@]}" --pid "$pid" \
      --row "$row" --steps "$SCALE" --secs "$SECS" >>"$results" || { echo "bench: $row: scale curve failed" >&2; exit 1; }
  fi
  echo "$row|peak|$("$BENCH_BIN" rss "$pid")" >>"$results"
  stop "$pid" "$port"
}
wants() { [[ " $ONLY " == *" $1 "* ]]; }
absent() { grep -q "^$1|" "$ABSENT" && grep "^$1|" "$ABSENT" >>"$results"; }

echo "benchmark: ${SECS}s per cell, $CONNS concurrent connections, proxy on core 1" >&2
cells direct direct ""

if wants airlock || wants admin || wants approvals; then
  # Passthrough: the tunnel rows measure the uninspected relay (every other host is intercepted).
  # [limits] at its maximum: the load is a flood by design; every request still takes its
  # token and counts against its budgets (the checks stay on the measured path).
  printf '[sandbox]\nname = "bench"\n\n[network]\nallow = ["198.51.100.1:8080"]\npassthrough = ["198.51.100.1"]\n\n[limits]\nrequests_per_second = 1000000\nrequest_burst = 1000000\nupload_bytes_per_hour = 1099511627776\nsandbox_upload_bytes_per_hour = 1099511627776\nsandbox_requests_per_hour = 1000000000\nllm_tokens_per_hour = 1000000000000\nsandbox_llm_tokens_per_hour = 1000000000000\n' >"$work/policy.toml"
  printf 'nameserver 127.0.0.53\n' >"$work/resolv.conf"
  extra=()
  help=$("$PROXY_BIN" --help 2>&1 || true)
  if [[ $help == *--state-dir* ]]; then
    mkdir -m 700 "$work/state"
    extra+=(--state-dir "$work/state")
  fi
  [[ $help == *--ca-export* ]] && extra+=(--ca-export "$work/ca.pem")
  airlock=(env GLIBC_TUNABLES="$PROXY_TUNABLES" "$PROXY_BIN" --policy "$work/policy.toml"
    --audit "$work/audit.jsonl" --session bench --resolv-conf "$work/resolv.conf" "${extra[@]}")
  if wants admin; then
    [[ $help == *--admin-socket* ]] || { echo "bench: $PROXY_BIN has no --admin-socket (ONLY=admin needs the admin API)" >&2; exit 1; }
    mkdir -m 700 "$work/admin"
    admin=("${airlock[@]}" --admin-socket "$work/admin/admin.sock")
  fi
  if wants approvals; then
    [[ $help == *--admin-socket* ]] || { echo "bench: $PROXY_BIN has no --admin-socket (ONLY=approvals answers on the admin API)" >&2; exit 1; }
    # The same policy asking about unlisted hosts; the inbox's caps out of the round trip's way.
    sed -e 's/^passthrough = .*/&\nunlisted = "ask"/' -e 's/^\[limits\]$/&\napprovals_pending = 10000\napprovals_per_minute = 10000/' \
      "$work/policy.toml" >"$work/policy-ask.toml"
    grep -q '^unlisted = "ask"' "$work/policy-ask.toml" || { echo "bench: the ask policy was not written" >&2; exit 1; }
    mkdir -m 700 "$work/admin-ask"
    ask=(env GLIBC_TUNABLES="$PROXY_TUNABLES" "$PROXY_BIN" --policy "$work/policy-ask.toml"
      --audit "$work/audit.jsonl" --session bench --resolv-conf "$work/resolv.conf" "${extra[@]}"
      --admin-socket "$work/admin-ask/admin.sock")
  fi
  for via in connect plain; do
    rm -f "$work/audit.jsonl"
    scale=""; [ $via = connect ] && scale=$SCALE_TUNNELS
    SCALE=$scale proxy_row "airlock $via" $via 127.0.0.1:3128 "${airlock[@]}"
    if wants admin; then
      # The same proxy serving its admin API with a follower attached, then further starts
      # of both alternated, so that a drift of the machine hits both sides alike.
      rm -f "$work/audit.jsonl"
      ADMIN_SOCK=$work/admin/admin.sock proxy_row "airlock $via + admin" $via 127.0.0.1:3128 "${admin[@]}"
      for r in $(seq 2 "$ADMIN_ROUNDS"); do
        rm -f "$work/audit.jsonl"
        ROUND=$r proxy_row "airlock $via" $via 127.0.0.1:3128 "${airlock[@]}"
        rm -f "$work/audit.jsonl"
        ROUND=$r ADMIN_SOCK=$work/admin/admin.sock proxy_row "airlock $via + admin" $via 127.0.0.1:3128 "${admin[@]}"
      done
    fi
    if wants approvals; then
      # Approvals on, alternated with the base row (its windows numbered past the admin
      # comparison's); the round trip once, on the plain row's first start.
      approve_sock=""; [ $via = plain ] && approve_sock=$work/admin-ask/admin.sock
      rm -f "$work/audit.jsonl"
      APPROVE_SOCK=$approve_sock proxy_row "airlock $via + ask" $via 127.0.0.1:3128 "${ask[@]}"
      for r in $(seq 2 "$ADMIN_ROUNDS"); do
        rm -f "$work/audit.jsonl"
        ROUND=$((r + ADMIN_ROUNDS)) proxy_row "airlock $via" $via 127.0.0.1:3128 "${airlock[@]}"
        rm -f "$work/audit.jsonl"
        ROUND=$((r + ADMIN_ROUNDS)) proxy_row "airlock $via + ask" $via 127.0.0.1:3128 "${ask[@]}"
      done
    fi
  done
fi

if wants bare; then
  # Bare relays: a CONNECT relay that does nothing but relay (`airlock-bench relay`: no
  # policy, no audit, no epoll, a blocking thread per direction), pinned to core 1 like
  # every proxy: what any relay of that kind costs on this machine, beside which the
  # airlock tunnel reads (direct pays for neither the second connection nor the cross-core
  # wake-ups). Their new-connection column includes spawning three threads. The splice row
  # moves bytes through the proxy's own pipe (airlock_proxy::tunnel::tcp).
  for mode in splice copy; do
    proxy_row "bare connect ($mode relay)" connect 127.0.0.1:3134 "$BENCH_BIN" relay --listen 127.0.0.1:3134 --mode $mode
  done
fi

if wants squid && ! absent squid; then
  cat >"$work/squid.conf" <<EOF
http_port 127.0.0.1:3130
acl bench dst 198.51.100.1
http_access allow bench
http_access deny all
cache deny all
access_log stdio:$work/logs/squid-access.log
cache_log $work/logs/squid-cache.log
pid_filename $work/logs/squid.pid
coredump_dir $work/logs
pinger_enable off
shutdown_lifetime 0 seconds
dns_nameservers 127.0.0.53
EOF
  for via in connect plain; do
    proxy_row "squid $via" $via 127.0.0.1:3130 squid -N -f "$work/squid.conf"
  done
fi

if wants tinyproxy && ! absent tinyproxy; then
  cat >"$work/tinyproxy.conf" <<EOF
User nobody
Group nogroup
Port 3131
Listen 127.0.0.1
Timeout 600
MaxClients 4096
LogFile "$work/logs/tinyproxy.log"
LogLevel Info
PidFile "$work/logs/tinyproxy.pid"
ConnectPort 8080
DisableViaHeader Yes
EOF
  for via in connect plain; do
    proxy_row "tinyproxy $via" $via 127.0.0.1:3131 tinyproxy -d -c "$work/tinyproxy.conf"
  done
fi

if wants mitmproxy && ! absent mitmproxy; then
  mitm=("$MITMDUMP" -q --listen-host 127.0.0.1 --listen-port 3132 --set confdir="$work/mitm"
    --set flow_detail=0 --set termlog_verbosity=error)
  # CONNECT: passthrough (ignore_hosts: the tunnel is relayed, not intercepted).
  proxy_row "mitmproxy connect (passthrough)" connect 127.0.0.1:3132 "${mitm[@]}" --ignore-hosts '.*'
  proxy_row "mitmproxy plain" plain 127.0.0.1:3132 "${mitm[@]}"
fi

# ---- TLS interception (issue 4 item 8): HTTPS upstream, test CA, a credential injected ----
if wants intercept; then
  cells "direct TLS" direct-tls "" "" $TS "$work/tls/ca.pem"
  if wants airlock; then
    hosts=$(for i in 1 $(seq 10 254); do printf '"198.51.100.%s", ' $i; done)
    ports=$(for i in 1 $(seq 10 254); do printf '"198.51.100.%s:8443", ' $i; done)
    printf '[sandbox]\nname = "bench"\n\n[network]\nallow = [%s]\nwritable = [%s]\n\n[[credentials]]\nname = "bench"\nsource = { env = "AIRLOCK_BENCH_TOKEN" }\nhosts = [%s]\nheader = "authorization"\nformat = "Bearer {}"\n\n[limits]\nrequests_per_second = 1000000\nrequest_burst = 1000000\nupload_bytes_per_hour = 1099511627776\nsandbox_upload_bytes_per_hour = 1099511627776\nsandbox_requests_per_hour = 1000000000\nllm_tokens_per_hour = 1000000000000\nsandbox_llm_tokens_per_hour = 1000000000000\n' \
      "${ports%, }" "${hosts%, }" "${hosts%, }" >"$work/policy-tls.toml"
    mkdir -m 700 "$work/state-tls"
    printf '{"version":%s,"session":"bench","credentials":[{"name":"bench","value":"bench-real-token-0123456789","placeholder":"airlock-placeholder-bench-00"}],"git_placeholder":null}\n' \
      "$HANDOFF_VERSION" >"$work/state-tls/credentials.json"
    chmod 400 "$work/state-tls/credentials.json"
    SCALE=$SCALE_INTERCEPT proxy_row "airlock intercept (credential injected)" intercept 127.0.0.1:3128 --tls "$work/ca-tls.pem" \
      env GLIBC_TUNABLES="$PROXY_TUNABLES" "$PROXY_BIN" --policy "$work/policy-tls.toml" --audit "$work/audit-tls.jsonl" --session bench \
      --resolv-conf "$work/resolv.conf" --state-dir "$work/state-tls" --ca-export "$work/ca-tls.pem" \
      --upstream-ca "$work/tls/ca.pem"
  fi
  if wants bare; then
    # The bare intercepting relay: TLS both sides with the proxy's crypto choices and a copy
    # between them, nothing else (no leaf minted: it serves the upstream's own certificate,
    # which the client trusts through the test CA). Its 1 MiB column is the floor of the
    # intercepted bulk here: decrypt once, encrypt once, two loopback connections.
    proxy_row "bare intercept (rustls relay)" intercept 127.0.0.1:3135 --tls "$work/tls/ca.pem" \
      "$BENCH_BIN" relay-tls --listen 127.0.0.1:3135 --tls-dir "$work/tls"
  fi
  if wants mitmproxy && ! absent mitmproxy; then
    printf 'def request(flow):\n    flow.request.headers["authorization"] = "Bearer bench-real-token-0123456789"\n' >"$work/inject.py"
    proxy_row "mitmproxy intercept (credential injected)" intercept 127.0.0.1:3133 --tls "$work/mitm-tls/mitmproxy-ca-cert.pem" \
      "$MITMDUMP" -q --listen-host 127.0.0.1 --listen-port 3133 --set confdir="$work/mitm-tls" \
      --set flow_detail=0 --set termlog_verbosity=error --set ssl_verify_upstream_trusted_ca="$work/tls/ca.pem" \
      -s "$work/inject.py"
  fi
fi

# How this machine's idle cores wake up. On a VM it decides the one-connection figures: a
# vCPU that halts when idle costs whoever wakes it a VM exit (an IPI) per wake-up, while
# one that polls first (haltpoll's guest_halt_poll_ns) is woken for free (docs/performance.md;
# the measurements: bench/RESULTS.md).
idle_desc() {
  local hp=/sys/module/haltpoll/parameters/guest_halt_poll_ns
  printf '%s' "$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
  [ -r $hp ] && printf ', guest_halt_poll_ns=%s' "$(cat $hp)"
  return 0
}
echo
echo "proxy benchmark, $(nproc) cores ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(uname -r), ${SECS}s per cell; concurrent cells: $CONNS connections on one client thread (core 0, with the upstream); proxy pinned to core 1; GLIBC_TUNABLES: our proxy ${PROXY_TUNABLES:-none}, everything else ${GLIBC_TUNABLES:-none}; cpuidle: $(idle_desc)"
echo
mkdir -p "$(dirname "$BENCH_JSON")"
"$BENCH_BIN" table "$results" --json "$BENCH_JSON"
# The raw cells beside it, so that the tables can be printed again (`airlock-bench table FILE`).
cp "$results" "${BENCH_JSON%.json}.cells"
echo
echo "keep-alive: one connection (one CONNECT) per client connection, 3-byte responses; new conn: connect + CONNECT + 1 request + close (TLS rows, new host: every request to an address not seen before, for which the intercepting proxies mint a leaf and the bare relay serves its one certificate); latency: 1 connection, keep-alive, minus direct; 1 MiB: $BULK_CONNS keep-alive connection(s), with the proxy's CPU per MiB relayed and the share of its core that kept busy (near 100%: the proxy's own work bounds the row; well under: it waits on its peers); RSS: the proxy's process tree after start-up and at its peak; start-up: exec to the first request served through it."
echo "JSON: $BENCH_JSON (cells: ${BENCH_JSON%.json}.cells)"
echo
# Issue 43: what reading an LLM API's answer for its token usage adds to each frame the
# agent receives (the same frames without and with the reading, in one run).
echo "LLM token usage read per frame of an Anthropic stream (2,000 text deltas), core 1:"
taskset -c 1 "$BENCH_BIN" usage
