"""Fixtures for the search tests: a synthetic needle landscape and small spaces."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from needles import TUNABLES, WORKLOAD, needle_table  # tests/search is on sys.path (no __init__.py)

from flashtune.kernels.config import Config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Measurement
from flashtune.search import SearchSpace

Evaluate = Callable[[Config], Measurement]


@pytest.fixture(scope="session")
def needle_measurements() -> list[Measurement]:
    return needle_table(seed=0)


@pytest.fixture
def needle_space() -> SearchSpace:
    """The kernel's tunables on the synthetic workload, constrained like a live study."""
    spec = load_spec("h200")
    return SearchSpace(TUNABLES, lambda config: check(config, WORKLOAD, spec).feasible)


@pytest.fixture
def needle_evaluate(needle_measurements: list[Measurement]) -> Evaluate:
    objective = ReplayObjective(needle_measurements)
    return lambda config: objective.evaluate(config, WORKLOAD)


@pytest.fixture(scope="session")
def needle_optimum_ms(needle_measurements: list[Measurement]) -> float:
    return min(m.median_ms for m in needle_measurements if m.ok)
