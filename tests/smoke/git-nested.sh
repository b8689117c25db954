#!/usr/bin/env bash
# Docker smoke test for nested repositories (issue 38 item 1): the appliance started as
# docs/docker.md says (scripts/docker-run on a git checkout), on a private network with
# nothing behind it (nothing here needs the network).
#
# As the agent, the reported attack: a nested repository made with the image's own
# /usr/bin/git (`sub/.git` whose config has `filter.x.clean`, `core.fsmonitor` and hooks
# writing a marker, `sub/.gitattributes` with `* filter=x`), then `git add sub` through the
# shim, then `git status`, `git diff`, `git add -A`; and the same trap inside the empty
# directory of a submodule upstream records (its gitlink already in the index), then
# `git status`, `git diff`, `git commit -a`. The add is refused with nested_repository and
# the fix on the agent's stderr, the hidden index gets no gitlink, the commit records the
# submodule as upstream did, and no marker is ever written (before, the filter ran as
# uid=998(airlock-git) on every status, diff and add).
# Then the same checkout started again, the nested repository still in it: the start is
# refused, exit 78, with one line naming sub/.git and the fix.
# Usage: sudo tests/smoke/git-nested.sh          (root: the audit volume on the host)
source "$(dirname "$0")/lib.sh"
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

NET=$SMOKE_ID-nnet
APP=$SMOKE_ID-napp
AUDIT=$SMOKE_ID-naudit
BRANCH=sandbox/smoke/nested

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image

hostgit() { git -c safe.directory='*' -c user.name=seed -c user.email=seed@example.invalid "$@"; }
repo=$SMOKE_DIR/repo
mkdir -p "$repo/src"
hostgit -C "$repo" init -q -b main
echo hello >"$repo/README.md"
echo 'pub fn f() {}' >"$repo/src/lib.rs"
# A submodule recorded upstream (a gitlink) that nobody initialised: an empty directory.
mkdir -p "$repo/vendor"
hostgit -C "$repo/vendor" init -q
echo v >"$repo/vendor/v"
hostgit -C "$repo/vendor" add v
hostgit -C "$repo/vendor" commit -q -m vendored
hostgit -C "$repo" add -A 2>/dev/null
hostgit -C "$repo" commit -q -m seed
rm -rf "$repo/vendor/.git" "$repo/vendor/v"
hostgit -C "$repo" remote add origin https://github.com/acme/app.git
hostgit -C "$repo" checkout -q -b "$BRANCH"
printf '/agent.sh\n/.smoke/\n' >>"$repo/.git/info/exclude"
mkdir -p "$repo/.smoke"
head0=$(hostgit -C "$repo" rev-parse HEAD)
vendor0=$(hostgit -C "$repo" rev-parse HEAD:vendor)

cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke"

[git]
repositories = ["github.com/acme/app"]
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"

# The agent's session: `t NAME cmd...` prints NAME=<status> <output on one line>.
cat >"$repo/agent.sh" <<'SH'
echo "started=$(date +%s%N)"
t() { n=$1; shift; o=$("$@" 2>&1); r=$?; printf '%s=%s %s\n' "$n" "$r" "$(printf %s "$o" | tr '\n' ' ')"; }
export GIT_AUTHOR_NAME=Agent GIT_AUTHOR_EMAIL=agent@example.invalid
export GIT_COMMITTER_NAME=Agent GIT_COMMITTER_EMAIL=agent@example.invalid
cd /workspace
# Every program the nested repository names leaves `id` in /tmp/ran (a shell drops the git
# API's split identity: what it runs is airlock-git, which can write /tmp) and, where it can,
# in the workspace.
cat >/tmp/trap <<'T'
#!/bin/sh
id >>/tmp/ran
{ id >>/workspace/.smoke/ran; } 2>/dev/null
exec cat
T
chmod 0755 /tmp/trap
mkdir sub
cd sub
t init /usr/bin/git init -q
echo data >f
/usr/bin/git add f
t nested_commit /usr/bin/git commit -qm nested
/usr/bin/git config filter.x.clean /tmp/trap
/usr/bin/git config filter.x.smudge /tmp/trap
/usr/bin/git config core.fsmonitor /tmp/trap
/usr/bin/git config core.hooksPath /tmp/hooks
mkdir -p /tmp/hooks
for h in pre-commit post-checkout post-index-change reference-transaction; do cp /tmp/trap /tmp/hooks/$h; done
echo '* filter=x' >.gitattributes
# Same size, new content: git must read it (through the clean filter) to see the change.
echo datb >f
# The same trap inside the submodule's empty directory: the gitlink is already recorded.
cd /workspace/vendor
t vendor_init /usr/bin/git init -q
echo data >f
/usr/bin/git add f
/usr/bin/git commit -qm vendor
/usr/bin/git config filter.x.clean /tmp/trap
/usr/bin/git config core.fsmonitor /tmp/trap
echo '* filter=x' >.gitattributes
echo datb >f
cd /workspace
t which command -v git
t add git add sub
t index git ls-files --stage
t status git status
t porcelain git status --porcelain=v2
t porcelain_late git status --porcelain=v2 --ignore-submodules=none
t diff git diff
t add_all git add -A
t commit git commit -qam "agent change"
t index_after git ls-files --stage
echo more >>README.md
t commit_all git commit -qam "with the submodule moved"
t vendor_recorded git rev-parse HEAD:vendor
t ran cat /tmp/ran
SH
chmod 0644 "$repo/agent.sh"
chown -R 1000:1000 "$repo"

track_network "$NET"
docker network create --internal --subnet 198.51.100.0/24 "$NET" >/dev/null
track_volume "$AUDIT"

# start NAME: scripts/docker-run on the checkout, running the agent's session; sets $rc.
start() {
    track_container "$APP-$1"
    set +e
    env -u SUDO_USER HOME="$SMOKE_DIR" \
        AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$SMOKE_IMAGE AIRLOCK_POLICY=$SMOKE_DIR/policy.toml \
        AIRLOCK_AUDIT_VOLUME=$AUDIT \
        AIRLOCK_DOCKER_ARGS="--name $APP-$1 --network $NET" \
        "$SMOKE_ROOT/scripts/docker-run" "$repo" -- bash /workspace/agent.sh \
        >"$SMOKE_DIR/$1.out" 2>"$SMOKE_DIR/$1.err"
    rc=$?
    set -e
}

say "the attack, as the agent"
t0=$(date +%s%N)
start attack
out=$(cat "$SMOKE_DIR/attack.out")
step() { sed -n "s/^$1=\([0-9]*\).*/\1/p" <<<"$out" | head -1; }
said() { sed -n "s/^$1=[0-9]* //p" <<<"$out" | head -1; }
if ! grep -q '^started=' <<<"$out"; then
    grep -v ' INFO ' "$SMOKE_DIR/attack.err" | tail -20 >&2
    die "the agent never ran (status $rc)"
fi
check "the agent's git is the shim ($(said which))" [ "$(said which | tr -d ' ')" = /usr/local/lib/airlock/bin/git ]
made() { [ "$(step init)" = 0 ] && [ "$(step nested_commit)" = 0 ]; }
check "the nested repository was made, with a commit, by /usr/bin/git" made
refused_add() {
    [ "$(step add)" = 1 ] &&
        grep -qF "airlock refused this (nested_repository)" <<<"$(said add)" &&
        grep -qF "rm -rf sub/.git" <<<"$(said add)"
}
check "git add sub: refused on the agent's stderr with the fix ($(said add | cut -c1-160))" refused_add
no_sub_gitlink() { ! grep -qE '160000 [0-9a-f]+ 0.sub( |$)' <<<"$(said "$1")"; }
check "the hidden index holds no gitlink for sub after git add sub" no_sub_gitlink index
check "git status: exit 0 ($(step status))" [ "$(step status)" = 0 ]
check "git status --porcelain=v2: exit 0 ($(step porcelain))" [ "$(step porcelain)" = 0 ]
# Asking git to look inside submodules would come after the git API's pinned
# --ignore-submodules=all and win: refused, naming what works (c2fe725).
refused_late() { [ "$(step porcelain_late)" = 1 ] && grep -qF "(nested_repository)" <<<"$(said porcelain_late)"; }
check "git status --ignore-submodules=none: refused, nested_repository ($(step porcelain_late))" refused_late
check "git diff: exit 0 ($(step diff))" [ "$(step diff)" = 0 ]
refused_all() { [ "$(step add_all)" = 1 ] && grep -qF "(nested_repository)" <<<"$(said add_all)"; }
check "git add -A: refused, nested_repository" refused_all
only_vendor() { [ "$(grep -o '160000 ' <<<"$(said index_after)" | wc -l)" = 1 ] && no_sub_gitlink index_after; }
check "the hidden index holds no new gitlink at the end (only the recorded vendor)" only_vendor
check "git commit -a beside the moved submodule: exit 0 ($(step commit_all))" [ "$(step commit_all)" = 0 ]
check "the commit records the submodule as upstream did ($(said vendor_recorded))" [ "$(said vendor_recorded | tr -d ' ')" = "$vendor0" ]
check "nothing the nested repository names ran (/tmp/ran: $(step ran))" [ "$(step ran)" != 0 ]
check "nothing the nested repository names ran (workspace marker)" [ ! -e "$repo/.smoke/ran" ]
check "the checkout's index on the host holds no new gitlink" \
    bash -c "! git -c safe.directory='*' -C '$repo' ls-files --stage | grep -q '^160000.*sub$'"
gitlog="$(volume_path "$AUDIT")/git-api.jsonl"
check "the git API's log has the refusal" grep -q '"reason":"nested_repository"' "$gitlog"
say "attack session $(ms "$t0") ms"

say "the same checkout again, sub/.git still in it: the start is refused"
start again
nested_line=$(grep '^airlock: ' "$SMOKE_DIR/again.err" | grep -i 'nested git repositor' || true)
check "exit 78 ($rc)" [ "$rc" = 78 ]
check "the agent never ran" bash -c "! grep -q '^started=' '$SMOKE_DIR/again.out'"
one_line() {
    [ "$(grep -c . <<<"$nested_line")" = 1 ] && grep -qF 'sub/.git' <<<"$nested_line" &&
        grep -qF 'rm -rf' <<<"$nested_line"
}
check "one line names sub/.git and the fix ($nested_line)" one_line
check "vendor/.git is named too" grep -qF 'vendor/.git' <<<"$nested_line"

say "test total $(ms "$T0") ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; cat "$SMOKE_DIR/attack.out" >&2
    say "entrypoint stderr (last 20 lines):"; grep -v ' INFO ' "$SMOKE_DIR/attack.err" | tail -20 >&2
    say "second start:"; grep '^airlock' "$SMOKE_DIR/again.err" >&2 || true
    die "$SMOKE_FAILS check(s) failed"
fi
say "git-nested: all checks passed"
