"""The portfolio strategy, the covering start design and the restart rule (issue 15)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from needles import WORKLOAD, bowl  # tests/search is on sys.path (no __init__.py)

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status
from flashtune.search import SearchSpace, make_strategy, run

MODEL_BASED = ["ga", "gp", "skopt", "tpe"]


def test_every_member_is_told_every_measurement(needle_space, needle_evaluate) -> None:
    portfolio = make_strategy("portfolio", needle_space, seed=0, members="tpe,ga,random", policy="bandit")
    history = run(portfolio, needle_evaluate, max_trials=24)
    measured = {t.config for t in history.trials}
    assert len(measured) == 24
    tpe, ga, random = portfolio.members
    assert set(tpe.observed) == measured and set(ga.observed) == measured
    # No member would ask a config another one measured: each closed them all.
    assert not any(tpe.pool.is_open(c) or ga.pool.is_open(c) for c in measured)
    assert all(random.ask() not in measured for _ in range(10))
    assert portfolio.turns.sum() == 24 and (portfolio.turns > 0).all()


def test_the_first_member_runs_the_shared_start_design(needle_space, needle_evaluate) -> None:
    portfolio = make_strategy("portfolio", needle_space, seed=1, members="tpe,ga", policy="round_robin")
    start = portfolio.members[0].n_startup
    run(portfolio, needle_evaluate, max_trials=start + 2)
    # The start design is one member's (center, cover, Latin), not one per member.
    assert portfolio.turns.tolist() == [start + 1, 1]
    assert not portfolio.members[1].in_start_design  # the GA found its start measured


def test_round_robin_takes_turns_after_the_start(needle_space, needle_evaluate) -> None:
    portfolio = make_strategy("portfolio", needle_space, seed=0, members="tpe,random", policy="round_robin")
    run(portfolio, needle_evaluate, max_trials=20)
    start = portfolio.members[0].n_startup
    assert portfolio.turns.tolist() == [start + (20 - start) // 2, (20 - start) // 2]


def test_the_bandit_keeps_every_member_above_its_floor(needle_space, needle_evaluate) -> None:
    portfolio = make_strategy("portfolio", needle_space, seed=2, members="tpe,ga,random", policy="bandit", floor=0.6)
    run(portfolio, needle_evaluate, max_trials=60)
    assert portfolio.plays.sum() == 60 - portfolio.members[0].n_startup
    assert (portfolio.plays >= 0.6 / 3 * portfolio.plays.sum() - 1).all()
    assert (portfolio.wins <= portfolio.plays).all()


def test_a_member_that_runs_out_hands_over() -> None:
    space = SearchSpace({"a": tuple(range(6))})
    portfolio = make_strategy("portfolio", space, seed=0, members="grid,random")
    history = run(portfolio, bowl(space, (3,)), max_trials=50)
    assert sorted(t.config["a"] for t in history.trials) == list(range(6))
    assert portfolio.ask() is None


@pytest.mark.parametrize(("options", "match"), [
    ({"members": "tpe,portfolio"}, "members"), ({"members": "tpe,tpe"}, "members"), ({"members": "tpe,nope"}, "members"),
    ({"members": ""}, "members"), ({"policy": "greedy"}, "policy"), ({"floor": 1.5}, "floor"),
])
def test_bad_portfolio_options_raise(options, match, needle_space) -> None:
    with pytest.raises(ValueError, match=match):
        make_strategy("portfolio", needle_space, **options)


@pytest.mark.parametrize("name", ["tpe", "ga", "skopt"])
def test_the_start_design_shows_every_choice_and_both_ends(name) -> None:
    space = SearchSpace({"BLOCK_M": (32, 64, 128, 256), "num_stages": (1, 2, 3, 4, 5), "loads": ("p", "t", "w"),
                         "grid": ("tiles", "persistent")})
    history = run(make_strategy(name, space, seed=4), bowl(space, (2, 2, 1, 0)), max_trials=5)
    start = [t.config for t in history.trials]
    assert start[0] == Config(BLOCK_M=64, num_stages=3, loads="t", grid="persistent") or \
        space.to_indices(start[0])[1] == 2  # the center comes first (ties between middles drawn)
    for knob, wanted in [("BLOCK_M", {32, 256}), ("num_stages", {1, 5}), ("loads", {"p", "t", "w"}),
                         ("grid", {"tiles", "persistent"})]:
        assert wanted <= {c[knob] for c in start}, knob


def test_a_stalled_search_restarts_with_a_fresh_design() -> None:
    space = SearchSpace({"a": tuple(range(12)), "b": tuple(range(12))})
    flat = {Config(a=a, b=b): 2.0 for a in range(12) for b in range(12)}
    flat[Config(a=6, b=6)] = 1.0  # the center: the best from the first trial, nothing beats it

    def evaluate(config: Config) -> Measurement:
        ms = flat[config]
        return Measurement(config=config, workload=WORKLOAD, status=Status.OK, median_ms=ms, p20_ms=ms, p80_ms=ms)

    # restart_steps=0: the design alone (the best's untried steps first: test_candidates.py).
    strategy = make_strategy("tpe", space, seed=0, n_startup=4, restart_after=5, restart_size=3, restart_steps=0)
    restarts = []
    original = strategy.pool.latin_open

    def spy(n, rng, **kwargs):
        restarts.append(n)
        return original(n, rng, **kwargs)

    strategy.pool.latin_open = spy
    run(strategy, evaluate, max_trials=30)
    # After the start (4 trials), a restart of 3 configs each time 5 trials bring no new best.
    assert restarts.count(3) >= 4


def test_restart_after_zero_never_restarts(needle_space, needle_evaluate) -> None:
    strategy = make_strategy("ga", needle_space, seed=0, restart_after=0)
    run(strategy, needle_evaluate, max_trials=40)
    assert strategy._restart == []  # the rule's own state


def test_the_trust_region_widens_with_each_restart() -> None:
    space = SearchSpace({"a": tuple(range(12)), "b": tuple(range(12))})
    first: list[Config] = []

    def evaluate(config: Config) -> Measurement:
        first.append(config)
        ms = 1.0 if config == first[0] else 2.0  # the first config wins at once; nothing beats it
        return Measurement(config=config, workload=WORKLOAD, status=Status.OK, median_ms=ms, p20_ms=ms, p80_ms=ms)

    def reach(strategy) -> int:
        return max(abs(c["a"] - first[0]["a"]) + abs(c["b"] - first[0]["b"]) for c in strategy.candidates(1, 1))

    strategy = make_strategy("tpe", space, seed=0, n_startup=4, restart_after=4, restart_size=2)
    history = run(strategy, evaluate, max_trials=4)
    assert reach(strategy) == 1
    run(strategy, evaluate, max_trials=26, history=history)
    stalls = strategy._stalls  # the rule's own count
    assert stalls >= 3 and reach(strategy) == 1 + stalls


def _flat_space_and_evaluate() -> tuple[SearchSpace, Callable[[Config], Measurement]]:
    """Every config 1 ms: after the first trial nothing is a new best (the study stalls)."""
    space = SearchSpace({"a": list(range(8)), "b": list(range(8))})
    return space, lambda config: Measurement(config, None, Status.OK, median_ms=1.0)


def test_the_lead_asks_until_the_study_stalls_then_each_other_member_once() -> None:
    space, evaluate = _flat_space_and_evaluate()
    portfolio = make_strategy("portfolio", space, seed=0, members="tpe,random", policy="lead", patience=3)
    answered: list[list[int]] = []
    run(portfolio, evaluate, max_trials=24, callbacks=[lambda trial, trials: answered.append(portfolio.turns.tolist())])
    start = portfolio.members[0].n_startup
    # After the start design the study has gone start - 1 trials without a new best: random's
    # turn comes at once, then again every 3 asks (its own turn counts: it found nothing either).
    random_turns = [n for n, (before, after) in enumerate(zip([[0, 0], *answered], answered), 1)
                    if after[1] > before[1]]
    assert random_turns == list(range(start + 1, 25, 3))
    assert portfolio.turns.sum() == 24


def test_the_lead_keeps_every_turn_while_it_finds_new_bests() -> None:
    space = SearchSpace({"a": list(range(40))})
    # Each new config is faster than every one before it: the study never stalls.
    clock = iter(range(1000, 0, -1))
    portfolio = make_strategy("portfolio", space, seed=0, members="tpe,random", policy="lead", patience=2)
    run(portfolio, lambda config: Measurement(config, None, Status.OK, median_ms=float(next(clock))), max_trials=30)
    assert portfolio.turns.tolist() == [30, 0]


def _asks(strategy, evaluate: Callable[[Config], Measurement], trials: int) -> list[Config]:
    return [t.config for t in run(strategy, evaluate, max_trials=trials).trials]


def _ever_faster() -> Callable[[Config], Measurement]:
    """Each new config faster than every one before it: the study never stalls."""
    clock = iter(range(1000, 0, -1))
    return lambda config: Measurement(config, None, Status.OK, median_ms=float(next(clock)))


@pytest.mark.parametrize("policy", ["lead", "fallback"])
def test_the_lead_member_runs_on_the_portfolios_own_seed(policy: str) -> None:
    # Issue 21: the GP-led default drew its GP a seed of its own, so it and GP alone were two
    # different samples of GP and ten seeds a file could not tell the policy from the draw.
    # While the lead keeps every turn, the portfolio asks exactly what the lead alone asks.
    space = SearchSpace({"a": list(range(12)), "b": list(range(6))})
    for seed in (3, 11):
        alone = _asks(make_strategy("tpe", space, seed=seed), _ever_faster(), 20)
        portfolio = make_strategy("portfolio", space, seed=seed, members="tpe,random", policy=policy, patience=2)
        assert _asks(portfolio, _ever_faster(), 20) == alone
        assert portfolio.turns.tolist() == [20, 0]


def test_under_fallback_the_others_never_ask_while_the_lead_can() -> None:
    # A flat study stalls at once: "lead" would hand random a turn every few asks.
    space, evaluate = _flat_space_and_evaluate()
    portfolio = make_strategy("portfolio", space, seed=0, members="tpe,random", policy="fallback", patience=1)
    alone = _asks(make_strategy("tpe", space, seed=0), evaluate, 30)
    assert _asks(portfolio, evaluate, 30) == alone
    assert portfolio.turns.tolist() == [30, 0]


def test_a_member_that_fails_hands_over_to_the_next() -> None:
    from flashtune.search.registry import register
    from flashtune.search.strategy import Strategy

    @register
    class FailsAfterFive(Strategy):
        """A user's strategy whose model breaks on its sixth ask (as a GP fit can)."""

        name = "fails_after_five_test"

        def __init__(self, space: SearchSpace, *, seed: int = 0, **options: object) -> None:
            super().__init__(space, seed=seed, **options)
            self._inner = make_strategy("random", space, seed=seed)
            self.asked = 0

        def ask(self) -> Config | None:
            self.asked += 1
            if self.asked > 5:
                raise RuntimeError("the model cannot be fitted")
            return self._inner.ask()

        def tell(self, config: Config, measurement: Measurement) -> None:
            self._inner.tell(config, measurement)

    space = SearchSpace({"a": list(range(10)), "b": list(range(4))})
    portfolio = make_strategy("portfolio", space, seed=0, members="fails_after_five_test,random", policy="fallback")
    configs = _asks(portfolio, _ever_faster(), 25)
    assert len(configs) == len(set(configs)) == 25
    assert portfolio.turns.tolist() == [5, 20]
    assert portfolio.failures == {"fails_after_five_test": "RuntimeError: the model cannot be fitted"}


def test_an_unknown_policy_is_one_clear_error() -> None:
    space = SearchSpace({"a": list(range(4))})
    with pytest.raises(ValueError, match="policy must be one of .*fallback"):
        make_strategy("portfolio", space, policy="gp_first")
