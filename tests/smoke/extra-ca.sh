#!/usr/bin/env bash
# Docker smoke test (issue 16 item 4): one extra CA for corporate networks and mirrors.
# The fake internet (airlock-fakenet) serves mirror.test and tunnel.test with leaves of a
# private CA that nothing trusts by default. The policy intercepts mirror.test (an L7 rule)
# and tunnels tunnel.test untouched (network.passthrough). The appliance is started as
# docs/docker.md says (scripts/docker-run), once with EXTRA_CA_FILE=<the private CA> and
# once without.
#
# - with it: curl through the proxy gets 200 from the intercepted host (the proxy verified
#   the upstream with the extra CA) and from the passthrough host (the agent's own TLS
#   verified it: the agent's bundle holds the extra CA), explicitly and transparently, and
#   through Debian's system bundle path; git (GIT_SSL_CAINFO) verifies the passthrough host;
# - without it: the intercepted host is a 502 upstream-certificate-invalid (never sent) and
#   the passthrough host a certificate error in curl (exit 60) and in git;
# - a file that is not a PEM certificate stops the start (exit 78, one line naming
#   EXTRA_CA_FILE); a file that is not there stops scripts/docker-run (exit 78).
# Usage: sudo tests/smoke/extra-ca.sh          (root: the audit volume on the host)
source "$(dirname "$0")/lib.sh"
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

NET=$SMOKE_ID-xnet
UP=$SMOKE_ID-xup
APP=$SMOKE_ID-xapp
AUDIT=$SMOKE_ID-xaudit
APP4=192.0.2.130
APP6=2001:db8:117::2
UP4=192.0.2.140
UP6=2001:db8:117::10

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
fakenet=$(smoke_fakenet_bin)
# The private CA: the corporate proxy's or the mirror's root.
smoke_ca "$SMOKE_DIR"

cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke"

[network]
allow = ["mirror.test", "tunnel.test"]
passthrough = ["tunnel.test"]

# An L7 rule: the proxy intercepts mirror.test (reads every request, verifies the upstream).
[[rules]]
host = "mirror.test"
method = "GET"
path = "/**"
action = "allow"
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"

python3 - "$SMOKE_DIR" "$UP4" "$UP6" <<'PY'
import json, sys
d, up4, up6 = sys.argv[1:]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "https": [{"ip": "::", "port": 443, "names": ["mirror.test", "tunnel.test"]}],
    "dns": [{"ip": "::", "port": 53}],
    "zone": {"mirror.test": [up4, up6], "tunnel.test": [up4, up6]},
}, open(f"{d}/fakenet.json", "w"))
PY
chmod 0600 "$SMOKE_DIR/fakenet.json"
mkdir -p "$SMOKE_DIR/log" "$SMOKE_DIR/repo"
chown 1000:1000 "$SMOKE_DIR/repo"
printf 'not a certificate\n' >"$SMOKE_DIR/not-a-cert.pem"

cat >"$SMOKE_DIR/repo/agent.sh" <<'SH'
echo "started=$(date +%s%N)"
# NAME=<curl exit> <http status> <x-airlock-error>
c() {
    n=$1; shift
    h=$(curl -sS --max-time 20 -o /dev/null -D - -w 'status=%{http_code}\n' "$@" 2>/tmp/curl.err); r=$?
    printf '%s=%s %s %s %s\n' "$n" "$r" "$(sed -n 's/^status=//p' <<<"$h")" \
        "$(sed -n 's/^x-airlock-error: *//Ip' <<<"$h" | tr -d '\r')" "$(tr '\n' ' ' </tmp/curl.err)"
}
c mirror https://mirror.test/simple/pkg/
c tunnel https://tunnel.test/
c tunnel_transparent --noproxy '*' https://tunnel.test/
c mirror_transparent --noproxy '*' https://mirror.test/simple/pkg/
# Tools that read only Debian's system bundle path (a symlink to the agent's bundle).
unset CURL_CA_BUNDLE SSL_CERT_FILE
c tunnel_system https://tunnel.test/
echo "bundle_extra=$(grep -c "operator's extra CA" /run/airlock/ca-bundle.pem)"
# git (the real binary, outside the workspace) through the tunnel: GIT_SSL_CAINFO is the
# bundle. The fake host is no git server, so the TLS is what is judged here.
cd "$HOME" && o=$(GIT_TERMINAL_PROMPT=0 /usr/bin/git ls-remote https://tunnel.test/acme/app.git 2>&1)
echo "git_tunnel=$? $(tr '\n' ' ' <<<"$o")"
SH
chmod 0644 "$SMOKE_DIR/repo/agent.sh"

say "network $NET (internal, 192.0.2.128/26), mirror.test and tunnel.test at $UP"
track_network "$NET"
docker network create --internal --subnet 192.0.2.128/26 --gateway 192.0.2.129 \
    --ipv6 --subnet 2001:db8:117::/64 "$NET" >/dev/null
track_container "$UP"
docker run -d --name "$UP" --network "$NET" --ip "$UP4" --ip6 "$UP6" \
    -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR/fakenet.json:/cfg/fakenet.json:ro" \
    -v "$SMOKE_DIR/log:/log" \
    airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
smoke_wait_ready "$UP"
track_volume "$AUDIT"
say "set-up $(ms "$T0") ms"

# run NAME [VAR=VALUE...]: scripts/docker-run as docs/docker.md says (VAR=VALUE: EXTRA_CA_FILE or
# nothing), `bash /workspace/agent.sh` as the agent; NAME.out / NAME.err, the status in $rc.
run() {
    local name=$1; shift
    track_container "$APP-$name"
    rc=0
    env -u EXTRA_CA_FILE -u SUDO_USER "$@" \
        AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE="$SMOKE_IMAGE" AIRLOCK_POLICY="$SMOKE_DIR/policy.toml" \
        AIRLOCK_AUDIT_VOLUME="$AUDIT" \
        AIRLOCK_DOCKER_ARGS="--name $APP-$name --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4" \
        timeout 120 "$SMOKE_ROOT/scripts/docker-run" "$SMOKE_DIR/repo" -- bash /workspace/agent.sh \
        >"$SMOKE_DIR/$name.out" 2>"$SMOKE_DIR/$name.err" || rc=$?
}
# field NAME RUN N: the Nth field (1: curl exit, 2: status, 3: x-airlock-error) of NAME.
field() { sed -n "s/^$1=//p" "$SMOKE_DIR/$2.out" | head -1 | cut -d' ' -f"$3"; }
line() { sed -n "s/^$1=//p" "$SMOKE_DIR/$2.out" | head -1; }

say "with EXTRA_CA_FILE=<the private CA>"
run with EXTRA_CA_FILE="$SMOKE_DIR/ca.pem"
grep -q '^started=' "$SMOKE_DIR/with.out" || { tail -20 "$SMOKE_DIR/with.err" >&2; die "the agent never ran (status $rc)"; }
for n in mirror mirror_transparent; do
    check "$n: intercepted, the proxy verified the upstream with the extra CA: 200 ($(line $n with))" \
        [ "$(field $n with 2)" = 200 ]
done
for n in tunnel tunnel_transparent tunnel_system; do
    check "$n: passthrough, the agent's bundle verified the upstream: 200 ($(line $n with))" \
        [ "$(field $n with 2)" = 200 ]
done
check "the agent's bundle holds the extra CA once ($(line bundle_extra with))" [ "$(line bundle_extra with)" = 1 ]
# git's TLS (GnuTLS in Debian) says "server certificate verification failed".
cert_error='certificate verification failed\|SSL certificate problem'
git_tls_ok() { ! grep -q "$cert_error" <<<"$(line git_tunnel with)" && grep -q 'tunnel.test' <<<"$(line git_tunnel with)"; }
check "git through the tunnel verified the host (then found no repository: $(line git_tunnel with | cut -c1-100))" git_tls_ok

say "without it"
run without
grep -q '^started=' "$SMOKE_DIR/without.out" || { tail -20 "$SMOKE_DIR/without.err" >&2; die "the agent never ran (status $rc)"; }
for n in mirror mirror_transparent; do
    check "$n: 502 upstream-certificate-invalid ($(line $n without))" \
        [ "$(field $n without 2) $(field $n without 3)" = "502 upstream-certificate-invalid" ]
done
for n in tunnel tunnel_transparent tunnel_system; do
    check "$n: curl's certificate error, exit 60 ($(line $n without | cut -c1-120))" [ "$(field $n without 1)" = 60 ]
done
check "git through the tunnel: a certificate error ($(line git_tunnel without | cut -c1-120))" \
    grep -q "$cert_error" <<<"$(line git_tunnel without)"

say "upstream and the audit log"
ulog=$SMOKE_DIR/log/fakenet.jsonl
served() { grep '"kind":"http"' "$ulog" | grep -c "\"sni\":\"$1\"" || true; }
check "the fake mirror served only the runs that trusted it ($(served mirror.test) requests: 2)" [ "$(served mirror.test)" = 2 ]
check "the fake tunnel host served only the runs that trusted it ($(served tunnel.test) requests: 4)" [ "$(served tunnel.test)" = 4 ]
audit="$(volume_path "$AUDIT")/audit.jsonl"
check "audit: the untrusted mirror refused as upstream-certificate-invalid" \
    grep -q '"reason":"upstream-certificate-invalid".*"host":"mirror.test"\|"host":"mirror.test".*"reason":"upstream-certificate-invalid"' "$audit"

say "bad input"
run bad EXTRA_CA_FILE="$SMOKE_DIR/not-a-cert.pem"
bad=$(grep '^airlock: ' "$SMOKE_DIR/bad.err" || true)
check "a file that is not a PEM certificate: exit 78 ($rc)" [ "$rc" = 78 ]
check "one line naming EXTRA_CA_FILE ($bad)" eval \
    '[ "$(wc -l <<<"$bad")" = 1 ] && grep -q "the extra CA $SMOKE_DIR/not-a-cert.pem (EXTRA_CA_FILE, mounted at /etc/airlock/extra-ca.pem) holds no PEM certificate" <<<"$bad"'
run absent EXTRA_CA_FILE="$SMOKE_DIR/absent.pem"
check "a file that is not there: scripts/docker-run exit 78 ($rc: $(cat "$SMOKE_DIR/absent.err"))" eval \
    '[ "$rc" = 78 ] && grep -q "EXTRA_CA_FILE=.*absent.pem: no such file" "$SMOKE_DIR/absent.err"'

say "test total $(ms "$T0") ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    for r in with without; do say "$r:"; cat "$SMOKE_DIR/$r.out" >&2; grep '^airlock' "$SMOKE_DIR/$r.err" >&2 || true; done
    die "$SMOKE_FAILS check(s) failed"
fi
say "extra-ca: all checks passed"
