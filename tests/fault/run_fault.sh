#!/usr/bin/env bash
# run_fault.sh SECONDS FORBIDDEN PATTERN... -- COMMAND...: runs COMMAND (a fault scenario
# under mpiexec) and passes when it ended within SECONDS of its ranks being ready, every
# PATTERN (an extended regular expression) matches a line of its output, and FORBIDDEN (e.g.
# a crash; empty: nothing) matches none. "Ready" is the time rank 0 prints as "ready at N ms
# since the epoch" once its communicators exist (the job's start where it prints none):
# starting a job (the launcher, MPI, a GPU's context) takes longer on some nodes than others.
limit="$1" forbidden="$2"
shift 2
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
shift
start_ms=$(($(date +%s%N) / 1000000))
output=$(timeout -s KILL $((limit * 3 + 30)) "$@" 2>&1)
rc=$?
end_ms=$(($(date +%s%N) / 1000000))
echo "$output"
ready_ms=$(sed -nE 's/^\[rank 0\] ready at ([0-9]+) ms since the epoch$/\1/p' <<<"$output" | head -1)
[ -n "$ready_ms" ] || ready_ms=$start_ms
elapsed_ms=$((end_ms - ready_ms))
echo "run_fault.sh: exit $rc, $((ready_ms - start_ms)) ms to start, then ${elapsed_ms} ms (limit ${limit} s)"
for p in "${patterns[@]}"; do
  if ! grep -qE -- "$p" <<<"$output"; then echo "run_fault.sh: FAILED: the output lacks: $p"; exit 1; fi
done
if [ -n "$forbidden" ] && grep -qE -- "$forbidden" <<<"$output"; then
  echo "run_fault.sh: FAILED: the output has: $forbidden"
  exit 1
fi
if [ "$elapsed_ms" -gt $((limit * 1000)) ]; then echo "run_fault.sh: FAILED: took longer than ${limit} s"; exit 1; fi
echo "run_fault.sh: passed"
