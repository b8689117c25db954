# shellcheck shell=bash
# The builder container: `scripts/build-image --in-container` (or AIRLOCK_BUILD_IN=container)
# builds the image's binaries in a container instead of on the host, with no Rust on the
# host. Sourced after scripts/lib/cargo.sh, from the workspace root:
#   airlock_builder_cargo build --release ...    (cargo ARGS in the builder, on this workspace)
# Its target directory is target/builder (AIRLOCK_BUILDER_TARGET), never shared with host
# builds; the binaries link against bookworm's glibc, the image's own, whatever the host's.
# The builder image:
#   default                      airlock-builder:bookworm, made here without a registry from
#                                the local base airlock-base:bookworm plus Debian's Rust
#                                toolchain, cargo-web and rustc-web (bookworm-security; the
#                                plain cargo/rustc of bookworm are 1.63, too old), gcc and
#                                libc6-dev; made again when the base or this file changes
#                                (the label org.airlock.builder-key). Its cargo must be at
#                                least the workspace's rust-version, else one line says so.
#   AIRLOCK_BUILDER_TOOLCHAIN=host  the same image, with the host's toolchain (the one
#                                scripts/lib/cargo.sh finds: root's, or the sudo user's)
#                                mounted read-only at /opt/rust and first on PATH.
#   AIRLOCK_BUILDER_IMAGE=IMAGE  any image with cargo on its PATH, e.g. rust:1.90-bookworm,
#                                pulled by Docker when it is missing (needs a registry).
#   AIRLOCK_DEBIAN_SECURITY_MIRROR  default http://deb.debian.org/debian-security
# Crates: the volume airlock-builder-cargo (AIRLOCK_BUILDER_VOLUME) is the builder's
# CARGO_HOME, filled from crates.io on the first build over the container's network,
# trusting the host's CA bundle (so a TLS-inspecting proxy the host trusts works). The
# container runs as the workspace's owner, so target/builder is theirs.
# Tested by tests/scripts/builder.sh.

AIRLOCK_BUILDER_TARGET=${AIRLOCK_BUILDER_TARGET:-target/builder}
AIRLOCK_BUILDER_VOLUME=${AIRLOCK_BUILDER_VOLUME:-airlock-builder-cargo}
_AIRLOCK_BUILDER_RUN=()

# The builder's packages (Debian's), on top of airlock-base:bookworm.
_AIRLOCK_BUILDER_PKGS="cargo-web rustc-web gcc libc6-dev"

# Makes airlock-builder:bookworm when it is missing or stale; prints its name.
_airlock_builder_image() {
    local base_id key log image=airlock-builder:bookworm
    local security=${AIRLOCK_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    base_id=$(docker image inspect -f '{{.Id}}' airlock-base:bookworm 2>/dev/null) || {
        echo "airlock: the builder is made from airlock-base:bookworm, which is missing: scripts/build-image makes it (or sudo docker/build-base.sh)" >&2
        return 1
    }
    key=$( (echo "$base_id $_AIRLOCK_BUILDER_PKGS $security"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)
    if [ "$(docker image inspect -f '{{index .Config.Labels "org.airlock.builder-key"}}' "$image" 2>/dev/null)" != "$key" ]; then
        echo "builder: making $image (airlock-base:bookworm + $_AIRLOCK_BUILDER_PKGS, Debian's packages; once, about a minute)" >&2
        log=$(mktemp)
        docker build -q --label "org.airlock.builder-key=$key" -t "$image" - >/dev/null 2>"$log" <<EOF || {
FROM airlock-base:bookworm
RUN echo 'deb $security bookworm-security main' >/etc/apt/sources.list.d/airlock-builder-security.list && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $_AIRLOCK_BUILDER_PKGS >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*
EOF
            grep -v -i -e deprecated -e buildx -e '^ *$' "$log" | tail -20 >&2
            rm -f "$log"
            echo "airlock: could not make the builder image $image (apt-get install $_AIRLOCK_BUILDER_PKGS in airlock-base:bookworm failed; the lines above say why)" >&2
            return 1
        }
        rm -f "$log"
    fi
    echo "$image"
}

# Sets _AIRLOCK_BUILDER_RUN (the `docker run ... IMAGE` prefix) or prints one line and fails.
airlock_builder_find() {
    [ ${#_AIRLOCK_BUILDER_RUN[@]} -gt 0 ] && return 0
    local image owner ca sysroot rustc n v msrv mounts=()
    owner=$(stat -c %u:%g .)
    msrv=$(_airlock_cargo_msrv)
    if [ -n "${AIRLOCK_BUILDER_IMAGE:-}" ]; then
        image=$AIRLOCK_BUILDER_IMAGE
        docker image inspect "$image" >/dev/null 2>&1 || {
            echo "builder: pulling $image" >&2
            docker pull -q "$image" >/dev/null || {
                echo "airlock: the builder image $image is not here and cannot be pulled (no registry?): unset AIRLOCK_BUILDER_IMAGE to use airlock-builder:bookworm, made locally" >&2
                return 1
            }
        }
    else
        image=$(_airlock_builder_image) || return 1
        if [ "${AIRLOCK_BUILDER_TOOLCHAIN:-debian}" = host ]; then
            airlock_cargo_find || return 1
            # The host toolchain's sysroot (bin/cargo, bin/rustc, lib/): rustc next to that cargo.
            n=${#AIRLOCK_CARGO_CMD[@]}
            rustc=${AIRLOCK_CARGO_CMD[n - 1]%cargo}rustc
            sysroot=$("${AIRLOCK_CARGO_CMD[@]:0:n-1}" "$rustc" --print sysroot 2>/dev/null) &&
                sysroot=$(realpath "$sysroot") && [ -x "$sysroot/bin/cargo" ] || {
                echo "airlock: cannot find the sysroot of the host's toolchain (${AIRLOCK_CARGO_CMD[*]}: rustc --print sysroot) to mount in the builder" >&2
                return 1
            }
            mounts+=(-v "$sysroot:/opt/rust:ro" -e "PATH=/opt/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        fi
    fi
    ca=$(realpath "${CARGO_HTTP_CAINFO:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}" 2>/dev/null) || ca=
    if [ -n "$ca" ] && [ -f "$ca" ]; then
        mounts+=(-v "$ca:/etc/airlock-builder-ca.pem:ro" -e CARGO_HTTP_CAINFO=/etc/airlock-builder-ca.pem)
    fi
    # The crate cache volume, owned by whoever the builder runs as.
    docker volume create "$AIRLOCK_BUILDER_VOLUME" >/dev/null &&
        docker run --rm --user 0:0 --entrypoint chown -v "$AIRLOCK_BUILDER_VOLUME:/cargo" "$image" "$owner" /cargo || {
        echo "airlock: cannot prepare the builder's crate volume $AIRLOCK_BUILDER_VOLUME" >&2
        return 1
    }
    _AIRLOCK_BUILDER_RUN=(docker run --rm --user "$owner" -v "$PWD:/src" -w /src
        -v "$AIRLOCK_BUILDER_VOLUME:/cargo" -e CARGO_HOME=/cargo -e HOME=/tmp
        -e "CARGO_TARGET_DIR=/src/$AIRLOCK_BUILDER_TARGET" -e CARGO_TERM_COLOR=never
        "${mounts[@]}" "$image")
    v=$("${_AIRLOCK_BUILDER_RUN[@]}" cargo --version 2>/dev/null) || v="no cargo"
    _airlock_cargo_new_enough "$v" || {
        _AIRLOCK_BUILDER_RUN=()
        echo "airlock: the builder's cargo ($image${AIRLOCK_BUILDER_TOOLCHAIN:+, toolchain $AIRLOCK_BUILDER_TOOLCHAIN}) is ${v%% (*}, older than the workspace's rust-version $msrv: AIRLOCK_BUILDER_TOOLCHAIN=host (the host's, mounted) or AIRLOCK_BUILDER_IMAGE=rust:$msrv-bookworm (a registry)" >&2
        return 1
    }
}

# Usage: airlock_builder_cargo ARGS...   (cargo ARGS in the builder container)
airlock_builder_cargo() {
    airlock_builder_find || return 1
    "${_AIRLOCK_BUILDER_RUN[@]}" cargo "$@"
}
