#!/usr/bin/env bash
# Builds the local base image airlock-base:bookworm without a registry: debootstrap a
# minimal Debian bookworm root filesystem, add docker/base-packages.txt, strip what an
# appliance never needs (docs, man pages, locales, apt lists, caches), `docker import` it.
# Usage: sudo docker/build-base.sh          (normally run by scripts/build-image)
#        docker/build-base.sh --hash   (the label that says which package list a base has)
# AIRLOCK_DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${AIRLOCK_BASE_TAG:-airlock-base:bookworm}
MIRROR=${AIRLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PKGS=$(grep -v '^\s*#' docker/base-packages.txt | grep -v '^\s*$' | sort -u | paste -sd, -)
HASH=$( (cat docker/base-packages.txt docker/build-base.sh) | sha256sum | cut -c1-16)
if [ "${1:-}" = "--hash" ]; then
    echo "$HASH"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "docker/build-base.sh: debootstrap needs root" >&2
    exit 1
fi
# A fresh machine's package lists may be empty or stale: update them before installing.
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

ROOT=$(mktemp -d /var/tmp/airlock-base.XXXXXX)
trap 'rm -rf --one-file-system "$ROOT"' EXIT

echo "build-base: debootstrap bookworm ($PKGS) from $MIRROR" >&2
debootstrap --variant=minbase --include="$PKGS" bookworm "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
    tail -20 "$ROOT.log" >&2
    exit 1
}
rm -f "$ROOT.log"

# apt inside the image keeps working for derived images (apt-get update fetches lists again).
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin \
    "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/lib/dpkg/*-old \
    "$ROOT"/var/log/* "$ROOT"/tmp/* "$ROOT"/var/tmp/* \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
    "$ROOT"/usr/share/lintian "$ROOT"/usr/share/linda
find "$ROOT"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
# Keep dpkg from putting them back in derived images.
cat >"$ROOT"/etc/dpkg/dpkg.cfg.d/airlock-nodoc <<'CFG'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
# Docker writes these at run time.
: >"$ROOT"/etc/hostname
: >"$ROOT"/etc/resolv.conf

echo "build-base: importing as $TAG" >&2
# No xattrs: file capabilities (ping's cap_net_raw) are dropped with them; ping works on
# Docker's unprivileged ICMP sockets, and no file in the image grants privilege on exec.
tar --numeric-owner -C "$ROOT" -c . |
    docker import \
        --change "LABEL org.airlock.base-hash=$HASH" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' \
        - "$TAG" >/dev/null
echo "build-base: $TAG ready (hash $HASH)" >&2
