"""A synthetic needle landscape in the recorded-table format, for tests without a GPU.

Shaped like the H200 tables (experiments/data/h200): the kernel's four tunables, a
smooth basin in index space whose floor holds a few near-ties and one needle a few per
cent below them, the shared-memory limit of the static feasibility model (recorded as
``out_of_resources``), and a few configs that compile wrong or not at all.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from flashtune.kernels.config import Config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.search.space import SearchSpace

TUNABLES = {"BLOCK_M": (32, 64, 128, 256), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8), "num_stages": (1, 2, 3, 4, 5)}

#: head_dim 256: the shared-memory limit rules out a fair part of the space on an H200.
WORKLOAD = Workload(2, 16, 16, 2048, 2048, 256)


def needle_table(seed: int = 0, *, workload: Workload = WORKLOAD, fail_fraction: float = 0.05,
                 needle_gain: float = 0.04) -> list[Measurement]:
    """Every config of ``TUNABLES`` with a recorded outcome, as ``flashtune sweep`` writes them.

    Args:
        seed: draws the basin's centre, its slopes, the failures and the needle.
        workload: recorded on; decides feasibility through the H200 spec.
        fail_fraction: feasible configs that fail anyway (compile error, wrong result).
        needle_gain: how far the needle lies below the best of the rest.
    """
    rng = np.random.default_rng(seed)
    spec = load_spec("h200")
    names = list(TUNABLES)
    spans = np.array([len(TUNABLES[n]) - 1 for n in names], dtype=float)
    centre = rng.uniform(0.3, 0.7, size=len(names))
    slopes = rng.uniform(0.5, 2.0, size=len(names))
    coupling = rng.uniform(-0.8, 0.8)
    measurements: list[Measurement] = []
    times: dict[Config, float] = {}
    for values in itertools.product(*(TUNABLES[n] for n in names)):
        config = Config(dict(zip(names, values)))
        if not check(config, workload, spec).feasible:
            measurements.append(Measurement.failure(config, workload, Status.OUT_OF_RESOURCES, "shared memory",
                                                    hardware=spec.name, fingerprint=spec.fingerprint))
            continue
        x = np.array([TUNABLES[n].index(v) for n, v in zip(names, values)]) / spans - centre
        # A basin with one interaction (BLOCK_M with num_warps, as on the GPU) and ripples.
        log_ms = float((slopes * x**2).sum() + coupling * x[0] * x[2] + 0.03 * rng.standard_normal())
        times[config] = math.exp(log_ms)
    feasible = sorted(times, key=times.get)
    needle = feasible[int(rng.integers(0, min(3, len(feasible))))]
    times[needle] = times[feasible[0]] * (1.0 - needle_gain)
    failing = set(rng.choice(len(feasible), size=int(fail_fraction * len(feasible)), replace=False).tolist())
    for i, config in enumerate(feasible):
        if i in failing and config != needle:
            status = Status.WRONG_RESULT if i % 2 else Status.COMPILE_ERROR
            measurements.append(Measurement.failure(config, workload, status, "synthetic failure",
                                                    hardware=spec.name, fingerprint=spec.fingerprint))
            continue
        ms = times[config]
        measurements.append(Measurement(
            config=config, workload=workload, status=Status.OK, hardware=spec.name, fingerprint=spec.fingerprint,
            median_ms=ms, p20_ms=ms * 0.99, p80_ms=ms * 1.01, tflops=workload.flops / (ms * 1e-3) / 1e12,
        ))
    return measurements


def bowl(space: SearchSpace, centre: tuple[float, ...]) -> Callable[[Config], Measurement]:
    """A smooth synthetic objective: log time quadratic in the index vector around ``centre``."""

    def evaluate(config: Config) -> Measurement:
        indices = space.to_indices(config)
        ms = math.exp(sum((i - c) ** 2 for i, c in zip(indices, centre)) / 4.0)
        return Measurement(config=config, workload=WORKLOAD, status=Status.OK, median_ms=ms, p20_ms=ms, p80_ms=ms)

    return evaluate
