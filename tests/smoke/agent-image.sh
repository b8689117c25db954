#!/usr/bin/env bash
# Docker smoke test for the agent images (issue 16 items 1 and "bad input"), for each agent
# named in $AIRLOCK_SMOKE_AGENTS (default: claude codex aider):
#   - bad input: an agent without a profile, a lock whose hash does not match, a package PyPI
#     does not have: one line each, exit status 1, nothing cached, nothing tagged;
#   - the image airlock:AGENT (built by tests/smoke/run.sh once per run): no setuid/setgid
#     file, no sudo/wget/nc, the toolchain (python3 + pip + venv, node + npm, rg, jq, less,
#     gcc, make) and the CLI are there;
#   - started the documented way (scripts/docker-run on a private --internal network): the
#     entrypoint's checks and self-test pass, and the agent's process holds no capability,
#     no_new_privs and seccomp filter mode as /proc/self/status says; the CLI answers its
#     version as the agent; the benchmark docker run -> agent exec is printed.
# Usage: sudo tests/smoke/agent-image.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep
AGENTS=${AIRLOCK_SMOKE_AGENTS:-claude codex aider}

say "bad input"
one_line_fail() { # NAME WANT CMD...: fails with exactly one error line (besides progress) containing WANT
    local name=$1 want=$2 rc=0; shift 2
    "$@" >"$SMOKE_DIR/bad.out" 2>"$SMOKE_DIR/bad.err" || rc=$?
    local lines; lines=$(grep -cvE '^fetch-agents: (pip download|apt-get) ' "$SMOKE_DIR/bad.err" || true)
    if [ "$rc" -ne 0 ] && [ "$lines" = 1 ] && grep -qF "$want" "$SMOKE_DIR/bad.err"; then
        pass "$name: $(tail -1 "$SMOKE_DIR/bad.err")"
    else
        fail "$name: status $rc, $lines line(s): $(tr '\n' ' ' <"$SMOKE_DIR/bad.err" | cut -c1-300)"
    fi
}
one_line_fail "an agent without a profile" "no agent profile agents/nosuchagent.toml" \
    "$SMOKE_ROOT/scripts/build-agent-image" nosuchagent
badlock=$SMOKE_DIR/bad.lock
sed -E 's/^(claude +[^ ]+ +[^ ]+ +[^ ]+ +)[0-9a-f]{64}/\1'"$(printf '0%.0s' $(seq 64))"'/' \
    "$SMOKE_ROOT/agents/agents.lock" >"$badlock"
mkdir -p "$SMOKE_DIR/cache"
AIRLOCK_AGENT_LOCK=$badlock AIRLOCK_AGENT_CACHE=$SMOKE_DIR/cache one_line_fail \
    "a lock whose hash does not match" "does not match the lock" "$SMOKE_ROOT/scripts/fetch-agents" claude
check "nothing was cached from the mismatched download" [ -z "$(ls -A "$SMOKE_DIR/cache/wheels")" ]
sed -E 's/^(claude +[^ ]+ +)[^ ]+/\1999.0.0/' "$SMOKE_ROOT/agents/agents.lock" >"$badlock"
AIRLOCK_AGENT_LOCK=$badlock AIRLOCK_AGENT_CACHE=$SMOKE_DIR/cache one_line_fail \
    "a pinned version PyPI does not have" "cannot be downloaded from PyPI" "$SMOKE_ROOT/scripts/fetch-agents" claude
AIRLOCK_AGENT_LOCK=$badlock AIRLOCK_AGENT_CACHE=$SMOKE_DIR/cache AIRLOCK_NO_BUILD=1 one_line_fail \
    "build-agent-image with that lock" "cannot be downloaded from PyPI" \
    "$SMOKE_ROOT/scripts/build-agent-image" claude "$SMOKE_ID-bad:claude"
check "nothing half-built was tagged" bash -c "! docker image inspect '$SMOKE_ID-bad:claude' >/dev/null 2>&1"
grep -v '^codex ' "$SMOKE_ROOT/agents/agents.lock" >"$badlock"
AIRLOCK_AGENT_LOCK=$badlock AIRLOCK_AGENT_CACHE=$SMOKE_DIR/cache AIRLOCK_NO_BUILD=1 one_line_fail \
    "a profile whose package has no lock line" "agents.lock has no line for codex openai-codex-cli-bin" \
    "$SMOKE_ROOT/scripts/build-agent-image" codex "$SMOKE_ID-bad:codex"
# A venv agent (aider): every dependency is a lock line, fetched in one batched download. Two
# of them here (the real lock has 108): one hash wrong caches neither; a version PyPI does
# not have is named; no image is tagged.
zeros=$(printf '0%.0s' $(seq 64))
{ grep -E '^aider +aider_chat ' "$SMOKE_ROOT/agents/agents.lock"
  grep -E '^aider +six ' "$SMOKE_ROOT/agents/agents.lock" | sed -E "s/[0-9a-f]{64}\$/$zeros/"; } >"$badlock"
AIRLOCK_AGENT_LOCK=$badlock AIRLOCK_AGENT_CACHE=$SMOKE_DIR/cache one_line_fail \
    "a venv agent's dependency whose hash does not match" "does not match the lock" \
    "$SMOKE_ROOT/scripts/fetch-agents" aider
check "nothing was cached from that batch (not even the file that matched)" [ -z "$(ls -A "$SMOKE_DIR/cache/wheels")" ]
{ grep -E '^aider +aider_chat ' "$SMOKE_ROOT/agents/agents.lock"
  grep -E '^aider +six ' "$SMOKE_ROOT/agents/agents.lock" | sed -E 's/^(aider +six +)[^ ]+/\1999.0.0/'; } >"$badlock"
AIRLOCK_AGENT_LOCK=$badlock AIRLOCK_AGENT_CACHE=$SMOKE_DIR/cache AIRLOCK_NO_BUILD=1 one_line_fail \
    "a venv agent's dependency at a version PyPI does not have" "six==999.0.0" \
    "$SMOKE_ROOT/scripts/build-agent-image" aider "$SMOKE_ID-bad:aider"
check "no aider image was tagged" bash -c "! docker image inspect '$SMOKE_ID-bad:aider' >/dev/null 2>&1"

nagent=0
for agent in $AGENTS; do
    image=airlock:$agent
    say "image $image"
    docker image inspect "$image" >/dev/null 2>&1 || die "$image is missing: run scripts/build-agent-image $agent"
    size=$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')
    base_size=$(docker image inspect -f '{{.Size}}' "$SMOKE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}')
    say "size $size (base $SMOKE_IMAGE $base_size)"
    inimg() { docker run --rm --network none --entrypoint /bin/sh "$image" -c "$1"; }
    check "no setuid/setgid file" [ -z "$(inimg 'find / -xdev -type f -perm /6000')" ]
    check "no sudo, wget, nc, socat" inimg 'for b in sudo wget nc netcat ncat socat; do ! command -v $b; done'
    tools=$(inimg 'python3 --version; python3 -m pip --version | cut -d" " -f1-2; python3 -m venv --help >/dev/null && echo venv; echo node $(node --version); echo npm $(npm --version); rg --version | head -1; jq --version; less --version | head -1; gcc --version | head -1; make --version | head -1' 2>&1 | tr '\n' ';')
    want() { grep -qE "$1" <<<"$tools"; }
    check "python3, pip, venv ($(cut -d';' -f1-3 <<<"$tools"))" want '^Python 3[^;]*;pip [0-9.]+;venv;'
    check "node, npm ($(cut -d';' -f4-5 <<<"$tools"))" want ';node v[0-9]+[^;]*;npm [0-9]'
    check "rg, jq, less, gcc, make ($(cut -d';' -f6- <<<"$tools" | cut -c1-160))" want ';ripgrep [0-9][^;]*;jq-[0-9][^;]*;less [0-9][^;]*;gcc [^;]*;GNU Make'
    check "the CA bundle is still the per-start one" \
        [ "$(inimg 'readlink /etc/ssl/certs/ca-certificates.crt')" = /run/airlock/ca-bundle.pem ]

    net=$SMOKE_ID-$agent-net
    vol=$SMOKE_ID-$agent-audit
    ws=$SMOKE_DIR/ws-$agent
    mkdir -p "$ws" && chown 1000:1000 "$ws"
    track_network "$net"
    track_volume "$vol"
    # A /26 of 198.51.100.0/24 per agent: the networks stay until the test ends.
    docker network create --internal --subnet "198.51.100.$((nagent++ % 4 * 64))/26" "$net" >/dev/null
    echo -n "ghp_SMOKE$RANDOM" >"$SMOKE_DIR/gh-$agent" && chmod 0400 "$SMOKE_DIR/gh-$agent"
    mapfile -t version < <(python3 "$SMOKE_ROOT/agents/profile.py" command "$agent" version)
    t0=$(date +%s%N)
    rc=0
    # The image's own policy (rendered from the profile): its credentials given as documented.
    ANTHROPIC_API_KEY=sk-ant-smoke OPENAI_API_KEY=sk-smoke AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$image \
        AIRLOCK_AUDIT_VOLUME=$vol GITHUB_TOKEN_FILE=$SMOKE_DIR/gh-$agent \
        AIRLOCK_DOCKER_ARGS="--network $net -e ANTHROPIC_API_KEY -e OPENAI_API_KEY" \
        "$SMOKE_ROOT/scripts/docker-run" "$ws" -- bash -c \
        'echo "exec=$(date +%s%N)"; grep -E "^(Uid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):" /proc/self/status; "$@" 2>&1 | head -1 | sed "s/^/version=/"; echo "v0=$(date +%s%N)"' \
        _ "${version[@]}" >"$SMOKE_DIR/run.out" 2>"$SMOKE_DIR/run.err" || rc=$?
    out=$(cat "$SMOKE_DIR/run.out")
    if ! grep -q '^exec=' <<<"$out"; then
        grep -v ' INFO ' "$SMOKE_DIR/run.err" | tail -5 >&2
        fail "$image did not start the documented way (status $rc)"
        continue
    fi
    field() { sed -n "s/^$1:\s*//p" <<<"$out" | head -1; }
    check "started the documented way (status $rc)" [ "$rc" = 0 ]
    check "the agent runs as uid 1000 ($(field Uid))" grep -qE '^1000\s+1000\s+1000\s+1000$' <<<"$(field Uid)"
    zero() { for c in CapInh CapPrm CapEff CapBnd CapAmb; do [ "$(field $c)" = 0000000000000000 ] || return 1; done; }
    check "the agent holds no capability (inheritable, permitted, effective, bounding, ambient)" zero
    check "no_new_privs ($(field NoNewPrivs)), seccomp filter mode ($(field Seccomp))" \
        [ "$(field NoNewPrivs)/$(field Seccomp)" = 1/2 ]
    check "the entrypoint's self-test passed" grep -q 'ready in' "$SMOKE_DIR/run.err"
    v=$(sed -n 's/^version=//p' <<<"$out")
    check "$agent --version as the agent: $v" [ -n "$v" ]
    ex=$(sed -n 's/^exec=//p' <<<"$out")
    v0=$(sed -n 's/^v0=//p' <<<"$out")
    say "timing: docker run -> agent exec $(((ex - t0) / 1000000)) ms; $agent --version $(((v0 - ex) / 1000000)) ms"
done
[ "$SMOKE_FAILS" -eq 0 ] || die "$SMOKE_FAILS check(s) failed"
say "agent images: all checks passed"
