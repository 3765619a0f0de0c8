#!/usr/bin/env bash
# ZeRO stages 1-3 beside DDP on the 8 x 1024 MLP (global batch 128, AdamW, fp32 gradients):
#  - memory: each strategy on 4 ranks; what a rank keeps (model state), its transient buffers,
#    its peak resident memory and what it sends per step (the rank with the most of each);
#  - time: each strategy on 2 ranks, in rounds that run every strategy once, so that all see
#    the same machine; the median over rounds of each one's median step, and its ratio to DDP's.
# JSON per run in perf/results/zero/, the summary in perf/results/zero.json; a table on stdout.
#   perf/run_zero.sh [rounds (default 3)]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/script_args.sh"
script_args rounds "$@"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
rounds="${1:-3}"
out="$TESSERA_ROOT/perf/results/zero"
mkdir -p "$out"
bench="$BUILD_DIR/perf/tessera-bench-train"
model=(--model.layers 8 --model.dim 1024 --train.batch 128 --comm.backend mpi)
for stage in 0 1 2 3; do
  mpiexec -n 4 "${MPIEXEC_FLAGS[@]}" "$bench" "${model[@]}" --parallel.zero "$stage" --bench.steps 4 \
      --bench.warmup 2 --bench.rounds 1 --json "$out/memory_np4_zero$stage.json" > /dev/null
done
for round in $(seq 1 "$rounds"); do
  for stage in 0 1 2 3; do
    mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" "$bench" "${model[@]}" --parallel.zero "$stage" --bench.steps 12 \
        --bench.warmup 3 --bench.rounds 1 --json "$out/time_np2_zero${stage}_r$round.json" > /dev/null
  done
done
python3 - "$out" "$rounds" "$TESSERA_ROOT/perf/results/zero.json" <<'PY'
import json, statistics, sys
out, rounds, summary_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = lambda b: b / 2**20
names = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}
rows, summary = [], {"memory_np4": {}, "time_np2": {}}
for s in range(4):
    mem = json.load(open(f"{out}/memory_np4_zero{s}.json"))["bytes_per_rank_max"]
    steps = [json.load(open(f"{out}/time_np2_zero{s}_r{r}.json")) for r in range(1, rounds + 1)]
    summary["memory_np4"][names[s]] = mem
    summary["time_np2"][names[s]] = {
        "step_s": statistics.median(d["median_s"]["step"] for d in steps),
        "comm_exposed_s": statistics.median(d["median_s"]["comm_exposed"] for d in steps),
        "optimizer_s": statistics.median(d["median_s"]["optimizer"] for d in steps),
        "comm_bytes_per_step": steps[0]["bytes_per_rank_max"]["comm_per_step"],
        "per_round_step_s": [d["median_s"]["step"] for d in steps]}
ddp = summary["time_np2"]["DDP"]["step_s"]
for s in range(4):
    t = summary["time_np2"][names[s]]
    t["over_ddp"] = t["step_s"] / ddp
    # Each round's ratio too: the spread says how much to trust the median.
    t["per_round_over_ddp"] = [a / b for a, b in zip(t["per_round_step_s"],
                                                     summary["time_np2"]["DDP"]["per_round_step_s"])]
json.dump(summary, open(summary_path, "w"), indent=2)
print("| | model state | working buffers | peak resident | sent per step | step (2 ranks) | / DDP |")
print("|---|---|---|---|---|---|---|")
for s in range(4):
    m, t = summary["memory_np4"][names[s]], summary["time_np2"][names[s]]
    spread = ", ".join(f"{x:.3f}" for x in t["per_round_over_ddp"])
    print(f"| {names[s]} | {mib(m['model_state']):.1f} MiB | {mib(m['working']):.1f} MiB | "
          f"{mib(m['peak_resident']):.1f} MiB | {mib(m['comm_per_step']):.1f} MiB | {t['step_s'] * 1e3:.1f} ms | "
          f"{t['over_ddp']:.3f} ({spread}) |")
peaks = [summary["memory_np4"][names[s]]["peak_resident"] for s in range(4)]
print("peak resident on 4 ranks falls DDP > 1 > 2 > 3:", all(a > b for a, b in zip(peaks, peaks[1:])))
print(f"goals: stages 1 and 2 within 1.10 x DDP's step ({summary['time_np2']['ZeRO-1']['over_ddp']:.3f}, "
      f"{summary['time_np2']['ZeRO-2']['over_ddp']:.3f}); stage 3 within 1.35 x "
      f"({summary['time_np2']['ZeRO-3']['over_ddp']:.3f})")
PY
