"""What priors say: which configs did well on other GPUs or workloads.

A prior's time was measured on another workload or GPU, so its milliseconds do not
mix with this study's: a 4096-token workload takes four times a 2048-token one. The
book keeps each source (workload and hardware fingerprint) apart and ranks configs by
how close each came to its own source's best. Strategies measure the top of that ranking
first: another GPU's best config reaches only 58.5-99.9 % of the optimum (BAT, see
REFERENCE.md), so priors are re-measured here, never copied.
"""

from __future__ import annotations

import math
from collections import defaultdict

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Workload

Source = tuple[Workload, str]


class PriorBook:
    """Prior measurements grouped by source, ranked by relative slowdown."""

    def __init__(self) -> None:
        self._by_source: dict[Source, dict[Config, float]] = defaultdict(dict)

    def __len__(self) -> int:
        return sum(len(table) for table in self._by_source.values())

    def add(self, measurement: Measurement) -> None:
        """Keep a prior; failures are kept too (they say what not to try first)."""
        ok = measurement.ok and math.isfinite(measurement.median_ms) and measurement.median_ms > 0
        table = self._by_source[(measurement.workload, measurement.fingerprint)]
        value = measurement.median_ms if ok else math.inf
        table[measurement.config] = min(value, table.get(measurement.config, math.inf))

    def ranked(self) -> list[Config]:
        """Configs that ran somewhere, best first.

        Sources take turns: each contributes its best config before any contributes its
        second, so one source's near-ties cannot crowd out another source's winner
        (another head dim or causality often wins with another config). Within a turn,
        configs that more sources rank there come first; a config comes once, at its
        first turn.
        """
        rankings: list[list[Config]] = []
        for table in self._by_source.values():
            ok = {c: v for c, v in table.items() if math.isfinite(v)}
            rankings.append(sorted(ok, key=lambda c: (ok[c], c.key())))
        order: list[Config] = []
        seen: set[Config] = set()
        for depth in range(max((len(r) for r in rankings), default=0)):
            turn = [r[depth] for r in rankings if depth < len(r) and r[depth] not in seen]
            # Configs that lead more rankings at this depth go first.
            for config in sorted(set(turn), key=lambda c: (-turn.count(c), c.key())):
                seen.add(config)
                order.append(config)
        return order
