"""CandidatePool: open feasible configs, repair of proposals, start designs."""

from __future__ import annotations

import numpy as np
import pytest

from flashtune.kernels.config import Config
from flashtune.search import SearchSpace
from flashtune.search._candidates import CandidatePool


@pytest.fixture
def space() -> SearchSpace:
    # 5 x 4 = 20 configs; the two largest a with b == 3 are infeasible.
    return SearchSpace({"a": (1, 2, 4, 8, 16), "b": (0, 1, 2, 3)}, lambda c: not (c["a"] >= 8 and c["b"] == 3))


def test_pool_holds_exactly_the_feasible_configs(space) -> None:
    pool = CandidatePool(space)
    assert len(pool) == 18 == pool.n_open
    assert all(space.is_feasible(c) for c in pool.configs)
    assert pool.points.min() == 0.0 and pool.points.max() == 1.0


def test_close_and_is_open(space) -> None:
    pool = CandidatePool(space)
    config = Config(a=2, b=1)
    assert pool.is_open(config)
    pool.close(config)
    assert not pool.is_open(config) and pool.n_open == 17
    pool.close(Config(a=16, b=3))  # infeasible: nothing to close, no error
    assert not pool.is_open(Config(a=16, b=3))


def test_nearest_open_moves_an_infeasible_proposal_to_a_neighbour(space) -> None:
    pool = CandidatePool(space)
    rng = np.random.default_rng(0)
    proposal = pool.point(Config(a=16, b=3))
    assert pool.nearest_open(proposal, rng) == Config(a=16, b=2)
    pool.close(Config(a=16, b=2))
    # (8, 3) is infeasible too; of the rest, (8, 2) at sqrt(1/16 + 1/9) = 0.42 beats
    # (4, 3) at 0.5 and (16, 1) at 0.67.
    assert pool.nearest_open(proposal, rng) == Config(a=8, b=2)


def test_nearest_open_breaks_ties_at_random(space) -> None:
    pool = CandidatePool(space)
    centre = np.array([0.5, 0.5])  # a=4 exactly, b between 1 and 2
    picks = {pool.nearest_open(centre, np.random.default_rng(seed)) for seed in range(20)}
    assert picks == {Config(a=4, b=1), Config(a=4, b=2)}


def test_nearest_open_is_none_when_all_are_closed(space) -> None:
    pool = CandidatePool(space)
    for config in pool.configs:
        pool.close(config)
    rng = np.random.default_rng(0)
    assert pool.nearest_open([0.0, 0.0], rng) is None
    assert pool.random_open(rng) is None
    assert pool.spread_open(3, rng) == [] and pool.latin_open(3, rng) == []


def test_spread_design_starts_in_the_corners(space) -> None:
    pool = CandidatePool(space)
    design = pool.spread_open(4, np.random.default_rng(1), around=[pool.point(Config(a=4, b=1))])
    assert len(set(design)) == 4
    corners = {Config(a=1, b=0), Config(a=1, b=3), Config(a=16, b=0), Config(a=16, b=2)}
    assert set(design) <= corners | {Config(a=8, b=2)}


def test_latin_design_covers_every_value(space) -> None:
    pool = CandidatePool(space)
    design = pool.latin_open(5, np.random.default_rng(3))
    assert len(set(design)) == 5
    assert all(pool.is_open(c) for c in design)
    # Five points over five values of a: each value about once (a moved point may repeat one).
    assert len({c["a"] for c in design}) >= 4
    assert len({c["b"] for c in design}) >= 3


def test_latin_design_skips_excluded_configs(space) -> None:
    pool = CandidatePool(space)
    excluded = pool.configs[:10]
    design = pool.latin_open(8, np.random.default_rng(0), exclude=excluded)
    assert not set(design) & set(excluded) and len(set(design)) == 8


def test_complete_fills_a_knob_with_one_value() -> None:
    space = SearchSpace({"a": (1, 2), "loads": ("pointer",)})
    pool = CandidatePool(space)
    assert pool.complete(Config(a=2)) == Config(a=2, loads="pointer")
    assert pool.complete(Config(a=3)) is None
    assert pool.complete(Config(a=2, extra=1)) is None
    assert CandidatePool(SearchSpace({"a": (1, 2), "b": (1, 2)})).complete(Config(a=1)) is None


def test_cover_shows_every_choice_and_both_ends() -> None:
    space = SearchSpace({"a": (1, 2, 4, 8, 16), "mode": ("x", "y", "z"), "flag": (False, True)},
                        lambda c: not (c["a"] == 16 and c["mode"] == "z"))
    pool = CandidatePool(space)
    for seed in range(5):
        design = pool.cover_open(np.random.default_rng(seed))
        assert {c["a"] for c in design} >= {1, 16}  # ordered: both ends, not every value
        assert {c["mode"] for c in design} == {"x", "y", "z"} and {c["flag"] for c in design} == {False, True}
        # Three configs show the choices at the middle (a=4), two more the ends of a.
        assert len(design) == 5 and all(pool.is_open(c) for c in design)


def test_cover_shows_each_choice_at_the_middle_of_the_ordered_ranges() -> None:
    # A kernel variant seen only at an end of the other knobs is confounded with that end
    # (issue 21: both Gluon kernels first measured at BLOCK_N 32, a third below their best).
    space = SearchSpace({"n": (16, 32, 64, 128, 256), "m": (16, 32, 64, 128, 256), "mode": ("p", "q", "r", "s")},
                        lambda c: not (c["mode"] == "s" and c["n"] == 64))
    pool = CandidatePool(space)
    for seed in range(5):
        design = pool.cover_open(np.random.default_rng(seed))
        shows = {}
        for config in design:
            shows.setdefault(config["mode"], config)  # the first config showing each choice
        assert set(shows) == {"p", "q", "r", "s"}
        assert all((c["n"], c["m"]) == (64, 64) for mode, c in shows.items() if mode != "s")
        assert shows["s"]["m"] == 64 and shows["s"]["n"] in (32, 128)  # the nearest open to the middle
        # The ends of both ordered knobs are shown too, by configs after the choices'.
        assert {c["n"] for c in design} >= {16, 256} and {c["m"] for c in design} >= {16, 256}
        assert len(design) == 6


def test_cover_of_ordered_tunables_alone_is_the_set_cover_of_their_ends() -> None:
    space = SearchSpace({"a": (1, 2, 4, 8), "b": (1, 2, 4, 8), "c": (0, 1)}, lambda c: c["a"] * c["b"] <= 32)
    pool = CandidatePool(space)
    for seed in range(5):
        design = pool.cover_open(np.random.default_rng(seed))
        assert {c["a"] for c in design} >= {1, 8} and {c["b"] for c in design} >= {1, 8}
        assert {c["c"] for c in design} == {0, 1} and len(design) == 2  # (1, 8, .) and (8, 1, .)


def test_cover_counts_what_was_seen_and_skips_closed_configs() -> None:
    space = SearchSpace({"a": (1, 2, 3), "mode": ("x", "y")})
    pool = CandidatePool(space)
    seen = [Config(a=1, mode="x")]
    pool.close(Config(a=3, mode="y"))
    design = pool.cover_open(np.random.default_rng(0), seen=seen)
    # (1, x) shows a=1, but x only at an end of a's range, confounded with it: both modes are
    # shown at the middle, then a=3, which (3, y), closed, cannot show.
    assert Config(a=3, mode="y") not in design and seen[0] not in design
    assert design[:2] == [Config(a=2, mode="x"), Config(a=2, mode="y")] or \
        design[:2] == [Config(a=2, mode="y"), Config(a=2, mode="x")]
    assert design[2:] == [Config(a=3, mode="x")]
    # Seen at the middle, a mode is not shown again.
    design = CandidatePool(space).cover_open(np.random.default_rng(0), seen=[Config(a=2, mode="x")])
    assert Config(a=2, mode="y") in design and not any(c["mode"] == "x" and c["a"] == 2 for c in design)
    assert {c["a"] for c in design} == {1, 2, 3}


def test_a_prior_that_shows_a_load_mode_only_at_one_stage_does_not_take_it_out_of_the_cover() -> None:
    # Issue 20, D256 in a run: the earlier studies' best configs that fit were a Gluon tile at
    # one stage (0.61 of the optimum, the same tile at two stages); counted as showing the Gluon
    # loads, the cover never measured them at the middle of the stage range.
    space = SearchSpace({"stages": (1, 2, 3, 4), "loads": ("pointer", "gluon"), "warps": (4, 8)})
    prior = Config(stages=1, loads="gluon", warps=4)
    design = CandidatePool(space).cover_open(np.random.default_rng(0), seen=[prior])
    middle = [c for c in design if c["stages"] in (2, 3)]
    assert {c["loads"] for c in middle} == {"pointer", "gluon"}
    # warps has no middle: a config at either of its two values is not "at an end".
    prior = Config(stages=2, loads="gluon", warps=8)
    design = CandidatePool(space).cover_open(np.random.default_rng(0), seen=[prior])
    assert not any(c["loads"] == "gluon" and c["stages"] in (2, 3) for c in design)


def test_ordered_and_unordered_tunables() -> None:
    space = SearchSpace({"a": (1, 2, 4), "b": (1.5, 2.5), "mode": ("x", "y"), "flag": (False, True)})
    assert space.is_ordered("a") and space.is_ordered("b")
    assert not space.is_ordered("mode") and not space.is_ordered("flag")
    assert space.landmarks("a") == (1, 4) and space.landmarks("mode") == ("x", "y")


def test_a_trust_region_widens_until_it_holds_the_least_asked_for() -> None:
    from flashtune.objectives.types import Measurement, Status
    from flashtune.search import SearchSpace, make_strategy

    # Even sums only: no one-step neighbour of an admitted config is admitted.
    space = SearchSpace({"a": list(range(9)), "b": list(range(9))}, restrictions=["(a + b) % 2 == 0"])
    gp = make_strategy("gp", space, seed=0, trust_least=12)
    for a, b in ((4, 4), (2, 2), (6, 6)):
        config = Config(a=a, b=b)
        gp.tell(config, Measurement(config, None, Status.OK, median_ms=1.0 + a))
    best = [Config(a=a, b=b) for a, b in ((4, 4), (2, 2), (6, 6))]
    near = gp.candidate_positions(1, 3, 12)
    assert len(gp.pool.open_near(best, 1, or_all=False)) == 0
    steps = next(s for s in range(1, 9) if len(gp.pool.open_near(best, s, or_all=False)) >= 12)
    assert steps > 1 and len(near) >= 12 and list(near) == list(gp.pool.open_near(best, steps))
    assert len(near) < gp.pool.n_open  # widened as far as needed, not to the whole space
    assert list(gp.candidate_positions(1, 3)) == list(gp.pool.open_near(best, 1))  # least 0: as before


def test_a_trust_region_widens_a_step_for_every_stretch_without_a_new_best() -> None:
    from flashtune.objectives.types import Measurement, Status
    from flashtune.search import make_strategy

    space = SearchSpace({"a": list(range(9)), "b": list(range(9))})
    gp = make_strategy("gp", space, seed=0, trust_widen_after=2)
    best = Config(a=4, b=4)
    gp.tell(best, Measurement(best, None, Status.OK, median_ms=1.0))
    assert list(gp.candidate_positions(1, 1, 0, 2)) == list(gp.pool.open_near([best], 1))
    # Trials without a new best (far from the best, so the one-step region stays open).
    for k, (a, b) in enumerate(((0, 0), (8, 8), (0, 8), (8, 0))):
        config = Config(a=a, b=b)
        gp.tell(config, Measurement(config, None, Status.OK, median_ms=2.0 + k))
        steps = 1 + (k + 1) // 2
        assert list(gp.candidate_positions(1, 1, 0, 2)) == list(gp.pool.open_near([best], steps))
    assert len(gp.candidate_positions(1, 1, 0, 2)) > len(gp.candidate_positions(1, 1))  # 0: not widened
    improved = Config(a=4, b=5)
    gp.tell(improved, Measurement(improved, None, Status.OK, median_ms=0.5))
    assert list(gp.candidate_positions(1, 1, 0, 2)) == list(gp.pool.open_near([improved], 1))  # a new best resets it


def test_gp_widens_its_region_only_on_a_space_of_at_least_trust_widen_from_configs() -> None:
    from flashtune.objectives.types import Measurement, Status
    from flashtune.search import make_strategy

    space = SearchSpace({"a": list(range(9)), "b": list(range(9))})  # 81 admitted configs
    best = Config(a=4, b=4)
    asked = {}
    for widen_from in (81, 82):
        gp = make_strategy("gp", space, seed=0, trust_widen_after=1, trust_widen_from=widen_from)
        gp.tell(best, Measurement(best, None, Status.OK, median_ms=1.0))
        for k, (a, b) in enumerate(((0, 0), (8, 8), (0, 8))):  # three trials without a new best
            config = Config(a=a, b=b)
            gp.tell(config, Measurement(config, None, Status.OK, median_ms=2.0 + k))
        asked[widen_from] = {(c["a"], c["b"]) for c in gp._candidate_params()}
        unwidened = {(gp.pool.configs[i]["a"], gp.pool.configs[i]["b"]) for i in gp.candidate_positions(1, 3, 0, 0)}
    assert asked[82] == unwidened  # 81 < 82: the small space keeps the one-step region
    assert asked[81] > unwidened  # 81 >= 81: widened by the stalled trials


def test_a_step_the_limits_forbid_is_taken_with_the_least_change_of_the_other_knobs() -> None:
    # A kernel's coupling: a wider tile fits fewer stages (tile x stages <= 256).
    space = SearchSpace({"n": (32, 64, 128), "stages": (1, 2, 3, 4, 5)}, restrictions=["n * stages <= 256"])
    pool = CandidatePool(space)
    centre = Config(n=64, stages=4)

    def region(steps: int, repaired: bool) -> set[tuple[int, int]]:
        near = pool.open_near([centre], steps, or_all=False, repaired=repaired)
        return {(pool.configs[i]["n"], pool.configs[i]["stages"]) for i in near} - {(64, 4)}

    assert region(1, repaired=False) == {(32, 4), (64, 3)}  # n=128 is out of reach at any stage count
    # n up: (128, 2) is three steps off, the fewest that fit; stages up: (32, 5) two.
    assert region(1, repaired=True) == {(32, 4), (64, 3), (128, 2), (32, 5)}
    # A widened region widens the repaired steps by as much.
    assert region(2, repaired=True) == region(2, repaired=False) | {(128, 2), (128, 1), (32, 5)}
    pool.close(Config(n=128, stages=2))  # measured: the repair does not move on to the next one
    assert region(1, repaired=True) == {(32, 4), (64, 3), (32, 5)}


def test_gp_scores_the_repaired_steps_unless_told_not_to() -> None:
    from flashtune.objectives.types import Measurement, Status
    from flashtune.search import make_strategy

    space = SearchSpace({"n": (32, 64, 128), "stages": (1, 2, 3, 4, 5)}, restrictions=["n * stages <= 256"])
    asked = {}
    for repaired in (True, False):
        gp = make_strategy("gp", space, seed=0, trust_best=1, trust_repaired=repaired)
        best = Config(n=64, stages=4)
        gp.tell(best, Measurement(best, None, Status.OK, median_ms=1.0))
        # The GP's candidates are value indices, as Optuna's params.
        asked[repaired] = {(space.values("n")[c["n"]], space.values("stages")[c["stages"]])
                           for c in gp._candidate_params()}
    assert asked[False] == {(32, 4), (64, 3)}
    assert asked[True] == {(32, 4), (64, 3), (128, 2), (32, 5)}


def test_untried_steps_are_the_best_s_ordered_steps_no_trial_has_taken() -> None:
    # tile x stages with a limit (a 128 tile fits at most two stages), and a load mode.
    space = SearchSpace({"tile": (32, 64, 128), "stages": (1, 2, 3), "loads": ("a", "b")},
                        lambda c: not (c["tile"] == 128 and c["stages"] == 3))
    pool = CandidatePool(space)
    centre = Config(tile=64, stages=3, loads="a")
    pool.close(centre)
    steps = pool.untried_steps(centre, np.random.default_rng(0))
    # tile down, stages down, and tile up repaired to two stages; no step of the unordered loads.
    assert sorted(steps, key=Config.key) == sorted([Config(tile=32, stages=3, loads="a"),
                                                    Config(tile=64, stages=2, loads="a"),
                                                    Config(tile=128, stages=2, loads="a")], key=Config.key)
    # A step taken once (asked or told) is not offered again.
    pool.close(Config(tile=128, stages=2, loads="a"))
    assert Config(tile=128, stages=2, loads="a") not in pool.untried_steps(centre, np.random.default_rng(0))
    assert len(pool.untried_steps(centre, np.random.default_rng(0))) == 2


def test_a_stalled_study_restarts_with_its_best_s_untried_steps() -> None:
    from flashtune.objectives.types import Measurement, Status
    from flashtune.search import make_strategy

    space = SearchSpace({"a": tuple(range(8)), "b": tuple(range(8))})
    strategy = make_strategy("gp", space, seed=0, restart_after=4, restart_size=3, n_startup=4)
    best = Config(a=3, b=3)
    # The start, then a best and four trials that do not beat it: the next ask restarts.
    told = [best, Config(a=0, b=0), Config(a=7, b=7), Config(a=0, b=7), Config(a=7, b=0)]
    strategy._lead, strategy._queue = [], []  # the start design is spent
    for i, config in enumerate(told):
        strategy.tell(config, Measurement(config, None, Status.OK, median_ms=1.0 if config == best else 2.0 + i))
    restart = [strategy.ask() for _ in range(3)]
    neighbours = {Config(a=2, b=3), Config(a=4, b=3), Config(a=3, b=2), Config(a=3, b=4)}
    assert set(restart) <= neighbours and len(set(restart)) == 3
    # With the option off, the restart is a Latin design of the whole open space.
    off = make_strategy("gp", space, seed=0, restart_after=4, restart_size=3, n_startup=4, restart_steps=0)
    off._lead, off._queue = [], []
    for i, config in enumerate(told):
        off.tell(config, Measurement(config, None, Status.OK, median_ms=1.0 if config == best else 2.0 + i))
    assert not set(off.ask() for _ in range(3)) <= neighbours
