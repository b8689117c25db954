#!/bin/bash
# The friction corpus as the agent runs it (tests/friction/run.sh starts this in the real
# image, through scripts/docker-run with the corpus mounted at /friction, or in a CLI sandbox
# with it unpacked into /tmp/friction: FRICTION_DIR). Reads $FRICTION_DIR/cmds.tsv (id,
# needs, command), runs each command in /workspace with `bash -c`, stdin closed, at most
# 60 s, and records `id<TAB>status<TAB>ms` in $FRICTION_DIR/out/status and the output in
# $FRICTION_DIR/out/<id>.out. A command whose program the image lacks is recorded as
# `absent`, not run. FRICTION_PREAMBLE, when set, runs first (not counted).
dir=${FRICTION_DIR:-/friction}
out=$dir/out
mkdir -p "$out"
: >"$out/status"
if [ -n "${FRICTION_PREAMBLE:-}" ]; then
    (cd /workspace && bash -c "$FRICTION_PREAMBLE") >"$out/preamble.out" 2>&1 </dev/null ||
        echo "preamble failed: $(tail -3 "$out/preamble.out")" >&2
fi
while IFS=$'\t' read -r id needs cmd; do
    if [ "$needs" != - ] && ! command -v "$needs" >/dev/null 2>&1; then
        printf '%s\tabsent\t0\n' "$id" >>"$out/status"
        continue
    fi
    cd /workspace || exit 1
    t0=$(date +%s%N)
    timeout 60 bash -c "$cmd" </dev/null >"$out/$id.out" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$id" "$rc" "$((($(date +%s%N) - t0) / 1000000))" >>"$out/status"
done <"$dir/cmds.tsv"
echo done >"$out/finished"
echo FRICTION-FINISHED
