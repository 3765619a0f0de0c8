#!/usr/bin/env bash
# Gloo's event-loop thread under SCHED_BATCH (Tessera's default) beside the normal policy
# (TESSERA_GLOO_LOOP_SCHED=normal), 2 ranks, in rounds that run both, so both see the same
# machine:
#  - all_reduce and broadcast over Gloo, 4 KiB to 16 MiB (tessera-bench-collectives);
#  - training over Gloo: DDP and ZeRO-3 on the 8 x 1024 MLP, and ZeRO-3 on an 8 x 128 one,
#    whose small collectives wait on their peers most (tessera-bench-train).
# Each row: the median over rounds of each policy's time, and normal / batch (above 1: batch
# is faster), with every round's ratio. JSON per run in perf/results/gloo_loop/, the summary
# in perf/results/gloo_loop.json; a table on stdout.
#   perf/run_gloo_loop.sh [rounds (default 3)]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/script_args.sh"
script_args rounds "$@"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
rounds="${1:-3}"
out="$TESSERA_ROOT/perf/results/gloo_loop"
mkdir -p "$out"
launch() { mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" -x TESSERA_GLOO_LOOP_SCHED "$@" > /dev/null; }
for round in $(seq 1 "$rounds"); do
  # Each round swaps which policy runs first, so that neither always inherits the other's state.
  policies="normal batch"
  [ $((round % 2)) -eq 1 ] || policies="batch normal"
  for policy in $policies; do
    export TESSERA_GLOO_LOOP_SCHED=$policy
    for coll in all_reduce broadcast; do
      launch "$BUILD_DIR/perf/tessera-bench-collectives" --coll "$coll" -b 4K -e 16M -f 4 -n 20 --rounds 1 \
          --backend gloo --json "$out/${coll}_${policy}_r$round.json"
    done
    for run in "ddp_1024 0 1024" "zero3_1024 3 1024" "zero3_128 3 128"; do
      read -r name stage dim <<< "$run"
      launch "$BUILD_DIR/perf/tessera-bench-train" --model.layers 8 --model.dim "$dim" --train.batch 128 \
          --comm.backend gloo --parallel.zero "$stage" --bench.steps 12 --bench.warmup 3 --bench.rounds 1 \
          --json "$out/train_${name}_${policy}_r$round.json"
    done
  done
done
python3 - "$out" "$rounds" "$TESSERA_ROOT/perf/results/gloo_loop.json" <<'PY'
import json, statistics, sys
out, rounds, summary_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rs = range(1, rounds + 1)
summary = {"rounds": rounds, "collectives": [], "training": []}
def row(what, times):  # times[policy] = one value per round
    n, b = times["normal"], times["batch"]
    return {**what, "normal_s": statistics.median(n), "batch_s": statistics.median(b),
            "normal_over_batch": statistics.median(n) / statistics.median(b),
            "per_round_normal_over_batch": [x / y for x, y in zip(n, b)]}
for coll in ("all_reduce", "broadcast"):
    runs = {p: [json.load(open(f"{out}/{coll}_{p}_r{r}.json"))["results"] for r in rs] for p in ("normal", "batch")}
    for i, first in enumerate(runs["normal"][0]):
        times = {p: [rows[i]["time_us"] * 1e-6 for rows in runs[p]] for p in runs}
        summary["collectives"].append(row({"op": coll, "bytes": first["bytes"]}, times))
for name in ("ddp_1024", "zero3_1024", "zero3_128"):
    times = {p: [json.load(open(f"{out}/train_{name}_{p}_r{r}.json"))["median_s"]["step"] for r in rs]
             for p in ("normal", "batch")}
    summary["training"].append(row({"run": name}, times))
summary["machine"] = json.load(open(f"{out}/all_reduce_batch_r1.json"))["machine"]
json.dump(summary, open(summary_path, "w"), indent=2)
spread = lambda r: ", ".join(f"{x:.2f}" for x in r["per_round_normal_over_batch"])
print("| op | size | normal | batch | normal / batch (each round) |")
print("|---|---|---|---|---|")
for r in summary["collectives"]:
    size = f"{r['bytes'] // 2**20} MiB" if r["bytes"] >= 2**20 else f"{r['bytes'] // 2**10} KiB"
    print(f"| {r['op']} | {size} | {r['normal_s'] * 1e6:.0f} us | {r['batch_s'] * 1e6:.0f} us | "
          f"{r['normal_over_batch']:.2f} ({spread(r)}) |")
print("| training step | | normal | batch | normal / batch (each round) |")
for r in summary["training"]:
    print(f"| {r['run']} | | {r['normal_s'] * 1e3:.1f} ms | {r['batch_s'] * 1e3:.1f} ms | "
          f"{r['normal_over_batch']:.2f} ({spread(r)}) |")
PY
