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
# The memory-bound passes alone: their bytes follow from the model (the most any rank moves),
# and their shares, and the step at a copy's speed, from those bytes and the medians.
c = d["config"]
for key in ("gelu_forward_only", "gelu_backward_only", "bias_grad_only", "loss_only", "copy_only"):
    assert m[key] > 0, (key, m)
mb = d["memory_bound"]
ranks, tp, pp, layers, dim = d["machine"]["ranks"], c["tp"], c["pp"], c["layers"], c["dim"]
# A pass's rows: a micro-step's, cut into its pipeline micro-batches where pp > 1, each of which
# makes every pass once.
micro_batches = c["microbatches"] if pp > 1 else 1
rows = c["global_batch"] // (ranks // (tp * pp)) // c["accum"] // micro_batches
device = c["memory"] == "device"
stage_sizes = [layers // pp + (1 if s < layers % pp else 0) for s in range(pp)]
want = {"gelu_forward": 0, "gelu_backward": 0, "bias_grad": 0, "loss": 0}
most_per_stage = 0  # the most a stage's rank moves in these passes
first = 0
for size in stage_sizes:
    stage = {k: 0 for k in want}
    for i in range(first, first + size):
        column = tp > 1 and i % 2 == 0 and i + 1 < layers  # column-split layers hold out / tp outputs
        out = dim // tp if column else dim
        if i + 1 < layers:  # a GELU follows
            stage["gelu_forward"] += rows * out * (8 if device else 12)
            stage["gelu_backward"] += rows * out * (12 if device else 16)
        else:
            stage["loss"] = rows * out * 12  # MSE: output and target read, gradient written
        stage["bias_grad"] += (rows * out + rows + out) * 4
    stage = {k: v * c["accum"] * micro_batches for k, v in stage.items()}  # every micro-step makes the passes
    want = {k: max(want[k], stage[k]) for k in want}
    # Bias gradients summed in the weight-gradient GEMMs' epilogue (a GPU) are no pass of the
    # step: the GEMVs' bytes count for the share of bias gradients that took them.
    share = mb["bias_grad_gemv_share"]
    most_per_stage = max(most_per_stage, sum(v * (share if k == "bias_grad" else 1) for k, v in stage.items()))
    first += size
for k, v in want.items():
    assert mb["bytes"][k] == v, (k, mb["bytes"][k], v, c)
# The share of bias gradients summed in GEMVs (rank 0's counts here; the JSON has the most of
# any rank, and every rank of these layouts sums as many); a host build has no epilogue.
counted = c["gemm_bias_grad_in_epilogue"] + c["gemm_bias_grad_separate"]
assert counted > 0 and abs(mb["bias_grad_gemv_share"] - c["gemm_bias_grad_separate"] / counted) < 1e-12, (mb, c)
assert mb["bias_grad_in_step"] == (mb["bias_grad_gemv_share"] > 0), mb
assert device or mb["bias_grad_gemv_share"] == 1, (mb, c)
if c["optimizer"] == "adamw":
    assert mb["bytes"]["optimizer"] == 3.5 * mb["bytes"]["copy"], mb  # 28 bytes per parameter, the copy 8
rate = mb["copy_bytes_per_s"]
assert abs(rate - mb["bytes"]["copy"] / m["copy_only"]) < 1e-9 * rate, (rate, m)
names = {"gelu_forward": "gelu_forward_only", "gelu_backward": "gelu_backward_only", "bias_grad": "bias_grad_only",
         "loss": "loss_only", "optimizer": "optimizer_only"}
for k, t in names.items():
    share = mb["bytes"][k] / m[t] / rate
    assert abs(mb["over_copy_bandwidth"][k] - share) < 1e-9 * share, (k, mb, m)
# A rank's own passes and its optimizer (every rank updates as many parameters in these
# layouts): with pipeline stages no rank makes every pass.
total = most_per_stage + mb["bytes"]["optimizer"]
assert abs(mb["total_bytes"] - total) < 1e-6 * total, (mb, total)
per_rank = mb["copy_speed_step_s_per_rank"]
assert len(per_rank) == ranks and all(t > 0 for t in per_rank), per_rank
at_copy = max(per_rank)
assert abs(d["copy_speed_step_over_gemm"] - at_copy / m["gemm_only"]) < 1e-9 * at_copy, d
assert abs(d["step_over_copy_speed_step"] - m["step"] / at_copy) < 1e-9 * d["step_over_copy_speed_step"], d
if ranks == 1:  # then every figure is that rank's own
    assert abs(at_copy - (m["gemm_only"] + total / rate)) < 1e-9 * at_copy, (at_copy, m, rate)
b = d["bytes_per_rank_max"]
assert b["model_state"] > 0 and b["peak_resident"] > b["model_state"], b
dp = d["machine"]["ranks"] // (d["config"]["tp"] * d["config"]["pp"])
assert b["comm_per_step"] > 0 if dp > 1 else b["comm_per_step"] == 0, b
if ddp:  # one all-reduce of every gradient per step, whatever the accumulation, in the wire's dtype
    wire = {"float32": 4, "bfloat16": 2}[c["grad_dtype"]]
    sent = 2 * (dp - 1) / dp * layers * (dim * dim + dim) * wire
    assert abs(b["comm_per_step"] - sent) <= 1e-9 * max(1.0, sent), (b["comm_per_step"], sent, c)
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
# A GPU build names rank 0's GPU and how many ranks share it; a host build names none.
if machine["kokkos_space"] == "Cuda":
    assert isinstance(machine["gpu"], str) and machine["gpu"], machine
    assert isinstance(machine["ranks_per_gpu"], int) and 1 <= machine["ranks_per_gpu"] <= machine["ranks"], machine
else:
    assert machine["gpu"] is None and machine["ranks_per_gpu"] is None, machine
print(f"ok: {d['config']['strategy']} step {m['step'] * 1e3:.2f} ms, step/GEMMs {d['step_over_gemm']:.2f}, "
      f"model state {b['model_state'] / 2**20:.2f} MiB")
