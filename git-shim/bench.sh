#!/usr/bin/env bash
# Benchmark (issue 5 item 7): git status / diff / log -20 / commit through the shim and the
# git API vs native git, on a 10,000-file repository. Prints one table (mean ms per command
# over N runs). Run as any user; builds release binaries first.
# Usage: git-shim/bench.sh [runs]     (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-30}"
# The same git on both sides (a PATH git may be another version than the one the API runs).
real_git="${AIRLOCK_REAL_GIT:-/usr/bin/git}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
. scripts/lib/cargo.sh
airlock_cargo build --release -q -p airlock-git-api -p airlock-git-shim
bin="$CARGO_TARGET_DIR/release"

tmp="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
ws="$tmp/workspace"; hidden="$tmp/hidden/repo.git"
mkdir -p "$ws" "$tmp/hidden"
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
"$real_git" -C "$ws" init -q -b main
for d in $(seq 0 99); do
    mkdir -p "$ws/d$d"
    for f in $(seq 0 99); do echo "file $d/$f" > "$ws/d$d/f$f.txt"; done
done
"$real_git" -C "$ws" add -A && "$real_git" -C "$ws" commit -q -m "10000 files"
for i in $(seq 1 30); do echo "change $i" >> "$ws/d$i/f$i.txt"; "$real_git" -C "$ws" commit -qam "c$i"; done
echo "edit" >> "$ws/d0/f0.txt"          # something for status and diff to report
mv "$ws/.git" "$hidden"
"$real_git" --git-dir="$hidden" remote add origin https://github.com/bench/repo.git

printf '[sandbox]\nname = "bench"\n' > "$tmp/policy.toml"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/key"
"$bin/airlock-git-api" --socket "$tmp/git.sock" --git-dir "$hidden" --work-tree "$ws" \
    --agent-uid "$(id -u)" --key-file "$tmp/key" --policy "$tmp/policy.toml" --git "$real_git" 2>"$tmp/api.log" &
server=$!
for _ in $(seq 50); do [ -S "$tmp/git.sock" ] && break; sleep 0.1; done

shim() { AIRLOCK_WORKSPACE="$ws" AIRLOCK_GIT_SOCKET="$tmp/git.sock" AIRLOCK_SESSION_KEY_FILE="$tmp/key" AIRLOCK_REAL_GIT="$real_git" "$bin/git" "$@"; }
native() { GIT_DIR="$hidden" GIT_WORK_TREE="$ws" "$real_git" "$@"; }

# Interleaved runs (native, shim, native, ...) so that load from other processes hits both
# sides alike; prints "native_us shim_us" means after one warm-up of each.
measure() {
    native "$@" >/dev/null 2>&1 || { echo "native failed: $*" >&2; exit 1; }
    shim "$@" >/dev/null 2>&1 || { echo "shim failed: $*" >&2; exit 1; }
    local n=0 s=0 t0 t1 t2
    for _ in $(seq "$runs"); do
        t0=$(date +%s%N); native "$@" >/dev/null 2>&1
        t1=$(date +%s%N); shim "$@" >/dev/null 2>&1
        t2=$(date +%s%N)
        n=$((n + t1 - t0)); s=$((s + t2 - t1))
    done
    echo "$((n / runs / 1000)) $((s / runs / 1000))"
}

cd "$ws"
echo "git through the shim vs native, 10,000 files, mean of $runs interleaved runs"
printf '%-10s %10s %10s %10s\n' command "native ms" "shim ms" "added ms"
for cmd in "status" "diff" "log -20" "commit --allow-empty -q -m bench"; do
    # shellcheck disable=SC2086
    read -r n s < <(measure $cmd)
    printf '%-10s %10.2f %10.2f %10.2f\n' "${cmd%% -*}" "$(bc -l <<<"$n/1000")" "$(bc -l <<<"$s/1000")" "$(bc -l <<<"($s-$n)/1000")"
done
