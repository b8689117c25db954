#!/usr/bin/env bash
# End-to-end proof for Claude Code (issue 16 item 6, design §9): the real CLI in airlock:claude,
# started as the README says (scripts/docker-run REPO -- claude -p TASK
# --dangerously-skip-permissions, the profile's unattended form), against a scripted fake of
# the Anthropic Messages API (tests/smoke/fake_anthropic.py: SSE streaming, tool use) served
# on a private network under api.anthropic.com with a leaf of the smoke test CA, which the
# proxy trusts through AIRLOCK_UPSTREAM_CA (test configuration only). github.com is the
# fake forge of tests/smoke/git.sh (airlock-fakenet, which also answers DNS).
#
# The fake model: Write hello.py; Bash: run it, record the agent's ANTHROPIC_API_KEY, commit
# through the shim and push the sandbox branch; then "done". Asserts: the file and its output,
# the commit in the hidden .git and on the fake GitHub, the fake saw the real key on every
# request while the agent's environment held only the placeholder (and the real key is in no
# file, output or log the agent could write or read), every other destination the CLI tried
# was denied and audited, and tcpdump shows nothing else left the appliance.
# Usage: sudo tests/smoke/agent-claude.sh
source "$(dirname "$0")/lib.sh"
RIG=c
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

python3 - "$SMOKE_DIR" "$TOKEN" <<PY
import json, sys
d, token = sys.argv[1], sys.argv[2]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "https": [{"ip": "::", "port": 443, "names": ["github.com"]}],
    "dns": [{"ip": "::", "port": 53}],
    "zone": {"github.com": ["$UP4", "$UP6"], "api.anthropic.com": ["$API4", "$API6"]},
    "git": {"root": "/git", "host": "github.com", "token": token},
}, open(f"{d}/fakenet.json", "w"))
PY
chmod 0600 "$SMOKE_DIR/fakenet.json"
mkdir -p "$SMOKE_DIR/log" && chmod 0777 "$SMOKE_DIR/log"

# The model's script.
ident="GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid"
python3 - "$SMOKE_DIR/script.json" "$ident" "$BRANCH" <<'PY'
import json, sys
path, ident, branch = sys.argv[1:]
content = 'print("hello from the agent")\n'
json.dump([
    {"tool": "Write", "input": {"file_path": "/workspace/hello.py", "content": content},
     "shell": f"printf '%s' {json.dumps(content)} > /workspace/hello.py"},
    {"tool": "Bash", "input": {"command": (
        "cd /workspace && python3 hello.py > .smoke/run.out && printenv ANTHROPIC_API_KEY > .smoke/env-key; "
        f"git add hello.py && {ident} git commit -q -m 'agent: hello' && git push -q origin {branch}; "
        "echo status=$? > .smoke/bash.status"), "description": "run, commit, push"},
     "shell": ""},
    {"text": "Done: hello.py written, run, committed and pushed."},
], open(path, "w"))
PY
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); s[1]["shell"]=s[1]["input"]["command"]; json.dump(s, open(sys.argv[1],"w"))' "$SMOKE_DIR/script.json"
chmod 0644 "$SMOKE_DIR/script.json"

say "network $NET: github.com at $UP, api.anthropic.com at $API (the fake Messages API)"
track_network "$NET"
docker network create --internal --subnet 192.0.2.0/24 --gateway 192.0.2.1 \
    --ipv6 --subnet 2001:db8:192::/64 "$NET" >/dev/null
track_container "$UP"
docker run -d --name "$UP" --network "$NET" --ip "$UP4" --ip6 "$UP6" \
    -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR/fakenet.json:/cfg/fakenet.json:ro" \
    -v "$SMOKE_DIR/log:/log" -v "$gitroot:/git" \
    airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
track_container "$API"
docker run -d --name "$API" --network "$NET" --ip "$API4" --ip6 "$API6" --entrypoint python3 \
    -v "$SMOKE_ROOT/tests/smoke/fake_anthropic.py:/fake.py:ro" -v "$SMOKE_DIR:/d:ro" -v "$SMOKE_DIR/log:/log" \
    "$IMAGE" -u /fake.py /d/api.pem /d/api.key /d/script.json /log/anthropic.jsonl >/dev/null
for c in "$UP" "$API"; do
    for _ in $(seq 50); do docker logs "$c" 2>/dev/null | grep -q ready && break; sleep 0.1; done
    docker logs "$c" 2>/dev/null | grep -q ready || die "$c did not start: $(docker logs "$c" 2>&1 | tail -3)"
done

BR=$(bridge_of "$NET")
tcpdump -i "$BR" -nn -U --immediate-mode -w "$SMOKE_DIR/wire.pcap" 2>"$SMOKE_DIR/tcpdump.err" &
tcpdump_pid=$!
track_pid "$tcpdump_pid"
for _ in $(seq 50); do grep -q listening "$SMOKE_DIR/tcpdump.err" && break; sleep 0.1; done
grep -q listening "$SMOKE_DIR/tcpdump.err" || die "tcpdump did not start on $BR"
say "set-up $(ms "$T0") ms"

TASK="Write hello.py that prints a greeting, run it, commit it and push the branch."
mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command claude unattended "$TASK")
say "starting: scripts/docker-run REPO -- ${cmd[*]}"
track_volume "$AUDIT"
track_container "$APP"
t0=$(date +%s%N)
rc=0
ANTHROPIC_API_KEY=$KEY AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$IMAGE AIRLOCK_POLICY=$SMOKE_DIR/policy.toml \
AIRLOCK_AUDIT_VOLUME=$AUDIT GITHUB_TOKEN_FILE=$SMOKE_DIR/github_token \
AIRLOCK_DOCKER_ARGS="--name $APP --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4 -e ANTHROPIC_API_KEY -v $SMOKE_DIR/ca.pem:/etc/ssl/fakenet-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/fakenet-ca.pem" \
    timeout 300 "$SMOKE_ROOT/scripts/docker-run" "$repo" -- "${cmd[@]}" \
    >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" || rc=$?
session_ms=$(ms "$t0")
sleep 0.5
kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true

alog=$SMOKE_DIR/log/anthropic.jsonl
touch "$alog"
audit="$(volume_path "$AUDIT")/audit.jsonl"
say "the agent (status $rc, $session_ms ms): $(tr '\n' ' ' <"$SMOKE_DIR/agent.out" | cut -c1-200)"
check "claude exited 0" [ "$rc" = 0 ]
check "the fake model was asked $(grep -c '"/v1/messages' "$alog" || true) time(s), reached the last step" \
    grep -q '"step": 2' "$alog"
check "hello.py as the model wrote it" [ "$(cat "$repo/hello.py" 2>/dev/null)" = 'print("hello from the agent")' ]
check "the agent ran it ($(cat "$repo/.smoke/run.out" 2>/dev/null))" [ "$(cat "$repo/.smoke/run.out" 2>/dev/null)" = "hello from the agent" ]
check "the shell step finished ($(cat "$repo/.smoke/bash.status" 2>/dev/null))" [ "$(cat "$repo/.smoke/bash.status" 2>/dev/null)" = status=0 ]
head=$(hostgit --git-dir "$repo/.git" rev-parse -q --verify "refs/heads/$BRANCH" || true)
committed() {
    [ "$head" != "$main" ] && [ "$(hostgit --git-dir "$repo/.git" log -1 --format=%s "$head")" = "agent: hello" ] &&
        [ "$(hostgit --git-dir "$repo/.git" show "$head:hello.py")" = 'print("hello from the agent")' ]
}
check "a commit 'agent: hello' with hello.py in the hidden .git ($head)" committed
upref=$(git --git-dir "$upstream" rev-parse --verify -q "refs/heads/$BRANCH" || true)
check "the push landed on the fake GitHub ($upref)" [ -n "$head" ] && [ "$upref" = "$head" ]
check "upstream main unchanged" [ "$(git --git-dir "$upstream" rev-parse main)" = "$main" ]

say "the key"
placeholder=$(cat "$repo/.smoke/env-key" 2>/dev/null || true)
check "the agent's ANTHROPIC_API_KEY is a placeholder (${placeholder:0:24}...)" \
    bash -c "[ -n '$placeholder' ] && [ '$placeholder' != '$KEY' ]"
msgs=$(grep -c '"path": "/v1/messages' "$alog" || true)
real=$(grep '"path": "/v1/messages' "$alog" | grep -cF "\"x-api-key\": \"$KEY\"" || true)
check "the fake saw the real key on every Messages request ($real of $msgs)" [ "$msgs" -gt 0 ] && [ "$real" = "$msgs" ]
check "the fake never saw the placeholder" bash -c "[ -n '$placeholder' ] && ! grep -qF '$placeholder' '$alog'"
check "the real key is in no workspace file" bash -c "! grep -raqF '$KEY' '$repo' --exclude-dir=.git"
check "the real key is in the hidden .git nowhere" bash -c "! grep -raqF '$KEY' '$repo/.git'"
check "the real key is in none of the agent's output" bash -c "! grep -aqF '$KEY' '$SMOKE_DIR/agent.out'"
check "the real key is in no log (container stderr, audit)" bash -c "! grep -aqF '$KEY' '$SMOKE_DIR/agent.err' '$audit'"

say "other destinations"
others=$(python3 - "$audit" <<'PY'
import json, sys
seen = {}
for l in open(sys.argv[1]):
    if l.strip():
        r = json.loads(l)
        h = r.get("host")
        if h and h not in ("api.anthropic.com", "github.com"):
            seen.setdefault(f"{h}:{r.get('port')}", set()).add(f"{r.get('decision')}/{r.get('reason')}")
print(" ".join(f"{h}={','.join(sorted(v))}" for h, v in sorted(seen.items())))
PY
)
say "destinations besides the two allowed (the entrypoint's self-test probes included): ${others:-none}"
all_denied() { for o in $others; do grep -q '=deny/' <<<"$o" && ! grep -q 'allow' <<<"$o" || return 1; done; }
check "every other destination the CLI tried was denied and audited" all_denied
paths=$(python3 -c 'import json,sys; print(" ".join(sorted({json.loads(l)["method"]+" "+json.loads(l)["path"].split("?")[0] for l in open(sys.argv[1]) if l.strip()})))' "$alog")
say "paths the CLI asked api.anthropic.com for: $paths"

say "wire (tcpdump on $BR)"
tcpdump -nn -r "$SMOKE_DIR/wire.pcap" 2>/dev/null >"$SMOKE_DIR/wire.txt"
if python3 "$SMOKE_ROOT/tests/smoke/wire_check.py" "$audit" api.anthropic.com,github.com "$APP4" "$APP6" \
    <"$SMOKE_DIR/wire.txt"; then
    pass "every packet from the appliance is the proxy's, an allowed DNS query or housekeeping"
else
    fail "a packet left the appliance that the proxy did not send"
fi

first=$(python3 - "$audit" "$t0" <<'PY'
import json, sys, datetime
t0 = int(sys.argv[2]) / 1e9
for l in open(sys.argv[1]):
    r = json.loads(l) if l.strip() else {}
    if r.get("host") == "api.anthropic.com" and r.get("uid") == 1000:
        ts = datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
        print(int((ts - t0) * 1000)); break
PY
)
say "timing: docker run -> the agent's first request to api.anthropic.com ${first:-?} ms (benchmark, target <= 2000);" \
    "session $session_ms ms; test total $(ms "$T0") ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent stdout:"; tail -20 "$SMOKE_DIR/agent.out" >&2
    say "container stderr (last 30 lines):"; grep -v ' INFO ' "$SMOKE_DIR/agent.err" | tail -30 >&2
    say "fake API log:"; cut -c1-300 "$alog" | tail -20 >&2
    say "audit denials:"; grep '"decision":"deny"' "$audit" | tail -10 >&2
    die "$SMOKE_FAILS check(s) failed"
fi
say "claude end to end: all checks passed"
