"""Grid search: every feasible config once, in the space's deterministic order."""

from __future__ import annotations

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search._base import Strategy, register


@register
class GridSearch(Strategy):
    name = "grid"

    def __init__(self, space, *, seed: int = 0, **options) -> None:  # noqa: ANN001
        super().__init__(space, seed=seed, **options)
        self._pending = [c for c in space.configs() if space.is_feasible(c)]
        self._seen: set[Config] = set()

    def ask(self) -> Config | None:
        while self._pending:
            config = self._pending.pop(0)
            if config not in self._seen:
                return config
        return None

    def tell(self, config: Config, measurement: Measurement) -> None:
        self._seen.add(config)
