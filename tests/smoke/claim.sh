#!/usr/bin/env bash
# Docker smoke test: claim-time secrets (issue 44 item 4). Two containers of one "warm pool"
# start with AIRLOCK_WAIT_FOR_CLAIM, as the pods of `airlock k8s render --warm-pool` do.
# Before a claim: not ready, no proxy, no git API, no session key, no CA, no placeholder:
# nothing a later claimant could inherit. Each is then claimed (the claim file written, as a
# claim's downward-API annotation would be) and starts; the two sessions have different
# session ids, session keys and CAs. A stop while waiting ends the container at once.
# Usage: sudo tests/smoke/claim.sh
source "$(dirname "$0")/lib.sh"
smoke_sweep

[ "${AIRLOCK_SMOKE_IMAGE_BUILT:-}" = 1 ] || smoke_build_image
# Each pod of a pool has its own workspace.
for r in a b c; do
    mkdir -p "$SMOKE_DIR/repo-$r"
    git -C "$SMOKE_DIR/repo-$r" init -q -b main
    git -C "$SMOKE_DIR/repo-$r" -c user.name=o -c user.email=o@example.invalid commit -q --allow-empty -m base
    chown -R 1000:1000 "$SMOKE_DIR/repo-$r"
done
CLAIM=/run/airlock-claim
KEY=/run/airlock/session.key
CA=/run/airlock/proxy-public/ca.pem

start_warm() {
    local name=$1 audit_volume=$SMOKE_ID-$1-audit repo=$SMOKE_DIR/repo-$2
    track_container "$name"
    track_volume "$audit_volume"
    # shellcheck source=docker/run-flags.sh
    source "$SMOKE_ROOT/docker/run-flags.sh"
    docker run -d --name "$name" "${AIRLOCK_RUN_FLAGS[@]}" -e AIRLOCK_SANDBOX=pool \
        -e "AIRLOCK_WAIT_FOR_CLAIM=$CLAIM" "$SMOKE_IMAGE" sleep 3600 >/dev/null ||
        die "cannot start $name"
}
A=$SMOKE_ID-warm-a
B=$SMOKE_ID-warm-b
start_warm "$A" a
start_warm "$B" b
sleep 2

say "two warm pods, unclaimed"
for c in "$A" "$B"; do
    # Every check below runs in the container: a container that is not running fails here.
    [ "$(docker inspect -f '{{.State.Running}}' "$c")" = true ] ||
        die "$c is not running: $(docker logs "$c" 2>&1 | tail -3)"
    check "$c is running" [ "$(docker inspect -f '{{.State.Running}}' "$c")" = true ]
    check "$c says it waits for a claim" bash -c "docker logs '$c' 2>&1 | grep -q 'waiting for a claim'"
    check "$c is not ready" bash -c "! docker exec '$c' airlock-entrypoint --ready >/dev/null"
    check "$c runs no proxy" bash -c "! docker exec '$c' pgrep -x airlock-proxy >/dev/null"
    check "$c runs no git API" bash -c "! docker exec '$c' pgrep -x airlock-git-api >/dev/null"
    check "$c holds no session key" bash -c "! docker exec '$c' test -e $KEY"
    check "$c holds no CA" bash -c "! docker exec '$c' test -e $CA"
    check "$c has no proxy state" bash -c "! docker exec '$c' test -e /run/airlock/proxy"
done

say "claimed"
docker exec "$A" sh -c "echo claim-a >$CLAIM"
docker exec "$B" sh -c "echo claim-b >$CLAIM"
for c in "$A" "$B"; do
    ok=0
    for _ in $(seq 100); do
        if docker exec "$c" airlock-entrypoint --ready >/dev/null 2>&1; then ok=1; break; fi
        sleep 0.1
    done
    check "$c is ready after its claim" [ "$ok" = 1 ]
    [ "$ok" = 1 ] || die "$c did not start after its claim: $(docker logs "$c" 2>&1 | tail -5)"
done
key_a=$(docker exec "$A" sha256sum $KEY | cut -c1-64)
key_b=$(docker exec "$B" sha256sum $KEY | cut -c1-64)
ca_a=$(docker exec "$A" sha256sum $CA | cut -c1-64)
ca_b=$(docker exec "$B" sha256sum $CA | cut -c1-64)
sess_a=$(docker exec "$A" airlock-entrypoint --ready)
sess_b=$(docker exec "$B" airlock-entrypoint --ready)
check "both have a session key" [ -n "$key_a" ] && [ -n "$key_b" ]
check "the session keys differ" [ "$key_a" != "$key_b" ]
check "the CAs differ" [ -n "$ca_a" ] && [ "$ca_a" != "$ca_b" ]
check "the sessions differ ($sess_a / $sess_b)" [ "$sess_a" != "$sess_b" ]
check "the claim is logged" bash -c "docker logs '$A' 2>&1 | grep -q 'claimed (claim-a)'"

say "a stop while waiting"
C=$SMOKE_ID-warm-c
start_warm "$C" c
sleep 1
t=$SECONDS
docker stop -t 10 "$C" >/dev/null
check "a waiting container stops at once ($((SECONDS - t)) s)" [ $((SECONDS - t)) -lt 5 ]

if [ "$SMOKE_FAILS" -ne 0 ]; then
    for c in "$A" "$B"; do say "$c log:"; docker logs "$c" 2>&1 | tail -20 >&2; done
    die "$SMOKE_FAILS check(s) failed"
fi
say "claim: all checks passed"
