"""Micro-benchmark: host time per call of the tuned op against a bare Triton launch.

For a decode shape and a prefill shape, measures host time per call, in microseconds, of

- ``lookup``: ``Dispatcher.config_for`` on a cache hit;
- ``bare_launch``: the kernel launched through Triton with everything prepared outside
  the timed loop (prefill: ``attention_forward_kernel[grid](*args, **options)`` with a
  preallocated output; decode: ``kernels.decode.launch_decode`` with a preallocated output
  and split workspace, i.e. its split and combine launches and their argument lists);
- ``launcher_op``: ``flashtune.kernels.flash_attention(..., config=cfg)`` (every check,
  allocation, launch: the direct call a user would otherwise make);
- ``runtime_op``: ``flashtune.runtime.flash_attention`` (a prepared call after the first);
- ``torch_op``: ``torch.ops.flashtune.flash_attention`` (the torch.library op);
- ``alloc_out``: ``torch.empty`` of the output alone (what every call must pay);

and reports ``runtime_op - bare_launch`` (the target: at most 5 µs). Shapes are
small so the GPU stays ahead of the host; variants are interleaved and the median of
``--repeats`` rounds is reported. Usage::

    python docs/lab/tools/bench_dispatch.py --json dispatch.json
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

import flashtune.runtime.integrations.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention
from flashtune.kernels.attention import (
    attention_forward_kernel,
    compile_options,
    kernel_arguments,
    launch_grid,
    resolve_scale,
)
from flashtune.kernels.attention import flash_attention as launcher_op
from flashtune.kernels.decode import DecodeWorkspace, launch_decode
from flashtune.kernels.dtypes import DTYPES, interpreting
from flashtune.kernels.space import kernel_of
from flashtune.runtime.dispatching.dispatch import flash_attention as runtime_op
from flashtune.runtime.dispatching.dispatch import get_dispatcher

Shape = tuple[int, int, int, int, int, int]  # batch, q_heads, kv_heads, q_len, kv_len, head_dim


def _per_call_us(fn: Callable[[], Any], iters: int, sync: Callable[[], None]) -> float:
    sync()
    began = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - began) / iters * 1e6


def _bare_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, config: Any) -> Callable[[], Any]:
    """The kernel's launch with its arguments built once (the floor the op is measured against)."""

    out = torch.empty_like(q)
    scale = resolve_scale(None, q.shape[-1])
    if kernel_of(config) == "decode":
        workspace = DecodeWorkspace.for_query(q, int(config["num_splits"]))
        return lambda: launch_decode(q, k, v, out, causal=causal, scale=scale, config=config, workspace=workspace)
    batch, q_heads, q_len, head_dim = q.shape
    grid = launch_grid(config, q_len=q_len, batch_heads=batch * q_heads, device=q.device)
    args = kernel_arguments(q, k, v, out, q, stride_q=q.stride()[:3], stride_k=k.stride()[:3], stride_v=v.stride(),
                            stride_o=out.stride()[:3], batch=batch, q_heads=q_heads, kv_heads=k.shape[1],
                            q_len=q_len, kv_len=k.shape[2], scale=scale)
    options = compile_options(config, head_dim=head_dim, causal=causal)
    return lambda: attention_forward_kernel[grid](*args, **options)


def run(*, shape: Shape, dtype: torch.dtype, causal: bool, iters: int, repeats: int, launches: bool) -> dict[str, Any]:
    """Time every variant for one shape; returns medians (µs per call) and the setup."""

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    batch, q_heads, kv_heads, q_len, kv_len, head_dim = shape
    q = torch.randn(batch, q_heads, q_len, head_dim, device=device, dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, kv_len, head_dim, device=device, dtype=dtype) for _ in range(2))
    dispatcher = get_dispatcher()
    config = dispatcher.config_for(q, k, causal)
    resolution = dispatcher.explain(q, k, causal)

    variants: dict[str, Callable[[], Any]] = {"lookup": lambda: dispatcher.config_for(q, k, causal)}
    if launches:

        op = torch.ops.flashtune.flash_attention
        variants |= {
            "bare_launch": _bare_launch(q, k, v, causal, config),
            "launcher_op": lambda: launcher_op(q, k, v, causal=causal, scale=None, config=config),
            "runtime_op": lambda: runtime_op(q, k, v, causal=causal),
            "torch_op": lambda: op(q, k, v, causal, None),
            # The output's allocation alone: the part of runtime_op - bare_launch no cache removes.
            "alloc_out": lambda: torch.empty(q.shape, dtype=q.dtype, device=q.device),
        }
    for fn in variants.values():  # warm-up: compile, resolve, prepare
        fn()
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
            "shape": dict(zip(("batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim"), shape)),
            "dtype": str(dtype).removeprefix("torch."), "causal": causal, "iters": iters, "repeats": repeats,
            "config": config.to_dict(), "origin": resolution.origin, "explain": resolution.detail,
        },
    }
    if launches:
        result["overhead_us"] = {
            "runtime_op - bare_launch": medians["runtime_op"] - medians["bare_launch"],
            "launcher_op - bare_launch": medians["launcher_op"] - medians["bare_launch"],
            "torch_op - runtime_op": medians["torch_op"] - medians["runtime_op"],
        }
    return result


def _shape(text: str) -> Shape:
    values = tuple(int(x) for x in text.split(","))
    if len(values) != 6 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected six positive integers batch,q_heads,kv_heads,q_len,kv_len,head_dim; got {text!r}")
    return values  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode", type=_shape, default=(1, 32, 8, 1, 512, 128),
                        help="decode shape batch,q_heads,kv_heads,q_len,kv_len,head_dim (small: host-bound)")
    parser.add_argument("--prefill", type=_shape, default=(1, 8, 2, 128, 128, 64), help="prefill shape, same order")
    parser.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    parser.add_argument("--iters", type=int, default=2000, help="calls per round")
    parser.add_argument("--repeats", type=int, default=7, help="rounds; the median is reported")
    parser.add_argument("--interpret", action="store_true", help="time launches under TRITON_INTERPRET (CPU; slow, indicative only)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    if args.iters < 1 or args.repeats < 1:
        parser.error("--iters and --repeats must be positive")
    launches = torch.cuda.is_available() or args.interpret
    dtype = getattr(torch, args.dtype)
    result: dict[str, Any] = {
        name: run(shape=shape, dtype=dtype, causal=True, iters=args.iters, repeats=args.repeats, launches=launches)
        for name, shape in (("decode", args.decode), ("prefill", args.prefill))
    }
    result["setup"] = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "interpreter": interpreting(),
        "python": platform.python_version(), "torch": torch.__version__,
    }
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    names = list(result["decode"]["us_per_call"])
    print(f"\n{'µs/call':<10}" + "".join(f"{n:>13}" for n in names) + f"{'op - bare':>12}")
    for case in ("decode", "prefill"):
        row = result[case]
        over = row.get("overhead_us", {}).get("runtime_op - bare_launch", float("nan"))
        print(f"{case:<10}" + "".join(f"{row['us_per_call'][n]:>13.1f}" for n in names) + f"{over:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
