#!/usr/bin/env bash
# check_perf_scripts.sh ROOT: every perf/*.sh suite script answers --help with its header
# comment and exit 0, and refuses a bad argument with exit 2, in both cases before it runs
# anything. The scripts run from a copy of perf/ and scripts/env.sh in a scratch folder, with
# mpiexec and python3 replaced by stubs that say so: a script that went on would show it, and
# write nothing into ROOT.
set -u
root=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/perf" "$scratch/scripts" "$scratch/bin"
cp "$root"/perf/*.sh "$scratch/perf/"
cp "$root/scripts/env.sh" "$scratch/scripts/"
for program in mpiexec python3; do
  printf '#!/bin/sh\necho "STUB %s RAN: the script went on"\nexit 1\n' "$program" > "$scratch/bin/$program"
  chmod +x "$scratch/bin/$program"
done
export PATH="$scratch/bin:$PATH" TESSERA_BUILD_DIR="$scratch/no-build"
failed=0
for script in "$scratch"/perf/*.sh; do
  name=$(basename "$script")
  [ "$name" = script_args.sh ] && continue
  first=$(sed -n 2p "$script" | sed 's/^# //')
  out=$("$script" --help 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -qF -- "$first" <<<"$out" || grep -q "STUB" <<<"$out"; then
    echo "FAILED: $name --help: exit $rc, output:"; echo "$out"; failed=1
  fi
  out=$("$script" not-a-number 2>&1)
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$name: " <<<"$out" || ! grep -qF -- "not 'not-a-number'" <<<"$out" ||
    grep -q "STUB" <<<"$out"; then
    echo "FAILED: $name not-a-number: exit $rc, output:"; echo "$out"; failed=1
  fi
done
[ -e "$scratch/no-build" ] && { echo "FAILED: a script created the build folder"; failed=1; }
[ $failed -eq 0 ] && echo "ok: every perf script's --help and bad argument, before running anything"
exit $failed
