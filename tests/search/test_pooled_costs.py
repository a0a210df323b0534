"""A model-based strategy never takes the log of a non-positive cost (issue 23)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from flashtune.objectives.feasibility import for_workload
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.search import make_strategy


@pytest.mark.parametrize("median_ms", [0.0, -5.0])
def test_a_zero_or_negative_time_is_scored_as_a_failure(median_ms):
    workload = Workload(2, 8, 8, 1024, 1024, 64, "bfloat16", True)
    strategy = make_strategy("tpe", for_workload(workload, load_spec("h200")), seed=0)
    config = strategy.ask()
    good = Measurement(config=config, workload=workload, status=Status.OK, median_ms=2.0)
    assert strategy.model_cost(good) == pytest.approx(math.log(2.0))
    bad = dataclasses.replace(good, median_ms=median_ms)
    failed = dataclasses.replace(good, status=Status.CRASHED, median_ms=math.inf)
    assert strategy.model_cost(bad) == strategy.model_cost(failed) > math.log(2.0)
