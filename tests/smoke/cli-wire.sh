#!/usr/bin/env bash
# Docker smoke test: the wire check for a sandbox the `airlock` CLI started (issue 18). A
# sandbox made by `airlock new` (Engine API, its own checkout and branch) on a private
# network in front of a fake internet (`--network`, `--dns`, the test CA for the proxy with
# `--upstream-ca`); through `airlock exec` the agent makes allowed requests (explicit proxy,
# transparent) and tries every way out that must fail (a denied host, a direct IP, the
# metadata address, IPv6, a foreign resolver, raw UDP, ping). tcpdump on the bridge proves
# every packet the sandbox sent belongs to a connection its proxy audited, is a DNS query
# for an allowed name, or is ARP/ND housekeeping (wire_check.py, as egress.sh), and the
# upstream saw only the allowed requests.
# Usage: sudo tests/smoke/cli-wire.sh       (root: tcpdump; the sandbox's audit directory)
source "$(dirname "$0")/lib.sh"
smoke_sweep

NET=$SMOKE_ID-cnet
UP=$SMOKE_ID-cup
SB=${SMOKE_ID#airlock-}-wire    # sandbox smoke-<pid>-wire, container airlock-smoke-<pid>-wire
UP4=203.0.113.138
UP6=2001:db8:187::10

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
fakenet=$(smoke_fakenet_bin)
(cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-cli) || die "cannot build the airlock CLI"
dir=${CARGO_TARGET_DIR:-target}
case $dir in /*) ;; *) dir=$SMOKE_ROOT/$dir ;; esac
airlock() {
    AIRLOCK_DATA_DIR=$SMOKE_DIR/data AIRLOCK_CONFIG_DIR=$SMOKE_DIR/config \
        "$dir/debug/airlock" --image "$SMOKE_IMAGE" "$@"
}
smoke_ca "$SMOKE_DIR"

python3 - "$SMOKE_DIR" <<PY
import json, sys
d = sys.argv[1]
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "http": [{"ip": "::", "port": 80}],
    "https": [{"ip": "::", "port": 443, "names": ["allowed.test", "blocked.test"]}],
    "dns": [{"ip": "::", "port": 53}],
    "udp": [{"ip": "::", "port": 443}],
    "zone": {"allowed.test": ["$UP4", "$UP6"], "blocked.test": ["$UP4"]},
}, open(f"{d}/fakenet.json", "w"))
PY
printf '[sandbox]\nname = "cliwire"\n\n[network]\nallow = ["allowed.test"]\n' >"$SMOKE_DIR/policy.toml"
chmod 0644 "$SMOKE_DIR/policy.toml"
mkdir -p "$SMOKE_DIR/log" "$SMOKE_DIR/repo"
git -C "$SMOKE_DIR/repo" init -q -b main
git -C "$SMOKE_DIR/repo" -c user.name=o -c user.email=o@example.invalid commit -q --allow-empty -m base

say "network $NET (internal, 203.0.113.128/25 and 2001:db8:187::/64), upstream $UP"
smoke_fakenet_up "$fakenet" "$NET" 203.0.113.128/25 203.0.113.129 "$UP" "$UP4" 2001:db8:187::/64 "$UP6"

smoke_capture "$NET"

say "airlock new $SB --network $NET --dns $UP4 --upstream-ca (the fake internet's CA)"
track_container "airlock-$SB"
airlock new "$SB" --repo "$SMOKE_DIR/repo" --policy "$SMOKE_DIR/policy.toml" \
    --network "$NET" --dns "$UP4" --upstream-ca "$SMOKE_DIR/ca.pem" -- sleep 3600 \
    >"$SMOKE_DIR/new.out" 2>&1 || die "airlock new failed: $(tail -5 "$SMOKE_DIR/new.out")"
read -r APP4 APP6 <<<"$(docker inspect -f \
    '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.GlobalIPv6Address}}{{end}}' "airlock-$SB")"
say "sandbox at $APP4 $APP6"
[ -n "$APP4" ] && [ -n "$APP6" ] || die "the sandbox has no address on $NET (v4 '$APP4', v6 '$APP6')"

# The agent's session, one KEY=VALUE line per item. HTTPS status codes with -k: what is
# checked here is the wire, not the certificate chain (egress.sh checks that).
attack=$(cat <<SH
C="curl -sS --max-time 10"
echo "https=\$(\$C -k -o /dev/null -w '%{http_code}' https://allowed.test/)"
echo "http=\$(\$C -o /dev/null -w '%{http_code}' http://allowed.test/)"
echo "transparent=\$(\$C -k --noproxy '*' -o /dev/null -w '%{http_code}' https://allowed.test/)"
echo "blocked=\$(\$C -o /dev/null -w '%{http_code}' http://blocked.test/)"
\$C -k -f -o /dev/null https://blocked.test/ 2>/dev/null; echo "blocked_https=\$?"
\$C -k -f --noproxy '*' --connect-timeout 5 -o /dev/null https://blocked.test/ 2>/dev/null; echo "blocked_transparent=\$?"
\$C -f --noproxy '*' --connect-timeout 5 -o /dev/null http://$UP4/ 2>/dev/null; echo "direct=\$?"
\$C -f --noproxy '*' --connect-timeout 5 -o /dev/null http://169.254.169.254/ 2>/dev/null; echo "meta=\$?"
\$C -f -6 --noproxy '*' --connect-timeout 5 -o /dev/null 'http://[$UP6]/' 2>/dev/null; echo "v6=\$?"
getent hosts blocked.test >/dev/null; echo "resolve_blocked=\$?"
q='\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07blocked\\x04test\\x00\\x00\\x01\\x00\\x01'
( exec 3<>/dev/udp/$UP4/53 && printf "\$q" >&3 && timeout 3 head -c 4 <&3 >/dev/null ) 2>/dev/null
( exec 3<>/dev/udp/$UP4/443 && printf 'exfil-udp' >&3 ) 2>/dev/null; echo "udp_sent=\$?"
( exec 3<>/dev/udp6/$UP6/443 && printf 'exfil-udp6' >&3 ) 2>/dev/null; echo "udp6_sent=\$?"
ping -c1 -W2 $UP4 >/dev/null 2>&1; echo "ping=\$?"
ping -6 -c1 -W2 $UP6 >/dev/null 2>&1; echo "ping6=\$?"
echo "id=\$(id -u)"
SH
)
airlock exec "$SB" -- bash -c "$attack" >"$SMOKE_DIR/agent.out" 2>"$SMOKE_DIR/agent.err" || true
# Stopping the sandbox stops its proxy, which flushes the audit log.
airlock stop "$SB" >/dev/null 2>&1 || die "airlock stop failed"
sleep 0.5
kill "$tcpdump_pid" 2>/dev/null; wait "$tcpdump_pid" 2>/dev/null || true
out=$(cat "$SMOKE_DIR/agent.out")
get() { sed -n "s/^$1=//p" <<<"$out" | head -1; }
if [ -z "$(get id)" ]; then
    cat "$SMOKE_DIR/agent.err" >&2
    die "the agent's session never ran"
fi

say "agent session (airlock exec)"
check "as the agent, uid 1000 ($(get id))" [ "$(get id)" = 1000 ]
check "allowed HTTPS through the explicit proxy: 200 ($(get https))" [ "$(get https)" = 200 ]
check "allowed HTTP through the explicit proxy: 200 ($(get http))" [ "$(get http)" = 200 ]
check "allowed HTTPS without proxy variables (transparent): 200 ($(get transparent))" [ "$(get transparent)" = 200 ]
check "blocked host: 403 ($(get blocked))" [ "$(get blocked)" = 403 ]
nonzero() { local v; v=$(get "$1"); [ -n "$v" ] && [ "$v" != 0 ] && [ "$v" != 127 ]; }
for item in blocked_https blocked_transparent direct meta v6 resolve_blocked ping ping6; do
    check "$item fails ($(get "$item"))" nonzero "$item"
done

say "upstream and the audit log"
ulog=$SMOKE_DIR/log/fakenet.jsonl
audit=$SMOKE_DIR/data/sandboxes/$SB/audit/audit.jsonl
check "upstream saw the allowed requests" grep -q '"kind":"http"' "$ulog"
check "upstream saw nothing about blocked.test" bash -c "! grep -q 'blocked' '$ulog'"
check "upstream saw no UDP datagram" bash -c "! grep -q '\"kind\":\"udp\"' '$ulog'"
check "the sandbox's audit log (in its data directory) has the denials" grep -q '"reason":"blocked-by-policy"' "$audit"

say "wire (tcpdump on $BR)"
tcpdump -nn -r "$SMOKE_DIR/wire.pcap" 2>/dev/null >"$SMOKE_DIR/wire.txt"
if python3 "$SMOKE_ROOT/tests/smoke/wire_check.py" "$audit" allowed.test "$APP4" "$APP6" \
    <"$SMOKE_DIR/wire.txt"; then
    pass "every packet from the CLI's sandbox is its proxy's, an allowed DNS query or housekeeping"
else
    fail "a packet left the CLI's sandbox that its proxy did not send"
fi

if [ "$SMOKE_FAILS" -ne 0 ]; then
    say "agent output:"; cat "$SMOKE_DIR/agent.out" "$SMOKE_DIR/agent.err" >&2
    say "sandbox log (last 30 lines):"; airlock logs "$SB" --tail 30 >&2 || true
    die "$SMOKE_FAILS check(s) failed"
fi
airlock destroy "$SB" --force >/dev/null || die "airlock destroy $SB failed"
say "cli-wire: all checks passed"
