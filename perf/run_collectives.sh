#!/usr/bin/env bash
# The collectives part of the perf suite: the goal check (Tessera >= 0.95 x the raw
# library's busbw at every size >= 64 KiB, MPI and Gloo, 2 ranks) and every op at 2 ranks.
# JSON goes to perf/results/. Run from the repository root after scripts/run.sh or test.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
out="$TESSERA_ROOT/perf/results"
mkdir -p "$out"
bench="$BUILD_DIR/perf/tessera-bench-collectives"
mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" "$bench" -b 64K -e 64M -f 4 -n 200 --rounds 5 \
    --backend all --min-ratio 0.95 --json "$out/collectives_allreduce.json"
mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" "$bench" -b 64K -e 16M -f 16 -n 50 -o all \
    --backend all --json "$out/collectives_all_ops.json"
