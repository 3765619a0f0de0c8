#!/usr/bin/env bash
# run_fault.sh SECONDS FORBIDDEN PATTERN... -- COMMAND...: runs COMMAND (a fault scenario
# under mpiexec) and passes when it ended within SECONDS, every PATTERN (an extended regular
# expression) matches a line of its output, and FORBIDDEN (e.g. a crash; empty: nothing)
# matches none.
limit="$1" forbidden="$2"
shift 2
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
shift
start=$(date +%s%N)
output=$(timeout -s KILL $((limit * 3)) "$@" 2>&1)
rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$output"
echo "run_fault.sh: exit $rc after ${elapsed_ms} ms (limit ${limit} s)"
for p in "${patterns[@]}"; do
  if ! grep -qE -- "$p" <<<"$output"; then echo "run_fault.sh: FAILED: the output lacks: $p"; exit 1; fi
done
if [ -n "$forbidden" ] && grep -qE -- "$forbidden" <<<"$output"; then
  echo "run_fault.sh: FAILED: the output has: $forbidden"
  exit 1
fi
if [ "$elapsed_ms" -gt $((limit * 1000)) ]; then echo "run_fault.sh: FAILED: took longer than ${limit} s"; exit 1; fi
echo "run_fault.sh: passed"
