#!/usr/bin/env bash
# Claude Code as a user meets it in a terminal: the real CLI in airlock:claude, started the
# way `airlock run REPO --agent claude` starts it (the profile's interactive command, `claude`,
# under scripts/docker-run in a tmux pane: docker run -it), against the scripted fake of the
# Anthropic API on the rig's fake internet (tests/smoke/agent-rig.sh, fake_anthropic.py).
#
# Asserts: the first screen is Claude's prompt with the profile's permission mode ("bypass
# permissions on"), with no key pressed and none of the dialogs a fresh home used to stop at
# (the trust dialog, "Detected a custom API key ... use this API key?", "Make auto mode your
# default permission mode?"); one prompt round-trips through the fake and its answer is on
# the screen; a second session in the same home (`claude --continue`, as the next session
# of one sandbox) opens at its prompt too, shows that conversation and sends it with its next
# prompt; the fake saw the real key on every model request, the screen never shows it; every
# other destination was denied and audited and tcpdump saw nothing else leave.
# Usage: sudo tests/smoke/agent-claude-tty.sh
source "$(dirname "$0")/lib.sh"
RIG=ct
RIG_AGENT=claude
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

# Ready: the prompt, and the profile's permission mode in its footer (not auto mode).
rig_tty_sessions "$SMOKE_ROOT/tests/smoke/fake_anthropic.py" /exit /v1/messages '^❯' 'bypass permissions on'
say "the home after two starts"
rig_tty_home_has "the conversation is Claude's transcript" '.claude/projects/*/*.jsonl'
approved=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["customApiKeyResponses"]["approved"]))' \
    "$home/.claude.json" 2>&1)
check "~/.claude.json approves this start's placeholder only, not every start's ($approved)" [ "$approved" = 1 ]
rig_net_checks
say "claude in a terminal: all checks passed"
