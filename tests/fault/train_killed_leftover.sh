#!/usr/bin/env bash
# train_killed_leftover.sh TRAIN: a lone tessera-train writing --metrics m.jsonl beside an
# m.jsonl from an earlier run is killed with SIGKILL, which no handler sees: its copy
# m.jsonl.tmp.PID stays, and m.jsonl is as it was. The next run with --metrics m.jsonl then
# names that copy in a note (and not a file that only looks like one, m.jsonl.tmp.x1), leaves
# it where it is, finishes, and replaces m.jsonl.
train="$1"
rm -f ./*.tmp.* out.txt out2.txt
printf 'metrics from an earlier run\n' > m.jsonl
cp m.jsonl m.before
fail() { cat out.txt out2.txt 2>/dev/null; echo "train_killed_leftover.sh: FAILED: $*"; kill -KILL $job 2>/dev/null; exit 1; }
"$train" --model.layers 2 --model.dim 64 --train.steps 100000000 --progress lines --metrics m.jsonl > out.txt 2>&1 &
job=$!
for _ in $(seq 1 200); do grep -q "^step" out.txt && break; sleep 0.1; done
copy=m.jsonl.tmp.$job
[ -f "$copy" ] || fail "the run (pid $job) is not writing $copy"
kill -KILL $job
wait $job
[ -f "$copy" ] || fail "$copy is gone after SIGKILL (nothing left to note)"
cmp -s m.jsonl m.before || fail "m.jsonl changed"
printf 'not a copy\n' > m.jsonl.tmp.x1
"$train" --model.layers 2 --model.dim 64 --train.steps 3 --progress none --metrics m.jsonl > out2.txt 2>&1 ||
  fail "the second run failed"
cat out2.txt
grep -qF "tessera-train: note: --metrics 'm.jsonl': '$copy' is an unfinished copy left behind by a run that was killed" out2.txt ||
  fail "no note names $copy"
grep -qF "m.jsonl.tmp.x1" out2.txt && fail "the note names m.jsonl.tmp.x1, which no run wrote"
[ -f "$copy" ] && [ -f m.jsonl.tmp.x1 ] || fail "a copy was removed"
[ "$(wc -l < m.jsonl)" -eq 3 ] || fail "m.jsonl does not hold the second run's 3 steps"
echo "train_killed_leftover.sh: passed"
