#!/usr/bin/env bash
# The collectives part of the perf suite, 2 ranks, JSON in perf/results/:
#  1. the goal check: Tessera's all_reduce >= 0.95 x the raw library's busbw at every size
#     >= 64 KiB, for MPI and for Gloo (exits non-zero when a row misses it);
#  2. the noise floor: the raw call timed against itself, which shows how finely this
#     machine resolves the ratio at each size;
#  3. every collective at 2 ranks.
# Run from the repository root after scripts/test.sh (scripts/run.sh builds only tessera-train).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/script_args.sh"
script_args none "$@"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
out="$TESSERA_ROOT/perf/results"
mkdir -p "$out"
bench() { mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" "$BUILD_DIR/perf/tessera-bench-collectives" "$@"; }
status=0
# Small sizes need many iterations to average out the scheduler; large ones do not.
bench -b 64K -e 1M -f 4 -n 200 --rounds 5 --backend all --min-ratio 0.95 --json "$out/allreduce_small.json" || status=1
bench -b 4M -e 64M -f 4 -n 20 --rounds 3 --backend all --min-ratio 0.95 --json "$out/allreduce_large.json" || status=1
bench -b 64K -e 1M -f 4 -n 200 --rounds 5 --backend all --noise-floor --json "$out/allreduce_noise_floor.json" || status=1
bench -b 64K -e 16M -f 16 -n 20 --coll all --backend all --json "$out/all_ops.json" || status=1
exit $status
