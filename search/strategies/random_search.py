"""Random search without replacement over the feasible configs (the baseline).

With priors, the priors' ``prior_trials`` best configs come first, then random draws:
the simplest use of priors, and the baseline the other strategies' use is judged by.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from flashtune.search._candidates import CandidatePool, take_unseen
from flashtune.search.priors import PriorGuide
from flashtune.search.strategy import Strategy, check_int_option
from flashtune.values.config import Config
from flashtune.values.types import Measurement


class RandomSearch(Strategy):
    """Options:
        prior_trials: how many of the priors' best configs to measure before drawing.
    """

    name = "random"
    options_defaults: ClassVar[dict[str, Any]] = {"prior_trials": 3}

    def __init__(self, space, *, seed: int = 0, **options) -> None:
        super().__init__(space, seed=seed, **options)
        check_int_option(self, "prior_trials", minimum=0)
        self._pool = CandidatePool(space)
        order = np.random.default_rng(seed).permutation(len(self._pool.configs))
        self._pending = [self._pool.configs[i] for i in order]
        self._seen: set[Config] = set()
        self._first: list[Config] | None = None  # the priors' best, fixed at the first ask

    def ask(self) -> Config | None:
        if self._first is None:
            ranking = PriorGuide(self.priors, self._pool.complete).ranking()
            feasible = [c for c in ranking if self._pool.is_open(c)]
            self._first = feasible[: int(self.options["prior_trials"])]
        config = take_unseen(self._first, self._seen)
        return config if config is not None else take_unseen(self._pending, self._seen, index=-1)

    def tell(self, config: Config, measurement: Measurement) -> None:
        self._seen.add(config)
