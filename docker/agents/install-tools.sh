#!/bin/sh
# Runs once per base inside a throwaway container of airlock:latest (--network none, the
# fetched .debs and apt lists mounted read-only at /debs); scripts/build-agent-image commits
# the result as airlock-agent-tools:<key>. apt installs from the cache only (--no-download;
# it checks each .deb against the lists' hashes). Keeps every guarantee of the base image.
set -eu
export DEBIAN_FRONTEND=noninteractive
cd /debs
sha256sum --quiet -c SHA256SUMS || { echo "install-tools: the .debs do not match their SHA256SUMS"; exit 1; }
mkdir -p /var/cache/apt/archives/partial /var/lib/apt/lists/partial
cp /debs/*.deb /var/cache/apt/archives/
cp /debs/lists/* /var/lib/apt/lists/
# shellcheck disable=SC2046
apt-get install -y -qq --no-download --no-install-recommends $(cat /debs/packages) >/tmp/apt.log 2>&1 ||
    { grep -m5 -E '^E:' /tmp/apt.log || tail -5 /tmp/apt.log; exit 1; }
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
# The CA bundle stays the per-start one the entrypoint writes (a trigger may have replaced it).
if [ "$(readlink /etc/ssl/certs/ca-certificates.crt || true)" != /run/airlock/ca-bundle.pem ]; then
    rm -f /etc/ssl/certs/ca-certificates.crt
    ln -s /run/airlock/ca-bundle.pem /etc/ssl/certs/ca-certificates.crt
fi
# pip may install into the agent's tmpfs home (`pip install --user`, or a venv): the image's
# python stays read-only anyway (--read-only), so Debian's PEP 668 marker only gets in the way.
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
# Nothing setuid/setgid, no sudo, wget or nc (as the base's Dockerfile).
find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
test -z "$(find / -xdev -type f -perm /6000)"
for b in sudo wget nc netcat ncat socat; do if command -v "$b" >/dev/null; then echo "install-tools: $b is installed"; exit 1; fi; done
for t in python3 pip3 node npm rg jq less gcc make; do command -v "$t" >/dev/null || { echo "install-tools: $t missing"; exit 1; }; done
python3 -c 'import venv'
rm -rf /var/log/* /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/cache/ldconfig/aux-cache /tmp/* /root/.cache /run/airlock/*
