"""The tuned packed ops: the varlen and paged kernels with the store's config for their class.

``flash_attention_varlen`` and ``flash_attention_with_kvcache`` here take the kernels'
arguments (kernels/varlen.py, kernels/paged.py). Without a ``config`` they serve the store's
entry for the call's ``varlen`` / ``paged`` bucket on the running GPU through the dense op's
fallback chain (exact bucket, nearest bucket of the class, another GPU of the architecture;
:mod:`flashtune.runtime.dispatching.resolve`), each entry checked against its kernel's own
space (``validate_varlen_config`` / ``validate_paged_config``, when the store reads it) and
the GPU's limits; else the kernel's own default, as the kernels' functions run it. A dense
prefill or decode entry never serves them, nor theirs a dense call (the classes never share).

As the dense op: the first call of a (device, bucket) resolves on the host (the store file
is read once) and the process's dispatcher keeps the answer (:func:`set_store`,
:func:`reload_store` and :func:`set_hardware` forget it); every later call builds its key from
shapes, dtypes and the ints the caller passes (``max_seqlen_q`` / ``max_seqlen_k``, the block
table's width), never from tensor values, so resolving adds no host synchronization and
nothing inside a captured CUDA graph or a compiled region but a dictionary read (a step
captured with a bucket not yet seen resolves during the capture, on the host). A served
config that fails to launch where the default runs is replaced by the default, with one
warning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from flashtune.kernels.config import Config, Value
from flashtune.kernels.paged import default_paged_config
from flashtune.kernels.paged import flash_attention_with_kvcache as _paged_launcher
from flashtune.kernels.space import VARLEN_DEFAULT
from flashtune.kernels.varlen import flash_attention_varlen as _varlen_launcher
from flashtune.runtime.dispatching.dispatch import _DTYPE_NAMES, STORE_ORIGINS, get_dispatcher
from flashtune.runtime.dispatching.resolve import Resolution
from flashtune.runtime.storage.buckets import NO_PAGES, Bucket, pow2_bucket

#: A packed call's key: (device, kind, dtype, causal, q_heads, kv_heads, head_dim, q_len
#: bucket, kv_len bucket, batch x KV heads bucket, page size): one per store bucket and device.
PackedKey = tuple[Any, ...]


def varlen_key(q: torch.Tensor, k: torch.Tensor, cu_seqlens_q: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
               causal: bool) -> PackedKey:
    """The key of a varlen call: shapes and the longest sequence's lengths as the caller gives
    them (``cu_seqlens_q``'s length, never its values); raises (any error) on inputs that are
    not packed attention inputs."""
    for length in (max_seqlen_q, max_seqlen_k):
        if not isinstance(length, int) or isinstance(length, bool):  # a tensor's int() would synchronize
            raise TypeError("max_seqlen_q and max_seqlen_k must be ints")
    kv_heads = k.shape[1]
    return (q.device, "varlen", q.dtype, causal, q.shape[1], kv_heads, q.shape[2],
            pow2_bucket(max(max_seqlen_q, 1)), pow2_bucket(max(max_seqlen_k, 1)),
            pow2_bucket(max((cu_seqlens_q.numel() - 1) * kv_heads, 1)), NO_PAGES)


def paged_key(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, causal: bool) -> PackedKey:
    """The key of a paged call: as a dense decode call's, kv_len the block table's capacity
    (pages x page size: the lengths are not read), plus the page size."""
    batch, q_len, q_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    return (q.device, "paged", q.dtype, causal, q_heads, kv_heads, head_dim, pow2_bucket(max(q_len, 1)),
            pow2_bucket(max(block_table.shape[1] * page_size, 1)), pow2_bucket(max(batch * kv_heads, 1)), page_size)


def bucket_of(key: PackedKey) -> Bucket:
    """The store bucket of a packed key (its sizes already rounded as :meth:`Bucket.of_shape` does)."""
    _, kind, dtype, causal, q_heads, kv_heads, head_dim, q_len, kv_len, batch_kv_heads, page_size = key
    return Bucket(_DTYPE_NAMES[dtype], causal, head_dim, q_heads // kv_heads, q_len, kv_len, kind, batch_kv_heads,
                  page_size)


def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *, causal: bool = False,
                           scale: float | None = None, config: Mapping[str, Value] | None = None,
                           check_lengths: bool = True) -> torch.Tensor:
    """:func:`flashtune.kernels.flash_attention_varlen` with the tuned config of its ``varlen``
    bucket when ``config`` is None (see the module); the arguments and errors are the kernel's."""
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = dict(causal=causal, scale=scale, check_lengths=check_lengths)
    if config is not None:
        return _varlen_launcher(*args, config=config, **options)
    try:
        key = varlen_key(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, causal)
        resolution = get_dispatcher().packed_resolution(key, bucket_of)
    except Exception:  # not varlen inputs: the launcher raises the error naming the argument
        return _varlen_launcher(*args, config=None, **options)
    if resolution.config == VARLEN_DEFAULT:
        return _varlen_launcher(*args, config=resolution.config, **options)
    try:  # a store entry or the architecture's tile: the safe default if it cannot launch here
        return _varlen_launcher(*args, config=resolution.config, **options)
    except Exception as exc:
        out = _varlen_launcher(*args, config=None, **options)  # bad inputs raise here, naming the argument
        get_dispatcher().packed_failed(key, resolution, VARLEN_DEFAULT, exc)
        return out


def flash_attention_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                 k: torch.Tensor | None = None, v: torch.Tensor | None = None, *,
                                 cache_seqlens: torch.Tensor, block_table: torch.Tensor, causal: bool = True,
                                 softmax_scale: float | None = None, config: Mapping[str, Value] | None = None,
                                 check_values: bool = True) -> torch.Tensor:
    """:func:`flashtune.kernels.flash_attention_with_kvcache` with the tuned config of its
    ``paged`` bucket when ``config`` is None (see the module); without a store entry, the
    kernel's default for the call's exact shape. The arguments and errors are the kernel's."""
    options = dict(cache_seqlens=cache_seqlens, block_table=block_table, causal=causal,
                   softmax_scale=softmax_scale, check_values=check_values)
    if config is not None:
        return _paged_launcher(q, k_cache, v_cache, k, v, config=config, **options)
    try:
        key = paged_key(q, k_cache, block_table, causal)
        resolution = get_dispatcher().packed_resolution(key, bucket_of)
    except Exception:  # not paged inputs: the launcher raises the error naming the argument
        return _paged_launcher(q, k_cache, v_cache, k, v, config=None, **options)
    if resolution.origin not in STORE_ORIGINS:
        return _paged_launcher(q, k_cache, v_cache, k, v, config=None, **options)
    try:
        return _paged_launcher(q, k_cache, v_cache, k, v, config=resolution.config, **options)
    except Exception as exc:
        # The default after a failed launch: the append, if it ran, wrote the same keys to the same slots.
        out = _paged_launcher(q, k_cache, v_cache, k, v, config=None, **options)
        get_dispatcher().packed_failed(key, resolution, _paged_default(q, k_cache, block_table), exc)
        return out


def _paged_default(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor) -> Config:
    """The paged kernel's default for this call's exact shape (what it runs without a config)."""
    batch, q_len, q_heads, head_dim = q.shape
    return default_paged_config(batch=batch, q_heads=q_heads, kv_heads=k_cache.shape[2], q_len=q_len,
                                capacity=block_table.shape[1] * k_cache.shape[1], head_dim=head_dim, device=q.device)


def explain_varlen(q: torch.Tensor, k: torch.Tensor, cu_seqlens_q: torch.Tensor, max_seqlen_q: int,
                   max_seqlen_k: int, *, causal: bool = False) -> Resolution:
    """Which config :func:`flash_attention_varlen` runs for these inputs (without a config), and why."""
    return get_dispatcher().packed_resolution(varlen_key(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, causal),
                                              bucket_of)


def explain_paged(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, *,
                  causal: bool = True) -> Resolution:
    """Which config :func:`flash_attention_with_kvcache` runs for these inputs (without a
    config), and why; without a store entry, the kernel's default for this exact shape."""
    resolution = get_dispatcher().packed_resolution(paged_key(q, k_cache, block_table, causal), bucket_of)
    if resolution.origin in STORE_ORIGINS:
        return resolution
    return dataclasses.replace(resolution, config=_paged_default(q, k_cache, block_table))
