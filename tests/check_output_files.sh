#!/usr/bin/env bash
# check_output_files.sh LAUNCHER TRAIN BENCH_TRAIN BENCH_COLLECTIVES: the files the apps write
# (--metrics, --trace, --save, --json), as docs/reliability.md promises them: a run that fails
# leaves a file the user had as it was; a symbolic link is written through and stays a link;
# a device or FIFO, two outputs on one file, or an output on a file the run reads are refused
# before any work. LAUNCHER is the mpiexec command with its flags, up to the rank count.
# Works in ./outputs, which it empties first.
set -u
launcher=($1)
train=$2
bench_train=$3
bench_collectives=$4
small=(--model.layers 2 --model.dim 16 --train.batch 16 --train.steps 3 --quiet)
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
# expect RC PATTERN COMMAND...: COMMAND exits with RC (0 or "nonzero") and prints PATTERN.
expect() {
  local want=$1 pattern=$2
  shift 2
  out=$("$@" 2>&1)
  local rc=$?
  if { [ "$want" = 0 ] && [ $rc -ne 0 ]; } || { [ "$want" != 0 ] && [ $rc -eq 0 ]; }; then
    fail "exit $rc (expected $want): $*"
    echo "$out"
  elif [ -n "$pattern" ] && ! grep -qF -- "$pattern" <<<"$out"; then
    fail "output lacks '$pattern': $*"
    echo "$out"
  fi
}
np2=("${launcher[@]}" 2)
# A run refused before any work, on every rank alike: Open MPI's mpiexec need not wait its
# odls_base_sigkill_timeout (1 s) after the ranks exit non-zero (expect_failure.sh). The runs
# here that fail while writing keep that wait, the time a rank has to clean up if the launcher
# takes it down first.
refused2=(env OMPI_MCA_odls_base_sigkill_timeout=0 "${np2[@]}")
rm -rf outputs && mkdir outputs && cd outputs || exit 1

echo "== a failed run leaves an existing --metrics file as it was; a finished one replaces it"
printf 'from an earlier run\n' > metrics.jsonl
expect nonzero "fewer than one batch (--train.batch 16); lower --train.batch or raise --data.samples" "${np2[@]}" "$train" "${small[@]}" --data.samples 8 --metrics metrics.jsonl
grep -qx 'from an earlier run' metrics.jsonl || fail "a run that failed while setting up changed metrics.jsonl"
expect nonzero "--metrics 'metrics.jsonl' was left as it was" "${np2[@]}" "$train" --model.layers 2 --model.dim 64 \
  --optim.name sgd --optim.lr 1000 --train.steps 30 --quiet --metrics metrics.jsonl
grep -qx 'from an earlier run' metrics.jsonl || fail "a run that diverged changed metrics.jsonl"
[ -z "$(ls metrics.jsonl.tmp.* 2>/dev/null)" ] || fail "a diverged run left its temporary metrics file behind"
printf 'an earlier trace\n' > trace.json
expect nonzero "--trace 'trace.json' was left as it was" "${np2[@]}" "$train" --model.layers 2 --model.dim 64 \
  --optim.name sgd --optim.lr 1000 --train.steps 30 --quiet --trace trace.json
grep -qx 'an earlier trace' trace.json || fail "a run that diverged changed trace.json"
[ -z "$(ls trace.json.tmp.* 2>/dev/null)" ] || fail "a diverged run left its temporary trace file behind"
expect 0 "" "${np2[@]}" "$train" "${small[@]}" --metrics metrics.jsonl
[ "$(grep -c '"step"' metrics.jsonl)" -eq 3 ] || fail "a finished run did not replace metrics.jsonl with its 3 steps"

echo "== a diverged run keeps the metrics and trace it wrote where there was no file"
expect nonzero "--metrics 'new.jsonl' holds the steps before the failure" "${np2[@]}" "$train" --model.layers 2 \
  --model.dim 64 --optim.name sgd --optim.lr 1000 --train.steps 30 --quiet --metrics new.jsonl --trace new.json
[ "$(grep -c '"step"' new.jsonl)" -ge 1 ] || fail "new.jsonl holds no step of the diverged run"
grep -q traceEvents new.json || fail "new.json holds no trace of the diverged run"

echo "== --save through a symbolic link writes the file it leads to, and the link stays"
mkdir -p real && printf 'old\n' > real/model.h5 && ln -sf real/model.h5 link.h5
expect 0 "" "${np2[@]}" "$train" "${small[@]}" --save link.h5
[ -L link.h5 ] || fail "link.h5 is no longer a symbolic link"
[ "$(head -c 3 real/model.h5)" = old ] && fail "real/model.h5 was not written through the link"
head -c 8 real/model.h5 | grep -q HDF || fail "real/model.h5 is not an HDF5 file"

echo "== a FIFO (or device) is refused, and stays"
mkfifo pipe.h5
expect nonzero "--save 'pipe.h5': is not a regular file" "${refused2[@]}" "$train" "${small[@]}" --save pipe.h5
expect nonzero "--metrics 'pipe.h5': is not a regular file" "${refused2[@]}" "$train" "${small[@]}" --metrics pipe.h5
[ -p pipe.h5 ] || fail "pipe.h5 is no longer a FIFO"

echo "== two outputs on one file, or an output on an input, are refused before any work"
printf '[model]\nlayers = 2\ndim = 16\n[train]\nbatch = 16\nsteps = 2\n' > run.toml
cp run.toml run.toml.orig
expect nonzero "--metrics 'run.toml' is the --config file this run reads" "${refused2[@]}" "$train" --config run.toml --metrics run.toml
expect nonzero "--trace './run.toml' is the --config file this run reads" "${refused2[@]}" "$train" --config run.toml --trace ./run.toml
cmp -s run.toml run.toml.orig || fail "run.toml was changed"
expect nonzero "--metrics 'same.out' is also the --save file" "${refused2[@]}" "$train" "${small[@]}" --metrics same.out --save "$PWD/same.out"
[ -e same.out ] && fail "same.out was written by a run that was refused"
echo '{}' > linked.jsonl && ln -f linked.jsonl linked.trace.json
expect nonzero "--metrics 'linked.jsonl' is also the --trace file" "${refused2[@]}" "$train" "${small[@]}" --metrics linked.jsonl --trace linked.trace.json
[ "$(stat -c %h linked.jsonl)" = 2 ] || fail "the hard links were parted by a run that was refused"
expect nonzero "--json 'run.toml' is the --config file this run reads" "${refused2[@]}" "$bench_train" --config run.toml --json run.toml
cmp -s run.toml run.toml.orig || fail "run.toml was changed by the benchmark"

echo "== --config names a directory"
mkdir -p adir
expect nonzero "config file 'adir' is a directory" "${refused2[@]}" "$train" --config adir

echo "== the benchmarks check --json before any work, and take tessera-train's config files"
expect nonzero "--json 'nodir/b.json': the directory 'nodir' does not exist" "${refused2[@]}" "$bench_train" --model.layers 2 --model.dim 16 --train.batch 16 --json nodir/b.json
grep -q "per rank" <<<"$out" && fail "tessera-bench-train ran before refusing --json"
expect nonzero "--json 'adir': is a directory" "${refused2[@]}" "$bench_collectives" -b 1K -e 1K -n 2 -w 1 --json adir
grep -q "all_reduce" <<<"$out" && fail "tessera-bench-collectives ran before refusing --json"
expect 0 "results written to b.json" "${np2[@]}" "$bench_train" --config run.toml --bench.steps 3 --bench.warmup 1 --json b.json
grep -qF "note: --train.steps is tessera-train's; the benchmark runs --bench.warmup + --bench.steps steps" <<<"$out" ||
  fail "tessera-bench-train did not say that it ignores the config file's train.steps"
python3 -c "import json; json.load(open('b.json'))" || fail "b.json is not JSON"

echo "== --kokkos-help prints Kokkos' help once and runs nothing"
expect 0 "" "${np2[@]}" "$train" --kokkos-help
[ "$(grep -c -- '--kokkos-' <<<"$out")" -ge 1 ] || fail "--kokkos-help printed no Kokkos flag"
help_copies=$(grep -c -- '--kokkos-help' <<<"$out")
[ "$help_copies" -eq 1 ] || fail "--kokkos-help printed Kokkos' help $help_copies times on 2 ranks"
grep -q 'done:\|tessera-train: 2 ranks' <<<"$out" && fail "--kokkos-help went on to train"

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "every output-file check passed"
