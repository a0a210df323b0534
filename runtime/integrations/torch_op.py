"""``torch.ops.flashtune.flash_attention``: the tuned op as a ``torch.library`` custom op.

Registered so that ``torch.compile`` treats it as one opaque node (no graph break; the
fake implementation gives it shapes) and CUDA graphs capture the launch (it keeps no
device memory between calls: split workspaces are per call here): the config
lookup is host-only Python that runs during eager warm-up, and a captured graph replays
the kernel with the config it was captured with. Forward only: no autograd formula is
registered, so do not call it on inputs that need gradients for training.

Importing this module registers the op once per process.
"""

# No ``from __future__ import annotations``: torch.library infers the op's schema from
# the real annotation objects.
from typing import Optional

import torch

from flashtune.kernels.decode import TRANSIENT
from flashtune.runtime.dispatching.dispatch import flash_attention as _tuned

OP_NAME = "flashtune::flash_attention"


@torch.library.custom_op(OP_NAME, mutates_args=())
def flash_attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: Optional[float] = None,
    cache_seqlens: Optional[torch.Tensor] = None, kv_start: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The runtime's tuned attention; see :func:`flashtune.runtime.flash_attention`.

    Keeps no device memory past the call (``kernels.decode.TRANSIENT``: split workspaces
    are allocated per call), as CUDA graphs of compiled code require."""
    token = TRANSIENT.set(True)
    try:
        return _tuned(q, k, v, causal=causal, scale=scale, cache_seqlens=cache_seqlens, kv_start=kv_start)
    finally:
        TRANSIENT.reset(token)


@flash_attention_op.register_fake
def _flash_attention_fake(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: Optional[float] = None,
    cache_seqlens: Optional[torch.Tensor] = None, kv_start: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    # Same shape, dtype and device as q, contiguous: what the launcher allocates.
    return torch.empty_like(q, memory_format=torch.contiguous_format)
