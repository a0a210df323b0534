"""Kernel Tuner's own strategies replaying a cache slice in its simulation mode (the same-run peer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("kernel_tuner")

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.kernel_tuner_peer import evals_to_within, run
from flashtune.objectives.kernel_tuner_files import load_kernel_tuner

PNPOLY = Path(__file__).parents[3] / "experiments" / "data" / "foreign" / "pnpoly_RTX_3090.json.gz"


def test_kernel_tuner_random_sample_is_seeded_and_counts_like_ours() -> None:
    space = len(load_kernel_tuner(PNPOLY).measurements)
    first = [evals_to_within(PNPOLY, "random_sample", seed, budget=space) for seed in (0, 1)]
    again = [evals_to_within(PNPOLY, "random_sample", seed, budget=space) for seed in (0, 1)]
    assert first == again  # Python's and numpy's global generators are seeded per run
    # With the whole space as budget, sampling without replacement must reach the optimum.
    assert all(h is not None and 1 <= h <= space for h in first)


def test_peer_report_has_a_hit_rate_per_strategy() -> None:
    gemm = PNPOLY.with_name("gemm_RTX_2080_Ti.json.gz")  # a cache without an "objective" key
    assert evals_to_within(gemm, "random_sample", 0, budget=5) in (None, *range(1, 6))
    report = run([PNPOLY], ["random_sample"], seeds=2, budget=5)
    entry = report["strategies"]["random_sample"]
    assert 0.0 <= entry["hit_rate_2pct"] <= 1.0
    assert len(entry["spaces"]["pnpoly_RTX_3090"]["evals_to_2pct"]) == 2


def test_compare_reports_kernel_tuner_beside_ours_on_the_cache_files_only(tmp_path, capsys) -> None:
    t4 = PNPOLY.with_name("pnpoly_RTX_3090_T4.json.gz")  # Kernel Tuner's simulation mode reads no T4
    report_path = tmp_path / "report.json"
    rc = main(["compare", "--tables", str(PNPOLY), str(t4), "--seeds", "2", "--budget", "8", "--strategies", "random",
               "--priors", "none", "--jobs", "1", "--kernel-tuner", "random_sample", "--kernel-tuner-seeds", "2",
               "--json", str(report_path)])
    assert rc == 0
    report = json.loads(report_path.read_text())
    peer = report["kernel_tuner"]
    assert peer["spaces"] == ["pnpoly_RTX_3090"]
    assert peer["ours_hit_rate_2pct"]["random"] == report["strategies"]["random"]["workloads"]["pnpoly_RTX_3090"][
        "evals_to_2pct"]["reached"]
    assert len(peer["strategies"]["random_sample"]["spaces"]["pnpoly_RTX_3090"]["evals_to_2pct"]) == 2
    assert "--kernel-tuner random_sample" in report["command"]
    assert "Kernel Tuner's (2 seeds, simulation mode) random_sample" in capsys.readouterr().out


def test_compare_asks_for_a_budget_before_running_kernel_tuner(capsys) -> None:
    assert main(["compare", "--tables", str(PNPOLY), "--seeds", "1", "--strategies", "random",
                 "--kernel-tuner", "random_sample"]) != 0
    assert "--kernel-tuner needs --budget" in capsys.readouterr().err
