"""Several registered strategies against one budget ("portfolio"), the default of ``flashtune tune``.

No single strategy wins on every kernel, GPU and shape: on the recorded H200 spaces GP
led where the optimum sat next to good configs and missed a lone needle that TPE's
broader sampling found, and the GA did the reverse elsewhere. A portfolio does not
have to know in advance which landscape it is on:

- every measurement is told to every member, whoever asked for it, so each member's
  model sees the whole study and none asks a config another already measured (each
  member closes told configs; the loop answers any repeat from its history without
  measuring it);
- the first member runs its start design (center, covering design, Latin design) for
  all of them: the others plan their start after it and find it already measured;
- after that, by default (``policy="fallback"``) the first member asks every turn, and
  the others ask only when it fails (its ask raises: a model it cannot fit, a library
  error) or has nothing left to ask: on the recorded spaces of other kernels no way of
  sharing turns measured was better than GP alone within 50 evaluations (with
  the lead on its own seed, the shared turns of ``"lead"`` cost a seed in ten on
  convolution and gained none; the bandit's cost more), so the default is GP, seed for
  seed, with the others as its safety net;
- ``policy="lead"``: the first member asks while the study keeps finding new bests, and
  each other member gets one turn whenever the study has gone ``patience`` asks without one;
- ``policy="bandit"``: Thompson sampling on each member's rate of new bests (a success
  is an ask that beat the study's best), with every member kept at a floor share of the
  turns, so one that is cold early still gets to try again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from flashtune.search.space import SearchSpace
from flashtune.search.strategy import Strategy, check_int_option, cost_ms
from flashtune.values.config import Config
from flashtune.values.types import Measurement

POLICIES = ("fallback", "lead", "bandit", "round_robin")

logger = logging.getLogger(__name__)


class Portfolio(Strategy):
    """Interleave registered strategies; share every measurement with all of them.

    Options:
        members: comma-separated registered strategy names (each once, not "portfolio").
        policy: ``"fallback"`` (the first member asks; the others only once it fails or
            runs out), ``"lead"`` (the first member asks, the others take one turn each when the
            study has gone ``patience`` asks without a new best), ``"bandit"`` (Thompson
            sampling on new bests, with a floor share) or ``"round_robin"`` (turns in order).
        patience: under ``"lead"``, asks without a new best of the study before the lead
            hands one turn to each other member (and again after as many more).
        floor: least share of the turns each member gets under the bandit, as a
            fraction of an equal share (0 lets the bandit starve a member; 1 is round robin).
        prior_trials: passed to every member that has the option: how many of the
            priors' best configs it measures first. Six, not a single strategy's three:
            priors from several workloads disagree (head dim 64 wins with pointer loads,
            128 with TMA), and on the recorded H200 tables three left D64 causal's winner
            to the model (median 38 evaluations to 2 % held out, 20 seeds; six: 27, 8 seeds).
        failure_model: passed to every member that has the option: set aside the configs
            the study's failures predict to fail (``flashtune.search.failure_model``).
    """

    name = "portfolio"
    options_defaults: ClassVar[dict[str, Any]] = {
        "members": "gp,tpe", "policy": "fallback", "patience": 6, "floor": 0.5, "prior_trials": 6,
        "failure_model": False,
    }

    def __init__(self, space: SearchSpace, *, seed: int = 0, **options: Any) -> None:
        super().__init__(space, seed=seed, **options)
        # Imported here: the registry imports strategy modules by name, never the reverse.
        from flashtune.search.registry import make_strategy, option_defaults, strategy_names

        names = [n.strip() for n in str(self.options["members"]).split(",") if n.strip()]
        known = [n for n in strategy_names() if n != self.name]
        if not names or len(set(names)) != len(names) or set(names) - set(known):
            raise ValueError(f"{self.name}: option members must name registered strategies once each "
                             f"(from {known}), got {self.options['members']!r}")
        if self.options["policy"] not in POLICIES:
            raise ValueError(f"{self.name}: policy must be one of {POLICIES}, got {self.options['policy']!r}")
        check_int_option(self, "prior_trials", minimum=0)
        check_int_option(self, "patience", minimum=1)
        floor = self.options["floor"]
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"{self.name}: option floor must be in [0, 1], got {floor!r}")
        self.rng = np.random.default_rng(seed)
        # The first member runs on the portfolio's own seed, so that until another member
        # takes a turn the portfolio asks exactly what that member alone would
        # (with a drawn seed the GP-led default and GP alone were two different samples of
        # GP, and ten seeds a file could not tell the policy's effect from the draw); the
        # others get seeds drawn from the portfolio's: one seed drives everything.
        seeds = [seed, *(int(self.rng.integers(2**31 - 1)) for _ in names[1:])]
        passed = ("prior_trials", "failure_model")
        self.members: list[Strategy] = [
            make_strategy(n, space, seed=member_seed,
                          **{o: self.options[o] for o in passed if o in option_defaults(n)})
            for n, member_seed in zip(names, seeds)]
        self.turns = np.zeros(len(names), dtype=int)  # asks answered by each member
        # What the policy judges: asks it handed out (the shared start design is nobody's
        # choice) and, of those, new bests of the study.
        self.plays = np.zeros(len(names), dtype=int)
        self.wins = np.zeros(len(names), dtype=int)
        self._asked_by: dict[Config, tuple[int, bool]] = {}
        self._exhausted: set[int] = set()  # members with nothing left to ask, or whose ask raised
        self.failures: dict[str, str] = {}  # member name -> the error that set it aside
        self._best = float("inf")
        self._since_best = 0  # asks told since the study's best last improved (policy "lead")
        self._handoffs: list[int] = []  # members owed a turn by the lead (policy "lead")

    @property
    def member_names(self) -> list[str]:
        return [m.name for m in self.members]

    def ask(self) -> Config | None:
        while len(self._exhausted) < len(self.members):
            i, chosen = self._choose()
            try:
                config = self.members[i].ask()
            except Exception as error:  # a member that fails hands over, as a value
                # A member's model can fail where the others do not (a GP fit on a space it
                # cannot model, a library error): the study goes on with the next member,
                # and the error is kept where a report can show it.
                self.failures[self.members[i].name] = f"{type(error).__name__}: {error}"
                logger.warning("portfolio: member %s failed (%s); the others go on",
                               self.members[i].name, self.failures[self.members[i].name])
                self._exhausted.add(i)
                continue
            if config is None:
                self._exhausted.add(i)
                continue
            self.turns[i] += 1
            self.plays[i] += chosen
            self._asked_by.setdefault(config, (i, chosen))
            return config
        return None

    def warm_start(self, priors: Iterable[Measurement]) -> None:
        """Every member orders its search by the priors (each hedges them its own way)."""
        priors = list(priors)
        super().warm_start(priors)
        for member in self.members:
            member.warm_start(priors)

    def tell(self, config: Config, measurement: Measurement) -> None:
        for member in self.members:
            if member.name not in self.failures:
                member.tell(config, measurement)
        asker, chosen = self._asked_by.pop(config, (None, False))
        value = cost_ms(measurement)
        if chosen and value < self._best:
            # A success only for the member the policy chose: a resumed trial, another
            # worker's trial or the start design is no one's.
            self.wins[asker] += 1
        if value < self._best:
            self._best, self._since_best = value, 0
        else:
            self._since_best += 1

    def _choose(self) -> tuple[int, bool]:
        """The member that answers the next ask, and whether the policy chose it."""
        open_members = [i for i in range(len(self.members)) if i not in self._exhausted]
        lead = open_members[0]
        if getattr(self.members[lead], "in_start_design", False):
            return lead, False  # the shared start design: one member plans it, all learn from it
        if self.options["policy"] == "fallback":
            return lead, True  # the others ask only once the lead has failed or run out
        if self.options["policy"] == "lead":
            return self._lead_or_handoff(open_members), True
        plays = self.plays[open_members]
        if self.options["policy"] == "round_robin" or len(open_members) == 1:
            return open_members[int(np.argmin(plays))], True
        floor = float(self.options["floor"]) / len(open_members)
        starved = np.flatnonzero(plays < floor * (plays.sum() + 1))
        if len(starved):
            return open_members[int(starved[np.argmin(plays[starved])])], True
        wins = self.wins[open_members]
        draws = self.rng.beta(1 + wins, 1 + plays - wins)
        return open_members[int(np.argmax(draws))], True

    def _lead_or_handoff(self, open_members: list[int]) -> int:
        """The lead, unless the study stalled: then each other open member once, in order.

        Why a lead and not a bandit: on recorded spaces of other kernels GP
        alone reached 2 % of the optimum in 50 evaluations more often than the bandit's
        GP + TPE (0.63 vs 0.53): every turn given to the weaker member is one the
        stronger one's model would have spent better, and a bandit on a few dozen asks
        cannot tell them apart before the budget is gone. The others are kept for when
        the lead's model stops paying, as fresh eyes on the same measurements.
        """
        self._handoffs = [i for i in self._handoffs if i in open_members]
        if not self._handoffs and self._since_best >= int(self.options["patience"]):
            self._handoffs = open_members[1:]
            self._since_best = 0  # the hand-offs get a window before the next one
        if self._handoffs:
            return self._handoffs.pop(0)
        return open_members[0]
