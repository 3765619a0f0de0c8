#!/usr/bin/env bash
# Configures and builds Tessera for NVIDIA GPUs in build-cuda/: the library, apps, benchmarks
# and tests, every source compiled by nvcc through Kokkos' nvcc_wrapper (with
# TESSERA_WARNINGS_AS_ERRORS=ON in the environment, as in CI, the host compiler's and nvcc's
# own warnings are errors).
#
#   scripts/build-cuda.sh [KOKKOS_ROOT] [CMAKE_OPTION...]
#
# KOKKOS_ROOT is a Kokkos 4 install with its CUDA backend (from Spack:
# `spack install kokkos@4 +cuda +wrapper cuda_arch=90`, the arch of your GPU, then
# `spack location -i kokkos+cuda`); default $Kokkos_ROOT, else ../shared/deps/kokkos-cuda
# beside the checkout. nvcc must be on PATH (nvcc_wrapper calls it); the CUDA toolkit (cuBLAS,
# and NCCL for the nccl backend) is found by CMake (CUDAToolkit_ROOT, NCCL_ROOT). Options after
# it go to CMake, after this script's own, e.g. -DTESSERA_ENABLE_NCCL=OFF where there is no
# NCCL, or -DTESSERA_TEST_GPUS=4 for the GPUs per node the tests may use. The build folder
# is configured again when options are given, when Kokkos_ROOT changes, or when an earlier
# configure failed. Set TESSERA_CUDA_BUILD_DIR for another build folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
kokkos="${Kokkos_ROOT:-$TESSERA_ROOT/../shared/deps/kokkos-cuda}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  kokkos=$1
  shift
fi
if [ ! -x "$kokkos/bin/nvcc_wrapper" ]; then
  echo "build-cuda.sh: '$kokkos' is not a Kokkos install with the CUDA backend (no bin/nvcc_wrapper);" \
       "pass its prefix, e.g. scripts/build-cuda.sh \$(spack location -i kokkos+cuda)" >&2
  exit 2
fi
# Every Kokkos install has nvcc_wrapper; only one built with CUDA says so in its configuration
# (a host-only Kokkos would build a program that keeps everything in host memory).
if ! grep -Eqs '^#define KOKKOS_ENABLE_CUDA([[:space:]]|$)' "$kokkos/include/KokkosCore_config.h"; then
  echo "build-cuda.sh: the Kokkos in '$kokkos' was built without its CUDA backend" \
       "($kokkos/include/KokkosCore_config.h does not define KOKKOS_ENABLE_CUDA); build one with it," \
       "e.g. spack install kokkos@4 +cuda +wrapper cuda_arch=90" >&2
  exit 2
fi
kokkos="$(cd "$kokkos" && pwd)"
build="${TESSERA_CUDA_BUILD_DIR:-$TESSERA_ROOT/build-cuda}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cached_kokkos=$(sed -n 's/^Kokkos_ROOT:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ $# -gt 0 ] || [ "$cached_kokkos" != "$kokkos" ] ||
   { [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; }; then
  cmake -S "$TESSERA_ROOT" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos" \
    -DCMAKE_CXX_COMPILER="$kokkos/bin/nvcc_wrapper" -DTESSERA_ENABLE_NCCL=ON \
    ${CMAKE_OPTIONS[@]+"${CMAKE_OPTIONS[@]}"} "$@"
fi
cmake --build "$build" -j "$JOBS"
