#!/usr/bin/env bash
# End-to-end proof for Aider (issue 16 item 6, docs/design.md §9): the real aider in airlock:aider
# (its venv, installed offline from the locked wheels), started as docs/agents.md says
# (scripts/docker-run REPO -- ..., the profile's unattended form: aider --yes-always
# --no-pretty --message TASK, plus --test-cmd/--auto-test), against a scripted fake of the
# OpenAI Chat Completions API, which Aider's litellm client streams
# (tests/smoke/fake_openai.py), served on a private network under api.openai.com with a leaf
# of the smoke test CA, which the proxy trusts through AIRLOCK_UPSTREAM_CA (test
# configuration only). github.com is the fake forge of tests/smoke/git.sh.
#
# The fake model answers the task with a SEARCH/REPLACE block creating hello.py; Aider applies
# it and runs the test command (hello.py, its output and the OPENAI_API_KEY Aider's process
# holds recorded). Aider's own git integration is GitPython, which reads .git directly and so
# cannot see the hidden .git (agents/aider.toml turns it off): the commit and the push of the
# sandbox branch are the shell's, after Aider, through airlock's git shim, in the same
# session. Asserts: the file and the test's output, the commit in the hidden .git and on the
# fake GitHub, the real key on every request at the fake while the agent held only the
# placeholder (and in no file, output or log it could reach), every other destination Aider
# tried denied and audited, and tcpdump shows nothing else left the appliance.
# Usage: sudo tests/smoke/agent-aider.sh
source "$(dirname "$0")/lib.sh"
RIG=a
RIG_AGENT=aider
RIG_GIT_EXTRA=
source "$(dirname "$0")/agent-rig.sh"

python3 - "$SMOKE_DIR/script.json" <<'PY'
import json, sys
edit = 'hello.py\n```python\n<<<<<<< SEARCH\n=======\nprint("hello from the agent")\n>>>>>>> REPLACE\n```\n'
json.dump([
    {"text": "I will create hello.py.\n\n" + edit},
    {"text": "The test passed; hello.py is done."},
], open(sys.argv[1], "w"))
PY
rig_start "$SMOKE_ROOT/tests/smoke/fake_openai.py"

TASK="Write hello.py that prints a greeting."
mapfile -t cmd < <(python3 "$SMOKE_ROOT/agents/profile.py" command aider unattended "$TASK")
test_cmd="python3 hello.py > .smoke/run.out && printenv OPENAI_API_KEY > .smoke/env-key"
ident="export GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid"
rig_run bash -c "$ident"'; "$@"; echo "aider=$?" > .smoke/aider.status
    git add hello.py && git commit -q -m "agent: hello" && git push -q origin '"$BRANCH"'; echo "status=$?" > .smoke/bash.status' \
    _ "${cmd[@]}" --test-cmd "$test_cmd" --auto-test

check "aider exited 0 ($(cat "$repo/.smoke/aider.status" 2>/dev/null))" [ "$(cat "$repo/.smoke/aider.status" 2>/dev/null)" = aider=0 ]
check "the session exited 0" [ "$rc" = 0 ]
check "the fake model was asked $(grep -c '"/v1/chat/completions' "$alog" || true) time(s) (the edit played)" \
    grep -q '"step": 0' "$alog"
check "hello.py as the model's edit block wrote it" [ "$(cat "$repo/hello.py" 2>/dev/null)" = 'print("hello from the agent")' ]
check "Aider ran the test command ($(cat "$repo/.smoke/run.out" 2>/dev/null))" [ "$(cat "$repo/.smoke/run.out" 2>/dev/null)" = "hello from the agent" ]
check "the commit and push after it finished ($(cat "$repo/.smoke/bash.status" 2>/dev/null))" [ "$(cat "$repo/.smoke/bash.status" 2>/dev/null)" = status=0 ]
rig_git_checks hello.py 'print("hello from the agent")' "agent: hello"
rig_key_checks "/v1/chat/completions" "$(cat "$repo/.smoke/env-key" 2>/dev/null || true)"
rig_brief_checks
rig_net_checks
say "aider end to end: all checks passed"
