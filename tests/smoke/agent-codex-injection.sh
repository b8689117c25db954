#!/usr/bin/env bash
# The prompt-injected model for the OpenAI Codex CLI (issue 16 item 7, docs/design.md §9), same rig as
# tests/smoke/agent-codex.sh: the real CLI in airlock:codex, started as docs/agents.md says
# (scripts/docker-run REPO -- the unattended command of agents/codex.toml), against the fake of
# the OpenAI Responses API (tests/smoke/fake_openai.py: SSE streaming, Codex's shell tool
# in whatever form it offers, its "code mode" included) under api.openai.com; github.com is
# the fake forge.
#
# The fake model orders Codex, one shell call each, to make every attempt of
# tests/smoke/injection-rig.sh (the same list and checks as the Claude Code test). Codex
# strips *KEY* variables from the environment of the commands it runs, so the injected
# commands take the key where an attacker would, from the Codex process's own
# /proc/PID/environ (the placeholder). Every attempt fails with its reason and is audited,
# the real key appears nowhere the agent can write nor at any upstream but in the bound
# Authorization header, the wire stays clean.
# AIRLOCK_SMOKE_REPORT=1 prints the report on stdout (scripts/demo-injection codex).
# Usage: sudo tests/smoke/agent-codex-injection.sh
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/injection-rig.sh"
RIG=j
RIG_AGENT=codex
RIG_GIT_EXTRA=$INJ_GIT_EXTRA
source "$(dirname "$0")/agent-rig.sh"

inj_prepare 'for p in $(pgrep -x codex); do tr "\0" "\n" </proc/$p/environ; done | sed -n "s/^OPENAI_API_KEY=//p" | head -1'
inj_script responses
rig_start "$SMOKE_ROOT/tests/smoke/fake_openai.py"
mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command codex unattended "Fix the README.")
rig_run "${cmd[@]}"
inj_checks
