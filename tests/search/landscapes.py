"""Synthetic landscapes nobody tuned a strategy for: needles anywhere, plateaus, noise.

Every strategy's defaults were chosen on the recorded H200 tables, where the optimum
sits in the middle of most ranges. These spaces put it anywhere, extremes included, so
a test can show what a strategy does on a kernel, GPU or shape it has never seen:

- ``needle``: a basin in index space around a centre drawn anywhere (``at="extreme"``:
  every ordered knob at one of its ends), each unordered knob's choices ranked at
  random, ripples, and the centre's config a needle 3-9 % below everything else;
- ``plateau``: the same basin cut into a few flat levels (most neighbours tie, so a
  model sees no slope), the needle below the lowest level;
- ``noisy``: any of them replayed with a spread (``ReplayObjective(noise=True)``), so
  the same config measures differently each time, as on a GPU.

Each landscape is a recorded table (``Measurement`` per config, as ``flashtune sweep``
writes them): replayed through ``ReplayObjective``, like the real tables.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flashtune.kernels.config import Config
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.search import SearchSpace, make_strategy, run

#: The shape of the kernel's space without fp8: four ordered knobs, two unordered (720 configs).
TUNABLES = {"BLOCK_M": (32, 64, 128, 256), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8),
            "num_stages": (1, 2, 3, 4, 5), "loads": ("pointer", "tma", "tma_ws"), "grid": ("tiles", "persistent")}
WORKLOAD = Workload(4, 32, 32, 4096, 4096, 128)
SHAPES = ("needle", "plateau")
PLACES = ("random", "extreme")


@dataclass(frozen=True)
class Synthetic:
    """One synthetic landscape: its space, its table, and what a search is scored against."""

    space: SearchSpace
    table: list[Measurement]
    optimum_ms: float

    def objective(self, *, noise: bool = False, seed: int = 0) -> Callable[[Config], Measurement]:
        replay = ReplayObjective(self.table, noise=noise, seed=seed)
        return lambda config: replay.evaluate(config, WORKLOAD)

    def within(self, tolerance: float) -> int:
        """Configs of the space within ``tolerance`` of the optimum (recorded medians)."""
        return sum(m.ok and m.median_ms <= self.optimum_ms * (1 + tolerance) for m in self.table)

    def random_hit_probability(self, budget: int, tolerance: float = 0.02) -> float:
        """Chance that random search without replacement sees a config within ``tolerance`` in ``budget``."""
        n, k = len(self.space.feasible_configs()), self.within(tolerance)
        return 1.0 - math.comb(n - k, min(budget, n)) / math.comb(n, min(budget, n))


def landscape(seed: int, *, shape: str = "needle", at: str = "random", tunables: dict | None = None,
              spread: float = 0.01) -> Synthetic:
    """A synthetic landscape, reproducible from ``seed``.

    Args:
        seed: draws the centre, the slopes, the choices' ranks, the ripples and the needle.
        shape: ``"needle"`` (smooth basin) or ``"plateau"`` (the basin cut into flat levels).
        at: ``"random"`` (centre anywhere in the index cube) or ``"extreme"`` (every
            ordered knob at one of its ends).
        tunables: the space (default ``TUNABLES``); no constraint, 3 % of configs fail.
        spread: the recorded 20-80 % spread of each time, as a fraction (what ``noise`` draws from).
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
    if at not in PLACES:
        raise ValueError(f"at must be one of {PLACES}, got {at!r}")
    tunables = dict(tunables or TUNABLES)
    space = SearchSpace(tunables)
    rng = np.random.default_rng(seed)
    ordered = [n for n in space.names if space.is_ordered(n)]
    choices = [n for n in space.names if not space.is_ordered(n)]
    spans = {n: max(len(tunables[n]) - 1, 1) for n in ordered}
    if at == "extreme":
        centre = {n: float(rng.integers(2)) for n in ordered}
    else:
        centre = {n: float(rng.uniform(0.0, 1.0)) for n in ordered}
    slopes = {n: float(rng.uniform(0.5, 2.0)) for n in ordered}
    # An unordered knob adds a penalty per choice; the centre's choices (drawn) pay nothing.
    penalty = {n: dict(zip(rng.permutation(tunables[n]).tolist(), [0.0, *rng.uniform(0.05, 0.4, len(tunables[n]) - 1)]))
               for n in choices}
    times: dict[Config, float] = {}
    for values in itertools.product(*tunables.values()):
        config = Config(dict(zip(space.names, values)))
        log_ms = sum(slopes[n] * (tunables[n].index(config[n]) / spans[n] - centre[n]) ** 2 for n in ordered)
        log_ms += sum(penalty[n][config[n]] for n in choices) + 0.03 * float(rng.standard_normal())
        if shape == "plateau":
            log_ms = 0.25 * math.floor(log_ms / 0.25)  # flat levels: a model sees no slope within one
        times[config] = math.exp(log_ms)
    best_rest = min(times.values())
    needle = Config({**{n: tunables[n][int(round(centre[n] * spans[n]))] for n in ordered},
                     **{n: next(v for v, p in penalty[n].items() if p == 0.0) for n in choices}})
    times[needle] = best_rest * (1.0 - float(rng.uniform(0.03, 0.09)))
    failing = set(rng.choice(len(times), size=int(0.03 * len(times)), replace=False).tolist())
    table = []
    for i, (config, ms) in enumerate(times.items()):
        if i in failing and config != needle:
            table.append(Measurement.failure(config, WORKLOAD, Status.COMPILE_ERROR, "synthetic failure"))
            continue
        table.append(Measurement(config=config, workload=WORKLOAD, status=Status.OK, median_ms=ms,
                                 p20_ms=ms * (1 - spread / 2), p80_ms=ms * (1 + spread / 2)))
    return Synthetic(space, table, times[needle])


def evals_to_within(strategy: str, synthetic: Synthetic, *, seed: int, budget: int, tolerance: float = 0.02,
                    noise: bool = False, **options) -> int | None:
    """Evaluations ``strategy`` needed to measure a config within ``tolerance`` of the optimum
    (by its recorded median: noise may hide a hit from the strategy, not from the score)."""
    recorded = {m.config: m for m in synthetic.table}
    history = run(make_strategy(strategy, synthetic.space, seed=seed, **options),
                  synthetic.objective(noise=noise, seed=seed), max_trials=budget)
    for trial in history.trials:
        m = recorded[trial.config]
        if m.ok and m.median_ms <= synthetic.optimum_ms * (1 + tolerance):
            return trial.number + 1
    return None

