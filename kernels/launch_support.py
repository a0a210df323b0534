"""What every launcher of the package's kernels shares: the exp2 constant, the GPU's SM
count, the scratch allocator of device-side tensor descriptors and the kernels' twins for
sequences of one token.

Its own module so that the prefill launcher (``attention``) and the decode launcher
(``decode``) both import it, and ``attention`` can import ``decode`` without a cycle.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import triton
from triton import knobs

from flashtune.kernels.dtypes import interpreting

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


def capturing(device: torch.device) -> bool:
    """Whether ``device``'s current stream is capturing a CUDA graph: a host read of a tensor's
    values (a check of lengths or a block table) is illegal then, so checks skip it."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


#: How a descriptor scratch buffer is made: left as it is (Triton writes every descriptor
#: before a TMA reads it), or zeroed for the sanitizer (:func:`zero_descriptor_scratch`).
_new_scratch = torch.empty


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return _new_scratch(size, dtype=torch.int8, device="cuda")


def zero_descriptor_scratch() -> None:
    """Zero every descriptor scratch buffer from now on (the sanitize child only: a memset
    per launch). Triton writes a device-side descriptor with ``tensormap.cp_fenceproxy``, a
    copy compute-sanitizer's initcheck does not follow, so it reports every TMA's read of the
    descriptor as uninitialized (4,864 errors on one config; none with the scratch zeroed,
    H100, 2026-12-06: docs/sanitizer.md)."""
    global _new_scratch
    _new_scratch = torch.zeros


def use_descriptor_scratch() -> None:
    """Device-side tensor descriptors live in a scratch buffer Triton asks for at launch."""
    triton.set_allocator(_descriptor_scratch)


#: Set to 0 to launch every prepared call (decode, Gluon prefill) through Triton's jit dispatcher.
ENV_BIND = "FLASHTUNE_BIND_LAUNCH"


def binding_enabled() -> bool:
    """Whether prepared calls launch bound kernels (``$FLASHTUNE_BIND_LAUNCH``, default on)."""
    return os.environ.get(ENV_BIND, "1").lower() not in ("0", "false", "no")


def launch_hooks_set() -> bool:
    """Whether a launch hook is set (a profiler's): bound launches skip hooks, so then the
    dispatcher, which calls them, launches instead. Triton 3.6 keeps an empty chain."""
    return any(hook is not None and bool(getattr(hook, "calls", True))
               for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


#: The prefill kernels' integer arguments that equal 1 when a sequence is one token long.
LENGTH_ARGUMENTS = ("q_len", "kv_len")


class LengthTwins:
    """A jit kernel and its twin compiled without Triton's specialization of the lengths.

    Triton compiles an integer argument equal to 1 into the kernel as a constant. A query or
    key sequence of one token then builds a kernel of its own, one nobody measured: compiled
    for sm90 (objectives/aot.py, Triton 3.6, 2026-12-03) the lean kernel's persistent
    256x32, 5-stage config asks for 483,416 B of shared memory at one key (213,080 B at 2 or
    17 keys: the H200 allows 232,448), ``lean_ws`` 128x64 at 4 stages fails its
    warp-specialization pass at one query, ``tma_ws`` 128x128 persistent its pipeliner at one
    key; each built at every other length. So a launch with a length of 1 takes a twin
    compiled without the specialization of that length (``do_not_specialize`` drops its
    multiple-of-16 hint too), which builds what a length like 17 builds (the feasibility
    model's figures); the other length keeps its hints (a decode step's 1 query x 4,096 keys),
    and every other launch keeps the specialized kernel the tables timed.
    """

    def __init__(self, kernel: Any, jit: Any = None) -> None:
        self.kernel = kernel
        self._jit = jit or triton.jit
        self._interpreted = interpreting()  # the interpreter specializes nothing
        self._twins: dict[tuple[str, ...], Any] = {}  # by the arguments equal to 1, made on first use

    def __call__(self, q_len: int, kv_len: int) -> Any:
        """The kernel to launch for these lengths."""
        if (q_len != 1 and kv_len != 1) or self._interpreted:
            return self.kernel
        ones = tuple(name for name, length in zip(LENGTH_ARGUMENTS, (q_len, kv_len)) if length == 1)
        twin = self._twins.get(ones)
        if twin is None:
            twin = self._twins[ones] = self._jit(do_not_specialize=list(ones))(self.kernel.fn)
        return twin
