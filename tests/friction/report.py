#!/usr/bin/env python3
"""The friction corpus: parse it, and judge a run of it (tests/friction/run.sh).

  report.py cmds CORPUS > cmds.tsv
      id<TAB>needs<TAB>command for tests/friction/agent.sh.
  report.py judge CORPUS OUTDIR JSON_FILE
      Classifies every command from OUTDIR (status + <id>.out): ok, refused (with the
      reason: the git API's "airlock refused this (CODE)" or the proxy's 403, proxy_denied),
      failed, or absent (the image lacks the program). Prints the table per category, writes
      JSON_FILE, and exits 1 when an outcome differs from what the corpus expects, or a
      refusal in the corpus has no documented reason.
"""
import json
import re
import sys
from collections import OrderedDict

REFUSED = re.compile(r"airlock refused this \(([a-z_]+)\)")
PROXY_403 = re.compile(r"(returned error: 403|response 403|CONNECT tunnel failed.*403|HTTP/[0-9.]+ 403)")


def parse(path):
    """Corpus entries in order: dicts with id, line, category, expect, needs, command, why."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("why:"):
                if not entries:
                    sys.exit(f"{path}:{n}: why: before any command")
                entries[-1]["why"] = stripped[4:].strip()
                continue
            parts = stripped.split(None, 3)
            if len(parts) != 4:
                sys.exit(f"{path}:{n}: want CATEGORY EXPECT NEEDS COMMAND")
            category, expect, needs, command = parts
            if expect != "ok" and not re.fullmatch(r"refused:[a-z_]+", expect):
                sys.exit(f"{path}:{n}: EXPECT is ok or refused:CODE, not {expect!r}")
            entries.append({"id": f"c{len(entries) + 1:03d}", "line": n, "category": category,
                            "expect": expect, "needs": needs, "command": command, "why": None})
    return entries


def classify(status, output):
    """(outcome, reason) of one command."""
    if status == "absent":
        return "absent", None
    m = REFUSED.search(output)
    if m:
        return "refused", m.group(1)
    if status != "0" and PROXY_403.search(output):
        return "refused", "proxy_denied"
    return ("ok", None) if status == "0" else ("failed", None)


def read_status(outdir):
    status = {}
    with open(f"{outdir}/status", encoding="utf-8") as f:
        for line in f:
            cid, st, ms = line.rstrip("\n").split("\t")
            status[cid] = (st, int(ms))
    return status


def judge(entries, outdir):
    """Each entry with its outcome; the list of problems."""
    status = read_status(outdir)
    problems = []
    for e in entries:
        if e["expect"] != "ok" and not e["why"]:
            problems.append(f"line {e['line']}: a refusal without a why: line: {e['command']}")
        st, ms = status.get(e["id"], ("missing", 0))
        try:
            with open(f"{outdir}/{e['id']}.out", encoding="utf-8", errors="replace") as f:
                output = f.read()
        except FileNotFoundError:
            output = ""
        outcome, reason = classify(st, output) if st != "missing" else ("failed", None)
        e.update(status=st, ms=ms, outcome=outcome, reason=reason, output=output[-1500:])
        got = "ok" if outcome == "ok" else f"refused:{reason}" if outcome == "refused" else outcome
        e["as_expected"] = got == e["expect"] or outcome == "absent"
        if not e["as_expected"]:
            problems.append(f"line {e['line']} [{e['category']}] {e['command']}\n"
                            f"    expected {e['expect']}, got {got} (exit {st})\n    "
                            + "\n    ".join(output.strip().splitlines()[-6:]))
    return problems


def table(entries):
    cats = OrderedDict()
    for e in entries:
        c = cats.setdefault(e["category"], {"commands": 0, "ok": 0, "refused": 0, "failed": 0, "absent": 0})
        c["commands"] += 1
        c[e["outcome"]] += 1
    total = {k: sum(c[k] for c in cats.values()) for k in ("commands", "ok", "refused", "failed", "absent")}
    rows = list(cats.items()) + [("total", total)]
    lines = [f"{'category':<12} {'commands':>8} {'ok':>5} {'refused':>8} {'failed':>7} {'absent':>7}"]
    for name, c in rows:
        lines.append(f"{name:<12} {c['commands']:>8} {c['ok']:>5} {c['refused']:>8} {c['failed']:>7} {c['absent']:>7}")
    return "\n".join(lines), dict(cats), total


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "cmds":
        for e in parse(sys.argv[2]):
            print(f"{e['id']}\t{e['needs']}\t{e['command']}")
        return 0
    if len(sys.argv) != 5 or sys.argv[1] != "judge":
        print(__doc__, file=sys.stderr)
        return 2
    entries = parse(sys.argv[2])
    problems = judge(entries, sys.argv[3])
    text, cats, total = table(entries)
    print(text)
    refusals = [e for e in entries if e["outcome"] == "refused"]
    if refusals:
        print("\nrefusals that stay (each a security decision):")
        for e in refusals:
            print(f"  {e['reason']:<26} {e['command']}\n  {'':<26} why: {e['why']}")
    absent = sorted({e["needs"] for e in entries if e["outcome"] == "absent"})
    if absent:
        print(f"\nabsent from this image (not run): {', '.join(absent)}")
    with open(sys.argv[4], "w", encoding="utf-8") as f:
        json.dump({"categories": cats, "total": total, "problems": problems,
                   "commands": entries}, f, indent=1)
    if problems:
        print(f"\n{len(problems)} command(s) not as the corpus expects:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
