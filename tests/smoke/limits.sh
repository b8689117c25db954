#!/usr/bin/env bash
# Docker smoke test: the agent fills every tmpfs it can write and the appliance keeps
# working. Started exactly as docs/docker.md says (scripts/docker-run), the agent writes
# /tmp and /home/agent full (dd until it fails); each fill must end in ENOSPC within the
# documented size, not in an out-of-memory cgroup. Then, with both still full:
#   - `docker exec` still starts a process in the container;
#   - a request the agent sends through the proxy, and one from a `docker exec` as the agent,
#     are still served by upstream and audited.
# Without sizes (Docker's default is half the host's RAM) the fill runs into --memory and the
# container wedges: exec fails, requests hang (issue 13).
# Before the fill the agent also floods the audit log under a 1 MB AIRLOCK_AUDIT_CAP: first
# attempts on five hosts, then 3,000 denials to one host and 600 allowed requests with long
# paths. The log stays within the cap, the first attempts are still in it after it rotated,
# a `rotated` line says what left, and every one of the 3,000 denials is a line or a count.
# Usage: sudo tests/smoke/limits.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

NET=$SMOKE_ID-lnet
UP=$SMOKE_ID-lup
APP=$SMOKE_ID-lapp
AUDIT=$SMOKE_ID-laudit
APP4=192.0.2.2
UP4=192.0.2.10
AUDIT_CAP=1000000

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"

python3 - "$SMOKE_DIR" <<PY
import json, sys
d = sys.argv[1]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "http": [{"ip": "0.0.0.0", "port": 80}],
    "https": [{"ip": "0.0.0.0", "port": 443, "names": ["allowed.test"]}],
    "dns": [{"ip": "0.0.0.0", "port": 53}],
    "zone": {"allowed.test": ["$UP4"]},
}, open(f"{d}/fakenet.json", "w"))
PY
cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke-limits"
[network]
allow = ["allowed.test"]
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"
mkdir -p "$SMOKE_DIR/log" "$SMOKE_DIR/repo"
chown 1000:1000 "$SMOKE_DIR/repo"

smoke_fakenet_up "$fakenet" "$NET" 192.0.2.0/24 192.0.2.1 "$UP" "$UP4"

# The agent: fill, report KEY=VALUE lines, then stay up for the host's checks.
cat >"$SMOKE_DIR/repo/fill.sh" <<'SH'
mem() { cat /sys/fs/cgroup/memory.current /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null | head -1; }
fill() {  # fill NAME DIR: dd until it fails; its status, whether ENOSPC, the KiB written
    local err
    err=$(dd if=/dev/zero of="$2/fill" bs=1M 2>&1 >/dev/null)
    echo "$1_rc=$?"
    echo "$1_enospc=$(grep -c 'No space left on device' <<<"$err")"
    echo "$1_kib=$(du -sk "$2/fill" | cut -f1)"
}
# code URL: each status the URL (a curl glob) got, with its count ("403:3000").
code() { curl -sS --max-time 60 -o /dev/null -w '%{http_code}\n' "$@" 2>/dev/null | sort | uniq -c | awk '{printf "%s%s:%s", (NR > 1 ? "," : ""), $2, $1}'; }
for i in 0 1 2 3 4; do echo "early$i=$(code "http://early$i.test/first")"; done
echo "flood=$(code 'http://flood.test/d-[1-3000]')"
long=$(printf 'x%.0s' $(seq 1500))
echo "allowed_flood=$(code "http://allowed.test/a-$long-[1-600]")"
echo "mem_before=$(mem)"
fill tmp /tmp
fill home /home/agent
echo "mem_full=$(mem)"
echo "df=$(df -k /tmp /home/agent | awk 'NR>1 {printf "%s:%s/%s ", $6, $3, $2}')"
echo "agent_request=$(curl -sS --max-time 20 -o /dev/null -w '%{http_code}' http://allowed.test/agent-after-fill)"
echo "filled=1"
exec sleep 600
SH
chmod 0755 "$SMOKE_DIR/repo/fill.sh"

say "starting the appliance as docs/docker.md says (scripts/docker-run), the agent fills its tmpfs"
track_volume "$AUDIT"
track_container "$APP"
AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$SMOKE_IMAGE AIRLOCK_POLICY=$SMOKE_DIR/policy.toml \
AIRLOCK_AUDIT_VOLUME=$AUDIT \
AIRLOCK_DOCKER_ARGS="-d --name $APP --network $NET --ip $APP4 --dns $UP4 -e AIRLOCK_AUDIT_CAP=$AUDIT_CAP" \
    "$SMOKE_ROOT/scripts/docker-run" "$SMOKE_DIR/repo" -- bash /workspace/fill.sh >/dev/null ||
    die "docker run failed"
t0=$SECONDS
while [ $((SECONDS - t0)) -lt 180 ]; do
    docker logs "$APP" 2>/dev/null | grep -q '^filled=1' && break
    docker inspect "$APP" >/dev/null 2>&1 || break
    sleep 1
done
out=$(docker logs "$APP" 2>/dev/null || true)
docker logs "$APP" >"$SMOKE_DIR/app.log" 2>&1 || true
get() { sed -n "s/^$1=//p" <<<"$out" | head -1; }
if [ "$(get filled)" != 1 ]; then
    grep -v ' INFO ' "$SMOKE_DIR/app.log" | tail -20 >&2
    die "the agent did not finish filling its tmpfs in 180 s"
fi
say "filled in $((SECONDS - t0)) s; memory cgroup $(get mem_before) -> $(get mem_full) bytes; df $(get df)"

kib() {  # kib SPEC: the documented size of a --tmpfs spec in KiB ("unsized" without one)
    case $1 in *size=*) ;; *) echo unsized; return ;; esac
    local size=${1##*size=}; size=${size%%,*}
    case $size in *k) echo "${size%k}" ;; *m) echo $((${size%m} * 1024)) ;; *g) echo $((${size%g} * 1048576)) ;; *) echo "$size" ;; esac
}
repo=$SMOKE_DIR/repo audit_volume=$AUDIT
# shellcheck source=../../docker/run-flags.sh
source "$SMOKE_ROOT/docker/run-flags.sh"
for w in "${AIRLOCK_RUN_FLAGS[@]}"; do
    case $w in /tmp:*) tmp_kib=$(kib "$w") ;; /home/agent:*) home_kib=$(kib "$w") ;; esac
done
[ -n "${tmp_kib:-}" ] && [ -n "${home_kib:-}" ] || die "no --tmpfs /tmp or /home/agent in docker/run-flags.sh"
full() {  # full NAME LIMIT_KIB: dd failed with ENOSPC after writing most of the tmpfs
    local rc enospc written
    rc=$(get "$1_rc") enospc=$(get "$1_enospc") written=$(get "$1_kib")
    [ "$2" != unsized ] && [ "$rc" != 0 ] && [ "$enospc" = 1 ] && [ -n "$written" ] &&
        [ "$written" -le "$2" ] && [ "$written" -ge $(($2 * 9 / 10)) ]
}
check "/tmp filled to ENOSPC within its $tmp_kib KiB (dd status $(get tmp_rc), wrote $(get tmp_kib) KiB)" full tmp "$tmp_kib"
check "/home/agent filled to ENOSPC within its $home_kib KiB (dd status $(get home_rc), wrote $(get home_kib) KiB)" full home "$home_kib"
check "the agent's request through the proxy, tmpfs full: 200 ($(get agent_request))" [ "$(get agent_request)" = 200 ]

say "with the tmpfs still full"
t1=$(date +%s%N)
exec_rc=0
timeout 30 docker exec "$APP" true || exec_rc=$?
exec_ms=$((($(date +%s%N) - t1) / 1000000))
check "docker exec still works (rc $exec_rc, $exec_ms ms)" [ "$exec_rc" = 0 ]
code=$(timeout 40 docker exec -u 1000 "$APP" curl -sS --max-time 20 -x http://127.0.0.1:3128 \
    -o /dev/null -w '%{http_code}' http://allowed.test/exec-after-fill 2>&1 || true)
check "a request from docker exec as the agent through the proxy: 200 ($code)" [ "$code" = 200 ]
still=$(timeout 30 docker exec "$APP" sh -c 'du -sk /tmp/fill /home/agent/fill | cut -f1 | paste -sd" "' 2>&1 || true)
check "the fills are still there ($still KiB)" [ "$still" = "$(get tmp_kib) $(get home_kib)" ]

say "stopping the appliance (the proxy flushes its audit log)"
stop_rc=0
timeout 60 docker stop -t 20 "$APP" >/dev/null || stop_rc=$?
check "docker stop ends the container (rc $stop_rc)" [ "$stop_rc" = 0 ]
for _ in $(seq 50); do docker inspect "$APP" >/dev/null 2>&1 || break; sleep 0.2; done

ulog="$SMOKE_DIR/log/fakenet.jsonl"
vol=$(volume_path "$AUDIT")
# Every file of the log: the stream, its rotated files and the archives.
cat "$vol"/audit.jsonl* >"$SMOKE_DIR/audit.all" 2>/dev/null || die "no audit log in $vol"
audit="$SMOKE_DIR/audit.all"
check "upstream served the agent's request after the fill" grep -q '/agent-after-fill' "$ulog"
check "upstream served the exec'd request after the fill" grep -q '/exec-after-fill' "$ulog"
# One grep (a pipe into grep -q dies of SIGPIPE under pipefail once the log is long).
audited() { grep -q "\"path\":\"$1\",\"decision\":\"allow\"" "$audit"; }
check "the agent's request is audited as allowed" audited /agent-after-fill
check "the exec'd request is audited as allowed" audited /exec-after-fill

say "the audit log after the agent's flood (cap $AUDIT_CAP bytes)"
for i in 0 1 2 3 4; do
    check "early$i.test was refused (403): $(get "early$i")" [ "$(get "early$i")" = "403:1" ]
done
check "the 3,000 denials were refused: $(get flood)" [ "$(get flood)" = "403:3000" ]
check "the 600 allowed requests were served: $(get allowed_flood)" [ "$(get allowed_flood)" = "200:600" ]
bytes=$(du -cb "$vol"/audit.jsonl* | tail -1 | cut -f1)
check "the log's files stay within the cap: $bytes bytes" [ "$bytes" -le $((AUDIT_CAP + 65536)) ]
report=$(python3 - "$audit" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
print("early=" + ",".join(str(any(l.get("host") == f"early{i}.test" and l.get("decision") == "deny" for l in lines)) for i in range(5)))
rotated = [l for l in lines if l.get("event") == "rotated" and l.get("kind") == "audit"]
newest = max(rotated, key=lambda l: l["total"]["lines"], default=None)
print(f"rotated={len(rotated)}")
print(f"dropped_lines={newest['total']['lines'] if newest else 0}")
whole = sum(1 for l in lines if l.get("host") == "flood.test" and l.get("decision") == "deny" and l.get("event") is None)
folded = sum(l["count"] for l in lines if l.get("event") == "suppressed" and l.get("host") == "flood.test")
gone = 0
for e in (newest["total"]["dropped"] if newest else []):
    for h in e["hosts"]:
        if h["host"] == "flood.test":
            gone += h["folded"] if e["event"] == "suppressed" else h["lines"]
print(f"flood_accounted={whole + folded + gone}")
PY
)
aget() { sed -n "s/^$1=//p" <<<"$report" | head -1; }
check "each early first attempt is still in the log after the flood ($(aget early))" \
    [ "$(aget early)" = "True,True,True,True,True" ]
check "the log rotated and said what left ($(aget rotated) rotated lines, $(aget dropped_lines) lines dropped)" \
    [ "$(aget rotated)" -gt 0 ]
check "every denial to flood.test is a line, a count or counted as dropped ($(aget flood_accounted) of 3000)" \
    [ "$(aget flood_accounted)" = 3000 ]

if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output and entrypoint log (last 30 lines):"
    grep -v ' INFO ' "$SMOKE_DIR/app.log" | tail -30 >&2
    die "$SMOKE_FAILS check(s) failed"
fi
say "limits: all checks passed"
