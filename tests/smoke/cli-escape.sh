#!/usr/bin/env bash
# Docker smoke test: what a sandbox writes never runs on the host, what comes back is
# listed first and escaped, and a sandbox reads only the objects its base reaches. One
# `airlock run` (the CLI, the image, a real agent session) whose agent, with the image's own
# /usr/bin/git for its nested repositories:
#   - makes a nested repository whose clean filter writes a host marker, and adds it as a
#     gitlink through the shim (the git API may refuse that: the host must hold either way);
#   - commits an embedded bare repository whose core.fsmonitor writes a host marker, a
#     symlinked .vscode, a case-varied .VSCode/ and a file named with terminal escapes;
#   - reads, by abbreviated id, a password blob the operator reset away and a blob that is
#     only on another branch of the operator's repository.
# Then: no marker on the host, the review list comes before anything else said of the branch
# and names every planted path with no raw escape, the agent read neither blob but read its
# base's history.
# Usage: sudo tests/smoke/cli-escape.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

NAME=${SMOKE_ID#airlock-}-esc

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
(cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-cli) || die "cannot build the airlock CLI"
dir=${CARGO_TARGET_DIR:-target}
case $dir in /*) ;; *) dir=$SMOKE_ROOT/$dir ;; esac
airlock() {
    AIRLOCK_DATA_DIR=$SMOKE_DIR/data AIRLOCK_CONFIG_DIR=$SMOKE_DIR/config \
        "$dir/debug/airlock" --image "$SMOKE_IMAGE" "$@"
}

repo=$SMOKE_DIR/repo
marker=$SMOKE_DIR/host-marker
mkdir -p "$repo"
g() { git -C "$repo" -c user.name=o -c user.email=o@example.invalid "$@"; }
g init -q -b main
echo one >"$repo/a" && g add a && g commit -qm one
echo DB_PASSWORD=hunter2-smoke >"$repo/.env" && g add .env && g commit -qm oops
gone=$(g rev-parse HEAD:.env)
g reset -q --hard HEAD~1
g checkout -q -b other && echo only-on-other-smoke >"$repo/o" && g add o && g commit -qm o
other=$(g rev-parse HEAD:o)
g checkout -q main
echo two >"$repo/a" && g commit -qam two
printf '[sandbox]\nname = "cliesc"\n\n[network]\nallow = ["allowed.test"]\n' >"$SMOKE_DIR/policy.toml"

payload="sh -c 'id >> $marker; cat'"
agent=$(cat <<SH
G=/usr/bin/git
mkdir sub && cd sub && \$G init -q . && \$G config user.email a@x && \$G config user.name a
echo '* filter=x' > .gitattributes && echo d > f && \$G add . && \$G commit -qm s
\$G config filter.x.clean "$payload" && echo changed > f && cd ..
mkdir -p tools/objects/info tools/refs/heads editor .VSCode
echo 'ref: refs/heads/main' > tools/HEAD && touch tools/objects/info/k tools/refs/heads/k
\$G config --file tools/config core.bare true
\$G config --file tools/config core.fsmonitor "$payload"
echo '{}' > editor/tasks.json && ln -s editor .vscode && echo '{}' > .VSCode/settings.json
echo x > "editor/\$(printf 'erase\\033[2K\\033[1Aline')"
git add tools editor .vscode .VSCode; git add sub 2>&1 | tail -1; git commit -qm plant
for id in ${gone:0:7} ${other:0:7} $gone $other; do git cat-file -p \$id 2>/dev/null && echo LEAK-\$id; done
echo OLD=\$(git cat-file -p \$(git rev-parse HEAD~2:a)) COMMITS=\$(git rev-list --count HEAD)
SH
)

say "airlock run $NAME: the agent plants and reads"
track_container "airlock-$NAME"
airlock run "$repo" --name "$NAME" --policy "$SMOKE_DIR/policy.toml" -- bash -c "$agent" \
    >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" || true
out=$SMOKE_DIR/agent.out
err=$SMOKE_DIR/agent.err

say "nothing ran on the host"
check "no host marker (the nested filter, the embedded fsmonitor)" test ! -e "$marker"

say "the review list"
first_review=$(grep -n '^airlock: review first:' "$err" | head -1 | cut -d: -f1)
branch_line=$(grep -n "sandbox/$NAME is at" "$err" | head -1 | cut -d: -f1)
check "listed before the branch's line ($first_review < $branch_line)" \
    test -n "$first_review" -a -n "$branch_line" -a "${first_review:-0}" -lt "${branch_line:-0}"
for p in 'tools/:' '.vscode:' '.VSCode/settings.json:' 'editor/tasks.json:' \
    'editor/erase\x1b[2K\x1b[1Aline:'; do
    check "lists $p" grep -qF "airlock:   $p" "$err"
done
check "no raw escape reached the terminal" bash -c "! grep -q $'\x1b' '$err'"

say "the sandbox's objects"
check "the reset-away password was not read" bash -c "! grep -q 'hunter2-smoke\|LEAK-' '$out'"
check "the other branch's blob was not read" bash -c "! grep -q 'only-on-other-smoke' '$out'"
check "the base's history was read (OLD=one COMMITS=3)" grep -q 'OLD=one COMMITS=3' "$out"

if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; cat "$out" "$err" >&2
    die "$SMOKE_FAILS check(s) failed"
fi
airlock destroy "$NAME" --force >/dev/null 2>&1 || true
say "cli-escape: all checks passed"
