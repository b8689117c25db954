"""Makes the agent's home ready before the agent's CLI starts (run by its wrapper, as the
agent, at every start; agents/profile.py renders what it applies from agents/NAME.toml).

  - [home.files]: each file is copied into the home unless it is already there, so what the
    agent or the user changed in a home that persists across sessions stays;
  - [brief]: the sandbox's rules (the proxy's `http://airlock.local/v1/brief`) written at
    every start into the file of the home where the agent's CLI reads its instructions,
    between two marker lines: the rest of the file is the user's and stays;
  - [home.json]: keys set in a JSON file of the home at every start (the file is written at
    every start, created when missing): objects are merged key by key, every other value is
    replaced, every other key of the file is kept. A string "{VAR}" is that variable's value and "{VAR|last:N}" its
    last N characters (whitespace trimmed first); an array item or key whose variable is
    unset or empty is left out. This is how a per-start value (the placeholder the agent's
    key variable holds) reaches the agent's own state.

Python's standard library only, started isolated (`python3 -I -S`): the agent's environment
(PYTHONPATH and the like) does not reach it. A file it cannot read or write is named in one
line on stderr and the agent starts anyway (it then asks what the file would have answered).
Usage: python3 -I -S home.py SKELETON_DIR
"""
import json
import os
import sys

UNSET = object()


def warn(msg):
    print(f"airlock: {msg}", file=sys.stderr)


def template(s):
    """(VAR, N) for "{VAR|last:N}", (VAR, 0) for "{VAR}", None for any other string."""
    if not (s.startswith("{") and s.endswith("}")):
        return None
    var, _, last = s[1:-1].partition("|last:")
    ok = var[:1].isalpha() or var[:1] == "_"
    if not ok or not var.replace("_", "").isalnum() or not var.isascii():
        return None
    if last:
        return (var, int(last)) if last.isdigit() and int(last) > 0 else None
    return None if "|" in var else (var, 0)


def render(value, env):
    """VALUE with its templates filled from ENV; UNSET for a template whose variable is
    unset or empty (dropped from the array or object holding it)."""
    if isinstance(value, str):
        t = template(value)
        if t is None:
            return value
        got = env.get(t[0], "").strip()
        if not got:
            return UNSET
        return got[-t[1]:] if t[1] else got
    if isinstance(value, list):
        return [v for v in (render(x, env) for x in value) if v is not UNSET]
    if isinstance(value, dict):
        out = {}
        for k, x in value.items():
            v = render(x, env)
            if v is not UNSET:
                out[k] = v
        return out
    return value


def merge(base, patch):
    """PATCH over BASE: objects key by key, anything else replaced."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return patch
    out = dict(base)
    for k, v in patch.items():
        out[k] = merge(base.get(k), v)
    return out


def seed(skel, home):
    for dirpath, _dirs, files in os.walk(skel):
        rel = os.path.relpath(dirpath, skel)
        for f in files:
            target = os.path.normpath(os.path.join(home, rel, f))
            if os.path.lexists(target):
                continue
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(os.path.join(dirpath, f), "rb") as src, open(target, "xb") as dst:
                    dst.write(src.read())
            except FileExistsError:
                pass  # written meanwhile (another session starting): theirs stays
            except OSError as e:
                warn(f"cannot write ~/{os.path.relpath(target, home)}: {e.strerror}")


def apply_json(home, rel, patch):
    path = os.path.join(home, rel)
    shown = f"~/{rel}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        mode = os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        text, mode = "", 0o600
    except OSError as e:
        return warn(f"cannot read {shown}: {e.strerror}")
    try:
        current = json.loads(text) if text.strip() else {}
    except ValueError as e:
        return warn(f"{shown} is not JSON ({e}); left as it is")
    if not isinstance(current, dict):
        return warn(f"{shown} is not a JSON object; left as it is")
    merged = merge(current, patch)
    write(path, shown, json.dumps(merged, indent=2) + "\n", mode)


def write(path, shown, text, mode):
    """TEXT as the file PATH, whole or not at all (a temporary file renamed over it)."""
    tmp = f"{path}.airlock-{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        warn(f"cannot write {shown}: {e.strerror}")


BEGIN = "<!-- airlock: the sandbox's rules, rewritten at every start; edit outside this block -->"
END = "<!-- airlock: end of the sandbox's rules -->"
BRIEF_URL = "http://airlock.local/v1/brief"


def brief(skel, home):
    """Writes the proxy's brief between the markers of the file [brief] names."""
    try:
        with open(os.path.join(skel, "brief"), encoding="utf-8") as f:
            rel = f.read().strip()
    except FileNotFoundError:
        return
    if not rel:
        return
    shown = f"~/{rel}"
    try:
        import urllib.request

        with urllib.request.urlopen(BRIEF_URL, timeout=5) as r:
            text = r.read(256 * 1024).decode("utf-8", "replace")
    except Exception as e:  # the proxy unreachable or refusing: the agent starts anyway
        return warn(f"the sandbox's rules were not written to {shown}: {BRIEF_URL}: {e}")
    path = os.path.join(home, rel)
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = ""
    except OSError as e:
        return warn(f"cannot read {shown}: {e.strerror}")
    block = f"{BEGIN}\n{text.rstrip()}\n{END}\n"
    start, end = current.find(BEGIN), current.find(END)
    if start >= 0 and end > start:
        before, after = current[:start], current[end + len(END):].lstrip("\n")
    else:
        before, after = "", current
    new = before + block + ("\n" + after if after.strip() else "")
    write(path, shown, new, 0o600)


def main(argv):
    if len(argv) != 2:
        warn("usage: home.py SKELETON_DIR")
        return 0
    skel = argv[1]
    home = os.environ.get("HOME", "")
    if not home.startswith("/") or not os.path.isdir(home) or not os.access(home, os.W_OK):
        return 0
    if os.path.isdir(os.path.join(skel, "home")):
        seed(os.path.join(skel, "home"), home)
    brief(skel, home)
    try:
        with open(os.path.join(skel, "home.json"), encoding="utf-8") as f:
            patches = json.load(f)
    except FileNotFoundError:
        return 0
    for rel, patch in patches.items():
        apply_json(home, rel, render(patch, os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
