#!/usr/bin/env bash
# All Docker smoke tests: build the image once (offline, cached base), then run each test.
# Called at the end of scripts/test. Usage: sudo tests/smoke/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ]; then
    echo "tests/smoke/run.sh: tcpdump on the bridge and the audit volume need root" >&2
    exit 1
fi
for tool in docker tcpdump openssl python3; do
    command -v "$tool" >/dev/null || { echo "tests/smoke/run.sh: $tool is required" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "tests/smoke/run.sh: the Docker daemon is not reachable" >&2; exit 1; }
t0=$SECONDS
echo "== docker smoke tests"
# A run killed before its traps ran leaves its containers and networks behind, and the next
# run's fixed test subnets would then overlap them: remove them, saying what went.
stale_c=$(docker ps -aq --filter name=airlock-smoke-)
[ -z "$stale_c" ] || { echo "removing stale smoke containers: $(echo $stale_c)"; docker rm -f $stale_c >/dev/null; }
stale_n=$(docker network ls -q --filter name=airlock-smoke-)
[ -z "$stale_n" ] || { echo "removing stale smoke networks: $(echo $stale_n)"; docker network rm $stale_n >/dev/null; }
scripts/build-image "${AIRLOCK_IMAGE:-airlock:latest}" >/dev/null
export AIRLOCK_SMOKE_IMAGE_BUILT=1
tests/smoke/wire_check_selftest.sh
tests/smoke/image.sh
tests/smoke/egress.sh
# The workspace's own secret files as exact needles (issue 21 item 2).
tests/smoke/workspace-secrets.sh
tests/smoke/git.sh
# Nested repositories: never entered by the git API, refused at start.
tests/smoke/git-nested.sh
# Starting with neither key (issue 16 item 3) and the operator's extra CA (item 4).
tests/smoke/no-secrets.sh
tests/smoke/extra-ca.sh
# The same wire check for a sandbox the airlock CLI starts (issue 18).
tests/smoke/cli-wire.sh
# Nothing a CLI sandbox writes runs on the host; it reads only its base's objects.
tests/smoke/cli-escape.sh
# The operator's admin API on a CLI sandbox; the agent cannot reach it (issue 41).
tests/smoke/admin-api.sh
# A warm pod holds no secret until it is claimed; two claims, two sessions (issue 44).
tests/smoke/claim.sh
# Every documented way to run (compose v1 and v2, the devcontainer, the Pod) starts.
tests/smoke/cli-run-ways.sh
# The friction benchmark (issue 17 item 8): an honest command refused or failing fails here.
tests/friction/run.sh
tests/smoke/limits.sh
tests/smoke/audit-kill.sh
# Agents (issue 16): the pinned CLIs fetched once into .cache/agents (scripts/fetch-agents),
# each agent image built once, then its tests (AIRLOCK_SMOKE_AGENTS picks the agents).
ta=$SECONDS
export AIRLOCK_SMOKE_AGENTS=${AIRLOCK_SMOKE_AGENTS:-claude codex aider}
for agent in $AIRLOCK_SMOKE_AGENTS; do
    tb=$SECONDS
    AIRLOCK_NO_BUILD=1 scripts/build-agent-image "$agent" >/dev/null
    echo "== airlock:$agent built (or found up to date) in $((SECONDS - tb)) s"
done
tests/smoke/agent-image.sh
for agent in $AIRLOCK_SMOKE_AGENTS; do
    tb=$SECONDS
    "tests/smoke/agent-$agent.sh"
    # The agent as a user meets it: interactive, in a real terminal (tmux), two starts with one home.
    "tests/smoke/agent-$agent-tty.sh"
    [ "$agent" != claude ] || tests/smoke/agent-claude-injection.sh
    # Claude Code in a sandbox of the airlock CLI: new, attach, detach, stop/start, --continue, destroy.
    [ "$agent" != claude ] || tests/smoke/cli-agent-tty.sh
    # The prompt-injected model (issue 16 item 7) for codex and aider (claude's is the line above).
    [ "$agent" = claude ] || "tests/smoke/agent-$agent-injection.sh"
    echo "== $agent end to end in $((SECONDS - tb)) s"
done
# pip and npm through the proxy to fake registries, in an agent image (airlock:codex).
if grep -qw codex <<<"$AIRLOCK_SMOKE_AGENTS"; then
    tests/smoke/agent-packages.sh
    # pip behind a private mirror's CA: EXTRA_CA_FILE vs the proxy-only AIRLOCK_UPSTREAM_CA.
    tests/smoke/extra-ca-pip.sh
fi
echo "== agents added $((SECONDS - ta)) s"
echo "== docker smoke tests passed in $((SECONDS - t0)) s"
