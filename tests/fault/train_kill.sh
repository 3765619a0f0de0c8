#!/usr/bin/env bash
# train_kill.sh SIGNAL LIMIT PATTERN LAUNCH... : starts LAUNCH (an mpiexec of a long
# tessera-train run with --save model.h5 --metrics m.jsonl) beside a model.h5 and an
# m.jsonl from an earlier run, sends SIGNAL to one of its ranks once training is under way,
# and passes when the job then ends within LIMIT seconds with a non-zero exit, its output
# matches PATTERN (an extended regular expression, or empty), and both files are exactly as
# they were, with no copy of the metrics left beside them (rank 0 writes it step by step as
# m.jsonl.tmp.PID; the victim is the launcher's last child, not rank 0, and a surviving rank 0
# must remove the copy however the job ends for it: a peer's loss, or the launcher's SIGTERM).
signal="$1" limit="$2" pattern="$3"
shift 3
printf 'a model from an earlier run\n' > model.h5
cp model.h5 before.h5
printf '{"step": 1, "from": "an earlier run"}\n' > m.jsonl
cp m.jsonl before_m.jsonl
rm -f m.jsonl.tmp.*
: > out.txt  # emptied first: an earlier run's would read as this one under way
"$@" > out.txt 2>&1 &
job=$!
for _ in $(seq 1 200); do grep -q "^step" out.txt && break; sleep 0.1; done
# The launcher's children are the ranks: the victim is rank 1 (Open MPI says which in each
# rank's environment), else the last child.
victim=""
for pid in $(pgrep -P "$job"); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$pid; fi
done
[ -n "$victim" ] || victim=$(pgrep -P "$job" | tail -1)
if [ -z "$victim" ]; then echo "train_kill.sh: no rank to signal"; cat out.txt; kill $job; exit 1; fi
start=$(date +%s%N)
kill -s "$signal" "$victim"
wait $job
rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
cat out.txt
echo "train_kill.sh: SIG$signal to pid $victim; the job ended with exit $rc after ${elapsed_ms} ms (limit ${limit} s)"
[ "$rc" -ne 0 ] || { echo "train_kill.sh: FAILED: exit 0"; exit 1; }
[ "$elapsed_ms" -le $((limit * 1000)) ] || { echo "train_kill.sh: FAILED: took longer than ${limit} s"; exit 1; }
[ -z "$pattern" ] || grep -qE -- "$pattern" out.txt || { echo "train_kill.sh: FAILED: the output lacks: $pattern"; exit 1; }
# The launcher may return while it is still taking the signalled rank down (a stopped rank
# ignores SIGTERM until it gets SIGKILL): allow it 5 s.
for i in $(seq 1 50); do kill -0 "$victim" 2>/dev/null || break; sleep 0.1; done
echo "train_kill.sh: pid $victim gone $((i * 100 - 100)) ms after the job ended"
! kill -0 "$victim" 2>/dev/null || { echo "train_kill.sh: FAILED: rank pid $victim outlived the job"; kill -KILL "$victim"; exit 1; }
cmp -s model.h5 before.h5 || { echo "train_kill.sh: FAILED: model.h5 changed"; exit 1; }
cmp -s m.jsonl before_m.jsonl || { echo "train_kill.sh: FAILED: m.jsonl changed"; exit 1; }
if ls m.jsonl.tmp.* >/dev/null 2>&1; then echo "train_kill.sh: FAILED: the copy $(ls m.jsonl.tmp.*) was left behind"; exit 1; fi
echo "train_kill.sh: passed"
