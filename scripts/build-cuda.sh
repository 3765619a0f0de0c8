#!/usr/bin/env bash
# Configures and builds Tessera for NVIDIA GPUs in build-cuda/: the library, apps, benchmarks
# and tests, every source compiled by nvcc through Kokkos' nvcc_wrapper (with
# TESSERA_WARNINGS_AS_ERRORS=ON in the environment, as in CI, the host compiler's and nvcc's
# own warnings are errors).
#
#   scripts/build-cuda.sh [KOKKOS_ROOT]
#
# KOKKOS_ROOT is a Kokkos install with its CUDA backend (from Spack:
# `spack install kokkos+cuda+wrapper cuda_arch=90` then `spack location -i kokkos`); default
# $Kokkos_ROOT, else ../shared/deps/kokkos-cuda beside the checkout. The CUDA toolkit
# (nvcc, cuBLAS, and NCCL for the nccl backend) is found by CMake (CUDAToolkit_ROOT,
# NCCL_ROOT). Set TESSERA_CUDA_BUILD_DIR for another build folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
kokkos="${1:-${Kokkos_ROOT:-$TESSERA_ROOT/../shared/deps/kokkos-cuda}}"
if [ ! -x "$kokkos/bin/nvcc_wrapper" ]; then
  echo "build-cuda.sh: '$kokkos' is not a Kokkos install with the CUDA backend (no bin/nvcc_wrapper);" \
       "pass its prefix, e.g. scripts/build-cuda.sh \$(spack location -i kokkos)" >&2
  exit 2
fi
kokkos="$(cd "$kokkos" && pwd)"
build="${TESSERA_CUDA_BUILD_DIR:-$TESSERA_ROOT/build-cuda}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$TESSERA_ROOT" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos" \
    -DCMAKE_CXX_COMPILER="$kokkos/bin/nvcc_wrapper" -DTESSERA_ENABLE_NCCL=ON \
    ${CMAKE_OPTIONS[@]+"${CMAKE_OPTIONS[@]}"}
fi
cmake --build "$build" -j "$JOBS"
