"""The ask/tell plumbing every model-based adapter shares (Optuna, DEAP, scikit-optimize).

docs/reference.md records (measured) out-of-the-box TPE and GP at random search's level on this
kernel's needle landscape. What earns a model its keep is done here, once:

- never ask a config the feasibility model rejects, nor one already asked or told: a
  model's proposal is moved to the nearest open feasible config (``CandidatePool``),
  so no trial is spent on a known answer and a converged model explores its neighbours;
- measure the best configs of the priors first (re-searched, not copied), and later keep
  every other ask for the priors' next best while their order agrees with the
  measurements here (``PriorGuide``): a misleading prior costs a few trials, not the study;
- start with a design that bets on no region: the middle of every range, then a few
  configs that show every choice of every unordered tunable at the middle of the ordered
  ranges and, apart, both ends of every ordered one (``CandidatePool.cover_open``), then a
  space-filling design; then the model;
- when the best has not moved for ``restart_after`` trials, restart: the best's one-value
  steps no trial has taken yet, then a fresh space-filling design of what is still open,
  before the model goes on, so a model stuck in one basin sees its centre's untried
  directions and the other basins, and a trust region one step wider;
- tell models log time, and failures as a penalty above the worst time seen, so
  multiplicative effects look additive and one failure does not flatten the rest.

An adapter implements ``_propose`` (the model's next config, any config of the space)
and ``_observe`` (a measured config and its cost), and may implement ``_rejected`` to
learn that its proposal was moved.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, ClassVar

import numpy as np

from flashtune.search._candidates import CandidatePool
from flashtune.search.failure_model import LEARNED_FAILURES, FailureModel
from flashtune.search.priors import PriorGuide
from flashtune.search.space import SearchSpace
from flashtune.search.strategy import Strategy, check_int_option, cost_ms
from flashtune.values.config import Config
from flashtune.values.types import Measurement, Status

#: At most this many of the priors' best configs per source are measured first, whatever
#: ``prior_trials`` asks: sources take turns in the ranking, so six trials from six sources are
#: each one's winner, while six from a single source are its near-ties, which a model placed
#: after the first three measures better (the portfolio's six took gemm 3090 -> 2080 Ti
#: from 23 evaluations to 2 % with three to more than 50, median of 5 seeds).
PRIOR_TRIALS_PER_SOURCE = 3

#: Start designs after the first config: ``latin`` (every value of every tunable about
#: equally often), ``spread`` (greedy maximin: corners first) or ``random``.
STARTUP_DESIGNS = ("latin", "spread", "random")

#: Share of the admitted configs that did not fit the priors' sources (``PriorBook.did_not_fit``)
#: at or above which the priors are blind to part of this space and the cover is planned as a
#: cold start plans it (``_plan_start``). A twentieth: a config or two at the edge of a
#: source's shared memory does not count, a source with other resource limits does
#: (D256's table did not fit 32 of the 72 configs D64 admits, the 128x128 tiles with 2-3
#: stages among them, and D64 full's optimum is one).
PRIORS_BLIND_SHARE = 0.05


class PooledStrategy(Strategy):
    """A strategy whose asks are open feasible configs: priors first, a start design, then a model.

    Options (every adapter has these, plus its own):
        n_startup: configs of the start design before the model proposes (priors count).
        start_center: measure the middle of every range first (after the priors' best).
        cover: then measure a covering design: every choice of every unordered tunable
            at the middle of the ordered ranges, then both ends of every ordered one
            (``CandidatePool.cover_open``).
        startup: the rest of the design, ``"latin"``, ``"spread"`` or ``"random"``.
        prior_trials: how many of the priors' best configs to measure first (at most
            ``PRIOR_TRIALS_PER_SOURCE`` per source of the priors).
        restart_after: trials without a new best after which a restart design of
            ``restart_size`` configs is measured (0: never restart).
        restart_size: configs in each restart design.
        restart_steps: of those, at most this many are one-value steps of an ordered tunable
            from the best that no trial has taken yet (``CandidatePool.untried_steps``); the
            rest are a Latin design of the open configs (GP's default is 3: measured there).
        prior_patience: asks taken from the priors' order (after their best) in a row
            without a new best, after which the priors' order is no longer followed in
            this study (0: follow it while it agrees, however long it does not pay).
        failure_model: set aside the configs a model learned from this study's failures
            predicts to fail with near certainty (``FailureModel``). Off by default: on the
            development set (cold, budget 50, 10 seeds) it changed no run of the default and
            gained nothing held out; the default's 1-3 failed evaluations a run fall mostly in
            the start design, before a model has evidence (docs/lab/2026-12-06.md).
        failure_confidence, failure_evidence: the model's ``confidence`` and ``evidence``.
        failure_explore: the chance that an ask ignores the model (a wrong rule then
            still gets tested, and a success refutes it).
    """

    options_defaults: ClassVar[dict[str, Any]] = {
        "n_startup": 8, "start_center": True, "cover": True, "startup": "latin", "prior_trials": 3,
        "restart_after": 12, "restart_size": 3, "restart_steps": 0, "prior_patience": 4,
        "failure_model": False, "failure_confidence": 0.8, "failure_evidence": 2, "failure_explore": 0.05,
    }

    def __init__(self, space: SearchSpace, *, seed: int = 0, **options: Any) -> None:
        super().__init__(space, seed=seed, **options)
        check_int_option(self, "n_startup", minimum=0)
        check_int_option(self, "prior_trials", minimum=0)
        check_int_option(self, "restart_after", minimum=0)
        check_int_option(self, "restart_size", minimum=1)
        check_int_option(self, "restart_steps", minimum=0)
        check_int_option(self, "prior_patience", minimum=0)
        check_int_option(self, "failure_evidence", minimum=1)
        if not 0.0 <= self.options["failure_explore"] <= 1.0:
            raise ValueError(f"{self.name}: option failure_explore must be in [0, 1], got {self.options['failure_explore']!r}")
        if self.options["startup"] not in STARTUP_DESIGNS:
            raise ValueError(f"{self.name}: startup must be one of {STARTUP_DESIGNS}, got {self.options['startup']!r}")
        self.rng = np.random.default_rng(seed)
        self.pool = CandidatePool(space)
        self.failure_model: FailureModel | None = None
        if self.options["failure_model"]:
            self.failure_model = FailureModel(space, confidence=float(self.options["failure_confidence"]),
                                              evidence=int(self.options["failure_evidence"]))
        # Its own generator (a child of the seed's), drawn from only once something is ruled
        # out: until then the study asks, seed for seed, what it asks without the model.
        self._failure_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        self._ruled_out: np.ndarray | None = None  # over pool.configs; None: to be recomputed
        #: Asks that followed the model's set-aside (a config it ruled out was not offered).
        self.asks_with_aside = 0
        self.guide = PriorGuide(self.priors, self.pool.complete)
        self._guided_turn = False  # after the start, every other ask may follow the priors
        # Guided asks not yet told, and guided asks told in a row without a new best: a
        # source whose ranking agrees with this GPU overall can still put this GPU's best
        # far down its list (a twin table whose objective differs), and following
        # it every other ask then spends half the budget on its near-ties.
        self._guided: set[Config] = set()
        self._guided_misses = 0
        self.observed: dict[Config, float] = {}
        # Built at the first ask: the lead (the priors' best, the center), then the start design.
        self._lead: list[Config] = []
        self._queue: list[Config] | None = None
        # The stall rule: trials measured here since the best last improved.
        self._best = math.inf
        self._since_best = 0
        self._stalls = 0  # restarts since the best last improved: each widens the trust region
        self._restart: list[Config] = []

    # -- the Strategy interface -------------------------------------------------------

    def ask(self) -> Config | None:
        self._apply_failure_model()
        if self.pool.n_open == 0:
            return None
        if self._queue is None:
            self._lead, self._queue = self._plan_start()
        config = self._pop_open(self._lead)
        if config is None:
            config = self._restart_config()
        if config is None:
            # After the priors' best and the center, every other ask follows the priors'
            # order while it holds up here (the design, then the model, take the rest):
            # steered by the priors, never handed over to them.
            self._guided_turn = not self._guided_turn
            if self._guided_turn and self._priors_still_pay():
                config = self.guide.next_open(self.pool.is_open)
                if config is not None:
                    self._guided.add(config)
        if config is None:
            config = self._pop_open(self._queue)
        if config is None:
            proposal = self._propose()
            config = proposal if proposal is not None and self.pool.is_open(proposal) else None
            if config is None:
                if proposal is not None:
                    self._rejected(proposal)
                config = self._repair(proposal)
        self.pool.close(config)
        return config

    def tell(self, config: Config, measurement: Measurement) -> None:
        if config in self.observed or config not in self.space:
            # The loop re-tells a repeated ask; a config outside the space teaches no model.
            return
        value = self.model_cost(measurement)
        self.guide.observe(config, cost_ms(measurement))
        improved = cost_ms(measurement) < self._best
        if config in self._guided:
            self._guided.discard(config)
            self._guided_misses = 0 if improved else self._guided_misses + 1
        if improved:
            self._best, self._since_best, self._stalls = cost_ms(measurement), 0, 0
        else:
            self._since_best += 1
        self.observed[config] = value
        self.pool.close(config)
        if self.failure_model is not None:
            self.failure_model.observe(self.space.to_indices(config), measurement.status in LEARNED_FAILURES)
            self._ruled_out = None
        self._observe(config, value)

    @property
    def in_start_design(self) -> bool:
        """Whether the next ask still comes from the start design (or it is not planned yet)."""
        if self._queue is None:
            return self.pool.n_open > 0
        return any(self.pool.is_open(c) for c in (*self._lead, *self._queue))

    # -- shared pieces ----------------------------------------------------------------

    def _apply_failure_model(self) -> None:
        """Set aside what the failure model rules out, for this ask; or, at the
        ``failure_explore`` chance, nothing (the model is never the only judge)."""
        if self.failure_model is None:
            return
        if self._ruled_out is None:
            self._ruled_out = self.failure_model.ruled_out(self.pool.indices)
        if not self._ruled_out.any():
            self.pool.set_aside(None)
            return
        explore = self._failure_rng.random() < float(self.options["failure_explore"])
        self.pool.set_aside(None if explore else self._ruled_out)
        self.asks_with_aside += not explore

    def _priors_still_pay(self) -> bool:
        """Whether asks may still follow the priors' order: fewer than ``prior_patience``
        guided asks in a row found nothing better."""
        patience = int(self.options["prior_patience"])
        return patience == 0 or self._guided_misses < patience

    def _pop_open(self, queue: list[Config]) -> Config | None:
        while queue:
            candidate = queue.pop(0)
            if self.pool.is_open(candidate):
                return candidate
        return None

    def _restart_config(self) -> Config | None:
        """The next config of the current restart design; a new design when the search stalled."""
        after = int(self.options["restart_after"])
        if not self._restart and after and self._since_best >= after and self._queue is not None \
                and not self._queue:
            self._restart = self._restart_design()
            self._since_best = 0  # the restart gets its own window before the next one
            self._stalls += 1
        return self._pop_open(self._restart)

    def _restart_design(self) -> list[Config]:
        """Up to ``restart_steps`` of the best's one-value steps no trial has taken yet, then a
        Latin design of the open configs, ``restart_size`` in all.

        A model that stalled next to its best has judged some of the best's own steps bad on
        the evidence of other configs (D128 full cold, seed 2: a 128x128 tile timed
        once with TMA loads at 0.38 kept GP off the Gluon 128x128 tiles, 2 % from the optimum,
        for 22 trials while it measured 128x64 variants): a stall measures them, as a pattern
        search polls its centre, before the design looks elsewhere.
        """
        size = int(self.options["restart_size"])
        steps: list[Config] = []
        if self.observed and int(self.options["restart_steps"]):
            best = min(self.observed, key=self.observed.get)
            untried = self.pool.untried_steps(best, self.rng)
            steps = [untried[i] for i in self.rng.permutation(len(untried))][:int(self.options["restart_steps"])]
        if len(steps) >= size:
            return steps
        return steps + self.pool.latin_open(size - len(steps), self.rng, exclude=steps)

    def model_cost(self, measurement: Measurement) -> float:
        """log(ms), or log of the failure penalty (``penalized_ms``: above any success)."""
        cost = self.penalized_ms(measurement)
        if not (cost > 0 and math.isfinite(cost)):
            # A time no GPU gives (0 or negative ms, checked at every door already): scored as a
            # failure, never a log of it ("math domain error" ended every resume).
            cost = self.penalized_ms(dataclasses.replace(measurement, status=Status.CRASHED, median_ms=math.inf))
        return math.log(cost)

    @property
    def n_startup(self) -> int:
        return int(self.options["n_startup"])

    def _plan_start(self) -> tuple[list[Config], list[Config]]:
        """The lead (the priors' ``prior_trials`` best, then the center) and the start design."""
        ranked = [c for c in self.guide.ranking() if self.pool.is_open(c)]
        first = ranked[: min(int(self.options["prior_trials"]), PRIOR_TRIALS_PER_SOURCE * self.priors.n_sources)]
        known = [self.pool.point(c) for c in [*self.observed, *first]]
        n_design = max(self.n_startup - len(self.observed) - len(first), 0)
        design: list[Config] = []
        lead = list(first)
        if self.options["start_center"] and not self.observed and n_design > 0:
            # Scores count the best so far: the first config should be the likeliest to be
            # good, and the middle of every ordered range is (the extremes of a kernel's
            # ranges are there to be ruled out: tiny tiles, one stage). Exploring after
            # it costs nothing until something beats it. With priors it comes right after
            # their best: a hedge of one trial against a prior from another head dim or
            # mask, whose best configs can all lie in the wrong corner.
            center = self.pool.nearest_open(np.full(len(self.space.names), 0.5), self.rng)
            if center not in first:
                lead, known = [*first, center], [*known, self.pool.point(center)]
                n_design -= 1
        if self.options["cover"] and n_design > 0:
            # The center bets on the middle and priors on other workloads' winners; the
            # cover hedges both: one stage, the largest tile, every load mode get a trial.
            # Every config the priors tried that this space admits counts as seen: its source
            # already showed how its choices run (or that they fail), and the guide's order
            # carries that verdict
            # (tuner target in a run: the cover spent 7 of 40 trials on load modes
            # the earlier studies had timed and ruled out; 20 seeds, 132 -> 136 of 140 runs
            # within 2 %; held out on the development set, 20 seeds, hit rate 0.67 -> 0.74).
            # Not so when a good share of what this space admits did not fit the priors'
            # sources: their ranking says nothing there, their best are the best of the rest,
            # and the cover is planned as a cold start plans it (lean D256 -> D64
            # full, priors' best 3.7 % off, cold 4.5 evaluations to 2 %, 13.5 with priors:
            # counted as seen, they took 128x128 and 3 stages out of the cover, and D64's
            # optimum is both).
            blind = len(first) > 0 and sum(c in self.pool for c in self.guide.did_not_fit()) \
                >= PRIORS_BLIND_SHARE * len(self.pool)
            tried = [] if blind else [c for c in self.guide.tried() if c in self.pool]
            seen = [*self.observed, *(c for c in lead if not (blind and c in first)), *tried]
            cover = self.pool.cover_open(self.rng, seen=seen)
            lead, known = [*lead, *cover], [*known, *(self.pool.point(c) for c in cover)]
            n_design -= len(cover)
        if self.options["startup"] == "spread":
            design += self.pool.spread_open(n_design, self.rng, around=known)
        elif self.options["startup"] == "latin":
            design += self.pool.latin_open(n_design, self.rng, exclude=lead)
        else:
            open_configs = [c for c in self.pool.open_configs() if c not in lead]
            picks = self.rng.permutation(len(open_configs))[:n_design]
            design += [open_configs[i] for i in picks]
        return lead, [c for c in design if c not in lead]

    def candidates(self, steps: int, around: int) -> list[Config]:
        """Open configs a model should score: near the ``around`` best measured, or all.

        A GP's variance is largest at the edges of the box, so expected improvement over
        the whole space keeps buying extreme tiles and stage counts, while on a kernel
        the needles sit next to good configs. Scoring only the open configs within
        ``steps`` value steps of the best few (a trust region) keeps the model's choice
        among the neighbours worth measuring; once those are measured it scores all.

        Each restart since the best last improved widens the region by one step (a
        trust region grows when it stops paying): the best config is often two steps
        from the runner-up (BLOCK_M and num_warps move together), out of a one-step
        region's reach while the runner-up's neighbours keep the region full.
        """
        return [self.pool.configs[i] for i in self.candidate_positions(steps, around)]

    def candidate_positions(self, steps: int, around: int, least: int = 0, widen_after: int = 0,
                            repaired: bool = False) -> np.ndarray:
        """``candidates`` as positions into ``pool.configs`` (what a model scores in bulk).

        ``least``: widen the region a step at a time until it holds at least this many open
        configs. In a space cut by restrictions (a gemm's tile sizes must divide each
        other) most one-step neighbours are not admitted, and a region of a handful of
        configs leaves the model no choice.

        ``widen_after``: one step wider for every this many trials without a new best (0:
        only restarts widen it). A region of 10-25 configs that stopped paying is otherwise
        measured out config by config before a restart widens it (GP spent 12 of
        its 42 model asks walking a one-step region of 21 on point-in-polygon).
        """
        if steps > 0:
            steps += self._stalls + (self._since_best // widen_after if widen_after else 0)
        best = sorted(self.observed, key=self.observed.get)[:around] if steps > 0 else []
        if not least:
            return self.pool.open_near(best, steps, repaired=repaired)
        widest = int(self.pool.indices.max(initial=0)) * len(self.space.names)  # every config within reach
        near = self.pool.open_near(best, steps, or_all=False, repaired=repaired)
        while 0 < steps < widest and len(near) < min(least, self.pool.n_open):
            steps += 1
            near = self.pool.open_near(best, steps, or_all=False, repaired=repaired)
        return near if len(near) else self.pool.open_near(best, 0)

    def _repair(self, proposal: Config | None) -> Config:
        if proposal is None or proposal not in self.space:
            config = self.pool.random_open(self.rng)
        else:
            config = self.pool.nearest_open(self.pool.point(proposal), self.rng)
        assert config is not None  # ask() checked that the pool has open configs
        return config

    # -- what an adapter provides -----------------------------------------------------

    @abc.abstractmethod
    def _propose(self) -> Config | None:
        """The model's next config (any config of the space; None: no idea, pick at random)."""

    @abc.abstractmethod
    def _observe(self, config: Config, cost: float) -> None:
        """A config of the space was measured (asked here or not); ``cost`` is ``model_cost``."""

    def _rejected(self, proposal: Config) -> None:  # optional hook
        """The proposal was infeasible or known and was moved; adapters may close its trial."""

