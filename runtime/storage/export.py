"""Write the best measured config per (GPU, kernel, Triton, bucket) into a store file.

The study's ``flashtune export`` reads Measurements from MLflow or Optuna and calls
:func:`export_best`; this module knows nothing of either.

A row's bucket class is its config's ``kernel``, as decode rows say ``kernel="decode"``:
``varlen`` rows (the packed variable-length kernel's tile) record the workload with batch =
sequences and q_len / kv_len = the longest sequence's (``max_seqlen_q`` / ``max_seqlen_k``);
``paged`` rows record it as a decode row (kv_len the block table's capacity) and carry the
cache's page size in the config as ``page_size`` (a workload has no field for it; the store
keeps it in the bucket, not in the config). A row without a kernel hash in its ``versions``
gets the installed source hash of its class's kernel (``store.source_hash_of``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from flashtune.kernels.config import Config
from flashtune.kernels.space import PAGE_SIZE_KEY as PAGE_SIZE_KEY  # a paged row's page size
from flashtune.kernels.space import PAGED_KERNEL, kernel_of
from flashtune.objectives.types import Measurement
from flashtune.runtime.dispatching.resolve import uses_fp8
from flashtune.runtime.storage.buckets import NO_PAGES, Bucket
from flashtune.runtime.storage.store import Store, StoreEntry, better, source_hash_of, triton_version

#: Keys of ``Measurement.versions`` read for the kernel hash and the Triton version; a
#: measurement without them is taken to come from the kernel and Triton installed here.
KERNEL_HASH_KEYS = ("kernel_hash", "kernel_source", "kernel")
TRITON_KEY = "triton"


def entry_of(measurement: Measurement, *, include_fp8: bool = False) -> StoreEntry | None:
    """The store entry a measurement gives, or None when it must not be stored.

    Only measured or replayed successes with a finite time and a fingerprint are stored:
    priors are hints, not results, and a failure has no time. fp8 configs only with
    ``include_fp8``: they trade precision for speed, and the store keeps one config per
    bucket, so an fp8 winner would otherwise displace the best full-precision one.
    """
    m = measurement
    if not m.ok or m.source == "prior" or not m.fingerprint or not math.isfinite(m.median_ms):
        return None
    if uses_fp8(m.config) and not include_fp8:
        return None
    versions = m.versions or {}
    kind = kernel_of(m.config)
    kernel_hash = next((versions[k] for k in KERNEL_HASH_KEYS if versions.get(k)), None) or source_hash_of(kind)
    config, page_size = (_paged_row(m.config) if kind == PAGED_KERNEL else (m.config, NO_PAGES))
    return StoreEntry(
        fingerprint=m.fingerprint,
        kernel_hash=kernel_hash,
        triton=versions.get(TRITON_KEY) or triton_version(),
        bucket=Bucket.of(m.workload, kind=kind, page_size=page_size),
        config=config,
        hardware=m.hardware,
        median_ms=m.median_ms,
        tflops=m.tflops if math.isfinite(m.tflops) and m.tflops > 0 else None,
        source=m.source,
    )


def _paged_row(config: Config) -> tuple[Config, int]:
    """A paged row's config without its page size, and the page size.

    Raises:
        ValueError: the row names no page size (a positive int).
    """
    page_size = config.get(PAGE_SIZE_KEY)
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ValueError(f"a paged row's config must give the cache's {PAGE_SIZE_KEY} (a positive int), "
                         f"got {page_size!r} in {config.to_dict()}")
    return Config({k: v for k, v in config.items() if k != PAGE_SIZE_KEY}), page_size


def best_entries(measurements: Iterable[Measurement], *, include_fp8: bool = False) -> list[StoreEntry]:
    """The fastest storable entry per (GPU, kernel, Triton, bucket) of ``measurements``.

    Raises:
        TypeError: an item is not a Measurement, naming its position.
    """
    best: dict[tuple, StoreEntry] = {}
    for number, m in enumerate(measurements):
        if not isinstance(m, Measurement):
            raise TypeError(f"measurements[{number}] must be a Measurement, got {type(m).__name__}")
        entry = entry_of(m, include_fp8=include_fp8)
        if entry is None:
            continue
        k = (entry.key, entry.bucket)
        best[k] = entry if k not in best else better(entry, best[k])
    return list(best.values())


def ranked_entries(measurements: Iterable[Measurement], *, include_fp8: bool = False) -> dict[tuple, list[StoreEntry]]:
    """Every storable entry per (store key, bucket), fastest first, one per config: the
    alternatives a sanitized export falls back on when a bucket's fastest is unsafe."""
    ranked: dict[tuple, dict] = {}
    for m in measurements:
        entry = entry_of(m, include_fp8=include_fp8) if isinstance(m, Measurement) else None
        if entry is None:
            continue
        configs = ranked.setdefault((entry.key, entry.bucket), {})
        held = configs.get(entry.config)
        configs[entry.config] = entry if held is None else better(entry, held)
    return {k: sorted(v.values(), key=lambda e: e.median_ms) for k, v in ranked.items()}


def export_best(measurements: Iterable[Measurement], path: str | os.PathLike[str], *, include_fp8: bool = False) -> int:
    """Merge the fastest successful config per store key of ``measurements`` into ``path``.

    Within one key the fastest measurement wins (:func:`best_entries`); against an entry
    already in the file, too (the store's ``faster`` policy).

    Args:
        measurements: any mix of GPUs, workloads and statuses.
        path: the store file (created with its directory if missing).
        include_fp8: also export fp8 configs (the runtime serves them only when
            ``FLASHTUNE_ALLOW_FP8=1``).

    Returns:
        The number of entries exported (after keeping the best per key).

    Raises:
        TypeError: an item is not a Measurement, naming its position.
    """
    entries = best_entries(measurements, include_fp8=include_fp8)
    if entries:
        Store(path).merge(entries)
    return len(entries)
