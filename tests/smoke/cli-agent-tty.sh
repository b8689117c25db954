#!/usr/bin/env bash
# Claude Code in a sandbox of the host CLI, as a user lives with one: `airlock secret set
# anthropic_api_key`, `airlock new NAME --repo R --agent claude`, then `airlock attach NAME`
# in a real terminal (tmux) reaches Claude Code's prompt with no dialog, one prompt
# round-trips through the scripted fake of the Anthropic API on the fake internet
# (tests/smoke/agent-rig.sh, fake_anthropic.py; the sandbox on the rig's network as
# tests/smoke/cli-wire.sh starts one), detach (ctrl-p ctrl-q) leaves it running; `airlock
# stop NAME`, `airlock start NAME`, attach again: the prompt again, no dialog (new
# placeholders, the same home); `airlock exec NAME -- claude --continue` brings the first
# conversation back and sends it with the next prompt; `airlock destroy NAME` removes the
# sandbox and its home volume airlock-home-NAME.
#
# Also: the home volume is the agent's (0700, its files its own); the fake saw the real key
# on every model request and the screen never showed it; every other destination was
# denied and audited and tcpdump saw nothing else leave the sandbox.
# Usage: sudo tests/smoke/cli-agent-tty.sh     (needs airlock:claude: scripts/build-agent-image claude)
source "$(dirname "$0")/lib.sh"
RIG=cat
RIG_AGENT=claude
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

SB=${SMOKE_ID#airlock-}-tty  # sandbox smoke-<pid>-tty, container airlock-smoke-<pid>-tty
CONTAINER=airlock-$SB
HOME_VOLUME=airlock-home-$SB
READY=('^❯' 'bypass permissions on')

# The CLI, built as cli-wire.sh builds it, behind a wrapper the terminal can run.
(cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-cli) || die "cannot build the airlock CLI"
dir=${CARGO_TARGET_DIR:-target}
case $dir in /*) ;; *) dir=$SMOKE_ROOT/$dir ;; esac
cat >"$SMOKE_DIR/airlock" <<SH
#!/bin/sh
# The operator is uid 1000, who owns the repository (git accepts it under SUDO_UID).
exec env -u SUDO_USER SUDO_UID=1000 HOME=$SMOKE_DIR/operator \\
    AIRLOCK_DATA_DIR=$SMOKE_DIR/data AIRLOCK_CONFIG_DIR=$SMOKE_DIR/config $dir/debug/airlock "\$@"
SH
chmod 0755 "$SMOKE_DIR/airlock"
mkdir -p "$SMOKE_DIR/operator"
airlock() { "$SMOKE_DIR/airlock" "$@"; }

# The rig's policy with the key read as the claude profile reads it: the variable when set
# (a CLI sandbox has none of the operator's), else the secret file the CLI mounts; the agent
# gets its placeholder under the variable's name either way.
sed 's|source = { env = "ANTHROPIC_API_KEY" }|source = { env = "ANTHROPIC_API_KEY", file = "/run/secrets/anthropic_api_key" }|' \
    "$SMOKE_DIR/policy.toml" >"$SMOKE_DIR/policy-cli.toml"
grep -q 'file = "/run/secrets/anthropic_api_key"' "$SMOKE_DIR/policy-cli.toml" ||
    die "the rig's policy has no env source for the key to replace"
chmod 0644 "$SMOKE_DIR/policy-cli.toml"

ANSWER="PONG-$RANDOM$RANDOM from the fake model"
python3 -c 'import json, sys; json.dump([{"text": sys.argv[2]}], open(sys.argv[1], "w"))' \
    "$SMOKE_DIR/script.json" "$ANSWER"
rig_start "$SMOKE_ROOT/tests/smoke/fake_anthropic.py"

say "airlock secret set anthropic_api_key, github_token (stored: named by the policy, no --secret)"
printf '%s' "$KEY" | airlock secret set anthropic_api_key >/dev/null || die "airlock secret set failed"
airlock secret set github_token <"$SMOKE_DIR/github_token" >/dev/null || die "airlock secret set failed"
say "airlock new $SB --repo REPO --agent claude (on $NET, the fake internet's CA for the proxy)"
track_container "$CONTAINER"
track_volume "$HOME_VOLUME"
track_volume "airlock-secrets-$SB"
t0=$(date +%s%N)
airlock new "$SB" --repo "$repo" --agent claude --policy "$SMOKE_DIR/policy-cli.toml" \
    --network "$NET" --dns "$UP4" --upstream-ca "$SMOKE_DIR/ca.pem" >"$SMOKE_DIR/new.out" 2>&1 ||
    die "airlock new failed: $(tail -5 "$SMOKE_DIR/new.out")"
check "the sandbox runs" [ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER" 2>/dev/null)" = true ]
check "its home is the volume $HOME_VOLUME" bash -c \
    "docker inspect -f '{{range .Mounts}}{{.Name}}:{{.Destination}} {{end}}' '$CONTAINER' | grep -qw '$HOME_VOLUME:/home/agent'"

# The terminal: one tmux pane running a shell; each step types a command into it and waits.
command -v tmux >/dev/null ||
    die "tmux is required to drive the agent in a terminal: scripts/install-test-deps installs it (apt-get install tmux)"
TTY_SOCK=$SMOKE_DIR/tmux.sock
printf 'set -g history-limit 5000\n' >"$SMOKE_DIR/tmux.conf"
tmux -S "$TTY_SOCK" -f "$SMOKE_DIR/tmux.conf" new-session -d -s agent -x 160 -y 50 \
    "env -i PATH=/usr/bin:/bin HOME=$SMOKE_DIR TERM=xterm-256color PS1='$ ' bash --norc --noprofile" ||
    die "tmux cannot start a session (tmux $(tmux -V))"
track_pid "$(tmux -S "$TTY_SOCK" display-message -p -t agent '#{pid}')"
tmux -S "$TTY_SOCK" pipe-pane -t agent "cat >>$SMOKE_DIR/pane.log"

# term STEP CMD: clears the screen, then runs CMD in the terminal; its status lands in STEP.rc.
term() {
    rm -f "$SMOKE_DIR/$1.rc"
    tmux -S "$TTY_SOCK" send-keys -t agent "clear; $2; echo \"rc=\$?\" >$SMOKE_DIR/$1.rc" Enter
}
# ended STEP WANT: waits (60 s at most) until STEP's command returned; checks it said rc=WANT.
ended() {
    local deadline=$((SECONDS + 60))
    while [ ! -s "$SMOKE_DIR/$1.rc" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    check "$1 returned $2 ($(cat "$SMOKE_DIR/$1.rc" 2>/dev/null || echo still running))" \
        grep -qx "rc=$2" "$SMOKE_DIR/$1.rc"
}
# detach: ctrl-p ctrl-q in one write, once the agent's start-up has settled: Docker sees the
# sequence only when nothing comes between the two keys, and an agent that has just started
# still has the terminal answering its queries (colours, keyboard protocol) on the same input.
detach() {
    sleep 1
    tmux -S "$TTY_SOCK" send-keys -t agent C-p C-q
}

say "attach 1: the agent's first screen"
term attach1 "$SMOKE_DIR/airlock attach $SB"
if rig_tty_wait "airlock attach reaches Claude Code's prompt, the profile's mode kept: ${READY[*]}" "${READY[@]}"; then
    rig_tty_walls
    rig_tty_type "Say hello."
    rig_tty_wait "the fake model's answer is on the screen" "$ANSWER" || true
fi
detach
ended attach1 0
check "after the detach the sandbox still runs" [ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER")" = true ]

say "airlock stop, airlock start (the same home, new placeholders)"
airlock stop "$SB" >"$SMOKE_DIR/stop.out" 2>&1 || fail "airlock stop: $(cat "$SMOKE_DIR/stop.out")"
check "stopped" [ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER")" = false ]
airlock start "$SB" >"$SMOKE_DIR/start.out" 2>&1 || fail "airlock start: $(cat "$SMOKE_DIR/start.out")"
check "running again" [ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER")" = true ]

say "attach 2: after the restart"
term attach2 "$SMOKE_DIR/airlock attach $SB"
if rig_tty_wait "airlock attach reaches the prompt again: ${READY[*]}" "${READY[@]}"; then
    rig_tty_walls
fi
detach
ended attach2 0

say "airlock exec $SB -- claude --continue"
term resume "$SMOKE_DIR/airlock exec $SB -- claude --continue"
if rig_tty_wait "claude --continue opens at its prompt: ${READY[*]}" "${READY[@]}"; then
    rig_tty_walls
    rig_tty_wait "the first conversation is back (its answer on the screen)" "$ANSWER" || true
    before=$(wc -l <"$alog")
    shown=$(grep -cF "$ANSWER" "$SMOKE_DIR/screen.txt" || true)
    rig_tty_type "Say it again."
    rig_tty_until "the model was sent the first conversation with the new prompt" \
        eval 'tail -n "+$((before + 1))" "$alog" | grep -E "\"path\": \"/v1/messages" | grep -qF "$ANSWER"' || true
    rig_tty_until "the new answer is on the screen" \
        eval '[ "$(grep -cF "$ANSWER" "$SMOKE_DIR/screen.txt")" -gt "$shown" ]' || true
fi
rig_tty_type /exit
ended resume 0

say "the home volume"
home=$(volume_path "$HOME_VOLUME")
check "the home is the agent's and private ($(stat -c '%u %a' "$home"))" [ "$(stat -c '%u %a' "$home")" = "1000 700" ]
rig_tty_home_has "the conversation is Claude's transcript" '.claude/projects/*/*.jsonl'
foreign=$(find "$home" -xdev ! -uid 1000 -printf '%P ' | head -c 300)
check "every file in it is the agent's${foreign:+ (not: $foreign)}" [ -z "$foreign" ]

# The wire and the denials, while the sandbox and its audit still exist.
read -r APP4 APP6 <<<"$(docker inspect -f \
    '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.GlobalIPv6Address}}{{end}}' "$CONTAINER")"
airlock stop "$SB" >/dev/null 2>&1 || true
session_ms=$(ms "$t0")
cp "$SMOKE_DIR/pane.log" "$SMOKE_DIR/agent.out" 2>/dev/null || : >"$SMOKE_DIR/agent.out"
sleep 0.5
kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
touch "$alog"
audit=$SMOKE_DIR/data/sandboxes/$SB/audit/audit.jsonl
: >>"$SMOKE_DIR/agent.err"
rig_tty_key_checks /v1/messages
rig_net_checks

say "airlock destroy $SB"
airlock destroy "$SB" >"$SMOKE_DIR/destroy.out" 2>&1 || fail "airlock destroy: $(cat "$SMOKE_DIR/destroy.out")"
check "the container is gone" bash -c "! docker inspect '$CONTAINER' >/dev/null 2>&1"
check "the home volume $HOME_VOLUME is gone" bash -c "! docker volume inspect '$HOME_VOLUME' >/dev/null 2>&1"
[ "$SMOKE_FAILS" -eq 0 ] || die "$SMOKE_FAILS check(s) failed"
say "claude in a CLI sandbox's terminal: all checks passed"
