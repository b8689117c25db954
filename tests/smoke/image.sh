#!/usr/bin/env bash
# Docker smoke test: the image itself and the documented command's guard rails.
#   - what is in the image (users, no setuid/setgid file, no sudo/wget/nc, entrypoint, policy);
#   - the documented command starts (exit 0) and each forgotten flag or mount makes the
#     container refuse with exit 78 and ONE line naming that flag;
#   - the first ten minutes (issue 15): every start-up problem at once, report mode starts,
#     any workspace owner, a quiet terminal;
#   - measurements: image size, `docker run --rm IMAGE true` wall time, the entrypoint's own
#     "ready in N ms".
# Usage: sudo tests/smoke/image.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

NET=$SMOKE_ID-inet
AUDIT=$SMOKE_ID-audit
[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
img=$SMOKE_IMAGE

say "image contents"
inimg() { docker run --rm --network none --entrypoint /bin/sh "$img" -c "$1"; }
check "no setuid/setgid file" [ -z "$(inimg 'find / -xdev -type f -perm /6000')" ]
check "no sudo, wget, nc, ncat, netcat, socat" [ -z "$(inimg 'for t in sudo wget nc ncat netcat socat; do command -v $t; done')" ]
users_ok() {
    local u
    u=$(inimg 'echo $(id -u airlock) $(id -u airlock-git) $(id -u agent):$(id -g agent):$(id -G agent)')
    set -- $u
    [ "$1" -lt 1000 ] && [ "$2" -lt 1000 ] && [ "$3" = "1000:1000:1000" ]
}
check "system uids for the services, 1000 for the agent with no extra group" users_ok
check "airlock-session is the entrypoint (the supported second shell)" \
    [ "$(inimg 'readlink /usr/local/bin/airlock-session')" = airlock-entrypoint ]
check "a login shell keeps the git shim first on PATH" \
    [ "$(inimg 'bash -lc "command -v git"')" = /usr/local/lib/airlock/bin/git ]
check "entrypoint and command" [ "$(docker image inspect -f '{{json .Config.Entrypoint}} {{json .Config.Cmd}}' "$img")" = '["/usr/local/bin/airlock-entrypoint"] ["bash"]' ]
check "default policy is examples/policy.toml, root-owned 0644" \
    [ "$(inimg 'stat -c "%U %a" /etc/airlock/policy.toml; sha256sum </etc/airlock/policy.toml' | tr '\n' ' ')" = \
      "root 644 $(sha256sum <"$SMOKE_ROOT/examples/policy.toml") " ]

# A policy without credentials (credential items wait for issue 4), on a private network.
cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke"
[network]
allow = ["allowed.test"]
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"
mkdir -p "$SMOKE_DIR/repo" && chown 1000:1000 "$SMOKE_DIR/repo"
track_network "$NET"
docker network create --internal --subnet 198.51.100.0/24 "$NET" >/dev/null
track_volume "$AUDIT"
repo=$SMOKE_DIR/repo audit_volume=$AUDIT
# shellcheck source=../../docker/run-flags.sh
source "$SMOKE_ROOT/docker/run-flags.sh"
documented=("${AIRLOCK_RUN_FLAGS[@]}")
policy=(-v "$SMOKE_DIR/policy.toml:/etc/airlock/policy.toml:ro" --network "$NET")

# run FLAGS... : runs `true` with these flags; sets $rc, $err.
run() {
    set +e
    err=$(docker run --rm "$@" "${policy[@]}" "$img" true 2>&1 >/dev/null)
    rc=$?
    set -e
}
# without FLAG [VALUE] : the documented flags minus that one (and its value).
without() {
    local out=() i=0 n=${#documented[@]}
    while [ $i -lt $n ]; do
        if [ "${documented[$i]}" = "$1" ] && { [ $# -eq 1 ] || [ "${documented[$((i + 1))]}" = "$2" ]; }; then
            i=$((i + ($# == 1 ? 1 : 2)))
            continue
        fi
        out+=("${documented[$i]}"); i=$((i + 1))
    done
    printf '%s\n' "${out[@]}"
}

say "the documented command starts"
t0=$(date +%s%N)
run "${documented[@]}"
wall=$((($(date +%s%N) - t0) / 1000000))
check "documented command: exit 0 ($rc)" [ "$rc" = 0 ]
ready=$(grep -o 'ready in [0-9]* ms' <<<"$err" | head -1)
[ "$rc" = 0 ] || echo "$err" | grep -v ' INFO ' | tail -5 >&2

say "each forgotten flag is named in one line (exit 78)"
refused() {  # refused NEEDLE FLAGS... ; the flags come from `without`
    local needle=$1; shift
    run "$@"
    local lines
    lines=$(grep -c . <<<"$err")
    if [ "$rc" = 78 ] && [ "$lines" = 1 ] && grep -qF -- "$needle" <<<"$err"; then
        return 0
    fi
    echo "    rc=$rc lines=$lines: $err" | head -3 >&2
    return 1
}
mapfile -t f < <(without --read-only); check "without --read-only" refused "--read-only" "${f[@]}"
# spec POINT: the documented --tmpfs value for POINT (docker/run-flags.sh).
spec() { local w; for w in "${documented[@]}"; do case $w in "$1":*) echo "$w"; return ;; esac; done; die "no --tmpfs $1 in run-flags.sh"; }
mapfile -t f < <(without --tmpfs "$(spec /run)"); check "without --tmpfs /run" refused "--tmpfs /run" "${f[@]}"
mapfile -t f < <(without --tmpfs "$(spec /tmp)"); check "without --tmpfs /tmp" refused "--tmpfs /tmp" "${f[@]}"
mapfile -t f < <(without --tmpfs "$(spec /home/agent)"); check "without the agent's home tmpfs" refused "--tmpfs /home/agent" "${f[@]}"
# Docker's default tmpfs size is half the host's RAM: an unsized tmpfs is refused, naming
# the documented sized flag; sizes that do not fit --memory name the --memory that would.
mapfile -t f < <(without --tmpfs "$(spec /tmp)")
check "an unsized --tmpfs /tmp names the sized flag" refused "--tmpfs $(spec /tmp) (/tmp is a tmpfs without a size" "${f[@]}" --tmpfs /tmp:rw,nosuid,nodev
mapfile -t f < <(without --tmpfs "$(spec /home/agent)")
check "an unsized agent home names the sized flag" refused "--tmpfs $(spec /home/agent) (" "${f[@]}" --tmpfs /home/agent:rw,nosuid,nodev,uid=1000,gid=1000,mode=0700
mapfile -t f < <(without --memory 4g)
check "tmpfs sizes over --memory 2g are refused" refused "--memory 3g (the writable tmpfs mounts may hold 1.7 GiB" "${f[@]}" --memory 2g
mapfile -t f < <(without --cap-add NET_ADMIN); check "without --cap-add NET_ADMIN" refused "--cap-add NET_ADMIN" "${f[@]}"
mapfile -t f < <(without --cap-add KILL); check "without --cap-add KILL" refused "--cap-add KILL" "${f[@]}"
mapfile -t f < <(without --cap-drop ALL); check "without --cap-drop ALL" refused "--cap-drop ALL" "${f[@]}"
mapfile -t f < <(without --security-opt no-new-privileges); check "without no-new-privileges" refused "no-new-privileges" "${f[@]}"
mapfile -t f < <(without --pids-limit 512); check "without --pids-limit" refused "--pids-limit" "${f[@]}"
mapfile -t f < <(without --memory 4g); check "without --memory" refused "--memory" "${f[@]}"
mapfile -t f < <(without -v "$repo:/workspace"); check "without the workspace mount" refused "/workspace" "${f[@]}"
mapfile -t f < <(without -v "$audit_volume:/var/log/airlock"); check "without the audit volume" refused "/var/log/airlock" "${f[@]}"
check "an extra capability is refused" refused "also holds SYS_ADMIN" "${documented[@]}" --cap-add SYS_ADMIN
# (--privileged with no-new-privileges is refused by runc itself on this Docker: "unable to
# apply caps"; the extra-capability check above is what would name it.)
check "--user is refused" refused "do not pass --user" "${documented[@]}" --user 1000
# AIRLOCK_PASS_ENV never hands over a secret-looking name unless it is forced, with a warning.
check "AIRLOCK_PASS_ENV=GITHUB_TOKEN is refused, naming the way to force it" refused \
    'AIRLOCK_PASS_ENV names "GITHUB_TOKEN", which looks like a credential' \
    "${documented[@]}" -e AIRLOCK_PASS_ENV=GITHUB_TOKEN -e GITHUB_TOKEN=ghp_smoke
forced() {
    run "${documented[@]}" -e AIRLOCK_PASS_ENV=GITHUB_TOKEN -e AIRLOCK_PASS_ENV_FORCE=GITHUB_TOKEN -e GITHUB_TOKEN=ghp_smoke
    [ "$rc" = 0 ] && grep -q 'warning: AIRLOCK_PASS_ENV_FORCE hands GITHUB_TOKEN to the agent' <<<"$err"
}
check "AIRLOCK_PASS_ENV_FORCE=GITHUB_TOKEN starts with a warning" forced

say "a git checkout: .git handed to the git service, hidden from the agent"
gitrepo=$SMOKE_DIR/gitrepo
mkdir -p "$gitrepo"
git -C "$gitrepo" init -q -b main
echo hello >"$gitrepo/README.md"
git -C "$gitrepo" add README.md
git -C "$gitrepo" -c user.name=smoke -c user.email=smoke@example.invalid commit -q -m "smoke seed"
chown -R 1000:1000 "$gitrepo"
repo=$gitrepo
# shellcheck source=../../docker/run-flags.sh
source "$SMOKE_ROOT/docker/run-flags.sh"
gitflags=("${AIRLOCK_RUN_FLAGS[@]}")
git_session() {
    docker run --rm "${gitflags[@]}" "${policy[@]}" "$img" sh -c \
        'echo "log=$(git log -1 --format=%s)"; echo "cover=$(ls -A /workspace/.git | wc -l)";
         echo "hidden=$(ls /var/lib/airlock/git 2>&1 | grep -c "Permission denied")";
         echo "native=$(/usr/bin/git -C /workspace status 2>&1 | grep -c "not a git repository")";
         echo "config=$(git config core.hooksPath /tmp 2>&1 | grep -c config_key_not_writable)"' 2>/dev/null
}
out=$(git_session || true)
check "git in the workspace runs through the git API" grep -q '^log=smoke seed$' <<<"$out"
check "the workspace .git is an empty cover" grep -q '^cover=0$' <<<"$out"
check "the hidden git dir's parent is closed to the agent" grep -q '^hidden=1$' <<<"$out"
check "native git finds no repository in the workspace" grep -q '^native=1$' <<<"$out"
check "the git API's config policy answers" grep -q '^config=1$' <<<"$out"
mapfile -t f < <(documented=("${gitflags[@]}"); without --tmpfs /workspace/.git:ro,nosuid,nodev,noexec,mode=0555)
check "a git checkout without the .git cover is refused" refused "--tmpfs /workspace/.git:ro" "${f[@]}"
mapfile -t f < <(documented=("${gitflags[@]}"); without -v "$gitrepo/.git:/var/lib/airlock/git/workspace.git")
check "a git checkout without the hand-over is refused" refused "/var/lib/airlock/git/workspace.git" "${f[@]}"

say "the first ten minutes (issue 15)"
# The image's own policy with neither secret given: it starts (issue 16 item 3), with one
# warning per missing credential, both at once, in the terms of the knobs scripts/docker-run
# reads (issue 15 item 3).
both_missing() {
    set +e
    err=$(docker run --rm "${documented[@]}" --network "$NET" "$img" true 2>&1 >/dev/null)
    rc=$?
    set -e
    [ "$rc" = 0 ] && [ "$(grep -c '^airlock: warning: credential' <<<"$err")" = 2 ] &&
        grep -q 'ANTHROPIC_API_KEY.*scripts/docker-run' <<<"$err" &&
        grep -q 'GITHUB_TOKEN_FILE' <<<"$err" || { echo "    rc=$rc: $err" | head -4 >&2; return 1; }
}
check "the default policy without its secrets starts, warning once per secret, naming the knobs" both_missing
# Report mode starts (item 1): the self-test rests on what report mode still denies, and
# Docker's embedded resolver is among the probed ones.
sed 's/^name = "smoke"$/name = "smoke"\nmode = "report"/' "$SMOKE_DIR/policy.toml" >"$SMOKE_DIR/report.toml"
chmod 0644 "$SMOKE_DIR/report.toml"
report_starts() {
    set +e
    err=$(docker run --rm "${documented[@]}" -v "$SMOKE_DIR/report.toml:/etc/airlock/policy.toml:ro" \
        --network "$NET" "$img" true 2>&1 >/dev/null)
    rc=$?
    set -e
    [ "$rc" = 0 ] || { echo "    rc=$rc: $err" | grep -v ' INFO ' | head -3 >&2; return 1; }
}
check "mode = \"report\" starts" report_starts
# Any workspace owner (item 4): a checkout of uid 1234 is worked on as uid 1234, git included,
# and what the agent writes is the user's on the host.
ownrepo=$SMOKE_DIR/ownrepo
mkdir -p "$ownrepo"
git -C "$ownrepo" init -q -b main
echo hello >"$ownrepo/README.md"
git -C "$ownrepo" add README.md
git -C "$ownrepo" -c user.name=smoke -c user.email=smoke@example.invalid commit -q -m "own seed"
chown -R 1234:1234 "$ownrepo"
repo=$ownrepo
# shellcheck source=../../docker/run-flags.sh
source "$SMOKE_ROOT/docker/run-flags.sh"
ownflags=("${AIRLOCK_RUN_FLAGS[@]}")
out=$(docker run --rm "${ownflags[@]}" "${policy[@]}" "$img" sh -c \
    'echo "uid=$(id -u)"; echo x >new.txt; git add new.txt;
     git -c user.name=a -c user.email=a@example.invalid commit -q -m agent && echo commit=ok' 2>/dev/null || true)
check "the agent runs as the workspace owner" grep -q '^uid=1234$' <<<"$out"
check "its files stay the owner's" [ "$(stat -c %u "$ownrepo/new.txt" 2>/dev/null)" = 1234 ]
check "git commits through the git API as the owner" grep -q '^commit=ok$' <<<"$out"
chmod o+x "$SMOKE_DIR"  # mktemp's 0700: let the owner's own git reach the checkout
check "host git still works on the checkout" \
    [ "$(setpriv --reuid 1234 --regid 1234 --clear-groups git -C "$ownrepo" log -1 --format=%s 2>&1)" = agent ]
# Quiet on a terminal (item 2): the agent's terminal shows the agent's output only; the
# proxy's and the entrypoint's lines are in airlock.log in the audit volume.
repo=$SMOKE_DIR/repo
# shellcheck source=../../docker/run-flags.sh
source "$SMOKE_ROOT/docker/run-flags.sh"
ttyflags=("${AIRLOCK_RUN_FLAGS[@]}")
screen=$(script -qefc "docker run --rm -it $(printf '%q ' "${ttyflags[@]}" "${policy[@]}") $img sh -c 'echo AGENT-ONLY'" /dev/null </dev/null 2>&1 | tr -d '\r\0' | sed 's/^\^@//' || true)
# (script(1) writes a NUL to the terminal at its stdin's end, which the terminal echoes as ^@.)
only_agent() {  # the one "airlock: session ... ready" line before the agent, then the agent's
    grep -q '^AGENT-ONLY$' <<<"$screen" && [ "$(grep -v '^$' <<<"$screen" | head -1 | grep -c '^airlock: session .* ready in ')" = 1 ] &&
        ! grep -v -e '^AGENT-ONLY$' -e '^$' -e '^airlock: session .* ready in ' <<<"$screen" >/dev/null ||
        { echo "    the terminal showed:" >&2; sed 's/^/    | /' <<<"$screen" | head -8 >&2; return 1; }
}
check "a terminal shows only the ready line and the agent's output" only_agent
check "airlock's lines are in airlock.log" grep -q 'ready in' "$(volume_path "$AUDIT")/airlock.log"

size=$(docker image inspect -f '{{.Size}}' "$img" | awk '{printf "%.0f MB", $1/1e6}')
say "measured: image $size; docker run --rm $img true: $wall ms wall; entrypoint $ready"
[ "$SMOKE_FAILS" -eq 0 ] || die "$SMOKE_FAILS check(s) failed"
say "image: all checks passed"
