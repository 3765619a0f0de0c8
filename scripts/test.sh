#!/usr/bin/env bash
# Quick start, step 2: install what is missing, build everything, run the whole test suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$TESSERA_ROOT/scripts/install-deps.sh"
configure
cmake --build "$BUILD_DIR" -j "$JOBS"
# Side by side, as many as the cores take: each test claims a core per rank it starts (ctest's
# PROCESSORS; tests/CMakeLists.txt), so on 2 cores a 2-rank job runs alone and two fault jobs,
# whose ranks mostly wait, run together. -j 1 after the script runs one at a time.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "$@"
