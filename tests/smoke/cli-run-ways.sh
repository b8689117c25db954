#!/usr/bin/env bash
# Docker smoke test: every documented way to run starts on the tested platform.
#   - compose.yaml with `docker-compose` (v1, Debian 12's package) and `docker compose` (v2),
#     with no secret at all (every key is optional);
#   - the devcontainer as `airlock devcontainer` writes it, started the way the devcontainer
#     CLI starts it (`docker run -d` with its runArgs, workspaceMount and image, the image's
#     own command): still running after its start, and its shell answers in a real terminal
#     (tmux attached to it);
#   - the Kubernetes Pod of `airlock k8s render --agent claude`: a terminal and stdin for
#     `kubectl attach`, the agent as the command, the agent's image.
# Usage: sudo tests/smoke/cli-run-ways.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
command -v tmux >/dev/null || die "tmux is required (scripts/install-test-deps installs it)"
(cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-cli) || die "cannot build the airlock CLI"
dir=${CARGO_TARGET_DIR:-target}
case $dir in /*) ;; *) dir=$SMOKE_ROOT/$dir ;; esac
airlock() {
    AIRLOCK_DATA_DIR=$SMOKE_DIR/data AIRLOCK_CONFIG_DIR=$SMOKE_DIR/config \
        "$dir/debug/airlock" --image "$SMOKE_IMAGE" "$@"
}

repo=$SMOKE_DIR/repo
mkdir -p "$repo"
git -C "$repo" init -q -b main
echo one >"$repo/a"
git -C "$repo" add a
git -C "$repo" -c user.name=o -c user.email=o@example.invalid commit -qm one
chown -R 1000:1000 "$repo"

# ---- compose, both generations, no secret
compose_run() {
    local project=$SMOKE_ID-$1; shift
    track_volume "${project}_airlock-audit"
    AIRLOCK_REPO=$repo AIRLOCK_IMAGE=$SMOKE_IMAGE timeout 120 "$@" -p "$project" \
        -f "$SMOKE_ROOT/compose.yaml" run --rm -T airlock sh -c 'echo COMPOSE-$((6*7))' \
        >"$SMOKE_DIR/compose.out" 2>"$SMOKE_DIR/compose.err"
    local rc=$?
    "$@" -p "$project" -f "$SMOKE_ROOT/compose.yaml" down -v >/dev/null 2>&1 || true
    return $rc
}
v=0
for c in "docker-compose" "docker compose"; do
    v=$((v + 1))
    # shellcheck disable=SC2086 # the two words of `docker compose` are the point
    if ! $c version >/dev/null 2>&1; then
        fail "$c is not installed (scripts/install-test-deps installs both)"
        continue
    fi
    rc=0
    # shellcheck disable=SC2086
    compose_run "compose-v$v" $c || rc=$?
    if [ "$rc" = 0 ] && grep -q COMPOSE-42 "$SMOKE_DIR/compose.out"; then
        pass "$c run --rm airlock starts with no secret and runs the command"
    else
        fail "$c run (exit $rc): $(tail -3 "$SMOKE_DIR/compose.err")"
    fi
    check "$c: the agent's output carries no proxy line" \
        bash -c "! grep -q ' INFO ' '$SMOKE_DIR/compose.out'"
done

# ---- the devcontainer, started as the devcontainer CLI starts it
airlock devcontainer "$repo" >/dev/null || die "airlock devcontainer failed"
dc=$repo/.devcontainer/devcontainer.json
# Its own audit volume instead of the default airlock-audit (a real one may exist here).
mapfile -t run_args < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))["runArgs"]]' "$dc" |
    sed "s|^airlock-audit:|$SMOKE_ID-devc-audit:|")
mount=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["workspaceMount"])' "$dc")
image=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$dc")
name=$SMOKE_ID-devc
track_container "$name"
track_volume "$SMOKE_ID-devc-audit"
docker run -d --name "$name" "${run_args[@]}" --mount "$mount" "$image" >/dev/null ||
    die "the devcontainer's flags do not start a container"
sleep 5
check "the devcontainer is still running 5 s after its start" \
    test "$(docker inspect -f '{{.State.Running}}' "$name")" = true
session=$SMOKE_ID-tmux
tmux new-session -d -s "$session" -x 120 -y 30 "docker attach $name"
track_pid "$(tmux display-message -p -t "$session" '#{pane_pid}')"
sleep 1
tmux send-keys -t "$session" 'echo DEVC-$((6*7)) $(id -un)' Enter
screen=
for _ in $(seq 50); do
    screen=$(tmux capture-pane -p -t "$session")
    grep -q 'DEVC-42 agent' <<<"$screen" && break
    sleep 0.2
done
check "its shell answers as the agent in a terminal" grep -q 'DEVC-42 agent' <<<"$screen"
check "no proxy line on its terminal" bash -c "! grep -q ' INFO ' <<<'$screen'"
tmux kill-session -t "$session" 2>/dev/null || true

# ---- the Pod: a terminal for kubectl attach, the agent as its command
# --host-paths: the single-node rendering (this repository has no origin to clone in a cluster).
pod=$(airlock k8s render agent-one --repo "$repo" --agent claude --host-paths | python3 -c '
import json, sys
docs = [json.loads(d) for d in sys.stdin.read().split("---\n") if d.strip()]
c = [d for d in docs if d["kind"] == "Pod"][0]["spec"]["containers"][0]
print(c["stdin"], c["tty"], c.get("args"), c["image"])')
check "the Pod keeps stdin and a tty and runs the agent in its image ($pod)" \
    test "$pod" = "True True ['claude'] airlock:claude"

[ "$SMOKE_FAILS" = 0 ] || die "$SMOKE_FAILS check(s) failed"
say "every documented way to run starts"
