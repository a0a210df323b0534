"""Grid search: every feasible config once, in the space's order or the priors' order.

With priors, the grid is walked in the priors' order (``PriorGuide``) while that order
agrees with the measurements here, and in the space's order otherwise: a grid cannot
learn, so it must not follow a misleading prior to the end.
"""

from __future__ import annotations

from flashtune.search._candidates import CandidatePool, take_unseen
from flashtune.search.priors import PriorGuide
from flashtune.search.strategy import Strategy, cost_ms
from flashtune.values.config import Config
from flashtune.values.types import Measurement


class GridSearch(Strategy):
    name = "grid"

    def __init__(self, space, *, seed: int = 0, **options) -> None:
        super().__init__(space, seed=seed, **options)
        self._pool = CandidatePool(space)  # the feasible configs, in grid order
        self._pending = list(self._pool.configs)
        self._seen: set[Config] = set()
        self._guide = PriorGuide(self.priors, self._pool.complete)

    def ask(self) -> Config | None:
        guided = self._guide.next_open(self._is_open)
        if guided is not None:
            self._seen.add(guided)
            return guided
        return take_unseen(self._pending, self._seen)

    def tell(self, config: Config, measurement: Measurement) -> None:
        self._seen.add(config)
        self._guide.observe(config, cost_ms(measurement))

    def _is_open(self, config: Config) -> bool:
        return config not in self._seen and self._pool.is_open(config)
