#!/usr/bin/env bash
# check_progress_auto.sh TRAIN LAUNCHER...: `--progress auto` on a terminal (a pseudo-terminal
# from script(1)) draws the bar, redrawn in place, when tessera-train runs alone, and prints a
# line per step under an MPI launcher (docs/training.md). An MPI_Init without a launcher sets
# some of the launcher's variables itself (Open MPI's PMIX_RANK), which once made a lone run
# look launched.
set -u
train=$1
shift
flags="--model.layers 2 --model.dim 16 --train.batch 16 --train.steps 3"
alone=$(script -qec "$train $flags" /dev/null) || { echo "$alone"; echo "FAILED: the lone run failed"; exit 1; }
launched=$(script -qec "$* 1 $train $flags" /dev/null) || { echo "$launched"; echo "FAILED: the launched run failed"; exit 1; }
printf 'alone:\n%s\nlaunched:\n%s\n' "$alone" "$launched" | tr '\r' '|'
# The bar: steps 1 and 2 on one line, the second drawn after a carriage return.
if ! grep 'step 2/3' <<<"$alone" | grep -q 'step 1/3'; then
  echo "FAILED: alone on a terminal, --progress auto did not draw the bar"
  exit 1
fi
# Lines: each step its own.
if grep 'step 2/3' <<<"$launched" | grep -q 'step 1/3'; then
  echo "FAILED: under a launcher, --progress auto drew the bar instead of a line per step"
  exit 1
fi
grep -q 'step 3/3' <<<"$launched" || { echo "FAILED: no step lines under the launcher"; exit 1; }
# On a terminal 40 columns wide, the bar stays on one row: each redraw is cut to 39 characters
# (a longer one wraps, and the next is drawn a row lower), padded over the one before.
narrow=$(script -qec "stty cols 40; $train $flags" /dev/null) || { echo "$narrow"; echo "FAILED: the narrow run failed"; exit 1; }
widest=$(grep 'step 1/3' <<<"$narrow" | tr '\r' '\n' | grep 'step' | awk '{ print length($0) }' | sort -n | tail -1)
printf 'narrow:\n%s\n' "$narrow" | tr '\r' '|'
[ -n "$widest" ] && [ "$widest" -le 39 ] || { echo "FAILED: on 40 columns the bar drew $widest characters"; exit 1; }
echo "ok: the bar alone (within 39 columns on a terminal of 40), lines under the launcher"
