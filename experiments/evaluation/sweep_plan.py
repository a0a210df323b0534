"""Which configs to measure on a new GPU, chosen from a known GPU's recorded space.

Sweeping a whole space on every GPU model costs device time nobody has (the H200's
recorded space took about an hour of it). A new GPU of a known architecture is recorded
from the known one's tables instead: every config of the known GPU's fastest share per
workload (the new GPU's optimum is likely among them, and transfer is measured on them),
plus a space-filling sample of the rest in which every kernel variant is represented (so
a search replayed on the new GPU meets the same landscape, slow regions included), plus a
few configs the known GPU could not run (so the feasibility model is graded on the new
GPU's own compile and launch failures).

    flashtune sweep --suite --like h200 --top-share 0.05 --sample 200 --no-static-check --out sweeps_h100
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement

#: The knob whose values are the kernel variants and load modes: each is sampled on its own.
VARIANT_KNOB = "loads"


@dataclass(frozen=True)
class SweepPlan:
    """The configs to measure for one workload, in the order to measure them."""

    top: tuple[Config, ...]  # the known GPU's fastest share, fastest first
    sample: tuple[Config, ...]  # a space-filling sample of the configs it ran
    failed: tuple[Config, ...]  # configs it could not run, to grade the feasibility model
    unrecorded: tuple[Config, ...] = ()  # configs of variants it never recorded

    @property
    def configs(self) -> list[Config]:
        return [*self.top, *self.sample, *self.failed, *self.unrecorded]


def plan_sweep(rows: Iterable[Measurement], *, top_share: float, sample: int, failed_share: float = 0.1,
               space: Iterable[Config] = (), per_unrecorded_variant: int = 10, seed: int = 0) -> SweepPlan:
    """Choose a new GPU's configs for one workload from the known GPU's recorded ``rows``.

    Args:
        rows: the known GPU's measurements of the workload (its merged recorded tables; a
            config recorded twice is taken from its last row).
        top_share: the share of the configs that ran (status ok) to take fastest first,
            at least one; in (0, 1].
        sample: how many more configs to take: a space-filling sample of the rest of the
            recorded space, every kernel variant represented.
        failed_share: the share of ``sample`` drawn from configs the known GPU could not run
            (statically infeasible, compile errors, out of resources), in [0, 1].
        space: the configs the new GPU could run (its space, the feasibility model's rejects
            left out): ``per_unrecorded_variant`` space-filling configs of each kernel variant
            the known GPU never recorded are taken from it, so every variant is represented.
        per_unrecorded_variant: see ``space``.
        seed: seeds the sample.

    Raises:
        ValueError: an argument out of range, naming it and its value.
    """
    if not 0 < top_share <= 1:
        raise ValueError(f"top_share must be in (0, 1], got {top_share!r}")
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise ValueError(f"sample must be an int >= 0, got {sample!r}")
    if not 0 <= failed_share <= 1:
        raise ValueError(f"failed_share must be in [0, 1], got {failed_share!r}")
    last = {m.config: m for m in rows}
    ran = sorted((m for m in last.values() if m.ok), key=lambda m: m.median_ms)
    top = [m.config for m in ran[: max(1, round(top_share * len(ran)))]] if ran else []
    chosen = set(top)
    rng = np.random.default_rng(seed)
    n_failed = round(failed_share * sample)
    failed = _stratified([c for c, m in last.items() if not m.ok and c not in chosen], n_failed, rng)
    rest = [m.config for m in ran if m.config not in chosen]
    spread = _stratified(rest, sample - len(failed), rng)
    recorded_variants = {str(c.get(VARIANT_KNOB, "")) for c in last}
    unrecorded = [c for c in space if str(c.get(VARIANT_KNOB, "")) not in recorded_variants]
    by_variant = len({str(c.get(VARIANT_KNOB, "")) for c in unrecorded})
    new = _stratified(unrecorded, per_unrecorded_variant * by_variant, rng)
    return SweepPlan(tuple(top), tuple(spread), tuple(failed), tuple(new))


def _stratified(configs: Sequence[Config], count: int, rng: np.random.Generator) -> list[Config]:
    """``count`` configs spread over the variants (an equal share each, the unused share of a
    small variant going to the others), each variant's share space-filling."""
    by_variant: dict[str, list[Config]] = defaultdict(list)
    for config in configs:
        by_variant[str(config.get(VARIANT_KNOB, ""))].append(config)
    quota = dict.fromkeys(by_variant, 0)
    left = min(count, len(configs))
    while left > 0:
        open_variants = [v for v in sorted(by_variant) if quota[v] < len(by_variant[v])]
        for variant in open_variants[:left]:  # the same order every time: seeded, not hashed
            quota[variant] += 1
        left -= min(left, len(open_variants))
    return [c for v in sorted(by_variant) for c in _space_filling(by_variant[v], quota[v], rng)]


def _space_filling(configs: Sequence[Config], count: int, rng: np.random.Generator) -> list[Config]:
    """``count`` of ``configs``, each next one the farthest (in knobs that differ) from those
    taken, ties broken at random: a maximin design over the discrete knobs."""
    if count <= 0:
        return []
    knobs = sorted({k for c in configs for k in c})
    codes = np.array([[str(c.get(k)) for k in knobs] for c in configs], dtype=object)
    order = rng.permutation(len(configs))
    taken = [int(order[0])]
    distance = (codes != codes[taken[0]]).sum(axis=1)
    while len(taken) < min(count, len(configs)):
        far = distance.max()
        candidates = [int(i) for i in order if distance[i] == far and i not in taken]
        nxt = candidates[0]
        taken.append(nxt)
        distance = np.minimum(distance, (codes != codes[nxt]).sum(axis=1))
    return [configs[i] for i in taken]
