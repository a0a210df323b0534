"""The comparison arithmetic: random search's exact curve, the methodology score, targets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from flashtune.experiments.evaluation import scoring


def _brute_force_random_curve(values: list[float]) -> np.ndarray:
    """Mean best-so-far over every order of the values (exact, for small spaces)."""
    orders = list(itertools.permutations(values))
    return np.mean([np.minimum.accumulate(order) for order in orders], axis=0)


@pytest.mark.parametrize("values", [[3.0, 1.0, 2.0], [5.0, 1.0, 1.0, 4.0, 2.0], [2.0, 2.0, 2.0, 7.0]])
def test_random_curve_is_exact(values) -> None:
    np.testing.assert_allclose(scoring.random_search_curve(values), _brute_force_random_curve(values))


def test_random_curve_starts_at_the_mean_and_ends_at_the_optimum() -> None:
    values = list(np.random.default_rng(0).uniform(1, 5, size=60))
    curve = scoring.random_search_curve(values)
    assert curve[0] == pytest.approx(np.mean(values))
    assert curve[-1] == pytest.approx(min(values))
    assert np.all(np.diff(curve) <= 1e-12)


def test_best_so_far_fills_failures_with_the_worst() -> None:
    curve = scoring.best_so_far([math.inf, 3.0, math.inf, 2.0], fail_value=9.0)
    assert curve.tolist() == [9.0, 3.0, 3.0, 2.0]


def test_score_budget_is_where_random_closes_95_percent() -> None:
    curve = np.array([10.0, 6.0, 4.0, 3.0, 2.2, 2.04, 2.0])
    # median 10 -> optimum 2: 95 % of the way is 2.4, first reached at evaluation 5.
    assert scoring.score_budget(curve, median=10.0, optimum=2.0) == 5


def test_score_of_random_search_itself_is_zero_and_of_the_optimum_one() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 5.0, 6.0]
    curve = scoring.random_search_curve(values)
    assert scoring.methodology_score(curve, curve, 1.0, 4) == pytest.approx(0.0)
    assert scoring.methodology_score(np.array([1.0]), curve, 1.0, 4) == pytest.approx(1.0)
    worst = scoring.methodology_score(np.full(6, 6.0), curve, 1.0, 4)
    assert worst < 0


def test_mean_score_of_every_order_is_zero() -> None:
    """Linearity: averaged over all random orders, a run scores exactly as the baseline."""
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    curve = scoring.random_search_curve(values)
    scores = [scoring.methodology_score(np.minimum.accumulate(order), curve, 1.0, 3)
              for order in itertools.permutations(values)]
    assert np.mean(scores) == pytest.approx(0.0, abs=1e-12)


def test_score_pads_a_run_that_stopped_early() -> None:
    curve = np.array([4.0, 3.0, 2.5, 2.0])
    short = scoring.methodology_score(np.array([3.0, 2.0]), curve, 2.0, 3)
    padded = scoring.methodology_score(np.array([3.0, 2.0, 2.0]), curve, 2.0, 3)
    assert short == padded


def test_score_of_a_space_of_ties_is_zero() -> None:
    curve = scoring.random_search_curve([2.0, 2.0])
    assert scoring.methodology_score(np.array([2.0]), curve, 2.0, 2) == 0.0


def test_score_rejects_an_empty_run() -> None:
    with pytest.raises(ValueError, match="empty"):
        scoring.methodology_score(np.zeros(0), np.array([1.0]), 1.0, 1)


def test_evals_to_within() -> None:
    run = np.array([3.0, 1.2, 1.04, 1.01, 1.0])
    assert scoring.evals_to_within(run, 1.0, 0.05) == 3
    assert scoring.evals_to_within(run, 1.0, 0.02) == 4
    assert scoring.evals_to_within(run, 1.0, 0.0) == 5
    assert scoring.evals_to_within(run[:2], 1.0, 0.02) is None


def test_spread() -> None:
    summary = scoring.spread([1, 2, 3, 4, 100])
    assert summary["median"] == 3 and summary["p25"] == 2 and summary["p75"] == 4
    assert summary["min"] == 1 and summary["max"] == 100 and summary["mean"] == 22
    assert math.isnan(scoring.spread([])["median"])
