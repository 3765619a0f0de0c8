"""check_train_metrics.py FILE STEPS MIN_RATIO: the metrics file has STEPS lines with the
documented fields, and the last loss is at least MIN_RATIO times below the first."""
import json
import sys

path, steps, min_ratio = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(line) for line in open(path)]
assert len(rows) == steps, f"{len(rows)} lines, expected {steps}"
for i, r in enumerate(rows):
    for key in ("step", "loss", "grad_norm", "step_time_s", "samples_per_s", "comm_exposed_s", "model_state_bytes"):
        assert key in r, f"line {i + 1} lacks {key}"
    assert r["step"] == i + 1
    assert r["step_time_s"] > 0 and r["samples_per_s"] > 0 and r["comm_exposed_s"] >= 0
    assert r["grad_norm"] > 0, f"line {i + 1}: a training step has a gradient"
    # The step's phases are disjoint parts of it: none negative, and what is left ("other")
    # is what they do not cover.
    phases = ("forward_s", "backward_s", "comm_exposed_s", "optimizer_s", "data_s", "pipeline_idle_s")
    assert all(r[k] >= 0 for k in phases) and r["forward_s"] > 0 and r["data_s"] > 0, r
    assert abs(r["step_time_s"] - sum(r[k] for k in phases) - r["other_s"]) < 1e-9, r
    assert r["other_s"] > -1e-6, f"line {i + 1}: the phases add up to more than the step: {r}"
    # Byte counts are whole numbers of bytes (JSON integers), never fractions of one.
    for key in ("model_state_bytes", "working_bytes", "comm_bytes", "tp_comm_bytes", "pp_comm_bytes"):
        assert isinstance(r[key], int) and r[key] >= 0, f"line {i + 1}: {key} is {r[key]!r}"
    # A pipeline's idle time is its bubble; without stages there is neither.
    assert (r["pipeline_idle_s"] > 0) == (r.get("bubble_fraction", 0) > 0), r
ratio = rows[0]["loss"] / rows[-1]["loss"]
assert ratio >= min_ratio, f"loss went {rows[0]['loss']} -> {rows[-1]['loss']}: {ratio:.2f}x, need {min_ratio}x"
print(f"{steps} steps, loss {rows[0]['loss']:.4g} -> {rows[-1]['loss']:.4g} ({ratio:.1f}x lower)")
