"""Every strategy against random search on spaces nobody tuned it for (issue 15).

The synthetic landscapes (``landscapes.py``) put the optimum anywhere, extremes
included, cut the slope into plateaus, or replay with noise. The property: a strategy
measures a config within 2 % of the optimum at least as often as random search does
with the same budget (random's chance is exact, not sampled), and the default strategy
("portfolio") does so on the spaces with the optimum at an extreme.

The default run takes a few seeds on the needle at an extreme (about a minute on one
core: GP refits every ask); ``-m slow`` runs every shape with ten seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from landscapes import Synthetic, evals_to_within, landscape  # tests/search is on sys.path

from flashtune.search import strategy_names

BUDGET = 40
TOLERANCE = 0.02
#: The GA finds a lone needle at an extreme no more often than random search (measured:
#: 0 of 10 landscapes in 40 evaluations, random's chance 0.56 of 10; 4 of 8 in 60): it
#: breeds from the best configs seen, and nothing near them hints at a far corner. It is
#: kept in the comparison, as a known weakness, and out of the default portfolio.
_GA_MISSES = pytest.mark.xfail(reason="the GA does not beat random search on a lone needle at an extreme",
                               strict=False)
SEARCHERS = [pytest.param(n, marks=_GA_MISSES) if n == "ga" else n
             for n in strategy_names() if n not in ("grid", "random")]


def _hits(name: str, spaces: list[Synthetic], *, noise: bool = False) -> tuple[int, float, list[int | None]]:
    """How many runs reached 2 %, random search's expected number, and each run's evaluations."""
    evals = [evals_to_within(name, space, seed=seed, budget=BUDGET, tolerance=TOLERANCE, noise=noise)
             for seed, space in enumerate(spaces)]
    expected = sum(space.random_hit_probability(BUDGET, TOLERANCE) for space in spaces)
    return sum(e is not None for e in evals), expected, evals


def _report(name: str, hits: int, expected: float, evals: list[int | None], runs: int) -> str:
    reached = [e for e in evals if e is not None]
    median = np.median([e if e is not None else BUDGET + 1 for e in evals])
    return (f"{name}: {hits}/{runs} runs within 2 % in {BUDGET} evaluations (random search: {expected:.2f} expected), "
            f"median evaluations {median:.0f} (misses count {BUDGET + 1}); reached at {reached}")


@pytest.mark.parametrize("name", SEARCHERS)
def test_needle_at_an_extreme_is_found_as_often_as_random_finds_it(name) -> None:
    spaces = [landscape(seed, at="extreme") for seed in range(3)]
    hits, expected, evals = _hits(name, spaces)
    # Random search finds a lone needle among 720 configs in 40 draws one time in 18.
    assert hits >= math.ceil(expected), _report(name, hits, expected, evals, len(spaces))


@pytest.mark.slow
@pytest.mark.parametrize("name", SEARCHERS)
@pytest.mark.parametrize(("shape", "at", "noise"), [
    ("needle", "extreme", False), ("needle", "random", False), ("plateau", "random", False),
    ("plateau", "extreme", False), ("needle", "random", True),
])
def test_every_shape_with_more_seeds(name, shape, at, noise) -> None:
    spaces = [landscape(100 + seed, shape=shape, at=at) for seed in range(10)]
    hits, expected, evals = _hits(name, spaces, noise=noise)
    assert hits >= math.ceil(expected), _report(name, hits, expected, evals, len(spaces))


def test_random_search_matches_its_exact_chance() -> None:
    """The baseline the property compares with is the one random search really has."""
    space = landscape(7, at="extreme")
    runs = [evals_to_within("random", space, seed=seed, budget=BUDGET) for seed in range(60)]
    chance = space.random_hit_probability(BUDGET)
    hits = sum(e is not None for e in runs)
    # Binomial(60, p): within four standard deviations.
    assert abs(hits - 60 * chance) <= 4 * math.sqrt(60 * chance * (1 - chance)) + 1


def test_landscapes_put_the_optimum_where_asked() -> None:
    for seed in range(5):
        space = landscape(seed, at="extreme")
        best = min((m for m in space.table if m.ok), key=lambda m: m.median_ms)
        assert best.median_ms == space.optimum_ms and space.within(TOLERANCE) == 1
        for knob in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"):
            values = space.space.values(knob)
            assert best.config[knob] in (values[0], values[-1]), knob
    plateau = landscape(0, shape="plateau")
    times = [m.median_ms for m in plateau.table if m.ok]
    assert len(set(times)) < len(times) / 10  # flat: most configs tie with many others
    with pytest.raises(ValueError, match="shape"):
        landscape(0, shape="bowl")
    with pytest.raises(ValueError, match="at"):
        landscape(0, at="middle")
