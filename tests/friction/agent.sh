#!/bin/bash
# The friction corpus as the agent runs it (tests/friction/run.sh starts this in the real
# image through scripts/docker-run). Reads /friction/cmds.tsv (id, needs, command), runs each
# command in /workspace with `bash -c`, stdin closed, at most 60 s, and records
# `id<TAB>status<TAB>ms` in /friction/out/status and the output in /friction/out/<id>.out.
# A command whose program the image lacks is recorded as `absent`, not run.
out=/friction/out
: >"$out/status"
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
done </friction/cmds.tsv
echo done >"$out/finished"
