"""Host cost of one static-cache decode step's eager mask build: what
``generate(cache_implementation="static")`` runs before each compiled step, outside it.

Three builds of the same step (batch b, a cache of ``--capacity`` slots, ``--filled`` of them
filled, the last sequence left-padded): our builder continuing the last checked mask (the
chain: no holes check, the first keys and the end), our full build (ranges and the holes check, a host
read: one ``.tolist()``, which no aten op shows), and transformers' ``sdpa_mask`` (what
SDPA's static step gets). Per build: aten ops (views included; the others launch kernels on a
GPU) and aten host reads (``_local_scalar_dense``), and CPU us (median of 7 x 200).
On CPU tensors the reads cost no wait for a GPU: there each read also waits for the queue.

Usage::

    python docs/lab/tools/bench_mask_build.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from flashtune.runtime.integrations import hf_attention


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def builds(batch: int, capacity: int, filled: int) -> dict[str, Callable[[], Any]]:
    """The three builds of one decode step (see the module doc), each a call."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    mask = torch.ones(batch, filled, dtype=torch.bool)
    mask[batch - 1, : filled // 16] = False
    grown = torch.cat([mask, torch.ones(batch, 1, dtype=torch.bool)], 1)
    offset = torch.tensor(filled)

    def step() -> Any:
        return hf_attention.key_range_mask(batch, q_length=1, kv_length=capacity, q_offset=offset, attention_mask=grown)

    def chained() -> Any:  # the chain as the previous step left it (no op of its own)
        hf_attention._start_chain(mask, batch, capacity)
        return step()

    def full() -> Any:
        hf_attention._start_chain(None)
        return step()

    def sdpa() -> Any:
        return sdpa_mask(batch_size=batch, q_length=1, kv_length=capacity, q_offset=offset, kv_offset=0,
                         mask_function=causal_mask_function, attention_mask=grown)

    return {"our chain": chained, "our full build": full, "transformers sdpa_mask": sdpa}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=544)
    parser.add_argument("--filled", type=int, default=520)
    args = parser.parse_args(argv)
    if not 0 < args.filled < args.capacity:
        parser.error(f"--filled must be in (0, --capacity), got {args.filled} of {args.capacity}")
    torch.set_num_threads(1)
    for batch in (1, 8):
        for label, build in builds(batch, args.capacity, args.filled).items():
            with _Ops() as counted:
                build()
            ops = counted.ops
            for _ in range(50):
                build()
            runs = []
            for _ in range(7):
                began = time.perf_counter()
                for _ in range(200):
                    build()
                runs.append((time.perf_counter() - began) / 200 * 1e6)
            reads = sum("_local_scalar_dense" in op for op in ops)
            print(f"B{batch} {label:<24} {len(ops):>3} aten ops, {reads} aten reads, {statistics.median(runs):7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
