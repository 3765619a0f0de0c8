#!/usr/bin/env bash
# expect_output.sh PATTERN... -- COMMAND...: passes when COMMAND exits 0 and every PATTERN (an
# extended regular expression) matches a line of its output (stdout + stderr). ctest's
# PASS_REGULAR_EXPRESSION would ignore the exit status, so a run that printed the expected
# line and then failed (another rank's wrong result, a crash) would pass.
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
if [ $# -eq 0 ] || [ ${#patterns[@]} -eq 0 ]; then
  echo "usage: expect_output.sh PATTERN... -- COMMAND..." >&2
  exit 2
fi
shift
output=$("$@" 2>&1)
rc=$?
echo "$output"
if [ "$rc" -ne 0 ]; then echo "expect_output.sh: FAILED: exit $rc, expected 0"; exit 1; fi
for p in "${patterns[@]}"; do
  if ! grep -qE -- "$p" <<<"$output"; then echo "expect_output.sh: FAILED: the output lacks: $p"; exit 1; fi
done
