"""The arithmetic of comparing search strategies on a recorded space.

Kernel Tuner's methodology (Willemsen et al., FGCS 2024; docs/reference.md): random search's
expected best-so-far curve is the baseline; the budget is the number of evaluations
random search needs to get 95 % of the way from the space's median to its optimum; a
run's score is the mean, over that budget, of how much of random search's remaining
gap to the optimum it closed:

    P = mean over t = 1..budget of (R(t) - F(t)) / (R(t) - optimum)

0 is random search, 1 is the optimum from the first evaluation, negative is worse than
random. ``methodology_score`` counts evaluations; ``time_score`` counts time, as the
methodology does: each evaluation takes its config's recorded compile + benchmark time
(a repeated config is free), the budget is the evaluation budget at the space's mean time
per evaluation, and random search's baseline at time t is its curve at
max(1, round(t / mean)) evaluations (Kernel Tuner's ``time_to_fevals``). A strategy that
picks cheap-to-build configs gets further in the same time; one that picks slow builds
pays for them.

Failures have no time. A failed config counts as the worst successful time of the space:
a run that has found nothing yet is no better off than one that found the slowest
config (and random search's baseline draws failures the same way).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def fill_failures(costs: Sequence[float], fail_value: float) -> np.ndarray:
    """``costs`` with every non-finite entry (a failure) replaced by ``fail_value``."""
    values = np.asarray(costs, dtype=float)
    return np.where(np.isfinite(values), values, fail_value)


def best_so_far(costs: Sequence[float], fail_value: float) -> np.ndarray:
    """Running minimum of a run's costs in trial order; failures count as ``fail_value``."""
    if len(costs) == 0:
        return np.zeros(0)
    return np.minimum.accumulate(fill_failures(costs, fail_value))


def random_search_curve(values: Sequence[float]) -> np.ndarray:
    """Expected best-so-far of random search without replacement, exactly.

    Args:
        values: the cost of every config random search may draw (failures already filled).

    Returns:
        Element ``k - 1`` is the expected minimum of ``k`` distinct configs drawn
        uniformly, for ``k = 1..len(values)``: with the values sorted ascending, the
        minimum is the ``i``-th smallest with probability C(N-1-i, k-1) / C(N, k).
    """
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    curve = np.empty(n)
    steps = np.arange(n - 1, dtype=float)  # i = 0 .. n-2
    for k in range(1, n + 1):
        # P(min = i-th smallest) = C(n-1-i, k-1) / C(n, k): k/n for i = 0, and each next
        # one is the last times (n-i-k)/(n-1-i) <= 1 - (k-1)/(n-1). Past 45 (n-1)/(k-1)
        # terms the weights are below e^-45 of the first: they are left out, which makes
        # the whole curve about n log n work (the exact binomials took minutes for 18,000).
        length = n - 1 if k == 1 else min(n - 1, math.ceil(45 * (n - 1) / (k - 1)))
        ratios = np.clip((n - steps[:length] - k) / (n - 1 - steps[:length]), 0.0, None)
        weights = (k / n) * np.concatenate(([1.0], np.cumprod(ratios)))
        curve[k - 1] = float(np.dot(weights, ordered[: length + 1]))
    return curve


def score_budget(random_curve: np.ndarray, median: float, optimum: float, fraction: float = 0.95) -> int:
    """Evaluations random search needs (in expectation) to close ``fraction`` of median -> optimum."""
    target = median - fraction * (median - optimum)
    reached = np.flatnonzero(random_curve <= target + 1e-12 * max(abs(target), 1.0))
    return int(reached[0]) + 1 if len(reached) else len(random_curve)


def methodology_score(run_best: np.ndarray, random_curve: np.ndarray, optimum: float, budget: int) -> float:
    """Kernel Tuner's score of one run over the first ``budget`` evaluations.

    Args:
        run_best: the run's best-so-far curve (``best_so_far``). A run that stopped early
            (its strategy ran out of configs) keeps its last value. Must not be empty:
            a run with no evaluation has no curve (pass ``[worst]`` to score it as the worst).
        random_curve: ``random_search_curve`` of the same space.
        optimum: the space's best cost.
        budget: evaluations to average over (``score_budget``).

    Returns:
        The mean closed fraction of random search's gap. Evaluations where random search
        is already at the optimum (no gap to close) are left out; if none is left (a
        space whose configs all tie), the score is 0: nothing could beat random search.
    """
    budget = min(budget, len(random_curve))
    if len(run_best) == 0:
        raise ValueError("methodology_score: run_best is empty; pass [worst] for a run without evaluations")
    run = np.concatenate([run_best[:budget], np.full(max(budget - len(run_best), 0), run_best[-1])])
    if budget <= 0:
        return 0.0
    baseline = random_curve[:budget]
    gap = baseline - optimum
    keep = gap > 1e-12 * max(abs(optimum), 1.0)
    if not keep.any():
        return 0.0
    return float(np.mean((baseline[keep] - run[keep]) / gap[keep]))


#: Points of the time grid the time score averages over (equally spaced in (0, budget]).
TIME_POINTS = 100


def time_score(costs: Sequence[float], eval_seconds: Sequence[float], random_curve: np.ndarray, mean_seconds: float,
               optimum: float, budget_seconds: float, points: int = TIME_POINTS) -> float:
    """Kernel Tuner's score of one run over a time budget.

    Args:
        costs: the run's costs in trial order, failures already filled (``fill_failures``).
        eval_seconds: the recorded time of each trial (compile + benchmark; 0 for a repeat).
        random_curve: ``random_search_curve`` of the same space (per evaluation).
        mean_seconds: the space's mean time per evaluation (random search's pace).
        optimum: the space's best cost.
        budget_seconds: the time to average over.
        points: the grid's size.

    Returns:
        The mean closed fraction of random search's gap at ``points`` equally spaced times
        up to the budget. Before its first evaluation completes a run counts as that first
        result, as random search counts at least one evaluation. A run whose trials end
        before the budget keeps its last best. Times where random search has no gap left
        are left out; none left: 0.
    """
    if len(costs) == 0 or len(costs) != len(eval_seconds):
        raise ValueError(f"time_score: {len(costs)} costs and {len(eval_seconds)} times; need one time per cost, "
                         "at least one")
    if not (mean_seconds > 0 and budget_seconds > 0):
        raise ValueError(f"time_score: mean_seconds {mean_seconds} and budget_seconds {budget_seconds} must be > 0")
    grid = budget_seconds * np.arange(1, points + 1) / points
    finished = np.cumsum(np.asarray(eval_seconds, dtype=float))
    best = np.minimum.accumulate(np.asarray(costs, dtype=float))
    done = np.searchsorted(finished, grid * (1 + 1e-12), side="right")  # trials completed by each time
    run = best[np.maximum(done, 1) - 1]
    evals = np.clip(np.round(grid / mean_seconds).astype(int), 1, len(random_curve))
    baseline = random_curve[evals - 1]
    gap = baseline - optimum
    keep = gap > 1e-12 * max(abs(optimum), 1.0)
    if not keep.any():
        return 0.0
    return float(np.mean((baseline[keep] - run[keep]) / gap[keep]))


def evals_to_within(run_best: np.ndarray, optimum: float, tolerance: float) -> int | None:
    """1-based evaluation at which the run first came within ``tolerance`` of ``optimum``."""
    hit = np.flatnonzero(run_best <= optimum * (1.0 + tolerance) + 1e-15)
    return int(hit[0]) + 1 if len(hit) else None


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, extremes and mean of a sample (for reports and JSON)."""
    data = np.asarray(values, dtype=float)
    if len(data) == 0:
        return {"median": math.nan, "p25": math.nan, "p75": math.nan, "min": math.nan, "max": math.nan, "mean": math.nan}
    p25, median, p75 = np.percentile(data, [25, 50, 75])
    return {"median": float(median), "p25": float(p25), "p75": float(p75),
            "min": float(data.min()), "max": float(data.max()), "mean": float(data.mean())}
