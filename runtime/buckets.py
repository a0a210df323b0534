"""Workload buckets: the granularity at which the runtime stores and serves configs.

A config tuned for 4,096 tokens serves 3,000 and 4,096 alike; one tuned for head_dim
128 never serves 64 (the head dim is a compile-time constant of the kernel and changes
its shared memory). A bucket keeps what decides the best config (dtype, causal mask,
head dim, grouped-query ratio) exactly and rounds the lengths up to powers of two.

Query and key lengths are bucketed separately: decoding (one query, long cache) and
prefill (square) want different tiles even at the same key length.

Pure Python: the store and the search read buckets without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flashtune.kernels.dtypes import DTYPE_BYTES, DTYPES
from flashtune.objectives.types import Workload

#: Bytes per element, per dtype name: buckets of dtypes of one size may share configs.

# Weights of the nearest-bucket distance, in units of "one power of two of length".
# Masking changes the work per tile more than a doubling of length does; the
# grouped-query ratio mostly changes the grid, so it weighs less.
_CAUSAL_WEIGHT = 1.5
_GQA_WEIGHT = 0.5
_DTYPE_WEIGHT = 0.25


def pow2_bucket(n: int) -> int:
    """The smallest power of two >= ``n`` (``n`` >= 1)."""
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True, order=True)
class Bucket:
    """One cell of the store: exact dtype, mask, head dim and GQA ratio; lengths rounded up.

    Attributes:
        dtype: ``float16``, ``bfloat16`` or ``float32``.
        causal: whether the mask is causal.
        head_dim: the head dimension, exact.
        gqa: query heads per key/value head.
        q_len: query length rounded up to a power of two.
        kv_len: key/value length rounded up to a power of two.
    """

    dtype: str
    causal: bool
    head_dim: int
    gqa: int
    q_len: int
    kv_len: int

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"Bucket.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"Bucket.causal must be a bool, got {self.causal!r}")
        for name in ("head_dim", "gqa", "q_len", "kv_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Bucket.{name} must be a positive int, got {value!r}")
        for name in ("q_len", "kv_len"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"Bucket.{name} must be a power of two, got {value}")

    @classmethod
    def of(cls, workload: Workload) -> Bucket:
        """The bucket a workload falls in."""
        return cls(
            dtype=workload.dtype,
            causal=workload.causal,
            head_dim=workload.head_dim,
            gqa=workload.q_heads // workload.kv_heads,
            q_len=pow2_bucket(workload.q_len),
            kv_len=pow2_bucket(workload.kv_len),
        )

    @property
    def name(self) -> str:
        """A readable, stable name (metric names, log lines)."""
        mask = "causal" if self.causal else "full"
        return f"{self.dtype}_{mask}_d{self.head_dim}_g{self.gqa}_q{self.q_len}_k{self.kv_len}"

    def representative(self) -> Workload:
        """A workload of this bucket (batch 1, one KV head): for feasibility and re-tuning.

        Feasibility depends only on the head dim and the dtype, so any member answers
        for all of them.
        """
        return Workload(1, self.gqa, 1, self.q_len, self.kv_len, self.head_dim, self.dtype, self.causal)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype, "causal": self.causal, "head_dim": self.head_dim,
            "gqa": self.gqa, "q_len": self.q_len, "kv_len": self.kv_len,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bucket:
        return cls(**data)


def distance(a: Bucket, b: Bucket) -> float | None:
    """How far apart two buckets are for sharing a config; None when they must not share.

    Buckets of different head dims, or of dtypes of different sizes, never share: their
    shared memory differs and the compiled kernel is another one.
    """
    if a.head_dim != b.head_dim or DTYPE_BYTES[a.dtype] != DTYPE_BYTES[b.dtype]:
        return None
    d = abs(math.log2(a.q_len) - math.log2(b.q_len)) + abs(math.log2(a.kv_len) - math.log2(b.kv_len))
    d += _CAUSAL_WEIGHT * (a.causal != b.causal)
    d += _GQA_WEIGHT * abs(math.log2(a.gqa) - math.log2(b.gqa))
    d += _DTYPE_WEIGHT * (a.dtype != b.dtype)
    return d
