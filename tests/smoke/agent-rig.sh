# The rig the agent tests share (sourced, after lib.sh): names, addresses, the smoke CA and
# leaves, the policy. Set before sourcing: RIG (a letter that keeps this test's Docker names
# apart), RIG_GIT_EXTRA (extra lines for the policy's [git] table, or empty) and RIG_AGENT
# (claude, the default, codex or aider: the image, the provider's host, key and preset).
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

RIG_AGENT=${RIG_AGENT:-claude}
case $RIG_AGENT in
claude)
    IMAGE=${AIRLOCK_CLAUDE_IMAGE:-airlock:claude}
    API_HOST=api.anthropic.com PRESET=anthropic KEY_VAR=ANTHROPIC_API_KEY
    KEY_HEADER=x-api-key KEY_FORMAT=
    KEY=sk-ant-api03-SMOKEKEY$RANDOM$RANDOM$RANDOM
    ;;
codex | aider)
    IMAGE=airlock:$RIG_AGENT
    API_HOST=api.openai.com PRESET=openai KEY_VAR=OPENAI_API_KEY
    KEY_HEADER=authorization KEY_FORMAT="Bearer "
    KEY=sk-proj-SMOKEKEY$RANDOM$RANDOM$RANDOM$RANDOM
    ;;
*) die "agent-rig: no rig for agent $RIG_AGENT" ;;
esac
NET=$SMOKE_ID-${RIG}net
UP=$SMOKE_ID-${RIG}up
API=$SMOKE_ID-${RIG}api
APP=$SMOKE_ID-${RIG}app
AUDIT=$SMOKE_ID-${RIG}audit
APP4=192.0.2.2
APP6=2001:db8:192::2
UP4=192.0.2.10
UP6=2001:db8:192::10
API4=192.0.2.20
API6=2001:db8:192::20
OWNER=acme
NAME=app
BRANCH=sandbox/smoke/work
TOKEN=ghp_SMOKETOKEN$RANDOM$RANDOM$RANDOM

docker image inspect "$IMAGE" >/dev/null 2>&1 || die "$IMAGE is missing: run scripts/build-agent-image $RIG_AGENT"
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"
# The leaf the fake API serves: the provider's host, signed by the test CA.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$API_HOST" \
    -keyout "$SMOKE_DIR/api.key" -out "$SMOKE_DIR/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$API_HOST" >"$SMOKE_DIR/api.ext"
openssl x509 -req -in "$SMOKE_DIR/api.csr" -CA "$SMOKE_DIR/ca.pem" -CAkey "$SMOKE_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$SMOKE_DIR/api.ext" -out "$SMOKE_DIR/api.pem" 2>/dev/null ||
    die "cannot sign the $API_HOST leaf"
chmod 0644 "$SMOKE_DIR/api.pem" "$SMOKE_DIR/api.key"

# The forge (as tests/smoke/git.sh): github.com/acme/app with main; the hook logs ref updates.
gitroot=$SMOKE_DIR/gitroot
upstream=$gitroot/$OWNER/$NAME.git
hooks_log=$gitroot/hooks.log
hostgit() { git -c safe.directory='*' -c user.name=seed -c user.email=seed@example.invalid "$@"; }
mkdir -p "$upstream"
hostgit -C "$upstream" init -q --bare -b main
repo=$SMOKE_DIR/repo
hostgit clone -q "file://$upstream" "$repo" 2>/dev/null
echo "# app" >"$repo/README.md"
hostgit -C "$repo" add -A
hostgit -C "$repo" commit -q -m seed
hostgit -C "$repo" push -q origin main
main=$(hostgit -C "$repo" rev-parse main)
cat >"$upstream/hooks/pre-receive" <<SH
#!/bin/sh
while read old new ref; do echo "$OWNER/$NAME \$old \$new \$ref" >> /git/hooks.log; done
SH
chmod 0755 "$upstream/hooks/pre-receive"
: >"$hooks_log"
chmod 0666 "$hooks_log"
hostgit -C "$repo" remote set-url origin "https://github.com/$OWNER/$NAME.git"
hostgit -C "$repo" checkout -q -b "$BRANCH"
printf '/.smoke/\n' >>"$repo/.git/info/exclude"
mkdir -p "$repo/.smoke"
chown -R 1000:1000 "$repo"

echo -n "$TOKEN" >"$SMOKE_DIR/github_token"
chmod 0400 "$SMOKE_DIR/github_token"
cat >"$SMOKE_DIR/policy.toml" <<TOML
[sandbox]
name = "smoke"

[network]
allow = ["$API_HOST", "github.com"]
writable = ["$API_HOST"]

[[credentials]]
preset = "$PRESET"
source = { env = "$KEY_VAR" }

[[credentials]]
preset = "github"
source = { file = "/run/secrets/github_token" }

[git]
repositories = ["github.com/$OWNER/$NAME"]
$RIG_GIT_EXTRA
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"

# --- Shared steps of the agent tests (agent-claude.sh, agent-codex.sh, agent-aider.sh) ----

# rig_start FAKE.py: the private network, the fake forge and DNS (airlock-fakenet), the fake
# provider API (FAKE.py SCRIPT, run in the agent image's python) under $API_HOST (or the
# names in $RIG_API_NAMES), tcpdump on the bridge. The model's script must be in $SMOKE_DIR/script.json; the fake logs to $alog.
rig_start() {
    local fake=$1 c
    python3 - "$SMOKE_DIR" "$TOKEN" "${RIG_API_NAMES:-$API_HOST}" "$UP4" "$UP6" "$API4" "$API6" <<'PY'
import json, sys
d, token, names, up4, up6, api4, api6 = sys.argv[1:]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "https": [{"ip": "::", "port": 443, "names": ["github.com"]}],
    "dns": [{"ip": "::", "port": 53}],
    "zone": {"github.com": [up4, up6], **{n: [api4, api6] for n in names.split()}},
    "git": {"root": "/git", "host": "github.com", "token": token},
}, open(f"{d}/fakenet.json", "w"))
PY
    chmod 0600 "$SMOKE_DIR/fakenet.json"
    mkdir -p "$SMOKE_DIR/log" && chmod 0777 "$SMOKE_DIR/log"
    chmod 0644 "$SMOKE_DIR/script.json"
    alog=$SMOKE_DIR/log/api.jsonl
    say "network $NET: github.com at $UP, $API_HOST at $API ($(basename "$fake"))"
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
        -v "$fake:/fake.py:ro" -v "$SMOKE_DIR:/d:ro" -v "$SMOKE_DIR/log:/log" \
        "$IMAGE" -u /fake.py /d/api.pem /d/api.key /d/script.json /log/api.jsonl >/dev/null
    for c in "$UP" "$API"; do
        smoke_wait_ready "$c"
    done
    smoke_capture "$NET"
    say "set-up $(ms "$T0") ms"
}

# The environment scripts/docker-run starts the agent with: the real key in $KEY_VAR, the
# rig's policy, network, names and addresses, the smoke CA for the proxy's upstreams.
RIG_ENV=("$KEY_VAR=$KEY" AIRLOCK_NO_BUILD=1 "AIRLOCK_IMAGE=$IMAGE" "AIRLOCK_POLICY=$SMOKE_DIR/policy.toml"
    "AIRLOCK_AUDIT_VOLUME=$AUDIT" "GITHUB_TOKEN_FILE=$SMOKE_DIR/github_token"
    "AIRLOCK_DOCKER_ARGS=--name $APP --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4 -e $KEY_VAR -v $SMOKE_DIR/ca.pem:/etc/ssl/fakenet-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/fakenet-ca.pem")

# rig_run CMD...: the agent, started as docs/agents.md says (scripts/docker-run REPO -- CMD),
# on the rig's network with the real key in $KEY_VAR; stdout/stderr in agent.out/agent.err,
# its status in $rc, the time in $session_ms (from $t0).
rig_run() {
    say "starting: scripts/docker-run REPO -- $*"
    track_volume "$AUDIT"
    track_container "$APP"
    t0=$(date +%s%N)
    rc=0
    env "${RIG_ENV[@]}" timeout 300 "$SMOKE_ROOT/scripts/docker-run" "$repo" -- "$@" \
        >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" || rc=$?
    session_ms=$(ms "$t0")
    sleep 0.5
    kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
    touch "$alog"
    audit="$(volume_path "$AUDIT")/audit.jsonl"
    say "the agent (status $rc, $session_ms ms): $(tr '\n' ' ' <"$SMOKE_DIR/agent.out" | cut -c1-300)"
}

# rig_task_checks: the scripted task of the claude and codex tests was done: hello.py as the
# model wrote it, the agent ran it, its shell step (commit and push) finished.
rig_task_checks() {
    check "hello.py as the model wrote it" [ "$(cat "$repo/hello.py" 2>/dev/null)" = 'print("hello from the agent")' ]
    check "the agent ran it ($(cat "$repo/.smoke/run.out" 2>/dev/null))" [ "$(cat "$repo/.smoke/run.out" 2>/dev/null)" = "hello from the agent" ]
    check "the shell step finished ($(cat "$repo/.smoke/bash.status" 2>/dev/null))" [ "$(cat "$repo/.smoke/bash.status" 2>/dev/null)" = status=0 ]
}

# rig_git_checks FILE CONTENT SUBJECT: the commit SUBJECT with FILE = CONTENT in the hidden
# .git on the sandbox branch, pushed to the fake GitHub; main untouched.
rig_git_checks() {
    local file=$1 content=$2 subject=$3
    head=$(hostgit --git-dir "$repo/.git" rev-parse -q --verify "refs/heads/$BRANCH" || true)
    check "a commit '$subject' with $file in the hidden .git ($head)" eval \
        '[ -n "$head" ] && [ "$head" != "$main" ] &&
        hostgit --git-dir "$repo/.git" log --format=%s "$main..$head" | grep -qxF "$subject" &&
        [ "$(hostgit --git-dir "$repo/.git" show "$head:$file")" = "$content" ]'
    upref=$(git --git-dir "$upstream" rev-parse --verify -q "refs/heads/$BRANCH" || true)
    check "the push landed on the fake GitHub ($upref)" eval '[ -n "$head" ] && [ "$upref" = "$head" ]'
    check "upstream main unchanged" [ "$(git --git-dir "$upstream" rev-parse main)" = "$main" ]
}

# rig_key_checks PATH-RE PLACEHOLDER: the fake saw the real key on every request to PATH-RE,
# never the placeholder; the real key is in no file, output or log the agent could reach.
rig_key_checks() {
    local path_re=$1 placeholder=$2
    say "the key"
    check "the agent's $KEY_VAR is a placeholder (${placeholder:0:24}...)" \
        bash -c "[ -n '$placeholder' ] && [ '$placeholder' != '$KEY' ]"
    n=$(grep -cE "\"path\": \"$path_re" "$alog" || true)
    real=$(grep -E "\"path\": \"$path_re" "$alog" | grep -cF "\"$KEY_HEADER\": \"$KEY_FORMAT$KEY\"" || true)
    check "the fake saw the real key on every model request ($real of $n)" eval '[ "$n" -gt 0 ] && [ "$real" = "$n" ]'
    check "the fake never saw the placeholder" bash -c "[ -n '$placeholder' ] && ! grep -qF '$placeholder' '$alog'"
    check "the real key is in no workspace file" bash -c "! grep -raqF '$KEY' '$repo' --exclude-dir=.git"
    check "the real key is in the hidden .git nowhere" bash -c "! grep -raqF '$KEY' '$repo/.git'"
    check "the real key is in none of the agent's output" bash -c "! grep -aqF '$KEY' '$SMOKE_DIR/agent.out'"
    check "the real key is in no log (container stderr, audit, airlock.log)" \
        bash -c "! grep -saqF '$KEY' '$SMOKE_DIR/agent.err' '$audit' '$(dirname "$audit")/airlock.log'"
}

# The sandbox's brief (issue 42): the agent's wrapper put the proxy's /v1/brief where the
# CLI reads its instructions, and the CLI sent it to the model (the fake marks each request
# whose body holds it).
rig_brief_checks() {
    check "the CLI read the sandbox's brief: $(grep -c '"brief": true' "$alog" || true) request(s) to the model carried it" \
        grep -q '"brief": true' "$alog"
}

# rig_net_checks: every destination besides $API_HOST and github.com was denied and audited,
# tcpdump saw nothing leave that the proxy did not send; the timing benchmark; on failure
# the agent's output, the container's stderr, the fake's log and the denials.
rig_net_checks() {
    say "other destinations"
    local names=${RIG_API_NAMES:-$API_HOST}
    others=$(python3 - "$audit" "$names" <<'PY'
import json, sys
seen = {}
for l in open(sys.argv[1]):
    if l.strip():
        r = json.loads(l)
        h = r.get("host")
        if h and h not in sys.argv[2].split() + ["github.com"]:
            seen.setdefault(f"{h}:{r.get('port')}", set()).add(f"{r.get('decision')}/{r.get('reason')}")
print(" ".join(f"{h}={','.join(sorted(v))}" for h, v in sorted(seen.items())))
PY
)
    say "destinations besides the allowed ones (the entrypoint's self-test probes included): ${others:-none}"
    all_denied() { for o in $others; do grep -q '=deny/' <<<"$o" && ! grep -q 'allow' <<<"$o" || return 1; done; }
    check "every other destination the CLI tried was denied and audited" all_denied
    paths=$(python3 -c 'import json,sys; print(" ".join(sorted({json.loads(l)["method"]+" "+json.loads(l)["path"].split("?")[0] for l in open(sys.argv[1]) if l.strip()})))' "$alog")
    say "paths asked of $names: $paths"

    say "wire (tcpdump on $BR)"
    tcpdump -nn -r "$SMOKE_DIR/wire.pcap" 2>/dev/null >"$SMOKE_DIR/wire.txt"
    if python3 "$SMOKE_ROOT/tests/smoke/wire_check.py" "$audit" "${names// /,},github.com" "$APP4" "$APP6" \
        <"$SMOKE_DIR/wire.txt"; then
        pass "every packet from the appliance is the proxy's, an allowed DNS query or housekeeping"
    else
        fail "a packet left the appliance that the proxy did not send"
    fi
    first=$(python3 - "$audit" "$t0" "$API_HOST" <<'PY'
import json, sys, datetime
t0 = int(sys.argv[2]) / 1e9
for l in open(sys.argv[1]):
    r = json.loads(l) if l.strip() else {}
    if r.get("host") == sys.argv[3] and r.get("uid") == 1000:
        ts = datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
        print(int((ts - t0) * 1000)); break
PY
)
    say "timing: docker run -> the agent's first request to $API_HOST ${first:-?} ms (benchmark, target <= 2000);" \
        "session $session_ms ms; test total $(ms "$T0") ms"
    if [ "$SMOKE_FAILS" -ne 0 ]; then
        say "agent stdout:"; tail -30 "$SMOKE_DIR/agent.out" >&2
        say "container stderr (last 30 lines):"; grep -v ' INFO ' "$SMOKE_DIR/agent.err" | tail -30 >&2
        say "fake API log:"; cut -c1-400 "$alog" | tail -20 >&2
        say "audit denials:"; grep '"decision":"deny"' "$audit" | tail -10 >&2
        die "$SMOKE_FAILS check(s) failed"
    fi
}

# --- The agent in a real terminal (agent-claude-tty.sh, agent-codex-tty.sh, agent-aider-tty.sh)

# What an agent shows when it does not start ready to work: a setup question, a login wall or
# an error it stops at (the words of each agent's own dialogs).
TTY_WALLS='trust this folder|trust the files|Detected a custom API key|use this API key|Not logged in|Please run /login|Select login method|Choose the text style|default permission mode\?|Bypass Permissions mode|no complete local package|--no-daemon|Sign in with ChatGPT|Create one to track|create a git repo|Add \.aider\*? to \.gitignore|API key not found|Missing API key'

# rig_tty_start SESSION...: the agent as a user starts it interactively, in a tmux pane (a
# real terminal, so docker run -it): each SESSION (a command line, its words shell-quoted) is
# one start of the sandbox, `scripts/docker-run REPO -- SESSION` with $RIG_ENV, one after the
# other; when one ends the terminal is cleared, then session-N.rc says its status. The home
# is not a fresh tmpfs but one named volume ($HOME_VOLUME, its files in $home on the host)
# that every start mounts at /home/agent, as the sessions of one CLI sandbox keep it
# (docker-run and docker/run-flags.sh copied, with only that mount changed); each start mints
# its own placeholders. tty.rc says rc=0 when every session exited 0. tmux's server is
# stopped at exit.
rig_tty_start() {
    local tree=$SMOKE_DIR/tree i=0 s
    command -v tmux >/dev/null ||
        die "tmux is required to drive the agent in a terminal: scripts/install-test-deps installs it (apt-get install tmux)"
    HOME_VOLUME=$SMOKE_ID-${RIG}home
    track_volume "$HOME_VOLUME"
    mkdir -p "$tree/scripts" "$tree/docker"
    cp "$SMOKE_ROOT/scripts/docker-run" "$tree/scripts/"
    sed "s|^\( *\)--tmpfs /home/agent:.*|\1-v $HOME_VOLUME:/home/agent|" \
        "$SMOKE_ROOT/docker/run-flags.sh" >"$tree/docker/run-flags.sh"
    [ "$(grep -c "^ *-v $HOME_VOLUME:/home/agent\$" "$tree/docker/run-flags.sh")" = 1 ] ||
        die "docker/run-flags.sh has no --tmpfs /home/agent line to replace with the home volume"
    TTY_SOCK=$SMOKE_DIR/tmux.sock
    printf 'set -g remain-on-exit on\nset -g history-limit 5000\n' >"$SMOKE_DIR/tmux.conf"
    {
        echo '#!/usr/bin/env bash'
        echo 'status=0'
        for s in "$@"; do
            i=$((i + 1))
            printf '%q ' env "${RIG_ENV[@]}" "$tree/scripts/docker-run" "$repo" --
            printf '%s ' "$s"
            printf '2>>%q\n' "$SMOKE_DIR/agent.err"
            echo 's=$?; [ "$s" = 0 ] || status=$s'
            echo "printf '\\033[3J\\033[2J\\033[H'"
            printf 'echo "rc=$s" >%q\n' "$SMOKE_DIR/session-$i.rc"
        done
        printf 'echo "rc=$status" >%q\n' "$SMOKE_DIR/tty.rc"
    } >"$SMOKE_DIR/tty-run.sh"
    say "in a terminal (tmux, 160x50), $# start(s) of scripts/docker-run REPO -- ... with the home volume $HOME_VOLUME"
    track_volume "$AUDIT"
    track_container "$APP"
    t0=$(date +%s%N)
    tmux -S "$TTY_SOCK" -f "$SMOKE_DIR/tmux.conf" new-session -d -s agent -x 160 -y 50 \
        "bash $SMOKE_DIR/tty-run.sh" || die "tmux cannot start a session (tmux $(tmux -V))"
    track_pid "$(tmux -S "$TTY_SOCK" display-message -p -t agent '#{pid}')"
    # Everything the terminal is sent, escape sequences and all, for the key check.
    tmux -S "$TTY_SOCK" pipe-pane -t agent "cat >>$SMOKE_DIR/pane.log"
}

# rig_tty_ended N: waits (60 s at most) for session N to end; checks its status.
rig_tty_ended() {
    local deadline=$((SECONDS + 60))
    while [ ! -s "$SMOKE_DIR/session-$1.rc" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    check "session $1 ended with status 0 after the agent's exit command ($(cat "$SMOKE_DIR/session-$1.rc" 2>/dev/null || echo still running))" \
        grep -qx 'rc=0' "$SMOKE_DIR/session-$1.rc"
}

# rig_tty_screen: what the terminal shows now (also in screen.txt).
rig_tty_screen() {
    tmux -S "$TTY_SOCK" capture-pane -p -t agent >"$SMOKE_DIR/screen.txt" 2>/dev/null || true
    cat "$SMOKE_DIR/screen.txt"
}

# rig_tty_until WHAT CMD...: polls CMD (the screen is in screen.txt before each try) until it
# succeeds; fails the check WHAT at once when a wall ($TTY_WALLS) shows, when the session
# ends, or when $TTY_WAIT seconds (default 90) pass, printing the screen. Status 0 when CMD
# succeeded.
rig_tty_until() {
    local what=$1 deadline=$((SECONDS + ${TTY_WAIT:-90}))
    shift
    while :; do
        rig_tty_screen >/dev/null
        if "$@"; then
            pass "$what"
            return 0
        fi
        if grep -qE "$TTY_WALLS" "$SMOKE_DIR/screen.txt"; then
            fail "$what: the agent stopped at a setup question instead: $(grep -m1 -oE "$TTY_WALLS" "$SMOKE_DIR/screen.txt")"
            break
        fi
        if [ -s "$SMOKE_DIR/tty.rc" ]; then
            fail "$what: the session ended first ($(cat "$SMOKE_DIR/tty.rc"))"
            break
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            fail "$what: not there after ${TTY_WAIT:-90} s"
            break
        fi
        sleep 0.2
    done
    say "the screen:"
    grep -v '^\s*$' "$SMOKE_DIR/screen.txt" | tail -40 >&2
    return 1
}

# rig_tty_shows REGEX...: the screen matches every REGEX (extended, each on some line).
rig_tty_shows() {
    local re
    for re in "$@"; do grep -qE -- "$re" "$SMOKE_DIR/screen.txt" || return 1; done
}

# rig_tty_wait WHAT REGEX...: rig_tty_until the screen shows every REGEX.
rig_tty_wait() {
    local what=$1
    shift
    rig_tty_until "$what" rig_tty_shows "$@"
}

# rig_tty_walls: no wall anywhere in what the terminal showed so far (its scrollback too).
rig_tty_walls() {
    tmux -S "$TTY_SOCK" capture-pane -p -S - -t agent >"$SMOKE_DIR/scrollback.txt" 2>/dev/null || true
    local hit
    hit=$(grep -m1 -oE "$TTY_WALLS" "$SMOKE_DIR/scrollback.txt" || true)
    check "no setup question or login wall on the screen${hit:+ (saw: $hit)}" [ -z "$hit" ]
}

# rig_tty_type TEXT: types TEXT at the agent's prompt and, once it shows, presses Enter.
rig_tty_type() {
    local deadline=$((SECONDS + 10))
    tmux -S "$TTY_SOCK" send-keys -t agent -l "$1"
    until rig_tty_screen | grep -qF -- "$1" || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.1; done
    tmux -S "$TTY_SOCK" send-keys -t agent Enter
}

# rig_tty_end: after the last session: the time, what the terminal was sent (agent.out), the
# capture stopped, $audit set.
rig_tty_end() {
    session_ms=$(ms "$t0")
    cp "$SMOKE_DIR/pane.log" "$SMOKE_DIR/agent.out" 2>/dev/null || : >"$SMOKE_DIR/agent.out"
    sleep 0.5
    kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
    touch "$alog"
    audit="$(volume_path "$AUDIT")/audit.jsonl"
    home=$(volume_path "$HOME_VOLUME")
}

# rig_tty_home_has WHAT PATTERN: a file of the home volume matching PATTERN (a find -path
# pattern under the home) holds the first conversation's answer.
rig_tty_home_has() {
    check "$1 (in the home, $2)" bash -c "find '$home' -path '$home/$2' -type f -print0 | xargs -0r grep -lF '$ANSWER' | grep -q ."
}

# rig_tty_key_checks PATH-RE: every model request (PATH-RE) the fake saw carried the real
# key; the real key is nowhere on the screen.
rig_tty_key_checks() {
    local n real
    n=$(grep -cE "\"path\": \"$1" "$alog" || true)
    real=$(grep -E "\"path\": \"$1" "$alog" | grep -cF "\"$KEY_HEADER\": \"$KEY_FORMAT$KEY\"" || true)
    check "the fake saw the real key on every model request ($real of $n)" eval '[ "$n" -gt 0 ] && [ "$real" = "$n" ]'
    check "the real key is nowhere on the screen (in nothing the terminal was sent)" \
        bash -c "[ -s '$SMOKE_DIR/agent.out' ] && ! grep -aqF '$KEY' '$SMOKE_DIR/agent.out'"
}

# rig_tty_sessions FAKE.py EXIT MODEL-PATH-RE READY-RE...: the interactive proof every agent
# shares. The fake model answers every prompt with $ANSWER. Two starts of the sandbox with one
# home (rig_tty_start), as the sessions of one CLI sandbox meet them: the profile's
# interactive command (what `airlock run --agent NAME` starts), then its resume command in the
# next start (new placeholders, the state of the first in the home). Each must open at its prompt
# (every READY-RE on the screen, no wall of $TTY_WALLS first, no key pressed); the first
# answers one prompt through the fake; the second shows the first conversation and sends it
# with its own prompt. EXIT is typed to end each session. $TTY_RESUMED: what the resumed
# session shows instead of the first answer (an agent that restores without replaying it).
rig_tty_sessions() {
    local fake=$1 exit_cmd=$2 path_re=$3 cmd resume before shown
    shift 3
    ANSWER="PONG-$RANDOM$RANDOM from the fake model"
    python3 -c 'import json, sys; json.dump([{"text": sys.argv[2]}], open(sys.argv[1], "w"))' \
        "$SMOKE_DIR/script.json" "$ANSWER"
    rig_start "$fake"
    mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command "$RIG_AGENT" interactive)
    mapfile -t resume < <(python3 "$SMOKE_ROOT/agents/profile.py" command "$RIG_AGENT" resume)
    rig_tty_start "$(printf '%q ' "${cmd[@]}")" "$(printf '%q ' "${resume[@]}")"

    say "session 1: ${cmd[*]} (a fresh home)"
    if rig_tty_wait "${cmd[*]} opens at its prompt, the profile's mode kept: $*" "$@"; then
        rig_tty_walls
        rig_tty_type "Say hello."
        rig_tty_wait "the fake model's answer is on the screen" "$ANSWER" || true
    fi
    rig_tty_type "$exit_cmd"
    rig_tty_ended 1

    say "session 2: ${resume[*]} (the next start: the same home, new placeholders)"
    if rig_tty_wait "${resume[*]} opens at its prompt: $*" "$@"; then
        rig_tty_walls
        rig_tty_wait "the first conversation is back: ${TTY_RESUMED:-its answer on the screen}" "${TTY_RESUMED:-$ANSWER}" || true
        before=$(wc -l <"$alog")
        shown=$(grep -cF "$ANSWER" "$SMOKE_DIR/screen.txt" || true)
        rig_tty_type "Say it again."
        rig_tty_until "the model was sent the first conversation with the new prompt" \
            eval 'tail -n "+$((before + 1))" "$alog" | grep -E "\"path\": \"$path_re" | grep -qF "$ANSWER"' || true
        rig_tty_until "the new answer is on the screen" \
            eval '[ "$(grep -cF "$ANSWER" "$SMOKE_DIR/screen.txt")" -gt "$shown" ]' || true
    fi
    rig_tty_type "$exit_cmd"
    rig_tty_ended 2
    rig_tty_end
    rig_tty_key_checks "$path_re"
}
