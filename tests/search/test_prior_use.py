"""How each strategy uses priors: what it measures first, what its model is told, and how it
recovers from a prior that misleads (issue 5)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from conftest import WORKLOAD  # tests/search is on sys.path

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status
from flashtune.search import make_strategy, run, strategy_names
from flashtune.search.priors import MIN_CHECKS, PriorBook, PriorGuide, spearman

MODEL_BASED = ["ga", "gp", "skopt", "tpe"]


def _priors(measurements: list[Measurement], *, invert: bool = False) -> list[Measurement]:
    """The table as priors from "another GPU"; ``invert`` ranks it upside down (a misleading prior)."""
    ok = [m.median_ms for m in measurements if m.ok]
    top = max(ok) + min(ok)
    return [dataclasses.replace(m, source="prior", fingerprint="other-gpu",
                                median_ms=(top - m.median_ms if invert else m.median_ms * 1.5) if m.ok else m.median_ms)
            for m in measurements]


def _ranked(priors: list[Measurement], space) -> list[Config]:
    book = PriorBook()
    for m in priors:
        book.add(m)
    return [c for c in book.ranked() if space.is_feasible(c)]


def _evals_to_optimum(history, optimum_ms: float) -> int:
    hits = [t.number + 1 for t in history.trials if t.cost_ms <= optimum_ms * (1 + 1e-9)]
    return hits[0] if hits else len(history.trials) + 1


# -- the guide ------------------------------------------------------------------------------


def test_spearman_ranks_ties_and_infinities_together() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, math.inf], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0


def test_guide_is_trusted_until_the_measurements_contradict_it() -> None:
    book = PriorBook()
    for a in range(20):
        book.add(Measurement(config=Config(a=a), workload=WORKLOAD, status=Status.OK, median_ms=1.0 + a,
                             source="prior"))
    guide = PriorGuide(book, lambda c: c)
    assert guide.ranking()[:3] == [Config(a=0), Config(a=1), Config(a=2)]
    for a in range(MIN_CHECKS - 1):
        guide.observe(Config(a=a), float(MIN_CHECKS - a))  # the priors' best, in the opposite order here
        assert guide.trusted  # too few checks to judge
    guide.observe(Config(a=MIN_CHECKS - 1), 1.0)
    assert not guide.trusted and guide.next_open(lambda c: True) is None
    for a in range(MIN_CHECKS, 20):
        guide.observe(Config(a=a), float(a + 1))  # over the whole range the order holds: trusted again
    assert guide.agreement() > 0.3 and guide.trusted


def _two_source_book() -> PriorBook:
    """Two sources over a = 0..19: "same" orders them as the study will (a ascending),
    "other" the opposite way; their merged turns alternate between the two."""
    book = PriorBook()
    for a in range(20):
        book.add(Measurement(config=Config(a=a), workload=WORKLOAD, status=Status.OK, median_ms=1.0 + a,
                             source="prior", fingerprint="same"))
        book.add(Measurement(config=Config(a=a), workload=WORKLOAD, status=Status.OK, median_ms=100.0 - a,
                             source="prior", fingerprint="other"))
    return book


def test_with_several_sources_the_guide_follows_the_one_that_agrees_here() -> None:
    guide = PriorGuide(_two_source_book(), lambda c: c)
    # Before any judgement: the merged turns, each source's best in turn.
    ranking = guide.ranking()
    assert ranking[:2] == [Config(a=0), Config(a=19)] and set(ranking[2:4]) == {Config(a=1), Config(a=18)}
    measured = [0, 19, 1, 18, 10]  # the two bests, the two runners-up, the middle
    for a in measured:
        guide.observe(Config(a=a), 1.0 + a)  # here the "same" source's order holds
    assert guide.source_agreements() == [pytest.approx(1.0), pytest.approx(-1.0)]
    assert guide.leader() == (0, pytest.approx(1.0)) and guide.trusted
    # The leader's next open configs, not the merged order's (which would give a=17 its turn).
    is_open = lambda c: c["a"] not in measured  # noqa: E731
    assert guide.next_open(is_open) == Config(a=2)
    measured.append(2)
    assert guide.next_open(is_open) == Config(a=3)


def test_a_single_source_keeps_the_merged_order() -> None:
    book = PriorBook()
    for a in range(20):
        book.add(Measurement(config=Config(a=a), workload=WORKLOAD, status=Status.OK, median_ms=1.0 + a,
                             source="prior"))
    guide = PriorGuide(book, lambda c: c)
    for a in range(MIN_CHECKS):
        guide.observe(Config(a=a), 1.0 + a)
    assert guide.leader() is None and guide.agreement() == pytest.approx(1.0)
    assert guide.next_open(lambda c: c["a"] >= MIN_CHECKS) == Config(a=MIN_CHECKS)


def test_when_no_source_agrees_the_guide_is_dropped() -> None:
    guide = PriorGuide(_two_source_book(), lambda c: c)
    for a, ms in {0: 3.0, 1: 2.0, 10: 5.0, 18: 1.0, 19: 4.0}.items():
        guide.observe(Config(a=a), ms)  # an order neither source gives: agreements +0.1 and -0.1
    assert guide.source_agreements() == [pytest.approx(0.1), pytest.approx(-0.1)]
    assert not guide.trusted and guide.next_open(lambda c: True) is None


def test_a_guide_without_priors_is_never_followed() -> None:
    guide = PriorGuide(PriorBook(), lambda c: c)
    assert not guide.trusted and guide.next_open(lambda c: True) is None


# -- grid and random ------------------------------------------------------------------------


def test_grid_is_walked_in_the_priors_order(needle_space, needle_evaluate, needle_measurements) -> None:
    priors = _priors(needle_measurements)
    history = run(make_strategy("grid", needle_space), needle_evaluate, max_trials=MIN_CHECKS, priors=priors)
    assert [t.config for t in history.trials] == _ranked(priors, needle_space)[:MIN_CHECKS]


def test_grid_leaves_a_misleading_prior(needle_space, needle_evaluate, needle_measurements, needle_optimum_ms) -> None:
    budget = len(needle_space.feasible_configs())
    cold = run(make_strategy("grid", needle_space), needle_evaluate, max_trials=budget)
    misled = run(make_strategy("grid", needle_space), needle_evaluate, max_trials=budget,
                 priors=_priors(needle_measurements, invert=True))
    optimum = min((t for t in cold.trials if t.measurement.ok), key=lambda t: t.cost_ms).config
    trusting = _ranked(_priors(needle_measurements, invert=True), needle_space).index(optimum) + 1
    # Following the inverted prior to the end would find the optimum last; the grid drops it.
    assert _evals_to_optimum(misled, needle_optimum_ms) <= _evals_to_optimum(cold, needle_optimum_ms) + 2 * MIN_CHECKS
    assert _evals_to_optimum(misled, needle_optimum_ms) < trusting


def test_grid_measures_prior_configs_it_was_told(needle_space, needle_evaluate, needle_measurements) -> None:
    """A prior is not a trial: its config stays to be measured (it used to be skipped)."""
    priors = _priors(needle_measurements)
    budget = len(needle_space.feasible_configs())
    history = run(make_strategy("grid", needle_space), needle_evaluate, max_trials=budget, priors=priors)
    assert {t.config for t in history.trials} == set(needle_space.feasible_configs())


def test_random_measures_the_priors_best_then_draws(needle_space, needle_evaluate, needle_measurements) -> None:
    priors = _priors(needle_measurements)
    cold = [t.config for t in run(make_strategy("random", needle_space, seed=4), needle_evaluate, max_trials=20).trials]
    warm = [t.config for t in run(make_strategy("random", needle_space, seed=4, prior_trials=2), needle_evaluate,
                                  max_trials=20, priors=priors).trials]
    first = _ranked(priors, needle_space)[:2]
    assert warm[:2] == first
    assert warm[2:] == [c for c in cold if c not in first][:18]  # the same draws as cold start


# -- model-based: what the model is told ----------------------------------------------------


@pytest.mark.parametrize("name", ["tpe", "gp"])
def test_optuna_study_starts_with_the_priors_configs_as_trials(name, needle_space, needle_evaluate,
                                                                needle_measurements) -> None:
    priors = _priors(needle_measurements)
    strategy = make_strategy(name, needle_space, seed=0, prior_trials=3)
    run(strategy, needle_evaluate, max_trials=4, priors=priors)
    first = _ranked(priors, needle_space)[:3]
    trials = [t for t in strategy.study.trials if t.value is not None][:3]
    assert [tuple(t.params[n] for n in needle_space.names) for t in trials] == [needle_space.to_indices(c) for c in first]
    # Completed with the time measured here, not the prior's (re-searched, not copied).
    assert [t.value for t in trials] == pytest.approx([math.log(needle_evaluate(c).median_ms) for c in first])


def test_ga_initial_population_holds_the_priors_best(needle_space, needle_evaluate, needle_measurements) -> None:
    priors = _priors(needle_measurements)
    strategy = make_strategy("ga", needle_space, seed=0, prior_trials=3)
    run(strategy, needle_evaluate, max_trials=strategy.n_startup, priors=priors)
    first = _ranked(priors, needle_space)[:3]
    population = [tuple(individual) for individual in strategy._evaluated]
    assert population[:3] == [needle_space.to_indices(c) for c in first]


def test_skopt_is_told_the_priors_best_as_points(needle_space, needle_evaluate, needle_measurements) -> None:
    priors = _priors(needle_measurements)
    strategy = make_strategy("skopt", needle_space, seed=0, prior_trials=3)
    # Long enough for the model to propose (it is told its points in a batch before that).
    run(strategy, needle_evaluate, max_trials=2 * strategy.n_startup + 2, priors=priors)
    first = _ranked(priors, needle_space)[:3]
    assert strategy._optimizer.Xi[:3] == [strategy._coordinates(c) for c in first]
    assert strategy._optimizer.yi[:3] == pytest.approx([math.log(needle_evaluate(c).median_ms) for c in first])


@pytest.mark.parametrize("name", strategy_names())
def test_infeasible_priors_are_never_asked(name, needle_space, needle_evaluate, needle_measurements) -> None:
    """A prior from a GPU with more shared memory may name configs this space cannot run."""
    infeasible = [c for c in needle_space.configs() if not needle_space.is_feasible(c)]
    assert infeasible
    priors = [Measurement(config=c, workload=WORKLOAD, status=Status.OK, median_ms=0.001 * (i + 1), source="prior",
                          fingerprint="bigger-gpu") for i, c in enumerate(infeasible)]
    history = run(make_strategy(name, needle_space, seed=0), needle_evaluate, max_trials=10, priors=priors)
    assert all(needle_space.is_feasible(t.config) for t in history.trials)


# -- recovery from a misleading prior -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", MODEL_BASED)
def test_a_misleading_prior_costs_a_few_trials(name, needle_space, needle_evaluate, needle_measurements,
                                               needle_optimum_ms) -> None:
    """Told the table upside down, a strategy still finds the optimum about as fast as cold."""
    budget = 40 if name == "gp" else 60
    misleading = _priors(needle_measurements, invert=True)
    cold, misled = [], []
    for seed in range(5):
        cold.append(_evals_to_optimum(run(make_strategy(name, needle_space, seed=seed), needle_evaluate,
                                          max_trials=budget), needle_optimum_ms))
        misled.append(_evals_to_optimum(run(make_strategy(name, needle_space, seed=seed), needle_evaluate,
                                            max_trials=budget, priors=misleading), needle_optimum_ms))
    # The priors' best are measured first whatever they are; after MIN_CHECKS measurements
    # the guide stops following them. What is left is a model that saw the worst corner.
    assert np.median(misled) <= np.median(cold) + 3 + MIN_CHECKS


# -- priors through the strategy's API, not a field value --------------------------------------


@pytest.mark.parametrize("name", ["grid", "random", "tpe"])
def test_warm_start_orders_the_first_asks(name: str, needle_space, needle_measurements) -> None:
    """Priors handed to ``warm_start`` come first; their ``source`` field plays no part."""
    priors = [dataclasses.replace(m, source="measured", fingerprint="other-gpu") for m in needle_measurements]
    best = _ranked(priors, needle_space)[0]
    strategy = make_strategy(name, needle_space, seed=0)
    strategy.warm_start(priors)
    assert strategy.ask() == best


def test_a_prior_told_as_a_trial_is_a_trial(needle_space, needle_measurements) -> None:
    """``tell`` records a measurement of this study whatever its ``source`` says: no magic value."""
    ok = sorted((m for m in needle_measurements if m.ok and needle_space.is_feasible(m.config)),
                key=lambda m: m.median_ms)
    strategy = make_strategy("grid", needle_space, seed=0)
    strategy.tell(ok[0].config, dataclasses.replace(ok[0], source="prior"))
    asked = [strategy.ask() for _ in range(5)]
    assert ok[0].config not in asked, "a told config is measured: asking it again would repeat a trial"


def _twin_priors_and_evaluate() -> tuple:
    """A 12 x 12 space whose priors rank it exactly as the target does (agreement 1.0), told
    from another GPU: after the priors' best, each guided ask is a near-tie that cannot beat it."""
    from flashtune.search import SearchSpace

    space = SearchSpace({"a": list(range(12)), "b": list(range(12))})

    def time_ms(config: Config) -> float:
        return 1.0 + config["a"] + 0.5 * config["b"]

    priors = [Measurement(Config(a=a, b=b), None, Status.OK, median_ms=2 * time_ms(Config(a=a, b=b)),
                          source="prior", fingerprint="other-gpu") for a in range(12) for b in range(12)]
    return space, priors, lambda config: Measurement(config, None, Status.OK, median_ms=time_ms(config))


@pytest.mark.parametrize("patience", [0, 4])
def test_the_priors_order_is_left_after_guided_asks_stop_paying(patience: int) -> None:
    space, priors, evaluate = _twin_priors_and_evaluate()
    strategy = make_strategy("tpe", space, seed=0, prior_patience=patience)
    guided: list[Config] = []
    next_open = strategy.guide.next_open

    def recording(is_open):  # the guide itself, its answers noted
        config = next_open(is_open)
        if config is not None:
            guided.append(config)
        return config

    strategy.guide.next_open = recording
    run(strategy, evaluate, max_trials=40, priors=priors)
    assert strategy.guide.trusted  # the priors agree here: only the patience rule stops them
    if patience:
        assert len(guided) == patience  # none beat the priors' best, measured first
    else:
        assert len(guided) >= 12  # every other ask after the start, the whole study long


def test_at_most_three_prior_trials_per_source() -> None:
    """Six prior trials from one source are its near-ties; from two sources, each one's three best."""
    space, priors, evaluate = _twin_priors_and_evaluate()
    other = [dataclasses.replace(m, fingerprint="third-gpu", median_ms=1000.0 - m.median_ms) for m in priors]
    for told, first in ((priors, 3), ([*priors, *other], 6)):
        strategy = make_strategy("tpe", space, seed=0, prior_trials=6)
        history = run(strategy, evaluate, max_trials=first + 1, priors=told)
        book = PriorBook()
        for m in told:
            book.add(m)
        assert [t.config for t in history.trials][:first] == book.ranked()[:first]
        assert history.trials[first].config not in book.ranked()[:6]  # then the center, not a seventh prior


def test_the_cover_counts_the_priors_as_seen_unless_part_of_the_space_did_not_fit_them() -> None:
    """Priors that ran the whole space stand in for the cover's landmarks they show; priors whose
    source could not fit a share of it (another head dim's shared memory) are blind there, and
    the cover is the one a cold start measures, the configs they could not run included; a
    config that failed for its own sake (a compile error) fails here too and does not count
    (issue 21)."""
    space, priors, _ = _twin_priors_and_evaluate()
    cold_lead, _ = make_strategy("gp", space, seed=0)._plan_start()

    def failing(status: Status) -> list[Measurement]:  # every config with a = 11: a twelfth of the space
        return [dataclasses.replace(m, status=status, median_ms=math.inf) if m.config["a"] == 11 else m
                for m in priors]

    leads = {}
    for name, told in (("ran everything", priors), ("did not fit", failing(Status.OUT_OF_RESOURCES)),
                       ("broken", failing(Status.COMPILE_ERROR))):
        warm = make_strategy("gp", space, seed=0)
        warm.warm_start(told)
        leads[name], _ = warm._plan_start()
        first = warm.guide.ranking()[:3]
        assert leads[name][:3] == first and Config(a=0, b=0) in first
    assert leads["did not fit"][3:] == cold_lead
    assert Config(a=11, b=0) in cold_lead  # an end the source could not run: measured here
    # The priors' best shows a = 0 and b = 0: counted as seen, the cover needs one config less.
    assert leads["ran everything"][3:] != cold_lead and len(leads["ran everything"]) < len(leads["did not fit"])
    assert leads["broken"] == leads["ran everything"]


def test_the_cover_skips_the_choices_the_priors_tried_anywhere_not_only_at_their_best() -> None:
    """Issue 20, tuner target in a run: the studies before showed every load mode, and the cover
    measured the slow ones again because only the priors' three best counted as seen."""
    from flashtune.search import SearchSpace

    space = SearchSpace({"stages": (1, 2, 3, 4), "loads": ("pointer", "tma", "gluon")})
    slowness = {"pointer": 1.0, "tma": 2.0, "gluon": 4.0}
    priors = [Measurement(Config(stages=s, loads=mode), None, Status.OK, median_ms=slowness[mode] + s / 10,
                          source="prior", fingerprint="other-gpu") for s in (2, 3) for mode in slowness]
    cold_lead, _ = make_strategy("gp", space, seed=0)._plan_start()
    warm = make_strategy("gp", space, seed=0)
    warm.warm_start(priors)
    lead, _ = warm._plan_start()
    assert [c["loads"] for c in lead[:3]] == ["pointer", "pointer", "tma"]  # the priors' best first
    # gluon ran at the middle of the stage range where the priors came from: not measured again.
    assert not any(c["loads"] == "gluon" and c["stages"] in (2, 3) for c in lead)
    assert any(c["loads"] == "gluon" and c["stages"] in (2, 3) for c in cold_lead)
    assert {c["stages"] for c in lead} >= {1, 4}  # the ends no prior ran are still measured


def test_the_guide_counts_as_tried_what_ran_or_failed_for_its_own_sake_not_what_did_not_fit() -> None:
    configs = [Config(a=a) for a in range(4)]
    statuses = [Status.OK, Status.OK, Status.COMPILE_ERROR, Status.OUT_OF_RESOURCES]
    book = PriorBook()
    for config, status in zip(configs, statuses):
        book.add(Measurement(config, None, status, median_ms=1.0 if status == Status.OK else math.inf,
                             source="prior", fingerprint="other-gpu"))
    guide = PriorGuide(book, lambda config: config)
    assert guide.tried() == configs[:3]
    assert guide.did_not_fit() == {configs[3]}
