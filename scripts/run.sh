#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, and run the main job
# (the collectives demo on 4 ranks).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$TESSERA_ROOT/scripts/install-deps.sh"
configure
cmake --build "$BUILD_DIR" --target tessera-collectives -j "$JOBS"
mpiexec -n 4 "${MPIEXEC_FLAGS[@]}" "$BUILD_DIR/apps/tessera-collectives/tessera-collectives" "$@"
