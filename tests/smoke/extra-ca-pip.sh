#!/usr/bin/env bash
# Docker smoke test (issue 16 item 4, pip): `pip install` behind a private mirror whose CA
# nothing trusts by default, in an agent image (airlock:codex: python3 and pip), started as
# docs/agents.md says. The fake registry (tests/smoke/fake_registry.py) serves pypi.org (the
# index: intercepted, an L7 rule) and files.pythonhosted.org (the wheel: network.passthrough,
# so the agent's own TLS verifies it) with a leaf of that CA.
#
# - EXTRA_CA_FILE=<the CA>: pip installs the package (the proxy verified the index, the
#   agent's bundle the wheel host);
# - AIRLOCK_UPSTREAM_CA=<the CA> (the proxy's alone): the index loads but the wheel through
#   the tunnel fails certificate verification: why the extra CA goes into the agent's bundle;
# - neither: the index is refused 502 upstream-certificate-invalid, audited.
# Usage: sudo tests/smoke/extra-ca-pip.sh     (AIRLOCK_SMOKE_PIP_IMAGE: another agent image)
source "$(dirname "$0")/lib.sh"
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

IMAGE=${AIRLOCK_SMOKE_PIP_IMAGE:-airlock:codex}
NET=$SMOKE_ID-pnet
UP=$SMOKE_ID-pup
REG=$SMOKE_ID-preg
APP=$SMOKE_ID-papp
AUDIT=$SMOKE_ID-paudit
APP4=192.0.2.194
APP6=2001:db8:118::2
UP4=192.0.2.200
UP6=2001:db8:118::10
REG4=192.0.2.210
REG6=2001:db8:118::20

docker image inspect "$IMAGE" >/dev/null 2>&1 || die "$IMAGE is missing: run scripts/build-agent-image ${IMAGE#airlock:}"
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"
# The mirror's leaf, signed by the private CA.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=pypi.org \
    -keyout "$SMOKE_DIR/reg.key" -out "$SMOKE_DIR/reg.csr" 2>/dev/null
printf 'subjectAltName=DNS:pypi.org,DNS:files.pythonhosted.org\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$SMOKE_DIR/reg.ext"
openssl x509 -req -in "$SMOKE_DIR/reg.csr" -CA "$SMOKE_DIR/ca.pem" -CAkey "$SMOKE_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$SMOKE_DIR/reg.ext" -out "$SMOKE_DIR/reg.pem" 2>/dev/null ||
    die "cannot sign the mirror's leaf"
chmod 0644 "$SMOKE_DIR/reg.pem" "$SMOKE_DIR/reg.key"

cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke"

[network]
allow = ["pypi.org", "files.pythonhosted.org"]
passthrough = ["files.pythonhosted.org"]

# An L7 rule: the proxy intercepts the index (reads every request, verifies the upstream).
[[rules]]
host = "pypi.org"
method = "GET"
path = "/**"
action = "allow"
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"

python3 - "$SMOKE_DIR" "$REG4" "$REG6" <<'PY'
import json, sys
d, reg4, reg6 = sys.argv[1:]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "dns": [{"ip": "::", "port": 53}],
    "zone": {"pypi.org": [reg4, reg6], "files.pythonhosted.org": [reg4, reg6]},
}, open(f"{d}/fakenet.json", "w"))
PY
chmod 0600 "$SMOKE_DIR/fakenet.json"
mkdir -p "$SMOKE_DIR/log" "$SMOKE_DIR/repo"
chmod 0777 "$SMOKE_DIR/log"
echo '[]' >"$SMOKE_DIR/script.json"
chmod 0644 "$SMOKE_DIR/script.json"
cat >"$SMOKE_DIR/repo/agent.sh" <<'SH'
cd /tmp
python3 -m pip install --user --no-cache-dir --retries 0 --timeout 20 smokepkg >/tmp/pip.log 2>&1
echo "pip=$?"
echo "import=$(python3 -c 'import smokepkg; print(smokepkg.GREETING)' 2>&1 | tail -1)"
echo "log=$(tr '\n' ' ' </tmp/pip.log | cut -c1-1500)"
SH
chmod 0644 "$SMOKE_DIR/repo/agent.sh"
chown -R 1000:1000 "$SMOKE_DIR/repo"

say "network $NET (internal, 192.0.2.192/26): DNS at $UP, the mirror at $REG ($IMAGE)"
track_network "$NET"
docker network create --internal --subnet 192.0.2.192/26 --gateway 192.0.2.193 \
    --ipv6 --subnet 2001:db8:118::/64 "$NET" >/dev/null
track_container "$UP"
docker run -d --name "$UP" --network "$NET" --ip "$UP4" --ip6 "$UP6" \
    -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR/fakenet.json:/cfg/fakenet.json:ro" \
    -v "$SMOKE_DIR/log:/log" \
    airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
track_container "$REG"
docker run -d --name "$REG" --network "$NET" --ip "$REG4" --ip6 "$REG6" --entrypoint python3 \
    -v "$SMOKE_ROOT/tests/smoke/fake_registry.py:/fake.py:ro" -v "$SMOKE_DIR:/d:ro" -v "$SMOKE_DIR/log:/log" \
    "$IMAGE" -u /fake.py /d/reg.pem /d/reg.key /d/script.json /log/registry.jsonl >/dev/null
for c in "$UP" "$REG"; do
    smoke_wait_ready "$c"
done
track_volume "$AUDIT"
rlog=$SMOKE_DIR/log/registry.jsonl
touch "$rlog"
say "set-up $(ms "$T0") ms"

# run NAME [VAR=VALUE...]: scripts/docker-run in $IMAGE, `bash /workspace/agent.sh` as the
# agent; NAME.out / NAME.err, the status in $rc; AIRLOCK_DOCKER_ARGS gets $EXTRA_ARGS.
run() {
    local name=$1; shift
    track_container "$APP-$name"
    rc=0
    : >"$rlog"
    env -u EXTRA_CA_FILE -u SUDO_USER "$@" \
        AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE="$IMAGE" AIRLOCK_POLICY="$SMOKE_DIR/policy.toml" \
        AIRLOCK_AUDIT_VOLUME="$AUDIT" \
        AIRLOCK_DOCKER_ARGS="--name $APP-$name --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4 ${EXTRA_ARGS:-}" \
        timeout 180 "$SMOKE_ROOT/scripts/docker-run" "$SMOKE_DIR/repo" -- bash /workspace/agent.sh \
        >"$SMOKE_DIR/$name.out" 2>"$SMOKE_DIR/$name.err" || rc=$?
    cp "$rlog" "$SMOKE_DIR/$name.registry"
}
get() { sed -n "s/^$2=//p" "$SMOKE_DIR/$1.out" | head -1; }
asked() { grep -c "\"host\": \"$2\"" "$SMOKE_DIR/$1.registry" || true; }

say "EXTRA_CA_FILE=<the mirror's CA>"
run with EXTRA_CA_FILE="$SMOKE_DIR/ca.pem"
check "pip install smokepkg: exit 0 ($(get with pip))" [ "$(get with pip)" = 0 ]
check "it imports ($(get with import))" [ "$(get with import)" = "hello from the fake PyPI" ]
check "the index came from the mirror through the proxy ($(asked with pypi.org) requests)" [ "$(asked with pypi.org)" -ge 1 ]
check "the wheel came through the tunnel ($(asked with files.pythonhosted.org) requests)" [ "$(asked with files.pythonhosted.org)" -ge 1 ]

say "AIRLOCK_UPSTREAM_CA=<the mirror's CA> (the proxy's alone)"
EXTRA_ARGS="-v $SMOKE_DIR/ca.pem:/etc/ssl/mirror-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/mirror-ca.pem" run proxy_only
check "pip install fails ($(get proxy_only pip))" [ "$(get proxy_only pip)" != 0 ]
check "the index still came from the mirror (the proxy trusts it: $(asked proxy_only pypi.org) requests)" [ "$(asked proxy_only pypi.org)" -ge 1 ]
check "the wheel through the tunnel failed certificate verification in pip" \
    grep -q 'CERTIFICATE_VERIFY_FAILED' <<<"$(get proxy_only log)"
check "and never reached the mirror ($(asked proxy_only files.pythonhosted.org))" [ "$(asked proxy_only files.pythonhosted.org)" = 0 ]

say "neither"
run neither
check "pip install fails ($(get neither pip))" [ "$(get neither pip)" != 0 ]
check "nothing reached the mirror ($(asked neither pypi.org) + $(asked neither files.pythonhosted.org))" \
    [ "$(asked neither pypi.org)$(asked neither files.pythonhosted.org)" = 00 ]
audit="$(volume_path "$AUDIT")/audit.jsonl"
refused() {
    python3 - "$audit" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(not any(r.get("host") == "pypi.org" and r.get("reason") == "upstream-certificate-invalid" for r in rows))
PY
}
check "audit: the index refused as upstream-certificate-invalid" refused

say "test total $(ms "$T0") ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    for r in with proxy_only neither; do
        say "$r:"; cat "$SMOKE_DIR/$r.out" >&2; grep '^airlock' "$SMOKE_DIR/$r.err" >&2 || true
    done
    die "$SMOKE_FAILS check(s) failed"
fi
say "extra-ca-pip: all checks passed"
