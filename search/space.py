"""SearchSpace: the kernel's declared tunables plus a feasibility constraint.

Strategies see only this: names, allowed values, and whether a config can run on the
target GPU. Built from the kernel's declared tunables (``flashtune.kernels.space``) and a ``HardwareSpec`` by
``SearchSpace.for_workload``; any mapping and predicate work (tests use synthetic ones).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence

from flashtune.kernels.config import Config, Value
from flashtune.kernels.space import tunables_for
from flashtune.objectives.feasibility import check

Constraint = Callable[[Config], bool]


class SearchSpace:
    def __init__(self, tunables: Mapping[str, Sequence[Value]], constraint: Constraint | None = None) -> None:
        if not tunables:
            raise ValueError("tunables: a search space needs at least one tunable")
        for name, values in tunables.items():
            if len(values) == 0:
                raise ValueError(f"tunables[{name!r}]: no values")
            if len(set(values)) != len(values):
                raise ValueError(f"tunables[{name!r}]: repeated values {list(values)}")
        self._tunables = {name: tuple(values) for name, values in tunables.items()}
        self._constraint = constraint
        self._feasible_cache: dict[Config, bool] = {}

    @classmethod
    def for_workload(cls, workload, hardware) -> SearchSpace:
        """The space of the kernel that serves ``workload`` (``kernels.space.tunables_for``:
        decode for short queries, else prefill), constrained by the static feasibility
        model on ``hardware``."""

        return cls(tunables_for(workload), lambda config: check(config, workload, hardware).feasible)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tunables)

    def values(self, name: str) -> tuple[Value, ...]:
        return self._tunables[name]

    def is_ordered(self, name: str) -> bool:
        """Whether ``name``'s values are numbers (block sizes, stages), whose order means
        something, rather than choices (load modes, grids, flags) whose listed order is arbitrary."""
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self._tunables[name])

    def landmarks(self, name: str) -> tuple[Value, ...]:
        """The values an initial design must see: every choice of an unordered tunable, the
        two ends of an ordered one (where a kernel's optimum sits more often than a design
        centred on the middle expects)."""
        values = self._tunables[name]
        return (values[0], values[-1]) if self.is_ordered(name) and len(values) > 2 else values

    @property
    def tunables(self) -> dict[str, tuple[Value, ...]]:
        return dict(self._tunables)

    @property
    def size(self) -> int:
        size = 1
        for values in self._tunables.values():
            size *= len(values)
        return size

    def __contains__(self, config: object) -> bool:
        if not isinstance(config, Mapping) or set(config) != set(self._tunables):
            return False
        return all(config[n] in vals for n, vals in self._tunables.items())

    def is_feasible(self, config: Config) -> bool:
        """In the space and accepted by the constraint (cached: the model is pure)."""
        if config not in self:
            return False
        if self._constraint is None:
            return True
        if config not in self._feasible_cache:
            self._feasible_cache[config] = bool(self._constraint(config))
        return self._feasible_cache[config]

    def configs(self) -> Iterator[Config]:
        """Every config, in grid order (the product of the tunables as declared)."""
        names = self.names
        for values in itertools.product(*(self._tunables[n] for n in names)):
            yield Config(dict(zip(names, values)))

    def feasible_configs(self) -> list[Config]:
        return [c for c in self.configs() if self.is_feasible(c)]

    def to_indices(self, config: Config) -> tuple[int, ...]:
        """Position of each value in its tunable's list (for numeric optimizers)."""
        return tuple(self._tunables[n].index(config[n]) for n in self.names)

    def from_indices(self, indices: Sequence[int]) -> Config:
        return Config({n: self._tunables[n][int(i)] for n, i in zip(self.names, indices)})
