#!/usr/bin/env bash
# Docker smoke test: the operator's admin API on a sandbox the `airlock` CLI started (issue
# 41 item 3). As the operator on the host, through the socket in the sandbox's control
# directory: status, counters, metrics, a live event stream that shows the agent's denial,
# and a policy reload that changes the next decision (a broken text refused, the revision
# kept). As the agent, through every path it has: the socket's path, the root-only parent,
# the proxy's /proc entries, PID 1's root, its own descriptors, and every Unix socket the
# kernel lists: nothing reaches the API. A restart of the proxy keeps the socket served and
# resumes the revision loaded before.
# Usage: sudo tests/smoke/admin-api.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

SB=${SMOKE_ID#airlock-}-admin

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
(cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-cli) || die "cannot build the airlock CLI"
dir=${CARGO_TARGET_DIR:-target}
case $dir in /*) ;; *) dir=$SMOKE_ROOT/$dir ;; esac
airlock() {
    AIRLOCK_DATA_DIR=$SMOKE_DIR/data AIRLOCK_CONFIG_DIR=$SMOKE_DIR/config \
        "$dir/debug/airlock" --image "$SMOKE_IMAGE" "$@"
}
command -v curl >/dev/null || die "curl is required (scripts/install-test-deps)"

printf '[sandbox]\nname = "admin"\n\n[network]\nallow = ["allowed.test"]\n' >"$SMOKE_DIR/policy.toml"
chmod 0644 "$SMOKE_DIR/policy.toml"
mkdir -p "$SMOKE_DIR/repo"
git -C "$SMOKE_DIR/repo" init -q -b main
git -C "$SMOKE_DIR/repo" -c user.name=o -c user.email=o@example.invalid commit -q --allow-empty -m base

say "airlock new $SB"
track_container "airlock-$SB"
airlock new "$SB" --repo "$SMOKE_DIR/repo" --policy "$SMOKE_DIR/policy.toml" -- sleep 3600 \
    >"$SMOKE_DIR/new.out" 2>&1 || die "airlock new failed: $(tail -5 "$SMOKE_DIR/new.out")"
sock=$SMOKE_DIR/data/sandboxes/$SB/control/admin.sock
audit=$SMOKE_DIR/data/sandboxes/$SB/audit/audit.jsonl
api() { curl -sS --max-time 10 --unix-socket "$sock" "$@"; }

say "the operator, on the host"
check "the socket is in the sandbox's control directory" test -S "$sock"
check "the socket is 0600" [ "$(stat -c %a "$sock")" = 600 ]
status=$(api http://airlock/v1/status)
check "status: ready ($status)" grep -q '"state":"ready"' <<<"$status"
check "policy: revision 1" grep -q '"revision":1' <<<"$(api http://airlock/v1/policy)"

# A follower attached before the agent's denial sees it.
api -N "http://airlock/v1/events?follow=true&decision=deny" >"$SMOKE_DIR/events.out" 2>&1 &
follower=$!
track_pid "$follower"
sleep 0.5

attack=$(cat <<'SH'
S=/run/airlock/operator/control/admin.sock
curl -sS --max-time 5 -o /dev/null -w '%{http_code}' http://denied.test/ >/dev/null 2>&1
ls /run/airlock/operator >/dev/null 2>&1; echo "list=$?"
test -e "$S"; echo "see=$?"
curl -sS --max-time 5 --unix-socket "$S" http://airlock/v1/counters >/dev/null 2>&1; echo "connect=$?"
curl -sS --max-time 5 --unix-socket /proc/1/root$S http://airlock/v1/counters >/dev/null 2>&1; echo "via_pid1_root=$?"
proxy=$(pgrep -x airlock-proxy | head -1)
echo "proxy_pid=${proxy:-none}"
ls /proc/$proxy/fd >/dev/null 2>&1; echo "proxy_fds=$?"
curl -sS --max-time 5 --unix-socket /proc/$proxy/root$S http://airlock/v1/counters >/dev/null 2>&1; echo "via_proxy_root=$?"
# Every Unix socket path the kernel lists, tried.
reached=0
for p in $(awk 'NR>1 && $8 != "" {print $8}' /proc/net/unix | sort -u); do
    if curl -sS --max-time 2 --unix-socket "$p" http://airlock/v1/counters 2>/dev/null | grep -q '"kind":"counters"'; then
        reached=1; echo "reached_via=$p"
    fi
done
echo "listed_reached=$reached"
# Its own descriptors: no socket of the API among them.
own=0
for fd in /proc/self/fd/*; do
    case $(readlink "$fd") in socket:*) own=$((own + 1));; esac
done
echo "own_sockets=$own"
echo "id=$(id -u)"
SH
)
airlock exec "$SB" -- bash -c "$attack" >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" || true
out=$(cat "$SMOKE_DIR/agent.out")
get() { sed -n "s/^$1=//p" <<<"$out" | head -1; }
[ -n "$(get id)" ] || { cat "$SMOKE_DIR/agent.err" >&2; die "the agent's session never ran"; }

say "the agent, through every path it has (uid $(get id))"
nonzero() { local v; v=$(get "$1"); [ -n "$v" ] && [ "$v" != 0 ]; }
check "cannot list the operator directory ($(get list))" nonzero list
check "cannot even see the socket's path ($(get see))" nonzero see
check "cannot connect by the path ($(get connect))" nonzero connect
check "cannot connect through PID 1's root ($(get via_pid1_root))" nonzero via_pid1_root
check "cannot list the proxy's descriptors ($(get proxy_fds))" nonzero proxy_fds
check "cannot connect through the proxy's root ($(get via_proxy_root))" nonzero via_proxy_root
check "no socket the kernel lists answers it ($(get listed_reached) $(get reached_via))" [ "$(get listed_reached)" = 0 ]
check "holds no socket descriptor ($(get own_sockets))" [ "$(get own_sockets)" = 0 ]

sleep 0.5
kill "$follower" 2>/dev/null || true
wait "$follower" 2>/dev/null || true
check "the follower saw the agent's denial" grep -q '"host":"denied.test"' "$SMOKE_DIR/events.out"
counters=$(api http://airlock/v1/counters)
check "counters count it ($counters)" grep -q '"blocked-by-policy":[1-9]' <<<"$counters"
metrics=$(api http://airlock/metrics)
check "metrics: denials by reason" grep -q 'airlock_denials_total{reason="blocked-by-policy"}' <<<"$metrics"

say "policy reload"
broken=$(python3 -c 'import json; print(json.dumps({"text": "[sandbox]\nname = \"admin\"\n[network\n", "origin": "/host/broken.toml"}))')
resp=$(api -X POST -d "$broken" http://airlock/v1/policy/reload)
check "a broken text is refused with its line ($resp)" grep -q '/host/broken.toml:3' <<<"$resp"
check "the revision stays 1" grep -q '"revision":1' <<<"$(api http://airlock/v1/policy)"
new=$(python3 -c 'import json; print(json.dumps({"text": "[sandbox]\nname = \"admin\"\n\n[network]\nallow = [\"allowed.test\", \"denied.test\"]\n", "origin": "/host/policy.toml"}))')
resp=$(api -X POST -d "$new" http://airlock/v1/policy/reload)
check "the new revision is loaded ($resp)" grep -q '"revision":2' <<<"$resp"
airlock exec "$SB" -- curl -sS --max-time 10 -o /dev/null http://denied.test/ >/dev/null 2>&1 || true
sleep 0.3
check "the audit log has the reload line before the new decision" python3 - "$audit" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
r = [i for i, l in enumerate(lines) if l.get("event") == "reload" and l.get("revision") == 2]
after = [l for l in lines[r[0]:] if l.get("host") == "denied.test"] if r else []
sys.exit(0 if r and after and all(l.get("reason") != "blocked-by-policy" for l in after) else 1)
PY

say "a restart of the proxy keeps the socket served"
docker exec "airlock-$SB" pkill -x airlock-proxy || true
ok=0
for _ in $(seq 1 50); do
    if api http://airlock/v1/counters 2>/dev/null | grep -q '"kind":"counters"'; then ok=1; break; fi
    sleep 0.1
done
check "the restarted proxy answers on the same socket" [ "$ok" = 1 ]
check "and resumes the revision loaded before (2)" grep -q '"revision":2' <<<"$(api http://airlock/v1/policy)"
airlock exec "$SB" -- curl -sS --max-time 10 -o /dev/null http://denied.test/ >/dev/null 2>&1 || true
sleep 0.3
check "under which denied.test is still allowed" python3 - "$audit" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = [l for l in lines if l.get("host") == "denied.test"][-1]
sys.exit(0 if last.get("reason") != "blocked-by-policy" else 1)
PY

if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; cat "$SMOKE_DIR/agent.out" "$SMOKE_DIR/agent.err" >&2
    say "events:"; cat "$SMOKE_DIR/events.out" >&2
    say "sandbox log (last 30 lines):"; airlock logs "$SB" --tail 30 >&2 || true
    die "$SMOKE_FAILS check(s) failed"
fi
airlock destroy "$SB" --force >/dev/null || die "airlock destroy $SB failed"
say "admin-api: all checks passed"
