#!/usr/bin/env bash
# The OpenAI Codex CLI as a user meets it in a terminal: the real CLI in airlock:codex, its
# interactive TUI started the way `airlock run REPO --agent codex` starts it (the profile's
# interactive command, `codex` with no arguments, under scripts/docker-run in a tmux pane:
# docker run -it), against the scripted fake of the OpenAI Responses API on the rig's fake
# internet (tests/smoke/agent-rig.sh, fake_openai.py).
#
# Asserts: the first screen is the TUI's prompt with the profile's approvals and sandbox
# ("permissions: YOLO mode"), with no key pressed; it used to stop before its first screen
# with "this CLI has no complete local package ... rerun the same command with --no-daemon";
# one prompt round-trips through the fake and its answer is on the screen; a second session
# in the same home (`codex resume --last`, as the next session of one sandbox) opens at its
# prompt too, shows that conversation and sends it with its next prompt; the fake saw the
# real key on every model request, the screen never shows it; every other destination was
# denied and audited and tcpdump saw nothing else leave.
# Usage: sudo tests/smoke/agent-codex-tty.sh
source "$(dirname "$0")/lib.sh"
RIG=xt
RIG_AGENT=codex
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

# Ready: the prompt, and the profile's approvals and sandbox in its header.
rig_tty_sessions "$SMOKE_ROOT/tests/smoke/fake_openai.py" /quit /v1/responses '^› ' '\? for shortcuts' 'permissions: YOLO mode'
say "the home after two starts"
rig_tty_home_has "the conversation is Codex's session" '.codex/sessions/*.jsonl'
rig_net_checks
say "codex in a terminal: all checks passed"
