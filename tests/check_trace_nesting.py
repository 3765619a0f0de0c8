"""check_trace_nesting.py TRACE: on every thread (track) of a Chrome trace written by
tessera-train, the complete ("X") spans nest: each one either starts after the spans before it
end or lies inside the one still open. Perfetto drops spans that overlap partly, so sends and
receives in flight at once must nest or sit on tracks of their own. Every thread has a name."""
import json
import sys
from collections import defaultdict

events = json.load(open(sys.argv[1]))["traceEvents"]
named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
spans = defaultdict(list)
for e in events:
    if e["ph"] == "X":
        spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
if not spans:
    sys.exit("the trace has no spans: nothing was recorded, so there is nothing to check")
eps = 1e-6
problems = []
for key, xs in spans.items():
    if key not in named:
        problems.append(f"pid {key[0]} tid {key[1]} has spans but no thread_name")
    xs.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    open_spans = []
    for start, end, name in xs:
        while open_spans and open_spans[-1][1] <= start + eps:
            open_spans.pop()
        if open_spans and end > open_spans[-1][1] + eps:
            problems.append(f"pid {key[0]} tid {key[1]}: '{name}' [{start}, {end}] overlaps '{open_spans[-1][2]}' "
                            f"[{open_spans[-1][0]}, {open_spans[-1][1]}] partly")
        open_spans.append((start, end, name))
if problems:
    print("\n".join(problems[:10]))
    sys.exit(f"{len(problems)} spans overlap partly or sit on unnamed threads")
print(f"ok: {sum(len(x) for x in spans.values())} spans on {len(spans)} tracks, all nested")
