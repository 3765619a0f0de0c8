"""Checks a tessera-bench-collectives JSON file: the documented schema, every op present,
no wrong elements, and busbw = algbw * the nccl-tests factor for the rank count."""
import json
import sys

path, ranks = sys.argv[1], int(sys.argv[2])
data = json.load(open(path))
assert data["machine"]["ranks"] == ranks, data["machine"]
rows = data["results"]
assert rows, "no results"
factor = {"all_reduce": 2 * (ranks - 1) / ranks, "all_gather": (ranks - 1) / ranks,
          "reduce_scatter": (ranks - 1) / ranks, "all_to_all": (ranks - 1) / ranks,
          "broadcast": 1.0, "reduce": 1.0}
for r in rows:
    for key in ("op", "backend", "dtype", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "raw_busbw_gbps", "wrong"):
        assert key in r, f"missing {key} in {r}"
    assert r["wrong"] == 0, r
    assert r["time_us"] > 0, r
    assert abs(r["algbw_gbps"] - r["bytes"] / (r["time_us"] * 1e-6) / 1e9) <= 1e-6 * max(1.0, r["algbw_gbps"]), r
    assert abs(r["busbw_gbps"] - r["algbw_gbps"] * factor[r["op"]]) <= 1e-9 + 1e-9 * r["busbw_gbps"], r
assert {r["op"] for r in rows} == set(factor), {r["op"] for r in rows}
print(f"{len(rows)} rows OK")
