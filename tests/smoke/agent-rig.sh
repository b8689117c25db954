# The rig both agent tests share (sourced, after lib.sh): names, addresses, the smoke CA and
# leaves, the policy. Set before sourcing: RIG (a letter that keeps this test's Docker names
# apart) and RIG_GIT_EXTRA (extra lines for the policy's [git] table, or empty).
smoke_sweep
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

IMAGE=${AIRLOCK_CLAUDE_IMAGE:-airlock:claude}
NET=$SMOKE_ID-${RIG}net
UP=$SMOKE_ID-${RIG}up
API=$SMOKE_ID-${RIG}api
APP=$SMOKE_ID-${RIG}app
AUDIT=$SMOKE_ID-${RIG}audit
APP4=192.0.2.2
APP6=2001:db8:192::2
UP4=192.0.2.10
UP6=2001:db8:192::10
API4=192.0.2.20
API6=2001:db8:192::20
OWNER=acme
NAME=app
BRANCH=sandbox/smoke/work
KEY=sk-ant-api03-SMOKEKEY$RANDOM$RANDOM$RANDOM
TOKEN=ghp_SMOKETOKEN$RANDOM$RANDOM$RANDOM

docker image inspect "$IMAGE" >/dev/null 2>&1 || die "$IMAGE is missing: run scripts/build-agent-image claude"
fakenet=$(smoke_fakenet_bin)
smoke_ca "$SMOKE_DIR"
# The leaf the fake API serves: api.anthropic.com, signed by the test CA.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=api.anthropic.com \
    -keyout "$SMOKE_DIR/api.key" -out "$SMOKE_DIR/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.anthropic.com\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$SMOKE_DIR/api.ext"
openssl x509 -req -in "$SMOKE_DIR/api.csr" -CA "$SMOKE_DIR/ca.pem" -CAkey "$SMOKE_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$SMOKE_DIR/api.ext" -out "$SMOKE_DIR/api.pem" 2>/dev/null ||
    die "cannot sign the api.anthropic.com leaf"
chmod 0644 "$SMOKE_DIR/api.pem" "$SMOKE_DIR/api.key"

# The forge (as tests/smoke/git.sh): github.com/acme/app with main; the hook logs ref updates.
gitroot=$SMOKE_DIR/gitroot
upstream=$gitroot/$OWNER/$NAME.git
hooks_log=$gitroot/hooks.log
hostgit() { git -c safe.directory='*' -c user.name=seed -c user.email=seed@example.invalid "$@"; }
mkdir -p "$upstream"
hostgit -C "$upstream" init -q --bare -b main
repo=$SMOKE_DIR/repo
hostgit clone -q "file://$upstream" "$repo" 2>/dev/null
echo "# app" >"$repo/README.md"
hostgit -C "$repo" add -A
hostgit -C "$repo" commit -q -m seed
hostgit -C "$repo" push -q origin main
main=$(hostgit -C "$repo" rev-parse main)
cat >"$upstream/hooks/pre-receive" <<SH
#!/bin/sh
while read old new ref; do echo "$OWNER/$NAME \$old \$new \$ref" >> /git/hooks.log; done
SH
chmod 0755 "$upstream/hooks/pre-receive"
: >"$hooks_log"
chmod 0666 "$hooks_log"
hostgit -C "$repo" remote set-url origin "https://github.com/$OWNER/$NAME.git"
hostgit -C "$repo" checkout -q -b "$BRANCH"
printf '/.smoke/\n' >>"$repo/.git/info/exclude"
mkdir -p "$repo/.smoke"
chown -R 1000:1000 "$repo"

echo -n "$TOKEN" >"$SMOKE_DIR/github_token"
chmod 0400 "$SMOKE_DIR/github_token"
cat >"$SMOKE_DIR/policy.toml" <<TOML
[sandbox]
name = "smoke"

[network]
allow = ["api.anthropic.com", "github.com"]

[[credentials]]
preset = "anthropic"
source = { env = "ANTHROPIC_API_KEY" }

[[credentials]]
preset = "github"
source = { file = "/run/secrets/github_token" }

[git]
repositories = ["github.com/$OWNER/$NAME"]
$RIG_GIT_EXTRA
TOML
chmod 0644 "$SMOKE_DIR/policy.toml"
