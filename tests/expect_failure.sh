#!/usr/bin/env bash
# expect_failure.sh [--status N] [--forbid REGEX] PATTERN COMMAND...: passes when COMMAND
# exits non-zero (with --status, exactly N: 2 for a usage error, 1 for any other), its output
# (stdout + stderr) contains PATTERN (a fixed string), and, with --forbid, no line of it
# matches REGEX (an extended regular expression).
forbid=""
status=""
while true; do
  case "$1" in
    --forbid) forbid="$2" ;;
    --status) status="$2" ;;
    *) break ;;
  esac
  shift 2
done
pattern="$1"
shift
# After a rank exits non-zero, Open MPI's mpiexec takes the job down with signals 1 s apart
# (odls_base_sigkill_timeout), even when every rank has already ended: 1 to 2 s of each test
# here. An app's output is out by then: ranks that fail alike print, then meet at the Session's
# last fence before any exits, and a rank that aborts the job prints first. A launcher that is
# not Open MPI ignores this.
export OMPI_MCA_odls_base_sigkill_timeout="${OMPI_MCA_odls_base_sigkill_timeout:-0}"
output=$("$@" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then
  echo "expected a non-zero exit, got 0. Output:"
  echo "$output"
  exit 1
fi
if [ -n "$status" ] && [ "$rc" -ne "$status" ]; then
  echo "expected exit $status, got $rc. Output:"
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
