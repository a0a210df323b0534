"""``unsafe`` (a config compute-sanitizer found an error in) is a failure everywhere a status
is read: strategies' costs and penalties, the loop's best, priors, the feasibility grade and
the store's export filter. Its measured time, were one kept, must never make it a winner."""

from __future__ import annotations

import dataclasses
import math

import pytest
from needles import WORKLOAD  # tests/search is on sys.path (no __init__.py)

from flashtune.kernels.config import Config
from flashtune.objectives.feasibility import grade
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Measurement, Status
from flashtune.runtime.storage.export import best_entries, entry_of
from flashtune.search import make_strategy, strategy_names
from flashtune.search.loop import History, Trial
from flashtune.search.priors import PriorBook
from flashtune.search.strategy import cost_ms


def _unsafe(m: Measurement) -> Measurement:
    """The worst case: a config found unsafe that kept a time faster than every other."""
    return dataclasses.replace(m, status=Status.UNSAFE, median_ms=0.001, p20_ms=0.001, p80_ms=0.001, tflops=1e6,
                               error="compute-sanitizer memcheck: Invalid __global__ read of size 4 bytes")


@pytest.fixture
def ok_and_unsafe(needle_measurements):
    ok = [m for m in needle_measurements if m.ok]
    fastest = min(ok, key=lambda m: m.median_ms)
    return [m for m in ok if m is not fastest], _unsafe(fastest)


def test_unsafe_is_not_ok_and_round_trips() -> None:
    assert Status("unsafe") is Status.UNSAFE
    m = Measurement.failure(Config(BLOCK_M=64),
                            WORKLOAD, Status.UNSAFE, "compute-sanitizer racecheck: Race reported between ...")
    assert not m.ok
    back = Measurement.from_dict(m.to_dict())
    assert back.status is Status.UNSAFE and back.error == m.error


def test_an_unsafe_time_costs_inf(ok_and_unsafe) -> None:
    _, unsafe = ok_and_unsafe
    assert cost_ms(unsafe) == math.inf


@pytest.mark.parametrize("name", strategy_names())
def test_every_strategy_penalizes_unsafe_above_every_success(name, needle_space, ok_and_unsafe) -> None:
    ok, unsafe = ok_and_unsafe
    strategy = make_strategy(name, needle_space, seed=0)
    told = [m for m in ok[:6] if needle_space.is_feasible(m.config)]
    for m in told:
        strategy.tell(m.config, m)
    strategy.tell(unsafe.config, unsafe)  # told like any trial: no exception
    assert strategy.penalized_ms(unsafe) > max(m.median_ms for m in told)


def test_the_loop_never_makes_an_unsafe_trial_best(ok_and_unsafe) -> None:
    ok, unsafe = ok_and_unsafe
    history = History([Trial(0, unsafe.config, unsafe, 0.0), *(Trial(i + 1, m.config, m, 0.0) for i, m in enumerate(ok[:5]))])
    best = history.best()
    assert best is not None and best.measurement.status is Status.OK and best.config != unsafe.config


def test_an_unsafe_prior_ranks_as_a_failure(ok_and_unsafe) -> None:
    ok, unsafe = ok_and_unsafe
    book = PriorBook()
    for m in [unsafe, *ok[:5]]:
        book.add(dataclasses.replace(m, source="prior"))
    assert book.score(unsafe.config) == math.inf


def test_an_unsafe_config_is_never_exported(ok_and_unsafe) -> None:
    ok, unsafe = ok_and_unsafe
    unsafe = dataclasses.replace(unsafe, fingerprint="f" * 16, hardware="NVIDIA H200")
    assert entry_of(unsafe) is None
    only_ok = [dataclasses.replace(m, fingerprint="f" * 16) for m in ok[:3]]
    entries = best_entries([unsafe, *only_ok])
    assert entries and all(e.config != unsafe.config for e in entries)


def test_the_feasibility_grade_counts_unsafe_as_ran(ok_and_unsafe) -> None:
    """The sanitizer watched it run: a model that said it fits was right."""
    _, unsafe = ok_and_unsafe
    spec = load_spec("h200")
    agreement = grade([unsafe], spec)
    assert agreement.total == 1 and agreement.agreed == 1
