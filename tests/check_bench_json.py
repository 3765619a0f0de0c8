"""Checks a tessera-bench-collectives JSON file: the documented schema, the expected
collectives present, no wrong elements, busbw = algbw * the nccl-tests factor for the rank
count (undefined, null, on one rank), redop "none" where nothing is reduced, and
Tessera / raw = raw time / Tessera time, and each time combines the ranks' own times as its
"average" (nccl-tests' -a) says."""
import json
import math
import sys

# check_bench_json.py FILE RANKS [ops=a,b] [redop=NAME] [root=R] [dtype=NAME] [sizes=B1,B2,...]
#                     [settings.KEY=VALUE]
path, ranks = sys.argv[1], int(sys.argv[2])
want = dict(arg.split("=", 1) for arg in sys.argv[3:])
expected_ops = set(want.pop("ops").split(",")) if "ops" in want else None
expected_sizes = [int(b) for b in want.pop("sizes").split(",")] if "sizes" in want else None
data = json.load(open(path))
for key in [k for k in want if k.startswith("settings.")]:
    got = data["settings"][key.split(".", 1)[1]]
    assert str(got) == want.pop(key), f"{key} is {got!r}"
if expected_sizes is not None:
    for op in {r["op"] for r in data["results"]}:
        sizes = [r["bytes"] for r in data["results"] if r["op"] == op and r["backend"] == data["results"][0]["backend"]]
        assert sizes == expected_sizes, f"{op}: sizes {sizes}, expected {expected_sizes}"
assert data["machine"]["ranks"] == ranks, data["machine"]
# A GPU build names rank 0's GPU and how many ranks share it; a host build names none.
if data["machine"]["kokkos_space"] == "Cuda":
    assert isinstance(data["machine"]["gpu"], str) and data["machine"]["gpu"], data["machine"]
    assert 1 <= data["machine"]["ranks_per_gpu"] <= ranks, data["machine"]
else:
    assert data["machine"]["gpu"] is None and data["machine"]["ranks_per_gpu"] is None, data["machine"]
rows = data["results"]
assert rows, "no results"
factor = {"all_reduce": 2 * (ranks - 1) / ranks, "all_gather": (ranks - 1) / ranks,
          "reduce_scatter": (ranks - 1) / ranks, "all_to_all": (ranks - 1) / ranks,
          "broadcast": 1.0, "reduce": 1.0}
for r in rows:
    for key in ("op", "backend", "dtype", "redop", "root", "bytes", "time_us", "average", "rank_time_us",
                "algbw_gbps", "busbw_gbps", "raw_busbw_gbps", "raw_time_us", "raw_rank_time_us", "tessera_over_raw",
                "wrong"):
        assert key in r, f"missing {key} in {r}"
    assert r["wrong"] == (0 if data["settings"]["check"] else None), r  # null where -c 0 checked nothing
    # Only the collectives that combine values name a reduction op.
    assert (r["redop"] == "none") == (r["op"] not in ("all_reduce", "reduce_scatter", "reduce")), r
    assert r["time_us"] > 0, r
    assert abs(r["algbw_gbps"] - r["bytes"] / (r["time_us"] * 1e-6) / 1e9) <= 1e-6 * max(1.0, r["algbw_gbps"]), r
    if ranks == 1:
        assert r["busbw_gbps"] is None and r["raw_busbw_gbps"] is None, r
    else:
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * factor[r["op"]]) <= 1e-9 + 1e-9 * r["busbw_gbps"], r
    for key, value in want.items():
        assert str(r[key]) == value, f"{key} is {r[key]}, expected {value}: {r}"
    # The row's time from every rank's: rank 0's, their mean, the fastest or the slowest.
    combine = {"rank0": lambda t: t[0], "mean": lambda t: sum(t) / len(t), "fastest": min, "slowest": max}
    assert r["average"] in combine, r
    for time, per_rank in (("time_us", "rank_time_us"), ("raw_time_us", "raw_rank_time_us")):
        if r[time] is None:
            assert r[per_rank] is None, r
            continue
        assert len(r[per_rank]) == ranks and all(t > 0 for t in r[per_rank]), r
        assert abs(combine[r["average"]](r[per_rank]) - r[time]) <= 1e-9 * r[time], (time, r)
    if r["raw_time_us"] is not None:
        ratio = r["tessera_over_raw"]
        assert math.isfinite(ratio) and ratio > 0, r
        assert abs(ratio - r["raw_time_us"] / r["time_us"]) <= 1e-9 * ratio, r
ops = {r["op"] for r in rows}
assert ops == (expected_ops or set(factor)), ops
print(f"{len(rows)} rows OK")
