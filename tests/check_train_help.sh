#!/usr/bin/env bash
# check_train_help.sh TRAIN: tessera-train --help as docs/training.md describes it, read in an
# 80-column terminal: one usage line, first; no Kokkos help; every option with a placeholder
# (not CLI11's type names), its range and default in words; options under their section's
# heading; no line wider than the terminal. --kokkos-help still prints Kokkos' own help.
set -u
train=$1
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
has() {  # has EXTENDED_REGEX WHAT: some line of the help matches
  grep -qE -- "$1" <<<"$out" || fail "no line matches '$1' ($2)"
}

out=$(COLUMNS=80 "$train" --help) || fail "--help exited $?"
echo "$out"
head -1 <<<"$out" | grep -q '^Usage: mpiexec -n N tessera-train' || fail "the first line is not the usage line"
[ "$(grep -c 'Usage:' <<<"$out")" -eq 1 ] || fail "'Usage:' is printed more than once"
! grep -qE 'kokkos-[a-z-]+=[A-Z]+ +:' <<<"$out" || fail "Kokkos' help is mixed in"
has "^Kokkos' own flags go to Kokkos, with their value after '=':$" "Kokkos' flags named"
has '^--kokkos-(num-)?threads=N, --kokkos-device-id=N, ...; --kokkos-help lists them.$' "Kokkos' flags named"
has '^  --model.layers LAYERS +number of Linear layers \(default: 8\)$' "placeholder and default"
for choices in 'parallel.schedule \{1f1b,gpipe\}' 'optim.name \{adamw,sgd\}' 'comm.backend \{auto,mpi,gloo,nccl\}' \
  'comm.grad_dtype \{fp32,bf16\}' 'comm.overlap_backward \{auto,true,false\}'; do
  has "^  --$choices( |$)" "choices as the placeholder"
done
has '^  --save FILE  ' "FILE placeholder"
tr -s '\n ' '  ' <<<"$out" | grep -q -- '(0 to 3; default: 0)' || fail "--parallel.zero's range in words"
! grep -qE 'INT|TEXT|BOOLEAN|1073741824|QUIET' <<<"$out" || fail "CLI11's type names or a flag's placeholder"
widest=$(awk '{ if (length > m) m = length } END { print m }' <<<"$out")
[ "$widest" -le 80 ] || fail "a line of $widest characters in 80 columns"
# The narrowest terminal the help follows, footer too (its Kokkos line kept 72 columns).
widest=$(COLUMNS=60 "$train" --help | awk '{ if (length > m) m = length } END { print m }')
[ "$widest" -le 60 ] || fail "a line of $widest characters in 60 columns"

# Each option under its section's heading: the nearest heading above the option's line.
for pair in model.layers:Model train.steps:Training optim.lr:Optimizer data.source:Data \
  parallel.zero:Parallelism zero.prefetch:ZeRO comm.backend:Communication save:Output quiet:Output config:Options; do
  option=${pair%%:*} heading=${pair##*:}
  under=$(awk -v opt="--$option" '/^[A-Za-z].*:$/ { h = substr($0, 1, length - 1) }
    $1 == opt { print h; exit }' <<<"$out")
  [ "$under" = "$heading" ] || fail "--$option is under '$under', not '$heading'"
done
for heading in Options Training Model Optimizer Data Parallelism ZeRO Communication Output; do
  [ "$(grep -c "^$heading:\$" <<<"$out")" -eq 1 ] || fail "heading '$heading:' is not there once"
done

"$train" --kokkos-help --model.layers 1 --model.dim 8 --train.steps 1 --quiet | grep -q -- --kokkos- ||
  fail "--kokkos-help does not print Kokkos' help"
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
