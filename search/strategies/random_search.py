"""Random search without replacement over the feasible configs (the baseline)."""

from __future__ import annotations

import numpy as np

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search._base import Strategy, register


@register
class RandomSearch(Strategy):
    name = "random"

    def __init__(self, space, *, seed: int = 0, **options) -> None:  # noqa: ANN001
        super().__init__(space, seed=seed, **options)
        feasible = space.feasible_configs()
        order = np.random.default_rng(seed).permutation(len(feasible))
        self._pending = [feasible[i] for i in order]
        self._seen: set[Config] = set()

    def ask(self) -> Config | None:
        while self._pending:
            config = self._pending.pop()
            if config not in self._seen:
                return config
        return None

    def tell(self, config: Config, measurement: Measurement) -> None:
        self._seen.add(config)
