#!/usr/bin/env bash
# scripts/docker-run names the sandbox after the checkout's directory when neither
# AIRLOCK_SANDBOX nor AIRLOCK_POLICY says otherwise (issue 15 item 6: N checkouts are N
# sandboxes without writing a policy). A fake `docker` on PATH prints what it was given.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/My App.v2" "$tmp/---" 
cat >"$tmp/bin/docker" <<'FAKE'
#!/bin/sh
has=no
for a in "$@"; do [ "$a" = AIRLOCK_SANDBOX ] && has=yes; done
echo "sandbox-flag=$has sandbox=${AIRLOCK_SANDBOX:-}"
FAKE
chmod +x "$tmp/bin/docker"
printf '[sandbox]\nname = "mine"\n' >"$tmp/policy.toml"
run() { env -u AIRLOCK_SANDBOX -u AIRLOCK_POLICY PATH="$tmp/bin:$PATH" AIRLOCK_NO_BUILD=1 "$@" </dev/null; }
fail() { echo "docker-run-name: FAIL $*" >&2; exit 1; }

out=$(run "$here/scripts/docker-run" "$tmp/My App.v2" -- true)
[ "$out" = "sandbox-flag=yes sandbox=my-app-v2" ] || fail "directory name: $out"
out=$(run "$here/scripts/docker-run" "$tmp/---" -- true)
[ "$out" = "sandbox-flag=yes sandbox=sandbox" ] || fail "no usable character: $out"
out=$(run env AIRLOCK_SANDBOX=given "$here/scripts/docker-run" "$tmp/My App.v2" -- true)
[ "$out" = "sandbox-flag=yes sandbox=given" ] || fail "AIRLOCK_SANDBOX wins: $out"
out=$(run env AIRLOCK_POLICY="$tmp/policy.toml" "$here/scripts/docker-run" "$tmp/My App.v2" -- true)
[ "$out" = "sandbox-flag=no sandbox=" ] || fail "a policy of one's own keeps its name: $out"
echo "docker-run-name: ok"
