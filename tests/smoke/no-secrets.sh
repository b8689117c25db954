#!/usr/bin/env bash
# Docker smoke test (issue 16 item 3): a newcomer starts the sandbox with neither key.
# The policy binds ANTHROPIC_API_KEY (env) to api.anthropic.com and the GitHub token (the
# secret file GITHUB_TOKEN_FILE fills) to github.com; scripts/docker-run runs without either,
# in front of a fake internet (airlock-fakenet: api.anthropic.com, and github.com serving
# acme/app over smart HTTP; its test CA trusted by the proxy only, AIRLOCK_UPSTREAM_CA).
#
# - the container starts, with one warning line per missing credential naming the knob;
# - the agent still holds a placeholder in ANTHROPIC_API_KEY (an agent CLI starts);
# - curl to the LLM API gets the proxy's 403 credential-missing naming the credential and
#   ANTHROPIC_API_KEY, audited, and nothing reaches the fake API;
# - git fetch of the (public) repository works anonymously; git push through the shim is
#   refused with a line that names the missing token and GITHUB_TOKEN_FILE, audited, and no
#   receive-pack reaches the fake forge;
# - a credential that IS configured but unusable (a token file the agent can read, a secret
#   path that is a directory) still stops the start: exit 78, both problems at once, and the
#   unset key beside them is no problem.
# Usage: sudo tests/smoke/no-secrets.sh          (root: the audit volume on the host)
source "$(dirname "$0")/lib.sh"
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

NET=$SMOKE_ID-nnet
UP=$SMOKE_ID-nup
APP=$SMOKE_ID-napp
AUDIT=$SMOKE_ID-naudit
APP4=203.0.113.130
APP6=2001:db8:116::2
UP4=203.0.113.140
UP6=2001:db8:116::10
OWNER=acme
NAME=app
BRANCH=sandbox/smoke/work
TOKEN=ghp_NOSECRETSTOKEN$RANDOM$RANDOM

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"

# The forge: github.com/acme/app with main (a push would need $TOKEN, which nobody gives).
gitroot=$SMOKE_DIR/gitroot
upstream=$gitroot/$OWNER/$NAME.git
hostgit() { git -c safe.directory='*' -c user.name=seed -c user.email=seed@example.invalid "$@"; }
mkdir -p "$upstream"
hostgit -C "$upstream" init -q --bare -b main
repo=$SMOKE_DIR/repo
hostgit clone -q "file://$upstream" "$repo" 2>/dev/null
echo hello >"$repo/README.md"
hostgit -C "$repo" add -A
hostgit -C "$repo" commit -q -m seed
hostgit -C "$repo" push -q origin main
hostgit -C "$repo" remote set-url origin "https://github.com/$OWNER/$NAME.git"
hostgit -C "$repo" checkout -q -b "$BRANCH"
printf '/agent.sh\n' >>"$repo/.git/info/exclude"

cat >"$SMOKE_DIR/policy.toml" <<TOML
[sandbox]
name = "smoke"

[network]
allow = ["api.anthropic.com", "github.com"]

# The API's calls are POSTs: an allow rule lets them through on a host that is otherwise
# read-only.
[[rules]]
host = "api.anthropic.com"
method = "POST"
path = "/v1/**"
action = "allow"

[[credentials]]
name = "anthropic"
source = { env = "ANTHROPIC_API_KEY" }
hosts = ["api.anthropic.com"]
header = "x-api-key"
format = "{}"

[[credentials]]
preset = "github"
source = { file = "/run/secrets/github_token" }

[git]
repositories = ["github.com/$OWNER/$NAME"]
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"

python3 - "$SMOKE_DIR" "$TOKEN" "$UP4" "$UP6" <<'PY'
import json, sys
d, token, up4, up6 = sys.argv[1:]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "https": [{"ip": "::", "port": 443, "names": ["api.anthropic.com", "github.com"]}],
    "dns": [{"ip": "::", "port": 53}],
    "zone": {"api.anthropic.com": [up4, up6], "github.com": [up4, up6]},
    "git": {"root": "/git", "host": "github.com", "token": token},
}, open(f"{d}/fakenet.json", "w"))
PY
chmod 0600 "$SMOKE_DIR/fakenet.json"
mkdir -p "$SMOKE_DIR/log"

# The agent's session: `t NAME cmd...` prints NAME=<status> <output on one line>.
cat >"$repo/agent.sh" <<'SH'
echo "started=$(date +%s%N)"
t() { n=$1; shift; o=$("$@" 2>&1); r=$?; printf '%s=%s %s\n' "$n" "$r" "$(printf %s "$o" | tr '\n' ' ')"; }
cd /workspace
echo "key=$ANTHROPIC_API_KEY"
t llm curl -sS --max-time 20 -w ' status=%{http_code}' https://api.anthropic.com/v1/messages \
    -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' \
    -H 'content-type: application/json' -d '{"model":"m","max_tokens":1,"messages":[]}'
export GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid
export GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid
t fetch git fetch origin
t main git rev-parse origin/main
echo change >>README.md
t commit git commit -qam "agent change"
t push git push origin sandbox/smoke/work
SH
chmod 0644 "$repo/agent.sh"
chown -R 1000:1000 "$repo"

say "network $NET (internal, 203.0.113.128/26), api.anthropic.com and github.com at $UP"
track_network "$NET"
docker network create --internal --subnet 203.0.113.128/26 --gateway 203.0.113.129 \
    --ipv6 --subnet 2001:db8:116::/64 "$NET" >/dev/null
track_container "$UP"
docker run -d --name "$UP" --network "$NET" --ip "$UP4" --ip6 "$UP6" \
    -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR/fakenet.json:/cfg/fakenet.json:ro" \
    -v "$SMOKE_DIR/log:/log" -v "$gitroot:/git" \
    airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
smoke_wait_ready "$UP"
say "set-up $(ms "$T0") ms"

# run NAME [VAR=VALUE...]: scripts/docker-run as docs/docker.md says, without ANTHROPIC_API_KEY
# and GITHUB_TOKEN_FILE (unless given), `bash /workspace/agent.sh` as the agent; stdout and
# stderr in NAME.out / NAME.err, the status in $rc. RUN_POLICY and RUN_ARGS: another policy,
# more docker run arguments.
run() {
    local name=$1; shift
    track_container "$APP-$name"
    rc=0
    env -u ANTHROPIC_API_KEY -u GITHUB_TOKEN_FILE -u SUDO_USER "$@" \
        AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE="$SMOKE_IMAGE" AIRLOCK_POLICY="${RUN_POLICY:-$SMOKE_DIR/policy.toml}" \
        AIRLOCK_AUDIT_VOLUME="$AUDIT" AIRLOCK_GIT_USER_NAME=Smoke AIRLOCK_GIT_USER_EMAIL=smoke@example.invalid \
        AIRLOCK_DOCKER_ARGS="--name $APP-$name --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4 -v $SMOKE_DIR/ca.pem:/etc/ssl/fakenet-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/fakenet-ca.pem ${RUN_ARGS:-}" \
        timeout 120 "$SMOKE_ROOT/scripts/docker-run" "$repo" -- bash /workspace/agent.sh \
        >"$SMOKE_DIR/$name.out" 2>"$SMOKE_DIR/$name.err" || rc=$?
}

say "starting with neither key (scripts/docker-run, no ANTHROPIC_API_KEY, no GITHUB_TOKEN_FILE)"
track_volume "$AUDIT"
t0=$(date +%s%N)
run none
session_ms=$(ms "$t0")
out=$(cat "$SMOKE_DIR/none.out")
err=$(cat "$SMOKE_DIR/none.err")
step() { sed -n "s/^$1=\([0-9]*\).*/\1/p" <<<"$out" | head -1; }
said() { sed -n "s/^$1=[0-9]* //p" <<<"$out" | head -1; }
get() { sed -n "s/^$1=//p" <<<"$out" | head -1; }
if [ -z "$(get started)" ]; then
    grep -v ' INFO ' "$SMOKE_DIR/none.err" | tail -20 >&2
    die "the sandbox did not start without the keys (status $rc)"
fi

say "start-up"
check "the sandbox started and the agent's session ended 0 ($rc)" [ "$rc" = 0 ]
warned() { grep -c "^airlock: warning: credential \"$1\" is not configured" <<<"$err"; }
check "one warning line for the missing key ($(warned anthropic))" [ "$(warned anthropic)" = 1 ]
check "it says how to give it (ANTHROPIC_API_KEY=... scripts/docker-run, -e)" \
    grep -q 'credential "anthropic" is not configured (ANTHROPIC_API_KEY is not set).*ANTHROPIC_API_KEY=\.\.\. scripts/docker-run REPO.*-e ANTHROPIC_API_KEY' <<<"$err"
check "one warning line for the missing token ($(warned github))" [ "$(warned github)" = 1 ]
check "it names GITHUB_TOKEN_FILE and git push" \
    grep -q 'credential "github" is not configured.*git push.*GITHUB_TOKEN_FILE=<that file> scripts/docker-run' <<<"$err"
placeholder() { case "$(get key)" in airlock-placeholder-anthropic-?*) return 0 ;; esac; return 1; }
check "the agent holds a placeholder in ANTHROPIC_API_KEY ($(get key))" placeholder

say "the LLM API"
llm=$(said llm)
check "curl to api.anthropic.com: 403 ($(grep -o 'status=[0-9]*' <<<"$llm"))" grep -q 'status=403$' <<<"$llm"
check "the answer is credential-missing, naming the credential" \
    grep -q '"error":"credential-missing".*"credential":"anthropic"' <<<"$llm"
check "and the fix (ANTHROPIC_API_KEY, scripts/docker-run)" \
    grep -q 'set ANTHROPIC_API_KEY on the host and start the sandbox again.*scripts/docker-run' <<<"$llm"

say "git"
check "git fetch works without the token (a public repository: $(step fetch) $(said fetch))" [ "$(step fetch)" = 0 ]
check "origin/main fetched ($(said main))" [ "$(said main | tr -d ' ')" = "$(git --git-dir "$upstream" rev-parse main)" ]
check "commit ($(step commit))" [ "$(step commit)" = 0 ]
push=$(said push)
pushed_not() { [ -n "$(step push)" ] && [ "$(step push)" != 0 ]; }
check "git push is refused (status $(step push))" pushed_not
check "the refusal reaches the terminal naming the missing token ($(cut -c1-160 <<<"$push"))" \
    grep -q 'remote error: airlock: credential-missing: git push to github.com needs the git token (credential "github")' <<<"$push"
check "and says how to provide it (GITHUB_TOKEN_FILE)" grep -q 'GITHUB_TOKEN_FILE=<that file> scripts/docker-run' <<<"$push"
check "the branch did not reach the forge" bash -c "! git --git-dir '$upstream' rev-parse -q --verify 'refs/heads/$BRANCH' >/dev/null"

say "upstream and the audit log"
ulog=$SMOKE_DIR/log/fakenet.jsonl
check "the fake API never received a request" bash -c "! grep '\"kind\":\"http\"' '$ulog' | grep -q 'api.anthropic.com'"
check "no receive-pack reached the forge" bash -c "! grep -q 'git-receive-pack' '$ulog'"
check "the fetch did (upload-pack)" grep -q 'git-upload-pack' "$ulog"
audit="$(volume_path "$AUDIT")/audit.jsonl"
audited() {
    python3 - "$audit" "$1" "$2" <<'PY'
import json, sys
path, host, cred = sys.argv[1:]
lines = [json.loads(l) for l in open(path) if l.strip()]
sys.exit(not any(l.get("reason") == "credential-missing" and l.get("decision") == "deny"
                 and l.get("host") == host and l.get("credential") == cred for l in lines))
PY
}
check "audit: api.anthropic.com refused credential-missing (anthropic)" audited api.anthropic.com anthropic
check "audit: github.com push refused credential-missing (github)" audited github.com github

say "configured but unusable: the start is refused, every problem at once"
echo -n "$TOKEN" >"$SMOKE_DIR/readable_token"
chmod 0644 "$SMOKE_DIR/readable_token"
mkdir -p "$SMOKE_DIR/a-dir"
cat "$SMOKE_DIR/policy.toml" >"$SMOKE_DIR/policy2.toml"
cat >>"$SMOKE_DIR/policy2.toml" <<'TOML'

[[credentials]]
name = "other"
source = { file = "/run/secrets/other" }
hosts = ["api.anthropic.com"]
header = "authorization"
format = "Bearer {}"
TOML
chmod 0644 "$SMOKE_DIR/policy2.toml"
RUN_POLICY=$SMOKE_DIR/policy2.toml RUN_ARGS="-v $SMOKE_DIR/a-dir:/run/secrets/other:ro" \
    run bad GITHUB_TOKEN_FILE="$SMOKE_DIR/readable_token"
bad_err=$(grep '^airlock: ' "$SMOKE_DIR/bad.err" || true)
check "exit 78 ($rc)" [ "$rc" = 78 ]
check "the agent never ran" bash -c "! grep -q started '$SMOKE_DIR/bad.out'"
check "the token file the agent can read is named with its host path and the fix" \
    grep -q "credential \"github\": secret file $SMOKE_DIR/readable_token (GITHUB_TOKEN_FILE.*readable by the agent.*chmod 0400" <<<"$bad_err"
check "the directory is named in the same refusal" grep -q 'credential "other": secret file /run/secrets/other .*is a directory' <<<"$bad_err"
no_key_line() { ! grep -q 'ANTHROPIC_API_KEY' <<<"$bad_err"; }
check "the unset ANTHROPIC_API_KEY is no problem of its own" no_key_line

say "timing: the keyless session $session_ms ms; test total $(ms "$T0") ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; cat "$SMOKE_DIR/none.out" >&2
    say "entrypoint stderr (airlock lines):"; grep '^airlock' "$SMOKE_DIR/none.err" >&2 || true
    say "refused start:"; cat "$SMOKE_DIR/bad.err" >&2
    say "audit denials:"; grep '"decision":"deny"' "$audit" | tail -10 >&2 || true
    die "$SMOKE_FAILS check(s) failed"
fi
say "no-secrets: all checks passed"
