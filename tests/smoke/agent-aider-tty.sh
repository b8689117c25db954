#!/usr/bin/env bash
# Aider as a user meets it in a terminal: the real aider in airlock:aider, started the way
# `airlock run REPO --agent aider` starts it (the profile's interactive command, `aider`,
# under scripts/docker-run in a tmux pane: docker run -it), against the scripted fake of the
# OpenAI Chat Completions API on the rig's fake internet (tests/smoke/agent-rig.sh,
# fake_openai.py).
#
# Asserts: the first screen is Aider's prompt, with no key pressed and no setup question;
# one prompt round-trips through the fake and its answer is on the screen; a second session
# in the same home (`aider --restore-chat-history`, as the next session of one sandbox)
# opens at its prompt, restores that conversation and sends it with its next prompt; Aider's
# own files (input and chat history, tags cache) are in its home: none appears in the
# workspace, whose git status stays clean (they used to be uncommitted work, so every session
# ended "kept (stopped)"); the fake saw the real key on every model request, the screen never
# shows it; every other destination was denied and audited and tcpdump saw nothing else leave.
# Usage: sudo tests/smoke/agent-aider-tty.sh
source "$(dirname "$0")/lib.sh"
RIG=at
RIG_AGENT=aider
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

# Ready: the prompt, under the banner with the profile's settings (git integration off).
# Aider restores a conversation without replaying it on the screen.
TTY_RESUMED="Restored previous conversation history"
rig_tty_sessions "$SMOKE_ROOT/tests/smoke/fake_openai.py" /exit /v1/chat/completions '^> ?$' '^Aider v[0-9]' '^Git repo: none'
say "the home after two starts, and the workspace"
rig_tty_home_has "the conversation is Aider's chat history" '.aider/chat.history.md'
found=$(cd "$repo" && find . -path ./.git -prune -o -name '.aider*' -print | sort | tr '\n' ' ')
check "no Aider file in the workspace${found:+ (found: $found)}" [ -z "$found" ]
status=$(hostgit -C "$repo" status --porcelain --untracked-files=all | tr '\n' ' ')
check "the workspace has no uncommitted work after the sessions${status:+ ($status)}" [ -z "$status" ]
rig_net_checks
say "aider in a terminal: all checks passed"
