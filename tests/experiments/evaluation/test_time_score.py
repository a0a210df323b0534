"""Kernel Tuner's score over a time budget, and ``flashtune compare``'s report of it.

Each evaluation takes its config's recorded compile + benchmark time (a repeated config
is free); the budget is the evaluation window at the space's mean time per evaluation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation import scoring

VALUES = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 2.5, 3.5]


def _space() -> tuple[np.ndarray, float]:
    return scoring.random_search_curve(VALUES), min(VALUES)


def test_at_the_mean_time_per_evaluation_the_time_score_is_the_evaluation_score() -> None:
    random_curve, optimum = _space()
    costs = [4.0, 3.0, 2.0, 1.0, 1.0]
    budget = 5
    by_evals = scoring.methodology_score(np.minimum.accumulate(costs), random_curve, optimum, budget)
    by_time = scoring.time_score(costs, [0.7] * 5, random_curve, 0.7, optimum, budget * 0.7, points=budget)
    assert by_time == pytest.approx(by_evals)


def test_slow_builds_cost_time_and_repeats_are_free() -> None:
    random_curve, optimum = _space()
    costs = [4.0, 3.0, 2.0, 1.0]
    at_mean = scoring.time_score(costs, [1.0] * 4, random_curve, 1.0, optimum, 4.0)
    slow = scoring.time_score(costs, [3.0] * 4, random_curve, 1.0, optimum, 4.0)
    # The first three were repeats of an earlier config: free, so the optimum comes at once.
    repeated = scoring.time_score(costs, [1.0, 0.0, 0.0, 0.0], random_curve, 1.0, optimum, 4.0)
    assert slow < at_mean < repeated


def test_a_run_counts_its_first_result_until_it_completes() -> None:
    random_curve, optimum = _space()
    # Optimum first but its build takes the whole budget: the run is at the optimum
    # throughout (random search too counts one evaluation from time 0).
    assert scoring.time_score([1.0], [4.0], random_curve, 1.0, optimum, 4.0) == pytest.approx(1.0)


@pytest.mark.parametrize(("costs", "seconds", "mean", "budget", "message"), [
    ([1.0, 2.0], [1.0], 1.0, 2.0, "one time per cost"),
    ([], [], 1.0, 2.0, "at least one"),
    ([1.0], [1.0], 0.0, 2.0, "mean_seconds"),
])
def test_bad_input_names_the_problem(costs, seconds, mean, budget, message) -> None:
    random_curve, optimum = _space()
    with pytest.raises(ValueError, match=message):
        scoring.time_score(costs, seconds, random_curve, mean, optimum, budget)


def _cache_file(path: Path) -> Path:
    """A small Kernel Tuner cache: 12 configs, compile + benchmark times per config, one failure."""
    rng = np.random.default_rng(3)
    cache = {}
    for x in (1, 2, 3, 4):
        for y in (8, 16, 32):
            record = {"x": x, "y": y, "time": float(1.0 + abs(x - 3) + abs(y - 16) / 8 + rng.uniform(0, 0.05)),
                      "compile_time": float(200 + 100 * x), "benchmark_time": 50.0}
            if (x, y) == (1, 8):
                record["time"] = "CompilationFailedConfig"
            cache[f"{x},{y}"] = record
    data = {"device_name": "Synthetic GPU", "kernel_name": "toy", "problem_size": 1, "tune_params_keys": ["x", "y"],
            "tune_params": {"x": [1, 2, 3, 4], "y": [8, 16, 32]}, "objective": "time", "cache": cache}
    path.write_text(json.dumps(data))
    return path


def test_compare_reports_the_time_score_of_a_cache_file(tmp_path, capsys) -> None:
    cache = _cache_file(tmp_path / "toy_Synthetic.json")
    report_path = tmp_path / "report.json"
    assert main(["compare", "--tables", str(cache), "--seeds", "3", "--budget", "6", "--strategies", "random,grid",
                 "--priors", "none", "--jobs", "1", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    (name,) = report["workloads"]
    timing = report["workloads"][name]["eval_time"]
    assert timing["counts"].startswith("compile_time + benchmark_time")
    # Mean over the 12 configs of (200 + 100 x + 50) ms.
    assert timing["mean_s"] == pytest.approx(0.5) and timing["cached_builds"] is False
    for entry in report["strategies"].values():
        detail = entry["workloads"][name]
        assert math.isfinite(detail["time_score"]["mean"]) and entry["time_score"] == detail["time_score"]["mean"]
        assert detail["time_budget_s"] == pytest.approx(detail["score_window"] * 0.5)
    printed = capsys.readouterr().out
    assert "time score" in printed and "compile_time + benchmark_time" in printed and "not comparable" not in printed


def test_tables_of_cached_builds_are_named_in_a_note(recorded_tables, tmp_path, capsys) -> None:
    """Our H200 tables recorded some workloads from cached builds (compile_s ~0.01 s): the
    report says their time score is not comparable rather than hiding it."""
    rng = np.random.default_rng(0)
    quick, compiled = (tmp_path / table.name for table in recorded_tables)
    for table, path, build_s in zip(recorded_tables, (quick, compiled), (lambda: 0.01, lambda: rng.uniform(0.6, 0.9))):
        rows = [json.loads(line) for line in table.read_text().splitlines()]
        path.write_text("".join(json.dumps({**row, "compile_s": float(build_s())}) + "\n" for row in rows))
    report_path = tmp_path / "report.json"
    assert main(["compare", "--tables", str(quick), str(compiled), "--seeds", "2", "--budget", "8",
                 "--strategies", "random", "--priors", "none", "--jobs", "1", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    flags = {w: d["eval_time"]["cached_builds"] for w, d in report["workloads"].items()}
    assert flags == {quick.stem: True, compiled.stem: False}
    assert report["workloads"][quick.stem]["eval_time"]["counts"] == "compile_s only (benchmark time not recorded)"
    note = next(line for line in capsys.readouterr().out.splitlines() if "not comparable" in line)
    assert "1 of 2" in note and quick.stem.removesuffix("_bfloat16") in note and "0.01 s" in note
