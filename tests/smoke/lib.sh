# Shared by the Docker smoke tests (sourced). Everything a test creates is named with
# $SMOKE_ID and removed by `smoke_cleanup`, which every test installs as an EXIT trap, so
# containers, networks and volumes go away even when a step fails.
# Networks are --internal private networks on documentation ranges: a test never sends
# traffic anywhere but loopback and the networks it created.

set -euo pipefail
SMOKE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SMOKE_ID=${SMOKE_ID:-airlock-smoke-$$}
SMOKE_IMAGE=${AIRLOCK_IMAGE:-airlock:latest}
SMOKE_DIR=$(mktemp -d "/tmp/$SMOKE_ID.XXXXXX")
SMOKE_FAILS=0
_smoke_containers=()
_smoke_networks=()
_smoke_volumes=()
_smoke_pids=()

say() { echo "smoke: $*" >&2; }
pass() { echo "  ok   $*" >&2; }
fail() { echo "  FAIL $*" >&2; SMOKE_FAILS=$((SMOKE_FAILS + 1)); }
die() { echo "smoke: FATAL $*" >&2; exit 1; }

# check NAME CONDITION-COMMAND...: records a pass or a failure, never aborts the test.
check() {
    local name=$1; shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

smoke_cleanup() {
    local rc=$?
    set +e
    for p in "${_smoke_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for c in "${_smoke_containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1; done
    for n in "${_smoke_networks[@]}"; do docker network rm "$n" >/dev/null 2>&1; done
    for v in "${_smoke_volumes[@]}"; do docker volume rm -f "$v" >/dev/null 2>&1; done
    rm -rf "$SMOKE_DIR"
    exit "$rc"
}
trap smoke_cleanup EXIT

# Remove what an earlier, killed run left behind (names carry the prefix and a dead pid).
smoke_sweep() {
    local name pid
    for name in $(docker ps -a --filter name=airlock-smoke- --format '{{.Names}}') \
        $(docker network ls --filter name=airlock-smoke- --format '{{.Name}}') \
        $(docker volume ls -q --filter name=airlock-smoke-); do
        pid=${name#airlock-smoke-}; pid=${pid%%-*}
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            docker rm -f "$name" >/dev/null 2>&1 || docker network rm "$name" >/dev/null 2>&1 ||
                docker volume rm -f "$name" >/dev/null 2>&1 || true
        fi
    done
}

track_container() { _smoke_containers+=("$1"); }
track_network() { _smoke_networks+=("$1"); }
track_volume() { _smoke_volumes+=("$1"); }
track_pid() { _smoke_pids+=("$1"); }

# The image, built offline exactly as docs/docker.md ("Building the image") says (cached base; seconds when unchanged).
smoke_build_image() {
    local t0=$SECONDS
    "$SMOKE_ROOT/scripts/build-image" "$SMOKE_IMAGE" >/dev/null || die "scripts/build-image failed"
    say "image $SMOKE_IMAGE built in $((SECONDS - t0)) s, size $(docker image inspect -f '{{.Size}}' "$SMOKE_IMAGE" | awk '{printf "%.1f MB", $1/1e6}')"
}

# The fake internet's binary (tests/src/bin/fakenet.rs), built like scripts/test builds it.
smoke_fakenet_bin() {
    (cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-tests --bin airlock-fakenet) ||
        die "cannot build airlock-fakenet"
    local dir=${CARGO_TARGET_DIR:-target}
    case $dir in /*) ;; *) dir=$SMOKE_ROOT/$dir ;; esac
    echo "$dir/debug/airlock-fakenet"
}

# A test CA like the harness's (tests/src/ca.rs: same common name; no key identifiers, so
# the leaves fakenet signs with rcgen chain to it). Writes ca.pem and ca.key in $1.
smoke_ca() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$1/ca.key" -days 2 -subj "/CN=airlock fakenet test CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
        -addext "subjectKeyIdentifier=none" -addext "authorityKeyIdentifier=none" \
        -out "$1/ca.pem" 2>/dev/null
    chmod 0644 "$1/ca.pem"
}

# The host path of a named volume's data (root on the host reads the audit log there).
volume_path() { docker volume inspect -f '{{.Mountpoint}}' "$1"; }

# The bridge interface of a user-defined network.
bridge_of() { echo "br-$(docker network inspect -f '{{.Id}}' "$1" | cut -c1-12)"; }

# smoke_wait_ready CONTAINER: waits up to 5 s for its log to say "ready" (the fake
# internet, the fake APIs); dies with the log's tail otherwise.
smoke_wait_ready() {
    for _ in $(seq 50); do docker logs "$1" 2>/dev/null | grep -q ready && return; sleep 0.1; done
    die "$1 did not start: $(docker logs "$1" 2>&1 | tail -3)"
}

# smoke_fakenet_up FAKENET NET SUBNET GATEWAY UP IP [SUBNET6 IP6]: the test network
# (internal, IPv6 too when SUBNET6 is given) and the fake internet on it at IP (and IP6),
# reading $SMOKE_DIR/fakenet.json as /cfg, logging into $SMOKE_DIR/log; both tracked,
# waited for until ready.
smoke_fakenet_up() {
    local fakenet=$1 net=$2 subnet=$3 gw=$4 up=$5 ip=$6 subnet6=${7:-} ip6=${8:-}
    local v6=() ip6_args=()
    if [ -n "$subnet6" ]; then v6=(--ipv6 --subnet "$subnet6"); ip6_args=(--ip6 "$ip6"); fi
    track_network "$net"
    docker network create --internal --subnet "$subnet" --gateway "$gw" "${v6[@]}" "$net" >/dev/null
    track_container "$up"
    docker run -d --name "$up" --network "$net" --ip "$ip" "${ip6_args[@]}" \
        -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR:/cfg:ro" -v "$SMOKE_DIR/log:/log" \
        airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
    smoke_wait_ready "$up"
}

# smoke_capture NET: tcpdump on NET's bridge into $SMOKE_DIR/wire.pcap (tracked, so it is
# stopped at exit), once it listens; sets BR (the bridge) and tcpdump_pid.
smoke_capture() {
    BR=$(bridge_of "$1")
    tcpdump -i "$BR" -nn -U --immediate-mode -w "$SMOKE_DIR/wire.pcap" 2>"$SMOKE_DIR/tcpdump.err" &
    tcpdump_pid=$!
    track_pid "$tcpdump_pid"
    for _ in $(seq 50); do grep -qs listening "$SMOKE_DIR/tcpdump.err" && return; sleep 0.1; done
    die "tcpdump did not start on $BR"
}
