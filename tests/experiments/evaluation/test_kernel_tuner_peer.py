"""Kernel Tuner's own strategies replaying a cache slice in its simulation mode (the same-run peer)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("kernel_tuner")

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
