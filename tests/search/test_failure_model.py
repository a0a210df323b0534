"""The learned failure model: what it rules out, and how a strategy uses it."""

from __future__ import annotations

import numpy as np
import pytest

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status
from flashtune.search import SearchSpace, make_strategy, run
from flashtune.search._candidates import CandidatePool
from flashtune.search.failure_model import FailureModel

# 8 x 8 x 2 = 128 configs; the large corner (a + b >= 9) fails at run time, as a kernel
# that runs out of registers does: 28 of the 64 (a, b) pairs, 56 configs.
TUNABLES = {"a": list(range(8)), "b": list(range(8)), "flag": [0, 1]}


def fails(config: Config) -> bool:
    return config["a"] + config["b"] >= 9


def evaluate(config: Config) -> Measurement:
    if fails(config):
        return Measurement.failure(config, None, Status.RUNTIME_ERROR, "RuntimeFailedConfig")
    # The optimum sits at the edge of the failing region, as a kernel's often does.
    time_ms = 1.0 + abs(config["a"] - 4) + abs(config["b"] - 4) / 2 + config["flag"] / 10
    return Measurement(config, None, Status.OK, median_ms=time_ms)


def failed_trials(strategy_name: str, seed: int, budget: int = 40, **options) -> tuple[int, list[Config]]:
    space = SearchSpace(TUNABLES)
    history = run(make_strategy(strategy_name, space, seed=seed, **options), evaluate, max_trials=budget)
    configs = [t.config for t in history.trials]
    return sum(fails(c) for c in configs), configs


def test_cold_start_rules_out_nothing() -> None:
    space = SearchSpace(TUNABLES)
    model = FailureModel(space)
    indices = space.feasible_indices()
    assert not model.ruled_out(indices).any()
    for config in space.feasible_configs()[:20]:
        model.observe(space.to_indices(config), failed=False)  # successes only: still no evidence
    assert not model.ruled_out(indices).any()


def test_failures_rule_out_the_region_above_them_once_the_rule_has_held() -> None:
    space = SearchSpace(TUNABLES)
    model = FailureModel(space, confidence=0.9, evidence=2)
    # Failures along the edge and deeper inside: many confirm each other's cones.
    seen = [Config(a=a, b=b, flag=f) for a, b in ((2, 7), (3, 6), (4, 5), (5, 4), (6, 3), (7, 2), (5, 6), (6, 5),
                                                  (6, 6), (7, 7), (4, 7), (7, 4)) for f in (0, 1)]
    for config in seen:
        model.observe(space.to_indices(config), failed=True)
    for config in (Config(a=4, b=4, flag=0), Config(a=0, b=0, flag=1)):
        model.observe(space.to_indices(config), failed=False)
    assert model.trust() >= 0.9
    configs = space.feasible_configs()
    out = model.ruled_out(space.feasible_indices())
    ruled = [c for c, o in zip(configs, out) if o]
    assert ruled, "the evidence is there: some configs must be ruled out"
    assert all(fails(c) for c in ruled)  # never a config that runs


def test_a_success_inside_a_cone_refutes_it() -> None:
    space = SearchSpace(TUNABLES)
    model = FailureModel(space, confidence=0.5, evidence=1)
    model.observe((5, 5, 0), failed=True)
    model.observe((6, 6, 0), failed=True)  # confirms (5, 5)'s cone: trust 2/3
    target = np.array([[7, 7, 1]])
    assert model.ruled_out(target).all()
    model.observe((5, 6, 1), failed=False)  # a success above (5, 5): that cone is gone
    model.observe((6, 7, 1), failed=False)  # and above (6, 6)
    assert not model.ruled_out(target).any()


def test_choices_are_not_extrapolated() -> None:
    space = SearchSpace({"size": [1, 2, 3, 4], "mode": ["x", "y"]})
    model = FailureModel(space, confidence=0.5, evidence=1)
    for size in (2, 3):
        model.observe(space.to_indices(Config(size=size, mode="x")), failed=True)
    out = dict(zip(space.feasible_configs(), model.ruled_out(space.feasible_indices())))
    assert out[Config(size=4, mode="x")]
    assert not out[Config(size=4, mode="y")]  # another choice: no evidence there


def test_the_strategy_stops_paying_for_the_failing_region() -> None:
    # GP alone already shies away from failures (told as a penalty), but the optimum sits at
    # the region's edge and it keeps probing across it; with the model, fewer of its 40 trials fail.
    without = [failed_trials("gp", seed)[0] for seed in range(2)]
    with_model = [failed_trials("gp", seed, failure_model=True)[0] for seed in range(2)]
    assert all(w <= o for w, o in zip(with_model, without))
    assert sum(with_model) < sum(without)


def test_the_model_waits_for_evidence() -> None:
    space = SearchSpace(TUNABLES)
    strategy = make_strategy("gp", space, seed=0, failure_model=True)
    trials = run(strategy, evaluate, max_trials=24).trials
    first_failure = next(i for i, t in enumerate(trials) if fails(t.config))
    assert strategy.failure_model.n_failed == sum(fails(t.config) for t in trials)
    # Nothing was set aside before there were failures to learn from.
    replay = make_strategy("gp", space, seed=0)
    assert [t.config for t in run(replay, evaluate, max_trials=first_failure + 1).trials] == \
        [t.config for t in trials[:first_failure + 1]]


def test_no_effect_without_failures() -> None:
    space = SearchSpace(TUNABLES)

    def never_fails(config: Config) -> Measurement:
        return Measurement(config, None, Status.OK, median_ms=1.0 + config["a"] + config["b"] + config["flag"])

    runs = [[t.config for t in run(make_strategy("portfolio", space, seed=3, **options), never_fails,
                                   max_trials=20).trials]
            for options in ({}, {"failure_model": True})]
    assert runs[0] == runs[1]


def test_deterministic_with_a_seed() -> None:
    first = failed_trials("portfolio", 5, budget=24, failure_model=True)
    assert first == failed_trials("portfolio", 5, budget=24, failure_model=True)


def test_the_portfolio_passes_the_option_to_its_members() -> None:
    space = SearchSpace(TUNABLES)
    assert all(m.failure_model is not None for m in make_strategy("portfolio", space, failure_model=True).members)
    assert all(m.failure_model is None for m in make_strategy("portfolio", space).members)


def test_never_skips_everything() -> None:
    # Every config fails: the model rules out all that is left, and the study still measures
    # the whole space rather than stopping.
    space = SearchSpace({"a": list(range(4)), "b": list(range(4))})

    def always_fails(config: Config) -> Measurement:
        return Measurement.failure(config, None, Status.COMPILE_ERROR, "CompilationFailedConfig")

    strategy = make_strategy("gp", space, seed=0, failure_model=True, failure_confidence=0.5, failure_evidence=1)
    history = run(strategy, always_fails, max_trials=16)
    assert len(history.trials) == 16


def test_bad_options_are_named() -> None:
    space = SearchSpace(TUNABLES)
    with pytest.raises(ValueError, match="failure_explore"):
        make_strategy("gp", space, failure_model=True, failure_explore=2.0)
    with pytest.raises(ValueError, match="confidence"):
        make_strategy("gp", space, failure_model=True, failure_confidence=1.0)


def test_the_pool_sets_aside_but_never_all_that_is_open() -> None:
    pool = CandidatePool(SearchSpace({"a": [0, 1, 2]}))
    pool.set_aside(np.array([False, True, True]))
    assert pool.open_configs() == [Config(a=0)]
    pool.close(Config(a=0))  # the only config left open is asked: the set-aside ones come back
    assert pool.open_configs() == [Config(a=1), Config(a=2)]
    pool.set_aside(np.array([True, True, True]))  # a mask over everything open is ignored
    assert pool.n_open == 2
    pool.set_aside(None)
    assert not pool.is_open(Config(a=0))  # what was closed stays closed
