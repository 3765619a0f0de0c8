#!/usr/bin/env bash
# Quick start, step 2: install what is missing, build everything, run the whole test suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$TESSERA_ROOT/scripts/install-deps.sh"
configure
cmake --build "$BUILD_DIR" -j "$JOBS"
# MPI tests launch up to 4 ranks each: run them one at a time on small machines.
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
