"""compare_losses.py A.jsonl B.jsonl TOL [differ]: two tessera-train --metrics files hold the
same steps, and every step's loss agrees within TOL relative (0: bit for bit); with
`differ`, the first step's losses differ by more than TOL instead (runs meant to differ)."""
import json
import sys

a, b = ([json.loads(line) for line in open(p)] for p in sys.argv[1:3])
tol = float(sys.argv[3])
assert len(a) == len(b) > 0, (len(a), len(b))
if sys.argv[4:] == ["differ"]:
    x, y = a[0]["loss"], b[0]["loss"]
    assert abs(x - y) > tol * abs(x), f"step 1: losses {x!r} and {y!r} agree within {tol}, and the runs should differ"
    print(f"step 1: losses {x:.6g} and {y:.6g} differ ({sys.argv[1]} / {sys.argv[2]})")
    sys.exit(0)
for x, y in zip(a, b):
    assert x["step"] == y["step"], (x, y)
    diff = abs(x["loss"] - y["loss"])
    assert diff <= tol * abs(x["loss"]), f"step {x['step']}: loss {x['loss']!r} against {y['loss']!r} (tolerance {tol})"
print(f"{len(a)} steps, losses agree within {tol} ({sys.argv[1]} / {sys.argv[2]})")
