"""Workload buckets: the granularity at which the runtime stores and serves configs.

A config tuned for 4,096 tokens serves 3,000 and 4,096 alike; one tuned for head_dim
128 never serves 64 (the head dim is a compile-time constant of the kernel and changes
its shared memory). A bucket keeps what decides the best config (dtype, causal mask,
head dim, grouped-query ratio) exactly and rounds the lengths up to powers of two.

Query and key lengths are bucketed separately: decoding (one query, long cache) and
prefill (square) want different tiles even at the same key length. Beyond that, a bucket
has a class, the kernel that serves it (:data:`KINDS`): the dense op's ``decode`` when
q_len <= ``kernels.space.DECODE_MAX_Q_LEN`` (the split-KV decode kernel), ``prefill``
otherwise; the packed variable-length op's ``varlen`` (its lengths are the longest
sequence's, ``max_seqlen_q`` / ``max_seqlen_k``, and batch x KV heads counts sequences);
the paged op's ``paged`` (as ``decode``, kv_len being the block table's capacity, plus the
cache's ``page_size``, exact). The classes run different kernels with different tunables,
so they never share a config (:func:`distance` is None), nor do paged buckets of
different page sizes.

``batch_kv_heads`` is batch x *KV* heads, rounded up to a power of two: the number of
independent K/V streams. The decode kernel packs the query heads of one KV head into one
program, so its grid is batch x KV heads x splits, and the split count that fills the SMs
follows from this number; the prefill grid is batch x query heads x query blocks, which
with the exact GQA ratio of the bucket is the same information. Buckets recorded before
it existed (store format 1) carry 0: "any", served as prefill entries (see store_schema).

Pure Python: the store and the search read buckets without torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from flashtune.kernels.dtypes import DTYPE_BYTES, DTYPES
from flashtune.kernels.space import DECODE_MAX_Q_LEN, uses_decode_kernel
from flashtune.objectives.types import Workload

#: The dense op's bucket classes (store format 2 holds these only).
DENSE_KINDS = ("prefill", "decode")
#: The packed variable-length op's and the paged op's (store format 3).
PACKED_KINDS = ("varlen", "paged")
#: The bucket classes: which kernel (and which tunables) serves the bucket.
KINDS = DENSE_KINDS + PACKED_KINDS
#: ``batch_kv_heads`` of a bucket recorded before the field existed: any batch x heads.
ANY_BATCH_HEADS = 0
#: ``page_size`` of a bucket of any class but ``paged`` (no pages).
NO_PAGES = 0


# Weights of the nearest-bucket distance, in units of "one power of two of length".
# Masking changes the work per tile more than a doubling of length does; the
# grouped-query ratio mostly changes the grid, so it weighs less.
_CAUSAL_WEIGHT = 1.5
_GQA_WEIGHT = 0.5
_DTYPE_WEIGHT = 0.25
# Batch x heads changes how many programs fill the GPU, less than a length doubling does.
_BATCH_HEADS_WEIGHT = 0.5


def hash_kinds(kind: str) -> tuple[str, ...]:
    """The classes whose entries carry the same kernel source hash as ``kind``'s: the dense
    op's two share one (``kernel_source_hash``), each packed class has its own
    (``packed_source_hash``)."""
    return DENSE_KINDS if kind in DENSE_KINDS else (kind,)


def kind_of(q_len: int) -> str:
    """The class of a call with ``q_len`` queries: ``decode`` or ``prefill``."""
    return "decode" if uses_decode_kernel(q_len) else "prefill"


def pow2_bucket(n: int) -> int:
    """The smallest power of two >= ``n`` (``n`` >= 1)."""
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True, order=True)
class Bucket:
    """One cell of the store: exact dtype, mask, head dim, GQA ratio, class and page size; sizes
    rounded up.

    Attributes:
        dtype: ``float16``, ``bfloat16`` or ``float32``.
        causal: whether the mask is causal.
        head_dim: the head dimension, exact.
        gqa: query heads per key/value head.
        q_len: query length rounded up to a power of two (``varlen``: the longest sequence's).
        kv_len: key/value length rounded up to a power of two (``varlen``: the longest
            sequence's; ``paged``: the block table's capacity, pages x page size).
        kind: one of :data:`KINDS` (the kernel that serves it).
        batch_kv_heads: batch (``varlen``: sequences) x KV heads rounded up to a power of
            two; 0 for "any" (entries recorded before the field existed).
        page_size: the paged cache's page size, exact (``paged`` only; 0 otherwise).
    """

    dtype: str
    causal: bool
    head_dim: int
    gqa: int
    q_len: int
    kv_len: int
    kind: str = "prefill"
    batch_kv_heads: int = ANY_BATCH_HEADS
    page_size: int = NO_PAGES

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
        if self.kind not in KINDS:
            raise ValueError(f"Bucket.kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "decode" and self.q_len > pow2_bucket(DECODE_MAX_Q_LEN):
            raise ValueError(f"Bucket.kind 'decode' needs q_len <= {pow2_bucket(DECODE_MAX_Q_LEN)}, got q_len {self.q_len}")
        bkh = self.batch_kv_heads
        if not isinstance(bkh, int) or isinstance(bkh, bool) or bkh < 0 or bkh & (bkh - 1):
            raise ValueError(f"Bucket.batch_kv_heads must be 0 (any) or a power of two, got {bkh!r}")
        page = self.page_size
        if not isinstance(page, int) or isinstance(page, bool) or page < 0 or (page > 0) != (self.kind == "paged"):
            raise ValueError(f"Bucket.page_size must be a positive int for kind 'paged' and 0 for the others, "
                             f"got {page!r} for kind {self.kind!r}")

    @classmethod
    def of(cls, workload: Workload, kind: str | None = None, page_size: int = NO_PAGES) -> Bucket:
        """The bucket a workload falls in.

        Args:
            workload: the shapes (``varlen``: batch is the sequences, q_len and kv_len the
                longest sequence's; ``paged``: kv_len is the block table's capacity).
            kind: the class; None derives it from the query length (what the dense op
                serves). A prefill config measured at a short q_len passes ``prefill``:
                it is recorded, and never served to decode calls.
            page_size: the paged cache's page size (``paged`` only).
        """
        return cls.of_shape(
            kind=kind_of(workload.q_len) if kind is None else kind, dtype=workload.dtype, causal=workload.causal,
            head_dim=workload.head_dim, q_heads=workload.q_heads, kv_heads=workload.kv_heads,
            q_len=workload.q_len, kv_len=workload.kv_len, batch=workload.batch, page_size=page_size,
        )

    @classmethod
    def of_shape(cls, *, kind: str, dtype: str, causal: bool, head_dim: int, q_heads: int, kv_heads: int,
                 q_len: int, kv_len: int, batch: int, page_size: int = NO_PAGES) -> Bucket:
        """The bucket of a call's shape: what decides a config (dtype, mask, head dim, GQA ratio,
        class, page size) exact, the lengths and batch x KV heads rounded up to powers of two
        (a length of 0, an empty packed batch, counts as 1)."""
        return cls(
            dtype=dtype, causal=causal, head_dim=head_dim, gqa=q_heads // kv_heads,
            q_len=pow2_bucket(max(q_len, 1)), kv_len=pow2_bucket(max(kv_len, 1)), kind=kind,
            batch_kv_heads=pow2_bucket(max(batch * kv_heads, 1)), page_size=page_size,
        )

    def any_batch_heads(self) -> Bucket:
        """This bucket as a format-1 entry would record it (any batch x heads)."""
        return dataclasses.replace(self, batch_kv_heads=ANY_BATCH_HEADS)

    @property
    def name(self) -> str:
        """A readable, stable name (metric names, log lines)."""
        mask = "causal" if self.causal else "full"
        name = f"{self.dtype}_{mask}_d{self.head_dim}_g{self.gqa}_q{self.q_len}_k{self.kv_len}"
        if self.batch_kv_heads != ANY_BATCH_HEADS:
            name += f"_bh{self.batch_kv_heads}"
        if self.kind == "paged":
            return name + f"_paged_p{self.page_size}"
        return name + ("" if self.kind == "prefill" else f"_{self.kind}")

    def representative(self) -> Workload:
        """A workload of this bucket (one KV head per batch entry, batch = batch x KV heads,
        1 when any): for feasibility, defaults and re-tuning.

        Feasibility depends only on the head dim and the dtype, so any member answers
        for all of them; the decode default reads the lengths and batch x heads.
        """
        batch = max(self.batch_kv_heads, 1)
        return Workload(batch, self.gqa, 1, self.q_len, self.kv_len, self.head_dim, self.dtype, self.causal)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dtype": self.dtype, "causal": self.causal, "head_dim": self.head_dim,
            "gqa": self.gqa, "q_len": self.q_len, "kv_len": self.kv_len, "kind": self.kind,
        }
        if self.batch_kv_heads != ANY_BATCH_HEADS:
            data["batch_kv_heads"] = self.batch_kv_heads
        if self.page_size != NO_PAGES:
            data["page_size"] = self.page_size
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bucket:
        """Read a bucket; the fields of store format 1 alone mean a prefill bucket of any
        batch x heads (the compatibility rule of ``store_schema``)."""
        return cls(**data)


def distance(a: Bucket, b: Bucket) -> float | None:
    """How far apart two buckets are for sharing a config; None when they must not share.

    Buckets of different head dims, or of dtypes of different sizes, never share: their
    shared memory differs and the compiled kernel is another one. Decode and prefill
    buckets never share either: another kernel, other tunables. A bucket of any batch x
    heads (format 1) is at no batch x heads distance from any other. Paged buckets of
    different page sizes never share (the page decides the tile's block-table lookups).
    """
    if (a.head_dim != b.head_dim or DTYPE_BYTES[a.dtype] != DTYPE_BYTES[b.dtype] or a.kind != b.kind
            or a.page_size != b.page_size):
        return None
    d = abs(math.log2(a.q_len) - math.log2(b.q_len)) + abs(math.log2(a.kv_len) - math.log2(b.kv_len))
    d += _CAUSAL_WEIGHT * (a.causal != b.causal)
    d += _GQA_WEIGHT * abs(math.log2(a.gqa) - math.log2(b.gqa))
    d += _DTYPE_WEIGHT * (a.dtype != b.dtype)
    if ANY_BATCH_HEADS not in (a.batch_kv_heads, b.batch_kv_heads):
        d += _BATCH_HEADS_WEIGHT * abs(math.log2(a.batch_kv_heads) - math.log2(b.batch_kv_heads))
    return d
