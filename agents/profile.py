#!/usr/bin/env python3
"""Reads agent profiles (agents/NAME.toml) and the lock file (agents/agents.lock).

Used by scripts/fetch-agents, scripts/build-agent-image and the agent smoke tests; every
error is one line on stderr and exit status 1.

  profile.py names                        the agents that have a profile
  profile.py lock NAME                    the profile's lock lines: PACKAGE VERSION FILE SHA256
  profile.py stage NAME WHEELS CTX        fill a build context's payload/ and policy.toml
  profile.py command NAME MODE [TASK]     the command line (MODE: unattended, interactive,
                                          version), one argument per line
"""
import json
import os
import shlex
import shutil
import stat
import sys
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = "/usr/local/lib/airlock/agents"
SKEL = "/etc/airlock/agents"
PROFILE_PATH = """# Written by agents/profile.py: a login shell's /etc/profile resets PATH; airlock's git
# shim goes first again, as the entrypoint set it for the agent.
case ":$PATH:" in
*:/usr/local/lib/airlock/bin:*) ;;
*) PATH="/usr/local/lib/airlock/bin:$PATH" ;;
esac
export PATH
"""


def die(msg):
    print(f"{os.path.basename(sys.argv[0])}: {msg}", file=sys.stderr)
    sys.exit(1)


def names():
    return sorted(f[:-5] for f in os.listdir(HERE) if f.endswith(".toml"))


def load(name):
    path = os.path.join(HERE, f"{name}.toml")
    if not name.replace("-", "").isalnum() or not os.path.isfile(path):
        die(f"no agent profile agents/{name}.toml (profiles: {', '.join(names())})")
    try:
        with open(path, "rb") as f:
            p = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        die(f"agents/{name}.toml: {e}")
    for key in ("package", "command", "policy"):
        if key not in p:
            die(f"agents/{name}.toml: missing [{key}]")
    if p.get("name") != name:
        die(f"agents/{name}.toml: name = {p.get('name')!r}, expected {name!r}")
    for key in ("bin", "exec", "unattended", "interactive"):
        if key not in p["command"]:
            die(f"agents/{name}.toml: [command] lacks {key}")
    if p["package"].get("install", "extract") not in ("extract", "venv"):
        die(f"agents/{name}.toml: [package] install = {p['package']['install']!r}, expected \"extract\" or \"venv\"")
    return p


def norm(pkg):
    """A package name as pip compares them (PEP 503)."""
    return "".join("-" if c in "_." else c for c in pkg.lower())


def lock_lines(name):
    rows = {}
    lock = os.environ.get("AIRLOCK_AGENT_LOCK") or os.path.join(HERE, "agents.lock")
    with open(lock) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) != 5 or len(line[4]) != 64:
                die(f"{lock}:{n}: expected AGENT PACKAGE VERSION FILE SHA256")
            rows.setdefault(line[0], []).append(line[1:])
    p = load(name)
    out = []
    for pkg in p["package"].get("lock", []):
        hit = [r for r in rows.get(name, []) if norm(r[0]) == norm(pkg)]
        if not hit:
            die(f"agents/agents.lock has no line for {name} {pkg}: add it (scripts/fetch-agents --relock {name})")
        out += hit
    if p["package"].get("install") == "venv":
        # A venv agent: its packages and every dependency, each pinned on its own line.
        return rows.get(name, [])
    return out


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def render_policy(name, p):
    """The image's default policy: examples/policy.toml with the profile's hosts and
    credentials (optional ones commented out) and the sandbox named after the agent."""
    with open(os.path.join(ROOT, "examples", "policy.toml"), "rb") as f:
        base = tomllib.load(f)
    pol = p["policy"]
    base["sandbox"]["name"] = name
    allow = list(base.get("network", {}).get("allow", []))
    for h in pol.get("allow", []):
        if h not in allow:
            allow.insert(0, h)
    base.setdefault("network", {})["allow"] = allow
    writable = list(base["network"].get("writable", []))
    for h in pol.get("writable", []):
        if h not in writable:
            writable.insert(0, h)
    base["network"]["writable"] = writable
    creds = [c for c in base.get("credentials", []) if c.get("preset") == "github"]
    optional = []
    for c in pol.get("credentials", []):
        c = dict(c)
        (optional if c.pop("optional", False) else creds).append(c)
    base["credentials"] = creds
    out = [f"# Rendered from agents/{name}.toml and examples/policy.toml by agents/profile.py.\n"]

    def table(key, d, arr=False):
        out.append(f"\n[[{key}]]\n" if arr else f"\n[{key}]\n")
        for k, v in d.items():
            out.append(f"{k} = {toml_value(v)}\n")

    for key, v in base.items():
        if isinstance(v, list):
            for d in v:
                table(key, d, arr=True)
        else:
            table(key, v)
    for c in optional:
        out.append("\n# optional (an alternative to the credential above: set one of them):\n")
        out.append("# [[credentials]]\n")
        out += [f"# {k} = {toml_value(v)}\n" for k, v in c.items()]
    return "".join(out)


def wrapper(name, p):
    cmd = p["command"]
    lines = [
        "#!/bin/sh",
        f"# {name}: generated from agents/{name}.toml by agents/profile.py. Sets the profile's",
        "# environment, makes the home ready (home.py: [home.files] seeded unless there,",
        "# [home.json] keys set at every start), runs the CLI.",
    ]
    for k, v in p.get("env", {}).items():
        lines.append(f"export {k}={shlex.quote(v)}")
    lines += [
        f"/usr/bin/python3 -I -S {LIB}/home.py {SKEL}/{name} || true",
        f'exec {LIB}/{name}/{cmd["exec"]} "$@"',
    ]
    return "\n".join(lines) + "\n"


def home_json(name, p):
    """[home.json]: FILE -> the keys set in it at every start, checked and rendered as JSON."""
    out = {}
    for rel, keys in p.get("home", {}).get("json", {}).items():
        if rel.startswith("/") or ".." in rel.split("/"):
            die(f"agents/{name}.toml: [home.json] {rel!r} must be a relative path inside the home")
        if not isinstance(keys, dict):
            die(f"agents/{name}.toml: [home.json] {rel!r} must be a table of keys")
        try:
            out[rel] = json.loads(json.dumps(keys))
        except TypeError as e:
            die(f"agents/{name}.toml: [home.json] {rel!r}: {e} (dates have no JSON form)")
    return out


def stage_venv(name, wheels, ctx):
    """A venv agent: its locked wheels in CTX/venv/wheels (hard links into the cache) and
    CTX/venv/requirements.txt (every file pinned by hash), which scripts/build-agent-image
    installs offline (pip --no-index --require-hashes) into LIB/NAME/venv."""
    d = os.path.join(ctx, "venv", "wheels")
    os.makedirs(d, exist_ok=True)
    reqs = []
    for pkg, version, fname, sha in lock_lines(name):
        path = os.path.join(wheels, fname)
        if not os.path.isfile(path):
            die(f"{fname} is not in {wheels}: run scripts/fetch-agents {name}")
        try:
            os.link(path, os.path.join(d, fname))
        except OSError:
            shutil.copyfile(path, os.path.join(d, fname))
        reqs.append(f"{pkg}=={version} --hash=sha256:{sha}")
    with open(os.path.join(ctx, "venv", "requirements.txt"), "w") as f:
        f.write("\n".join(sorted(reqs)) + "\n")
    with open(os.path.join(ctx, ".dockerignore"), "w") as f:
        f.write("venv\n")


def stage(name, wheels, ctx):
    p = load(name)
    payload = os.path.join(ctx, "payload")
    libdir = os.path.join(payload, LIB.lstrip("/"), name)
    os.makedirs(libdir, exist_ok=True)
    if p["package"].get("install") == "venv":
        stage_venv(name, wheels, ctx)
    members = p["package"].get("extract", {})
    found = set()
    for pkg, version, fname, sha in lock_lines(name) if members else []:
        path = os.path.join(wheels, fname)
        if not os.path.isfile(path):
            die(f"{fname} is not in {wheels}: run scripts/fetch-agents {name}")
        with zipfile.ZipFile(path) as z:
            for member, dest in members.items():
                try:
                    info = z.getinfo(member)
                except KeyError:
                    continue
                target = os.path.join(libdir, dest)
                with z.open(info) as src, open(target, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                os.chmod(target, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
                found.add(member)
    missing = set(members) - found
    if missing:
        die(f"agents/{name}.toml extracts {', '.join(sorted(missing))}, which no locked wheel holds")
    bindir = os.path.join(payload, "usr/local/bin")
    os.makedirs(bindir, exist_ok=True)
    w = os.path.join(bindir, p["command"]["bin"])
    with open(w, "w") as f:
        f.write(wrapper(name, p))
    os.chmod(w, 0o755)
    home = os.path.join(payload, SKEL.lstrip("/"), name, "home")
    os.makedirs(home, exist_ok=True)
    # The helper the wrapper runs at every start, and what it sets (home.py's docstring).
    merges = os.path.join(payload, SKEL.lstrip("/"), name, "home.json")
    with open(merges, "w") as f:
        json.dump(home_json(name, p), f, indent=1, sort_keys=True)
    helper = os.path.join(payload, LIB.lstrip("/"), "home.py")
    shutil.copyfile(os.path.join(HERE, "home.py"), helper)
    for f in (merges, helper):
        os.chmod(f, 0o644)
    # [brief]: where in the home the sandbox's rules go at every start (home.py).
    brief = p.get("brief", {}).get("path")
    if brief is not None:
        if not isinstance(brief, str) or brief.startswith("/") or ".." in brief.split("/"):
            die(f"agents/{name}.toml: [brief] path {brief!r} must be a relative path inside the home")
        target = os.path.join(payload, SKEL.lstrip("/"), name, "brief")
        with open(target, "w") as f:
            f.write(brief + "\n")
        os.chmod(target, 0o644)
    for rel, text in p.get("home", {}).get("files", {}).items():
        if rel.startswith("/") or ".." in rel.split("/"):
            die(f"agents/{name}.toml: [home.files] {rel!r} must be a relative path inside the home")
        target = os.path.join(home, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write(text.lstrip("\n"))
        os.chmod(target, 0o644)
    # [etc.files]: the agent's system-wide configuration, read-only in the image under /etc.
    for rel, text in p.get("etc", {}).get("files", {}).items():
        if rel.startswith("/") or ".." in rel.split("/") or rel.split("/")[0] in ("airlock", "profile.d"):
            die(f"agents/{name}.toml: [etc.files] {rel!r} must be a relative path under /etc, outside airlock's own")
        target = os.path.join(payload, "etc", rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write(text.lstrip("\n"))
        os.chmod(target, 0o644)
    # Login shells (`bash -lc`, as Codex runs every command) read /etc/profile, which resets
    # PATH: put airlock's git shim first again, as the entrypoint sets it for the agent.
    profile_d = os.path.join(payload, "etc/profile.d")
    os.makedirs(profile_d, exist_ok=True)
    with open(os.path.join(profile_d, "airlock-path.sh"), "w") as f:
        f.write(PROFILE_PATH)
    os.chmod(os.path.join(profile_d, "airlock-path.sh"), 0o644)
    with open(os.path.join(payload, SKEL.lstrip("/"), f"{name}.toml"), "w") as f:
        f.write(open(os.path.join(HERE, f"{name}.toml")).read())
    with open(os.path.join(ctx, "policy.toml"), "w") as f:
        f.write(render_policy(name, p))
    with open(os.path.join(ctx, "cmd.json"), "w") as f:
        json.dump(p["command"]["interactive"], f)
    for dirpath, dirnames, _ in os.walk(payload):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)


def main(argv):
    if len(argv) < 2:
        die(__doc__.strip().splitlines()[0])
    cmd = argv[1]
    if cmd == "names":
        print("\n".join(names()))
    elif cmd == "lock" and len(argv) == 3:
        for row in lock_lines(argv[2]):
            print(" ".join(row))
    elif cmd == "stage" and len(argv) == 5:
        stage(argv[2], argv[3], argv[4])
    elif cmd == "command" and len(argv) in (4, 5):
        p = load(argv[2])
        line = p["command"].get(argv[3])
        if line is None:
            die(f"agents/{argv[2]}.toml: [command] has no {argv[3]}")
        task = argv[4] if len(argv) == 5 else ""
        for a in line:
            print(a.replace("{task}", task).replace("\n", " "))
    else:
        die(f"unknown command: {' '.join(argv[1:])}")


if __name__ == "__main__":
    main(sys.argv)
