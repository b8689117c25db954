"""Validate agent-sandbox objects offline against the pinned CRD schemas beside this file.

Usage: python3 validate_crd.py FILE   (a stream of JSON documents separated by '---' lines)

Every document whose apiVersion/kind is one of the pinned schemas is validated; any other
is left to kubernetes-validate (core objects); an agent-sandbox object with no pinned schema
fails. As kubectl does by default
(field validation Strict), a field the schema does not name is an error: each object
schema with properties is closed (additionalProperties: false) unless it says
x-kubernetes-preserve-unknown-fields. Prints one line per object; exits 1 on any error.
"""

import json
import os
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))


def closed(schema):
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


def schemas():
    out = {}
    for name in os.listdir(HERE):
        if name.endswith(".json"):
            with open(os.path.join(HERE, name)) as f:
                s = json.load(f)
            out[(s["group"] + "/" + s["version"], s["kind"])] = closed(s["openAPIV3Schema"])
    return out


def main():
    known = schemas()
    with open(sys.argv[1]) as f:
        text = f.read()
    docs = [json.loads(d) for d in text.split("---\n") if d.strip()]
    failed = False
    for d in docs:
        key = (d.get("apiVersion"), d.get("kind"))
        name = d.get("metadata", {}).get("name")
        if key not in known:
            # An agent-sandbox object with no pinned schema (a version or kind the pins do
            # not cover) fails: it would otherwise go unvalidated. Core objects are
            # kubernetes-validate's.
            if "agents.x-k8s.io/" in (key[0] or ""):
                print(f"{key[1]}/{name} ({key[0]}): no pinned schema for this agent-sandbox object")
                failed = True
            else:
                print(f"core object {key[1]}/{name} ({key[0]}): kubernetes-validate checks it")
            continue
        v = jsonschema.Draft7Validator(known[key])
        errors = sorted(v.iter_errors(d), key=lambda e: list(e.path))
        if errors:
            failed = True
            for e in errors:
                path = "/".join(str(p) for p in e.path)
                print(f"INVALID {key[1]}/{name} at {path}: {e.message}")
        else:
            print(f"valid {key[1]}/{name} against {key[0]}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
