#!/usr/bin/env bash
# End-to-end proof for Claude Code (issue 16 item 6, docs/design.md §9): the real CLI in airlock:claude,
# started as docs/agents.md says (scripts/docker-run REPO -- claude -p TASK
# --dangerously-skip-permissions, the profile's unattended form), against a scripted fake of
# the Anthropic Messages API (tests/smoke/fake_anthropic.py: SSE streaming, tool use) served
# on a private network under api.anthropic.com with a leaf of the smoke test CA, which the
# proxy trusts through AIRLOCK_UPSTREAM_CA (test configuration only). github.com is the
# fake forge of tests/smoke/git.sh (airlock-fakenet, which also answers DNS).
#
# The fake model: Write hello.py; Bash: run it, record the agent's ANTHROPIC_API_KEY, commit
# through the shim and push the sandbox branch; then "done". Asserts: the file and its output,
# the commit in the hidden .git and on the fake GitHub, the fake saw the real key on every
# request while the agent's environment held only the placeholder (and the real key is in no
# file, output or log the agent could write or read), every other destination the CLI tried
# was denied and audited, and tcpdump shows nothing else left the appliance.
# Usage: sudo tests/smoke/agent-claude.sh
source "$(dirname "$0")/lib.sh"
RIG=c
RIG_AGENT=claude
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

# The model's script.
ident="GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid"
python3 - "$SMOKE_DIR/script.json" "$ident" "$BRANCH" <<'PY'
import json, sys
path, ident, branch = sys.argv[1:]
content = 'print("hello from the agent")\n'
command = ("cd /workspace && python3 hello.py > .smoke/run.out && printenv ANTHROPIC_API_KEY > .smoke/env-key; "
           f"git add hello.py && {ident} git commit -q -m 'agent: hello' && git push -q origin {branch}; "
           "echo status=$? > .smoke/bash.status")
json.dump([
    {"tool": "Write", "input": {"file_path": "/workspace/hello.py", "content": content},
     "shell": f"printf '%s' {json.dumps(content)} > /workspace/hello.py"},
    {"tool": "Bash", "input": {"command": command, "description": "run, commit, push"},
     "shell": command},
    {"text": "Done: hello.py written, run, committed and pushed."},
], open(path, "w"))
PY
rig_start "$SMOKE_ROOT/tests/smoke/fake_anthropic.py"

TASK="Write hello.py that prints a greeting, run it, commit it and push the branch."
mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command claude unattended "$TASK")
rig_run "${cmd[@]}"

check "claude exited 0" [ "$rc" = 0 ]
check "the fake model was asked $(grep -c '"/v1/messages' "$alog" || true) time(s), reached the last step" \
    grep -q '"step": 2' "$alog"
rig_task_checks
rig_git_checks hello.py 'print("hello from the agent")' "agent: hello"
rig_key_checks "/v1/messages" "$(cat "$repo/.smoke/env-key" 2>/dev/null || true)"
rig_brief_checks
rig_net_checks
say "claude end to end: all checks passed"
