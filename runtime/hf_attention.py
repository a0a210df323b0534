"""An attention function for transformers' ``AttentionInterface`` registry.

transformers calls ``fn(module, query, key, value, attention_mask, scaling=..., dropout=...,
**kwargs)`` with (batch, heads, seq, head_dim) tensors, key/value with the model's KV
heads (grouped-query is native to the kernel), and expects ``(output as (batch, seq,
heads, head_dim), attention weights or None)``.

The kernel does plain or causal (bottom-right aligned, so KV-cache decoding is right)
attention and nothing else. Whatever it cannot do (an explicit mask such as padding or
a sliding window, dropout, logit soft-capping, attention sinks, returned weights) goes
to PyTorch's SDPA, which is correct if slower; each reason warns once.
:func:`register` installs the function and sdpa's mask builder under one name, so a
model without padding gets no mask (causal via the flag) and our kernel.

transformers is imported only inside :func:`register`.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

import flashtune.runtime.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention
from flashtune.kernels.attention import SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS
from flashtune.kernels.dtypes import interpreting
from flashtune.runtime.dispatch import flash_attention as _tuned

#: Not "flashtune": transformers (5.x) treats every implementation name containing
#: "flash" as a FlashAttention build and tries to load it (from the hub for unknown names),
#: so ``set_attn_implementation("flashtune")`` raised before our function was ever called.
NAME = "tuned_attention"

#: Substrings transformers routes to its own loaders or checks instead of the registry.
_RESERVED = ("flash", "flex_attention", "sdpa", "eager", "/")

# kwargs whose presence changes the attention's result in ways the kernel cannot do.
_UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks")
_WARNED: set[str] = set()


def _fallback_reason(query: torch.Tensor, key: torch.Tensor, attention_mask: Any, dropout: float, kwargs: dict[str, Any]) -> str | None:
    if attention_mask is not None:
        return "an explicit attention mask (padding or sliding window)"
    if dropout:
        return "dropout"
    if kwargs.get("output_attentions"):
        return "output_attentions"
    for name in _UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            return name
    if query.shape[-1] not in SUPPORTED_HEAD_DIMS or query.dtype not in SUPPORTED_DTYPES:
        return f"head_dim {query.shape[-1]} / dtype {query.dtype}"
    if query.shape[-1] != key.shape[-1] or query.shape[1] % key.shape[1]:
        return "head shapes the kernel does not take"
    if query.device.type == "cpu" and not interpreting():
        return "CPU tensors without the Triton interpreter"
    return None


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, scaling: float | None, dropout: float, is_causal: bool) -> torch.Tensor:
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    # Same rule as transformers' own sdpa path: the causal flag only without a mask and
    # with more than one query (SDPA aligns its causal mask top-left).
    causal = bool(is_causal) and attention_mask is None and query.shape[2] > 1
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers-compatible attention through ``torch.ops.flashtune.flash_attention``.

    Args:
        module: the attention layer (read for ``is_causal``).
        query: (batch, heads, q_len, head_dim).
        key: (batch, kv_heads, kv_len, head_dim).
        value: like ``key``.
        attention_mask: None for "no mask beyond the causal flag"; anything else goes to SDPA.
        scaling: softmax scale (None: 1/sqrt(head_dim)).
        dropout: attention dropout probability (non-zero goes to SDPA).
        **kwargs: ``is_causal`` overrides ``module.is_causal``; others are ignored unless
            they change the result (see the module docstring).

    Returns:
        (output of shape (batch, q_len, heads, head_dim), None).
    """
    is_causal = kwargs.pop("is_causal", None)
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    reason = _fallback_reason(query, key, attention_mask, dropout, kwargs)
    if reason is not None:
        if reason not in _WARNED:
            _WARNED.add(reason)
            warnings.warn(f"flashtune attention: {reason} is not supported by the kernel; using SDPA", RuntimeWarning, stacklevel=2)
        out = _sdpa(query, key, value, attention_mask, scaling, dropout, is_causal)
    else:
        scale = None if scaling is None else float(scaling)
        if torch.compiler.is_compiling():
            # One opaque node for torch.compile (its fake implementation gives the shapes).
            out = torch.ops.flashtune.flash_attention(query, key, value, bool(is_causal), scale)
        else:
            # Eager: the runtime op directly. The torch.library dispatcher would add its own
            # per-call host time, which a decoding step (one query a layer) pays in full.
            out = _tuned(query, key, value, causal=bool(is_causal), scale=scale)
    return out.transpose(1, 2).contiguous(), None


def set_attention(model: torch.nn.Module, name: str) -> None:
    """Switch a transformers model's attention implementation (``sdpa``, ``eager``, ``name``)."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # transformers before set_attn_implementation read the config at forward time
        model.config._attn_implementation = name


def register(name: str = NAME) -> str:
    """Register :func:`attention_forward` with transformers as ``attn_implementation=name``.

    Also maps ``name`` to sdpa's mask builder, which returns no mask when none is needed
    (our kernel runs) and a real one for padding or sliding windows (SDPA runs).

    Returns:
        ``name``, for ``model.set_attn_implementation(name)`` or ``from_pretrained(..., attn_implementation=name)``.
    """
    reserved = [r for r in _RESERVED if r in name]
    if reserved:
        raise ValueError(f"attention name {name!r} contains {reserved[0]!r}: transformers would not route it "
                         f"to the registered function; pick another (default {NAME!r})")
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    except ImportError:  # transformers before the mask registry: masks come as before
        return name
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    return name
