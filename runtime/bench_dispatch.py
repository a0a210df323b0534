"""Micro-benchmark: what the tuned op's config lookup costs per call.

Measures host time per call, in microseconds, of

- ``lookup``: ``Dispatcher.config_for`` on a cache hit (the whole dispatch overhead);
- ``launch``: the kernels' ``launch`` with a preallocated output (the floor);
- ``launcher_op``: ``flashtune.kernels.flash_attention(..., config=cfg)`` (validation,
  allocation, launch: the direct call a user would otherwise make);
- ``tuned_op``: ``flashtune.runtime.flash_attention`` (lookup + launcher op);
- ``torch_op``: ``torch.ops.flashtune.flash_attention`` (the torch.library op).

The launch variants need a GPU (or ``--interpret``, where the interpreter dominates and
the figures mean little). A tiny shape keeps the GPU ahead of the host, so the numbers
are host overhead; variants are interleaved and the median of ``--repeats`` rounds is
reported. Usage::

    python -m flashtune.runtime.bench_dispatch --json dispatch.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from flashtune.kernels.dtypes import DTYPES, interpreting


def _per_call_us(fn: Callable[[], Any], iters: int, sync: Callable[[], None]) -> float:
    sync()
    began = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - began) / iters * 1e6


def run(*, shape: tuple[int, int, int, int], dtype: torch.dtype, causal: bool, iters: int, repeats: int, launches: bool) -> dict[str, Any]:
    """Time every variant; returns medians (µs per call) and the setup."""
    # After main() set TRITON_INTERPRET from --interpret: Triton reads it when the kernels load.
    from flashtune.kernels.attention import flash_attention as launcher_op, launch, resolve_scale
    from flashtune.runtime.dispatch import Dispatcher, flash_attention as tuned_op, get_dispatcher

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    batch, heads, seq, head_dim = shape
    q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    dispatcher = get_dispatcher()
    config = dispatcher.config_for(q, k, causal)
    resolution = dispatcher.explain(q, k, causal)
    out = torch.empty_like(q)
    scale = resolve_scale(None, head_dim)

    variants: dict[str, Callable[[], Any]] = {"lookup": lambda: dispatcher.config_for(q, k, causal)}
    if launches:
        import flashtune.runtime.torch_op  # noqa: F401 - registers the op

        op = torch.ops.flashtune.flash_attention
        variants |= {
            "launch": lambda: launch(q, k, v, out, causal=causal, scale=scale, config=config),
            "launcher_op": lambda: launcher_op(q, k, v, causal=causal, scale=None, config=config),
            "tuned_op": lambda: tuned_op(q, k, v, causal=causal),
            "torch_op": lambda: op(q, k, v, causal, None),
        }
    for fn in variants.values():  # warm-up: compile, resolve, fill caches
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            n = iters if name == "lookup" or cuda else max(1, iters // 1000)
            samples[name].append(_per_call_us(fn, n, sync))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    result: dict[str, Any] = {
        "us_per_call": medians,
        "spread_us": {name: [min(v), max(v)] for name, v in samples.items()},
        "setup": {
            "shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "causal": causal,
            "iters": iters, "repeats": repeats, "device": torch.cuda.get_device_name() if cuda else "cpu",
            "interpreter": interpreting(),
            "config": config.to_dict(), "origin": resolution.origin, "store": str(dispatcher.store.path),
            "python": platform.python_version(), "torch": torch.__version__,
        },
    }
    if launches:
        result["overhead_us"] = {
            "tuned_op - launcher_op": medians["tuned_op"] - medians["launcher_op"],
            "tuned_op - launch": medians["tuned_op"] - medians["launch"],
            "torch_op - tuned_op": medians["torch_op"] - medians["tuned_op"],
        }
    assert isinstance(dispatcher, Dispatcher)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="1,1,128,64", help="batch,heads,seq,head_dim (default tiny: host-bound)")
    parser.add_argument("--dtype", default="float16", choices=list(DTYPES))
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--iters", type=int, default=2000, help="calls per round")
    parser.add_argument("--repeats", type=int, default=7, help="rounds; the median is reported")
    parser.add_argument("--interpret", action="store_true", help="time launches under TRITON_INTERPRET (CPU; slow, indicative only)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    try:
        shape = tuple(int(x) for x in args.shape.split(","))
        if len(shape) != 4:
            raise ValueError
    except ValueError:
        parser.error(f"--shape must be four integers, got {args.shape!r}")
    if args.iters < 1 or args.repeats < 1:
        parser.error("--iters and --repeats must be positive")
    launches = torch.cuda.is_available() or args.interpret
    result = run(shape=shape, dtype=getattr(torch, args.dtype), causal=args.causal, iters=args.iters, repeats=args.repeats, launches=launches)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
