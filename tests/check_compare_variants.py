"""Checks perf/compare_pytorch_gpu.py's rounds without a GPU or PyTorch: its Tessera runs and
PyTorch's timings are replaced by stand-ins whose step depends on the variant and the round,
and the script's main() must run every variant it was asked for in each round (the default
first, then each that differs from it in one way, in reverse order every other round), pass
each its own settings, keep each variant's best round, and compute every ratio of its JSON
from the right pair of runs; its line of memory-bound passes says where the bias gradients'
pass was not in the step.

Usage: python3 tests/check_compare_variants.py perf/compare_pytorch_gpu.py
"""
import importlib.util
import json
import os
import sys
import tempfile

spec = importlib.util.spec_from_file_location("compare_pytorch_gpu", sys.argv[1])
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)

GEMMS = 0.0156
TORCH_STEP, TORCH_GEMMS = 0.0178, 0.0157
problems = []


def step_of(bias_epilogue, overlap, grad_epilogue, round_index):
    """A step that differs with each setting, and is lowest in round 1 (the second)."""
    return (0.0175 + (0 if bias_epilogue else 2e-4) + (0 if overlap else 3e-4) + (0 if grad_epilogue else 1e-4)
            + (0 if round_index == 1 else 1e-6 * (round_index + 1)))


def run(argv):
    calls, current_round = [], [0]

    def fake_tessera_run(args, bias_epilogue, overlap_optimizer=True, bias_grad_epilogue=None):
        calls.append((bias_epilogue, overlap_optimizer, bias_grad_epilogue))
        step = step_of(bias_epilogue, overlap_optimizer, bias_grad_epilogue, current_round[0])
        return {"median_s": {"step": step, "gemm_only": GEMMS, "optimizer_only": 1e-3, "gelu_forward_only": 1e-4,
                             "gelu_backward_only": 1e-4, "bias_grad_only": 1e-4, "loss_only": 1e-5},
                "config": {"gemm_bias_epilogue_requested": bias_epilogue, "gemm_bias_in_epilogue": 8,
                           "gemm_bias_separate": 0, "gemm_bias_grad_epilogue_requested": bias_grad_epilogue,
                           "gemm_bias_grad_in_epilogue": 8, "gemm_bias_grad_separate": 0,
                           "overlap_optimizer": overlap_optimizer},
                "machine": {"gpu": "GPU"}, "copy_speed_step_over_gemm": 1.1,
                "memory_bound": {"copy_bytes_per_s": 3e12, "over_copy_bandwidth": {
                    "gelu_forward": 0.5, "gelu_backward": 0.5, "bias_grad": 0.5, "loss": 0.5, "optimizer": 0.9}}}

    def fake_pytorch_step(args):
        current_round[0] += 1  # PyTorch runs last in each round
        return TORCH_STEP, "torch", "GPU"

    compare.tessera_run = fake_tessera_run
    compare.check_before_running = lambda parser, args: None
    compare.pytorch_step_time = fake_pytorch_step
    compare.pytorch_gemm_time = lambda args: (TORCH_GEMMS, 23)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "out.json")
        sys.argv = ["compare_pytorch_gpu.py", "--rounds", "3", "--json", path] + argv
        stdout = sys.stdout
        sys.stdout = open(os.devnull, "w")
        try:
            compare.main()
        finally:
            sys.stdout.close()
            sys.stdout = stdout
        with open(path) as f:
            return calls, json.load(f)


def close(a, b):
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


# Every variant by default: the default first, then the bias after the GEMM, the updates
# after backward, the bias gradients in GEMVs; reversed in the second round.
calls, out = run([])
head, bias_after, updates_after, grad_after = (True, True, True), (False, True, True), (True, False, True), \
    (True, True, False)
order = [head, bias_after, updates_after, grad_after]
if calls != order + order[::-1] + order:
    problems.append(f"default run: Tessera ran {calls}, expected {order} then reversed, then again")
best = {v: step_of(*v, 1) for v in order}  # round 1 is every variant's best
want = {
    "tessera_over_pytorch": best[head] / TORCH_STEP,
    "tessera_step_over_gemm": best[head] / GEMMS,
    "bias_epilogue_over_separate": best[head] / best[bias_after],
    "updates_beside_over_after": best[head] / best[updates_after],
    "bias_grad_epilogue_over_separate": best[head] / best[grad_after],
}
for variant, key in ((bias_after, "tessera_bias_after"), (updates_after, "tessera_updates_after_backward"),
                     (grad_after, "tessera_bias_grad_after")):
    want[key + "_over_pytorch"] = best[variant] / TORCH_STEP
    want[key + "_step_over_gemm"] = best[variant] / GEMMS
    if not close(out.get(key, {}).get("median_s", {}).get("step", 0), best[variant]):
        problems.append(f"default run: {key} is not that variant's best run")
for key, value in want.items():
    if key not in out or not close(out[key], value):
        problems.append(f"default run: {key} = {out.get(key)}, expected {value}")
for key in ("bias_epilogue_faster_every_round", "updates_beside_faster_every_round",
            "bias_grad_epilogue_faster_every_round"):
    if out.get(key) is not True:
        problems.append(f"default run: {key} = {out.get(key)}, expected True (the default is faster in every round)")
keys = {"tessera_bias_epilogue", "tessera_bias_after", "tessera_updates_after_backward", "tessera_bias_grad_after",
        "pytorch", "pytorch_gemm_only"}
if len(out["rounds_s"]) != 3 or any(set(r) != keys for r in out["rounds_s"]):
    problems.append(f"default run: rounds_s {out['rounds_s']}, expected 3 rounds with keys {sorted(keys)}")
elif not close(out["rounds_s"][0]["tessera_bias_grad_after"], step_of(*grad_after, 0)):
    problems.append("default run: round 0's tessera_bias_grad_after is not that variant's step")

# The bias added after the GEMM by default, the gradients both ways: the head is the bias
# after, and the other variant differs from it in the gradients alone.
calls, out = run(["--bias-epilogue", "off", "--overlap-optimizer", "on"])
if calls[:2] != [(False, True, True), (False, True, False)] or len(calls) != 6:
    problems.append(f"--bias-epilogue off --overlap-optimizer on: Tessera ran {calls}")
if set(out["rounds_s"][0]) != {"tessera_bias_after", "tessera_bias_grad_after", "pytorch", "pytorch_gemm_only"}:
    problems.append(f"--bias-epilogue off --overlap-optimizer on: round keys {sorted(out['rounds_s'][0])}")
if not close(out.get("bias_grad_epilogue_over_separate", 0),
             step_of(False, True, True, 1) / step_of(False, True, False, 1)):
    problems.append("--bias-epilogue off: bias_grad_epilogue_over_separate "
                    f"{out.get('bias_grad_epilogue_over_separate')}")

# One way each: one variant, and no ratio between variants.
calls, out = run(["--bias-epilogue", "on", "--overlap-optimizer", "on", "--bias-grad-epilogue", "off"])
if calls != [(True, True, False)] * 3:
    problems.append(f"one variant: Tessera ran {calls}")
if any(k in out for k in ("bias_grad_epilogue_over_separate", "bias_epilogue_over_separate",
                          "updates_beside_over_after")):
    problems.append(f"one variant: ratios between variants in {sorted(out)}")

# The bias gradients' GEMVs are timed alone even where the step summed them in its GEMMs'
# epilogue; then the line says they are not in the step.
times = {"gelu_forward_only": 1e-4, "gelu_backward_only": 1e-4, "bias_grad_only": 1e-4, "loss_only": 1e-5,
         "optimizer_only": 1e-3}
shares = {"gelu_forward": 0.5, "gelu_backward": 0.5, "bias_grad": 0.5, "loss": 0.5, "optimizer": 0.9}
for in_step, said in ((False, True), (True, False), (None, False)):
    mb = {"over_copy_bandwidth": shares}
    if in_step is not None:
        mb["bias_grad_in_step"] = in_step
    line = compare.memory_bound_shares(times, mb)
    if ("bias gradients 0.100 ms (0.50, not in the step)" in line) != said:
        problems.append(f"bias_grad_in_step {in_step}: {line!r}")

if problems:
    sys.exit("check_compare_variants.py: " + "; ".join(problems))
print("check_compare_variants.py: the variants ran in order, each with its settings, and every ratio is of the "
      "right runs")
