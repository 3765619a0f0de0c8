"""PyTorch DDP over Gloo on the model and task of tessera-bench-train: an MLP of L Linear(d, d)
layers with GELU between them, MSE against a fixed random teacher of the same shape, AdamW
with PyTorch's defaults, a global batch cut across the ranks. Prints and writes steps/s.

Usage: /usr/bin/python3 perf/pytorch_ddp.py --ranks 2 --layers 8 --dim 1024 --batch 128 --json out.json
(Debian's python3-torch; one CPU thread per rank, like one Tessera rank per core.)

--sched batch (the default) runs each rank under SCHED_BATCH, as Tessera runs its own Gloo
event loop (docs/communication.md, "Gloo on a shared core"): with one core per rank, Gloo's
event-loop thread otherwise preempts the thread whose lock it needs and spins on it (PyTorch's
loop thread used twice the CPU, and the median step was 132 ms against 118 ms, on the 2-core
machine; docs/strategies.md). --sched normal leaves the default policy, to compare.
"""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def mlp(layers, dim):
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(dim, dim))
        if i + 1 < layers:
            mods.append(nn.GELU())  # exact erf form, as Tessera's
    return nn.Sequential(*mods)


def worker(rank, args, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    model = mlp(args.layers, args.dim)
    teacher = mlp(args.layers, args.dim).requires_grad_(False)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    local = args.batch // args.ranks
    gen = torch.Generator().manual_seed(args.seed)
    pool_x = torch.randn(max(8 * args.batch, 1024), args.dim, generator=gen)
    with torch.no_grad():
        pool_y = teacher(pool_x)
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        start = (step * args.batch + rank * local) % (pool_x.shape[0] - local)
        x, y = pool_x[start:start + local], pool_y[start:start + local]
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    median = torch.tensor([statistics.median(times)])
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    if rank == 0:
        results.put(median.item())
    dist.destroy_process_group()


class ArgumentHelp(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help prints the module's whole description as written, and every option's default."""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=ArgumentHelp)
    p.add_argument("--ranks", type=int, default=2, help="processes, one per core")
    p.add_argument("--layers", type=int, default=8, help="Linear layers")
    p.add_argument("--dim", type=int, default=1024, help="width of every layer")
    p.add_argument("--batch", type=int, default=128, help="global batch, cut across the ranks")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and data")
    p.add_argument("--sched", choices=["batch", "normal"], default="batch",
                   help="scheduling policy of the ranks (see the description above)")
    p.add_argument("--json", help="write the results as JSON to this file")
    args = p.parse_args()
    # Refused before any work, as tessera-bench-train refuses them.
    for name in ("ranks", "layers", "dim", "batch", "steps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be 0 or more, not {args.warmup}")
    if args.batch % args.ranks:
        p.error(f"--batch {args.batch} does not divide across {args.ranks} ranks; choose a multiple of {args.ranks}")
    if args.json:
        folder = os.path.dirname(args.json) or "."
        if not os.path.isdir(folder):
            p.error(f"--json '{args.json}': the directory '{folder}' does not exist; create it first")
        if os.path.isdir(args.json):
            p.error(f"--json '{args.json}' is a directory; give a file name")
    started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if args.sched == "batch":
        # Before the ranks start: they, and Gloo's threads in them, inherit the policy.
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(args, port, results), nprocs=args.ranks, join=True)
    step = results.get()
    out = {"framework": f"pytorch {torch.__version__}", "backend": "gloo", "sched": args.sched, "ranks": args.ranks,
           "layers": args.layers, "dim": args.dim, "global_batch": args.batch, "median_step_s": step,
           "steps_per_s": 1 / step, "steps": args.steps, "warmup": args.warmup, "threads": args.threads,
           "seed": args.seed, "started_utc": started_utc,
           "machine": {"hostname": socket.gethostname(), "cores": os.cpu_count()}}
    print(f"pytorch {torch.__version__} DDP (gloo, {args.sched} policy), {args.ranks} ranks, "
          f"MLP {args.layers} x {args.dim}, batch {args.batch}: median step {step * 1e3:.2f} ms, "
          f"{1 / step:.2f} steps/s")
    if args.json:
        # Written beside, then renamed over: a file already there stays whole until then.
        partial = f"{args.json}.tmp.{os.getpid()}"
        with open(partial, "w") as f:
            json.dump(out, f, indent=2)
        os.replace(partial, args.json)


if __name__ == "__main__":
    main()
