#!/usr/bin/env bash
# check_perf_scripts.sh ROOT: every perf/*.sh suite script answers --help with its header
# comment and exit 0, and refuses a bad argument with exit 2, in both cases before it runs
# anything (BUILD_DIR points nowhere, and no PATH program is run: a benchmark started would
# fail, or show up in the output).
set -u
root=$1
failed=0
for script in "$root"/perf/*.sh; do
  name=$(basename "$script")
  [ "$name" = script_args.sh ] && continue
  out=$(cd /tmp && BUILD_DIR=/nonexistent PATH=/usr/bin:/bin "$script" --help 2>&1)
  rc=$?
  first=$(sed -n 2p "$script" | sed 's/^# //')
  if [ $rc -ne 0 ] || ! grep -qF -- "$first" <<<"$out" || grep -q "mpiexec\|nonexistent" <<<"$out"; then
    echo "FAILED: $name --help: exit $rc, output:"; echo "$out"; failed=1
  fi
  out=$(cd /tmp && BUILD_DIR=/nonexistent "$script" not-a-number 2>&1)
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$name: " <<<"$out" || ! grep -qF -- "not 'not-a-number'" <<<"$out"; then
    echo "FAILED: $name not-a-number: exit $rc, output:"; echo "$out"; failed=1
  fi
done
[ $failed -eq 0 ] && echo "ok: every perf script's --help and bad argument"
exit $failed
