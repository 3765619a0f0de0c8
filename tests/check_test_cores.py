#!/usr/bin/env python3
"""check_test_cores.py CTEST BUILD MPIEXEC: every test of BUILD claims a core per rank it starts,
so that ctest -j (scripts/test.sh) does not start a second job of ranks beside one that fills
the cores, and runs unbound, so that jobs side by side are not bound to the same cores.

A test named ..._np<N> claims N (ctest's PROCESSORS); any other test that starts MPIEXEC (in its
command or through its environment) claims 2 or more. A fault scenario's job (run by
fault/run_fault.sh) may claim 1: its ranks sleep, are stopped or wait (tests/CMakeLists.txt).
Every test that starts ranks runs unbound: OMPI_MCA_hwloc_base_binding_policy=none (Open MPI 4)
and PRTE_MCA_hwloc_default_binding_policy=none (Open MPI 5). Exits 1 naming each test that does
not.
"""
import json
import re
import subprocess
import sys

ctest, build, mpiexec = sys.argv[1:4]
listing = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
wrong = []
tests = json.loads(listing)["tests"]
for test in tests:
    name = test["name"]
    if test.get("command") and test["command"][0].endswith("check_test_cores.py"):
        continue  # this check, which names MPIEXEC and starts nothing
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    cores = int(props.get("PROCESSORS", 1))
    env = props.get("ENVIRONMENT", [])
    starts_ranks = any(mpiexec in arg for arg in test.get("command", [])) or any(mpiexec in e for e in env)
    ranks = re.search(r"_np([0-9]+)$", name)
    if any(arg.endswith("/run_fault.sh") for arg in test.get("command", [])):
        need = 1
    elif ranks:
        need = int(ranks.group(1))
    elif starts_ranks:
        need = 2
    else:
        need = 1
    if cores < need:
        wrong.append(f"{name} claims {cores} core(s) (PROCESSORS) but keeps {need} busy")
    for unbound in ("OMPI_MCA_hwloc_base_binding_policy=none", "PRTE_MCA_hwloc_default_binding_policy=none"):
        if (starts_ranks or ranks) and unbound not in env:
            wrong.append(f"{name} starts ranks bound to cores (no {unbound})")
if not tests:
    wrong.append(f"no tests listed in {build}")
if wrong:
    print("check_test_cores.py: FAILED: under ctest -j these would share cores with another job:\n  " +
          "\n  ".join(wrong))
    sys.exit(1)
print(f"check_test_cores.py: all {len(tests)} tests claim a core per rank they start, and run unbound")
