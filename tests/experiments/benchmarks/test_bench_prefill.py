"""CPU smoke test of the prefill exploration script (docs/lab/tools/bench_prefill.py):
its whole flow (plan, check, time, JSONL log, final table) under Triton's interpreter, on a
tiny workload, with the timer and SDPA peers replaced (no CUDA here)."""

import json
import math

import bench_prefill
import pytest


def test_plan_lists_every_workload(capsys):
    assert bench_prefill.main(["--plan"]) == 0
    text = capsys.readouterr().out
    for name in bench_prefill.WORKLOADS:
        assert name in text
    plan = bench_prefill.candidates(128, True)
    assert len({(c.kind, c.params) for c in plan}) == len(plan)  # no candidate twice
    assert any(c.kind == "project" for c in plan) and any(c.group == "ws" for c in plan)


@pytest.mark.slow
def test_whole_flow_on_a_tiny_workload(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench_prefill, "DEVICE", "cpu")
    monkeypatch.setattr(bench_prefill, "WORKLOADS", {"tiny_causal": (1, 2, 40, 16, True)})
    tile = (32, 32, 4, 1)
    monkeypatch.setattr(bench_prefill, "PROJECT_CONFIGS", {16: [("tma", "tiles", tile)]})
    monkeypatch.setattr(bench_prefill, "ABLATION_TILES", {16: [tile]})
    monkeypatch.setattr(bench_prefill, "SWEEP_TILES", {16: [tile]})
    monkeypatch.setattr(bench_prefill, "LADDER", bench_prefill.LADDER[:3])
    monkeypatch.setattr(bench_prefill, "candidates", lambda d, c, f=bench_prefill.candidates: [
        x for x in f(d, c) if x.group != "ws"])
    monkeypatch.setattr(bench_prefill, "_time_ms", lambda fn, rep=100: (fn(), 1.0)[1])
    monkeypatch.setattr(bench_prefill, "_sdpa", lambda name, q, k, v, causal: (lambda: None))
    monkeypatch.setenv("OUT", str(tmp_path))
    assert bench_prefill.main(["--jobs", "0", "--rounds", "1"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "bench_prefill.jsonl").read_text().splitlines()]
    assert rows and all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    assert all(r["rel_error"] < (0.1 if "use_fp8=True" in r["label"] else 1e-2) for r in rows)
    assert any(r["label"].startswith("project lean/") for r in rows)  # the op's new path is in the run
    summary = json.loads((tmp_path / "bench_prefill_summary.json").read_text())
    assert summary[0]["workload"] == "tiny_causal" and summary[0]["retimed"]
    assert "geomean best new / cuDNN" in capsys.readouterr().out
    assert math.isfinite(max(summary[0]["retimed"].values()))
