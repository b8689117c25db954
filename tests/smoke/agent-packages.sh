#!/usr/bin/env bash
# Package managers as agents use them (issue 16 item 5): inside an agent image (airlock:codex;
# every agent image has the same toolchain), started as docs/agents.md says, `pip install` and
# `npm install` go through the proxy to fake registries served under their real names on the
# test network (tests/smoke/fake_registry.py: a PyPI simple index at pypi.org with its wheel
# on files.pythonhosted.org, an npm registry at registry.npmjs.org with a tarball), with a
# leaf of the smoke test CA the proxy trusts through AIRLOCK_UPSTREAM_CA (test configuration
# only). The policy allows the three hosts and nothing more: like every host that is not
# passthrough they are intercepted (the audit shows every request with its path) and, not in
# network.writable, read-only: a publish (PUT) is refused with read-only-host.
# cargo is not in the agent images' toolchain, so `cargo fetch` is not tried here.
# Asserts: both packages installed and import/require, each registry request audited and
# seen by the fake, the PUT refused (read-only-host) and audited, nothing else allowed, a clean wire.
# Usage: sudo tests/smoke/agent-packages.sh
source "$(dirname "$0")/lib.sh"
RIG=p
RIG_AGENT=codex
RIG_GIT_EXTRA=
RIG_API_NAMES="pypi.org files.pythonhosted.org registry.npmjs.org"
source "$(dirname "$0")/agent-rig.sh"

# One leaf for the three registry names, replacing the rig's api.openai.com leaf.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=pypi.org \
    -keyout "$SMOKE_DIR/api.key" -out "$SMOKE_DIR/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:pypi.org,DNS:files.pythonhosted.org,DNS:registry.npmjs.org\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$SMOKE_DIR/api.ext"
openssl x509 -req -in "$SMOKE_DIR/api.csr" -CA "$SMOKE_DIR/ca.pem" -CAkey "$SMOKE_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$SMOKE_DIR/api.ext" -out "$SMOKE_DIR/api.pem" 2>/dev/null ||
    die "cannot sign the registries' leaf"
chmod 0644 "$SMOKE_DIR/api.pem" "$SMOKE_DIR/api.key"
sed -i 's/^allow = \["api.openai.com", "github.com"\]$/allow = ["api.openai.com", "github.com", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org"]/' \
    "$SMOKE_DIR/policy.toml"
grep -q '"registry.npmjs.org"' "$SMOKE_DIR/policy.toml" || die "the rig's policy has no allow line to extend"
echo '[]' >"$SMOKE_DIR/script.json"
rig_start "$SMOKE_ROOT/tests/smoke/fake_registry.py"

rig_run bash -c '
    cd /tmp
    python3 -m pip install --user --no-cache-dir smokepkg > /workspace/.smoke/pip.log 2>&1
    python3 -c "import smokepkg; print(smokepkg.GREETING)" > /workspace/.smoke/pip.out 2>&1
    mkdir n && cd n
    npm install --no-audit --no-fund --no-update-notifier smokepkg > /workspace/.smoke/npm.log 2>&1
    node -e "console.log(require(\"smokepkg\"))" > /workspace/.smoke/npm.out 2>&1
    curl -sS -o /dev/null -w "%{http_code}" -X PUT --data "{}" https://registry.npmjs.org/smokepkg > /workspace/.smoke/put.out 2>&1
    true'

check "pip install smokepkg from the fake PyPI ($(cat "$repo/.smoke/pip.out" 2>/dev/null))" \
    [ "$(cat "$repo/.smoke/pip.out" 2>/dev/null)" = "hello from the fake PyPI" ]
check "npm install smokepkg from the fake registry ($(cat "$repo/.smoke/npm.out" 2>/dev/null))" \
    [ "$(cat "$repo/.smoke/npm.out" 2>/dev/null)" = "hello from the fake npm registry" ]
check "a publish (PUT) is refused ($(cat "$repo/.smoke/put.out" 2>/dev/null))" [ "$(cat "$repo/.smoke/put.out" 2>/dev/null)" = 403 ]
audited() { # HOST PATH: an allowed, intercepted request for PATH on HOST in the audit log
    python3 - "$audit" "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(not any(r.get("host") == sys.argv[2] and (r.get("path") or "").rstrip("/") == sys.argv[3]
                 and r.get("decision") == "allow" and r.get("uid") == 1000 for r in rows))
PY
}
for hp in pypi.org:/simple/smokepkg files.pythonhosted.org:/packages/smokepkg-1.0.0-py3-none-any.whl \
    registry.npmjs.org:/smokepkg registry.npmjs.org:/smokepkg/-/smokepkg-1.0.0.tgz; do
    check "audited: GET https://${hp%%:*}${hp#*:}" audited "${hp%%:*}" "${hp#*:}"
    check "the fake registry served it" grep -qF "\"host\": \"${hp%%:*}\", \"path\": \"${hp#*:}" "$alog"
done
check "the PUT was refused as a write to a read-only host and audited" \
    grep -qE '"method":"PUT","host":"registry.npmjs.org".*"decision":"deny".*"reason":"read-only-host"' "$audit"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "pip:"; tail -5 "$repo/.smoke/pip.log" >&2
    say "npm:"; tail -8 "$repo/.smoke/npm.log" >&2
fi
rig_net_checks
say "package managers through the proxy: all checks passed"
