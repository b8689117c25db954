#!/usr/bin/env bash
# Docker smoke test for git (issue 6): the appliance started exactly as docs/docker.md says
# (scripts/docker-run, a git checkout so docker/run-flags.sh hands REPO/.git to the git API)
# on a private network in front of a fake github.com (`airlock-fakenet` running
# `git http-backend` as a CGI; a pre-receive hook logs every ref update that reaches it).
# The GitHub token is a root-owned 0400 file mounted as GITHUB_TOKEN_FILE says; the test CA
# is trusted by the proxy only (AIRLOCK_UPSTREAM_CA).
#
# As the agent, in the workspace (a checkout of https://github.com/acme/app.git on its
# sandbox branch): edit, commit, `git push` lands upstream (hook log, upstream ref = HEAD);
# a rewritten commit pushed with --force or a + refspec, and a push to main, are refused
# with their reasons and nothing more reaches upstream; /usr/bin/git (past the shim) pushing
# straight to github.com is refused by the proxy (git-push-blocked); the token is in none
# of the agent's output and no /proc/*/environ or cmdline the agent can read. tcpdump on
# the bridge proves every packet the appliance sent belongs to a connection the proxy
# audited (or is a DNS query for github.com, or ARP/ND). Mid-session the host pushes straight
# to the proxy's git service port as the git API's user (`docker exec -u airlock-git`: its
# group passes the firewall there): force main, delete the sandbox branch, create a tag; the
# proxy refuses each without the git API's ticket (git-ticket-missing) and upstream is
# unchanged.
# Usage: sudo tests/smoke/git.sh          (root: tcpdump, the audit volume on the host)
source "$(dirname "$0")/lib.sh"
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

NET=$SMOKE_ID-gnet
UP=$SMOKE_ID-gup
APP=$SMOKE_ID-gapp
AUDIT=$SMOKE_ID-gaudit
APP4=192.0.2.2
APP6=2001:db8:192::2
UP4=192.0.2.10
UP6=2001:db8:192::10
OWNER=acme
NAME=app
BRANCH=sandbox/smoke/work
TOKEN=ghp_SMOKETOKEN$RANDOM$RANDOM$RANDOM
ZERO=0000000000000000000000000000000000000000

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"

# The forge: github.com/acme/app, seeded with main; its hook logs ref updates from then on.
gitroot=$SMOKE_DIR/gitroot
upstream=$gitroot/$OWNER/$NAME.git
hooks_log=$gitroot/hooks.log
hostgit() { git -c safe.directory='*' -c user.name=seed -c user.email=seed@example.invalid "$@"; }
mkdir -p "$upstream"
hostgit -C "$upstream" init -q --bare -b main
hostgit -C "$upstream" config receive.denyNonFastForwards false
hostgit -C "$upstream" config receive.denyDeletes false
repo=$SMOKE_DIR/repo
hostgit clone -q "file://$upstream" "$repo" 2>/dev/null
mkdir -p "$repo/src"
echo hello >"$repo/README.md"
echo 'pub fn f() {}' >"$repo/src/lib.rs"
hostgit -C "$repo" add -A
hostgit -C "$repo" commit -q -m seed
hostgit -C "$repo" push -q origin main
main=$(hostgit -C "$repo" rev-parse main)
cat >"$upstream/hooks/pre-receive" <<SH
#!/bin/sh
while read old new ref; do echo "$OWNER/$NAME \$old \$new \$ref" >> /git/hooks.log; done
SH
chmod 0755 "$upstream/hooks/pre-receive"
: >"$hooks_log"
chmod 0666 "$hooks_log"

# The workspace: that checkout, origin on github.com, the sandbox branch checked out at start.
hostgit -C "$repo" remote set-url origin "https://github.com/$OWNER/$NAME.git"
hostgit -C "$repo" checkout -q -b "$BRANCH"
# The test's own files in the workspace stay out of git status.
printf '/agent.sh\n/.smoke/\n' >>"$repo/.git/info/exclude"
mkdir -p "$repo/.smoke"

echo -n "$TOKEN" >"$SMOKE_DIR/github_token"
chmod 0400 "$SMOKE_DIR/github_token"
# The operator's git identity, where scripts/docker-run reads it (the host user's config).
mkdir -p "$SMOKE_DIR/operator"
printf '[user]\n\tname = Smoke Operator\n\temail = operator@example.invalid\n' >"$SMOKE_DIR/operator/.gitconfig"
cat >"$SMOKE_DIR/policy.toml" <<TOML
[sandbox]
name = "smoke"

[network]
allow = ["github.com"]

[[credentials]]
preset = "github"
source = { file = "/run/secrets/github_token" }

[git]
repositories = ["github.com/$OWNER/$NAME"]
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"

python3 - "$SMOKE_DIR" "$TOKEN" <<PY
import json, sys
d, token = sys.argv[1], sys.argv[2]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "https": [{"ip": "::", "port": 443, "names": ["github.com"]}],
    "dns": [{"ip": "::", "port": 53}],
    "zone": {"github.com": ["$UP4", "$UP6"]},
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
# No identity anywhere but the operator's default (issue 17 item 3): the first commit works.
t ident_commit git commit -q --allow-empty -m "first, as the operator"
t ident git log -1 --format=%an/%ae/%cn/%ce
export GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid
export GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid
t which command -v git
t start git rev-parse --abbrev-ref HEAD
echo 'pub fn f() { g() }' >src/lib.rs
t commit git commit -qam "agent change"
t head git rev-parse HEAD
# The agent tries to stop, kill and deprioritise the git API (issue 14 item 6): all refused,
# the same git API serves the push below.
gitapi() { for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = airlock-git-api ] && echo "${p#/proc/}"; done | head -1; }
api=$(gitapi)
echo "gitapi_before=$api"
t gitapi_stop kill -STOP "$api"
t gitapi_kill kill -9 "$api"
t gitapi_renice renice -n 19 -p "$api"
sleep 0.2
echo "gitapi_after=$(gitapi) $(grep '^State:' /proc/$api/status | cut -f2 | cut -c1) $(cut -d' ' -f19 /proc/$api/stat)"
# The push runs while the agent reads every /proc/*/environ and cmdline it can (the token
# must be in none: the host greps what was read). The canary in the agent's own environment
# proves the scan reads what it claims to.
export SCAN_CANARY=airlock-scan-canary-$$
p0=$(date +%s%N)
t push git push origin sandbox/smoke/work >.smoke/push.line 2>&1 &
push=$!
i=0
while [ $i -lt 5 ] || kill -0 $push 2>/dev/null; do
    for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null && echo; done >>.smoke/proc-scan
    i=$((i + 1))
done
wait $push
echo "push_ms=$((($(date +%s%N) - p0) / 1000000))"
cat .smoke/push.line
echo "proc_scans=$i"
echo "proc_readable=$(for f in /proc/[0-9]*/environ; do cat "$f" >/dev/null 2>&1 && echo; done | wc -l)"
t tracking git rev-parse origin/sandbox/smoke/work
# Rewrite the pushed commit and try to force it over the upstream branch.
t amend git commit -q --amend -m "rewritten"
t rewritten git rev-parse HEAD
t force git push --force origin sandbox/smoke/work
t plus git push origin +sandbox/smoke/work
t main git push origin HEAD:main
# The host now attacks the service port as the git API's user; wait until it is done.
touch .smoke/attack-now
while [ ! -e .smoke/attacked ]; do sleep 0.05; done
# The real git binary, past the shim, in a repository of the agent's own: straight to
# github.com through the proxy, which refuses receive-pack there.
mkdir -p "$HOME/direct" && cd "$HOME/direct" && /usr/bin/git init -q -b x . &&
    echo x >x && /usr/bin/git add x && /usr/bin/git commit -qm direct
t direct env GIT_TERMINAL_PROMPT=0 /usr/bin/git push https://github.com/acme/app.git HEAD:refs/heads/sandbox/smoke/direct
t secret_file cat /run/secrets/github_token
cd /workspace
t status git status --short
SH
chmod 0644 "$repo/agent.sh"
chown -R 1000:1000 "$repo"

say "network $NET (internal, 192.0.2.0/24 and 2001:db8:192::/64), github.com at $UP"
track_network "$NET"
docker network create --internal --subnet 192.0.2.0/24 --gateway 192.0.2.1 \
    --ipv6 --subnet 2001:db8:192::/64 "$NET" >/dev/null
track_container "$UP"
docker run -d --name "$UP" --network "$NET" --ip "$UP4" --ip6 "$UP6" \
    -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR/fakenet.json:/cfg/fakenet.json:ro" \
    -v "$SMOKE_DIR/log:/log" -v "$gitroot:/git" \
    airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
smoke_wait_ready "$UP"

smoke_capture "$NET"
say "set-up $(ms "$T0") ms"

say "starting the appliance as docs/docker.md says (scripts/docker-run, GITHUB_TOKEN_FILE)"
track_volume "$AUDIT"
track_container "$APP"
t0=$(date +%s%N)
env -u SUDO_USER HOME="$SMOKE_DIR/operator" \
AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$SMOKE_IMAGE AIRLOCK_POLICY=$SMOKE_DIR/policy.toml \
AIRLOCK_AUDIT_VOLUME=$AUDIT GITHUB_TOKEN_FILE=$SMOKE_DIR/github_token \
AIRLOCK_DOCKER_ARGS="--name $APP --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4 -v $SMOKE_DIR/ca.pem:/etc/ssl/fakenet-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/fakenet-ca.pem" \
    "$SMOKE_ROOT/scripts/docker-run" "$repo" -- bash /workspace/agent.sh \
    >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" &
session=$!
# The git API's identity, straight to the service port: what code git ran for the agent
# would hold. A fresh repository with an unrelated commit, pushed with the git API's
# transport settings (the port as proxy, the appliance CA).
for _ in $(seq 600); do [ -e "$repo/.smoke/attack-now" ] || ! kill -0 $session 2>/dev/null && break; sleep 0.1; done
docker exec -u airlock-git "$APP" sh -c '
t() { n=$1; shift; o=$("$@" 2>&1); r=$?; printf "%s=%s %s\n" "$n" "$r" "$(printf %s "$o" | tr "\n" " ")"; }
export HOME=/tmp/service-attack GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0
echo "svc_id=$(id -u):$(id -G | tr " " ,)"
g() { /usr/bin/git -c http.proxy=http://127.0.0.1:15002 -c http.sslCAInfo=/run/airlock/ca.pem \
    -c user.name=x -c user.email=x@example.invalid "$@"; }
mkdir -p "$HOME" && cd "$HOME" && g init -q evil && cd evil && echo pwned >pwned && g add pwned && g commit -qm pwned
url=https://github.com/acme/app.git
t svc_force g push --force "$url" HEAD:refs/heads/main
t svc_delete g push "$url" :refs/heads/sandbox/smoke/work
t svc_tag g push "$url" HEAD:refs/tags/v666
t svc_fetch g ls-remote "$url"
' >"$SMOKE_DIR/attack.out" 2>&1 || true
touch "$repo/.smoke/attacked"
wait $session || true
session_ms=$(ms "$t0")
sleep 0.5
kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
out=$(cat "$SMOKE_DIR/agent.out")
# step NAME: the status of step NAME; said NAME: its output.
step() { sed -n "s/^$1=\([0-9]*\).*/\1/p" <<<"$out" | head -1; }
said() { sed -n "s/^$1=[0-9]* //p" <<<"$out" | head -1; }
get() { sed -n "s/^$1=//p" <<<"$out" | head -1; }
if [ -z "$(get started)" ]; then
    grep -v ' INFO ' "$SMOKE_DIR/agent.err" | tail -20 >&2
    die "the agent never ran"
fi

say "agent session"
head=$(said head | tr -d ' ')
rewritten=$(said rewritten | tr -d ' ')
check "the agent's git is the shim ($(said which))" [ "$(said which | tr -d ' ')" = /usr/local/lib/airlock/bin/git ]
check "the workspace starts on $BRANCH" [ "$(said start | tr -d ' ')" = "$BRANCH" ]
check "the first commit, with no identity configured, works ($(step ident_commit): $(said ident_commit))" [ "$(step ident_commit)" = 0 ]
operator="Smoke Operator/operator@example.invalid/Smoke Operator/operator@example.invalid"
check "its author and committer are the operator's git identity ($(said ident))" [ "$(said ident | sed 's/ $//')" = "$operator" ]
check "commit in the workspace ($(step commit))" [ "$(step commit)" = 0 ]
denied() { local s; s=$(step "$1"); [ -n "$s" ] && [ "$s" != 0 ] && grep -q 'not permitted' <<<"$(said "$1")"; }
check "the agent cannot stop the git API ($(said gitapi_stop))" denied gitapi_stop
check "the agent cannot kill the git API ($(said gitapi_kill))" denied gitapi_kill
check "the agent cannot renice the git API ($(said gitapi_renice))" denied gitapi_renice
untouched() { [ -n "$(get gitapi_before)" ] && [ "$(get gitapi_after)" = "$(get gitapi_before) S 0" ]; }
check "the same git API runs on, sleeping, nice 0 ($(get gitapi_before) -> $(get gitapi_after))" untouched
check "git push of the sandbox branch: exit 0 ($(said push))" [ "$(step push)" = 0 ]
tracks() { [ -n "$head" ] && [ "$(said tracking | tr -d ' ')" = "$head" ]; }
check "the remote-tracking ref follows the push" tracks
amended() { [ "$(step amend)" = 0 ] && [ -n "$rewritten" ] && [ "$rewritten" != "$head" ]; }
check "the commit was rewritten locally" amended
# refused NAME REASON: the step failed with the git API's refusal naming REASON.
refused() {
    local s; s=$(step "$1")
    [ -n "$s" ] && [ "$s" != 0 ] && grep -qF "airlock refused this ($2)" <<<"$(said "$1")"
}
check "git push --force of the rewritten commit: refused, option_not_allowed" refused force option_not_allowed
check "git push +branch of the rewritten commit: refused, not_fast_forward" refused plus not_fast_forward
check "git push origin HEAD:main: refused, branch_protected" refused main branch_protected
direct_refused() { local s; s=$(step direct); [ -n "$s" ] && [ "$s" != 0 ] && grep -q 403 <<<"$(said direct)"; }
check "/usr/bin/git push past the shim: refused by the proxy (403: $(said direct | cut -c1-80))" direct_refused
closed() { [ -n "$(step secret_file)" ] && [ "$(step secret_file)" != 0 ]; }
check "the token file is closed to the agent" closed
clean() { [ "$(step status)" = 0 ] && [ -z "$(said status | tr -d ' ')" ]; }
check "the workspace is clean after the session ($(said status))" clean
attack=$(cat "$SMOKE_DIR/attack.out")
svc() { sed -n "s/^$1=\([0-9]*\).*/\1/p" <<<"$attack" | head -1; }
svc_said() { sed -n "s/^$1=[0-9]* //p" <<<"$attack" | head -1; }
ticketless() { local s; s=$(svc "$1"); [ -n "$s" ] && [ "$s" != 0 ] && grep -q 'airlock: git-ticket-missing' <<<"$(svc_said "$1")"; }
check "the service port attacker runs as the git API's user ($(sed -n 's/^svc_id=//p' <<<"$attack"))" grep -q '^svc_id=' <<<"$attack"
for s in svc_force svc_delete svc_tag svc_fetch; do
    check "$s as airlock-git straight to the service port: refused, git-ticket-missing ($(svc_said $s | cut -c1-100))" ticketless $s
done

say "upstream (fakenet's github.com)"
upref=$(git --git-dir "$upstream" rev-parse --verify -q "refs/heads/$BRANCH" || true)
landed() { [ -n "$head" ] && [ "$upref" = "$head" ]; }
check "upstream $BRANCH == the agent's HEAD ($upref)" landed
check "upstream main unchanged" [ "$(git --git-dir "$upstream" rev-parse main)" = "$main" ]
check "no other branch upstream" [ "$(git --git-dir "$upstream" for-each-ref --format='%(refname)' | tr '\n' ' ')" = "refs/heads/main refs/heads/$BRANCH " ]
want="$OWNER/$NAME $ZERO $head refs/heads/$BRANCH"
check "the hook log holds exactly the one ref update" [ "$(cat "$hooks_log")" = "$want" ]
ulog=$SMOKE_DIR/log/fakenet.jsonl
auth=$(printf 'x-access-token:%s' "$TOKEN" | base64 -w0)
receive_packs() { grep -c '"path":"/acme/app.git/git-receive-pack"' "$ulog" || true; }
check "exactly one receive-pack reached upstream ($(receive_packs))" [ "$(receive_packs)" = 1 ]
check "upstream received the real token (injected by the proxy)" grep -q "Basic $auth" "$ulog"
check "upstream never saw an airlock placeholder" bash -c "! grep -q 'airlock-git\\.\\|airlock-placeholder' '$ulog'"

say "audit"
audit="$(volume_path "$AUDIT")/audit.jsonl"
gitlog="$(volume_path "$AUDIT")/git-api.jsonl"
# (the audit path is without the query: the refused request is info/refs?service=git-receive-pack)
blocked() {
    python3 - "$audit" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(not any(l.get("reason") == "git-push-blocked" and l.get("host") == "github.com"
                 and l.get("uid") == 1000 and str(l.get("path", "")).startswith("/acme/app.git/")
                 for l in lines))
PY
}
check "the proxy's audit log: the agent's direct push refused as git-push-blocked" blocked
ticket_missing() { grep '"reason":"git-ticket-missing"' "$audit" | grep -q '"kind":"git-service"'; }
check "the proxy's audit log: the service port attacks refused as git-ticket-missing" ticket_missing
git_api_logged() { grep -q not_fast_forward "$gitlog" && grep -q branch_protected "$gitlog"; }
check "the git API's log has its refusals" git_api_logged

say "the token"
scan=$repo/.smoke/proc-scan
check "the agent read $(get proc_readable) environ files, $(get proc_scans) scans, $(wc -c <"$scan" 2>/dev/null || echo 0) bytes" \
    [ -s "$scan" ]
check "the scan saw the canary in the agent's own environment" grep -aqE 'SCAN_CANARY=airlock-scan-canary-[0-9]+' "$scan"
check "no /proc/*/environ or cmdline the agent can read holds the token" bash -c "! grep -aqF '$TOKEN' '$scan'"
check "the agent's output holds no token" bash -c "! grep -aqF '$TOKEN' '$SMOKE_DIR/agent.out'"
check "the container's stderr and airlock.log (entrypoint, proxy, git API) hold no token" \
    bash -c "! grep -saqF '$TOKEN' '$SMOKE_DIR/agent.err' '$(dirname "$audit")/airlock.log'"
check "no file in the workspace holds the token" bash -c "! grep -raqF '$TOKEN' '$repo' --exclude-dir=.git"
check "the audit logs hold no token" bash -c "! grep -aqF '$TOKEN' '$audit' '$gitlog'"

say "wire (tcpdump on $BR)"
tcpdump -nn -r "$SMOKE_DIR/wire.pcap" 2>/dev/null >"$SMOKE_DIR/wire.txt"
if python3 "$SMOKE_ROOT/tests/smoke/wire_check.py" "$audit" github.com "$APP4" "$APP6" \
    <"$SMOKE_DIR/wire.txt"; then
    pass "every packet from the appliance is the proxy's, a DNS query for github.com or housekeeping"
else
    fail "a packet left the appliance that the proxy did not send"
fi

ready=$(grep -o 'ready in [0-9]* ms' "$SMOKE_DIR/agent.err" | head -1)
started=$(get started)
say "timing: entrypoint $ready; docker run -> agent exec $(((started - t0) / 1000000)) ms;" \
    "first push (through git API and proxy) $(get push_ms) ms; agent session $session_ms ms;" \
    "test total $(ms "$T0") ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; grep -v '^proc' "$SMOKE_DIR/agent.out" >&2
    say "entrypoint stderr (last 30 lines):"; grep -v ' INFO ' "$SMOKE_DIR/agent.err" | tail -30 >&2
    say "hook log:"; cat "$hooks_log" >&2
    say "proxy audit denials:"; grep '"decision":"deny"' "$audit" | tail -10 >&2
    die "$SMOKE_FAILS check(s) failed"
fi
say "git: all checks passed"
