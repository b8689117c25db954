#!/usr/bin/env bash
# End-to-end proof for the OpenAI Codex CLI (issue 16 item 6, docs/design.md §9): the real CLI in
# airlock:codex, started as docs/agents.md says (scripts/docker-run REPO -- codex exec
# --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check TASK, the profile's
# unattended form), against a scripted fake of the OpenAI Responses API
# (tests/smoke/fake_openai.py: SSE streaming, tool calls, Codex's "code mode" included)
# served on a private network under api.openai.com with a leaf of the smoke test CA, which
# the proxy trusts through AIRLOCK_UPSTREAM_CA (test configuration only). github.com is the
# fake forge of tests/smoke/git.sh (airlock-fakenet, which also answers DNS).
#
# The fake model: apply_patch adds hello.py; a shell call runs it, records the OPENAI_API_KEY
# the Codex process holds (Codex strips *KEY* variables from its tools' environment, so it
# is read from the CLI's own /proc/PID/environ), commits through the shim and pushes the
# sandbox branch; then "done". Asserts: the file and its output, the commit in the hidden
# .git and on the fake GitHub, the real key on every request at the fake while the agent
# held only the placeholder (and the real key in no file, output or log the agent could
# reach), every other destination the CLI tried denied and audited, and tcpdump shows
# nothing else left the appliance.
# Usage: sudo tests/smoke/agent-codex.sh
source "$(dirname "$0")/lib.sh"
RIG=x
RIG_AGENT=codex
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

ident="GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid"
python3 - "$SMOKE_DIR/script.json" "$ident" "$BRANCH" <<'PY'
import json, sys
path, ident, branch = sys.argv[1:]
content = 'print("hello from the agent")\n'
key = ("for p in $(pgrep -x codex); do tr '\\0' '\\n' < /proc/$p/environ; done"
       " | sed -n 's/^OPENAI_API_KEY=//p' | head -1 > .smoke/env-key")
json.dump([
    {"patch": "*** Begin Patch\n*** Add File: hello.py\n+" + content + "*** End Patch\n",
     "fallback": f"printf '%s' {json.dumps(content)} > hello.py"},
    {"shell": (f"cd /workspace && python3 hello.py > .smoke/run.out; {key}; "
               f"git add hello.py && {ident} git commit -q -m 'agent: hello' && git push -q origin {branch}; "
               "echo status=$? > .smoke/bash.status")},
    {"text": "Done: hello.py written, run, committed and pushed."},
], open(path, "w"))
PY
rig_start "$SMOKE_ROOT/tests/smoke/fake_openai.py"

TASK="Write hello.py that prints a greeting, run it, commit it and push the branch."
mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command codex unattended "$TASK")
rig_run "${cmd[@]}"

check "codex exited 0" [ "$rc" = 0 ]
check "the fake model was asked $(grep -c '"/v1/responses' "$alog" || true) time(s), reached the last step" \
    grep -q '"step": 2' "$alog"
rig_task_checks
rig_git_checks hello.py 'print("hello from the agent")' "agent: hello"
rig_key_checks "/v1/responses" "$(cat "$repo/.smoke/env-key" 2>/dev/null || true)"
rig_brief_checks
rig_net_checks
say "codex end to end: all checks passed"
