#!/usr/bin/env bash
# The friction benchmark: tests/friction/corpus.txt, commands coding agents really run,
# played as the agent in the real image, twice: started as docs/docker.md says
# (scripts/docker-run on a git checkout) and in a sandbox of the host CLI (`airlock new` on a
# copy of the same repository, its own branch and checkout), each on a private network in
# front of the fake internet (airlock-fakenet: github.com serving the repository through
# `git http-backend`, crates.io's index; tests/smoke/fake_registry.py: PyPI and npm serving a
# package, when the image has python3). Prints OK / refused / failed / absent per category
# for each way, writes the machine-readable results, and exits 1 when a command's outcome is
# not the corpus's expectation (an honest command refused or failing; a documented refusal
# gone).
#
# The operator's identity comes the way scripts/docker-run reads it (the host user's git
# config, here a HOME of the test's own): no commit in the corpus sets one first.
# Usage: sudo tests/friction/run.sh        (root: Docker and the fake internet)
#   AIRLOCK_IMAGE=TAG     the image (default airlock:latest; an agent image has more tools)
#   FRICTION_OUT=FILE     the results (default target/friction/results.json; the CLI's beside
#                         it, results-cli.json)
#   FRICTION_CORPUS=FILE  another corpus in the same format (default tests/friction/corpus.txt)
#   FRICTION_WAYS="docker-run cli"   which ways to run it (default both)
source "$(dirname "$0")/../smoke/lib.sh"
smoke_sweep
HERE=$SMOKE_ROOT/tests/friction
NET=$SMOKE_ID-fnet
UP=$SMOKE_ID-fup
APP=$SMOKE_ID-fapp
AUDIT=$SMOKE_ID-faudit
UP4=192.0.2.10
REG=$SMOKE_ID-freg
REG4=192.0.2.11
TOKEN=ghp_FRICTIONTOKEN$RANDOM$RANDOM$RANDOM
HOSTS='"github.com", "registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "index.crates.io"'
OUT=${FRICTION_OUT:-$SMOKE_ROOT/target/friction/results.json}
WAYS=${FRICTION_WAYS:-docker-run cli}
CORPUS=$(realpath "${FRICTION_CORPUS:-$HERE/corpus.txt}")

hostgit() { git -c safe.directory='*' -c user.name=seed -c user.email=seed@example.invalid "$@"; }

# The project the agent works on: files for every tool in the corpus, two commits on main,
# tag v1.0, branch feature (src/app.sh) and branch conflict (README.md line 2).
seed_files() {
    local r=$1
    mkdir -p "$r/src" "$r/lib" "$r/t" "$r/tests" "$r/py" "$r/js" "$r/rs/src" "$r/docs"
    printf '# app\nhello airlock\nusage: see docs\n' >"$r/README.md"
    printf '#!/bin/sh\ngreet() { echo "hello $1"; }\ngreet "${1:-world}"\n' >"$r/src/app.sh"
    printf 'package Greet;\nsub greet { return "hello $_[0]" }\n1;\n' >"$r/lib/Greet.pm"
    printf 'use Test::More tests => 1;\nuse Greet;\nis(Greet::greet("x"), "hello x");\n' >"$r/t/greet.t"
    printf '#!/bin/sh\nset -e\n[ "$(sh src/app.sh you)" = "hello you" ]\necho "1 test passed"\n' >"$r/tests/test_app.sh"
    printf 'def greet(n):\n    return "hello " + n\n' >"$r/py/app.py"
    printf 'import unittest\nfrom app import greet\n\nclass T(unittest.TestCase):\n    def test_greet(self):\n        self.assertEqual(greet("x"), "hello x")\n' >"$r/py/test_app.py"
    printf 'exports.greet = (n) => "hello " + n;\n' >"$r/js/app.js"
    printf 'const test = require("node:test");\nconst assert = require("node:assert");\nconst { greet } = require("./app.js");\ntest("greet", () => assert.strictEqual(greet("x"), "hello x"));\n' >"$r/js/app.test.js"
    printf '{"name": "app", "version": "1.0.0", "scripts": {"test": "node --test js/"}}\n' >"$r/package.json"
    printf '{"name": "app", "debug": false}\n' >"$r/config.json"
    printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n' >"$r/rs/Cargo.toml"
    printf 'pub fn greet(n: &str) -> String { format!("hello {n}") }\n#[test]\nfn t() { assert_eq!(greet("x"), "hello x"); }\n' >"$r/rs/src/lib.rs"
    printf 'test:\n\tsh tests/test_app.sh\n' >"$r/Makefile"
    printf 'build/\n*.o\nrs/target/\n__pycache__/\nnode_modules/\n' >"$r/.gitignore"
    printf 'spaces in the name\n' >"$r/docs/file with spaces.md"
}

seed_repo() {
    local upstream=$1 r=$2
    mkdir -p "$upstream"
    hostgit -C "$upstream" init -q --bare -b main
    hostgit clone -q "file://$upstream" "$r" 2>/dev/null
    seed_files "$r"
    hostgit -C "$r" add -A && hostgit -C "$r" commit -q -m initial
    printf 'usage: sh src/app.sh NAME\n' >"$r/docs/usage.md"
    hostgit -C "$r" add -A && hostgit -C "$r" commit -q -m 'docs: usage'
    hostgit -C "$r" tag -a v1.0 -m 'release 1.0'
    hostgit -C "$r" checkout -q -b feature
    printf '#!/bin/sh\ngreet() { echo "hello $1"; }\ngreet "${1:-world}" # feature\n' >"$r/src/app.sh"
    hostgit -C "$r" commit -q -am 'feature: mark the call'
    hostgit -C "$r" checkout -q -b conflict main
    sed -i '2s/.*/hello from conflict/' "$r/README.md"
    hostgit -C "$r" commit -q -am 'conflict: another greeting'
    hostgit -C "$r" push -q origin main feature conflict v1.0
    # github.com/other/app: a project the sandbox reads but never pushes to (its fork's
    # upstream, a read-only second remote).
    local other
    other=$(dirname "$(dirname "$upstream")")/other/app.git
    mkdir -p "$(dirname "$other")"
    hostgit clone -q --bare "file://$upstream" "$other"
    hostgit -C "$r" checkout -q -b sandbox/friction/work main
    hostgit -C "$r" remote set-url origin https://github.com/acme/app.git
    hostgit -C "$r" remote add mirror git@github.com:acme/app.git
    # The operator's clone has the remote-tracking refs of the branches it pushed.
    hostgit -C "$r" update-ref refs/remotes/origin/main main
    hostgit -C "$r" update-ref refs/remotes/origin/feature feature
    hostgit -C "$r" update-ref refs/remotes/origin/conflict conflict
    chown -R 1000:1000 "$r"
}

write_configs() {
    echo -n "$TOKEN" >"$SMOKE_DIR/github_token"
    chmod 0400 "$SMOKE_DIR/github_token"
    cat >"$SMOKE_DIR/policy.toml" <<TOML
[sandbox]
name = "friction"

[network]
allow = [$HOSTS]

[[credentials]]
preset = "github"
source = { file = "/run/secrets/github_token" }

[git]
repositories = ["github.com/acme/app"]
TOML
    # Registries are read-only: GET and HEAD only (a rule also makes the proxy intercept).
    for h in registry.npmjs.org pypi.org files.pythonhosted.org index.crates.io; do
        printf '\n[[rules]]\nhost = "%s"\nmethod = ["GET", "HEAD"]\naction = "allow"\n' "$h" >>"$SMOKE_DIR/policy.toml"
    done
    chmod 0644 "$SMOKE_DIR/policy.toml"
    local reg=
    [ "$WITH_REGISTRY" = 1 ] && reg=$REG4
    python3 - "$SMOKE_DIR" "$TOKEN" "$UP4" "$reg" <<'PY'
import json, sys
d, token, ip = sys.argv[1:4]
names = ["github.com", "index.crates.io"]
registries = ["registry.npmjs.org", "pypi.org", "files.pythonhosted.org"]
zone = {n: [ip] for n in names}
# The registries: the fake PyPI and npm when they run (an image with python3), else
# airlock-fakenet's HTTPS as every other name.
if sys.argv[4]:
    zone.update({n: [sys.argv[4]] for n in registries})
else:
    names += registries
    zone.update({n: [ip] for n in registries})
json.dump({
    "ca_cert_pem": open(f"{d}/ca.pem").read(), "ca_key_pem": open(f"{d}/ca.key").read(),
    "log": "/log/fakenet.jsonl",
    "https": [{"ip": "0.0.0.0", "port": 443, "names": names}],
    "dns": [{"ip": "0.0.0.0", "port": 53}],
    "zone": zone,
    "git": {"root": "/git", "host": "github.com", "token": token},
}, open(f"{d}/fakenet.json", "w"))
PY
    # The registries' leaf, from the smoke CA (as tests/smoke/extra-ca-pip.sh makes it).
    printf 'subjectAltName=DNS:registry.npmjs.org,DNS:pypi.org,DNS:files.pythonhosted.org\n' >"$SMOKE_DIR/reg.ext"
    openssl req -new -newkey rsa:2048 -nodes -subj /CN=registries \
        -keyout "$SMOKE_DIR/reg.key" -out "$SMOKE_DIR/reg.csr" 2>/dev/null &&
        openssl x509 -req -in "$SMOKE_DIR/reg.csr" -CA "$SMOKE_DIR/ca.pem" -CAkey "$SMOKE_DIR/ca.key" \
            -CAcreateserial -days 2 -extfile "$SMOKE_DIR/reg.ext" -out "$SMOKE_DIR/reg.pem" 2>/dev/null ||
        die "cannot make the registries' certificate"
    chmod 0644 "$SMOKE_DIR/reg.pem" "$SMOKE_DIR/reg.key"
    chmod 0600 "$SMOKE_DIR/fakenet.json"
    # The operator: the host user's git identity, read by scripts/docker-run.
    mkdir -p "$SMOKE_DIR/operator"
    printf '[user]\n\tname = Friction Operator\n\temail = operator@example.invalid\n' >"$SMOKE_DIR/operator/.gitconfig"
}

start_network() {
    track_network "$NET"
    docker network create --internal --subnet 192.0.2.0/24 --gateway 192.0.2.1 "$NET" >/dev/null
    mkdir -p "$SMOKE_DIR/log"
    if [ "$WITH_REGISTRY" = 1 ]; then
        track_container "$REG"
        docker run -d --name "$REG" --network "$NET" --ip "$REG4" --entrypoint python3 \
            -v "$SMOKE_ROOT/tests/smoke/fake_registry.py:/fake.py:ro" -v "$SMOKE_DIR:/d:ro" -v "$SMOKE_DIR/log:/log" \
            "$SMOKE_IMAGE" -u /fake.py /d/reg.pem /d/reg.key /dev/null /log/registry.jsonl >/dev/null
        smoke_wait_ready "$REG"
    fi
}

# start_fakenet GITROOT: the fake internet serving the upstream repositories under GITROOT
# (one per way the corpus runs: each pushes to its own).
start_fakenet() {
    local fakenet=$1 gitroot=$2
    docker rm -f "$UP" >/dev/null 2>&1 || true
    track_container "$UP"
    docker run -d --name "$UP" --network "$NET" --ip "$UP4" \
        -v "$fakenet:/usr/local/bin/airlock-fakenet:ro" -v "$SMOKE_DIR/fakenet.json:/cfg/fakenet.json:ro" \
        -v "$SMOKE_DIR/log:/log" -v "$gitroot:/git" \
        airlock-base:bookworm airlock-fakenet /cfg/fakenet.json >/dev/null
    for _ in $(seq 50); do docker logs "$UP" 2>/dev/null | grep -q ready && break; sleep 0.1; done
    docker logs "$UP" 2>/dev/null | grep -q ready || die "fakenet did not start: $(docker logs "$UP" 2>&1 | tail -3)"
}

# The session: scripts/docker-run as documented, as the operator (HOME with the operator's
# git identity, no sudo user to read it from instead), the corpus mounted at /friction.
run_docker_run() {
    local fdir=$SMOKE_DIR/friction
    mkdir -p "$fdir/out"
    cp "$HERE/agent.sh" "$fdir/agent.sh"
    cp "$SMOKE_DIR/cmds.tsv" "$fdir/cmds.tsv"
    chown -R 1000:1000 "$fdir"
    track_volume "$AUDIT"
    track_container "$APP"
    local t0=$SECONDS
    env -u SUDO_USER HOME="$SMOKE_DIR/operator" AIRLOCK_NO_BUILD=1 AIRLOCK_IMAGE="$SMOKE_IMAGE" \
        AIRLOCK_POLICY="$SMOKE_DIR/policy.toml" AIRLOCK_AUDIT_VOLUME="$AUDIT" \
        GITHUB_TOKEN_FILE="$SMOKE_DIR/github_token" \
        AIRLOCK_DOCKER_ARGS="--name $APP --network $NET --dns $UP4 -v $fdir:/friction -v $SMOKE_DIR/ca.pem:/etc/ssl/fakenet-ca.pem:ro -e AIRLOCK_UPSTREAM_CA=/etc/ssl/fakenet-ca.pem" \
        "$SMOKE_ROOT/scripts/docker-run" "$SMOKE_DIR/repo" -- bash /friction/agent.sh \
        >"$SMOKE_DIR/session.out" 2>"$SMOKE_DIR/session.err" || true
    if [ ! -f "$fdir/out/finished" ]; then
        tail -20 "$SMOKE_DIR/session.err" >&2
        die "the corpus did not run to its end (scripts/docker-run)"
    fi
    say "scripts/docker-run: $(wc -l <"$SMOKE_DIR/cmds.tsv") commands in $((SECONDS - t0)) s ($SMOKE_IMAGE)"
}

# The same corpus in a sandbox of the host CLI: `airlock new` on a copy of the repository
# (its branch sandbox/friction/work, the name friction), the operator's identity read as the
# CLI reads it (HOME; git accepts uid 1000's repository under SUDO_UID), the token given
# with --secret; the corpus goes in as the command's argument (a CLI sandbox mounts nothing
# of ours) and its results come out through `airlock exec`.
run_cli() {
    local fdir=$SMOKE_DIR/friction-cli
    mkdir -p "$fdir/in/friction" "$fdir/out"
    cp "$HERE/agent.sh" "$SMOKE_DIR/cmds.tsv" "$fdir/in/friction/"
    local payload
    payload=$(tar cz -C "$fdir/in" friction | base64 -w0)
    (cd "$SMOKE_ROOT" && cargo build --locked --quiet -p airlock-cli) || die "cannot build the airlock CLI"
    local bin=${CARGO_TARGET_DIR:-target}
    case $bin in /*) ;; *) bin=$SMOKE_ROOT/$bin ;; esac
    bin=$bin/debug/airlock
    cli() {
        env -u SUDO_USER SUDO_UID=1000 HOME="$SMOKE_DIR/operator" \
            AIRLOCK_DATA_DIR="$SMOKE_DIR/cli-data" AIRLOCK_CONFIG_DIR="$SMOKE_DIR/cli-config" \
            "$bin" --image "$SMOKE_IMAGE" "$@"
    }
    local preamble='git fetch -q origin && for b in main feature conflict; do git branch -q "$b" "origin/$b"; done && git fetch -q --tags origin'
    local script="echo \"\$0\" | base64 -d | tar xz -C /tmp && FRICTION_DIR=/tmp/friction FRICTION_PREAMBLE='$preamble' bash /tmp/friction/agent.sh; exec sleep 3600"
    local t0=$SECONDS
    cli new friction --repo "$SMOKE_DIR/repo-cli" --branch sandbox/friction/work \
        --policy "$SMOKE_DIR/policy.toml" --secret "github_token=$SMOKE_DIR/github_token" \
        --network "$NET" --dns "$UP4" --upstream-ca "$SMOKE_DIR/ca.pem" \
        -- bash -c "$script" "$payload" >"$SMOKE_DIR/cli.out" 2>"$SMOKE_DIR/cli.err" ||
        { cat "$SMOKE_DIR/cli.err" >&2; die "airlock new failed"; }
    track_container airlock-friction
    track_volume airlock-home-friction
    track_volume airlock-secrets-friction
    local i
    for i in $(seq 600); do
        cli logs friction 2>/dev/null | grep -q FRICTION-FINISHED && break
        sleep 1
    done
    cli exec friction -- sh -c 'tar cz -C /tmp/friction out | base64 -w0' | base64 -d | tar xz -C "$fdir" ||
        die "cannot read the CLI sandbox's results"
    cli logs friction >"$SMOKE_DIR/cli.logs" 2>&1 || true
    cli destroy friction --force >/dev/null 2>&1 || true
    [ -f "$fdir/out/finished" ] || { tail -20 "$SMOKE_DIR/cli.logs" >&2; die "the corpus did not run to its end (CLI sandbox)"; }
    say "airlock new: $(wc -l <"$SMOKE_DIR/cmds.tsv") commands in $((SECONDS - t0)) s ($SMOKE_IMAGE)"
}

main() {
    docker image inspect "$SMOKE_IMAGE" >/dev/null 2>&1 ||
        die "$SMOKE_IMAGE is missing: run scripts/build-image"
    local fakenet rc=0
    fakenet=$(smoke_fakenet_bin)
    smoke_ca "$SMOKE_DIR"
    python3 "$HERE/report.py" cmds "$CORPUS" >"$SMOKE_DIR/cmds.tsv" || die "cannot read the corpus"
    # PyPI and npm, when the image has the tools that use them (an agent image; its python3
    # runs the fake registry).
    WITH_REGISTRY=0
    docker run --rm --entrypoint sh "$SMOKE_IMAGE" -c 'command -v python3' >/dev/null 2>&1 && WITH_REGISTRY=1
    write_configs
    start_network
    mkdir -p "$(dirname "$OUT")"
    for way in $WAYS; do
        case $way in
        docker-run)
            seed_repo "$SMOKE_DIR/gitroot/acme/app.git" "$SMOKE_DIR/repo"
            start_fakenet "$fakenet" "$SMOKE_DIR/gitroot"
            run_docker_run
            say "friction (scripts/docker-run): OK / refused / failed per category (results: $OUT)"
            python3 "$HERE/report.py" judge "$CORPUS" "$SMOKE_DIR/friction/out" "$OUT" || rc=1
            ;;
        cli)
            seed_repo "$SMOKE_DIR/gitroot-cli/acme/app.git" "$SMOKE_DIR/repo-cli"
            # The operator works on main; the sandbox gets its own branch.
            hostgit -C "$SMOKE_DIR/repo-cli" checkout -q main
            hostgit -C "$SMOKE_DIR/repo-cli" branch -q -D sandbox/friction/work
            chown -R 1000:1000 "$SMOKE_DIR/repo-cli"
            start_fakenet "$fakenet" "$SMOKE_DIR/gitroot-cli"
            run_cli
            local out=${OUT%.json}-cli.json
            say "friction (airlock CLI sandbox): OK / refused / failed per category (results: $out)"
            python3 "$HERE/report.py" judge "$CORPUS" "$SMOKE_DIR/friction-cli/out" "$out" || rc=1
            ;;
        *) die "FRICTION_WAYS: docker-run or cli, not $way" ;;
        esac
    done
    [ "$rc" = 0 ] || die "the friction corpus regressed"
}
main
