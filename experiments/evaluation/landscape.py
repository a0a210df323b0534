"""A recorded space as a comparison sees it: the search space, the optimum, random's baseline.

The search space of a recorded workload is the table's tunables, constrained by the
static feasibility model on the recording GPU (what a live study would search) and by
membership of the table. Every quantity a comparison scores against is computed over
the feasible configs, the ones a strategy may ask, with failures counted as the worst
successful time (``flashtune.experiments.evaluation.scoring``).

A recorded space of another kernel (a Kernel Tuner cache or T4 file) has no workload and
no feasibility model here: its space is its file's parameters, and its members are the
recorded configs, failures included (a search that asks one is told it failed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flashtune.experiments.evaluation import scoring
from flashtune.kernels.config import Config
from flashtune.kernels.space import IMPLIED
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.kernel_tuner_files import SUFFIXES, is_kernel_tuner_file, load_kernel_tuner, space_name
from flashtune.objectives.packed import packed_kind
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import Measurement, Workload
from flashtune.search.space import SearchSpace


@dataclass
class Landscape:
    """One recorded workload, ready to be searched and scored."""

    workload: Workload | None  # None: another kernel's recorded space
    path: Path  # the first of ``paths``
    table: dict[Config, Measurement]
    space: SearchSpace
    feasible: list[Config]
    optimum_ms: float
    optimum_config: Config
    worst_ms: float
    median_ms: float
    random_curve: np.ndarray = field(repr=False)
    score_budget: int
    paths: tuple[Path, ...] = ()  # every table merged into this one (parts of one space)
    label: str = ""  # the name of a space without a workload (its file's name)
    packed: str = ""  # a packed kernel's space of the workload: its table suffix (objectives/packed.py)

    @property
    def name(self) -> str:
        if self.workload is None:
            return self.label
        return f"{self.workload.name}.{self.packed}" if self.packed else self.workload.name

    def cost(self, config: Config) -> float:
        """Recorded median ms, or inf for a failure or a config outside the table."""
        m = self.table.get(config)
        return m.median_ms if m is not None and m.ok and math.isfinite(m.median_ms) else math.inf

    def within(self, tolerance: float) -> int:
        """How many feasible configs lie within ``tolerance`` of the optimum."""
        return sum(self.cost(c) <= self.optimum_ms * (1 + tolerance) for c in self.feasible)

    def random_evals_to_within(self, tolerance: float) -> float:
        """Random search's expected evaluations to a config within ``tolerance``: (N+1)/(k+1)."""
        return (len(self.feasible) + 1) / (self.within(tolerance) + 1)


def recorded_tunables(measurements: Iterable[Measurement]) -> dict[str, tuple]:
    """Each tunable of a table and its values, sorted (so indices follow the order of values)."""
    values: dict[str, set] = {}
    for m in measurements:
        for name, value in m.config.items():
            values.setdefault(name, set()).add(value)
    return {name: tuple(sorted(vals)) for name, vals in values.items()}


def build_landscape(path: str | Path | Sequence[str | Path], hardware: HardwareSpec) -> Landscape:
    """Load one workload's recorded table, or the tables that record parts of its space
    (merged: a later row of a config replaces an earlier one), and derive its search
    space and baseline.

    Raises:
        ValueError: the table is unreadable, or no feasible config ran correctly.
    """
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if not paths:
        raise ValueError("build_landscape: no table given")
    path = paths[0]
    foreign = [p for p in paths if is_kernel_tuner_file(p)]
    if foreign and len(paths) > 1:
        raise ValueError(f"{foreign[0]}: a Kernel Tuner or T4 file is a whole space; it merges with no other table")
    if foreign:
        recorded = load_kernel_tuner(path)
        measurements, workload, packed = list(recorded.measurements), None, ""
        table = {m.config: m for m in measurements}
        space = SearchSpace(recorded.tunables, members=table)
    else:
        measurements = _with_implied_knobs([m for p in paths for m in load_table(p)])
        workloads = {m.workload for m in measurements}
        if len(workloads) != 1:
            raise ValueError(f"replay tables {[str(p) for p in paths]} hold {len(workloads)} workloads; "
                             "the tables of one landscape must be parts of one workload's space")
        kinds = {packed_kind(p) for p in paths}
        if len(kinds) != 1:
            raise ValueError(f"replay tables {[str(p) for p in paths]} hold the spaces of {len(kinds)} kernels "
                             f"({', '.join(k or 'dense' for k in sorted(kinds))}); a landscape is one kernel's")
        workload = measurements[0].workload
        packed = kinds.pop()
        table = {m.config: m for m in measurements}
        # Only the recorded configs are admitted: listing them spares walking the product. A
        # packed kernel's configs have no static feasibility model (its sweep records what
        # failed), so its space is its recorded configs.
        constraint = (lambda config: config in table) if packed else _constraint(table, workload, hardware)
        space = SearchSpace(recorded_tunables(measurements), constraint, members=table)
    feasible = space.feasible_configs()
    costs = [table[c].median_ms if table[c].ok else math.inf for c in feasible]
    ok = [c for c in costs if math.isfinite(c)]
    if not ok:
        raise ValueError(f"replay table {path}: no feasible config ran correctly; nothing to search for")
    worst = max(ok)
    values = scoring.fill_failures(costs, worst)
    optimum_ms = min(ok)
    optimum_config = feasible[costs.index(optimum_ms)]
    median_ms = float(np.median(values))
    curve = scoring.random_search_curve(values)
    return Landscape(
        workload=workload, path=path, table=table, space=space, feasible=feasible,
        optimum_ms=optimum_ms, optimum_config=optimum_config, worst_ms=worst, median_ms=median_ms,
        random_curve=curve, score_budget=scoring.score_budget(curve, median_ms, optimum_ms), paths=tuple(paths),
        label=space_name(path), packed=packed,
    )


def table_files(tables: Sequence[str | Path]) -> list[Path]:
    """``--tables``: files as given, folders as the tables in them (sorted): ``*.jsonl``, and
    Kernel Tuner cache or T4 files (``*.json``, ``*.json.gz``).

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a folder with no ``*.jsonl`` file.
    """
    files: list[Path] = []
    for table in map(Path, tables):
        if table.is_dir():
            found = sorted(p for pattern in ("*.jsonl", *(f"*{s}" for s in SUFFIXES)) for p in table.glob(pattern))
            if not found:
                raise ValueError(f"--tables: folder {table} holds no *.jsonl, *.json or *.json.gz table")
            files += found
        elif table.exists():
            files.append(table)
        else:
            raise FileNotFoundError(f"--tables: recorded table {table} not found")
    return list(dict.fromkeys(files))


def group_by_workload(files: Sequence[Path]) -> list[list[Path]]:
    """The files of each workload together (a space recorded in parts, e.g. one folder per
    kernel variant), workloads in the order their first file comes."""
    groups: dict[tuple[Workload, str] | Path, list[Path]] = {}
    for path in files:
        # A Kernel Tuner or T4 file is a whole space of its own, grouped with no other.
        # A packed kernel's table is its own space beside the workload's dense one.
        key = path if is_kernel_tuner_file(path) else (load_table(path)[0].workload, packed_kind(path))
        groups.setdefault(key, []).append(path)
    return list(groups.values())


def _with_implied_knobs(measurements: list[Measurement]) -> list[Measurement]:
    """Rows recorded before a knob joined the kernel's space omit it, which means its implied
    value (kernels.space.IMPLIED). Where other rows of the table name the knob (a table
    extended by a later sweep), fill it in, so that every row lies in one space."""

    named = set().union(*(m.config for m in measurements))
    fill = {knob: value for knob, value in IMPLIED.items() if knob in named}
    return [m if fill.keys() <= m.config.keys() else dataclasses.replace(m, config=Config({**fill, **m.config}))
            for m in measurements]


def _constraint(table: Mapping[Config, Measurement], workload: Workload, hardware: HardwareSpec):
    def feasible(config: Config) -> bool:
        return config in table and check(config, workload, hardware).feasible

    return feasible
