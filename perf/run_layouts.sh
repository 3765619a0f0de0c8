#!/usr/bin/env bash
# Data-, tensor- and pipeline-parallel layouts side by side on the 8 x 1024 MLP (global batch
# 128, AdamW, fp32 over MPI): on 2 ranks DDP, tp 2, and pp 2 (8 micro-batches, 1F1B and
# GPipe); on 4 ranks DDP, dp 2 x tp 2, tp 4, dp 2 x pp 2 and tp 2 x pp 2. Rounds run every
# layout once each, so that all see the same machine; reported: the median over rounds of
# each layout's median step, its ratio to DDP's on as many ranks, what a rank keeps (model
# state), what it sends per step over each axis, and the pipeline's bubble per stage.
# JSON per run in perf/results/layouts/, the summary in perf/results/layouts.json.
#   perf/run_layouts.sh [rounds (default 3)]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/script_args.sh"
script_args rounds "$@"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
rounds="${1:-3}"
out="$TESSERA_ROOT/perf/results/layouts"
mkdir -p "$out"
bench="$BUILD_DIR/perf/tessera-bench-train"
model=(--model.layers 8 --model.dim 1024 --train.batch 128 --comm.backend mpi --bench.warmup 2 --bench.rounds 1)
layouts=("2 1 1 1f1b" "2 2 1 1f1b" "2 1 2 1f1b" "2 1 2 gpipe" "4 1 1 1f1b" "4 2 1 1f1b" "4 4 1 1f1b" "4 1 2 1f1b"
         "4 2 2 1f1b")  # ranks, tp, pp, schedule
for round in $(seq 1 "$rounds"); do
  for layout in "${layouts[@]}"; do
    read -r n tp pp schedule <<< "$layout"
    steps=12
    [ "$n" -eq 4 ] && steps=6  # 4 ranks share 2 cores here: slower steps
    mpiexec -n "$n" "${MPIEXEC_FLAGS[@]}" "$bench" "${model[@]}" --parallel.tp "$tp" --parallel.pp "$pp" \
        --parallel.microbatches 8 --parallel.schedule "$schedule" --bench.steps "$steps" \
        --json "$out/np${n}_tp${tp}_pp${pp}_${schedule}_r$round.json" > /dev/null
  done
done
python3 - "$out" "$rounds" "$TESSERA_ROOT/perf/results/layouts.json" <<'PY'
import json, statistics, sys
out, rounds, summary_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = lambda b: b / 2**20
summary = {}
layouts = ((2, 1, 1, "1f1b"), (2, 2, 1, "1f1b"), (2, 1, 2, "1f1b"), (2, 1, 2, "gpipe"), (4, 1, 1, "1f1b"),
           (4, 2, 1, "1f1b"), (4, 4, 1, "1f1b"), (4, 1, 2, "1f1b"), (4, 2, 2, "1f1b"))
for n, tp, pp, schedule in layouts:
    runs = [json.load(open(f"{out}/np{n}_tp{tp}_pp{pp}_{schedule}_r{r}.json")) for r in range(1, rounds + 1)]
    b = runs[0]["bytes_per_rank_max"]
    summary[f"np{n}_tp{tp}_pp{pp}_{schedule}"] = {
        "ranks": n, "tp": tp, "pp": pp, "schedule": schedule, "dp": n // (tp * pp),
        "bubble_per_rank": [statistics.median(d["bubble_fraction_per_rank"][k] for d in runs) for k in range(n)],
        "step_s": statistics.median(d["median_s"]["step"] for d in runs),
        "per_round_step_s": [d["median_s"]["step"] for d in runs],
        "model_state_bytes": b["model_state"], "dp_comm_bytes": b["comm_per_step"],
        "tp_comm_bytes": b["tp_comm_per_step"], "pp_comm_bytes": b["pp_comm_per_step"]}
for key, s in summary.items():
    base = summary[f"np{s['ranks']}_tp1_pp1_1f1b"]
    s["over_ddp"] = s["step_s"] / base["step_s"]
    s["per_round_over_ddp"] = [a / c for a, c in zip(s["per_round_step_s"], base["per_round_step_s"])]
json.dump(summary, open(summary_path, "w"), indent=2)
print("| ranks | layout | model state | sent over dp | over tp | over pp | bubble per rank | step | / DDP (each round) |")
print("|---|---|---|---|---|---|---|---|---|")
for s in summary.values():
    parts = [f"{axis} {size}" for axis, size in (("dp", s["dp"]), ("tp", s["tp"]), ("pp", s["pp"])) if size > 1]
    name = "DDP" if s["tp"] == s["pp"] == 1 else " x ".join(parts) + (f" ({s['schedule']})" if s["pp"] > 1 else "")
    rounds_text = ", ".join(f"{x:.2f}" for x in s["per_round_over_ddp"])
    bubble = ", ".join(f"{x:.2f}" for x in s["bubble_per_rank"]) if s["pp"] > 1 else "-"
    print(f"| {s['ranks']} | {name} | {mib(s['model_state_bytes']):.1f} MiB | {mib(s['dp_comm_bytes']):.1f} MiB | "
          f"{mib(s['tp_comm_bytes']):.1f} MiB | {mib(s['pp_comm_bytes']):.1f} MiB | {bubble} | {s['step_s'] * 1e3:.1f} ms | {s['over_ddp']:.2f} ({rounds_text}) |")
PY
