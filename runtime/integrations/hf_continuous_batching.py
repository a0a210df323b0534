"""The op inside transformers' continuous batching (``generate_batch``, ``ContinuousBatchingManager``).

Continuous batching packs every scheduled request's new tokens end to end, one (1, heads,
tokens, head_dim) query with no padding between requests, and hands the attention the keys
the paged cache gathered for them (``cache.update``: each request's cached and new keys,
packed the same way), with cumulative lengths ``cu_seq_lens_q`` / ``cu_seq_lens_k`` and the
longest ``max_length_q`` / ``max_length_k``: FlashAttention's varlen layout. Prefill, chunked
prefill and decode share a step; causal attention is aligned bottom-right per request.

transformers routes a model to that layout only when its attention implementation's name
contains "flash", and then loads that name's FlashAttention functions before the first step
(``lazy_import_flash_attention``): from the flash-attn package for ``flash_attention_2/3``,
from the hub for ``org/repo`` names, and for any other name it fails. :func:`register` names
ours :data:`NAME` and hands transformers our functions for it in place of that load, so
nothing is downloaded and nothing of flash-attn is needed. :data:`NAME` has no "2" or "3"
after "flash": transformers then keeps its block-table decode path (``flash_attn_with_kvcache``)
off, and every step reaches :func:`attention_forward` with packed keys. :data:`PAGED_NAME`
opens that path on CUDA: decode-only steps then read the paged cache in place.

What the kernels cannot express (sliding windows, soft-capping, attention sinks, an
unsupported dtype or head dim) runs in PyTorch request by request, which is exact if slower;
each reason is one log line at its first call. The decision reads only shapes, dtypes and
kwargs, never tensor values, so it is the same in a captured step. Dropout while training and
returned weights raise: these functions serve inference. The kernels run with the tuned
config of their store class (``varlen``, ``paged``) for the GPU, else their default
(:mod:`flashtune.runtime.dispatching.packed`: keyed on shapes and the step's longest lengths,
no host read).

transformers is imported only inside :func:`register`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from flashtune.kernels.attention import SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS
from flashtune.kernels.dtypes import interpreting
from flashtune.runtime.dispatching.packed import flash_attention_varlen, flash_attention_with_kvcache

#: The implementation name: "flash" for transformers' continuous batching to route packed
#: batches to it, no version digit after it (see the module's docstring).
NAME = "flashtune_varlen"
#: The name that also takes transformers' block-table decode path (decode-only steps read the
#: paged cache in place, no gather): transformers opens that path only to names matching
#: "flash...2" or "flash...3" (FlashAttention 2/3's API, which our functions take) on CUDA.
PAGED_NAME = "flashtune_fa2_paged"

_LOG = logging.getLogger("flashtune.attention")
_LOGGED: set[str] = set()


def _fallback_reason(query: torch.Tensor, key: torch.Tensor, *, dropout: float, softcap: Any, window: Any,
                     sinks: Any, weights: bool) -> str | None:
    """Why these inputs go to SDPA instead of the kernel, or None."""
    if weights:
        return "attention weights requested (output_attentions)"
    if dropout:
        return f"dropout {dropout}"
    if softcap:
        return f"logit soft-capping {softcap}"
    if sinks is not None:
        return "attention sinks"
    if _window(window) is not None:
        return f"sliding window {_window(window)}"  # as transformers says it, not FlashAttention's left
    if query.dtype not in SUPPORTED_DTYPES and not interpreting(query):
        return f"dtype {query.dtype}"
    if query.shape[-1] not in SUPPORTED_HEAD_DIMS or key.shape[-1] != query.shape[-1]:
        return f"head dim {query.shape[-1]} (query) / {key.shape[-1]} (key)"
    return None


def _log_once(reason: str) -> None:
    if reason not in _LOGGED:
        _LOGGED.add(reason)
        _LOG.info("flashtune continuous batching: %s: this attention runs PyTorch's SDPA", reason)


def _window(window_size: Any) -> int | None:
    """Keys a query sees from FlashAttention's ``window_size`` (left, right) = (window - 1, 0)
    or a plain window; None for no window."""
    left = window_size[0] if isinstance(window_size, (tuple, list)) else window_size
    return None if left is None or left < 0 else left + 1


def packed_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor, *, scale: float | None, causal: bool, window: int | None = None,
                softcap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Packed attention request by request, the fallback: q (total_q, q_heads, D), k and v
    (total_k, kv_heads, D); rows past the last request (a step's padding) are zeros.

    ``window``: a query sees only the ``window`` keys up to its own position (transformers'
    sliding window), positions aligned bottom-right as the causal mask is. ``softcap`` and
    ``sinks`` (one logit a head that takes its share of the softmax and gives no value) are
    computed as transformers' eager attention does; without them, SDPA computes."""
    out = torch.zeros_like(q)
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    group = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    for (q0, q1), (k0, k1) in zip(zip(starts_q, starts_q[1:]), zip(starts_k, starts_k[1:])):
        if q1 == q0 or k1 == k0:
            continue
        offset = k1 - k0 - (q1 - q0)  # bottom-right: query i of n sees keys j <= i + (keys - n)
        distance = (offset + torch.arange(q1 - q0, device=q.device)[:, None]
                    - torch.arange(k1 - k0, device=q.device)[None, :])
        mask = torch.ones_like(distance, dtype=torch.bool)
        if causal:
            mask &= distance >= 0
        if window:
            mask &= distance < window
        rows_q = q[q0:q1].transpose(0, 1)
        rows_k, rows_v = (x[k0:k1].transpose(0, 1).repeat_interleave(group, 0) for x in (k, v))
        if softcap is None and sinks is None:
            rows = F.scaled_dot_product_attention(rows_q, rows_k, rows_v, attn_mask=mask, scale=scale)
        else:
            scores = (rows_q.float() @ rows_k.float().transpose(1, 2)) * scale
            if softcap:
                scores = torch.tanh(scores / softcap) * softcap
            scores = scores.masked_fill(~mask, float("-inf"))
            if sinks is not None:
                scores = torch.cat([scores, sinks.float().reshape(-1, 1, 1).expand(-1, q1 - q0, 1)], dim=-1)
            weights = torch.softmax(scores, dim=-1)[..., : k1 - k0]
            rows = (weights @ rows_v.float()).to(q.dtype)
        out[q0:q1] = rows.transpose(0, 1)
    return out


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                     softmax_scale: float | None = None, causal: bool = True, window_size: Any = (-1, -1),
                     softcap: float = 0.0, s_aux: Any = None, **_: Any) -> torch.Tensor:
    """FlashAttention's ``flash_attn_varlen_func`` on our kernel: q (total_q, q_heads, D), k
    and v (total_k, kv_heads, D), int32 cumulative lengths; returns (total_q, q_heads, D).
    transformers' own wrappers call it by this signature (its FlashAttention path)."""
    reason = _fallback_reason(q, k, dropout=dropout_p, softcap=softcap, window=window_size, sinks=s_aux, weights=False)
    if reason is not None:
        if dropout_p:
            raise ValueError(f"flashtune's varlen attention is for inference: it cannot compute {reason}")
        _log_once(reason)
        return packed_sdpa(q, k, v, cu_seqlens_q, cu_seqlens_k, scale=softmax_scale, causal=causal,
                           window=_window(window_size), softcap=softcap or None, sinks=s_aux)
    # Rows past the last request (a step padded for a captured graph) are left as they are,
    # as FlashAttention leaves them: transformers reads logits of real rows only.
    # transformers builds the lengths; reading them back would stall every layer of every step.
    return flash_attention_varlen(q, k, v, cu_seqlens_q.to(torch.int32), cu_seqlens_k.to(torch.int32),
                                  int(max_seqlen_q), int(max_seqlen_k), causal=causal, scale=softmax_scale,
                                  check_lengths=False)


def paged_sdpa(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None,
               v: torch.Tensor | None, *, cache_seqlens: torch.Tensor, block_table: torch.Tensor,
               scale: float | None, causal: bool, window: int | None = None, softcap: float | None = None,
               sinks: torch.Tensor | None = None) -> torch.Tensor:
    """The block-table step in PyTorch, the fallback: append ``k``/``v`` (batch, new, kv_heads,
    D) into the pages at ``cache_seqlens``, gather each sequence's keys, attend as
    :func:`packed_sdpa`. Returns (batch, seqlen_q, q_heads, D)."""
    batch, seqlen_q = q.shape[:2]
    page = k_cache.shape[1]
    new = 0 if k is None else k.shape[1]
    lengths = cache_seqlens.to(torch.long)
    if new:
        position = lengths[:, None] + torch.arange(new, device=q.device)[None, :]  # (batch, new)
        pages = block_table.to(torch.long).gather(1, position // page)
        k_cache[pages, position % page] = k
        v_cache[pages, position % page] = v
    totals = (lengths + new).tolist()
    keys, values = [], []
    for b, total in enumerate(totals):
        position = torch.arange(total, device=q.device)
        pages = block_table[b].to(torch.long)[position // page]
        keys.append(k_cache[pages, position % page])
        values.append(v_cache[pages, position % page])
    cu = lambda counts: torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)  # noqa: E731
    out = packed_sdpa(q.reshape(batch * seqlen_q, *q.shape[2:]), torch.cat(keys), torch.cat(values),
                      cu([seqlen_q] * batch), cu(totals), scale=scale, causal=causal, window=window,
                      softcap=softcap, sinks=sinks)
    return out.reshape(q.shape)


def kvcache_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None = None,
                      v: torch.Tensor | None = None, cache_seqlens: torch.Tensor | None = None,
                      block_table: torch.Tensor | None = None, softmax_scale: float | None = None,
                      causal: bool = True, window_size: Any = (-1, -1), softcap: float = 0.0, s_aux: Any = None,
                      **_: Any) -> torch.Tensor:
    """FlashAttention's ``flash_attn_with_kvcache`` on our paged kernel, by its signature:
    transformers' block-table decode path calls it with the step's new keys, the page views,
    the block table and the cached lengths. What the kernel cannot compute runs in PyTorch."""
    reason = _fallback_reason(q, k_cache, dropout=0.0, softcap=softcap, window=window_size, sinks=s_aux,
                              weights=False)
    if reason is not None:
        _log_once(reason)
        return paged_sdpa(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, block_table=block_table,
                          scale=softmax_scale, causal=causal, window=_window(window_size), softcap=softcap or None,
                          sinks=s_aux)
    # transformers builds the table and lengths (padding sequences carry -1): no host read; the
    # kernel clamps reads and skips writes outside the pool.
    return flash_attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                                        block_table=block_table, causal=causal, softmax_scale=softmax_scale,
                                        check_values=False)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      *, varlen_function: Callable[..., torch.Tensor] | None = None,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention function for :data:`NAME` and :data:`PAGED_NAME`: a continuous
    batch's step, handed to :func:`varlen_attention` (packed keys) or, with a block table, to
    :func:`kvcache_attention` (the layer's pages), which decide kernel or fallback once.

    query (1, q_heads, total_q, D), key and value (1, kv_heads, total_k, D) as the paged cache
    gathered them (with a block table: the step's new tokens); ``cu_seq_lens_q``,
    ``cu_seq_lens_k``, ``max_length_q``, ``max_length_k`` in ``kwargs``. Returns
    ((1, total_q, q_heads, D), None). ``varlen_function`` serves the packed steps in place of
    :func:`varlen_attention` (``register(varlen=...)``).

    Raises:
        ValueError: called without the packed lengths (a plain ``generate``: use
            ``hf_attention.register()``'s name there), with several rows, for training
            (dropout) or for the attention weights.
    """
    if kwargs.get("cu_seq_lens_q") is None or kwargs.get("cu_seq_lens_k") is None:
        raise ValueError(f"attention {NAME!r} serves continuous batching (generate_batch), whose steps carry "
                         "cu_seq_lens_q/cu_seq_lens_k; for generate() use flashtune.runtime.hf_attention.register()")
    if query.shape[0] != 1:
        raise ValueError(f"a continuous batch is one packed row; got a query of batch {query.shape[0]}")
    if (dropout and module.training) or kwargs.get("output_attentions"):
        what = "returned attention weights" if kwargs.get("output_attentions") else f"dropout {dropout}"
        raise ValueError(f"attention {NAME!r} serves inference: it cannot compute {what}")
    window = getattr(module, "sliding_window", None) or kwargs.get("sliding_window")
    features = dict(softmax_scale=scaling, window_size=(window - 1, 0) if window else (-1, -1),
                    softcap=kwargs.get("softcap") or 0.0, s_aux=kwargs.get("s_aux", kwargs.get("sinks")))
    if kwargs.get("block_table") is not None:
        return _block_table_step(query, key, value, kwargs, features), None
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))  # (tokens, heads, D)
    causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", True)))
    out = (varlen_function or varlen_attention)(q, k, v, kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"],
                                               kwargs["max_length_q"], kwargs["max_length_k"], causal=causal,
                                               **features)
    return out.unsqueeze(0), None


def _block_table_step(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kwargs: dict[str, Any],
                      features: dict[str, Any]) -> torch.Tensor:
    """A decode-only step on transformers' block-table path: ``key``/``value`` are the step's new
    tokens, one a request, and ``k_cache``/``v_cache`` the layer's page views. As transformers
    calls FlashAttention there: (1, heads, n, D) -> (n, 1, heads, D), cached lengths from the
    keys' cumulative lengths less the new token. Returns (1, n, q_heads, D)."""
    if kwargs.get("k_cache") is None or kwargs.get("v_cache") is None:
        raise ValueError("a block-table step needs k_cache and v_cache (transformers' PagedAttentionCache.update)")
    q, k, v = (x[0].transpose(0, 1).unsqueeze(1).contiguous() for x in (query, key, value))
    n = k.shape[0]
    cu_k = kwargs["cu_seq_lens_k"]
    cache_seqlens = (cu_k[1:n + 1] - cu_k[:n] - 1).to(torch.int32)
    out = kvcache_attention(q, kwargs["k_cache"], kwargs["v_cache"], k, v, cache_seqlens=cache_seqlens,
                            block_table=kwargs["block_table"], causal=True, **features)
    return out.reshape(1, n, *out.shape[-2:])


#: The names transformers' FlashAttention loader is told to serve, with the varlen function of each.
_OUR_NAMES: dict[str, Callable[..., torch.Tensor]] = {}
#: Of those, the names whose loader also answers the block-table function (:data:`PAGED_NAME`).
_PAGED_NAMES: set[str] = set()


def _serve_flash_loads(fa_utils: Any, name: str, *, paged: bool, varlen: Callable[..., torch.Tensor]) -> None:
    """Make transformers' FlashAttention loader (``_lazy_imports``, which
    ``lazy_import_flash_attention`` calls for a name it has not loaded last) answer ``name``
    and ``paged|name`` with our varlen function and no block-table function, and every other
    name as before. transformers asks for the plain name at ``set_attn_implementation`` and,
    where its continuous batching prefixes ``paged|`` (5.17), for the prefixed one at each step;
    its cache holds one name, so the answer must come from the loader, not a preset cache."""
    _OUR_NAMES.update({name: varlen, f"paged|{name}": varlen})
    (_PAGED_NAMES.update if paged else _PAGED_NAMES.difference_update)((name, f"paged|{name}"))
    if getattr(fa_utils._lazy_imports, "_flashtune", False):
        return
    load = fa_utils._lazy_imports

    def lazy_imports(implementation: str | None, *args: Any, **kwargs: Any) -> tuple:
        if implementation in _OUR_NAMES:
            kvcache = kvcache_attention if implementation in _PAGED_NAMES else None
            return None, _OUR_NAMES[implementation], kvcache, fa_utils._pad_input, fa_utils._unpad_input
        return load(implementation, *args, **kwargs)

    lazy_imports._flashtune = True
    fa_utils._lazy_imports = lazy_imports
    fa_utils._loaded_implementation = None  # a name loaded before is loaded again, through us


def register(name: str | None = None, *, paged: bool = False,
             varlen: Callable[..., torch.Tensor] | None = None) -> str:
    """Register :func:`attention_forward` for transformers' continuous batching as ``name``.

    Makes transformers' FlashAttention loader answer ``name`` with our :func:`varlen_attention`,
    so ``model.set_attn_implementation(name)`` needs no flash-attn and no download; registers
    ``paged|name`` too, where the installed transformers still routes continuous batching
    through its paged wrapper (which calls the loaded functions).

    Args:
        name: the implementation name; default :data:`NAME`, or :data:`PAGED_NAME` with ``paged``.
        paged: also answer transformers' block-table function (:func:`kvcache_attention`), so on
            CUDA its decode-only steps read the paged cache in place; the name must then carry
            a 2 or 3 after "flash" (transformers' gate for that path), and without one it must not.
        varlen: a function of ``flash_attn_varlen_func``'s signature (as :func:`varlen_attention`)
            that serves the packed steps instead of ours: another kernel, or a peer a benchmark
            runs through the same path (experiments/benchmarks/torch_varlen.py). Not with
            ``paged`` (the block-table function stays ours).

    Returns:
        ``name``, for ``model.set_attn_implementation(name)`` before ``generate_batch``.
    """
    if varlen is not None and paged:
        raise ValueError("register(varlen=...) serves packed steps only: the block-table function (paged=True) is ours")
    name = name or (PAGED_NAME if paged else NAME)
    versioned = "flash" in name and any(d in name.split("flash", 1)[1] for d in "23")
    if "flash" not in name or versioned != paged:
        rule = "a 2 or 3 after it" if paged else "no 2 or 3 after it"
        raise ValueError(f"continuous-batching name {name!r} must contain 'flash' with {rule} (transformers' "
                         f"routing and its block-table decode path; default {PAGED_NAME if paged else NAME!r})")
    try:
        from transformers import AttentionInterface
        from transformers import modeling_flash_attention_utils as fa_utils
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    except ImportError as exc:
        raise ImportError(f"continuous batching needs transformers >= 5.0, an extra: pip install 'flashtune[hf]' "
                          f"({exc})") from exc
    forward = attention_forward if varlen is None else functools.partial(attention_forward, varlen_function=varlen)
    AttentionInterface.register(name, forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])
    try:
        from transformers.integrations.flash_paged import paged_attention_forward
        AttentionInterface.register(f"paged|{name}", paged_attention_forward)
    except ImportError:  # a transformers without the paged wrapper calls attention_forward itself
        pass
    _serve_flash_loads(fa_utils, name, paged=paged, varlen=varlen or varlen_attention)
    return name
