"""Helpers of the runtime tests (imported by the test modules; fixtures are in conftest)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from flashtune.kernels.config import Config
from flashtune.kernels.space import validate_config
from flashtune.objectives.hardware import HardwareSpec
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import StoreEntry, StoreWarning, source_hash_of, triton_version


def cfg(block_m: int, block_n: int, warps: int, stages: int) -> Config:
    """A complete config of the kernel's space (implied knobs filled in)."""
    return validate_config(Config(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages))


def entry(spec: HardwareSpec, bucket: Bucket, config: Config, median_ms: float | None = 1.0, **kw) -> StoreEntry:
    """A store entry for ``spec`` with the current kernel (of the bucket's class) and Triton
    unless overridden."""
    values = {
        "fingerprint": spec.fingerprint, "kernel_hash": source_hash_of(bucket.kind), "triton": triton_version(),
        "bucket": bucket, "config": config, "hardware": spec.name, "median_ms": median_ms,
    }
    values.update(kw)
    return StoreEntry(**values)


class Recorder:
    """Stands in for the kernels' launcher: records configs, returns an output-shaped tensor."""

    def __init__(self) -> None:
        self.configs: list[Config] = []

    def __call__(self, q, k, v, *, causal=False, scale=None, config=None):
        self.configs.append(config)
        return torch.empty_like(q)


@contextmanager
def store_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Collect the StoreWarnings issued inside the block (filled when it exits).

    Python's own once-per-location filter is switched off, so the count is the store's.
    """
    found: list[warnings.WarningMessage] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    found.extend(w for w in caught if issubclass(w.category, StoreWarning))
