"""Spaces of any kernel: value lists plus restrictions, floats, failures as values."""

from __future__ import annotations

import math

import pytest

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status
from flashtune.search import SearchSpace, make_strategy, run

# 10^7 points; the expressions admit 10 x 10 x 10 x 10 of them.
TUNABLES = {f"p{i}": list(range(10)) for i in range(7)}
EXPRESSIONS = ["p0 + p1 <= 3", "p2 + p3 <= 3", "p4 + p5 <= 3"]


def test_restrictions_admit_without_walking_the_product() -> None:
    called: list[Config] = []

    def predicate(config: Config) -> bool:
        called.append(config)
        return config["p6"] != 9  # a whole-config predicate, checked last

    space = SearchSpace(TUNABLES, restrictions=[*EXPRESSIONS, predicate])
    admitted = space.feasible_configs()
    assert space.size == 10**7
    # The predicate sees only what the expressions admitted: the product was never walked.
    assert len(called) == 10**4
    assert len(admitted) == 9 * 10**3
    assert all(c["p0"] + c["p1"] <= 3 and c["p6"] != 9 for c in admitted)
    assert not space.is_feasible(Config({**admitted[0], "p0": 3, "p1": 3}))


def test_a_strategy_searches_a_restricted_space_of_ten_million(tmp_path) -> None:
    space = SearchSpace(TUNABLES, restrictions=EXPRESSIONS)

    def evaluate(config: Config) -> Measurement:
        if config["p6"] == 0:  # a tenth of the space fails at run time
            return Measurement.failure(config, None, Status.RUNTIME_ERROR, "RuntimeFailedConfig")
        time_ms = 1.0 + sum((config[f"p{i}"] - 2) ** 2 for i in range(7)) / 10
        return Measurement(config, None, Status.OK, median_ms=time_ms)

    for name in ("random", "portfolio"):
        history = run(make_strategy(name, space, seed=1), evaluate, max_trials=30)
        assert len(history.trials) == 30
        assert all(space.is_feasible(t.config) for t in history.trials)
        assert history.best() is not None


def test_bad_restrictions_and_values_are_named() -> None:
    with pytest.raises(ValueError, match=r"restriction 'p0 \+ q < 3': unknown name\(s\) \['q'\]"):
        SearchSpace(TUNABLES, restrictions=["p0 + q < 3"])
    with pytest.raises(ValueError, match="not a Python expression"):
        SearchSpace(TUNABLES, restrictions=["p0 <"])
    with pytest.raises(ValueError, match=r"tunables\['x'\]: config value for 'x' must be finite"):
        SearchSpace({"x": [0.5, math.nan]})
    space = SearchSpace({"a": [0, 1]}, restrictions=["1 / a > 0"])
    with pytest.raises(ValueError, match=r"restriction '1 / a > 0' failed on \{'a': 0\}: ZeroDivisionError"):
        space.feasible_configs()


def test_float_values_and_explicit_members() -> None:
    config = Config(fraction=0.25, tile=4)
    assert config.key() == '{"fraction":0.25,"tile":4}'
    assert Config.from_dict({"fraction": 0.25, "tile": 4}) == config
    members = [Config(fraction=f, tile=t) for f in (0.5, 0.25) for t in (8, 4)][:3]
    space = SearchSpace.of_configs(members)
    assert space.tunables == {"fraction": (0.25, 0.5), "tile": (4, 8)}
    assert space.feasible_configs() == sorted(members, key=lambda c: (c["fraction"], c["tile"]))
    assert not space.is_feasible(Config(fraction=0.25, tile=4))  # in the product, never recorded


def test_measurement_without_a_workload_round_trips() -> None:
    m = Measurement(Config(fraction=0.5), None, Status.OK, median_ms=2.0)
    assert Measurement.from_dict(m.to_dict()) == m
    failed = Measurement.failure(Config(fraction=0.5), None, Status.RUNTIME_ERROR, "RuntimeFailedConfig")
    assert Measurement.from_dict(failed.to_dict()).status is Status.RUNTIME_ERROR


def test_warm_start_from_twenty_thousand_priors_ranks_by_relative_time() -> None:
    space = SearchSpace({"a": list(range(100)), "b": list(range(200))})
    priors = [Measurement(c, None, Status.OK, fingerprint="other gpu", median_ms=1.0 + (c["a"] * 200 + c["b"]) % 997)
              for c in space.feasible_configs()]
    priors[5] = Measurement.failure(priors[5].config, None, Status.RUNTIME_ERROR, "RuntimeFailedConfig",
                                    fingerprint="other gpu")
    strategy = make_strategy("random", space, seed=0)
    strategy.warm_start(priors)
    scores = strategy.priors.scores()
    assert len(scores) == 20_000 and scores[priors[5].config] == math.inf
    assert strategy.priors.score(Config(a=0, b=0)) == 1.0
    # The priors' best configs come first (random's prior_trials = 3).
    first = [strategy.ask() for _ in range(3)]
    assert all(strategy.priors.score(c) == 1.0 for c in first)
