#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Tessera needs that this machine lacks.
# Idempotent; prints nothing when everything is already installed.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libtrilinos-kokkos-dev                     # Kokkos (3.4, Serial backend)
  libopenblas-dev                            # BLAS for GEMM on the host
  libopenmpi-dev openmpi-bin                 # MPI
  libhdf5-openmpi-dev hdf5-tools             # parallel HDF5
  libgloo-dev                                # Gloo
  libcli11-dev nlohmann-json3-dev            # command lines, JSON
  libspdlog-dev libfmt-dev                   # logging
  libgtest-dev libbenchmark-dev              # tests, benchmarks
  python3-h5py python3-sklearn               # the dataset example and its test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
