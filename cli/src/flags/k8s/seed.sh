set -eu
# airlock's seed (cli/src/flags/k8s/seed.sh): the workspace claim in the hidden-.git layout
# the CLI prepares for Docker. repo.git: one branch, HEAD on it, core.bare=false, the
# sandbox's airlock.* keys; work/: checked out, with an empty .git (the cover's mount point);
# both the agent's (uid 1000). A claim seeded already is left as it is.
d="${AIRLOCK_SEED_DIR:?}"
g="$d/repo.git"
w="$d/work"
if [ -e "$g/HEAD" ]; then
    echo "airlock-seed: $g is there already: the workspace is kept as it is"
    exit 0
fi
b="${AIRLOCK_SEED_BRANCH:-airlock/${AIRLOCK_SEED_POD:?}}"
git() { command git -c core.hooksPath=/dev/null "$@"; }
git check-ref-format --branch "$b" >/dev/null || {
    echo "airlock-seed: $b is not a branch name git accepts" >&2
    exit 1
}
n="$d/.repo.git.new"
rm -rf "$n" "$w"
git init --bare --quiet --template= "$n"
git --git-dir="$n" fetch --quiet --no-tags --no-write-fetch-head -- "$AIRLOCK_SEED_URL" \
    "+${AIRLOCK_SEED_BASE:-HEAD}:refs/heads/$b" || {
    echo "airlock-seed: cannot fetch ${AIRLOCK_SEED_BASE:-HEAD} of $AIRLOCK_SEED_URL (is it reachable through the fence's ports, and public?)" >&2
    exit 1
}
git --git-dir="$n" symbolic-ref HEAD "refs/heads/$b"
git --git-dir="$n" config core.bare false
git --git-dir="$n" config remote.origin.url "$AIRLOCK_SEED_URL"
git --git-dir="$n" config airlock.sandbox "${AIRLOCK_SEED_POD:?}"
git --git-dir="$n" config airlock.branch "$b"
mkdir -p "$w/.git"
git --git-dir="$n" --work-tree="$w" reset --hard --quiet
chown -R 1000:1000 "$n" "$w"
mv "$n" "$g"
echo "airlock-seed: $AIRLOCK_SEED_URL at ${AIRLOCK_SEED_BASE:-HEAD} as branch $b"
