# shellcheck shell=bash
# The cargo the scripts build with, sourced by every script that builds:
#   . scripts/lib/cargo.sh; airlock_cargo build --release ...
# Which cargo, the first that is new enough (the workspace's rust-version):
#   1. AIRLOCK_CARGO=PATH, as it is;
#   2. `cargo` on PATH;
#   3. under sudo (root with SUDO_USER set; sudo's secure_path hides ~/.cargo/bin): the
#      invoking user's, ~USER/.cargo/bin/cargo (rustup's proxy) or else the cargo of a
#      toolchain in ~USER/.rustup/toolchains, run *as that user* with its HOME, so target/
#      and ~/.cargo stay theirs (and a target/ that is not theirs is one line saying so).
# None: one line saying how to get one, status 1. The search runs once per script.
# airlock_cargo_as_root runs the same toolchain as the caller (root) instead, for what must
# run as root (the namespace tests): after a build as the user it finds target/ up to date.
# Tested by tests/scripts/sudo-toolchain.sh.

AIRLOCK_CARGO_CMD=()
AIRLOCK_CARGO_ROOT_CMD=()

# Usage: _airlock_cargo_new_enough VERSION_LINE -> 0 when its x.y.z >= the workspace's MSRV.
_airlock_cargo_new_enough() {
    local have want
    have=$(sed -n 's/^cargo \([0-9][0-9.]*\).*/\1/p' <<<"$1")
    want=$(_airlock_cargo_msrv)
    [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" = "$want" ]
}

_airlock_cargo_msrv() {
    local root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$root/Cargo.toml" | head -1
}

# Sets AIRLOCK_CARGO_CMD (the command prefix that runs cargo) or prints one line and fails.
airlock_cargo_find() {
    [ ${#AIRLOCK_CARGO_CMD[@]} -gt 0 ] && return 0
    local msrv v tried=() c user home bin target runas=()
    msrv=$(_airlock_cargo_msrv)
    if [ -n "${AIRLOCK_CARGO:-}" ]; then
        v=$("$AIRLOCK_CARGO" --version 2>/dev/null) || {
            echo "airlock: AIRLOCK_CARGO=$AIRLOCK_CARGO does not run (cargo --version failed)" >&2
            return 1
        }
        _airlock_cargo_new_enough "$v" || {
            echo "airlock: AIRLOCK_CARGO=$AIRLOCK_CARGO is ${v%% (*}, older than the workspace's rust-version $msrv (rustup update)" >&2
            return 1
        }
        AIRLOCK_CARGO_CMD=("$AIRLOCK_CARGO")
        return 0
    fi
    if c=$(command -v cargo 2>/dev/null); then
        v=$(cargo --version 2>/dev/null) || v=
        if _airlock_cargo_new_enough "$v"; then
            AIRLOCK_CARGO_CMD=(cargo)
            return 0
        fi
        v=${v%% (*}
        tried+=("$c is ${v:-broken (cargo --version fails)}")
    fi
    user=${SUDO_USER:-}
    if [ "$(id -u)" -eq 0 ] && [ -n "$user" ] && [ "$user" != root ] &&
        home=$(getent passwd "$user" | cut -d: -f6) && [ -n "$home" ]; then
        bin=
        if [ -x "$home/.cargo/bin/cargo" ]; then
            bin=$home/.cargo/bin
        else
            for c in "$home"/.rustup/toolchains/stable-*/bin/cargo "$home"/.rustup/toolchains/*/bin/cargo; do
                [ -x "$c" ] && { bin=${c%/cargo}; break; }
            done
        fi
        if [ -n "$bin" ]; then
            if command -v runuser >/dev/null; then runas=(runuser -u "$user" --)
            else runas=(sudo -u "$user" --); fi
            runas+=(env "HOME=$home" "USER=$user" "LOGNAME=$user" "PATH=$bin:$PATH")
            v=$("${runas[@]}" cargo --version 2>/dev/null) || v=
            if _airlock_cargo_new_enough "$v"; then
                # Building as the user: the target directory must be theirs (an earlier
                # build as root leaves root-owned files cargo cannot overwrite).
                target=${CARGO_TARGET_DIR:-target}
                for c in "$target" "$target"/{debug,release} "$target"/{debug,release}/.fingerprint; do
                    [ ! -e "$c" ] || [ "$(stat -c %U "$c")" = "$user" ] || {
                        echo "airlock: building with $user's cargo ($bin), but $c is not $user's (an earlier build as root?): sudo chown -R $user: $target" >&2
                        return 1
                    }
                done
                if [ ! -e "$target" ] && ! "${runas[@]}" test -w "$(dirname "$target")"; then
                    echo "airlock: building with $user's cargo ($bin), but $user cannot create $target (set CARGO_TARGET_DIR to a directory $user owns)" >&2
                    return 1
                fi
                AIRLOCK_CARGO_CMD=("${runas[@]}" cargo)
                AIRLOCK_CARGO_ROOT_CMD=(env "RUSTUP_HOME=$home/.rustup" "CARGO_HOME=$home/.cargo" "PATH=$bin:$PATH" cargo)
                return 0
            fi
            v=${v%% (*}
            tried+=("$user's $bin/cargo is ${v:-broken (cargo --version fails; rustup default stable?)}")
        fi
    fi
    local why=
    [ ${#tried[@]} -gt 0 ] && why=" (${tried[*]})"
    echo "airlock: no Rust toolchain with cargo >= $msrv for $(id -un)${user:+ or $user}$why: install one with rustup (https://rustup.rs; as yourself, sudo then finds it), set AIRLOCK_CARGO=/path/to/cargo, or build the image's binaries in a container with Debian's toolchain: scripts/build-image --in-container (README: Quick start; docs/docker.md: Building the image)" >&2
    return 1
}

# Usage: airlock_cargo ARGS...   (cargo ARGS with the cargo found above; fails without one)
airlock_cargo() {
    airlock_cargo_find || return 1
    "${AIRLOCK_CARGO_CMD[@]}" "$@"
}

# Usage: airlock_cargo_as_root ARGS...   (the same cargo, but as the calling user, root)
airlock_cargo_as_root() {
    airlock_cargo_find || return 1
    if [ ${#AIRLOCK_CARGO_ROOT_CMD[@]} -gt 0 ]; then
        "${AIRLOCK_CARGO_ROOT_CMD[@]}" "$@"
    else
        "${AIRLOCK_CARGO_CMD[@]}" "$@"
    fi
}
