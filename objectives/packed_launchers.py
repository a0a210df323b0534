"""Launchers of the packed kernels with the dense launcher's signature, for the worker.

``launch(q, k, v, out, *, causal, scale, config)`` on dense (batch, heads, len, head_dim)
inputs, as objectives/bench.py ``measure`` calls the dense op's: each lays the inputs out
as its packed kernel reads them, runs the kernel and leaves the result in ``out``, dense,
so that ``measure``'s float32 reference and relative-error check apply unchanged.

- varlen (kernels/varlen.py ``launch_varlen``): the batch's sequences end to end, all of
  the workload's lengths (``cu_seqlens`` of equal steps); the kernel writes a packed output,
  copied into ``out``.
- paged (kernels/paged.py ``launch_paged``): K and V laid into pages of the row's
  ``page_size``, in a shuffled page order, so that every tile goes through the block table;
  every sequence holds the workload's kv_len keys in ``ceil(kv_len / page_size)`` pages (the
  last one partly filled, its other slots NaN: a kernel that read past a sequence's keys
  would give a wrong result). q and out are read and written in place through strides.

The packed layout is built once per inputs and kept for the calls that time them: a
timed call is the kernel (varlen: plus one copy of the output into the dense layout, the
same for every config of a workload, so the ranking the store keeps is the kernel's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton

from flashtune.kernels.config import Config
from flashtune.kernels.paged import check_paged_inputs, launch_paged
from flashtune.kernels.space import PAGE_SIZE_KEY, validate_paged_config, validate_varlen_config
from flashtune.kernels.varlen import check_varlen_inputs, launch_varlen

#: Seeds the page order of the paged layout (the same table for every config of a workload).
PAGE_ORDER_SEED = 0

# The last inputs' packed layout: (the dense tensors and their versions, the layout's key), layout.
_LAYOUT: dict[str, Any] = {}


def _layout_of(tensors: tuple[torch.Tensor, ...], key: tuple, build: Callable[[], Any]) -> Any:
    """The packed layout of ``tensors`` (built by ``build``), kept while they are the same
    tensors, unwritten (their version counters), under the same ``key``. The tensors are
    held, not their addresses: a freed tensor's address may come back with other values."""
    held = _LAYOUT.get("tensors")
    versions = tuple(t._version for t in tensors)
    if (held is None or len(held) != len(tensors) or any(a is not b for a, b in zip(held, tensors))
            or _LAYOUT["versions"] != versions or _LAYOUT["key"] != key):
        _LAYOUT.clear()  # the old layout goes before the new one is built: one in memory at a time
        _LAYOUT.update(tensors=tensors, versions=versions, key=key, layout=build())
    return _LAYOUT["layout"]


def _packed(t: torch.Tensor) -> torch.Tensor:
    """(batch, heads, len, head_dim) as (batch x len, heads, head_dim): sequences end to end."""
    return t.transpose(1, 2).reshape(-1, t.shape[1], t.shape[3])


def _cu_seqlens(batch: int, length: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=device)


def _varlen_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    batch, q_len, kv_len = q.shape[0], q.shape[2], k.shape[2]
    pq, pk, pv = _packed(q), _packed(k), _packed(v)
    check_varlen_inputs(pq, pk, pv)
    # The packed output poisoned, as ``measure`` poisons ``out``: a row the kernel leaves unwritten
    # is NaN in the check, never a value left in recycled memory.
    pout = torch.full_like(pq, float("nan"))
    return pq, pk, pv, pout, _cu_seqlens(batch, q_len, q.device), _cu_seqlens(batch, kv_len, q.device)


def launch_varlen_dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool,
                        scale: float, config: Config) -> Any:
    """The varlen kernel on dense inputs (see the module); returns Triton's compiled kernel."""
    tile = validate_varlen_config(config)
    pq, pk, pv, pout, cu_q, cu_k = _layout_of((q, k, v), ("varlen",), lambda: _varlen_layout(q, k, v))
    handle = launch_varlen(pq, pk, pv, pout, cu_q, cu_k, q.shape[2], causal=causal, scale=scale, config=tile)
    out.copy_(pout.view(q.shape[0], q.shape[2], q.shape[1], q.shape[3]).transpose(1, 2))
    return handle


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(batch, heads, len, head_dim) as the paged kernel's (batch, len, heads, head_dim), a view."""
    return t.transpose(1, 2)


def _paged_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, page_size: int) -> tuple[torch.Tensor, ...]:
    """k and v in a pool of pages of ``page_size`` (batch x ceil(kv_len / page_size), shuffled),
    each sequence's cached lengths and its block table, checked against q as the op checks them."""
    batch, kv_heads, kv_len, head_dim = k.shape
    pages = triton.cdiv(kv_len, page_size)
    order = torch.randperm(batch * pages, generator=torch.Generator().manual_seed(PAGE_ORDER_SEED))
    table = order.to(dtype=torch.int32, device=k.device).view(batch, pages)
    caches = []
    for t in (k, v):
        # (batch, pages x page_size, kv_heads, head_dim): slots past kv_len are NaN.
        slots = torch.full((batch, pages * page_size, kv_heads, head_dim), float("nan"), dtype=t.dtype, device=t.device)
        slots[:, :kv_len] = _rows(t)
        cache = torch.empty((batch * pages, page_size, kv_heads, head_dim), dtype=t.dtype, device=t.device)
        cache[table.view(-1).long()] = slots.view(batch * pages, page_size, kv_heads, head_dim)
        caches.append(cache)
    seqlens = torch.full((batch,), kv_len, dtype=torch.int32, device=k.device)
    check_paged_inputs(_rows(q), caches[0], caches[1], None, None, seqlens, table)
    return caches[0], caches[1], seqlens, table


def launch_paged_dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool,
                       scale: float, config: Config) -> None:
    """The paged kernel on dense inputs (see the module); the row's config names the page size."""
    page_size = config[PAGE_SIZE_KEY]
    tile = validate_paged_config({name: value for name, value in config.items() if name != PAGE_SIZE_KEY})
    k_cache, v_cache, seqlens, table = _layout_of((q, k, v), ("paged", page_size),
                                                  lambda: _paged_layout(q, k, v, page_size))
    # q and out through strides, in place: the kernel reads and writes any (batch, position, head) strides.
    launch_paged(_rows(q), k_cache, v_cache, None, None, _rows(out), seqlens, table, causal=causal, scale=scale,
                 config=tile)
