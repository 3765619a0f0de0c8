"""check_ddp_json.py FILE: a tessera-bench-ddp JSON file has the documented fields, and its
ratios follow from its medians."""
import json
import sys

d = json.load(open(sys.argv[1]))
m = d["median_s"]
for key in ("step", "forward", "backward", "comm_exposed", "optimizer", "other", "gemm_only", "gemm_forward_only",
            "optimizer_only", "all_reduce_only"):
    assert m[key] >= 0, (key, m)
assert m["step"] > 0 and m["gemm_only"] > 0, m
assert abs(d["steps_per_s"] - 1 / m["step"]) < 1e-9 * d["steps_per_s"], d
assert abs(d["exposed_fraction"] - m["comm_exposed"] / m["step"]) < 1e-9, d
assert abs(d["step_over_gemm"] - m["step"] / m["gemm_only"]) < 1e-9 * d["step_over_gemm"], d
floor = m["gemm_only"] + m["optimizer_only"] + m["all_reduce_only"]
assert abs(d["floor_over_gemm"] - floor / m["gemm_only"]) < 1e-9 * d["floor_over_gemm"], d
assert m["gemm_forward_only"] < m["gemm_only"], m
print(f"ok: step {m['step'] * 1e3:.2f} ms, step/GEMMs {d['step_over_gemm']:.2f}")
