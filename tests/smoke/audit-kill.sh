#!/usr/bin/env bash
# Docker smoke test: records written before the answer survive kill -9 (issue 13 item 1).
# Started exactly as docs/docker.md says (scripts/docker-run) in front of a fake upstream,
# the agent makes back-to-back plain-HTTP requests through the proxy for 10 s, each to a
# path of its own, while the host kill -9s the proxy inside the container 4 times (PID 1
# restarts it). Then, with the container still running (nothing flushed by a clean stop):
#   - every request the upstream served (its own log) has a line in audit.jsonl;
#   - every 200 the client saw was served upstream, and the upstream served no more than
#     those, save at most one request per kill cut between the upstream's answer and the
#     client (the client saw it fail);
#   - the proxy was killed 4 times and came back each time.
# Before item 1, records were batched after the answer: 747 of 750 served requests were
# audited, each missing one served a few ms before a kill.
# Usage: sudo tests/smoke/audit-kill.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

NET=$SMOKE_ID-knet
UP=$SMOKE_ID-kup
APP=$SMOKE_ID-kapp
AUDIT=$SMOKE_ID-kaudit
APP4=203.0.113.194
UP4=203.0.113.200
RUN_SECS=10
KILLS=4

for tool in docker pgrep python3; do command -v "$tool" >/dev/null || die "$tool is required"; done
[ "$(id -u)" = 0 ] || die "root is needed (the audit volume and the proxy's pid on the host)"
[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
docker image inspect "$SMOKE_IMAGE" >/dev/null 2>&1 || die "no image $SMOKE_IMAGE"
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"

python3 - "$SMOKE_DIR" <<PY
import json, sys
d = sys.argv[1]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "http": [{"ip": "0.0.0.0", "port": 80}],
    "dns": [{"ip": "0.0.0.0", "port": 53}],
    "zone": {"allowed.test": ["$UP4"]},
}, open(f"{d}/fakenet.json", "w"))
PY
cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke-audit-kill"
[network]
allow = ["allowed.test"]
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"
mkdir -p "$SMOKE_DIR/log" "$SMOKE_DIR/repo"
chown 1000:1000 "$SMOKE_DIR/repo"

smoke_fakenet_up "$fakenet" "$NET" 203.0.113.192/26 203.0.113.193 "$UP" "$UP4"

# The agent: one curl per batch of 50 URLs (keep-alive to the proxy; a transfer that fails
# does not stop the next), one line per request: URL and status (000: it failed).
cat >"$SMOKE_DIR/repo/requests.sh" <<SH
out=/workspace/results.txt
: >"\$out"
date +%s%N >/workspace/started
end=\$((\$(date +%s) + $RUN_SECS))
b=0
while [ "\$(date +%s)" -lt "\$end" ]; do
    b=\$((b + 1))
    args=()
    for i in \$(seq 50); do args+=(-o /dev/null "http://allowed.test/kill-\$b-\$i"); done
    curl -sS --max-time 5 -w '%{url_effective} %{http_code}\n' "\${args[@]}" >>"\$out" 2>/dev/null || true
done
echo done >/workspace/finished
exec sleep 600
SH
chmod 0755 "$SMOKE_DIR/repo/requests.sh"

say "starting the appliance (scripts/docker-run); the agent requests for $RUN_SECS s"
track_volume "$AUDIT"
track_container "$APP"
AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$SMOKE_IMAGE AIRLOCK_POLICY=$SMOKE_DIR/policy.toml \
AIRLOCK_AUDIT_VOLUME=$AUDIT \
AIRLOCK_DOCKER_ARGS="-d --name $APP --network $NET --ip $APP4 --dns $UP4" \
    "$SMOKE_ROOT/scripts/docker-run" "$SMOKE_DIR/repo" -- bash /workspace/requests.sh >/dev/null ||
    die "docker run failed"
for _ in $(seq 300); do [ -s "$SMOKE_DIR/repo/started" ] && break; sleep 0.1; done
[ -s "$SMOKE_DIR/repo/started" ] || die "the agent did not start in 30 s: $(docker logs "$APP" 2>&1 | tail -5)"
init=$(docker inspect -f '{{.State.Pid}}' "$APP")

proxy_pid() { pgrep -x airlock-proxy --ns "$init" --nslist pid | head -1 || true; }
# kill -9 the proxy from the host, then wait (5 s) for PID 1 to start a new one.
killed=0 restarted=0
for k in $(seq "$KILLS"); do
    sleep 2
    pid=$(proxy_pid)
    [ -n "$pid" ] || { fail "no proxy process to kill (kill $k)"; continue; }
    kill -9 "$pid" && killed=$((killed + 1))
    new=
    for _ in $(seq 50); do
        new=$(proxy_pid)
        [ -n "$new" ] && [ "$new" != "$pid" ] && { restarted=$((restarted + 1)); break; }
        sleep 0.1
    done
    say "kill $k: proxy $pid killed, now ${new:-none}"
done
for _ in $(seq 300); do [ -e "$SMOKE_DIR/repo/finished" ] && break; sleep 0.1; done
[ -e "$SMOKE_DIR/repo/finished" ] || die "the agent did not finish: $(docker logs "$APP" 2>&1 | tail -5)"

# Read the log while the container runs: what a clean stop would flush does not count.
vol=$(volume_path "$AUDIT")
cat "$vol"/audit.jsonl* >"$SMOKE_DIR/audit.snapshot" 2>/dev/null || die "no audit log in $vol"
all_killed() { [ "$killed" = "$KILLS" ] && [ "$restarted" = "$KILLS" ]; }
check "the proxy was killed $KILLS times ($killed) and restarted each time ($restarted)" all_killed

report=$(python3 - "$SMOKE_DIR/log/fakenet.jsonl" "$SMOKE_DIR/audit.snapshot" \
    "$SMOKE_DIR/repo/results.txt" <<'PY'
import json, sys
def lines(path):
    for l in open(path, errors="replace"):
        try:
            yield json.loads(l)
        except ValueError:
            pass
served = {l["path"] for l in lines(sys.argv[1])
          if l.get("kind") == "http" and str(l.get("path", "")).startswith("/kill-")}
mine = [l for l in lines(sys.argv[2]) if str(l.get("path") or "").startswith("/kill-")]
audited = {l["path"] for l in mine}
final = {l["path"] for l in mine if l.get("event") != "open"}
client = {}
for l in open(sys.argv[3]):
    url, _, code = l.strip().rpartition(" ")
    client["/" + url.split("/", 3)[-1]] = code
ok = {p for p, c in client.items() if c == "200"}
failed = {p for p, c in client.items() if c != "200"}
print(f"served={len(served)}")
print(f"client_200={len(ok)}")
print(f"client_failed={len(failed)}")
print(f"unaudited={len(served - audited)}")
print(f"unaudited_paths={' '.join(sorted(served - audited)[:5])}")
print(f"final_lost={len(served - final)}")
print(f"ok_not_served={len(ok - served)}")
print(f"served_not_ok={len(served - ok)}")
print(f"served_not_ok_nor_failed={len(served - ok - failed)}")
PY
)
get() { sed -n "s/^$1=//p" <<<"$report" | head -1; }
say "upstream served $(get served) requests; the client saw $(get client_200) x 200 and $(get client_failed) failures"
# Only the open lines are written before the answer; the final lines of the last moments
# before each kill die with the process. Their count shows the kills landed mid-traffic.
say "served requests whose final line died with a killed proxy: $(get final_lost) (their open lines hold the record)"
enough() { [ "$(get served)" -ge 200 ]; }
check "the agent made back-to-back requests ($(get served) served, at least 200)" enough
check "every request the upstream served has an audit line ($(get unaudited) missing $(get unaudited_paths))" \
    [ "$(get unaudited)" = 0 ]
check "every 200 the client saw was served upstream ($(get ok_not_served) not)" [ "$(get ok_not_served)" = 0 ]
cut_in_flight() {
    local n
    n=$(get served_not_ok)
    [ "$(get served_not_ok_nor_failed)" = 0 ] && [ "$n" -le "$KILLS" ]
}
check "the client's 200s match the upstream's count, save requests cut by a kill ($(get served_not_ok))" \
    cut_in_flight

docker logs "$APP" >"$SMOKE_DIR/app.log" 2>&1 || true
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "report:"; echo "$report" >&2
    say "entrypoint log (last 20 lines but INFO):"; grep -v ' INFO ' "$SMOKE_DIR/app.log" | tail -20 >&2
    die "$SMOKE_FAILS check(s) failed"
fi
say "audit-kill: all checks passed"
