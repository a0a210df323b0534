"""Fixtures for the search tests: a synthetic needle landscape and small spaces."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from flashtune.kernels.config import Config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Measurement, Status
from flashtune.search import SearchSpace

from needles import TUNABLES, WORKLOAD, needle_table  # noqa: E402 - tests/search is on sys.path

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


def bowl(space: SearchSpace, centre: tuple[float, ...]) -> Evaluate:
    """A smooth synthetic objective: log time quadratic in the index vector around ``centre``."""

    def evaluate(config: Config) -> Measurement:
        indices = space.to_indices(config)
        ms = math.exp(sum((i - c) ** 2 for i, c in zip(indices, centre)) / 4.0)
        return Measurement(config=config, workload=WORKLOAD, status=Status.OK, median_ms=ms, p20_ms=ms, p80_ms=ms)

    return evaluate
