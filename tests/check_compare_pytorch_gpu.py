"""Checks perf/compare_pytorch_gpu.py's PyTorch GEMMs-alone timing where no GPU is: on the
CPU, with a tiny model, it must issue exactly the products of one step of an L-layer MLP as
tessera-bench-train times its own (per layer forward x W^T and backward dy^T x; dy W for
every layer but the first), each with the right shapes, once per timed and warm-up step.
With a tessera-bench-train as well, its runs with the Linear biases after the GEMM and in
the epilogue must set TESSERA_GEMM_BIAS_EPILOGUE as asked, and the benchmark must report
which way its biases went (on the host: all after the GEMM, the epilogue being cuBLASLt's);
with the variable unset (even where the caller's environment sets it), the build's default:
the epilogue in a CUDA build, none in a host build. The same for the bias gradients and
TESSERA_GEMM_BIAS_GRAD_EPILOGUE (summed in the weight-gradient GEMM's epilogue, or in a GEMV
after it). Its runs with the updates after backward
pass --train.overlap_optimizer false, and the others leave the default (true). The
benchmark names its GPU (none on a host build), and a Tessera GPU other than PyTorch's is
said to be.

Usage: python3 tests/check_compare_pytorch_gpu.py perf/compare_pytorch_gpu.py [tessera-bench-train]
"""
import importlib.util
import os
import sys
import types

import torch

spec = importlib.util.spec_from_file_location("compare_pytorch_gpu", sys.argv[1])
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)

L, d, b, steps, warmup = 3, 8, 5, 4, 2
calls = []
real_mm = torch.mm


def counting_mm(a, m, **kwargs):
    calls.append((tuple(a.shape), tuple(m.shape), tuple(kwargs["out"].shape)))
    return real_mm(a, m, **kwargs)


torch.mm = counting_mm
args = types.SimpleNamespace(layers=L, dim=d, batch=b, steps=steps, warmup=warmup, seed=0)
seconds, products = compare.pytorch_gemm_time(args, device="cpu")
torch.mm = real_mm

forward = [((b, d), (d, d), (b, d))] * L
backward = []
for layer in reversed(range(L)):
    backward.append(((d, b), (b, d), (d, d)))  # dW = dy^T x
    if layer > 0:
        backward.append(((b, d), (d, d), (b, d)))  # dx = dy W
one_step = forward + backward
problems = []
if products != 3 * L - 1:
    problems.append(f"{products} products per step reported, expected {3 * L - 1}")
if calls != one_step * (steps + warmup):
    problems.append(f"torch.mm calls {calls[:len(one_step)]}... ({len(calls)} in all), expected {one_step} "
                    f"x {steps + warmup}")
if not seconds > 0:
    problems.append(f"median time {seconds}")

# The two sides on different kinds of GPU are said to be; on the same, nothing is said.
if compare.other_gpu_note("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3") is not None:
    problems.append("a note for the same GPU on both sides")
note = compare.other_gpu_note("NVIDIA H200", "NVIDIA H100 80GB HBM3") or ""
if "'NVIDIA H200'" not in note or "'NVIDIA H100 80GB HBM3'" not in note:
    problems.append(f"two GPUs, note {note!r}")
if "did not name its GPU" not in (compare.other_gpu_note(None, "NVIDIA H100 80GB HBM3") or ""):
    problems.append("no note where the benchmark names no GPU")

# A model of one layer has no GELU: its shares are null in the benchmark's JSON.
shares = compare.memory_bound_shares(
    {"gelu_forward_only": 0.0, "gelu_backward_only": 0.0, "bias_grad_only": 1e-4, "loss_only": 2e-5,
     "optimizer_only": 3e-4},
    {"over_copy_bandwidth": {"gelu_forward": None, "gelu_backward": None, "bias_grad": 0.5, "loss": 0.25,
                             "optimizer": 0.75}})
if not shares.startswith("GELU forward 0.000 ms (none), GELU backward 0.000 ms (none), bias gradients 0.100 ms "
                         "(0.50)"):
    problems.append(f"memory-bound shares of a one-layer model: {shares!r}")

bias_ways = ""
if len(sys.argv) > 2:
    # Multiples of 16 (a batch of 16 is the weight-gradient GEMM's k), which cuBLASLt's
    # epilogues take on a GPU.
    run = types.SimpleNamespace(bench=sys.argv[2], layers=2, dim=16, batch=16, steps=3, warmup=1, quiet=True)
    # tessera_run must unset it for the default: left at 1, a host build would report it requested.
    os.environ["TESSERA_GEMM_BIAS_EPILOGUE"] = "1"
    # Likewise TESSERA_GEMM_BIAS_GRAD_EPILOGUE and the bias gradients: in the weight-gradient
    # GEMM's epilogue or in GEMVs.
    os.environ["TESSERA_GEMM_BIAS_GRAD_EPILOGUE"] = "1"
    for what, prefix in (("bias epilogue", "gemm_bias"), ("bias-gradient epilogue", "gemm_bias_grad")):
        for epilogue in (False, True, None):
            if prefix == "gemm_bias":
                result = compare.tessera_run(run, epilogue)
            else:
                result = compare.tessera_run(run, None, True, epilogue)
            config = result["config"]
            # What the comparison holds PyTorch's GPU against: a GPU build's name, none on a host.
            if (result["machine"]["gpu"] is not None) != (config["memory"] == "device"):
                problems.append(f"machine.gpu {result['machine']['gpu']!r} with {config['memory']} memory")
            got = (config[prefix + "_epilogue_requested"], config[prefix + "_in_epilogue"] > 0,
                   config[prefix + "_separate"] > 0)
            device = config["memory"] == "device"
            asked = device if epilogue is None else epilogue
            want = (asked, asked and device, not (asked and device))
            if got != want:
                problems.append(f"{what} {epilogue}: the benchmark reports (requested, any in the epilogue, any "
                                f"separate) = {got}, expected {want}")
            bias_ways += f"; {what} {({True: 'on', False: 'off', None: 'unset'})[epilogue]}: " \
                         f"{config[prefix + '_in_epilogue']} in it, {config[prefix + '_separate']} separate"
    # Updates after backward where asked (--overlap-optimizer off or both), else the default.
    for overlap in (False, True):
        config = compare.tessera_run(run, None, overlap)["config"]
        if config["overlap_optimizer"] is not overlap:
            problems.append(f"overlap_optimizer {overlap}: the benchmark ran with {config['overlap_optimizer']}")
    # Fewer steps than the benchmark's default rounds (3): the script asks for fewer rounds.
    run.steps = 2
    config = compare.tessera_run(run, None)["config"]
    if (config["steps"], config["rounds"]) != (2, 2):
        problems.append(f"--steps 2: the benchmark ran {config['steps']} steps in {config['rounds']} rounds")
if problems:
    sys.exit("check_compare_pytorch_gpu.py: " + "; ".join(problems))
print(f"check_compare_pytorch_gpu.py: {products} products per step, {len(calls)} calls, median {seconds * 1e6:.0f} us"
      + bias_ways)
