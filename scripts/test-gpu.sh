#!/usr/bin/env bash
# Runs a CUDA build's test suite and apps on a machine with an NVIDIA GPU:
#
#   scripts/test-gpu.sh [BUILD_DIR] [ctest arguments...]     (BUILD_DIR default: build-cuda)
#   scripts/test-gpu.sh --bin DIR --tests LIST [run_test_list.py arguments...]
#
# The second form is for a node that has only the build's executables (in DIR) and this
# checkout, not the build tree: LIST is written where the build is, with
# `scripts/run_test_list.py --export LIST build-cuda`, and scripts/run_test_list.py runs it.
#
# 1. the whole test suite: every test on the GPU, the collective tests with host and
#    device buffers on MPI, Gloo and NCCL (NCCL on one rank per GPU; configure with
#    -DTESSERA_TEST_GPUS=N to run it on N ranks);
# 2. the apps: tessera-train on one GPU (auto picks NCCL) and on 2 ranks sharing the first
#    visible one (auto picks MPI, which stages device buffers through host memory unless it
#    is a CUDA-aware Open MPI), tessera-collectives on NCCL and on MPI;
# 3. where PyTorch is importable, perf/compare_pytorch_gpu.py: first its own checks with this
#    build's benchmark (tests/check_compare_pytorch_gpu.py: a GPU build's epilogues ran, each
#    switch is obeyed; the suite holds it only where the configuring Python had PyTorch), then
#    Tessera beside PyTorch eager on the same model (JSON in perf/results/).
# Prints a summary and exits non-zero when anything failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: scripts/test-gpu.sh [BUILD_DIR] [ctest arguments...]
       scripts/test-gpu.sh --bin DIR --tests LIST [run_test_list.py arguments...]"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
  exit 0
fi
bin="" tests=""
while [ $# -gt 0 ] && { [ "$1" = --bin ] || [ "$1" = --tests ]; }; do
  [ $# -ge 2 ] || { echo "test-gpu.sh: $1 needs a value"$'\n'"$usage" >&2; exit 2; }
  if [ "$1" = --bin ]; then bin=$2; else tests=$2; fi
  shift 2
done
if [ -n "$bin$tests" ]; then
  [ -n "$bin" ] && [ -n "$tests" ] || { echo "test-gpu.sh: --bin and --tests go together"$'\n'"$usage" >&2; exit 2; }
  given=$bin
  bin="$(cd "$bin" 2>/dev/null && pwd)" || { echo "test-gpu.sh: no folder '$given' (--bin)" >&2; exit 2; }
  [ -f "$tests" ] || { echo "test-gpu.sh: no test list '$tests' (--tests); write it where the build is:" \
    "scripts/run_test_list.py --export $tests build-cuda" >&2; exit 2; }
  train="$bin/tessera-train" demo="$bin/tessera-collectives" bench="$bin/tessera-bench-train"
else
  build="${1:-$root/build-cuda}"
  [ $# -gt 0 ] && shift
  given=$build
  build="$(cd "$build" 2>/dev/null && pwd)" || { echo "test-gpu.sh: no build directory '$given'"$'\n'"$usage" >&2; exit 2; }
  train="$build/apps/tessera-train/tessera-train" demo="$build/apps/tessera-collectives/tessera-collectives"
  bench="$build/perf/tessera-bench-train"
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test-gpu.sh: no NVIDIA GPU is visible here (nvidia-smi -L failed); run it on a GPU node" >&2
  exit 2
fi
nvidia-smi -L
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# A node without zlib (a bare GPU machine running the kit of ../shared/gpu) makes PMIx print
# an 11-line notice at every launch; it is the launcher's, not Tessera's output, and tests
# that check a run prints one line only would count it.
export PMIX_MCA_pcompress_base_silence_warning=${PMIX_MCA_pcompress_base_silence_warning:-1}
mpirun=(mpiexec)
mpiexec --version 2>/dev/null | grep -q "Open MPI" && mpirun+=(--oversubscribe --bind-to none)
out="$root/perf/results"
mkdir -p "$out"
failed=()
step() {  # step NAME COMMAND...: runs it, records a failure
  local name=$1; shift
  echo; echo "=== $name: $*"
  if "$@"; then echo "=== $name: ok"; else echo "=== $name: FAILED"; failed+=("$name"); fi
}

py=$(command -v python3)
if [ -n "$bin" ]; then
  step "test suite" "$py" "$root/scripts/run_test_list.py" "$tests" --bin "$bin" "$@"
else
  step "test suite" ctest --test-dir "$build" --output-on-failure "$@"
fi

step "tessera-train, 1 GPU" sh -c "'$train' --train.steps 100 --metrics '$out/gpu_train_1.jsonl' &&
  '$py' '$root/tests/check_train_metrics.py' '$out/gpu_train_1.jsonl' 100 10"
# Both ranks are shown the same GPU (the first visible one), on a node with several GPUs too.
one_gpu=${CUDA_VISIBLE_DEVICES:-0}
one_gpu=${one_gpu%%,*}
step "tessera-train, 2 ranks on one GPU" sh -c "CUDA_VISIBLE_DEVICES=$one_gpu ${mpirun[*]} -n 2 '$train' --train.steps 30 --metrics '$out/gpu_train_2.jsonl' &&
  '$py' '$root/tests/check_train_metrics.py' '$out/gpu_train_2.jsonl' 30 2"
step "tessera-collectives, nccl" "$demo" --backend nccl
step "tessera-collectives, 2 ranks mpi" "${mpirun[@]}" -n 2 "$demo" --backend mpi

if "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step "compare_pytorch_gpu.py's checks" "$py" "$root/tests/check_compare_pytorch_gpu.py" \
    "$root/perf/compare_pytorch_gpu.py" "$bench"
  step "Tessera beside PyTorch" "$py" "$root/perf/compare_pytorch_gpu.py" --bench "$bench" \
    --json "$out/gpu_vs_pytorch.json"
else
  echo; echo "=== PyTorch with CUDA is not importable here: perf/compare_pytorch_gpu.py skipped"
fi

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "test-gpu.sh: everything passed"
else
  printf 'test-gpu.sh: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
