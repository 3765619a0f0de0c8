#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, and run the main job: data-parallel
# training of the default model on the synthetic task, on 2 ranks. Extra arguments go to
# tessera-train (e.g. --train.steps 20).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$TESSERA_ROOT/scripts/install-deps.sh"
configure
cmake --build "$BUILD_DIR" --target tessera-train -j "$JOBS"
mpiexec -n 2 "${MPIEXEC_FLAGS[@]}" "$BUILD_DIR/apps/tessera-train/tessera-train" "$@"
