"""What every launcher of the package's kernels shares: the exp2 constant, the GPU's SM
count and the scratch allocator of device-side tensor descriptors.

Its own module so that the prefill launcher (``attention``) and the decode launcher
(``decode``) both import it, and ``attention`` can import ``decode`` without a cycle.
"""

from __future__ import annotations

import functools

import torch
import triton

#: log2(e): the kernels compute softmax with exp2, the scale folded into qk.
LOG2_E = 1.4426950408889634


@functools.lru_cache(maxsize=None)
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index``. Cached: it is read on the op's
    hot path, whose per-call host time is measured (BENCHMARKS.md, "Runtime")."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def device_sm_count(device: torch.device) -> int:
    """:func:`sm_count` of a torch CUDA device (its index, or the current device's)."""
    return sm_count(device.index if device.index is not None else torch.cuda.current_device())


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def use_descriptor_scratch() -> None:
    """Device-side tensor descriptors live in a scratch buffer Triton asks for at launch."""
    triton.set_allocator(_descriptor_scratch)
