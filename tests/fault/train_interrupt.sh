#!/usr/bin/env bash
# train_interrupt.sh SIGNAL PATTERN LAUNCH... : starts LAUNCH (a long tessera-train run with
# --metrics m.jsonl --save model.h5, under mpiexec or alone) beside an m.jsonl and a model.h5
# from an earlier run, sends SIGNAL to LAUNCH itself once training is under way (as Ctrl-C,
# scancel or a job's time limit do), and passes when the job then ends within 10 s with a
# non-zero exit, its output matches PATTERN (an extended regular expression), the copy of
# m.jsonl the run was writing is gone, and m.jsonl and model.h5 are exactly as they were.
signal="$1" pattern="$2"
shift 2
rm -f ./*.tmp.*
: > out.txt  # emptied first: an earlier run's would read as this one under way
printf 'metrics from an earlier run\n' > m.jsonl
printf 'a model from an earlier run\n' > model.h5
cp m.jsonl m.before && cp model.h5 model.before
"$@" > out.txt 2>&1 &
job=$!
for _ in $(seq 1 200); do grep -q "^step" out.txt && break; sleep 0.1; done
fail() { cat out.txt; echo "train_interrupt.sh: FAILED: $*"; kill -KILL $job 2>/dev/null; exit 1; }
ls m.jsonl.tmp.* >/dev/null 2>&1 || fail "the run is not writing a copy of m.jsonl (nothing to clean up)"
start=$(date +%s%N)
kill -s "$signal" $job
wait $job
rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
cat out.txt
echo "train_interrupt.sh: SIG$signal to pid $job; the job ended with exit $rc after ${elapsed_ms} ms"
[ "$rc" -ne 0 ] || fail "exit 0"
[ "$elapsed_ms" -le 10000 ] || fail "took longer than 10 s"
grep -qE -- "$pattern" out.txt || fail "the output lacks: $pattern"
[ -z "$(ls ./*.tmp.* 2>/dev/null)" ] || fail "left behind: $(ls ./*.tmp.*)"
cmp -s m.jsonl m.before || fail "m.jsonl changed"
cmp -s model.h5 model.before || fail "model.h5 changed"
echo "train_interrupt.sh: passed"
