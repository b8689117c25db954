#!/usr/bin/env bash
# The host CLI's benchmark (issue 18; not a timed test, it prints numbers):
#   1. `airlock new NAME -- sleep` to a ready agent (the CLI returns when the entrypoint has
#      logged its `ready` line), N times on one repository (N sandboxes side by side);
#   2. `airlock list` and `airlock list --json` with those N registered sandboxes (each row
#      reconciled with the engine), RUNS times each.
# Usage: cli/bench.sh            N=50 RUNS=10 by default
#   AIRLOCK_BIN=PATH   the CLI to time (default: target/release/airlock, built if missing)
# Needs airlock:latest (`airlock build`). Everything it makes (containers, checkouts,
# registry) is in a temporary data directory removed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-50}
RUNS=${RUNS:-10}
bin=${AIRLOCK_BIN:-target/release/airlock}
if [ -z "${AIRLOCK_BIN:-}" ]; then cargo build --release --quiet -p airlock-cli; fi
bin=$(realpath "$bin")
docker image inspect airlock:latest >/dev/null 2>&1 ||
    { echo "bench: the image airlock:latest is missing: airlock build" >&2; exit 1; }

work=$(mktemp -d)
export AIRLOCK_DATA_DIR=$work/data AIRLOCK_CONFIG_DIR=$work/config
cleanup() {
    docker ps -aq --filter "label=dev.airlock.data=$AIRLOCK_DATA_DIR" |
        xargs -r docker rm -f -v >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

git init -q -b main "$work/repo"
git -C "$work/repo" -c user.name=b -c user.email=b@x commit -q --allow-empty -m base
printf '[sandbox]\nname = "bench"\nmode = "enforce"\n\n[network]\nallow = ["example.com"]\n' \
    > "$work/policy.toml"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# min / median / p90 / max of the numbers on stdin
stats() { sort -n | awk '{a[NR]=$1} END {printf "min %d  median %d  p90 %d  max %d ms (n=%d)", a[1], a[int((NR+1)/2)], a[int(NR*0.9+0.5)], a[NR], NR}'; }

echo "bench: $bin, image airlock:latest, $N sandboxes, $(nproc) CPUs" >&2
: > "$work/new.ms"
for i in $(seq 1 "$N"); do
    t0=$(now_ms)
    "$bin" new "b$i" --repo "$work/repo" --policy "$work/policy.toml" -- sleep 3600 >/dev/null
    echo $(( $(now_ms) - t0 )) >> "$work/new.ms"
done
echo "airlock new -> ready agent:          $(head -n1 "$work/new.ms") ms the first, all: $(stats < "$work/new.ms")"

rows=$("$bin" list --json | grep -c '"name"')
[ "$rows" -eq "$N" ] || { echo "bench: list shows $rows sandboxes, not $N" >&2; exit 1; }
for flag in "" "--json"; do
    : > "$work/list.ms"
    for _ in $(seq 1 "$RUNS"); do
        t0=$(now_ms)
        "$bin" list $flag >/dev/null
        echo $(( $(now_ms) - t0 )) >> "$work/list.ms"
    done
    printf 'airlock list %-6s with %d sandboxes: %s\n' "$flag" "$N" "$(stats < "$work/list.ms")"
done
