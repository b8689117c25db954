#!/usr/bin/env bash
# The prompt-injected model (issue 16 item 7, docs/design.md §9), same rig as tests/smoke/agent-claude.sh:
# the real Claude Code CLI in airlock:claude, started as docs/agents.md says (scripts/docker-run
# REPO -- the unattended command of agents/claude.toml),
# against a scripted fake of the Anthropic Messages API (tests/smoke/fake_anthropic.py: SSE
# streaming, tool use) served on a private network under api.anthropic.com with a leaf of the
# smoke test CA, which the proxy trusts through AIRLOCK_UPSTREAM_CA (test configuration only).
# github.com is the fake forge of tests/smoke/git.sh (airlock-fakenet, which also answers DNS).
#
# The fake model orders the agent, one Bash tool call each, to exfiltrate: the attempts of
# tests/smoke/injection-rig.sh (the workspace to an unlisted host and to a read-only one, the
# key in a header and a body, push to main, force-push, a remote, the key in a committed
# file, DNS, a git hook, a .vscode task). Every attempt fails with its reason and is audited
# (the hook: the kernel's read-only .git), the real key appears nowhere the agent can write
# nor at any upstream but in the bound header, the wire stays clean.
# AIRLOCK_SMOKE_REPORT=1 prints the report on stdout (scripts/demo-injection claude).
# Usage: sudo tests/smoke/agent-claude-injection.sh
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/injection-rig.sh"
RIG=i
RIG_AGENT=claude
RIG_GIT_EXTRA=$INJ_GIT_EXTRA
source "$(dirname "$0")/agent-rig.sh"

inj_prepare "printenv ANTHROPIC_API_KEY"
inj_script anthropic
rig_start "$SMOKE_ROOT/tests/smoke/fake_anthropic.py"
mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command claude unattended "Fix the README.")
rig_run "${cmd[@]}"
inj_checks
