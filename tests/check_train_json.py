"""check_train_json.py FILE [STRATEGY]: a tessera-bench-train JSON file has the documented
fields, its ratios follow from its medians, and (given) it ran STRATEGY (ddp, zero-1, ...)."""
import json
import os
import sys

d = json.load(open(sys.argv[1]))
m = d["median_s"]
ddp = d["config"]["strategy"] == "ddp" and d["config"]["tp"] == 1 and d["config"]["pp"] == 1
if len(sys.argv) > 2:
    assert d["config"]["strategy"] == sys.argv[2], (d["config"]["strategy"], sys.argv[2])
for key in ("step", "forward", "backward", "comm_exposed", "optimizer", "other", "pipeline_idle", "gemm_only",
            "gemm_forward_only", "optimizer_only"):
    assert m[key] >= 0, (key, m)
assert m["step"] > 0 and m["gemm_only"] > 0, m
assert abs(d["steps_per_s"] - 1 / m["step"]) < 1e-9 * d["steps_per_s"], d
assert abs(d["exposed_fraction"] - m["comm_exposed"] / m["step"]) < 1e-9, d
assert abs(d["step_over_gemm"] - m["step"] / m["gemm_only"]) < 1e-9 * d["step_over_gemm"], d
if ddp:
    floor = m["gemm_only"] + m["optimizer_only"] + m["all_reduce_only"]
    assert abs(d["floor_over_gemm"] - floor / m["gemm_only"]) < 1e-9 * d["floor_over_gemm"], d
else:
    assert m["all_reduce_only"] is None and d["floor_over_gemm"] is None, d
assert m["gemm_forward_only"] < m["gemm_only"], m
b = d["bytes_per_rank_max"]
assert b["model_state"] > 0 and b["peak_resident"] > b["model_state"], b
dp = d["machine"]["ranks"] // (d["config"]["tp"] * d["config"]["pp"])
assert b["comm_per_step"] > 0 if dp > 1 else b["comm_per_step"] == 0, b
assert b["tp_comm_per_step"] > 0 if d["config"]["tp"] > 1 else b["tp_comm_per_step"] == 0, b
assert b["pp_comm_per_step"] > 0 if d["config"]["pp"] > 1 else b["pp_comm_per_step"] == 0, b
if d["config"]["pp"] > 1:
    assert 0 <= d["bubble_fraction"] < 1, d["bubble_fraction"]
    assert m["pipeline_idle"] > 0, m
else:
    assert m["pipeline_idle"] == 0, m
machine = d["machine"]
assert isinstance(machine["blas_threads"], int) and 0 <= machine["blas_threads"] <= machine["cores"], machine
assert machine["blas_threads_reason"], machine
assert machine["kokkos_host_threads"] is None or 1 <= machine["kokkos_host_threads"] <= machine["cores"], machine
# A reason is given only where Tessera gave Kokkos one thread beside OpenBLAS's own pool of
# several (tests/unit/test_core.cpp checks that it is given there).
assert isinstance(machine["kokkos_host_threads_reason"], str), machine
if machine["kokkos_host_threads_reason"]:
    assert machine["kokkos_host_threads"] == 1 < machine["blas_threads"], machine
if not any(v in machine["blas_threads_reason"] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "not OpenBLAS")):
    # Tessera's own choice: the node's cores shared by its ranks (this check runs them on one node).
    assert machine["blas_threads"] == max(1, min(os.cpu_count(), machine["cores"] // machine["ranks"])) or \
        "bound to this rank" in machine["blas_threads_reason"], machine
print(f"ok: {d['config']['strategy']} step {m['step'] * 1e3:.2f} ms, step/GEMMs {d['step_over_gemm']:.2f}, "
      f"model state {b['model_state'] / 2**20:.2f} MiB")
