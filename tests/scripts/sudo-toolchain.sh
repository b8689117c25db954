#!/usr/bin/env bash
# Under sudo the build uses the invoking user's toolchain (issue 15 item 10), tested on
# scripts/lib/cargo.sh and its use by scripts/build-image, as root with SUDO_USER set (what
# sudo leaves) and a PATH without a usable cargo (what sudo's secure_path leaves):
#   1. a temporary user with a fake cargo in ~/.cargo/bin: that cargo runs, as the user,
#      with the user's HOME, in the workspace; also when root's PATH has a cargo older than
#      the workspace's rust-version; airlock_cargo_as_root runs it as root;
#   2. scripts/build-image calls it for the release build;
#   3. a target/ an earlier root build left: one line saying how to chown it, status 1;
#   4. no toolchain at all: exactly one line saying how to get one, status 1 (also from
#      scripts/build-image, before any build).
# The user and its files are removed afterwards. Usage: sudo tests/scripts/sudo-toolchain.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "sudo-toolchain: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (it creates a user): run it with sudo"
for t in useradd userdel runuser getent; do
    command -v "$t" >/dev/null || PATH="$PATH:/usr/sbin:/sbin" command -v "$t" >/dev/null ||
        fail "$t is required"
done
export PATH="$PATH:/usr/sbin:/sbin"

tmp=$(mktemp -d /tmp/airlock-sudo-toolchain.XXXXXX)
chmod 0755 "$tmp"
user=airlock-tc-$$
cleanup() {
    userdel "$user" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
home=$tmp/home
useradd -M -d "$home" -s /bin/bash "$user"
mkdir -p "$home/.cargo/bin" "$tmp/ws" "$tmp/oldbin"
# The fake cargo: its version, and a log line per call (who, HOME, cwd, arguments).
cat >"$home/.cargo/bin/cargo" <<'EOF'
#!/bin/sh
if [ "$1" = --version ]; then echo "cargo 1.99.0 (fake user toolchain)"; exit 0; fi
echo "$(id -un) $HOME $(pwd) $*" >>"$FAKE_CARGO_LOG"
[ "$1" = build ] && [ -n "${FAKE_CARGO_FAIL_BUILD:-}" ] && exit 3
exit 0
EOF
chmod 0755 "$home/.cargo/bin/cargo"
chown -R "$user:" "$home" "$tmp/ws"
# A cargo on root's PATH older than the workspace's rust-version (Debian's, say).
printf '#!/bin/sh\necho "cargo 1.63.0 (fake distribution cargo)"\n' >"$tmp/oldbin/cargo"
chmod 0755 "$tmp/oldbin/cargo"
log=$tmp/cargo.log
touch "$log" && chmod 0666 "$log"
export FAKE_CARGO_LOG=$log

# A PATH with the system's tools but no cargo of root's (root's ~/.cargo/bin is left out).
syspath=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PATH=$syspath command -v cargo >/dev/null && fail "$(PATH=$syspath command -v cargo) is on the system PATH: this test needs a PATH without cargo"

# Runs the helper as sudo leaves it: root, SUDO_USER, the system PATH (plus EXTRA_PATH).
helper() {
    (cd "$tmp/ws" && env -u CARGO_TARGET_DIR -u AIRLOCK_CARGO SUDO_USER="$1" PATH="${EXTRA_PATH:-}$syspath" \
        bash -c '. "$0/scripts/lib/cargo.sh"; airlock_cargo "$@"' "$here" "${@:2}")
}

# 1. the user's cargo, as the user.
: >"$log"
helper "$user" build --release -p airlock-proxy 2>"$tmp/err" || fail "the user's cargo did not run: $(cat "$tmp/err")"
want="$user $home $tmp/ws build --release -p airlock-proxy"
[ "$(cat "$log")" = "$want" ] || fail "expected the call [$want], got [$(cat "$log")]"
echo "ok: under sudo without a root cargo, $user's ~/.cargo/bin/cargo builds, as $user"

: >"$log"
EXTRA_PATH=$tmp/oldbin: helper "$user" build 2>"$tmp/err" || fail "with an old root cargo: $(cat "$tmp/err")"
[ "$(cat "$log")" = "$user $home $tmp/ws build" ] || fail "an old cargo on root's PATH: expected $user's cargo, got [$(cat "$log")]"
echo "ok: a root cargo older than rust-version is passed over for $user's"

: >"$log"
(cd "$tmp/ws" && env SUDO_USER="$user" PATH="$syspath" \
    bash -c '. "$0/scripts/lib/cargo.sh"; airlock_cargo_as_root test' "$here") 2>"$tmp/err" ||
    fail "airlock_cargo_as_root: $(cat "$tmp/err")"
[ "$(cat "$log")" = "root $HOME $tmp/ws test" ] || fail "airlock_cargo_as_root: expected root, got [$(cat "$log")]"
echo "ok: airlock_cargo_as_root runs $user's toolchain as root"

# 2. scripts/build-image builds with it (the fake build fails, so no image is made).
: >"$log"
set +e
(cd "$here" && env SUDO_USER="$user" PATH="$syspath" CARGO_TARGET_DIR="$tmp/ws/target" FAKE_CARGO_FAIL_BUILD=1 \
    scripts/build-image airlock-issue15-never:test) >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "scripts/build-image succeeded with a fake cargo"
grep -q "^$user $home $here build --release --locked --quiet -p airlock-entrypoint" "$log" ||
    fail "scripts/build-image did not build with $user's cargo: log [$(cat "$log")], stderr: $(cat "$tmp/err")"
echo "ok: scripts/build-image builds with $user's cargo, as $user"

# 3. a target/ left by a build as root.
mkdir -p "$tmp/ws/target/release"
set +e
helper "$user" build >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "a root-owned target/ was not refused"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "chown -R $user: target" "$tmp/err" ||
    fail "a root-owned target/: expected one line naming the chown, got: $(cat "$tmp/err")"
rm -rf "$tmp/ws/target"
echo "ok: a root-owned target/ is one line: $(cat "$tmp/err")"

# 4. no toolchain: the user has none, root's PATH has only the old one.
rm -rf "$home/.cargo"
set +e
EXTRA_PATH=$tmp/oldbin: helper "$user" build >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "no toolchain: status 0"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "no toolchain: expected one line, got: $(cat "$tmp/err")"
grep -q "no Rust toolchain with cargo >= .* for root or $user (.*cargo 1.63.0).*rustup.*--in-container" "$tmp/err" ||
    fail "no toolchain: the line does not say what was found and how to get one: $(cat "$tmp/err")"
echo "ok: no toolchain is one line: $(cat "$tmp/err")"

set +e
(cd "$here" && env SUDO_USER="$user" PATH="$syspath" scripts/build-image airlock-issue15-never:test) >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "scripts/build-image without a toolchain: status 0"
grep -v '^build-image: .*airlock-base' "$tmp/err" >"$tmp/err2" || true
[ "$(wc -l <"$tmp/err2")" -eq 1 ] && grep -q "no Rust toolchain" "$tmp/err2" ||
    fail "scripts/build-image without a toolchain: expected its base line and one more, got: $(cat "$tmp/err")"
echo "ok: scripts/build-image without a toolchain stops with that line"
echo "sudo-toolchain: all passed"
