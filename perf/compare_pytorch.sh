#!/usr/bin/env bash
# Tessera's DDP (over MPI, then over Gloo) beside PyTorch's DDP (Gloo) on the same model, batch
# and optimizer, one right after the other (not in alternating rounds): 2 ranks, MLP 8 x 1024,
# global batch 128, AdamW.
# Goal: Tessera >= 1.5 x PyTorch's steps per second. Needs Debian's python3-torch. JSON in
# perf/results/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/script_args.sh"
script_args none "$@"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
out="$TESSERA_ROOT/perf/results"
mkdir -p "$out"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "compare_pytorch.sh: PyTorch is missing; install it with: apt-get install python3-torch" >&2
  exit 2
fi
# Tessera picks its BLAS threads per rank itself (one each here); PyTorch gets --threads 1, and
# runs under SCHED_BATCH (pytorch_ddp.py --sched, default batch), as Tessera runs its Gloo loop.
# Tessera over MPI (what auto picks on CPUs) and over Gloo, the transport PyTorch uses here.
# (Over MPI alone where this build has no Gloo.)
backends=mpi
[[ "$("$BUILD_DIR/perf/tessera-bench-train" --version)" != *gloo* ]] || backends="mpi gloo"
for backend in $backends; do
  mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" "$BUILD_DIR/perf/tessera-bench-train" --model.layers 8 --model.dim 1024 \
      --train.batch 128 --bench.steps 20 --comm.backend "$backend" --json "$out/ddp_tessera_$backend.json"
done
/usr/bin/python3 "$TESSERA_ROOT/perf/pytorch_ddp.py" --ranks 2 --layers 8 --dim 1024 --batch 128 --steps 20 \
    --json "$out/ddp_pytorch.json"
runs=()
for backend in $backends; do runs+=("$out/ddp_tessera_$backend.json"); done
/usr/bin/python3 - "$out/ddp_pytorch.json" "${runs[@]}" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
runs = [json.load(open(f)) for f in sys.argv[2:]]
for t in runs:
    ratio = t["steps_per_s"] / p["steps_per_s"]
    m = t["median_s"]
    floor = m["gemm_only"] + m["optimizer_only"] + m["all_reduce_only"]
    print(f"Tessera ({t['config']['backend']}) {t['steps_per_s']:.2f} steps/s, PyTorch ({p['backend']}) "
          f"{p['steps_per_s']:.2f} steps/s: Tessera / PyTorch = {ratio:.2f} (goal >= 1.5)")
    print(f"  Tessera step {m['step'] * 1e3:.1f} ms against its floor (GEMMs + optimizer + all-reduces alone) "
          f"{floor * 1e3:.1f} ms: {m['step'] / floor:.3f} x (goal <= 1.15)")
PY
