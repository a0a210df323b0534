"""SearchSpace: parameter values, restrictions, and a feasibility constraint.

Strategies see only this: names, allowed values, and whether a config can be run. It
knows nothing of attention, and imports nothing of the kernels or the objectives: our
kernel's space (``objectives.feasibility.for_workload``: the declared tunables plus the
static feasibility model on a ``HardwareSpec`` as the constraint) is one client, a recorded
table of another kernel (``SearchSpace.of_configs``) another, and a user's own space (value
lists plus Kernel Tuner-style restriction expressions or predicates) a third.

The admitted configs are found without enumerating the Cartesian product where the
restrictions allow it: each restriction expression is checked as soon as the parameters
it names are set (Kernel Tuner's model), so a space of 10^7 points with 10^4 admitted
configs is walked in the admitted part only.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from flashtune.values.config import Config, Value

Constraint = Callable[[Config], bool]
#: A restriction: a Python expression over parameter names (``"block_x * block_y <= 1024"``,
#: as Kernel Tuner's ``restrictions`` are written), or a predicate of the whole config.
Restriction = str | Constraint

#: Functions a restriction expression may call (Kernel Tuner's restrictions use these).
_EXPRESSION_FUNCTIONS: dict[str, object] = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round, "len": len,
    "all": all, "any": any, "math": math,
}


class _Expression:
    """One restriction expression, compiled once, with the parameter names it reads."""

    def __init__(self, text: str, names: Sequence[str]) -> None:
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ValueError(f"restriction {text!r}: not a Python expression ({exc.msg})") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                raise ValueError(f"restriction {text!r}: private attribute {node.attr!r}")
        read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        unknown = sorted(read - set(names) - set(_EXPRESSION_FUNCTIONS))
        if unknown:
            raise ValueError(f"restriction {text!r}: unknown name(s) {unknown}; parameters are {list(names)}")
        self.text = text
        self.names = frozenset(read & set(names))
        self._code = compile(tree, f"<restriction {text!r}>", "eval")

    def __call__(self, values: Mapping[str, Value]) -> bool:
        try:
            return bool(eval(self._code, {"__builtins__": {}, **_EXPRESSION_FUNCTIONS}, dict(values)))
        except Exception as exc:  # a restriction's own error, named with the config
            raise ValueError(f"restriction {self.text!r} failed on {dict(values)}: "
                             f"{type(exc).__name__}: {exc}") from None


class SearchSpace:
    """Parameter value lists, restrictions and a constraint.

    Args:
        tunables: each parameter's values, in their order (numbers ascending, for ordered
            parameters: a strategy reads neighbours from it).
        constraint: a predicate of a whole config (e.g. the feasibility model on a GPU);
            checked last, cached.
        restrictions: Kernel Tuner-style restrictions: expressions over parameter names
            (checked as soon as their parameters are set, so the product is never walked
            where they prune) or predicates of a whole config.
        members: the admitted configs, when they are known as a list (a recorded table is
            its space); the product is then never enumerated.

    Raises:
        ValueError: naming the parameter or restriction that is malformed.
    """

    def __init__(self, tunables: Mapping[str, Sequence[Value]], constraint: Constraint | None = None, *,
                 restrictions: Iterable[Restriction] = (), members: Iterable[Config] | None = None) -> None:
        if not tunables:
            raise ValueError("tunables: a search space needs at least one tunable")
        for name, values in tunables.items():
            if not isinstance(name, str):
                raise ValueError(f"tunables: parameter name {name!r} must be a str")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise ValueError(f"tunables[{name!r}]: expected a list of values, got {values!r}")
            values = list(values)
            if len(values) == 0:
                raise ValueError(f"tunables[{name!r}]: no values")
            if len(set(values)) != len(values):
                raise ValueError(f"tunables[{name!r}]: repeated values {list(values)}")
        self._tunables = {name: tuple(values) for name, values in tunables.items()}
        for name, values in self._tunables.items():
            try:
                for value in values:
                    Config({name: value})
            except (TypeError, ValueError) as exc:
                raise ValueError(f"tunables[{name!r}]: {exc}") from None
        self._constraint = constraint
        self._expressions: list[_Expression] = []
        self._predicates: list[Constraint] = []
        for restriction in restrictions:
            if isinstance(restriction, str):
                self._expressions.append(_Expression(restriction, self.names))
            elif callable(restriction):
                self._predicates.append(restriction)
            else:
                raise ValueError(f"restrictions: {restriction!r} is neither an expression (str) nor a predicate")
        self._members: list[Config] | None = None
        self._member_set: frozenset[Config] = frozenset()
        if members is not None:
            self._members = list(dict.fromkeys(members))
            outside = next((c for c in self._members if c not in self), None)
            if outside is not None:
                raise ValueError(f"members: {dict(outside)} is not a config of the tunables {self._tunables}")
            self._member_set = frozenset(self._members)
        self._feasible_cache: dict[Config, bool] = {}
        # The admitted configs, enumerated once: every strategy instance builds its pool from
        # them (a portfolio's members, every seed of a replay comparison).
        self._feasible: tuple[Config, ...] | None = None
        self._feasible_indices: np.ndarray | None = None

    @classmethod
    def of_configs(cls, configs: Iterable[Config], constraint: Constraint | None = None) -> SearchSpace:
        """The space a recorded table spans: each parameter's recorded values (sorted), and
        exactly the recorded configs admitted."""
        configs = list(configs)
        if not configs:
            raise ValueError("of_configs: no configs")
        names = list(dict.fromkeys(name for c in configs for name in c))
        values: dict[str, set] = {name: set() for name in names}
        for config in configs:
            if set(config) != set(names):
                raise ValueError(f"of_configs: config {dict(config)} lacks or adds parameters of {names}")
            for name in names:
                values[name].add(config[name])
        return cls({name: sort_values(vals) for name, vals in values.items()}, constraint, members=configs)

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

    @property
    def restricted(self) -> bool:
        """Whether anything beyond the value lists admits configs (restrictions, members, a constraint)."""
        return bool(self._expressions or self._predicates or self._members is not None or self._constraint)

    def is_feasible(self, config: Config) -> bool:
        """In the space, admitted by the restrictions and the constraint (cached: they are pure)."""
        if config not in self:
            return False
        if config not in self._feasible_cache:
            self._feasible_cache[config] = self._admits(config)
        return self._feasible_cache[config]

    def _admits(self, config: Config) -> bool:
        if self._members is not None and config not in self._member_set:
            return False
        if not all(expression(config) for expression in self._expressions):
            return False
        if not all(predicate(config) for predicate in self._predicates):
            return False
        return self._constraint is None or bool(self._constraint(config))

    def configs(self) -> Iterator[Config]:
        """Every config, in grid order (the product of the tunables as declared)."""
        names = self.names
        for values in itertools.product(*(self._tunables[n] for n in names)):
            yield Config(dict(zip(names, values)))

    def feasible_configs(self) -> list[Config]:
        """Every admitted config, in grid order (enumerated at the first call, then kept).

        Enumerated by backtracking over the parameters in declared order: a restriction
        expression is checked once every parameter it reads is set, and a partial config it
        rejects is never extended. With ``members`` only the members are looked at.
        """
        if self._feasible is None:
            self._feasible = tuple(self._enumerate_feasible())
        return list(self._feasible)

    def feasible_indices(self) -> np.ndarray:
        """``to_indices`` of every admitted config, one row each in ``feasible_configs`` order
        (computed once; read-only)."""
        if self._feasible_indices is None:
            configs = self.feasible_configs()
            position = [{v: i for i, v in enumerate(self._tunables[n])} for n in self.names]
            rows = []
            for config in configs:
                values = dict(config)  # one pass over the config, not a lookup per name
                rows.append([pos[values[n]] for pos, n in zip(position, self.names)])
            indices = np.array(rows, dtype=np.int64).reshape(len(configs), len(self.names))
            indices.flags.writeable = False
            self._feasible_indices = indices
        return self._feasible_indices

    def _enumerate_feasible(self) -> list[Config]:
        if self._members is not None:
            index = {name: {v: i for i, v in enumerate(vals)} for name, vals in self._tunables.items()}
            ordered = sorted(self._members, key=lambda c: tuple(index[n][c[n]] for n in self.names))
            return [c for c in ordered if self.is_feasible(c)]
        names = self.names
        due: list[list[_Expression]] = [[] for _ in names]
        for expression in self._expressions:
            depth = max((names.index(n) for n in expression.names), default=0)
            due[depth].append(expression)
        found: list[Config] = []
        values: dict[str, Value] = {}

        def extend(depth: int) -> None:
            name = names[depth]
            for value in self._tunables[name]:
                values[name] = value
                if not all(expression(values) for expression in due[depth]):
                    continue
                if depth + 1 < len(names):
                    extend(depth + 1)
                    continue
                config = Config(values)
                admitted = all(p(config) for p in self._predicates) and (
                    self._constraint is None or bool(self._constraint(config)))
                self._feasible_cache[config] = admitted
                if admitted:
                    found.append(config)
            del values[name]

        extend(0)
        return found

    def to_indices(self, config: Config) -> tuple[int, ...]:
        """Position of each value in its tunable's list (for numeric optimizers)."""
        return tuple(self._tunables[n].index(config[n]) for n in self.names)

    def from_indices(self, indices: Sequence[int]) -> Config:
        return Config({n: self._tunables[n][int(i)] for n, i in zip(self.names, indices)})


def sort_values(values: Iterable[Value]) -> tuple[Value, ...]:
    """Values in their natural order: numbers ascending (flags as numbers), then text.

    A recorded table lists no order of its own; sorting puts ordered parameters in order,
    which the strategies' neighbourhoods rely on.
    """
    return tuple(sorted(set(values), key=lambda v: (isinstance(v, str), v if not isinstance(v, str) else 0, str(v))))
