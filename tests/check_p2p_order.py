"""check_p2p_order.py TRACE [EXPECTED_PER_RANK]: the sends and receives a tessera-train
--trace recorded between pipeline stages complete under NCCL's rules, not only MPI's.

MPI matches a receive to a send by tag whatever the order they were posted in. NCCL does
not: it runs all of a communicator's operations one after another, in the order each rank
posted them (whatever the stream), and a send may wait until its receiver's receive runs.
So the replay below lets two ranks' operations complete only when both are the next
operation of their rank, one a send to the other and the other a receive from the first.
If no pair can complete while operations remain, the schedule can hang on NCCL once the
messages outgrow NCCL's buffers; the heads of every rank's queue are printed.

Each transfer is a span of category 'transfer' on the track of its communicator, starting
when it was posted; the world rank is the trace's pid. Only runs whose pipeline group is the
whole job (dp 1, tp 1) are read, where a rank in the group is the world rank."""
import json
import re
import sys
from collections import defaultdict

events = json.load(open(sys.argv[1]))["traceEvents"]
# A track's transfers in flight at once lie on lanes of their own, named "<track> (2)", ...
tracks = {(e["pid"], e["tid"]): re.sub(r" \(\d+\)$", "", e["args"]["name"])
          for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
pattern = re.compile(r"(send|recv) \((\d+) x (\w+), (?:to|from) rank (\d+), tag (\d+)\)")
queues = defaultdict(list)
for e in sorted((e for e in events if e.get("cat") == "transfer"), key=lambda e: e["ts"]):
    assert tracks[(e["pid"], e["tid"])].endswith(".pp"), ("a transfer off the pipeline's communicator", e)
    kind, count, dtype, peer, tag = pattern.fullmatch(e["name"]).groups()
    queues[e["pid"]].append((kind, int(peer), int(count), dtype, int(tag)))
if len(sys.argv) > 2:
    expected = int(sys.argv[2])
    assert all(len(q) == expected for q in queues.values()), {r: len(q) for r, q in queues.items()}
assert queues, "no transfers in the trace"

heads = {r: 0 for r in queues}
done = 0
progress = True
while progress:
    progress = False
    for r, q in queues.items():
        if heads[r] == len(q):
            continue
        kind, peer, count, dtype, tag = q[heads[r]]
        if kind != "send" or heads.get(peer, 0) == len(queues.get(peer, [])):
            continue
        other = queues[peer][heads[peer]]
        if other[0] == "recv" and other[1] == r:
            # MPI would match by tag; NCCL by order alone, so the pair must also agree.
            assert other[2:] == (count, dtype, tag), (f"rank {r}'s send #{heads[r]} {q[heads[r]]} meets rank {peer}'s "
                                                     f"receive #{heads[peer]} {other}: not the same message")
            heads[r] += 1
            heads[peer] += 1
            done += 2
            progress = True
left = {r: q[heads[r]] for r, q in queues.items() if heads[r] < len(q)}
if left:
    sys.exit(f"the pipeline's transfers can hang under NCCL's ordering after {done} of "
             f"{sum(len(q) for q in queues.values())}; each rank's next operation: {left}")
print(f"{done} transfers over {len(queues)} ranks complete in the order posted")
