"""Evaluate a ValidatingAdmissionPolicy's CEL offline (cel-python), as the API server would
for a pod create in a namespace.

Usage: python3 eval_vap.py POLICY.json NAMESPACE.json PODS.json
PODS.json: [pod, ...]. Prints one JSON list: for each pod, the messages of the validations
it fails (empty: admitted). A validation whose evaluation errs counts as failed (the policy
says failurePolicy: Fail); so does a variable that errs.
"""

import json
import sys

import celpy
from celpy import json_to_cel


def main():
    with open(sys.argv[1]) as f:
        policy = json.load(f)
    with open(sys.argv[2]) as f:
        namespace = json.load(f)
    with open(sys.argv[3]) as f:
        pods = json.load(f)
    env = celpy.Environment()
    spec = policy["spec"]
    variables = [(v["name"], env.program(env.compile(v["expression"]))) for v in spec.get("variables", [])]
    validations = [
        (env.program(env.compile(v["expression"])), v["message"]) for v in spec["validations"]
    ]
    out = []
    for pod in pods:
        act = {"object": json_to_cel(pod), "namespaceObject": json_to_cel(namespace)}
        failed = []
        values = {}
        for name, prog in variables:
            try:
                # The policy's variables do not refer to each other.
                values[name] = prog.evaluate(act)
            except Exception as e:  # noqa: BLE001 - any evaluation failure refuses
                failed.append(f"variable {name}: {e}")
        act["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in values.items()}
        )
        for prog, message in validations:
            try:
                ok = prog.evaluate(act)
            except Exception as e:  # noqa: BLE001
                failed.append(f"{message} (error: {e})")
                continue
            if ok is not True and not (isinstance(ok, celpy.celtypes.BoolType) and bool(ok)):
                failed.append(message if isinstance(ok, celpy.celtypes.BoolType) else f"{message} (error: {ok})")
        out.append(failed)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
