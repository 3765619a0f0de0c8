#!/usr/bin/env bash
# expect_failure.sh [--forbid REGEX] PATTERN COMMAND...: passes when COMMAND exits non-zero,
# its output (stdout + stderr) contains PATTERN (a fixed string), and, with --forbid, no line
# of it matches REGEX (an extended regular expression).
forbid=""
if [ "$1" = "--forbid" ]; then
  forbid="$2"
  shift 2
fi
pattern="$1"
shift
output=$("$@" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then
  echo "expected a non-zero exit, got 0. Output:"
  echo "$output"
  exit 1
fi
if ! grep -qF -- "$pattern" <<<"$output"; then
  echo "exit $rc, but the output lacks: $pattern"
  echo "$output"
  exit 1
fi
if [ -n "$forbid" ] && grep -qE -- "$forbid" <<<"$output"; then
  echo "exit $rc, but the output has: $forbid"
  echo "$output"
  exit 1
fi
echo "exit $rc with: $(grep -F -- "$pattern" <<<"$output" | head -1)"
