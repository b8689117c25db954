#!/usr/bin/env bash
# The builder container (scripts/lib/builder.sh, `scripts/build-image --in-container`; issue 15
# item 10), without a registry: made from the local airlock-base:bookworm plus Debian's Rust
# toolchain (cargo-web, rustc-web) and gcc. Checks that it
#   1. starts and runs Debian's cargo (>= the workspace's rust-version), as the workspace's
#      owner, on bookworm's glibc; with AIRLOCK_BUILDER_TOOLCHAIN=host, the host's cargo;
#   2. builds a small crate (compile and link) into target/builder, owned by the
#      workspace's owner, and the binary runs in airlock-base:bookworm.
# The full path (the airlock binaries, then the image) is `scripts/build-image --in-container`.
# Uses its own crate volume, removed afterwards; the builder image stays cached like the base.
# Usage: sudo tests/scripts/builder.sh      (needs Docker and airlock-base:bookworm)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "builder: FAIL: $*" >&2; exit 1; }
docker info >/dev/null 2>&1 || fail "the Docker daemon is not reachable"
docker image inspect airlock-base:bookworm >/dev/null 2>&1 ||
    fail "airlock-base:bookworm is missing: build it first (scripts/build-image, or sudo docker/build-base.sh)"

tmp=$(mktemp -d /tmp/airlock-builder-test.XXXXXX)
export AIRLOCK_BUILDER_VOLUME=airlock-builder-test-$$
cleanup() {
    docker volume rm -f "$AIRLOCK_BUILDER_VOLUME" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
# A workspace owned by someone else than the caller: the builder runs as its owner.
mkdir -p "$tmp/ws/src"
cat >"$tmp/ws/Cargo.toml" <<'EOF'
[package]
name = "builder-hello"
version = "0.1.0"
edition = "2024"

[dependencies]
EOF
echo 'fn main() { println!("hello from the builder"); }' >"$tmp/ws/src/main.rs"
chown -R 4321:4321 "$tmp/ws"
cd "$tmp/ws"
. "$here/scripts/lib/cargo.sh"
. "$here/scripts/lib/builder.sh"
[ -z "${AIRLOCK_BUILDER_IMAGE:-}" ] || fail "AIRLOCK_BUILDER_IMAGE is set: this test is for the local builder"

# 1. it starts, runs cargo as the owner, on bookworm.
airlock_builder_find || fail "no builder (the line above says why)"
v=$(airlock_builder_cargo --version) || fail "cargo --version in the builder failed"
msrv=$(_airlock_cargo_msrv)
_airlock_cargo_new_enough "$v" || fail "the builder's cargo is $v, older than rust-version $msrv"
grep -q 'built from a source tarball' <<<"$v" || fail "the builder's cargo is not Debian's: $v"
echo "ok: the builder runs Debian's $v (rust-version $msrv)"
info=$("${_AIRLOCK_BUILDER_RUN[@]}" sh -c 'id -u; id -g; ldd --version | head -1; gcc --version | head -1')
[ "$(sed -n 1p <<<"$info"):$(sed -n 2p <<<"$info")" = 4321:4321 ] ||
    fail "the builder should run as the workspace's owner 4321:4321: $info"
grep -q 'GLIBC 2.36' <<<"$info" || fail "the builder is not bookworm's glibc 2.36: $info"
echo "ok: as the workspace's owner, on $(sed -n 3p <<<"$info"), with $(sed -n 4p <<<"$info")"

hv=$(airlock_cargo --version) || fail "no host cargo for AIRLOCK_BUILDER_TOOLCHAIN=host"
v=$(_AIRLOCK_BUILDER_RUN=(); AIRLOCK_BUILDER_TOOLCHAIN=host airlock_builder_cargo --version) ||
    fail "cargo --version in the builder with the host's toolchain failed"
[ "$v" = "$hv" ] || fail "AIRLOCK_BUILDER_TOOLCHAIN=host: the builder runs $v, the host has $hv"
echo "ok: AIRLOCK_BUILDER_TOOLCHAIN=host runs the host's $v"

# 2. a real build: compile, link, the binary in target/builder, the owner's, runs in the base.
airlock_builder_cargo build --release --quiet || fail "cargo build in the builder failed"
out=target/builder/release/builder-hello
[ -x "$out" ] || fail "$out was not built"
[ "$(stat -c %u:%g "$out")" = 4321:4321 ] || fail "$out is $(stat -c %U:%G "$out"), not the workspace owner's"
[ ! -e target/release ] || fail "the builder wrote target/release, the host's"
got=$(docker run --rm --network none -v "$PWD/$out:/hello:ro" airlock-base:bookworm /hello) ||
    fail "the built binary does not run in airlock-base:bookworm"
[ "$got" = "hello from the builder" ] || fail "the built binary printed: $got"
echo "ok: built $out (4321:4321), it runs in airlock-base:bookworm"
echo "builder: all passed"
