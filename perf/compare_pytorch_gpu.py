"""Tessera beside PyTorch eager on one GPU: the same MLP (L Linear(d, d) layers with exact
GELU between them), MSE against a teacher of the same shape, AdamW with PyTorch's defaults
(PyTorch's fused kernel), fp32 with TF32 off on both sides, one step = forward, backward,
optimizer. Tessera's figures come from tessera-bench-train (its step, the step's breakdown
and its GEMMs alone, timed in the same process); PyTorch's are timed here: its step, and the
same 3 L - 1 GEMMs alone as torch.mm, so that a gap can be told to be the GEMMs' or the
rest's. With --bias-epilogue both (the default) Tessera also runs with its Linear biases
added in a pass after each GEMM (TESSERA_GEMM_BIAS_EPILOGUE=0) beside its default, cuBLASLt's
GEMM epilogue, as PyTorch's Linear adds them; with --bias-grad-epilogue both (the default),
also with its bias gradients summed in a GEMV after each weight-gradient GEMM
(TESSERA_GEMM_BIAS_GRAD_EPILOGUE=0) beside its default, that GEMM's cuBLASLt epilogue; with
--overlap-optimizer both (the default), also with its optimizer updating once after backward
(--train.overlap_optimizer false) beside its default, each bucket's update queued beside the
rest of backward. Each such variant differs from the default in that one way. All alternate
for --rounds rounds in one run, in reverse order every other round; each keeps its best
median, and the JSON also holds every round's. Writes JSON.

Usage (a CUDA build of Tessera, on a machine with a GPU and PyTorch):
  python3 perf/compare_pytorch_gpu.py --bench build-cuda/perf/tessera-bench-train \\
      --layers 8 --dim 4096 --batch 1024 --json perf/results/gpu_vs_pytorch.json
Goals (issue 7): Tessera step <= 1.0 x PyTorch's; Tessera step <= 1.1 x its GEMMs alone.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def pytorch_step_time(args):
    import torch
    import torch.nn as nn

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")

    def mlp():
        mods = []
        for i in range(args.layers):
            mods.append(nn.Linear(args.dim, args.dim))
            if i + 1 < args.layers:
                mods.append(nn.GELU())  # exact erf form, as Tessera's
        return nn.Sequential(*mods).to(dev)

    torch.manual_seed(args.seed)
    model, teacher = mlp(), mlp().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    samples = max(8 * args.batch, 1024)
    pool_x = torch.randn(samples, args.dim, device=dev, generator=gen)
    with torch.no_grad():
        pool_y = teacher(pool_x)
    order = torch.randperm(samples, device=dev, generator=gen)
    times = []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        rows = order[(step * args.batch) % (samples - args.batch):][: args.batch]
        x, y = pool_x.index_select(0, rows), pool_y.index_select(0, rows)  # a gathered batch, as Tessera's
        opt.zero_grad()  # set_to_none, PyTorch's default
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    name = torch.cuda.get_device_name(0)
    del model, teacher, opt, pool_x, pool_y
    torch.cuda.empty_cache()
    return statistics.median(times), f"pytorch {torch.__version__}", name


def pytorch_gemm_time(args, device="cuda"):
    """PyTorch's matrix products of one step, alone, as tessera-bench-train times its own: per
    layer forward y = x W^T and backward dW = dy^T x, and dx = dy W for every layer but the
    first (its input is data): 3 L - 1 products, of buffers of their own per layer. Returns
    the median time and the number of products."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    L, d, b = args.layers, args.dim, args.batch

    def rand(*shape):
        return torch.randn(*shape, device=dev, generator=gen)

    acts = [rand(b, d) for _ in range(L + 1)]
    ws, dys = [rand(d, d) for _ in range(L)], [rand(b, d) for _ in range(L)]
    dws, dxs = [torch.empty(d, d, device=dev) for _ in range(L)], [torch.empty(b, d, device=dev) for _ in range(L)]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    products, times = 0, []
    for step in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        products = 0
        for l in range(L):
            torch.mm(acts[l], ws[l].t(), out=acts[l + 1])
            products += 1
        for l in reversed(range(L)):
            torch.mm(dys[l].t(), acts[l], out=dws[l])
            products += 1
            if l > 0:
                torch.mm(dys[l], ws[l], out=dxs[l])
                products += 1
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    del acts, ws, dys, dws, dxs
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return statistics.median(times), products


def memory_bound_shares(m, mb):
    """'GELU forward 0.123 ms (0.85), ...': each memory-bound pass alone and its speed over a
    copy's. A pass the model does not make (no GELU in a model of one layer) has no share; the
    bias gradients' GEMVs, timed alone where the step summed them in its GEMMs' epilogue, are
    said not to be in the step."""
    parts = []
    for name, key, part in (("GELU forward", "gelu_forward_only", "gelu_forward"),
                            ("GELU backward", "gelu_backward_only", "gelu_backward"),
                            ("bias gradients", "bias_grad_only", "bias_grad"), ("loss", "loss_only", "loss"),
                            ("AdamW", "optimizer_only", "optimizer")):
        share = mb["over_copy_bandwidth"].get(part)
        outside = part == "bias_grad" and mb.get("bias_grad_in_step") is False
        parts.append(f"{name} {m[key] * 1e3:.3f} ms ({'none' if share is None else f'{share:.2f}'}"
                     f"{', not in the step' if outside else ''})")
    return ", ".join(parts)


def tessera_run(args, bias_epilogue, overlap_optimizer=True, bias_grad_epilogue=None):
    """Runs tessera-bench-train with TESSERA_GEMM_BIAS_EPILOGUE=1 (True), =0 (False) or unset
    (None: the build's default), TESSERA_GEMM_BIAS_GRAD_EPILOGUE likewise, and
    --train.overlap_optimizer false where overlap_optimizer is False (else the default, true),
    and returns its JSON."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        cmd = [args.bench, "--model.layers", str(args.layers), "--model.dim", str(args.dim), "--train.batch",
               str(args.batch), "--bench.steps", str(args.steps), "--bench.warmup", str(args.warmup),
               # Each round times at least one step: no more rounds than steps.
               "--bench.rounds", str(min(3, args.steps)), "--json", path]
        if not overlap_optimizer:
            cmd += ["--train.overlap_optimizer", "false"]
        env = dict(os.environ)
        for name, value in (("TESSERA_GEMM_BIAS_EPILOGUE", bias_epilogue),
                            ("TESSERA_GEMM_BIAS_GRAD_EPILOGUE", bias_grad_epilogue)):
            env.pop(name, None)
            if value is not None:
                env[name] = "1" if value else "0"
        run = subprocess.run(cmd, stdout=sys.stderr if args.quiet else None, env=env)
        if run.returncode != 0:
            sys.exit(f"compare_pytorch_gpu.py: {args.bench} failed (exit {run.returncode}); its message is above")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def check_before_running(p, args):
    """What would fail only after the first rounds, refused before any: a benchmark that is not
    there or not a CUDA build, PyTorch without a GPU, counts below 1."""
    for name in ("layers", "dim", "batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: give 1 or more")
    if args.warmup < 0:
        p.error(f"--warmup {args.warmup}: give 0 or more")
    if not os.path.isabs(args.bench) and not os.path.exists(args.bench):
        # The default is relative to the repository, wherever the script is run from.
        beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", args.bench)
        if os.path.exists(beside):
            args.bench = os.path.normpath(beside)
    if not os.path.isfile(args.bench):
        p.error(f"--bench '{args.bench}' does not exist; build the CUDA build first (scripts/build-cuda.sh, "
                f"docs/training.md) or give the path of its tessera-bench-train")
    version = subprocess.run([args.bench, "--version"], capture_output=True, text=True)
    if version.returncode != 0:
        sys.exit(f"compare_pytorch_gpu.py: {args.bench} --version failed (exit {version.returncode}): "
                 f"{(version.stderr or version.stdout).strip()}")
    if "(Cuda" not in version.stdout:
        p.error(f"--bench '{args.bench}' is not a CUDA build ({version.stdout.strip()}); give a CUDA build's")
    try:
        import torch
    except ImportError:
        sys.exit("compare_pytorch_gpu.py: PyTorch is not installed for this python3 (import torch failed); "
                 "install a PyTorch built for CUDA (pip install torch), or run it with the python3 that has one")
    if not torch.cuda.is_available():
        sys.exit(f"compare_pytorch_gpu.py: PyTorch {torch.__version__} sees no GPU (torch.cuda.is_available() is "
                 f"False): run it where there is one, with a PyTorch built for CUDA")


def other_gpu_note(tessera_gpu, torch_gpu):
    """A note where the two sides ran on different kinds of GPU, else None."""
    if tessera_gpu == torch_gpu:
        return None
    if tessera_gpu is None:
        return (f"note: the benchmark did not name its GPU (a build older than its machine.gpu), so it cannot be "
                f"told whether Tessera ran on PyTorch's {torch_gpu!r}")
    return (f"note: Tessera ran on {tessera_gpu!r} and PyTorch on {torch_gpu!r}: the ratios compare two GPUs "
            f"(give both the same one, e.g. with CUDA_VISIBLE_DEVICES)")


class ArgumentHelp(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help prints the module's whole description as written, and every option's default."""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=ArgumentHelp)
    p.add_argument("--bench", default="build-cuda/perf/tessera-bench-train", help="tessera-bench-train of a CUDA build")
    p.add_argument("--layers", type=int, default=8, help="Linear layers")
    p.add_argument("--dim", type=int, default=4096, help="width of every layer")
    p.add_argument("--batch", type=int, default=1024, help="batch")
    p.add_argument("--steps", type=int, default=30, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=2, help="alternating Tessera/PyTorch rounds; each keeps its best")
    p.add_argument("--seed", type=int, default=0, help="seed of PyTorch's weights and data")
    p.add_argument("--bias-epilogue", choices=["off", "on", "both"], default="both",
                   help="Tessera's Linear bias in cuBLASLt's epilogue (on, Tessera's default on a GPU), after "
                        "the GEMM (off), or both, alternating")
    p.add_argument("--bias-grad-epilogue", choices=["off", "on", "both"], default="both",
                   help="Tessera's Linear bias gradient summed in the weight-gradient GEMM's cuBLASLt epilogue (on, "
                        "Tessera's default on a GPU), in a GEMV after it (off), or both, alternating")
    p.add_argument("--overlap-optimizer", choices=["off", "on", "both"], default="both",
                   help="Tessera's optimizer updating each bucket beside the rest of backward (on, Tessera's "
                        "default), once after backward (off), or both, alternating")
    p.add_argument("--quiet", action="store_true", help="send the benchmark's own table to stderr")
    p.add_argument("--json", help="write the results as JSON to this file")
    args = p.parse_args()
    check_before_running(p, args)

    # The default ways (the epilogues, updates beside backward) first: the headline ratios are
    # of the first variant; each other one differs from it in one way. A variant is (bias
    # epilogue, updates beside backward, bias-gradient epilogue).
    ways = {"off": [False], "on": [True], "both": [True, False]}
    epilogues, overlaps = ways[args.bias_epilogue], ways[args.overlap_optimizer]
    grad_epilogues = ways[args.bias_grad_epilogue]
    head = (epilogues[0], overlaps[0], grad_epilogues[0])
    variants = ([head] + [(e, head[1], head[2]) for e in epilogues[1:]] +
                [(head[0], o, head[2]) for o in overlaps[1:]] + [(head[0], head[1], g) for g in grad_epilogues[1:]])

    def round_key(v):
        # Only --overlap-optimizer both adds a variant of the other way: after backward; only
        # --bias-grad-epilogue both one with the GEMVs.
        if v[1] != head[1]:
            return "tessera_updates_after_backward"
        if v[2] != head[2]:
            return "tessera_bias_grad_after"
        return "tessera_bias_epilogue" if v[0] else "tessera_bias_after"

    best, torch_best, torch_gemm, rounds = {}, None, None, []
    for r in range(args.rounds):
        this_round = {}
        # Each round reverses the order, so that no variant always runs first.
        for v in variants if r % 2 == 0 else variants[::-1]:
            t = tessera_run(args, v[0], v[1], v[2])
            this_round[round_key(v)] = t["median_s"]["step"]
            if v not in best or t["median_s"]["step"] < best[v]["median_s"]["step"]:
                best[v] = t
        step, framework, gpu = pytorch_step_time(args)
        torch_best = step if torch_best is None else min(torch_best, step)
        gemm, products = pytorch_gemm_time(args)
        torch_gemm = gemm if torch_gemm is None else min(torch_gemm, gemm)
        this_round.update(pytorch=step, pytorch_gemm_only=gemm)
        rounds.append(this_round)
    tessera = best[head]
    m = tessera["median_s"]
    # Both sides must have run on the same kind of GPU for the ratios to mean anything.
    tessera_gpu = tessera.get("machine", {}).get("gpu")
    out = {
        "gpu": gpu,
        "tessera_gpu": tessera_gpu,
        "model": {"layers": args.layers, "dim": args.dim, "batch": args.batch, "dtype": "float32", "tf32": False},
        "tessera": tessera,
        "pytorch": {"framework": framework, "optimizer": "AdamW(fused=True)", "median_step_s": torch_best,
                    "gemm_only_s": torch_gemm, "gemm_products": products},
        "tessera_over_pytorch": m["step"] / torch_best,
        "tessera_step_over_gemm": m["step"] / m["gemm_only"],
        "pytorch_step_over_gemm": torch_best / torch_gemm,
        "tessera_gemm_over_pytorch_gemm": m["gemm_only"] / torch_gemm,
        # Tessera's GEMMs plus every byte its memory-bound passes move, at a copy's speed on
        # this GPU (tessera-bench-train's memory_bound): how far below 1.1 the step could go.
        "tessera_copy_speed_step_over_gemm": tessera["copy_speed_step_over_gemm"],
        "rounds_s": rounds,
    }
    # Each variant beside the default: its best run, its ratios, and whether the default's
    # step was the lower in every round. (The variant, its key, the ratio's, the flag's.)
    head_key = round_key(head)
    others = [((False, head[1], head[2]), "tessera_bias_after", "bias_epilogue_over_separate",
               "bias_epilogue_faster_every_round"),
              ((head[0], head[1], False), "tessera_bias_grad_after", "bias_grad_epilogue_over_separate",
               "bias_grad_epilogue_faster_every_round"),
              ((head[0], False, head[2]), "tessera_updates_after_backward", "updates_beside_over_after",
               "updates_beside_faster_every_round")]
    ran = []  # (key, ratio) of each that ran
    for v, key, ratio, faster in others:
        if v == head or v not in best:
            continue
        ran.append((key, ratio))
        a = best[v]
        out[key] = a
        out[key + "_over_pytorch"] = a["median_s"]["step"] / torch_best
        out[key + "_step_over_gemm"] = a["median_s"]["step"] / a["median_s"]["gemm_only"]
        out[ratio] = m["step"] / a["median_s"]["step"]
        out[faster] = all(r[head_key] < r[key] for r in rounds)

    def bias_way(t):
        c = t["config"]
        if not c.get("gemm_bias_epilogue_requested"):
            way = "bias after the GEMM"
        else:
            way = (f"bias in cuBLASLt's epilogue in {c.get('gemm_bias_in_epilogue')} GEMMs, "
                   f"after the GEMM in {c.get('gemm_bias_separate')}")
        if not c.get("gemm_bias_grad_epilogue_requested"):
            return way + ", bias gradients in GEMVs"
        return (way + f", bias gradients in the epilogue of {c.get('gemm_bias_grad_in_epilogue')} GEMMs, "
                f"in GEMVs in {c.get('gemm_bias_grad_separate')}")

    print(f"{gpu}: MLP {args.layers} x {args.dim}, batch {args.batch}, fp32 (TF32 off)")
    note = other_gpu_note(tessera_gpu, gpu)
    if note:
        print(f"  {note}")
    def update_way(t):
        return "updates beside backward" if t["config"].get("overlap_optimizer") else "updates after backward"

    print(f"  Tessera step {m['step'] * 1e3:.2f} ms, {bias_way(tessera)}, {update_way(tessera)} (its GEMMs alone "
          f"{m['gemm_only'] * 1e3:.2f} ms, optimizer alone {m['optimizer_only'] * 1e3:.2f} ms)")
    for key, ratio in ran:
        a = out[key]
        way = update_way(a) if key == "tessera_updates_after_backward" else bias_way(a)
        print(f"  Tessera step {a['median_s']['step'] * 1e3:.2f} ms, {way}; / PyTorch = "
              f"{out[key + '_over_pytorch']:.3f}, / its GEMMs = {out[key + '_step_over_gemm']:.3f}; the default's "
              f"step / this one = {out[ratio]:.4f} (lower in {sum(r[head_key] < r[key] for r in rounds)} of "
              f"{len(rounds)} rounds)")
    mb = tessera["memory_bound"]
    shares = memory_bound_shares(m, mb)
    print(f"  Tessera's memory-bound passes alone (speed / a copy's {mb['copy_bytes_per_s'] / 1e12:.2f} TB/s): "
          f"{shares}; all at the copy's speed, step / GEMMs would be {out['tessera_copy_speed_step_over_gemm']:.3f}")
    print(f"  PyTorch eager, fused AdamW: step {torch_best * 1e3:.2f} ms ({framework}); its {products} GEMMs "
          f"alone as torch.mm {torch_gemm * 1e3:.2f} ms, step / GEMMs = {out['pytorch_step_over_gemm']:.3f}")
    print(f"  Tessera / PyTorch = {out['tessera_over_pytorch']:.3f} (goal <= 1.0); "
          f"Tessera step / its GEMMs = {out['tessera_step_over_gemm']:.3f} (goal <= 1.1)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
